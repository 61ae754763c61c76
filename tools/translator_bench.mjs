// Where chapter 11.4's greedy search spends its time, in Node, on one
// WebAssembly thread, with the page's int8 graphs scoring every id (the
// page's default); then variants timed in turn (A B A B ...), each checked
// to give the same translation, the export's shortlist among them.
//
//   node tools/translator_bench.mjs [export folder] [rounds]
//
// The folder is an export (python -m aiayn.export), by default
// _build/translator-export-main. Prints medians in ms.
import {existsSync, readFileSync} from 'node:fs';
import {join} from 'node:path';
import {performance} from 'node:perf_hooks';
import * as ort from 'onnxruntime-web';
import {OnnxModel, Vocabulary, greedy, outputLimit, scored, shortlistTargets,
  sourceIds} from '../src/aiayn/web/translator.mjs';

const folder = process.argv[2] ?? '_build/translator-export-main';
const rounds = Number(process.argv[3] ?? 20);
const read = (name) => readFileSync(join(folder, name));
const settings = JSON.parse(read('translator.json'));
const vocab = new Vocabulary(JSON.parse(read('tokenizer.json')));
// the sentence tools/translator_timing.py times in Chromium
const TEXT = 'Eine Frau in einem roten Mantel geht mit ihrem Hund durch ' +
  'den Park.';
const WASM = {executionProviders: ['wasm']};
ort.env.wasm.numThreads = 1;

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function load(kind = 'int8', options = WASM) {
  const file = (n) => read(kind === 'int8' ? `${n}.int8.onnx` : `${n}.onnx`);
  return OnnxModel.create(ort, file('encoder'), file('cross_kv'),
      file('decoder_step'), options);
}

/** The model whose step asks decoder_step only for `names`. */
function fetching(model, names) {
  const session = model.decoderStep;
  const step = Object.create(session);
  step.run = (feeds) => session.run(feeds, names);
  return Object.assign(Object.create(OnnxModel.prototype), model,
      {decoderStep: step});
}

/** greedy() spelled out, each part timed: {part: ms}, step ms, ids. */
async function profile(model, ids, limit) {
  const t = {};
  let t0 = performance.now();
  const lap = (part) => {
    const now = performance.now();
    t[part] = (t[part] ?? 0) + now - t0;
    t0 = now;
    return now;
  };
  const src = model.int64([ids]);
  lap('tensors');
  const [memory] = await model.encode(src);
  lap('encoder');
  let cache = await model.start(memory, src, scored(vocab, targets));
  lap('cross_kv');
  const ys = [vocab.bosId];
  const steps = [];
  while (ys.length < limit) {
    const last = model.int64([ys.slice(-1)]);
    lap('tensors');
    let logProbs;
    const before = t0;
    [logProbs, cache] = await model.step(cache, last);
    steps.push(lap('steps') - before);
    const xs = logProbs.data;
    let best = 0;
    for (let i = 1; i < xs.length; i++) if (xs[i] > xs[best]) best = i;
    const token = Number(cache.targets.data[best]);
    ys.push(token);
    lap('argmax');
    if (token === vocab.eosId) break;
  }
  return {t, steps, ys};
}

const ids = sourceIds(vocab, TEXT, settings.max_len);
const limit = outputLimit(ids.length, settings);
const listed = existsSync(join(folder, 'shortlist.json')) ? shortlistTargets(
    JSON.parse(read('shortlist.json')), ids, vocab.eosId) : null;
const targets = null; // every id, as the page by default
const base = await load();
const reference = await greedy(base, vocab, ids, limit, targets);
for (let i = 0; i < 3; i++) await greedy(base, vocab, ids, limit, targets);
console.log(`${ids.length} source pieces, ${reference.length - 1} steps, ` +
  `median ms of ${rounds} runs, int8, one thread`);

const parts = {};
const stepRuns = [];
for (let r = 0; r < rounds; r++) {
  const t0 = performance.now();
  const {t, steps} = await profile(base, ids, limit);
  t.total = performance.now() - t0;
  for (const [k, v] of Object.entries(t)) (parts[k] ??= []).push(v);
  stepRuns.push(steps);
}
for (const [k, v] of Object.entries(parts)) {
  console.log(`  ${k.padEnd(9)} ${median(v).toFixed(2)}`);
}
const perStep = stepRuns[0].map((_, i) => median(stepRuns.map((s) => s[i])));
console.log('  each step', perStep.map((x) => x.toFixed(2)).join(' '));

const variants = {
  'as today': base,
  ...(listed === null ? {} : {'the shortlist': {model: base, targets: listed}}),
  'fetch log_probs, present_k/v': fetching(base,
      ['log_probs', 'present_k', 'present_v']),
  'arena + mem pattern': await load('int8', {...WASM,
    enableCpuMemArena: true, enableMemPattern: true}),
  'batch = new_len = 1': await load('int8', {...WASM,
    freeDimensionOverrides: {batch: 1, new_len: 1}}),
  'float32 graphs (4x bytes)': await load('fp32'),
};
const times = {};
// a variant is a model, or {model, targets}: the shortlist's ids
const run = (v) => (v instanceof OnnxModel ?
  greedy(v, vocab, ids, limit, targets) :
  greedy(v.model, vocab, ids, limit, v.targets));
for (const [name, variant] of Object.entries(variants)) {
  const ys = await run(variant);
  const same = ys.join() === reference.join();
  console.log(`  ${name}: ${same ? 'same' : 'DIFFERENT'} translation`);
  await run(variant);
  times[name] = [];
}
for (let r = 0; r < rounds; r++) {
  for (const [name, variant] of Object.entries(variants)) {
    const t0 = performance.now();
    await run(variant);
    times[name].push(performance.now() - t0);
  }
}
console.log(`greedy, variants in turn, median ms of ${rounds}:`);
for (const [name, xs] of Object.entries(times)) {
  console.log(`  ${name.padEnd(30)} ${median(xs).toFixed(2)} ` +
    `(${Math.min(...xs).toFixed(1)}-${Math.max(...xs).toFixed(1)})`);
}
