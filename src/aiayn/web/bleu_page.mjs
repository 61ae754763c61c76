// The BLEU calculator of chapter 9: the reader types a hypothesis and its
// reference(s) and sees every step of sentence BLEU recomputed as they type:
// the n-grams and their counts, the clipped counts, the precisions, the
// brevity penalty and the score. The numbers come from bleu.mjs, the twin of
// aiayn/bleu.py; this module only draws them. Each number sits in an element
// with data-bleu="<name>" and its unrounded value in data-value (the site's
// browser test reads them: tests/site/test_bleu_page.py).

import {ngrams, sentenceBleu, tokenize13a} from './bleu.mjs';

const here = (path) => new URL(path, import.meta.url);
const MAX_ORDER = 4;
const HYPOTHESIS = 'A man is sleeping on a green couch.';
const REFERENCE = 'A man sleeping in a green room on a couch.';
// what a chip's kind looks like without its colour: a mark before it
const MARKS = {hit: '✓', clip: '✓', miss: '✗'};

/** Mount the calculator in `root`, replacing what it shows where scripts do
 *  not run. */
export function mount(root) {
  root.replaceChildren();
  root.classList.add('aiayn-bleu-calc');
  root.dataset.aiaynLive = ''; // its controls are answered here, in the browser
  addStylesheet();
  const hyp = field(root, 'input', 'hypothesis', 'hypothesis', HYPOTHESIS);
  const ref = field(root, 'textarea', 'references',
      'reference(s), one per line', REFERENCE);
  const lower = document.createElement('input');
  lower.type = 'checkbox';
  lower.name = 'lowercase';
  const box = element('label', 'aiayn-check');
  box.append(lower, ' lowercase both sides');
  const out = element('div', 'aiayn-bleu-out');
  out.setAttribute('aria-live', 'polite');
  root.append(box, out);
  const redraw = () => draw(out, hyp.value, references(ref.value),
      lower.checked);
  for (const control of [hyp, ref]) control.addEventListener('input', redraw);
  lower.addEventListener('change', redraw);
  redraw();
}

function addStylesheet() {
  const href = here('bleu.css').href;
  if (document.querySelector(`link[href="${href}"]`)) return;
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = href;
  document.head.append(link);
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function field(root, tag, name, label, value) {
  const title = element('label', 'aiayn-field', label);
  const control = element(tag);
  control.name = name;
  control.value = value;
  control.spellcheck = false;
  if (tag === 'textarea') control.rows = 2;
  title.append(control);
  root.append(title);
  return control;
}

/** The box's non-empty lines, as BleuCalculator.references reads them. */
function references(text) {
  return text.split(/\r\n|\r|\n/).filter((line) => line.trim());
}

/** A number the test can read: `text` shown, `value` kept whole. */
function number(name, value, text) {
  const node = element('span', 'aiayn-number', text);
  node.dataset.bleu = name;
  node.dataset.value = String(value);
  return node;
}

const percent = (p) => `${p.toFixed(1)}%`;

function draw(out, hypothesis, refs, lowercase) {
  out.replaceChildren();
  if (refs.length === 0) {
    out.append(element('p', 'aiayn-message', 'Type at least one reference.'));
    return;
  }
  const result = sentenceBleu(hypothesis, refs, MAX_ORDER, 'exp', null,
      lowercase);
  const prepare = (t) => tokenize13a(lowercase ? t.toLowerCase() : t);
  const hypTokens = prepare(hypothesis).split(' ').filter(Boolean);
  const refGrams = refs.map((r) =>
    ngrams(prepare(r).split(' ').filter(Boolean), MAX_ORDER));
  const tokens = element('p', 'aiayn-tokens');
  tokens.append('tokens (13a): ', element('code', '', hypTokens.join(' | ')));
  out.append(tokens, table(result, ngrams(hypTokens, MAX_ORDER), refGrams));
  const total = element('p', 'aiayn-total');
  total.append(`c = `, number('c', result.hypLen, String(result.hypLen)),
      ', r = ', number('r', result.refLen, String(result.refLen)),
      ', BP = ', number('bp', result.brevityPenalty,
          result.brevityPenalty.toFixed(3)),
      ' → BLEU = ', number('score', result.score, result.score.toFixed(2)));
  out.append(total);
}

/** One row per order: each hypothesis n-gram with its count, clipped to the
 *  most any one reference has; matches / n-grams; the precision. Returns
 *  the table in a box of its own. */
function table(result, hypGrams, refGrams) {
  const t = element('table', 'aiayn-bleu-table');
  const head = element('tr');
  for (const title of ['n', `n-grams: ${MARKS.hit} in a reference, ` +
    `${MARKS.miss} in none, ×3 → 2 clipped`, 'clipped / all', 'p_n']) {
    head.append(element('th', '', title));
  }
  t.append(head);
  for (let n = 1; n <= MAX_ORDER; n++) {
    const row = element('tr');
    const grams = element('td', 'aiayn-grams');
    for (const [key, g] of hypGrams) {
      if (g.n !== n) continue;
      const most = Math.max(0, ...refGrams.map((m) => m.get(key)?.count ?? 0));
      const clipped = Math.min(g.count, most);
      const kind = clipped === 0 ? 'miss' : clipped < g.count ? 'clip' : 'hit';
      grams.append(chip(key, g.count, clipped, kind));
    }
    const [m, all] = [result.counts[n - 1], result.totals[n - 1]];
    const ratio = element('td');
    ratio.append(number(`m${n}`, m, String(m)), ' / ',
        number(`t${n}`, all, String(all)));
    const p = result.precisions[n - 1];
    const precision = element('td');
    precision.append(number(`p${n}`, p, percent(p)));
    if (m === 0 && p > 0) {
      precision.append(' ', element('span', 'aiayn-smoothed', '(smoothed)'));
    }
    row.append(element('td', '', String(n)), grams, ratio, precision);
    t.append(row);
  }
  const box = element('div', 'aiayn-table-box'); // scrolls sideways on
  box.append(t); // a phone, instead of the page
  return box;
}


/** An n-gram as a chip: its mark, the n-gram, how often the hypothesis
 *  has it and, where a reference has it fewer times, what that clips it
 *  to ("✓ the ×3 → 2"). */
function chip(key, count, clipped, kind) {
  const times = count === 1 ? '' : ` ×${count}`;
  const clip = kind === 'clip' ? ` → ${clipped}` : '';
  const node = element('span', `aiayn-gram aiayn-${kind}`,
      `${MARKS[kind]}\u202f${key}${times}${clip}`); // a narrow space
  node.title = kind === 'miss' ? 'in no reference' : kind === 'hit' ?
    'in a reference' : `clipped to ${clipped}`;
  return node;
}
