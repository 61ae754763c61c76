// The page's BLEU (src/aiayn/web/bleu.mjs) is aiayn.bleu's, function by
// function, on the cases Python wrote (tests/test_web_bleu.py): odd text, the
// traps of chapter 9, and the published model's own translations.
import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {test} from 'node:test';
import {brevityPenalty, closestRefLen, geometricMean, ngrams, score,
  sentenceBleu, sentenceStats, smoothedPrecisions,
  tokenize13a} from '../../src/aiayn/web/bleu.mjs';

const {cases, scores, whitespace, brevity_penalties: penalties,
  smoothed_precisions: smoothed, geometric_means: means} = JSON.parse(readFileSync(
    new URL('./bleu.cases.json', import.meta.url), 'utf-8'));

// Math.exp and Math.log may differ from C's libm in the last bit
const close = (a, b) => Math.abs(a - b) <= 1e-12 * Math.max(1, Math.abs(b));

function sameFloats(actual, expected, what) {
  assert.equal(actual.length, expected.length, what);
  actual.forEach((a, i) => assert.ok(close(a, expected[i]),
      `${what}[${i}]: ${a} != ${expected[i]}`));
}

const lower = (c, t) => c.options.lowercase ? t.toLowerCase() : t;
const trimmed = (t) => t.replace(/[\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/u, '');

test('tokenize13a is tokenize_13a', () => {
  assert.ok(cases.length > 100);
  for (const c of cases) {
    const texts = [c.hypothesis, ...c.references];
    texts.forEach((t, i) => assert.equal(tokenize13a(trimmed(lower(c, t))),
        c.tokenized[i], JSON.stringify(t)));
  }
});

test('tokenize13a splits at str.isspace\'s whitespace, code point by code point', () => {
  const space = new Set(whitespace);
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue; // surrogates: no character
    const c = String.fromCodePoint(cp);
    if ((tokenize13a(`a${c}${c}b`) === 'a b') !== space.has(cp)) {
      assert.fail(`U+${cp.toString(16)}`);
    }
  }
  assert.throws(() => tokenize13a(3), /expects a string, got number/);
});

test('ngrams, closestRefLen and sentenceStats are _ngrams, _closest_ref_len and _sentence_stats', () => {
  for (const c of cases) {
    const order = c.options.max_order ?? 4;
    const [hyp, ...refs] = c.tokenized;
    const grams = [...ngrams(hyp.split(' ').filter(Boolean), order)]
        .map(([key, g]) => [key, g.count]);
    assert.deepEqual(grams, c.ngrams, c.hypothesis);
    const lens = refs.map((r) => r.split(' ').filter(Boolean).length);
    assert.equal(closestRefLen(c.stats.c, lens), c.closest_ref_len);
    assert.deepEqual(sentenceStats(hyp, refs, order), c.stats, c.hypothesis);
  }
});

test('brevityPenalty is _brevity_penalty: no hypothesis, equal, longer, shorter', () => {
  assert.ok(penalties.some((p) => p.args[0] === 0 && p.args[1] > 0));
  assert.ok(penalties.some((p) => p.args[0] === p.args[1]));
  for (const p of penalties) {
    const got = brevityPenalty(...p.args);
    assert.ok(close(got, p.bp), `${JSON.stringify(p.args)}: ${got} != ${p.bp}`);
  }
});

test('smoothedPrecisions is _smoothed_precisions, for every smoothing and value', () => {
  const methods = new Set(smoothed.map((p) => p.args[2]));
  assert.deepEqual([...methods].sort(), ['add-k', 'exp', 'floor', 'none']);
  for (const p of smoothed) {
    const [got, found] = smoothedPrecisions(...p.args);
    const what = JSON.stringify(p.args);
    sameFloats(got, p.precisions, what);
    assert.equal(found, p.found, what);
  }
});

test('geometricMean is _geometric_mean, with a zero and with none', () => {
  for (const m of means) {
    const got = geometricMean(...m.args);
    assert.ok(close(got, m.mean), `${JSON.stringify(m.args)}: ${got} != ${m.mean}`);
  }
});

test('score is _score, with every smoothing, with and without effective order', () => {
  assert.ok(scores.length >= 32);
  for (const s of scores) {
    const got = score(...s.args);
    const what = JSON.stringify(s.args);
    assert.ok(close(got.score, s.score), `${what}: ${got.score} != ${s.score}`);
    sameFloats(got.precisions, s.precisions, what);
    assert.ok(close(got.brevityPenalty, s.brevity_penalty), what);
  }
});

test('sentenceBleu is sentence_bleu', () => {
  let exact = 0;
  for (const c of cases) {
    const o = c.options;
    const got = sentenceBleu(c.hypothesis, c.references, o.max_order ?? 4,
        o.smooth ?? 'exp', o.smooth_value ?? null, o.lowercase ?? false);
    const want = c.result;
    const what = JSON.stringify([c.hypothesis, c.references, o]);
    assert.ok(close(got.score, want.score), `${what}: ${got.score} != ${want.score}`);
    sameFloats(got.precisions, want.precisions, what);
    assert.ok(close(got.brevityPenalty, want.brevity_penalty), what);
    assert.deepEqual([got.hypLen, got.refLen, got.counts, got.totals],
        [want.hyp_len, want.ref_len, want.counts, want.totals], what);
    if (got.score === want.score) exact++;
  }
  assert.ok(exact > cases.length / 2, `only ${exact} scores equal to the bit`);
});

test('sentenceBleu refuses what sentence_bleu refuses', () => {
  assert.throws(() => sentenceBleu('a', []), /non-empty array/);
  assert.throws(() => sentenceBleu(null, 'a'), /hypothesis string/);
  assert.throws(() => sentenceBleu('a', 'a', 4, 'laplace'), /smooth must be one of/);
});
