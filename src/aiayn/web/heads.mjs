// The head grid of chapter 11.4's translator (page.mjs): the reader switches attention heads off, as
// aiayn.model.set_head_mask does, sees the sentence translated again, and scores 100 test sentences.
//
// One toggle per head: 3 kinds (encoder self-attention, decoder self-attention, cross-attention) × N
// layers × h heads, real buttons with aria-pressed (pressed: the head runs). The grid is one stop of the
// Tab key: the arrow keys move within it (Home and End to a row's ends), Space or Enter toggles. Presets
// set the whole mask at once, from heads.json (tools/site_assets.py writes it beside the model): every
// head; one head a layer, the head chapter 11.2's record kept in its "one head" run; no cross-attention in
// layer n; without the heads whose removal alone cost BLEU beyond the noise in 11.2's record.
// The mask is nested arrays [kind][layer][head] of 0 and 1, translator.mjs's headMask. No DOM outside
// `root`; the worker does the translating.

import {element} from './dom.mjs';

const KIND_NAMES = ['encoder self-attention', 'decoder self-attention', 'cross-attention'];
const KIND_SHORT = ['encoder', 'decoder', 'cross'];

/** A mask of `shape` [kinds, N, h] with every entry `value`. */
export function filled([kinds, N, h], value) {
  return Array.from({length: kinds}, () => Array.from({length: N}, () => Array(h).fill(value)));
}

/** Whether every head of `mask` runs. */
export function allOn(mask) {
  return mask.flat(2).every(v => v === 1);
}

/**
 * The presets, in the menu's order: [{id, label, mask}].
 * @param {{shape: number[], kept: number[][], costly: number[][]}} record heads.json
 */
export function presets({shape, kept, costly}) {
  const [, N] = shape;
  const one = filled(shape, 0);
  kept.forEach((layers, k) => layers.forEach((i, n) => { one[k][n][i] = 1; }));
  const keptText = kept.map((layers, k) => `${KIND_SHORT[k]} ${layers.map(i => i + 1).join(', ')}`).join('; ');
  const list = [
    {id: 'all', label: 'every head', mask: filled(shape, 1)},
    {id: 'one', label: `one head a layer, the one 11.2 kept (head ${keptText})`, mask: one},
  ];
  for (let n = 0; n < N; n++) {
    const mask = filled(shape, 1);
    mask[2][n].fill(0);
    list.push({id: `no-cross-${n + 1}`, label: `no cross-attention in layer ${n + 1}`, mask});
  }
  const without = filled(shape, 1);
  for (const [k, n, i] of costly) without[k][n][i] = 0;
  const named = costly.map(([k, n, i]) => `${KIND_SHORT[k]} layer ${n + 1} head ${i + 1}`).join(', ');
  list.push({id: 'costly', label: `without the ${costly.length} heads 11.2 found costly (${named})`,
    mask: without});
  return list;
}

/**
 * The grid, its presets and the scoring button, in a <details> appended to `root`.
 * `onChange(mask)` is told each new mask (a click, a key, a preset); `onScore()` runs when the reader
 * asks for the BLEU and reports through `scoring`.
 */
