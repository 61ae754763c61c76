// The beam search of the reader's sentence as a tree: every hypothesis the search kept at each step, its
// last piece, its log-probability and its score (log P over the length penalty), the winner and the
// finished ones marked, the candidates it pruned dashed and muted. Choosing a box (a click, or the arrow
// keys and Enter) shows that prefix's five most probable next pieces and where it looked in the German.
// Chapter 8.3 draws the same tree for the PyTorch model (aiayn.viz.beam_tree_figure).
//
// The tree is the worker's: translator.mjs's SearchTree (aiayn.decoding.trace.BeamTrace's layout), pieces as
// text. This module only draws it. Shapes: K beams, S source pieces.

const SVG = 'http://www.w3.org/2000/svg';
/** A box and the grid it sits on, in px: a column per step, a row per beam, then a row per pruned one. */
export const BOX = {width: 104, height: 38, column: 126, row: 46, pad: 6};
const LONGEST = 11;  // characters of a piece a box shows; the rest is in its label
const TASK_COLUMNS = 5;  // columns drawn in one task (40 boxes at most with K = 4): a few ms

/**
 * Where each box goes: a kept node in the column of its step and the row of its beam when it first
 * appeared; a pruned candidate of step t in column t, below the K beams.
 * @param {{nodes: object[], steps: {kept: (number|null)[], pruned: object[]}[]}} tree
 * @returns {{at: Map<number, {col: number, row: number}>, pruned: object[], columns: number, rows: number}}
 */
export function layout(tree) {
  const at = new Map([[0, {col: 0, row: 0}]]);
  const pruned = [];
  let rows = 1;
  tree.steps.forEach(({kept, pruned: cut}, t) => {
    kept.forEach((id, k) => {
      if (id !== null && !at.has(id)) at.set(id, {col: t + 1, row: k});
    });
    const below = kept.length;  // the pruned go under the K beams
    cut.forEach((c, i) => pruned.push({...c, col: t + 1, row: below + i}));
    rows = Math.max(rows, below + cut.length);
  });
  return {at, pruned, columns: tree.steps.length + 1, rows};
}

/** The ids from the root to node `id`. */
export function pathTo(tree, id) {
  const ids = [];
  for (let n = id; n !== null; n = tree.nodes[n].parent) ids.unshift(n);
  return ids;
}

/** Resolves once the browser has drawn its next frame: what is measured after it is the tree's own work. */
const afterFrame = () => new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve)));

function svg(tag, attrs = {}, text = null) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== null) el.textContent = text;
  return el;
}

function html(tag, className, ...children) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  el.append(...children);
  return el;
}

const short = piece => (piece.length > LONGEST ? `${piece.slice(0, LONGEST - 1)}…` : piece);
const fixed = x => x.toFixed(2);

/** A box: its piece, then log P and score; a star for the winner. */
function box(node, {x, y}, classes) {
  const g = svg('g', {class: ['aiayn-node', ...classes].join(' '), transform: `translate(${x},${y})`});
  g.append(svg('rect', {width: BOX.width, height: BOX.height, rx: 4}),
    svg('text', {x: BOX.pad, y: 15, class: 'aiayn-piece'},
      `${classes.includes('aiayn-winner') ? '★ ' : ''}${short(node.piece)}`),
    svg('text', {x: BOX.pad, y: 31, class: 'aiayn-scores'}, `${fixed(node.log_p)} | ${fixed(node.score)}`));
  return g;
}

/** An edge from the right of a box to the left of its child's. */
function edge(from, to, className) {
  const [x0, y0] = [from.x + BOX.width, from.y + BOX.height / 2];
  const [x1, y1] = [to.x, to.y + BOX.height / 2];
  const mid = (x0 + x1) / 2;
  return svg('path', {class: className, d: `M${x0},${y0} C${mid},${y0} ${mid},${y1} ${x1},${y1}`});
}

/** Bars, one a line, each as long as its value in [0, 1]: [[label, value], ...]. */
function bars(entries, marked = null) {
  return html('p', 'aiayn-tree-bars', ...entries.map(([label, p]) => {
    const kind = label === marked ? 'aiayn-bar aiayn-chosen' : 'aiayn-bar';
    const bar = html('span', kind, `${label} ${p.toFixed(2)}`);
    bar.style.setProperty('--p', `${(100 * p).toFixed(1)}%`);
    return bar;
  }));
}

