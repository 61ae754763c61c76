// The search the page runs: aiayn/export/translator.py's reference, function by
// function (bpe_encode -> bpeEncode ...), in the same order, with the same
// arguments. No DOM: the page and the Node tests pass onnxruntime-web in.
// Shapes: S source ids, T prefix ids, K beams, V = 8000 ids, d = d_model,
// N layers, h heads, P positions in the cache, L new positions. Ids are
// plain numbers; the graphs read int64 tensors. A head mask is (3, N, h)
// nested arrays of 0 and 1 (kind: encoder, decoder self, cross; layer;
// head), null for every head; the encoder and the step graph read it as a
// float32 tensor.

import {corpusBleu} from './bleu.mjs';
import {Mulberry32, checkSampling, choose} from './sampling.mjs';

const BOUNDARY = '\u2581'; // "▁", sentencepiece's word boundary
// characters that take no room (Python's translation.ZERO_WIDTH): zero-width
// space, non-joiner and joiner, word joiner, byte-order mark
const ZERO_WIDTH = new Set(['\u200b', '\u200c', '\u200d', '\u2060', '\ufeff']);
// what Python's str.isspace calls whitespace, spelled out: JavaScript's \s
// holds U+FEFF and lacks U+001C-U+001F and U+0085
const SPACE = String.raw`\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029` +
  String.raw`\u202f\u205f\u3000`;
const IS_SPACE = new RegExp(`^[${SPACE}]$`, 'u');
const SPACES = new RegExp(`[${SPACE}]+`, 'u');
const HEAD_MASK = 'head_mask'; // an input of the encoder and the step graph
const AGAIN = 'export the run again (python -m aiayn.export)';

/** The page's three graphs in onnxruntime-web sessions: encoder, cross_kv
 *  and decoder_step. Set ort.env.wasm.numThreads = 1 before `create` for
 *  one thread. */
export class OnnxModel {
  /** ort: onnxruntime-web; the .onnx files' bytes. */
  static async create(ort, encoderBytes, crossKvBytes, decoderStepBytes,
      options = {executionProviders: ['wasm']}) {
    const model = new OnnxModel();
    model.ort = ort;
    model.encoder = await ort.InferenceSession.create(encoderBytes, options);
    model.crossKv = await ort.InferenceSession.create(crossKvBytes, options);
    model.decoderStep = await ort.InferenceSession.create(decoderStepBytes,
        options);
    // (3, N, h), as the graphs declare it
    const input = model.encoder.inputMetadata.find(
        (i) => i.name === HEAD_MASK);
    if (input === undefined) {
      throw new Error(`the encoder graph takes no ${HEAD_MASK}: it was ` +
          `exported before the page could switch heads off; ${AGAIN}`);
    }
    model.headMaskShape = input.shape;
    return model;
  }

  /** headMask checked (checkHeadMask) as a float32 ort.Tensor (3, N, h);
   *  null: all ones. */
  heads(headMask = null) {
    const size = this.headMaskShape.reduce((a, b) => a * b, 1);
    const data = headMask === null ? new Float32Array(size).fill(1) :
      Float32Array.from(checkHeadMask(headMask, this.headMaskShape).flat(2));
    return new this.ort.Tensor('float32', data, this.headMaskShape);
  }

  /** src int64 (rows, S) and a headMask (3, N, h) (checked by `heads`;
   *  null: every head) -> [memory (rows, S, d), encoder_attention
   *  (N, rows, h, S, S)], float32 ort.Tensors. */
  async encode(src, headMask = null) {
    const out = await this.encoder.run({src,
      [HEAD_MASK]: this.heads(headMask)});
    return [out.memory, out.encoder_attention];
  }

  /** The cache before the first step: the cross-attention's keys and
   *  values (N, rows, h, S, d_k), no position, the ids every step
   *  scores, targets (K) (`scored`), and headMask (`heads`). */
  async start(memory, src, targets, headMask = null) {
    const {cross_k: crossK, cross_v: crossV} =
      await this.crossKv.run({memory});
    const [N, rows, h, , dK] = crossK.dims;
    const empty = new this.ort.Tensor('float32', new Float32Array(0),
        [N, rows, h, 0, dK]); // P = 0
    const ids = new this.ort.Tensor('int64',
        BigInt64Array.from(targets, BigInt), [targets.length]);
    const mask = this.heads(headMask); // (3, N, h)
    return new Cache(src, crossK, crossV, empty, empty, ids, mask);
  }