export class HeadGrid {
  constructor(root, record, {onChange, onScore}) {
    this.record = record;
    this.presets = presets(record);
    this.mask = filled(record.shape, 1);
    this.onChange = onChange;
    const [kinds, N, h] = record.shape;
    this.menu = element('select', {class: 'aiayn-preset', name: 'aiayn-preset'},
      ...this.presets.map(p => element('option', {value: p.id}, p.label)),
      element('option', {value: 'own', disabled: true}, 'your own choice'));
    this.menu.addEventListener('change', () => {
      const preset = this.presets.find(p => p.id === this.menu.value);
      if (preset) this.set(structuredClone(preset.mask));
    });
    this.grid = element('div', {class: 'aiayn-head-grid', role: 'group',
      'aria-label': `attention heads: ${kinds} kinds × ${N} layers × ${h} heads; arrow keys move, ` +
        'Space switches a head off or on'});
    this.grid.style.setProperty('--heads', h);
    this.buttons = [];  // [row][head], rows kind-major: kind k, layer n is row k * N + n
    for (let k = 0; k < kinds; k++) {
      for (let n = 0; n < N; n++) {
        const row = [];
        this.grid.append(element('span', {class: 'aiayn-head-row', 'aria-hidden': 'true'},
          `${KIND_SHORT[k]} ${n + 1}`));
        for (let i = 0; i < h; i++) {
          const button = element('button', {type: 'button', class: 'aiayn-head-toggle', tabindex: -1,
            'aria-pressed': 'true', 'aria-label': `${KIND_NAMES[k]}, layer ${n + 1}, head ${i + 1}`,
            'data-kind': k, 'data-layer': n, 'data-head': i}, String(i + 1));
          button.addEventListener('click', () => {
            this.focus(button);
            const mask = structuredClone(this.mask);
            mask[k][n][i] = 1 - mask[k][n][i];
            this.set(mask);
          });
          row.push(button);
          this.grid.append(button);
        }
        this.buttons.push(row);
      }
    }
    this.buttons[0][0].tabIndex = 0;  // one stop of the Tab key: the roving tabindex
    this.grid.addEventListener('keydown', event => this.move(event));
    this.scoreButton = element('button', {type: 'button', class: 'aiayn-score'},
      `Score ${record.pairs.length} test sentences`);
    this.scoreButton.addEventListener('click', onScore);
    this.progress = element('progress', {value: 0, max: record.pairs.length, hidden: true,
      'aria-label': 'sentences translated'});
    this.line = element('p', {class: 'aiayn-heads-line', role: 'status', 'aria-live': 'polite'});
    // the scored translations, those that differ from every head's marked
    this.list = element('ol', {class: 'aiayn-heads-list', lang: 'en', tabindex: 0,  // it scrolls: a Tab stop
      'aria-label': 'the scored translations, one a line'});
    this.summary = element('summary', {}, 'The translations');
    this.lines = element('details', {class: 'aiayn-heads-lines', hidden: true}, this.summary, this.list);
    this.count = element('span', {class: 'aiayn-heads-count'});
    const label = element('label', {class: 'aiayn-preset-label'}, 'Preset ', this.menu);
    this.box = element('details', {class: 'aiayn-heads'},
      element('summary', {}, 'Switch attention heads off'),
      element('p', {class: 'aiayn-heads-help'},
        'Each button is one head (pressed: it runs). A head switched off gives W', element('sup', {}, 'O'),
        ' nothing, as set_head_mask does in chapter 11.2; your sentence is translated again at once. ',
        this.count),
      element('div', {class: 'aiayn-row'}, label),
      this.grid,
      element('div', {class: 'aiayn-row'}, this.scoreButton, this.progress),
      this.line, this.lines);
    root.append(this.box);
    this.show();
  }

  /** The mask the worker takes: null when every head runs (the page's search as before). */
  headMask() {
    return allOn(this.mask) ? null : structuredClone(this.mask);
  }

  set(mask) {
    this.mask = mask;
    this.show();
    this.onChange(this.headMask());
  }

  show() {
    this.buttons.forEach((row, r) => row.forEach((button, i) => {
      const [k, n] = [Math.floor(r / this.record.shape[1]), r % this.record.shape[1]];
      button.setAttribute('aria-pressed', String(this.mask[k][n][i] === 1));
    }));
    const preset = this.presets.find(p => JSON.stringify(p.mask) === JSON.stringify(this.mask));
    this.menu.value = preset ? preset.id : 'own';
    const on = this.mask.flat(2).filter(v => v === 1).length;
    this.count.textContent = `${on} of ${this.mask.flat(2).length} heads run.`;
  }

  focus(button) {
    for (const row of this.buttons) for (const b of row) b.tabIndex = -1;
    button.tabIndex = 0;
    button.focus();
  }

  /** Arrow keys within the grid, Home and End to a row's ends. */
  move(event) {
    const button = event.target.closest('.aiayn-head-toggle');
    if (!button) return;
    const r = this.buttons.findIndex(row => row.includes(button));
    const i = this.buttons[r].indexOf(button);
    const [rows, h] = [this.buttons.length, this.buttons[0].length];
    const to = {ArrowLeft: [r, i - 1], ArrowRight: [r, i + 1], ArrowUp: [r - 1, i], ArrowDown: [r + 1, i],
      Home: [r, 0], End: [r, h - 1]}[event.key];
    if (!to) return;
    event.preventDefault();
    const [r2, i2] = [Math.min(rows - 1, Math.max(0, to[0])), Math.min(h - 1, Math.max(0, to[1]))];
    this.focus(this.buttons[r2][i2]);
  }

  /** The scoring's progress: `k` of the sentences done (`what` names the run), or `null` when over. */
  scoring(what, k) {
    this.scoreButton.disabled = k !== null;
    this.progress.hidden = k === null;
    if (k !== null) {
      this.progress.value = k;
      this.line.textContent = `Scoring ${what}: ${k} of ${this.record.pairs.length} sentences`;
    }
  }

  say(text) {
    this.line.textContent = text;
  }

  /** The scored translations `hypotheses`, each that differs from `every` (every head's) marked. */
  showLines(hypotheses, every) {
    const changed = hypotheses.filter((h, i) => h !== every[i]).length;
    this.summary.textContent = `The ${hypotheses.length} translations (${changed} differ from every head's)`;
    this.list.replaceChildren(...hypotheses.map((h, i) => element('li',
      h === every[i] ? {} : {class: 'aiayn-changed'}, element('span', {class: 'aiayn-hyp'}, h),
      h === every[i] ? '' : ' (changed)')));
    this.lines.hidden = false;
  }
}
