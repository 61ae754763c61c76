// The page of chapter 11.4: the published translator in the reader's browser, or, where this build of
// the site has no model, the examples of chapter 11.2.
//
// What runs where: onnxruntime-web (WebAssembly, one thread) runs the two int8 graphs that
// `python -m aiayn.export` wrote; translator.mjs, the twin of aiayn.export's search, tokenizes and
// decodes. Nothing heavy loads until the reader asks: then the runtime and the graphs are downloaded
// with a progress bar, checked against the SHA-256 of the build's manifest and kept in the browser's
// Cache Storage, so that a second visit starts at once. The sentence never leaves the machine.
//
// The page's files, all beside this module (tools/site_assets.py puts them there):
//   site.json       what this build holds: the model's manifest (or null), the runtime, the examples
//   model/          manifest.json, encoder.int8.onnx, decoder.int8.onnx, tokenizer.json, translator.json
//   examples.json   chapter 11.2's three sentences and their attention, in thousandths
//   ../vendor/onnxruntime-web/   ort.wasm.min.mjs and the runtime it loads

import {OnnxModel, Vocabulary, attention, detokenize, sourceIds, translateIds} from './translator.mjs';
import {AttentionView, nested} from './heatmap.mjs';

const here = path => new URL(path, import.meta.url);
const ORT = here('../vendor/onnxruntime-web/ort.wasm.min.mjs');
const CACHE = 'aiayn-translator';  // Cache Storage: one entry per file and SHA-256
const EXAMPLE = 'Zwei Hunde spielen im Schnee.';
const TERMS = 'The model learned from Multi30k (Elliott et al., 2016), partly derived from Flickr30k, ' +
  'which its authors provide for non-commercial research and educational purposes only; the translator ' +
  'inherits these terms: research and teaching, not commercial use.';
const HINT = 'This build of the site has no model, so here are three test sentences that the published ' +
  'model translated; to translate your own, build the site with it (AIAYN_MODEL=… make book) or open ' +
  'this page on the book\'s website.';

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

/** onnxruntime-web, the graphs, the tokenizer and the settings, with the progress shown in `ui`. */
async function loadTranslator(site, manifest, manifestUrl, ui) {
  const files = {
    runtime: [here(site.runtime.path), site.runtime],
    encoder: [new URL('encoder.int8.onnx', manifestUrl), manifest.files['encoder.int8.onnx']],
    decoder: [new URL('decoder.int8.onnx', manifestUrl), manifest.files['decoder.int8.onnx']],
    tokenizer: [new URL('tokenizer.json', manifestUrl), manifest.files['tokenizer.json']],
    settings: [new URL('translator.json', manifestUrl), manifest.files['translator.json']],
  };
  const total = Object.values(files).reduce((sum, [, entry]) => sum + entry.bytes, 0);
  let done = 0;
  ui.progress.max = total;
  const progress = n => {
    done += n;
    ui.progress.value = done;
    ui.say(`Loading: ${megabytes(done)} of ${megabytes(total)}`);
  };
  const started = performance.now();
  const [ort, ...loaded] = await Promise.all([
    import(ORT.href),
    ...Object.values(files).map(([url, entry]) => fileOf(url, entry, progress)),
  ]);
  const [runtime, encoder, decoder, tokenizer, settings] = loaded.map(f => f.bytes);
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.wasmPaths = here('../vendor/onnxruntime-web/').href;
  ort.env.wasm.wasmBinary = runtime;
  ui.say('Starting onnxruntime-web…');
  const text = bytes => JSON.parse(new TextDecoder().decode(bytes));
  const model = await OnnxModel.create(ort, encoder, decoder);
  const seconds = (performance.now() - started) / 1000;
  const from = loaded.every(f => f.cached) ? 'from this browser\'s cache' : 'downloaded';
  ui.say(`Ready: ${megabytes(total)} ${from} and started in ${seconds.toFixed(1)} s.`);
  return {model, vocab: new Vocabulary(text(tokenizer)), settings: text(settings)};
}

// --- the page's parts --------------------------------------------------------------------------------

function element(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (typeof v === 'boolean') el[k] = v;
    else el.setAttribute(k, v);
  }
  el.append(...children);
  return el;
}

function paragraph(className, text) {
  return element('p', {class: className}, text);
}

const pieces = (vocab, ids) => ids.map(i => vocab.pieces[i]);
const nextFrame = () => new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve, 0)));

