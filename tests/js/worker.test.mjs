// The worker's check of a sentence (worker.mjs, what the page shows before
// any search): blank, unknown and over-long input each get their message,
// and a sentence as readers type it gets the ids of its normalised text.
import assert from 'node:assert/strict';
import {test} from 'node:test';
import {normalise, sourceIds} from '../../src/aiayn/web/translator.mjs';
import {checkSentence, checkSettings} from '../../src/aiayn/web/worker.mjs';
import {settings, vocab} from './exported.mjs';

const problem = (text) => checkSentence(vocab, settings, text).problem;

test('checkSentence refuses blank, unknown and over-long input', () => {
  for (const blank of ['', '   ', '\t\n', '\u00a0', '\u200b\u2060\ufeff']) {
    assert.equal(problem(blank), 'Type a German sentence first.',
        JSON.stringify(blank));
  }
  assert.match(problem('\u{1f600}\u{1f389}'), /^Nothing to translate/);
  const tooLong = Array(40).fill('Ein Hund läuft über die Wiese.').join(' ');
  assert.match(problem(tooLong), /the model reads at most 256\. Shorten it/);
  assert.match(problem('Hund '.repeat(5000)),
      /characters, at least \d+ pieces, and the model reads at most 256/);
});

test('checkSentence gives the ids of the normalised sentence', () => {
  const typed = '  Zwei Ma\u0308dchen \t u\u0308berqueren\n die Bru\u0308cke. ';
  const {ids} = checkSentence(vocab, settings, typed);
  assert.equal(normalise(typed), 'Zwei Mädchen überqueren die Brücke.');
  assert.deepEqual(ids, sourceIds(vocab, 'Zwei Mädchen überqueren die Brücke.',
      settings.max_len));
});

test('checkSettings says, as a sentence, what the reader typed wrong in the sampling fields', () => {
  const ok = {temperature: 1, topK: null, topP: 0.9, seed: 1};
  assert.equal(checkSettings(ok), null);
  assert.equal(checkSettings({...ok, temperature: 0}),
      'The temperature must be a number above 0, such as 0.7 or 1.5 (got 0).');
  assert.equal(checkSettings({...ok, temperature: null}),
      'The temperature must be a number above 0, such as 0.7 or 1.5 (got nothing).');
  assert.equal(checkSettings({...ok, seed: -1}),
      'The seed must be a whole number from 0 to 4,294,967,295 (got -1).');
  assert.match(checkSettings({...ok, topP: 1.5}), /^Top-p must be a number above 0 and at most 1, /);
});