  /** tokens int64 (rows, L) after the cache's positions -> [log_probs
   *  (rows, K) of the next token, column j for the id cache.targets[j],
   *  the cache L positions longer,
   *  cross_attention (N, rows, h, L, S), decoder_attention
   *  (N, rows, h, L, P + L)]. */
  async step(cache, tokens) {
    const out = await this.decoderStep.run({tokens, src: cache.src,
      cross_k: cache.crossK, cross_v: cache.crossV, past_k: cache.pastK,
      past_v: cache.pastV, targets: cache.targets, head_mask: cache.heads});
    const grown = new Cache(cache.src, cache.crossK, cache.crossV,
        out.present_k, out.present_v, cache.targets, cache.heads);
    return [out.log_probs, grown, out.cross_attention,
      out.decoder_attention];
  }

  /** np.array(rows, dtype=np.int64): equal-length id lists -> (rows, L). */
  int64(rows) {
    const data = BigInt64Array.from(rows.flat(), BigInt);
    return new this.ort.Tensor('int64', data, [rows.length, rows[0].length]);
  }
}

/** What the decoder keeps between steps, for each row (a sentence, or a
 *  beam of one): src int64 (rows, S); crossK, crossV float32
 *  (N, rows, h, S, d_k), computed once from the memory; pastK, pastV
 *  (N, rows, h, P, d_k), the self-attention keys and values of the P
 *  positions decoded so far; targets int64 (K), the ids each step scores
 *  (all rows); heads float32 (3, N, h), the head mask each step reads
 *  (all rows). */
export class Cache {
  constructor(src, crossK, crossV, pastK, pastV, targets, heads) {
    Object.assign(this, {src, crossK, crossV, pastK, pastV, targets, heads});
  }

  /** The cache of rows `index` (repeated or reordered): beam search keeps
   *  its beams'. */
  rows(index) {
    return new Cache(takeRows(this.src, index, 0),
        takeRows(this.crossK, index, 1), takeRows(this.crossV, index, 1),
        takeRows(this.pastK, index, 1), takeRows(this.pastV, index, 1),
        this.targets, this.heads);
  }
}

/** headMask as nested arrays (3, N, h) of numbers if it holds only 0 and
 *  1 and has `shape`, else a RangeError that says what was expected (the
 *  words of Python's check_head_mask). -> headMask. */
export function checkHeadMask(headMask, shape) {
  const want = `${shapeText(shape)} numbers 0 and 1`;
  const got = (what) => new RangeError(`head_mask: expected ${want}, ` +
      `got ${what}`);
  const found = [];
  let values = [headMask]; // one level of the nesting at a time
  for (let depth = 0; values.every(Array.isArray); depth++) {
    const lengths = new Set(values.map((v) => v.length));
    if (lengths.size !== 1) throw got(`ragged lists at depth ${depth}`);
    found.push(values[0].length);
    values = values.flat();
  }
  if (!values.every((v) => typeof v === 'number')) {
    const odd = values.find((v) => typeof v !== 'number');
    throw got(`${typeof odd} ${String(odd).slice(0, 40)}`);
  }
  if (found.join() !== shape.join()) {
    throw got(`shape ${shapeText(found)}`);
  }
  if (!values.every(Number.isFinite)) {
    throw got('a value that is not finite');
  }
  const other = values.find((v) => v !== 0 && v !== 1);
  if (other !== undefined) throw got(`the value ${other}`);
  return headMask;
}

/** (3, 3, 8), (3,) and () as Python writes a tuple. */
function shapeText(shape) {
  return `(${shape.join(', ')}${shape.length === 1 ? ',' : ''})`;
}

