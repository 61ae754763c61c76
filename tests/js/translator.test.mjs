// aiayn/web/translator.mjs gives what aiayn.export.translator gives: the
// tokenizer on Multi30k's val and test sentences and on odd strings, and, on
// the float32 graphs, the same tokens from greedy and beam search and the
// same attention. (The int8 graphs: translator.int8.test.mjs.)
import assert from 'node:assert/strict';
import {test} from 'node:test';
import {isDeepStrictEqual} from 'node:util';
import * as tr from '../../src/aiayn/web/translator.mjs';
import {cases, largestDifference, loadModel, searchAll, settings, shortlist,
  vocab} from './exported.mjs';

const model = await loadModel('fp32');

/** The first few cases whose `got(c)` is not `c[key]`. */
function differing(list, got, key) {
  return list.filter((c) => !isDeepStrictEqual(got(c), c[key])).slice(0, 3)
      .map((c) => ({text: c.text, expected: c[key], got: got(c)}));
}

test('bpeEncode and detokenize are sentencepiece\'s', (t) => {
  assert.ok(cases.tokens.length > 4000); // val and test 2016, de and en
  const encode = (c) => tr.bpeEncode(vocab, c.text);
  assert.deepEqual(differing(cases.tokens, encode, 'ids'), []);
  const decode = (c) => tr.detokenize(vocab, c.ids);
  assert.deepEqual(differing(cases.tokens, decode, 'decoded'), []);
  t.diagnostic(`${cases.tokens.length} texts encoded and decoded alike`);
});

test('scored gives the ids a step scores, or refuses bad ones, as Python', () => {
  assert.ok(cases.scored.some((c) => c.error) && cases.scored.some((c) => c.ids));
  for (const c of cases.scored) {
    if (c.error) {
      assert.throws(() => tr.scored(vocab, c.targets), {message: c.error});
    } else {
      assert.deepEqual(tr.scored(vocab, c.targets), c.ids);
    }
  }
});

test('sourceIds gives null, or refuses a long sentence, as Python', () => {
  for (const c of cases.sources) {
    const ids = () => tr.sourceIds(vocab, c.text, c.max_len);
    if ('error' in c) assert.throws(ids, {message: c.error});
    else assert.deepEqual(ids(), c.ids, c.text);
  }
});

test('sourceIds and outputLimit of the sentences are Python\'s', () => {
  for (const c of cases.sentences) {
    assert.deepEqual(tr.sourceIds(vocab, c.text, settings.max_len), c.src);
    assert.equal(tr.outputLimit(c.src.length, settings), c.limit);
  }
});

test('float32: greedy and beamSearch give Python\'s tokens', async (t) => {
  const got = await searchAll(model, cases.fp32.length);
  for (const kind of ['greedy', 'beam']) {
    const same = got.filter((g, i) =>
      isDeepStrictEqual(g[kind], cases.fp32[i][kind])).length;
    t.diagnostic(`${kind}: ${same}/${got.length} sentences the same`);
    assert.deepEqual(got.map((g) => g[kind]),
        cases.fp32.map((c) => c[kind]), kind);
  }
  assert.ok(got.length >= 50);
});

test('float32: sample draws Python\'s tokens for each seed', async (t) => {
  const sampled = cases.fp32.filter((c) => c.sampled);
  assert.ok(sampled.length >= 6);
  let draws = 0;
  for (const [i, c] of sampled.entries()) {
    const {src, limit} = cases.sentences[i];
    for (const {sampling: how, ids} of c.sampled) {
      const sampling = {temperature: how.temperature, topK: how.top_k,
        topP: how.top_p, seed: how.seed};
      const steps = [];
      const got = await tr.sample(model, vocab, src, limit, sampling,
          (token, probs) => steps.push([token, probs[token]]));
      assert.deepEqual(got, ids, JSON.stringify(how));
      assert.equal(steps.length, got.length - 1); // one draw a token
      assert.ok(steps.every(([, p]) => p > 0)); // never a filtered token
      draws += steps.length;
    }
  }
  t.diagnostic(`${draws} draws the same as Python's`);
});

test('float32: with the shortlist, the targets, greedy and beamSearch are ' +
    'Python\'s', async (t) => {
  const listed = cases.fp32.filter((c) => c.shortlisted);
  assert.ok(listed.length >= 12);
  const [beam, alpha] = [settings.beam, settings.length_penalty];
  for (const [i, c] of listed.entries()) {
    const {src, limit} = cases.sentences[i];
    const python = c.shortlisted;
    const targets = tr.shortlistTargets(shortlist, src, vocab.eosId);
    assert.deepEqual(targets, python.targets);
    assert.ok(targets.length < vocab.pieces.length / 4); // a short list
    assert.deepEqual(await tr.greedy(model, vocab, src, limit, targets),
        python.greedy);
    const beamed = await tr.beamSearch(model, vocab, src, limit, beam, alpha,
        targets);
    assert.deepEqual(beamed, python.beam);
    assert.ok(beamed.slice(1).every((id) => targets.includes(id)));
  }
  t.diagnostic(`${listed.length} sentences searched alike with the shortlist`);
});

test('float32: attention is Python\'s within 1e-4', async (t) => {
  for (const c of cases.attention.fp32) {
    const got = await tr.attention(model, c.src, c.ys);
    for (const [kind, python] of [['encoder', 'encoder'], ['cross', 'cross'],
      ['decoderSelf', 'decoder_self']]) {
      const worst = largestDifference(got[kind], c[python]);
      t.diagnostic(`${kind}: differs by ${worst.toExponential(1)} at most`);
      assert.ok(worst <= 1e-4, `${kind}: differs by ${worst}`);
    }
  }
});

test('translate gives Python\'s text; nothing known gives \'\'', async () => {
  const some = cases.sentences.slice(0, 2);
  const got = await tr.translate(model, vocab,
      [...some.map((c) => c.text), ' \u{1f600} '], settings);
  assert.deepEqual(got, [...cases.fp32.slice(0, 2).map((c) => c.beam_text),
    '']);
});
