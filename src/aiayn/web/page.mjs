// The page of chapter 11.4: the published translator in the reader's browser, or, where this build of
// the site has no model, the examples of chapter 11.2.
//
// What runs where: onnxruntime-web (WebAssembly, one thread) runs the three int8 graphs that
// `python -m aiayn.export` wrote; translator.mjs, the twin of aiayn.export.translator, tokenizes and
// decodes, scoring every id at each step unless the reader switches the shortlist on (FIDELITY says
// what that costs). Both run in a Web Worker (worker.mjs), so that the page answers the reader while a long
// sentence is searched. Nothing heavy loads until the reader asks: then the runtime and the graphs are
// downloaded here with a progress bar, checked against the SHA-256 of the build's manifest, kept in the
// browser's Cache Storage (a second visit does not download them again) and handed to the worker. The
// sentence never leaves the machine.
//
// The page's files, all beside this module (tools/site_assets.py puts them there):
//   site.json       what this build holds: the model's manifest (or null), the runtime, the bytes the
//                   page downloads, the examples
//   model/          manifest.json, encoder.int8.onnx, cross_kv.int8.onnx, decoder_step.int8.onnx,
//                   tokenizer.json, translator.json, shortlist.json; heads.json, the head grid's 100 test
//                   sentences and presets (fetched once the translator is loaded)
//   examples.json   chapter 11.2's three sentences and their attention, in thousandths
//   worker.mjs      the search, off the main thread
//   heatmap.mjs     the attention map; beam_tree.mjs, a beam search's tree; heads.mjs, the head grid
//   ../vendor/onnxruntime-web/   ort.wasm.min.mjs and the runtime it loads

import {BeamTreeView} from './beam_tree.mjs';
import {element} from './dom.mjs';
import {HeadGrid} from './heads.mjs';
import {AttentionView} from './heatmap.mjs';

const here = path => new URL(path, import.meta.url);
const ORT = here('../vendor/onnxruntime-web/ort.wasm.min.mjs');
const CACHE = 'aiayn-translator';  // Cache Storage: one entry per file and SHA-256
// what the model knows, for the line under the box: captions it translates well, and everyday German
// it does not (the published model turns "Ich habe Hunger." into nonsense about a break or work)
const GOOD = ['Zwei Hunde spielen im Schnee.', 'Ein Mann fährt mit dem Fahrrad eine Straße entlang.',
  'Eine Frau verkauft Obst auf einem Markt.'];
const POOR = 'Ich habe Hunger.';
const TERMS = 'The model learned from Multi30k (Elliott et al., 2016), partly derived from Flickr30k, ' +
  'which its authors provide for non-commercial research and educational purposes only; the translator ' +
  'inherits these terms: research and teaching, not commercial use.';
// how often the page's search writes the model's own sentence (PyTorch's, float32) on 100 everyday
// sentences, int8, every id or the shortlist: tools/page_fidelity.py's src/aiayn/results/page_fidelity.json
// (tests/site/test_translator.py holds these equal to it)
export const FIDELITY = {sentences: 100, every: {greedy: 86, beam: 84}, shortlist: {greedy: 19, beam: 22}};
const HINT = 'The model is not part of this build of the site, so here are three test sentences that the ' +
  'published model translated; to translate your own, build the site with it (AIAYN_MODEL=… make book) or ' +
  'open this page on the book\'s website.';

/** Mount the translator in `root`, replacing what it shows where scripts do not run. */
export async function mount(root) {
  root.replaceChildren();
  root.classList.add('aiayn-translator');
  root.dataset.aiaynLive = '';  // its controls are answered here, in the browser (the site tests look)
  addStylesheet();
  try {
    const site = await getJson(here('site.json'));
    const manifestUrl = site.model && here(site.model);
    const manifest = manifestUrl && await getJson(manifestUrl).catch(() => null);
    if (manifest) live(root, site, manifest, manifestUrl);
    else await examples(root, site);
  } catch (err) {
    root.append(paragraph('aiayn-message aiayn-error', `The translator could not start: ${err.message}`));
  }
}

// --- loading ---------------------------------------------------------------------------------------

function addStylesheet() {
  const href = here('page.css').href;
  if (document.querySelector(`link[href="${href}"]`)) return;
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = href;
  document.head.append(link);
}

