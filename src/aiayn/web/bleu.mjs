// Sentence BLEU as aiayn/bleu.py computes it, function by function
// (tokenize_13a -> tokenize13a, _ngrams -> ngrams, _sentence_stats ->
// sentenceStats, _brevity_penalty -> brevityPenalty, _smoothed_precisions ->
// smoothedPrecisions, _geometric_mean -> geometricMean, _score -> score,
// sentence_bleu -> sentenceBleu, corpus_bleu -> corpusBleu), in the same order, with the same
// arguments. No DOM: bleu_page.mjs draws, and the Node tests
// (tests/js/bleu.test.mjs) hold each function to the Python's output.
// n n-gram order (1..maxOrder), c hypothesis length, r reference length.

// what Python's str.isspace calls whitespace (str.split() and rstrip() split
// and strip it): JavaScript's \s holds U+FEFF and lacks U+001C-U+001F, U+0085
const SPACE = String.raw`\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028` +
  String.raw`\u2029\u202f\u205f\u3000`;
const SPACES = new RegExp(`[${SPACE}]+`, 'u');
const TRAILING = new RegExp(`[${SPACE}]+$`, 'u');
// the smoothing methods sacreBLEU offers, with their default values
export const SMOOTHING_METHODS = {none: null, floor: 0.1, 'add-k': 1.0,
  exp: null};

// punctuation that always becomes its own token (_ALWAYS_SPLIT), then the
// rules for '.', ',' and '-' (_TOKENIZER_RULES), applied in this order
const ALWAYS_SPLIT = ' !"#$%&()*+/:;<=>?@[\\]^_`{|}~';
const escaped = ALWAYS_SPLIT.replace(/[\\\]^-]/g, '\\$&');
const TOKENIZER_RULES = [
  [new RegExp(`([${escaped}])`, 'gu'), ' $1 '],
  // a period or comma is split off unless it sits between digits
  [/([^0-9])([.,])/gu, '$1 $2 '],
  [/([.,])([^0-9])/gu, ' $1 $2'],
  // a dash after a digit ("5-year" -> "5 - year")
  [/([0-9])(-)/gu, '$1 $2 '],
];

/** Python's " ".join(text.split()): the words, one space between. */
function splitWords(text) {
  return text.split(SPACES).filter(Boolean);
}

/** aiayn.bleu.tokenize_13a: one line as mteval-v13a tokenizes it.
 *  string -> the tokens joined by single spaces. */
export function tokenize13a(text) {
  if (typeof text !== 'string') {
    throw new TypeError(`tokenize13a expects a string, got ${typeof text}`);
  }
  text = text.replaceAll('<skipped>', '');
  text = text.replaceAll('-\n', '').replaceAll('\n', ' ');
  // undo the four HTML escapes mteval knows, &amp; after &quot; as it does
  if (text.includes('&')) {
    text = text.replaceAll('&quot;', '"').replaceAll('&amp;', '&');
    text = text.replaceAll('&lt;', '<').replaceAll('&gt;', '>');
  }
  text = ` ${text} `;
  for (const [pattern, replacement] of TOKENIZER_RULES) {
    text = text.replace(pattern, replacement);
  }
  return splitWords(text).join(' ');
}

/** aiayn.bleu._ngrams: every n-gram of `tokens` for n = 1..maxOrder, counted.
 *  string[] -> Map(n-gram's tokens joined by ' ' -> {n, count}), in
 *  Python's order: all unigrams, then bigrams, ... */
export function ngrams(tokens, maxOrder) {
  const counts = new Map();
  for (let n = 1; n <= maxOrder; n++) {
    for (let i = 0; i + n <= tokens.length; i++) {
      const key = tokens.slice(i, i + n).join(' ');
      const seen = counts.get(key);
      if (seen) seen.count++;
      else counts.set(key, {n, count: 1});
    }
  }
  return counts;
}

