// The attention of one sentence as a heat map, with menus for the kind, the layer and the head:
// chapter 11.2's explorer (aiayn.viz.translation.attention_explorer_chart) drawn as plain SVG,
// so that the page can draw the maps of a sentence the reader typed.
//
// Shapes: N layers, h heads, S source pieces, T pieces written (<bos> not counted, <eos> last).
// A map of one kind is nested arrays (N, h, rows, cols) of weights in [0, 1].

const SVG = 'http://www.w3.org/2000/svg';
const LEGEND_TITLE = 'weight (√ scale)';
/** A cell's side in pixels: the largest, for short sentences, and the smallest, which still holds a 12 px
 *  label beside and under it. A long sentence's map gets wider than its box, and the box scrolls sideways. */
export const CELL = {max: 22, min: 14};

/** The three kinds, their rows and columns: as _EXPLORER_AXES and _EXPLORER_TITLES in Python. */
export const KINDS = {
  cross: {
    name: 'cross-attention',
    rows: 'decoder_out', cols: 'source',
    rowTitle: 'English piece being written', colTitle: 'German piece (attended to)',
  },
  encoder: {
    name: 'encoder self-attention',
    rows: 'source', cols: 'source',
    rowTitle: 'German piece', colTitle: 'German piece (attended to)',
  },
  decoder_self: {
    name: 'decoder self-attention',
    rows: 'decoder_out', cols: 'decoder_in',
    rowTitle: 'English piece being written', colTitle: 'English piece before it',
  },
};

// Vega's "blues" scheme, the colours of chapter 11.2's maps, from weight 0 to weight 1 (√ scale)
const BLUES = 'cfe1f2bed8eca8cee58fc1de74b2d75ba3cf4592c63181bd206fb2125ca40a4a90'
  .match(/.{6}/g).map(hex => [0, 2, 4].map(i => parseInt(hex.slice(i, i + 2), 16)));

/** The colour of a weight w in [0, 1]: Vega's blues at √w, as the book's charts. */
export function colour(w) {
  const t = Math.sqrt(Math.min(Math.max(w, 0), 1)) * (BLUES.length - 1);
  const i = Math.min(Math.floor(t), BLUES.length - 2);
  const f = t - i;
  const rgb = BLUES[i].map((c, k) => Math.round(c + f * (BLUES[i + 1][k] - c)));
  return `rgb(${rgb.join(',')})`;
}

/**
 * One head's weights, or the mean of the heads.
 * @param {number[][][][]} map (N, h, rows, cols)
 * @param {number} layer 1 ... N
 * @param {number|'mean'} head 1 ... h, or 'mean' (of all heads)
 * @returns {number[][]} (rows, cols)
 */
export function headWeights(map, layer, head) {
  const heads = map[layer - 1];
  if (head !== 'mean') return heads[head - 1];
  return heads[0].map((row, r) => row.map((_, c) =>
    heads.reduce((sum, w) => sum + w[r][c], 0) / heads.length));
}

/**
 * A tensor ({dims, data}, as onnxruntime-web returns it) or nested (typed) arrays as nested arrays.
 * @returns {Array} nested arrays of numbers, as deep as the tensor has dimensions
 */
export function nested(t) {
  if (t && t.dims && t.data) {
    const reshape = (offset, dims) => {
      if (dims.length === 1) return Array.from(t.data.subarray(offset, offset + dims[0]), Number);
      const step = dims.slice(1).reduce((a, b) => a * b, 1);
      return Array.from({length: dims[0]}, (_, i) => reshape(offset + i * step, dims.slice(1)));
    };
    return reshape(0, Array.from(t.dims, Number));
  }
  return Array.from(t, x => (typeof x === 'number' ? x : nested(x)));
}

function svg(tag, attrs = {}, text = null) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== null) el.textContent = text;
  return el;
}

let measurer = null;
function textWidth(text, font) {
  measurer = measurer || document.createElement('canvas').getContext('2d');
  measurer.font = font;
  return measurer.measureText(text).width;
}

/**
 * Draw a (rows, cols) map into an SVG element: cells, piece labels, titles, legend. The cells shrink to fit
 * `width` pixels down to CELL.min; a longer sentence draws wider than `width` (its box scrolls) and keeps every
 * label, and its column title sits under the part of the map the box shows first. The text is drawn in
 * currentColor, the colour of the page's text around the map, so it follows the theme's light and dark mode.
 * @param {SVGSVGElement} el the element to draw into (emptied first)
 * @param {number[][]} weights (rows, cols)
 * @param {string[]} rowLabels rows pieces
 * @param {string[]} colLabels cols pieces
 * @param {{rowTitle: string, colTitle: string, width: number, blankAbove?: boolean}} options
 *   blankAbove: leave the cells right of the diagonal blank (the look-ahead mask)
 */
