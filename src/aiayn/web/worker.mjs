// The search off the page's main thread: a module worker that holds the three graphs and runs
// translator.mjs, so that the page stays responsive while a long sentence is searched (a 30-word
// sentence takes about half a second with beam search; the page would freeze that long).
//
// page.mjs starts it with `new Worker(url, {type: 'module'})` and asks it one thing at a time:
//   {id, kind: 'load', ort, wasmPaths, runtime, encoder, crossKv, decoderStep, tokenizer, settings,
//    shortlist}
//       the URL of ort.wasm.min.mjs and of its folder, and the files' bytes (transferred); shortlist
//       (shortlist.json, or absent: every id is scored) serves greedy and beam search; sampling draws
//       from every id, as decoding.sample does
//       -> {id, value: {pieces: V}} once the search's kernels are compiled: the translator is ready
//   {id, kind: 'speed'}
//       asked once the page says it is ready (the reader reads and types meanwhile)
//       -> {id, value: {every, shortlist}}: the warm-up sentence's beam search in ms (the fastest of
//          three), scoring every id and the shortlist (null without one), which the page's switch shows
//   {id, kind: 'translate', sentence, beam, shortlist, sampling, headMask}
//       shortlist (true, or false, the default: every id): greedy and beam search score only the
//       sentence's shortlist, faster but less often the model's own sentence (chapter 13.2);
//       headMask (3, N, h) nested arrays of 0 and 1 (or null, the default: every head) switches heads
//       off, as aiayn.model.set_head_mask does (translator.mjs's checkHeadMask refuses another);
//       sampling (or null): {temperature, topK, topP, seed} draws each token instead of searching;
//       then each draw is posted as it happens, {id, step: {token, p, top: [[piece, p], ...]}}
//       (the STEP_TOP most probable pieces), before the answer
//       -> {id, value: {problem}} for a sentence or sampling settings it cannot use, with the reader's
//          words, or {id, value: {english, ms, ids (S), ys (T + 1), source (S), tree}}, as soon as the
//          search ends: source the German pieces; tree, for a beam search (else null), what it did:
//          translator.mjs's SearchTree, pieces as text (readableTree), which beam_tree.mjs draws
//   {id, kind: 'score', pairs, headMask}
//       pairs [[German, English], ...] (heads.json's 100 test sentences) translated greedily with the
//       head mask and scored with sacreBLEU (translator.mjs's maskedBleu); after each sentence
//       {id, step: k} is posted (the page's progress)
//       -> {id, value: {bleu, hypotheses, ms}}
//   {id, kind: 'attention', ids, ys, headMask}
//       the attention of a translation, asked once its English is on the page
//       -> {id, value: {tokens, maps}}: tokens as the heat map reads them, {source (S), decoder_in (T),
//          decoder_out (T)} pieces; maps {encoder (N, h, S, S), cross (N, h, T, S), decoder_self
//          (N, h, T, T)} nested arrays
//   a failure answers {id, error: message}.

import {checkSampling, checkSeed} from './sampling.mjs';
import {OnnxModel, SearchTree, Vocabulary, attention, detokenize, isBlank, maskedBleu, normalise, outputLimit,
  sample, sourceIds, translateIds} from './translator.mjs';

let translator = null;  // {model, vocab, settings, shortlist}, once loaded
// searched once while loading, greedy and with beam search: a first search pays for compiling the
// runtime's kernels (WebAssembly is compiled fast at first and well once it runs), which would otherwise
// count in the time the reader's first sentence takes
const WARM_UP = 'Ein Hund läuft über die Wiese.';
const STEP_TOP = 5;  // pieces shown for each draw

/**
 * Why a sentence cannot be translated, or its source ids.
 * @param {Vocabulary} vocab
 * @param {{max_len: number}} settings translator.json
 * @param {string} sentence as the reader typed it
 * @returns {{ids: number[]} | {problem: string}} ids (S), <eos> last
 */
export function checkSentence(vocab, settings, sentence) {
  if (isBlank(sentence)) return {problem: 'Type a German sentence first.'};
  const text = normalise(sentence);
  const longest = Math.max(...vocab.pieces.map(p => p.length));
  if (text.length / longest > settings.max_len) {  // no need to split it to know
    return {problem: `This sentence is too long: it has ${text.length.toLocaleString('en')} ` +
      `characters, at least ${Math.ceil(text.length / longest)} pieces, and the model reads at ` +
      `most ${settings.max_len}. Shorten it.`};
  }
  let ids;
  try {
    ids = sourceIds(vocab, text, settings.max_len);
  } catch (err) {
    return {problem: `This sentence is too long: ${err.message}. Shorten it.`};
  }
  if (ids === null) {
    return {problem: 'Nothing to translate: none of these characters is in the model\'s vocabulary ' +
      '(it learned the letters, digits and punctuation of German and English captions).'};
  }
  return {ids};
}

/**
 * Why sampling's settings cannot be used, as a sentence of the page (sampling.mjs's checks, Python's
 * messages), or null.
 * @param {{temperature: number|null, topK: number|null, topP: number|null, seed: number|null}} sampling
 *   the page's fields (null: empty)
 */
export function checkSettings(sampling) {
  try {
    checkSampling(sampling);
    checkSeed(sampling.seed);
  } catch (err) {
    return `${err.message[0].toUpperCase()}${err.message.slice(1)}.`;
  }
  return null;
}