/** tokenizer.json read back (the parsed record): pieces, scores and the
 *  special ids. The page fetches the file (Python's Vocabulary.load). */
export class Vocabulary {
  constructor(record) {
    this.pieces = record.pieces.map(([p]) => p);
    this.scores = new Map(record.pieces);
    this.ids = new Map(this.pieces.map((p, i) => [p, i]));
    this.normal = new Set(this.pieces.filter(
        (p, i) => ['normal', 'user'].includes(record.types[i])));
    [this.padId, this.bosId] = [record.pad_id, record.bos_id];
    [this.eosId, this.unkId] = [record.eos_id, record.unk_id];
    this.addDummyPrefix = record.add_dummy_prefix;
  }
}

/** aiayn.decoding.translate.is_blank: true when the sentence holds only whitespace
 *  (as Python's str.isspace) and zero-width characters; '' is blank. */
export function isBlank(sentence) {
  return Array.from(sentence).every((c) => IS_SPACE.test(c) ||
    ZERO_WIDTH.has(c));
}

/** aiayn.decoding.translate.normalise: the sentence in Unicode's compatibility
 *  composition (NFKC: "a" + U+0308 is "ä", fullwidth "Ｅｉｎ" is "Ein", the
 *  ligature "ﬁ" is "fi"), each run of whitespace one space, none at the
 *  ends (Python's " ".join(unicodedata.normalize("NFKC", s).split())).
 *  string -> string. */
export function normalise(sentence) {
  return sentence.normalize('NFKC').split(SPACES).filter(Boolean).join(' ');
}

/** sentencepiece's BPE: spaces become "▁", then merge the best-scoring
 *  neighbours until none is a piece. text -> ids (no <eos>). */
export function bpeEncode(vocab, text) {
  text = text.replaceAll(' ', BOUNDARY);
  if (vocab.addDummyPrefix && text) text = BOUNDARY + text;
  const symbols = Array.from(text); // one symbol per code point
  while (symbols.length > 1) {
    let [best, at] = [-Infinity, -1];
    for (let i = 0; i < symbols.length - 1; i++) {
      const pair = symbols[i] + symbols[i + 1];
      const score = vocab.scores.get(pair) ?? -Infinity;
      if (vocab.normal.has(pair) && score > best) { // leftmost of equals
        [best, at] = [score, i];
      }
    }
    if (at < 0) break;
    symbols.splice(at, 2, symbols[at] + symbols[at + 1]);
  }
  const ids = [];
  for (const s of symbols) {
    const i = vocab.normal.has(s) ? vocab.ids.get(s) : vocab.unkId;
    if (!(i === vocab.unkId && ids.at(-1) === vocab.unkId)) {
      ids.push(i); // a run of unknown characters is one <unk>
    }
  }
  return ids;
}

/** The ids the encoder reads, <eos> last, of the text as normalise gives
 *  it; null when it is blank (isBlank) or has no known piece; an Error when
 *  it is too long for the model's positions. */
export function sourceIds(vocab, text, maxLen) {
  if (isBlank(text)) return null;
  const ids = bpeEncode(vocab, normalise(text));
  const boundary = vocab.ids.get(BOUNDARY);
  if (ids.every((i) => i === vocab.unkId || i === boundary)) return null;
  if (ids.length + 1 > maxLen) {
    throw new Error(`the sentence has ${ids.length} pieces + <eos>, ` +
        `the model reads at most ${maxLen}`);
  }
  return [...ids, vocab.eosId];
}

/** Pieces back to text, as sentencepiece decodes them (special ids
 *  dropped). */
export function detokenize(vocab, ids) {
  const specials = [vocab.padId, vocab.bosId, vocab.eosId];
  const pieces = ids.filter((i) => !specials.includes(i)).map(
      (i) => (i === vocab.unkId ? ' \u2047 ' : vocab.pieces[i]));
  const text = pieces.join('').replaceAll(BOUNDARY, ' ');
  return vocab.addDummyPrefix && text.startsWith(' ') ? text.slice(1) : text;
}

/** Most columns of the output, <bos> included: min(int(a·S + b) + 1,
 *  max_len), with settings from translator.json. */