export function drawHeatmap(el, weights, rowLabels, colLabels, options) {
  const rows = weights.length, cols = weights[0].length;
  const family = getComputedStyle(el).fontFamily || 'sans-serif';
  const font = `12px ${family}`;
  const widest = labels => Math.max(...labels.map(l => textWidth(l, font)));
  const title = 18, rowLabelWidth = widest(rowLabels) + 6;
  const fit = Math.floor((options.width - title - rowLabelWidth - 8) / cols);
  const cell = Math.max(CELL.min, Math.min(CELL.max, fit));
  // the row title runs up beside the rows, moved down where it is taller than they are
  const rowTitleWidth = textWidth(options.rowTitle, `bold ${font}`);
  const middleY = Math.max(4 + rows * cell / 2, rowTitleWidth / 2 + 2);
  const below = middleY + rowTitleWidth / 2 > 4 + rows * cell;  // it reaches down beside the column labels
  // the column labels slant down to the left (-60°): the first ones may reach past the row labels
  const slant = Math.max(...colLabels.map((l, c) => textWidth(l, font) * Math.cos(Math.PI / 3) - (c + 0.5) * cell));
  const x0 = Math.max(title + rowLabelWidth, (below ? title : 0) + slant + 2), y0 = 4;
  const colLabelHeight = widest(colLabels) * Math.sin(Math.PI / 3) + 10;
  const mapBottom = y0 + rows * cell;
  const legendTop = Math.max(mapBottom + colLabelHeight + title, middleY + rowTitleWidth / 2) + 8;
  const colTitleWidth = textWidth(options.colTitle, `bold ${font}`);
  const shown = Math.max(0, Math.min(cols * cell, options.width - x0 - 4));  // the columns in view before any scrolling
  const colTitleX = Math.max(x0 + shown / 2, title + colTitleWidth / 2 + 2);  // right of the row title
  const legendRight = x0 + 170 + textWidth(LEGEND_TITLE, `11px ${family}`);
  const width = Math.ceil(Math.max(x0 + cols * cell, colTitleX + colTitleWidth / 2, legendRight) + 4);
  const height = Math.ceil(legendTop + 34);
  el.replaceChildren();
  el.setAttribute('width', width);
  el.setAttribute('height', height);
  el.setAttribute('viewBox', `0 0 ${width} ${height}`);

  const cells = svg('g', {class: 'cells'});
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      if (options.blankAbove && c > r) continue;
      const w = weights[r][c];
      const rect = svg('rect', {x: x0 + c * cell, y: y0 + r * cell, width: cell, height: cell,
        fill: colour(w)});
      rect.append(svg('title', {}, `${rowLabels[r]} → ${colLabels[c]}: ${w.toFixed(2)}`));
      cells.append(rect);
    }
  }
  el.append(cells);
  const g = svg('g', {class: 'labels', 'font-size': 12, fill: 'currentColor'});
  rowLabels.forEach((label, r) => g.append(svg('text', {
    x: x0 - 4, y: y0 + (r + 0.5) * cell, 'text-anchor': 'end', 'dominant-baseline': 'central'}, label)));
  colLabels.forEach((label, c) => {
    const x = x0 + (c + 0.5) * cell, y = mapBottom + 6;
    g.append(svg('text', {x, y, 'text-anchor': 'end', 'dominant-baseline': 'central',
      transform: `rotate(-60 ${x} ${y})`}, label));
  });
  el.append(g);
  const titles = svg('g', {class: 'titles', 'font-size': 12, 'font-weight': 'bold', fill: 'currentColor'});
  titles.append(svg('text', {x: 12, y: middleY, 'text-anchor': 'middle',
    transform: `rotate(-90 12 ${middleY})`}, options.rowTitle));
  titles.append(svg('text', {x: colTitleX, y: mapBottom + colLabelHeight + 12,
    'text-anchor': 'middle'}, options.colTitle));
  el.append(titles);
  el.append(legend(x0, legendTop));
}

