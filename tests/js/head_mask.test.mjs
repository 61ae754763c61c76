// The head mask on the page (issue 44): translator.mjs's maskedBleu gives
// what aiayn.export.scores.masked_bleu gives on the float32 graphs, the
// same English sentence by sentence and the same sacreBLEU, for all ones and
// masks that change the English; a mask the graphs cannot use is refused
// with Python's words.
import assert from 'node:assert/strict';
import {test} from 'node:test';
import * as tr from '../../src/aiayn/web/translator.mjs';
import {cases, loadModel, settings, vocab} from './exported.mjs';

const model = await loadModel('fp32');
const {head_masks: masked} = cases;

test('the graphs declare the mask\'s shape, (3, N, h)', () => {
  assert.deepEqual(model.headMaskShape, masked.shape);
});

test('float32: maskedBleu gives Python\'s English and BLEU for each mask',
    async (t) => {
      const every = masked.fp32['all ones'];
      for (const [name, mask] of Object.entries(masked.masks)) {
        const told = [];
        const got = await tr.maskedBleu(model, vocab, settings, masked.pairs,
            mask, (k) => told.push(k));
        const expected = masked.fp32[name];
        assert.deepEqual(got.hypotheses, expected.hypotheses, name);
        assert.ok(Math.abs(got.bleu - expected.bleu) < 1e-9,
            `${name}: ${got.bleu} against Python's ${expected.bleu}`);
        assert.deepEqual(told, masked.pairs.map((_, i) => i + 1));
        const changed = got.hypotheses.filter(
            (h, i) => h !== every.hypotheses[i]).length;
        if (name !== 'all ones') assert.ok(changed > 0, name);
        t.diagnostic(`${name}: BLEU ${got.bleu.toFixed(2)}, ${changed} of ` +
            `${got.hypotheses.length} sentences changed`);
      }
    });

test('null and all ones give the same English', async () => {
  const [german] = masked.pairs[0];
  const ids = tr.sourceIds(vocab, german, settings.max_len);
  const limit = tr.outputLimit(ids.length, settings);
  const every = await tr.greedy(model, vocab, ids, limit);
  const ones = await tr.greedy(model, vocab, ids, limit, null,
      masked.masks['all ones']);
  assert.deepEqual(ones, every);
});

test('a bad mask is refused with Python\'s words', async () => {
  for (const {mask, error} of masked.bad) {
    assert.throws(() => model.heads(mask), (err) => {
      assert.ok(err instanceof RangeError);
      // Python reads ragged lists and text as one odd object, JS says more
      const prefix = 'head_mask: expected (3, 3, 8) numbers 0 and 1, got ';
      if (error.includes('got list') || error.includes('got str')) {
        assert.ok(err.message.startsWith(prefix), err.message);
      } else {
        assert.equal(err.message, error);
      }
      return true;
    }, JSON.stringify(mask).slice(0, 60));
  }
  const ones = masked.masks['all ones'];
  for (const odd of [NaN, Infinity]) {
    const mask = structuredClone(ones);
    mask[1][2][3] = odd;
    assert.throws(() => model.heads(mask), {message:
      'head_mask: expected (3, 3, 8) numbers 0 and 1, got a value that is ' +
      'not finite'});
  }
  const text = structuredClone(ones);
  text[0][0][0] = '1';
  assert.throws(() => model.heads(text), RangeError);
  const [german] = masked.pairs[0];
  const ids = tr.sourceIds(vocab, german, settings.max_len);
  await assert.rejects(tr.greedy(model, vocab, ids, 5, null, [[1]]),
      RangeError);
  await assert.rejects(tr.maskedBleu(model, vocab, settings, masked.pairs,
      'all'), RangeError);
});