export function outputLimit(srcLen, settings) {
  const [a, b] = [settings.max_len_a, settings.max_len_b];
  return Math.min(Math.trunc(a * srcLen + b) + 1, settings.max_len);
}

/** aiayn.export.shortlist.targets: the ids the decoder scores for a sentence, its
 *  pieces' lists, the frequent ids and <eos>, sorted. record: the export's
 *  shortlist.json. */
export function shortlistTargets(record, srcIds, eosId) {
  const chosen = new Set([eosId, ...record.frequent]);
  for (const i of srcIds) {
    for (const t of record.pieces[String(i)] ?? []) chosen.add(t);
  }
  return [...chosen].sort((a, b) => a - b);
}

/** The ids a step scores: `targets` (a shortlist, sorted), or every id.
 *  `targets` must hold ids of the vocabulary, and some id besides <eos>: a
 *  negative id would make the step graph score another one (counted from
 *  the end), and <eos> alone could only give "". */
export function scored(vocab, targets) {
  const V = vocab.pieces.length;
  if (targets == null) return vocab.pieces.map((_, i) => i);
  const bad = targets.filter((i) => !(Number.isInteger(i) && i >= 0 && i < V));
  if (bad.length > 0) {
    throw new RangeError(`targets: expected token ids in [0, ${V}), got ` +
        `[${bad.slice(0, 3).join(', ')}]`);
  }
  if (targets.every((i) => i === vocab.eosId)) {
    throw new RangeError(`targets: expected some id besides <eos> ` +
        `(${vocab.eosId}), got [${targets.join(', ')}]: the shortlist is ` +
        `empty, so the translation would be ''`);
  }
  return targets;
}

/** The most probable token at every step: srcIds (S) -> ids, <bos> first,
 *  <eos> last (unless cut at `limit`). targets: the ids to score (a
 *  shortlist), else all. headMask: (3, N, h), 0 a head off; null: all on. */
export async function greedy(model, vocab, srcIds, limit, targets = null,
    headMask = null) {
  const src = model.int64([srcIds]); // (1, S)
  const [memory] = await model.encode(src, headMask);
  let cache = await model.start(memory, src, scored(vocab, targets),
      headMask);
  const ys = [vocab.bosId];
  while (ys.length < limit) {
    const last = model.int64([ys.slice(-1)]); // (1, 1)
    let logProbs;
    [logProbs, cache] = await model.step(cache, last);
    const best = argmax(logProbs.data); // the first of equal maxima
    const token = Number(cache.targets.data[best]);
    ys.push(token);
    if (token === vocab.eosId) break;
  }
  return ys;
}

/** Draw every token as aiayn.decoding.search.sample(..., seed=) does (sampling.mjs):
 *  sampling {temperature, topK, topP, seed}; onStep(token, probs (V)) is told
 *  each draw as it happens. Every id can be drawn (no shortlist). srcIds (S)
 *  -> ids, <bos> first. headMask: as greedy's. */
export async function sample(model, vocab, srcIds, limit, sampling,
    onStep = null, headMask = null) {
  checkSampling(sampling);
  const random = new Mulberry32(sampling.seed);
  const src = model.int64([srcIds]); // (1, S)
  const [memory] = await model.encode(src, headMask);
  let cache = await model.start(memory, src, scored(vocab, null), headMask);
  const ys = [vocab.bosId];
  while (ys.length < limit) {
    const last = model.int64([ys.slice(-1)]); // (1, 1)
    let logProbs;
    [logProbs, cache] = await model.step(cache, last);
    const {id: token, probs} = choose(logProbs.data, sampling, random);
    if (onStep !== null) onStep(token, probs);
    ys.push(token);
    if (token === vocab.eosId) break;
  }
  return ys;
}

/** GNMT's lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting generated tokens. */
export function lengthPenalty(length, alpha) {
  return Math.pow((5 + length) / 6, alpha);
}

