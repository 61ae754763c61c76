// Chapter 11.4's greedy and beam search in Node, one WebAssembly thread,
// with the page graphs of several folders timed in turn (A B A B ...):
// how to tell whether another quantization of the graphs is faster.
//
//   node tools/translator_ab.mjs rounds label=folder [label=folder ...]
//   e.g. node tools/translator_ab.mjs 20 int8=_build/translator-export-main \
//          q4=/tmp/q4
//
// Each folder holds encoder/cross_kv/decoder_step .int8.onnx, tokenizer.json
// and translator.json (and shortlist.json, which its searches then score):
// an export (python -m aiayn.export), or a copy with other graphs under
// those names. Prints each variant's translations of the
// caption tools/translator_timing.py times in Chromium, then the median and
// range in ms of greedy and beam search (the run's K and alpha).
import {existsSync, readFileSync} from 'node:fs';
import {join} from 'node:path';
import {performance} from 'node:perf_hooks';
import * as ort from 'onnxruntime-web';
import {OnnxModel, Vocabulary, beamSearch, detokenize, greedy, outputLimit,
  shortlistTargets, sourceIds} from '../src/aiayn/web/translator.mjs';

const rounds = Number(process.argv[2]);
const pairs = process.argv.slice(3).map((a) => a.split('='));
if (!(rounds > 0) || !pairs.length || pairs.some((p) => p.length !== 2)) {
  throw new Error('usage: node tools/translator_ab.mjs rounds ' +
    'label=folder [label=folder ...], rounds > 0');
}
const folders = Object.fromEntries(pairs);
const first = Object.values(folders)[0];
const settings = JSON.parse(readFileSync(join(first, 'translator.json')));
const vocab = new Vocabulary(JSON.parse(readFileSync(join(first,
    'tokenizer.json'))));
// the sentence tools/translator_timing.py times in Chromium
const TEXT = 'Eine Frau in einem roten Mantel geht mit ihrem Hund durch ' +
  'den Park.';
ort.env.wasm.numThreads = 1;

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
const ids = sourceIds(vocab, TEXT, settings.max_len);
const limit = outputLimit(ids.length, settings);
const [K, alpha] = [settings.beam, settings.length_penalty];
const models = {};
const targets = {}; // each folder's shortlist of the caption, or null
for (const [label, folder] of Object.entries(folders)) {
  const listed = join(folder, 'shortlist.json');
  targets[label] = existsSync(listed) ? shortlistTargets(
      JSON.parse(readFileSync(listed)), ids, vocab.eosId) : null;
  const file = (n) => readFileSync(join(folder, `${n}.int8.onnx`));
  models[label] = await OnnxModel.create(ort, file('encoder'),
      file('cross_kv'), file('decoder_step'));
  const g = await greedy(models[label], vocab, ids, limit, targets[label]);
  const b = await beamSearch(models[label], vocab, ids, limit, K, alpha,
      targets[label]);
  console.log(`${label}: greedy "${detokenize(vocab, g)}" (${g.length - 1}` +
    ` steps); beam ${K} "${detokenize(vocab, b)}"`);
}
const times = {};
for (const label of Object.keys(models)) {
  times[label] = {greedy: [], beam: []};
}
for (let r = 0; r < rounds; r++) {
  for (const [label, model] of Object.entries(models)) {
    let t0 = performance.now();
    await greedy(model, vocab, ids, limit, targets[label]);
    times[label].greedy.push(performance.now() - t0);
    t0 = performance.now();
    await beamSearch(model, vocab, ids, limit, K, alpha, targets[label]);
    times[label].beam.push(performance.now() - t0);
  }
}
const show = (xs) => `${median(xs).toFixed(1)} ` +
  `(${Math.min(...xs).toFixed(1)}-${Math.max(...xs).toFixed(1)})`;
console.log(`median (range) ms of ${rounds} rounds, one thread:`);
for (const [label, t] of Object.entries(times)) {
  console.log(`  ${label.padEnd(12)} greedy ${show(t.greedy)}  beam ${K} ` +
    `${show(t.beam)}`);
}