/** aiayn.bleu._closest_ref_len: the reference length closest to hypLen;
 *  on a tie, the shorter reference. */
export function closestRefLen(hypLen, refLens) {
  let best = refLens[0];
  for (const r of refLens) {
    const [d, dBest] = [Math.abs(r - hypLen), Math.abs(best - hypLen)];
    if (d < dBest || (d === dBest && r < best)) best = r;
  }
  return best;
}

/** aiayn.bleu._sentence_stats: one tokenized hypothesis and its tokenized
 *  references -> {c, r, counts, totals}, counts and totals of length
 *  maxOrder (clipped matches and hypothesis n-grams per order). */
export function sentenceStats(hyp, refs, maxOrder) {
  const hypTokens = splitWords(hyp);
  // for each n-gram, the most times any single reference has it
  const maxRefCounts = new Map();
  for (const ref of refs) {
    for (const [key, {count}] of ngrams(splitWords(ref), maxOrder)) {
      maxRefCounts.set(key, Math.max(maxRefCounts.get(key) ?? 0, count));
    }
  }
  const counts = new Array(maxOrder).fill(0);
  const totals = new Array(maxOrder).fill(0);
  for (const [key, {n, count}] of ngrams(hypTokens, maxOrder)) {
    totals[n - 1] += count;
    counts[n - 1] += Math.min(count, maxRefCounts.get(key) ?? 0); // clipping
  }
  const r = closestRefLen(hypTokens.length,
      refs.map((ref) => splitWords(ref).length));
  return {c: hypTokens.length, r, counts, totals};
}

/** aiayn.bleu._brevity_penalty: BP = exp(1 - r / c) when the hypotheses
 *  are shorter than the references (c < r), else 1. */
export function brevityPenalty(hypLen, refLen) {
  if (hypLen >= refLen) return 1.0;
  return hypLen > 0 ? Math.exp(1 - refLen / hypLen) : 0.0;
}

/** aiayn.bleu._smoothed_precisions: each order's precision in percent,
 *  smoothed where it has no match -> [precisions, how many orders have
 *  n-grams]. */
export function smoothedPrecisions(counts, totals, smooth, smoothValue) {
  const k = smoothValue ?? SMOOTHING_METHODS[smooth];
  const precisions = new Array(counts.length).fill(0.0);
  // "exp" smoothing: the i-th order without matches gets 1 / (2^i · total)
  let expDenominator = 1.0;
  for (let n = 1; n <= counts.length; n++) {
    let [correct, total] = [counts[n - 1], totals[n - 1]];
    // add k to matches and totals of orders 2..maxOrder
    if (smooth === 'add-k' && n > 1) {
      [correct, total] = [correct + k, total + k];
    }
    // the hypotheses are too short for n-grams of this order (or higher)
    if (total === 0) return [precisions, n - 1];
    if (correct > 0) {
      precisions[n - 1] = 100.0 * correct / total;
    } else if (smooth === 'exp') {
      expDenominator *= 2;
      precisions[n - 1] = 100.0 / (expDenominator * total);
    } else if (smooth === 'floor') {
      precisions[n - 1] = 100.0 * k / total;
    }
  }
  return [precisions, counts.length];
}

/** aiayn.bleu._geometric_mean: exp of the mean log precision; 0 when a
 *  precision is 0 (log 0) or there is none. */
export function geometricMean(precisions) {
  if (precisions.length === 0 || precisions.some((p) => p === 0.0)) {
    return 0.0;
  }
  let logSum = 0;
  for (const p of precisions) logSum += Math.log(p);
  return Math.exp(logSum / precisions.length);
}

/** aiayn.bleu._score: statistics -> {score, precisions, brevityPenalty,
 *  hypLen, refLen, counts, totals} (BLEUResult's fields; score and
 *  precisions in percent). */