/** The tree of one beam search, its legend and the panel of the chosen box; show() gives it a search. */
export class BeamTreeView {
  /** @param {HTMLElement} container where the view goes (appended) */
  constructor(container) {
    this.root = html('div', 'aiayn-beam-tree');
    this.legend = html('p', 'aiayn-tree-legend');
    this.box = html('div', 'aiayn-tree-box');  // scrolls sideways: a long search is wider than a phone
    this.svg = svg('svg', {role: 'group'});
    this.box.append(this.svg);
    this.detail = html('div', 'aiayn-node-detail');
    this.detail.setAttribute('aria-live', 'polite');
    this.root.append(this.legend, this.box, this.detail);
    this.root.hidden = true;
    container.append(this.root);
    this.svg.addEventListener('click', event => {
      const g = event.target.closest('.aiayn-node[data-node]');
      if (g) this.select(Number(g.dataset.node), true);
    });
    this.svg.addEventListener('keydown', event => this.key(event));
  }

  /**
   * Draw the tree of a search, a few columns a task (a long search's tree has hundreds of boxes, and the
   * page must answer meanwhile), and choose its root; `data-drawn` marks the view once all is drawn.
   * @param {object} tree the worker's: {nodes, steps, winner}, pieces as text
   * @param {string[]} source the German pieces (S), as the attention's columns
   */
  async show(tree, source) {
    const drawing = {};  // a later show() or clear() stops this one
    Object.assign(this, {tree, source, drawing, selected: null, boxes: new Map()});
    this.root.removeAttribute('data-drawn');
    const {at, pruned, columns, rows} = layout(tree);
    const K = tree.steps.length ? tree.steps[0].kept.length : 1;
    this.edges = svg('g', {class: 'aiayn-edges'});
    this.drawn = svg('g', {class: 'aiayn-boxes'});
    this.svg.replaceChildren(this.edges, this.drawn);
    this.svg.setAttribute('width', (columns - 1) * BOX.column + BOX.width + 4);
    this.svg.setAttribute('height', (rows - 1) * BOX.row + BOX.height + 4);
    this.svg.setAttribute('aria-label', `the beam search's tree, K = ${K}: ${at.size} hypotheses over ` +
      `${columns - 1} steps, ${pruned.length} pruned candidates; arrow keys move, Enter chooses`);
    this.legend.textContent = `The search's tree (K = ${K}): a column per step, a box per hypothesis it ` +
      'kept, with its last piece, then log P | score (log P over the length penalty; the search keeps the ' +
      `${K} best scores). ★ is the winner, the English above, and its path is drawn bold; a thick border ` +
      'ends in </s>; dashed boxes are candidates it pruned. Choose a box (click it, or Tab to the tree, ' +
      'move with the arrow keys and press Enter) to see what that prefix would write next, and where ' +
      'it looked.';
    this.root.hidden = false;
    this.box.scrollLeft = 0;  // a new search starts at its root
    const winning = new Set(pathTo(tree, tree.winner));
    for (let from = 0; from < columns; from += TASK_COLUMNS) {
      await afterFrame();  // the page's turn: the English, the map, a reader's click
      if (this.drawing !== drawing) return;
      const started = performance.now();
      const within = ({col}) => col >= from && col < from + TASK_COLUMNS;
      this.columns([...at].filter(([, place]) => within(place)), pruned.filter(within), at, winning);
      if (from === 0) this.select(0, false);
      void this.box.scrollWidth;  // the browser lays these boxes out now, within the time measured
      performance.measure('aiayn-beam-tree draw', {start: started});
    }
    this.root.setAttribute('data-drawn', '');
  }

  /** Draw some columns: `places` [[id, {col, row}]] of kept nodes and the `pruned` candidates, each with
   * the edge from its parent (placed by `at`); the winner's path (`winning`, ids) bold. */
  columns(places, pruned, at, winning) {
    const xy = ({col, row}) => ({x: col * BOX.column + 2, y: row * BOX.row + 2});
    for (const c of pruned) {
      this.edges.append(edge(xy(at.get(c.parent)), xy(c), 'aiayn-pruned'));
      const g = box(c, xy(c), ['aiayn-pruned']);
      g.setAttribute('aria-hidden', 'true');
      g.append(svg('title', {}, `pruned: ${c.piece}, log P ${fixed(c.log_p)}, score ${fixed(c.score)}`));
      this.drawn.append(g);
    }
    for (const [id, place] of places) {
      const node = this.tree.nodes[id];
      const classes = [winning.has(id) ? 'aiayn-path' : '', node.finished ? 'aiayn-finished' : '',
        id === this.tree.winner ? 'aiayn-winner' : ''].filter(Boolean);
      if (node.parent !== null) {
        this.edges.append(edge(xy(at.get(node.parent)), xy(place), winning.has(id) ? 'aiayn-path' : ''));
      }
      const g = box(node, xy(place), classes);
      Object.assign(g.dataset, {node: id, parent: node.parent ?? '', col: place.col, row: place.row});
      g.setAttribute('role', 'button');
      g.setAttribute('tabindex', '-1');
      const marks = `${node.finished ? ', finished' : ''}${id === this.tree.winner ? ', the winner' : ''}`;
      g.setAttribute('aria-label', `step ${node.step}: ${node.piece}, log P ${fixed(node.log_p)}, score ` +
        `${fixed(node.score)}${marks}`);
      this.drawn.append(g);
      this.boxes.set(id, g);
    }
  }