/** aiayn.decoding.search.beam_search for one sentence: K prefixes ranked by
 *  log P / lp. A beam that wrote <eos> keeps its score and competes with
 *  the live ones; the search ends when every beam has finished or the
 *  prefixes reach `limit` columns. Sums are in doubles, as Python's
 *  float64. srcIds (S) -> ids, <bos> first. targets: the ids to score (a
 *  shortlist), else all. trace: a SearchTree that records what the search
 *  did (the same output with or without one); headMask as greedy's. */
export async function beamSearch(model, vocab, srcIds, limit, beam = 4,
    alpha = 0.6, targets = null, trace = null, headMask = null) {
  const src = model.int64([srcIds]); // (1, S)
  const [memory] = await model.encode(src, headMask);
  let cache = await model.start(memory, src, scored(vocab, targets),
      headMask);
  cache = cache.rows(Array(beam).fill(0)); // K rows
  let beams = Array.from({length: beam}, () => [vocab.bosId]);
  let logP = [0, ...Array(beam - 1).fill(-Infinity)]; // first expands first
  let lengths = Array(beam).fill(0);
  let finished = Array(beam).fill(limit <= 1);
  if (trace !== null) trace.start(vocab.bosId, beam);
  while (!finished.every(Boolean)) {
    const last = model.int64(beams.map((b) => b.slice(-1))); // (K, 1)
    let tokenLogP; let cross;
    [tokenLogP, cache, cross] = await model.step(cache, last);
    const K = tokenLogP.dims[1]; // the targets
    const candidates = []; // [score, log P, length, beam, token]
    for (let k = 0; k < beam; k++) {
      if (finished[k]) { // one continuation: padding, which costs nothing
        const score = logP[k] / lengthPenalty(lengths[k], alpha);
        candidates.push([score, logP[k], lengths[k], k, vocab.padId]);
        continue;
      }
      const row = tokenLogP.data.subarray(k * K, (k + 1) * K); // (K)
      const [total, scores] = addThenDivide(logP[k], row,
          lengthPenalty(lengths[k] + 1, alpha));
      for (const j of topK(scores, beam)) {
        const token = Number(cache.targets.data[j]);
        candidates.push([scores[j], total[j], lengths[k] + 1, k, token]);
      }
    }
    candidates.sort((c, d) => descending(c[0], d[0])); // stable
    const chosen = candidates.slice(0, beam);
    if (trace !== null) {
      trace.grow(tokenLogP, cross, cache.targets, finished, candidates,
          vocab.eosId);
    }
    cache = cache.rows(chosen.map((c) => c[3]));
    beams = chosen.map(([, , , k, token]) => [...beams[k], token]);
    finished = chosen.map(
        ([, , , k, token]) => finished[k] || token === vocab.eosId);
    logP = chosen.map((c) => c[1]);
    lengths = chosen.map((c) => c[2]);
    if (beams[0].length >= limit) finished = Array(beam).fill(true);
  }
  const scores = logP.map((lp, k) => lp / lengthPenalty(lengths[k], alpha));
  const best = beams[argmax(scores)];
  if (trace !== null) trace.end(argmax(scores));
  while (best.at(-1) === vocab.padId) best.pop();
  return best;
}

/** What beamSearch(..., trace) did, as the tree the page draws: Python's
 *  SearchTree, the layout of aiayn.decoding.trace.BeamTrace's trees. `tree`
 *  is {nodes, steps, winner}; a node {id, parent, step, piece, log_p,
 *  score, finished, top: [[piece, p], ...] (its `top` most probable next
 *  pieces), attention (S): the last layer's cross-attention of its last
 *  position, mean over heads, or null}; a step {kept (K): node ids,
 *  pruned: [{parent, piece, log_p, score}], up to K}. */
export class SearchTree {
  constructor(top = 5) {
    this.top = top;
    this.tree = {nodes: [], steps: [], winner: null};
  }

  /** The root, <bos>, held by every beam (only beam 0 may grow). */
  start(bosId, beam) {
    const root = {id: 0, parent: null, step: 0, piece: bosId, log_p: 0,
      score: 0, finished: false, top: [], attention: null};
    this.tree = {nodes: [root], steps: [], winner: null};
    this.beams = [0, ...Array(beam - 1).fill(null)];
  }