/** Start onnxruntime-web on one thread with the graphs; read the tokenizer and the settings. */
async function load({ort: ortUrl, wasmPaths, runtime, encoder, crossKv, decoderStep, tokenizer, shortlist,
  settings}) {
  const ort = await import(ortUrl);
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmPaths = wasmPaths;
  ort.env.wasm.wasmBinary = runtime;
  const text = bytes => JSON.parse(new TextDecoder().decode(bytes));
  const model = await OnnxModel.create(ort, ...[encoder, crossKv, decoderStep].map(b => new Uint8Array(b)));
  translator = {model, vocab: new Vocabulary(text(tokenizer)), settings: text(settings),
    shortlist: shortlist === undefined ? null : text(shortlist)};
  const ids = sourceIds(translator.vocab, WARM_UP, translator.settings.max_len);
  const lists = translator.shortlist === null ? [null] : [null, translator.shortlist];
  for (const list of lists) {  // compiled once, each way
    for (const beam of [1, translator.settings.beam]) {
      await translateIds(model, translator.vocab, ids, translator.settings, beam, list);
    }
  }
  return {pieces: translator.vocab.pieces.length};
}

/** What the shortlist saves: the warm-up sentence's beam search timed scoring every id and the shortlist. */
async function speed() {
  if (translator === null) throw new Error('the translator is not loaded');
  const {model} = translator;
  const ids = sourceIds(translator.vocab, WARM_UP, translator.settings.max_len);
  const timed = async list => {  // beam search again, once compiled: what the page's switch trades
    const started = performance.now();
    await translateIds(model, translator.vocab, ids, translator.settings, translator.settings.beam, list);
    return performance.now() - started;
  };
  let [every, listed] = [Infinity, translator.shortlist === null ? null : Infinity];
  for (let i = 0; i < 3; i++) {  // the fastest of three, each way in turn: a busy machine slows some
    every = Math.min(every, await timed(null));
    if (listed !== null) listed = Math.min(listed, await timed(translator.shortlist));
  }
  return {every, shortlist: listed};
}

/** The STEP_TOP most probable pieces of a draw, [[piece, p], ...], most probable first; none that top-k or
 * top-p left out. */
export function topPieces(vocab, probs, k = STEP_TOP) {
  const order = [...probs.keys()].filter(i => probs[i] > 0).sort((a, b) => probs[b] - probs[a]).slice(0, k);
  return order.map(i => [vocab.pieces[i], probs[i]]);
}

/** A SearchTree's tree with each piece as its text: aiayn.decoding.trace.readable, numbers unrounded. */
export function readableTree(vocab, {nodes, steps, winner}) {
  const text = i => vocab.pieces[i];
  return {
    nodes: nodes.map(n => ({...n, piece: text(n.piece), top: n.top.map(([i, p]) => [text(i), p])})),
    steps: steps.map(({kept, pruned}) => ({kept, pruned: pruned.map(c => ({...c, piece: text(c.piece)}))})),
    winner,
  };
}

/** Greedy (beam 1), beam search or sampling of one sentence, timed, with a beam search's tree; `post(step)`
 * is told each draw of a sampling. */
async function translate({sentence, beam, shortlist: listed = false, sampling = null, headMask = null},
  post = () => {}) {
  if (translator === null) throw new Error('the translator is not loaded');
  const {model, vocab, settings} = translator;
  const shortlist = listed ? translator.shortlist : null;  // null: every id
  model.heads(headMask);  // a bad mask is refused before the sentence is read
  const {ids, problem} = checkSentence(vocab, settings, sentence);
  if (problem) return {problem};
  const refused = sampling === null ? null : checkSettings(sampling);
  if (refused) return {problem: refused};
  const trace = sampling === null && beam > 1 ? new SearchTree() : null;  // the tree the page draws
  const started = performance.now();
  const onStep = (token, probs) =>
    post({token: vocab.pieces[token], p: probs[token], top: topPieces(vocab, probs)});
  const ys = sampling === null  // <bos> first
    ? await translateIds(model, vocab, ids, settings, beam, shortlist, trace, headMask)
    : await sample(model, vocab, ids, outputLimit(ids.length, settings), sampling, onStep, headMask);
  const ms = performance.now() - started;
  return {english: detokenize(vocab, ys), ms, ids, ys, source: ids.map(i => vocab.pieces[i]),
    tree: trace && readableTree(vocab, trace.tree)};
}

/** The 100 test sentences translated greedily with a head mask, scored, timed; `post(k)` after each. */
async function score({pairs, headMask = null}, post = () => {}) {
  if (translator === null) throw new Error('the translator is not loaded');
  const {model, vocab, settings} = translator;
  const started = performance.now();
  const {bleu, hypotheses} = await maskedBleu(model, vocab, settings, pairs, headMask, post);
  return {bleu, hypotheses, ms: performance.now() - started};
}

/** The attention of a translation, source ids (S) and ys (T + 1), and the pieces the map labels. */
async function attend({ids, ys, headMask = null}) {
  if (translator === null) throw new Error('the translator is not loaded');
  const {model, vocab} = translator;
  const maps = await attention(model, ids, ys, headMask);
  const pieces = list => list.map(i => vocab.pieces[i]);
  return {
    tokens: {source: pieces(ids), decoder_in: pieces(ys.slice(0, -1)), decoder_out: pieces(ys.slice(1))},
    maps: {encoder: maps.encoder, cross: maps.cross, decoder_self: maps.decoderSelf},
  };
}

const jobs = {load, speed, translate, score, attention: attend};
let queue = Promise.resolve();  // one job at a time, in the order asked

if (typeof WorkerGlobalScope !== 'undefined' && self instanceof WorkerGlobalScope) {
  self.addEventListener('message', ({data}) => {
    queue = queue.then(async () => {
      try {
        const post = step => self.postMessage({id: data.id, step});
        self.postMessage({id: data.id, value: await jobs[data.kind](data, post)});
      } catch (err) {
        self.postMessage({id: data.id, error: err.message || String(err)});
      }
    });
  });
}