  /** Hide the view and forget its search. */
  clear() {
    this.drawing = null;
    this.root.hidden = true;
    this.svg.replaceChildren();
    this.detail.replaceChildren();
    this.tree = null;
  }

  /** Choose node `id`: mark its box, make it the tree's stop for Tab, show its panel. */
  select(id, focus) {
    const started = performance.now();
    if (this.selected !== null) {
      this.boxes.get(this.selected).classList.remove('aiayn-selected');
      this.boxes.get(this.selected).setAttribute('aria-pressed', 'false');
    }
    this.selected = id;
    const g = this.boxes.get(id);
    g.classList.add('aiayn-selected');
    g.setAttribute('aria-pressed', 'true');
    this.rove(id, focus);
    this.detail.replaceChildren(...this.panel(this.tree.nodes[id]));
    void this.detail.offsetHeight;  // and the panel
    performance.measure('aiayn-beam-tree select', {start: started});
  }

  /** Node `id` takes the tree's one Tab stop (and the focus, if asked). */
  rove(id, focus) {
    for (const [other, g] of this.boxes) g.setAttribute('tabindex', other === id ? '0' : '-1');
    if (focus) this.boxes.get(id)?.focus();  // (a box not drawn yet cannot take it)
  }

  /** What the panel says of a node: its prefix and numbers, its next pieces and its attention. */
  panel(node) {
    const prefix = pathTo(this.tree, node.id).map(id => this.tree.nodes[id].piece).join(' ');
    const winner = node.id === this.tree.winner ? ', the winner' : '';
    const lines = [html('p', 'aiayn-node-head', html('strong', '', `Step ${node.step}: `), prefix,
      ` (log P ${fixed(node.log_p)}, score ${fixed(node.score)}${winner})`)];
    if (node.finished) {
      lines.push(html('p', '', 'It ends in </s>: a finished translation, kept while its score is among ' +
        'the best.'));
    } else if (node.top.length === 0) {
      lines.push(html('p', '', 'The search ended before it grew this prefix.'));
    } else {
      lines.push(html('p', '', `Its ${node.top.length} most probable next pieces:`), bars(node.top));
      const most = node.attention.indexOf(Math.max(...node.attention));
      lines.push(html('p', '', 'Where it looked to choose them (the last layer\'s cross-attention, mean of ' +
        'the heads), over the German pieces:'),
      bars(this.source.map((p, s) => [p, node.attention[s]]), this.source[most]));
    }
    return lines;
  }

  /** The arrow keys move along the tree (left: the parent, right: a child, up and down: the column),
   * Home and End go to the root and the winner, Enter and Space choose. */
  key(event) {
    const g = event.target.closest('.aiayn-node[data-node]');
    if (!g) return;
    const id = Number(g.dataset.node);
    const node = this.tree.nodes[id];
    const column = [...this.boxes.values()].filter(b => b.dataset.col === g.dataset.col)
      .sort((a, b) => a.dataset.row - b.dataset.row).map(b => Number(b.dataset.node));
    const children = this.tree.nodes.filter(n => n.parent === id).map(n => n.id);
    const winning = pathTo(this.tree, this.tree.winner);
    const at = column.indexOf(id);
    const to = {
      ArrowLeft: node.parent,
      ArrowRight: children.find(c => winning.includes(c)) ?? children[0],
      ArrowUp: column[at - 1],
      ArrowDown: column[at + 1],
      Home: 0,
      End: this.tree.winner,
    }[event.key];
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      this.select(id, true);
    } else if (to !== undefined) {
      event.preventDefault();
      if (to !== null) this.rove(to, true);
    }
  }
}
