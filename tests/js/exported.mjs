// What the Node tests share: the exported folder and Python's outputs on it.
// Run them through pytest, tests/test_web_js.py: it exports the published
// model, writes Python's outputs, and sets AIAYN_EXPORT (the folder) and
// AIAYN_JS_CASES (the JSON file of Python's outputs).
import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {join} from 'node:path';
import * as ort from 'onnxruntime-web';
import {OnnxModel, Vocabulary, beamSearch, greedy, outputLimit} from
  '../../src/aiayn/web/translator.mjs';

const {AIAYN_EXPORT: folder, AIAYN_JS_CASES: casesFile} = process.env;
if (!folder || !casesFile) {
  throw new Error(
      'AIAYN_EXPORT and AIAYN_JS_CASES are not set: run these tests through ' +
      'pytest, `.venv/bin/python -m pytest tests/test_web_js.py`, which ' +
      'exports the model and writes the Python outputs they compare with');
}
const read = (name) => readFileSync(join(folder, name));

export const cases = JSON.parse(readFileSync(casesFile, 'utf-8'));
export const settings = JSON.parse(read('translator.json'));
export const vocab = new Vocabulary(JSON.parse(read('tokenizer.json')));
export const shortlist = JSON.parse(read('shortlist.json'));

/** The 'fp32' or 'int8' graphs on one WASM thread, as the page runs them. */
export async function loadModel(kind) {
  ort.env.wasm.numThreads = 1;
  const file = (name) => read(kind === 'int8' ? `${name}.int8.onnx` :
    `${name}.onnx`);
  return OnnxModel.create(ort, file('encoder'), file('cross_kv'),
      file('decoder_step'));
}

/** Greedy and beam search (the run's K and alpha) of Python's first
 *  `count` sentences: [{greedy, beam}] of ids, <bos> first. */
export async function searchAll(model, count) {
  const [beam, alpha] = [settings.beam, settings.length_penalty];
  const out = [];
  for (const {src} of cases.sentences.slice(0, count)) {
    const limit = outputLimit(src.length, settings);
    out.push({greedy: await greedy(model, vocab, src, limit),
      beam: await beamSearch(model, vocab, src, limit, beam, alpha)});
  }
  return out;
}

/** The largest difference between two nested arrays of the same shape. */
export function largestDifference(a, b) {
  if (!Array.isArray(a)) return Math.abs(a - b);
  assert.equal(a.length, b.length, 'the shapes differ');
  return Math.max(...a.map((x, i) => largestDifference(x, b[i])));
}