/** Why a sentence cannot be translated, or its source ids. */
function checkSentence(vocab, settings, sentence) {
  if (!sentence.trim()) return {problem: 'Type a German sentence first.'};
  const longest = Math.max(...vocab.pieces.map(p => p.length));
  if (sentence.length / longest > settings.max_len) {  // no need to split it to know
    return {problem: `This sentence is too long: it has ${sentence.length.toLocaleString('en')} ` +
      `characters, at least ${Math.ceil(sentence.length / longest)} pieces, and the model reads at ` +
      `most ${settings.max_len}. Shorten it.`};
  }
  let ids;
  try {
    ids = sourceIds(vocab, sentence, settings.max_len);
  } catch (err) {
    return {problem: `This sentence is too long: ${err.message}. Shorten it.`};
  }
  if (ids === null) {
    return {problem: 'Nothing to translate: none of these characters is in the model\'s vocabulary ' +
      '(it learned the letters, digits and punctuation of German and English captions).'};
  }
  return {ids};
}

/** The translator itself: the text box, greedy or beam search, the English, the attention. */
function live(root, site, manifest, manifestUrl) {
  const beam = manifest.settings.beam;
  const total = site.runtime.bytes + ['encoder.int8.onnx', 'decoder.int8.onnx', 'tokenizer.json',
    'translator.json'].reduce((sum, name) => sum + manifest.files[name].bytes, 0);
  const text = element('textarea', {id: 'aiayn-german', rows: 2, lang: 'de', spellcheck: 'false'});
  text.value = EXAMPLE;
  const choice = (value, label, checked) => element('label', {},
    element('input', {type: 'radio', name: 'aiayn-decoding', value, checked}), ` ${label}`);
  const load = element('button', {type: 'button', class: 'aiayn-load'},
    `Load the translator (${megabytes(total)})`);
  const go = element('button', {type: 'submit', class: 'aiayn-translate', disabled: true}, 'Translate');
  const progress = element('progress', {value: 0, max: total, hidden: true});
  const form = element('form', {class: 'aiayn-form'},
    element('label', {for: 'aiayn-german', class: 'aiayn-field'}, 'German'), text,
    element('div', {class: 'aiayn-row'},
      element('span', {class: 'aiayn-choice'}, choice('greedy', 'greedy', true),
        choice('beam', `beam search, K = ${beam}`, false)),
      load, go, progress));
  const message = element('p', {class: 'aiayn-message', role: 'status', 'aria-live': 'polite'},
    `The model (${megabytes(total - site.runtime.bytes)}) and onnxruntime-web ` +
    `(${megabytes(site.runtime.bytes)}) load when you ask, once: the browser keeps them.`);
  const english = element('p', {class: 'aiayn-english', lang: 'en', hidden: true});
  const timing = element('p', {class: 'aiayn-timing', hidden: true});
  root.append(form, message, english, timing);
  const view = new AttentionView(root);
  root.append(paragraph('aiayn-terms', TERMS));

  const say = (text, isError = false) => {
    message.textContent = text;
    message.classList.toggle('aiayn-error', isError);
  };
  let translator = null;
  load.addEventListener('click', async () => {
    load.disabled = true;
    progress.hidden = false;
    try {
      translator = await loadTranslator(site, manifest, manifestUrl, {progress, say});
      load.hidden = true;
      go.disabled = false;
    } catch (err) {
      say(`The translator could not be loaded: ${err.message}`, true);
      load.disabled = false;
    } finally {
      progress.hidden = true;
    }
  });
  form.addEventListener('submit', async event => {
    event.preventDefault();
    if (translator === null || go.disabled) return;
    const {model, vocab, settings} = translator;
    const {ids, problem} = checkSentence(vocab, settings, text.value);
    if (problem) return say(problem, true);
    const k = form.elements['aiayn-decoding'].value === 'beam' ? beam : 1;
    go.disabled = true;
    say(k === 1 ? 'Translating (greedy)…' : `Translating (beam search, K = ${k})…`);
    try {
      await nextFrame();  // show the disabled button before the search holds the page
      const started = performance.now();
      const ys = await translateIds(model, vocab, ids, settings, k);  // <bos> first
      const ms = performance.now() - started;
      english.textContent = detokenize(vocab, ys);
      timing.textContent = `${k === 1 ? 'Greedy search' : `Beam search (K = ${k})`}: ` +
        `${Math.round(ms).toLocaleString('en')} ms on this machine (one thread), ` +
        `${ids.length} German and ${ys.length - 1} English pieces.`;
      english.hidden = timing.hidden = false;
      const maps = await attention(model, ids, ys);
      view.show({source: pieces(vocab, ids), decoder_in: pieces(vocab, ys.slice(0, -1)),
        decoder_out: pieces(vocab, ys.slice(1))},
      {encoder: nested(maps.encoder), cross: nested(maps.cross), decoder_self: nested(maps.decoderSelf)});
      say('Below: where the model looked while it wrote this translation.');
    } catch (err) {
      say(`The translation failed: ${err.message}`, true);
    } finally {
      go.disabled = false;
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