function legend(x, y) {
  const g = svg('g', {class: 'legend', 'font-size': 11, fill: 'currentColor'});
  const steps = 40, length = 160;
  for (let i = 0; i < steps; i++) {
    g.append(svg('rect', {x: x + i * length / steps, y, width: length / steps + 0.5, height: 10,
      fill: colour(i / (steps - 1))}));
  }
  g.append(svg('text', {x, y: y + 24, 'text-anchor': 'middle'}, '0'));
  g.append(svg('text', {x: x + length, y: y + 24, 'text-anchor': 'middle'}, '1'));
  g.append(svg('text', {x: x + length + 10, y: y + 9}, LEGEND_TITLE));
  return g;
}

function select(label, className) {
  const el = document.createElement('select');
  el.className = className;
  const wrap = document.createElement('label');
  wrap.append(label, el);
  return [wrap, el];
}

function setOptions(el, options, keep) {
  const before = el.value;
  el.replaceChildren(...options.map(([value, text]) => {
    const option = document.createElement('option');
    option.value = value;
    option.textContent = text;
    return option;
  }));
  el.value = keep && options.some(([v]) => v === before) ? before : options[0][0];
}

/** The menus (kind, layer, head) and the map of one sentence; show() gives it a sentence. */
export class AttentionView {
  /** @param {HTMLElement} container where the view goes (appended) */
  constructor(container) {
    this.root = document.createElement('div');
    this.root.className = 'aiayn-attention';
    const menus = document.createElement('div');
    menus.className = 'aiayn-menus';
    let kindLabel, layerLabel, headLabel;
    [kindLabel, this.kind] = select('attention ', 'aiayn-kind');
    [layerLabel, this.layer] = select('layer ', 'aiayn-layer');
    [headLabel, this.head] = select('head ', 'aiayn-head');
    setOptions(this.kind, Object.entries(KINDS).map(([k, v]) => [k, v.name]));
    menus.append(kindLabel, layerLabel, headLabel);
    // the map's own box: it scrolls sideways when a long sentence's map is wider than the page, with the
    // mouse, a finger or, once it has the focus, the arrow keys
    this.figure = document.createElement('div');
    this.figure.className = 'aiayn-heatmap';
    this.figure.tabIndex = 0;
    this.figure.setAttribute('role', 'region');
    this.figure.setAttribute('aria-label', 'attention map (scrolls sideways when it is wider than the page)');
    this.svg = document.createElementNS(SVG, 'svg');
    this.svg.setAttribute('role', 'img');
    this.figure.append(this.svg);
    this.root.append(menus, this.figure);
    this.root.hidden = true;
    container.append(this.root);
    for (const el of [this.kind, this.layer, this.head]) el.addEventListener('change', () => this.draw());
  }

  /**
   * Show a sentence's maps; the menus keep their choice where they can.
   * @param {{source: string[], decoder_in: string[], decoder_out: string[]}} tokens the pieces (S), (T), (T)
   * @param {{encoder: Array, cross: Array, decoder_self: Array}} maps nested (N, h, rows, cols) each
   */
  show(tokens, maps) {
    const N = maps.cross.length, h = maps.cross[0].length;
    const first = this.tokens === undefined;
    this.tokens = tokens;
    this.maps = maps;
    setOptions(this.layer, Array.from({length: N}, (_, i) => [String(i + 1), String(i + 1)]), !first);
    if (first) this.layer.value = String(N);  // the top layer first: its cross-attention is the alignment
    setOptions(this.head, [['mean', `mean of the ${h}`],
      ...Array.from({length: h}, (_, i) => [String(i + 1), String(i + 1)])], !first);
    this.root.hidden = false;
    this.draw();
  }

  /** Hide the view and forget its sentence (the menus keep their choice for the next one). */
  clear() {
    this.root.hidden = true;
    this.svg.replaceChildren();
    this.maps = null;
  }

  draw() {
    if (!this.maps) return;
    const kind = KINDS[this.kind.value];
    const head = this.head.value === 'mean' ? 'mean' : Number(this.head.value);
    const weights = headWeights(this.maps[this.kind.value], Number(this.layer.value), head);
    const width = this.figure.clientWidth || 640;
    this.svg.setAttribute('aria-label', `${kind.name}, layer ${this.layer.value}, ` +
      `${head === 'mean' ? 'mean of the heads' : `head ${head}`}: ` +
      'a heat map, darker cells carry more weight');
    drawHeatmap(this.svg, weights, this.tokens[kind.rows], this.tokens[kind.cols], {
      rowTitle: kind.rowTitle, colTitle: kind.colTitle, width,
      blankAbove: this.kind.value === 'decoder_self'});
  }
}