  /** One step: each live beam's next pieces and attention, then the K kept
   *  candidates. tokenLogP float32 (K, targets); cross float32
   *  (N, K, h, 1, S); finished: the beams finished before the step;
   *  candidates: beamSearch's [score, log P, length, beam, token], best
   *  first. */
  grow(tokenLogP, cross, targets, finished, candidates, eosId) {
    const nodes = this.tree.nodes;
    const K = this.beams.length;
    const T = tokenLogP.dims[1];
    const [N, , h, , S] = cross.dims;
    this.beams.forEach((node, k) => {
      if (node === null || finished[k]) return;
      const row = tokenLogP.data.subarray(k * T, (k + 1) * T); // (targets)
      const top = topK(row, this.top).map(
          (j) => [Number(targets.data[j]), Math.exp(row[j])]);
      const attention = Array(S).fill(0); // (S)
      const at = ((N - 1) * K + k) * h * S; // [N - 1, k, 0, 0, 0]
      for (let i = 0; i < h; i++) {
        for (let s = 0; s < S; s++) attention[s] += cross.data[at + i * S + s];
      }
      Object.assign(nodes[node], {top, attention: attention.map((w) => w / h)});
    });
    const kept = candidates.slice(0, K).map(([score, total, , k, token]) => {
      const parent = this.beams[k];
      if (parent === null || total === -Infinity) return null;
      if (finished[k]) return parent; // it stays, with its score
      nodes.push({id: nodes.length, parent,
        step: this.tree.steps.length + 1, piece: token, log_p: total, score,
        finished: token === eosId, top: [], attention: null});
      return nodes.length - 1;
    });
    const pruned = candidates.slice(K).filter(([score, , , k]) =>
      this.beams[k] !== null && !finished[k] && score !== -Infinity)
        .slice(0, K).map(([score, total, , k, token]) =>
          ({parent: this.beams[k], piece: token, log_p: total, score}));
    this.tree.steps.push({kept, pruned});
    this.beams = kept;
  }

  /** The search returned beam `beam`: its node is the winner. */
  end(beam) {
    this.tree.winner = this.beams[beam];
  }
}

/** The attention of a translation ys (<bos> first), re-read with teacher
 *  forcing: {encoder (N, h, S, S), cross (N, h, T, S), decoderSelf
 *  (N, h, T, T)} as nested arrays of numbers, weights[n][i][t][s], with
 *  T = ys.length - 1: row t is the step that wrote ys[t + 1]. headMask:
 *  as greedy's. */
export async function attention(model, srcIds, ys, headMask = null) {
  const src = model.int64([srcIds]);
  const [memory, encoder] = await model.encode(src, headMask);
  const cache = await model.start(memory, src, [0], headMask); // unread
  const prefix = model.int64([ys.slice(0, -1)]); // (1, T): all at once
  const [, , cross, selfAttn] = await model.step(cache, prefix);
  const first = (t) => nested(t.data, t.dims).map((layer) => layer[0]);
  return {encoder: first(encoder), cross: first(cross),
    decoderSelf: first(selfAttn)};
}

/** Greedy (beam = 1) or beam search with the run's settings: srcIds (S)
 *  -> ids, <bos> first. shortlist: the export's shortlist.json; each step
 *  scores the sentence's targets only. trace: a SearchTree that a beam
 *  search fills (greedy leaves it as it is). headMask: as greedy's. */
export async function translateIds(model, vocab, srcIds, settings,
    beam = null, shortlist = null, trace = null, headMask = null) {
  beam = beam ?? settings.beam;
  const limit = outputLimit(srcIds.length, settings);
  const targets = shortlist === null ? null :
    shortlistTargets(shortlist, srcIds, vocab.eosId);
  if (beam === 1) {
    return greedy(model, vocab, srcIds, limit, targets, headMask);
  }
  return beamSearch(model, vocab, srcIds, limit, beam,
      settings.length_penalty, targets, trace, headMask);
}

/** Translate sentences one by one; a sentence with no known piece gives
 *  ''. (Python's `workers` has no twin: one WASM thread.) headMask: as
 *  greedy's. */
