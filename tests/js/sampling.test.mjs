// The page's sampler draws Python's tokens: Mulberry32, draw, the filters and
// choose of web/sampling.mjs against aiayn.decoding.seeded and aiayn.decoding.search, on the
// cases tests/test_sampling_js.py writes from the Python. No model needed.
import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {test} from 'node:test';
import {Mulberry32, checkSampling, checkSeed, choose, filterTopK, filterTopP, typed}
  from '../../src/aiayn/web/sampling.mjs';

const cases = JSON.parse(readFileSync(
    new URL('./sampling.cases.json', import.meta.url), 'utf-8'));

test('Mulberry32 gives Python\'s numbers for every seed', () => {
  for (const [seed, expected] of Object.entries(cases.streams)) {
    const random = new Mulberry32(Number(seed));
    assert.deepEqual(expected.map(() => random.next() * 2 ** 32), expected, seed);
  }
});

test('choose draws Python\'s tokens under every setting', () => {
  assert.ok(cases.draws.length >= 10);
  for (const c of cases.draws) {
    const random = new Mulberry32(c.seed);
    const options = {temperature: c.temperature, topK: c.top_k, topP: c.top_p};
    const ids = c.logits.map(row => choose(row, options, random).id);
    assert.deepEqual(ids, c.ids, JSON.stringify(options));
  }
});

test('the filters keep what Python keeps', () => {
  const logits = [0.5, 3, -1, 3, 2];
  assert.deepEqual([...filterTopK(logits, 2)], [-Infinity, 3, -Infinity, 3, -Infinity]);
  assert.deepEqual([...filterTopK(logits, 9)], logits);
  // softmax of [3, 3, 2, 0.5, -1]: 0.4, 0.4, 0.15, ...: 0.5 keeps two, 0.85 three
  assert.equal(filterTopP(logits, 0.5).filter(isFinite).length, 2);
  assert.equal(filterTopP(logits, 0.85).filter(isFinite).length, 3);
  assert.equal(filterTopP(logits, 1e-9).filter(isFinite).length, 1);
});

test('bad settings are refused with Python\'s messages, in the reader\'s words', () => {
  assert.ok(cases.refusals.length >= 10);
  const number = x => (x === 'Infinity' ? Infinity : x);  // JSON has no infinity
  for (const c of cases.refusals) {
    const settings = {temperature: number(c.temperature), topK: c.top_k, topP: c.top_p};
    assert.throws(() => { checkSampling(settings); new Mulberry32(c.seed); }, {message: c.message},
      JSON.stringify(c));
  }
  // the page reads an empty field as null; a field that is not a number, NaN: as Python's None and nan
  assert.throws(() => checkSampling({temperature: NaN}), /\(got not a number\)$/);
  assert.throws(() => checkSeed(NaN), /\(got not a number\)$/);
  assert.equal(typed(4294967296), '4,294,967,296');
  assert.doesNotThrow(() => checkSampling({temperature: 0.7, topK: 5, topP: 0.9}));
  assert.doesNotThrow(() => checkSeed(4294967295));
});