async function getJson(url) {
  const response = await fetch(url, {cache: 'no-cache'});
  if (!response.ok) throw new Error(`${url.pathname}: HTTP ${response.status}`);
  return response.json();
}

async function sha256(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return Array.from(new Uint8Array(digest), b => b.toString(16).padStart(2, '0')).join('');
}

/** Download `url` as bytes, telling `progress(n)` the size of each piece as it arrives. */
async function download(url, progress) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url.pathname}: HTTP ${response.status}`);
  const reader = response.body.getReader();
  const pieces = [];
  let length = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    pieces.push(value);
    length += value.length;
    progress(value.length);
  }
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const piece of pieces) {
    bytes.set(piece, at);
    at += piece.length;
  }
  return bytes;
}

/**
 * A file of the build as bytes, checked against its SHA-256: from Cache Storage when it holds this
 * version, else downloaded (and kept there). Where the browser has no Cache Storage or no
 * crypto.subtle (a page served over plain http), the file is downloaded and used as it comes.
 * @returns {Promise<{bytes: Uint8Array, cached: boolean}>}
 */
async function fileOf(url, entry, progress) {
  const checks = Boolean(globalThis.crypto && crypto.subtle);
  const cache = checks && globalThis.caches ? await caches.open(CACHE).catch(() => null) : null;
  const key = `${url.href}?sha256=${entry.sha256}`;
  if (cache) {
    const hit = await cache.match(key);
    if (hit) {
      const bytes = new Uint8Array(await hit.arrayBuffer());
      if (await sha256(bytes) === entry.sha256) {
        progress(entry.bytes);
        return {bytes, cached: true};
      }
      await cache.delete(key);
    }
  }
  const bytes = await download(url, progress);
  if (checks) {
    const digest = await sha256(bytes);
    if (digest !== entry.sha256) {
      throw new Error(`${url.pathname} arrived damaged (SHA-256 ${digest.slice(0, 12)}…, ` +
        `the manifest says ${entry.sha256.slice(0, 12)}…): reload the page to try again`);
    }
  }
  if (cache) {
    for (const old of await cache.keys()) {  // an older version of the same file
      if (old.url.split('?')[0] === url.href) await cache.delete(old);
    }
    await cache.put(key, new Response(bytes)).catch(() => {});  // a full disk only costs the next visit
  }
  return {bytes, cached: false};
}

const megabytes = n => `${(n / 1e6).toFixed(1)} MB`;

/**
 * The worker, asked one thing at a time: ask(kind, fields, transfer, onStep) -> a Promise of its answer
 * (worker.mjs lists what it answers; onStep sees each draw of a sampling as it comes); a worker that fails
 * rejects every question still open.
 */
function startWorker() {
  const worker = new Worker(here('worker.mjs'), {type: 'module'});
  const open = new Map();  // id -> {resolve, reject}
  let next = 0;
  worker.addEventListener('message', ({data}) => {
    if ('step' in data) return open.get(data.id)?.onStep(data.step);  // a draw, while sampling
    const {resolve, reject} = open.get(data.id);
    open.delete(data.id);
    if ('error' in data) reject(new Error(data.error));
    else resolve(data.value);
  });
  worker.addEventListener('error', event => {
    event.preventDefault();
    for (const {reject} of open.values()) {
      reject(new Error(event.message || 'the translator\'s worker did not start'));
    }
    open.clear();
  });
  return (kind, fields = {}, transfer = [], onStep = () => {}) => new Promise((resolve, reject) => {
    const id = next++;
    open.set(id, {resolve, reject, onStep});
    worker.postMessage({id, kind, ...fields}, transfer);
  });
}

/** onnxruntime-web, the graphs, the tokenizer and the settings, downloaded with the progress shown in `ui`
 * and handed to a worker; returns that worker's `ask`. */
async function loadTranslator(site, manifest, manifestUrl, ui) {
  const files = {
    runtime: [here(site.runtime.path), site.runtime],
    encoder: [new URL('encoder.int8.onnx', manifestUrl), manifest.files['encoder.int8.onnx']],
    crossKv: [new URL('cross_kv.int8.onnx', manifestUrl), manifest.files['cross_kv.int8.onnx']],
    decoderStep: [new URL('decoder_step.int8.onnx', manifestUrl), manifest.files['decoder_step.int8.onnx']],
    tokenizer: [new URL('tokenizer.json', manifestUrl), manifest.files['tokenizer.json']],
    settings: [new URL('translator.json', manifestUrl), manifest.files['translator.json']],
  };
  if (manifest.files['shortlist.json']) {  // an export made with --shortlist none has none
    files.shortlist = [new URL('shortlist.json', manifestUrl), manifest.files['shortlist.json']];
  }
  const total = site.download.bytes;
  let done = 0;
  ui.progress.max = total;
  const progress = n => {
    done += n;
    ui.progress.value = done;
    ui.say(`Loading: ${megabytes(done)} of ${megabytes(total)}`);
  };
  const started = performance.now();
  const ask = startWorker();
  const loaded = await Promise.all(Object.values(files).map(([url, entry]) => fileOf(url, entry, progress)));
  const bytes = Object.fromEntries(Object.keys(files).map((name, i) => [name, loaded[i].bytes.buffer]));
  ui.say('Starting onnxruntime-web…');
  await ask('load', {ort: ORT.href, wasmPaths: here('../vendor/onnxruntime-web/').href,
    ...bytes}, Object.values(bytes));
  const seconds = (performance.now() - started) / 1000;
  const from = loaded.every(f => f.cached) ? 'from this browser\'s cache' : 'downloaded';
  ui.say(`Ready: ${megabytes(total)} ${from} and started in ${seconds.toFixed(1)} s. ` +
    'Press Enter in the box (Shift+Enter for a new line) or Translate.');
  return ask;
}

// --- the page's parts --------------------------------------------------------------------------------

function paragraph(className, text) {
  return element('p', {class: className}, text);
}

/** The line under the box: what the model learned from, sentences it translates well and one it does not,
 * each a link that puts it in the box. */
function knows(text) {
  const sample = sentence => {
    const link = element('a', {href: '#aiayn-german', class: 'aiayn-sample', lang: 'de'}, sentence);
    link.addEventListener('click', event => {
      event.preventDefault();
      text.value = sentence;
      text.focus();
    });
    return ['“', link, '”'];
  };
  const good = GOOD.flatMap((sentence, i) =>
    [i === 0 ? '' : i === GOOD.length - 1 ? ' or ' : ', ', ...sample(sentence)]);
  return element('p', {class: 'aiayn-knows'},
    'The model learned from the captions of 29,000 photographs (Multi30k): people, animals, streets, ' +
    'sports. It translates captions like ', ...good, ' well, but not everyday German: ', ...sample(POOR),
    ' comes out as nonsense. Click a sentence to put it in the box.');
}

/** Sampling's settings (decoding.sample's temperature, top_k, top_p and seed), shown while "sampling" is
 * chosen; `read()` gives them as the worker takes them (an empty top-k or top-p keeps every token). */
function samplingControls() {
  const field = (label, attrs) => {
    const input = element('input', {type: 'number', class: 'aiayn-knob', ...attrs});
    return [element('label', {}, `${label} `, input), input];
  };
  const [t, temperature] = field('temperature', {name: 'temperature', min: 0.05, max: 5, step: 0.05, value: 1});
  const [k, topK] = field('top-k', {name: 'top-k', min: 1, step: 1, placeholder: 'all'});
  const [p, topP] = field('top-p', {name: 'top-p', min: 0.05, max: 1, step: 0.05, value: 0.9});
  const [s, seed] = field('seed', {name: 'seed', min: 0, step: 1, value: 1});
  const box = element('div', {class: 'aiayn-row aiayn-sampling', hidden: true}, t, k, p, s);
  const number = (input, empty) => (input.value.trim() === '' ? empty : Number(input.value));
  const read = () => ({temperature: number(temperature, null), topK: number(topK, null),
    topP: number(topP, null), seed: number(seed, null)});  // null: an empty field
  return {box, read};
}

/** The draws of a sampling, one line each as the worker posts it: the piece drawn, then the five most
 * probable pieces of that step with bars as long as their probability. */
function drawsView() {
  // a list that scrolls: a stop of the Tab key, in every browser, so that its arrows scroll it
  const list = element('ol', {class: 'aiayn-draws', hidden: true, tabindex: 0,
    'aria-label': 'the draws, one a line: the piece drawn, then the most probable pieces of its step'});
  const bar = ([piece, p], chosen) => element('span', {class: `aiayn-bar${chosen ? ' aiayn-chosen' : ''}`,
    style: `--p: ${(100 * p).toFixed(1)}%`, title: `${piece}: ${p.toFixed(3)}`}, `${piece} ${p.toFixed(2)}`);
  return {
    list,
    clear() { list.replaceChildren(); list.hidden = true; },
    add({token, p, top}) {
      const shown = top.some(([piece]) => piece === token) ? top : [...top, [token, p]];
      list.append(element('li', {}, element('strong', {}, token), ' ',
        ...shown.map(entry => bar(entry, entry[0] === token))));
      list.hidden = false;
      list.scrollTop = list.scrollHeight;
    },
  };
}

/** The shortlist switch, off: every id is scored. Its line says what it trades: the speed of beam search on
 * this machine (`measured(times)`, once the worker has timed it both ways, after the page is ready) against
 * how often the page then writes the model's own sentence. */
function shortlistSwitch(beam) {
  const box = element('input', {type: 'checkbox', name: 'aiayn-shortlist', checked: false});
  const {sentences, every, shortlist} = FIDELITY;
  const speed = element('span', {class: 'aiayn-speed'}, 'its speed is timed once the translator is ready');
  const line = element('p', {class: 'aiayn-trade'},
    element('label', {}, box, ' Score a shortlist'), ': at each step only the few hundred English pieces ' +
    'that training captions pair with your German ones, not all 8,000 (', speed, '). It costs fidelity: ' +
    `on ${sentences} everyday sentences the page writes the model's own sentence (PyTorch's) for ` +
    `${every.greedy} (greedy) and ${every.beam} (beam search) scoring every piece, for ${shortlist.greedy} and ` +
    `${shortlist.beam} with the shortlist.`);
  const measured = ({every: all, shortlist: listed}) => {
    speed.textContent = listed === null ? 'this export has none'
      : `beam search, K = ${beam}, of a test sentence here: ${Math.round(listed)} ms, ` +
        `not ${Math.round(all)} ms`;
    box.disabled = listed === null;
  };
  return {line, box, measured};
}

const describe = ({temperature, topK, topP, seed}) => `sampling (T = ${temperature}, ` +
  `top-k ${topK ?? 'all'}, top-p ${topP ?? 'all'}, seed ${seed})`;

/** The translator itself: the text box, greedy or beam search or sampling, the English, the attention. */
function live(root, site, manifest, manifestUrl) {
  const beam = manifest.settings.beam;
  const total = site.download.bytes;
  const text = element('textarea', {id: 'aiayn-german', rows: 2, lang: 'de', spellcheck: 'false'});
  text.value = GOOD[0];
  const choice = (value, label, checked) => element('label', {},
    element('input', {type: 'radio', name: 'aiayn-decoding', value, checked}), ` ${label}`);
  const load = element('button', {type: 'button', class: 'aiayn-load'},
    `Load the translator (${megabytes(total)})`);
  const go = element('button', {type: 'submit', class: 'aiayn-translate', disabled: true}, 'Translate');
  const progress = element('progress', {value: 0, max: total, hidden: true});
  const knobs = samplingControls();
  const listed = shortlistSwitch(beam);
  const form = element('form', {class: 'aiayn-form', novalidate: ''},  // the worker checks, as Python
    element('label', {for: 'aiayn-german', class: 'aiayn-field'}, 'German'), text, knows(text),
    element('div', {class: 'aiayn-row'},
      element('span', {class: 'aiayn-choice'}, choice('greedy', 'greedy', true),
        choice('beam', `beam search, K = ${beam}`, false), choice('sample', 'sampling', false)),
      load, go, progress), listed.line, knobs.box);
  const message = element('p', {class: 'aiayn-message', role: 'status', 'aria-live': 'polite'},
    `Press the button to load the translator: the model (${megabytes(total - site.runtime.bytes)}) and ` +
    `onnxruntime-web (${megabytes(site.runtime.bytes)}) load once, and the browser keeps them.`);
  const english = element('p', {class: 'aiayn-english', lang: 'en', hidden: true});
  const timing = element('p', {class: 'aiayn-timing', hidden: true});
  // what a screen reader announces when a translation is done: the English and its time
  const announce = element('p', {class: 'aiayn-announce', role: 'status', 'aria-live': 'polite'});
  const draws = drawsView();
  const headsSlot = element('div', {class: 'aiayn-heads-slot'});  // the head grid, once loaded
  root.append(form, headsSlot, message, english, timing, announce, draws.list);
  const tree = new BeamTreeView(root);  // a beam search's tree, drawn above its attention
  const view = new AttentionView(root);
  const chosen = () => form.elements['aiayn-decoding'].value;
  form.addEventListener('change', () => { knobs.box.hidden = chosen() !== 'sample'; });
  text.addEventListener('keydown', event => {  // Enter translates, Shift+Enter starts a new line
    if (event.key !== 'Enter' || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    if (ask === null) say('Load the translator first (the button below the box), then press Enter.');
    else form.requestSubmit();
  });
  root.append(paragraph('aiayn-terms', TERMS));

  const say = (text, isError = false) => {
    message.textContent = text;
    message.classList.toggle('aiayn-error', isError);
  };
  const clear = () => {  // no answer on screen but the one to the sentence in the box
    english.hidden = timing.hidden = true;
    english.textContent = timing.textContent = '';
    draws.clear();
    tree.clear();
    view.clear();
  };
  let ask = null;
  let grid = null;  // the head grid, where this build has heads.json
  let asked = false;  // a sentence was translated: a change of the mask translates it again
  let again = false;  // the mask changed while a sentence was being translated
  let pending = null;  // the timer that translates again after a change of the mask
  const translateAgain = () => {
    if (!asked) return;  // nothing translated yet
    clearTimeout(pending);
    pending = setTimeout(() => {  // a burst of clicks translates once
      if (go.disabled) again = true;
      else form.requestSubmit();
    }, 150);
  };
  let everyHead = null;  // the BLEU of every head on the 100 sentences, scored once
  const score = async () => {
    const {pairs} = grid.record;
    const mask = grid.headMask();
    const run = async (what, headMask) => {
      grid.scoring(what, 0);
      return ask('score', {pairs, headMask}, [], k => grid.scoring(what, k));
    };
    try {
      everyHead = everyHead ?? await run('every head', null);
      const ours = mask === null ? everyHead : await run('your heads', mask);
      const on = (mask ?? grid.mask).flat(2).filter(v => v === 1).length;
      grid.say(`sacreBLEU of the first ${pairs.length} test sentences (greedy, int8): ` +
        `${ours.bleu.toFixed(2)} with ${on} of ${grid.mask.flat(2).length} heads, ` +
        `${everyHead.bleu.toFixed(2)} with every head; ` +
        `${(ours.ms / 1000).toFixed(1)} s on this machine (one thread).`);
      grid.showLines(ours.hypotheses, everyHead.hypotheses);
    } catch (err) {
      grid.say(`The scoring failed: ${err.message}`);
    } finally {
      grid.scoring('', null);
    }
  };
  const addGrid = async () => {  // the translator works without it: a failure is said in its place
    if (!site.heads) return;  // a build without the test sentences: no grid
    try {
      const {bytes} = await fileOf(here(site.heads.path), site.heads, () => {});
      const record = JSON.parse(new TextDecoder().decode(bytes));
      grid = new HeadGrid(headsSlot, record, {onChange: translateAgain, onScore: score});
    } catch (err) {
      headsSlot.append(paragraph('aiayn-message aiayn-error', `The head grid could not load: ${err.message}`));
    }
  };
  load.addEventListener('click', async () => {
    load.disabled = true;
    progress.hidden = false;
    try {
      ask = await loadTranslator(site, manifest, manifestUrl, {progress, say});
      ask('speed').then(listed.measured, () => {});  // timed while the reader types: a switch's line only
      await addGrid();
      load.hidden = true;
      go.disabled = false;
      go.focus();  // the button that was pressed is gone: the next one takes the focus
    } catch (err) {
      say(`The translator could not be loaded: ${err.message}`, true);
      load.disabled = false;
    } finally {
      progress.hidden = true;
    }
  });
  form.addEventListener('submit', async event => {
    event.preventDefault();
    if (ask === null || go.disabled) return;
    const k = chosen() === 'beam' ? beam : 1;
    const sampling = chosen() === 'sample' ? knobs.read() : null;
    const shortlist = sampling === null && listed.box.checked;  // sampling draws from every id
    asked = true;
    const headMask = grid ? grid.headMask() : null;
    const heads = headMask === null ? '' :
      `, ${headMask.flat(2).filter(v => v === 1).length} of ${headMask.flat(2).length} heads`;
    const how = (sampling ? describe(sampling)
      : `${k === 1 ? 'greedy' : `beam search, K = ${k}`}${shortlist ? ', shortlist' : ''}`) + heads;
    clear();
    announce.textContent = '';
    go.disabled = true;
    say(`Translating (${how})…`);
    try {  // in the worker
      const answer = await ask('translate', {sentence: text.value, beam: k, shortlist, sampling, headMask}, [],
        draws.add);
      if (answer.problem) return say(answer.problem, true);
      english.textContent = answer.english;
      timing.textContent = `${how[0].toUpperCase()}${how.slice(1)}: ` +
        `${Math.round(answer.ms).toLocaleString('en')} ms on this machine (one thread), ` +
        `${answer.ids.length} German and ${answer.ys.length - 1} English pieces.`;
      english.hidden = timing.hidden = false;
      announce.textContent = `${answer.english} (${Math.round(answer.ms).toLocaleString('en')} ms)`;
      if (answer.tree) tree.show(answer.tree, answer.source);  // the search's tree, beside the English
      say('Drawing where the model looked…');  // the English is shown: the map follows
      const {tokens, maps} = await ask('attention', {ids: answer.ids, ys: answer.ys, headMask});
      view.show(tokens, maps);
      const first = answer.tree ? 'the search\'s tree, then ' : '';
      say(sampling === null ? `Below: ${first}where the model looked while it wrote this translation.`
        : 'Below: each draw, with the five most probable pieces of its step, then where the model looked. ' +
          `The same settings and seed give this sentence in Python: onnx_translator.sample on these files, ` +
          `and, nearly always, decoding.sample(…, seed=${sampling.seed}) with the PyTorch model (chapter 8.4): ` +
          'int8 rounding can move a draw.');
    } catch (err) {
      say(`The translation failed: ${err.message}`, true);
    } finally {
      go.disabled = false;
      if (again) {  // the reader changed the heads meanwhile: this answer is out of date
        again = false;
        form.requestSubmit();
      } else if (!grid?.box.contains(document.activeElement)) {
        text.focus({preventScroll: true});  // back in the box, for the next sentence
      }
    }
  });
}

/** Without a model: chapter 11.2's sentences, their translations and attention, and how to get more. */
async function examples(root, site) {
  const record = await getJson(here(site.examples));
  const scale = 10 ** record.decimals;
  const lines = Object.keys(record.lines).sort((a, b) => a - b);
  const text = tokens => tokens.filter(p => !/^<\/?s>$/.test(p)).join('').replaceAll('▁', ' ').trim();
  const menu = element('select', {class: 'aiayn-example'}, ...lines.map(line => element('option',
    {value: line}, `test line ${line}: ${text(record.lines[line].tokens.source)}`)));
  const german = element('p', {class: 'aiayn-german', lang: 'de'});
  const english = element('p', {class: 'aiayn-english', lang: 'en'});
  root.append(paragraph('aiayn-message aiayn-hint', HINT),
    element('label', {class: 'aiayn-field'}, 'Sentence ', menu), german, english);
  const view = new AttentionView(root);
  root.append(paragraph('aiayn-terms', TERMS));
  const show = () => {
    const {tokens, maps} = record.lines[menu.value];
    german.textContent = `German: ${text(tokens.source)}`;
    english.textContent = `The model (beam search): ${text(tokens.decoder_out)}`;
    const weights = kind => maps[kind].map(layer => layer.map(head =>  // thousandths -> weights
      head.map(row => row.map(w => w / scale))));
    view.show(tokens, {encoder: weights('encoder'), cross: weights('cross'),
      decoder_self: weights('decoder_self')});
  };
  menu.addEventListener('change', show);
  show();
}