export function score(counts, totals, hypLen, refLen, maxOrder, smooth,
    smoothValue, effectiveOrder) {
  const bp = brevityPenalty(hypLen, refLen);
  let [precisions, found] = [new Array(maxOrder).fill(0.0), maxOrder];
  // not a single matching word: 0, whatever the smoothing
  if (counts.some((m) => m > 0)) {
    [precisions, found] = smoothedPrecisions(counts, totals, smooth,
        smoothValue);
  }
  // sentence-level BLEU: average only over the orders that have n-grams
  const used = effectiveOrder ? precisions.slice(0, found) : precisions;
  return {score: bp * geometricMean(used), precisions, brevityPenalty: bp,
    hypLen, refLen, counts: [...counts], totals: [...totals]};
}

/** aiayn.bleu._prepare: lowercased if asked, trailing whitespace dropped,
 *  tokenized. */
function prepare(text, lowercase) {
  return tokenize13a((lowercase ? text.toLowerCase() : text)
      .replace(TRAILING, ''));
}

/** aiayn.bleu.sentence_bleu: one hypothesis (string) and its references (a
 *  string or a non-empty array of them) -> score's result, with
 *  sacreBLEU's sentence settings ("exp" smoothing, effective order). */
export function sentenceBleu(hypothesis, references, maxOrder = 4,
    smooth = 'exp', smoothValue = null, lowercase = false) {
  const refs = typeof references === 'string' ? [references] : references;
  if (typeof hypothesis !== 'string' || !Array.isArray(refs) ||
      refs.length === 0 || refs.some((ref) => typeof ref !== 'string')) {
    throw new TypeError('sentenceBleu expects a hypothesis string and a ' +
      'reference string or a non-empty array of them');
  }
  if (!(smooth in SMOOTHING_METHODS)) {
    throw new RangeError(`smooth must be one of ` +
      `${Object.keys(SMOOTHING_METHODS).sort().join(', ')}, got ${smooth}`);
  }
  const hyp = prepare(hypothesis, lowercase);
  const prepared = refs.map((ref) => prepare(ref, lowercase));
  const {c, r, counts, totals} = sentenceStats(hyp, prepared, maxOrder);
  return score(counts, totals, c, r, maxOrder, smooth, smoothValue, true);
}

/** aiayn.bleu.corpus_bleu, which equals sacrebleu.corpus_bleu with the
 *  defaults: hypotheses (N strings) and, per hypothesis, a reference string
 *  or an array of them -> score's result from the statistics summed over
 *  the corpus. */
export function corpusBleu(hypotheses, references, maxOrder = 4,
    smooth = 'exp', smoothValue = null, lowercase = false,
    effectiveOrder = false) {
  if (!Array.isArray(hypotheses) || !Array.isArray(references) ||
      hypotheses.length !== references.length || hypotheses.length === 0) {
    throw new TypeError('corpusBleu expects as many references as ' +
      `hypotheses, at least one, got ${hypotheses?.length} and ` +
      `${references?.length}`);
  }
  if (!(smooth in SMOOTHING_METHODS)) {
    throw new RangeError(`smooth must be one of ` +
      `${Object.keys(SMOOTHING_METHODS).sort().join(', ')}, got ${smooth}`);
  }
  let [c, r] = [0, 0];
  const counts = new Array(maxOrder).fill(0);
  const totals = new Array(maxOrder).fill(0);
  hypotheses.forEach((hypothesis, i) => {
    const refs = typeof references[i] === 'string' ? [references[i]] :
      references[i];
    const stats = sentenceStats(prepare(hypothesis, lowercase),
        refs.map((ref) => prepare(ref, lowercase)), maxOrder);
    c += stats.c;
    r += stats.r;
    stats.counts.forEach((m, n) => counts[n] += m);
    stats.totals.forEach((t, n) => totals[n] += t);
  });
  return score(counts, totals, c, r, maxOrder, smooth, smoothValue,
      effectiveOrder);
}
