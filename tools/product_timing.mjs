// The timing half of tools/product_timing.py: each shape's plain and wide
// int8 layer in onnxruntime-web, one WebAssembly thread, one row, rounds
// interleaved (plain, wide, then wide, plain). Prints JSON: {ort, node,
// us: {shape: {plain: [...], wide: [...]}}}, microseconds of one run.
//
//   node tools/product_timing.mjs folder rounds 512x512 512x2048 ...
import {readFileSync} from 'node:fs';
import {join} from 'node:path';
import {performance} from 'node:perf_hooks';
import * as ort from 'onnxruntime-web';

const [folder, roundsText, ...shapes] = process.argv.slice(2);
const rounds = Number(roundsText);
if (!(rounds > 0) || !shapes.length) {
  throw new Error('usage: node tools/product_timing.mjs folder rounds ' +
    'KxN [KxN ...]');
}
ort.env.wasm.numThreads = 1;
const RUNS = 100; // runs timed together, each round
const WARM = 3; // rounds run first, untimed: WebAssembly is compiled again once hot
const us = {};
for (const shape of shapes) {
  const K = Number(shape.split('x')[0]);
  const x = new ort.Tensor('float32',
      Float32Array.from({length: K}, (_, i) => Math.sin(i)), [1, K]);
  const sessions = {};
  for (const kind of ['plain', 'wide']) {
    sessions[kind] = await ort.InferenceSession.create(
        readFileSync(join(folder, `${shape}.${kind}.onnx`)));
  }
  const [a, b] = await Promise.all(
      ['plain', 'wide'].map((k) => sessions[k].run({x})));
  if (!a.y.data.every((v, i) => Object.is(v, b.y.data[i]))) {
    throw new Error(`${shape}: the wide layer's outputs differ`);
  }
  us[shape] = {plain: [], wide: []};
  for (let r = 0; r < rounds + WARM; r++) {
    for (const kind of r % 2 ? ['wide', 'plain'] : ['plain', 'wide']) {
      const started = performance.now();
      for (let i = 0; i < RUNS; i++) await sessions[kind].run({x});
      if (r >= WARM) {
        us[shape][kind].push((performance.now() - started) / RUNS * 1e3);
      }
    }
  }
}
console.log(JSON.stringify({ort: ort.env.versions.web, node: process.version,
  us}));
