// How the translator's page draws the next token when it samples: the twin of
// aiayn.decoding.search.sample's choice (temperature, top-k, top-p) and of aiayn.decoding.seeded's
// generator, for one sentence at a time. Each function below is the Python
// function named above it; tests/js/sampling.test.mjs holds them to Python's
// draws, so a seed writes the same sentence in the browser and in the package.

// aiayn.decoding.seeded.typed: a setting as the reader gave it, for a message ("nothing" for an
// empty field, a whole number with thousands separators, any other number as Python prints it)
export function typed(value) {
  if (value === null || value === undefined) return 'nothing';
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'not a number';
    if (!Number.isFinite(value)) return value > 0 ? 'infinity' : 'minus infinity';
    if (Number.isInteger(value)) return BigInt(value).toLocaleString('en');
    return String(value);
  }
  return JSON.stringify(value) ?? String(value);
}

// aiayn.decoding.seeded.check_seed: a whole number from 0 to 2^32 - 1, in the reader's words
export function checkSeed(seed) {
  if (!(Number.isInteger(seed) && seed >= 0 && seed <= 0xffffffff)) {
    throw new RangeError(`the seed must be a whole number from 0 to 4,294,967,295 (got ${typed(seed)})`);
  }
}

// aiayn.decoding.seeded.Mulberry32: uniform numbers in [0, 1) from a 32-bit seed
export class Mulberry32 {
  constructor(seed) {
    checkSeed(seed);
    this.state = seed;
  }

  next() {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1) >>> 0;
    t = ((t + Math.imul(t ^ (t >>> 7), t | 61)) >>> 0) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  }
}

// aiayn.decoding.seeded.draw: the first token whose cumulative probability passes a
// uniform number (a token of probability 0 is never drawn)
export function draw(probs, random) {
  const cumulative = new Float64Array(probs.length);
  let sum = 0;
  for (let i = 0; i < probs.length; i++) cumulative[i] = sum += probs[i];
  const target = random.next() * sum;
  for (let i = 0; i < probs.length; i++) if (cumulative[i] > target) return i;
  return probs.length;  // searchsorted's answer when nothing passes (never, for u < 1)
}

// aiayn.decoding.search._filter_top_k: keep the topK largest logits, set the others to -inf
export function filterTopK(logits, topK) {
  const k = Math.min(topK, logits.length);
  const kth = Float64Array.from(logits).sort().reverse()[k - 1];
  return logits.map(x => (x < kth ? -Infinity : x));
}

// aiayn.decoding.search._filter_top_p: keep the smallest set of most probable tokens
// whose probability adds up to at least topP (the most probable one always stays)
export function filterTopP(logits, topP) {
  const order = [...logits.keys()].sort((a, b) => logits[b] - logits[a]);
  const probs = softmax(order.map(i => logits[i]));
  const out = Float64Array.from(logits);
  let cumulative = 0;
  order.forEach((token, rank) => {
    if (cumulative >= topP) out[token] = -Infinity;  // the tokens before it reach topP
    cumulative += probs[rank];
  });
  return out;
}

// torch.softmax over one row
export function softmax(logits) {
  const max = Math.max(...logits);
  const e = logits.map(x => Math.exp(x - max));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map(x => x / sum);
}

// aiayn.decoding.search.check_sampling: the checks at the top of sample, with its messages, in the
// words of the page's fields (null is an empty field: every piece kept)
export function checkSampling({temperature, topK = null, topP = null}) {
  if (!(typeof temperature === 'number' && temperature > 0 && temperature < Infinity)) {
    throw new RangeError('the temperature must be a number above 0, such as 0.7 or 1.5 ' +
      `(got ${typed(temperature)})`);
  }
  if (topK !== null && !(Number.isInteger(topK) && topK >= 1)) {
    throw new RangeError('top-k must be a whole number from 1 up, or nothing to keep every piece ' +
      `(got ${typed(topK)})`);
  }
  if (topP !== null && !(typeof topP === 'number' && topP > 0 && topP <= 1)) {
    throw new RangeError('top-p must be a number above 0 and at most 1, or nothing to keep every piece ' +
      `(got ${typed(topP)})`);
  }
}

// choose inside aiayn.decoding.search.sample, for one row: the next token, and the
// probabilities it was drawn from (for the page to draw)
export function choose(logits, {temperature, topK = null, topP = null}, random) {
  let scaled = Float64Array.from(logits, x => x / temperature);
  if (topK !== null) scaled = filterTopK(scaled, topK);
  if (topP !== null) scaled = filterTopP(scaled, topP);
  const probs = softmax(scaled);
  return {id: draw(probs, random), probs};
}