export async function translate(model, vocab, sentences, settings,
    beam = null, shortlist = null, headMask = null) {
  model.heads(headMask); // refused before any sentence
  const out = [];
  for (const text of sentences) {
    const ids = sourceIds(vocab, text, settings.max_len);
    out.push(ids === null ? '' : detokenize(vocab,
        await translateIds(model, vocab, ids, settings, beam, shortlist,
            null, headMask)));
  }
  return out;
}

/** What the head grid prints: pairs [[German, English], ...] translated
 *  greedily with headMask (every id scored) and their cased sacreBLEU
 *  (bleu.mjs's corpusBleu: sacreBLEU's defaults, 13a). onSentence(k) is
 *  told k after the k-th translation (the page's progress). ->
 *  {bleu, hypotheses}, BLEU unrounded. */
export async function maskedBleu(model, vocab, settings, pairs,
    headMask = null, onSentence = null) {
  model.heads(headMask); // refused before any sentence
  const hypotheses = [];
  for (const [k, [text]] of pairs.entries()) {
    const ids = sourceIds(vocab, text, settings.max_len);
    const ys = ids === null ? [] : await translateIds(model, vocab, ids,
        settings, 1, null, null, headMask);
    hypotheses.push(detokenize(vocab, ys));
    if (onSentence !== null) onSentence(k + 1);
  }
  const references = pairs.map(([, english]) => english);
  return {bleu: corpusBleu(hypotheses, references).score, hypotheses};
}

// --- What numpy does in the Python ---------------------------------------

/** np.argmax: the index of the first of equal maxima. */
function argmax(xs) {
  let at = 0;
  for (let i = 1; i < xs.length; i++) if (xs[i] > xs[at]) at = i;
  return at;
}

/** For a descending sort, without subtracting (-inf - -inf is NaN). */
function descending(a, b) {
  return a > b ? -1 : a < b ? 1 : 0;
}

/** total = a + xs.astype(np.float64), then total / b: two (K) arrays of
 *  doubles. A plain loop: Float64Array.from(xs, f) calls f per value, many
 *  times slower over every id (V = 8000, each row of each step). */
function addThenDivide(a, xs, b) {
  const total = new Float64Array(xs.length);
  const divided = new Float64Array(xs.length);
  for (let i = 0; i < xs.length; i++) {
    total[i] = a + xs[i];
    divided[i] = total[i] / b;
  }
  return [total, divided];
}

/** np.argsort(-xs, kind='stable')[:k] without sorting all of xs: the
 *  indices of the k largest, best first, the first of equal values first. */
function topK(xs, k) {
  const top = [];
  for (let i = 0; i < xs.length; i++) {
    if (top.length === k && !(xs[i] > xs[top[k - 1]])) continue;
    let j = top.length; // i goes after every value >= xs[i]
    while (j > 0 && xs[i] > xs[top[j - 1]]) j--;
    top.splice(j, 0, i);
    if (top.length > k) top.pop();
  }
  return top;
}

/** t[index] along `axis` (0 or 1) of an ort.Tensor: Python's t[index] and
 *  t[:, index]. */
function takeRows(t, index, axis) {
  const outer = t.dims.slice(0, axis).reduce((a, b) => a * b, 1);
  const rows = t.dims[axis];
  const size = t.data.length / (outer * rows); // values per row
  const data = new t.data.constructor(outer * index.length * size);
  for (let o = 0; o < outer; o++) {
    index.forEach((r, i) => data.set(
        t.data.subarray((o * rows + r) * size, (o * rows + r + 1) * size),
        (o * index.length + i) * size));
  }
  const dims = [...t.dims];
  dims[axis] = index.length;
  return new t.constructor(t.type, data, dims);
}

/** A flat array as nested arrays of plain numbers, shaped as dims. */
function nested(data, dims) {
  if (dims.length === 0) return data[0];
  const step = data.length / dims[0];
  return Array.from({length: dims[0]}, (_, i) =>
    nested(data.subarray(i * step, (i + 1) * step), dims.slice(1)));
}
