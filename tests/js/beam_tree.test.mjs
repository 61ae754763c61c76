// What the page draws of a beam search (worker.mjs's readableTree, then
// beam_tree.mjs's layout), on Python's trees of the float32 graphs: every
// piece named, every number as the search left it, every node in the column
// of its step, no two boxes in one place.
import assert from 'node:assert/strict';
import {test} from 'node:test';
import {layout, pathTo} from '../../src/aiayn/web/beam_tree.mjs';
import {readableTree} from '../../src/aiayn/web/worker.mjs';
import {cases, vocab} from './exported.mjs';

const trees = cases.fp32.filter((c) => c.tree).map((c) => c.tree);

test('readableTree names each piece and keeps the numbers', () => {
  assert.ok(trees.length >= 3);
  for (const tree of trees) {
    const shown = readableTree(vocab, tree);
    const text = (i) => vocab.pieces[i];
    assert.deepEqual(shown.nodes.map((n) => n.piece), tree.nodes.map(
        (n) => text(n.piece)));
    assert.deepEqual(shown.nodes.map((n) => n.top), tree.nodes.map(
        (n) => n.top.map(([i, p]) => [text(i), p])));
    const numbers = (n) => [n.id, n.parent, n.step, n.log_p, n.score,
      n.finished, n.attention];
    assert.deepEqual(shown.nodes.map(numbers), tree.nodes.map(numbers));
    assert.deepEqual(shown.steps, tree.steps.map(({kept, pruned}) => ({kept,
      pruned: pruned.map((c) => ({...c, piece: text(c.piece)}))})));
    assert.equal(shown.winner, tree.winner);
  }
});

test('layout puts each node in its step\'s column, one box a place', () => {
  for (const tree of trees) {
    const {at, pruned, columns, rows} = layout(tree);
    assert.equal(at.size, tree.nodes.length); // every node, once
    for (const [id, {col}] of at) assert.equal(col, tree.nodes[id].step);
    const K = tree.steps[0].kept.length;
    assert.ok([...at.values()].every(({row}) => row < K));
    assert.ok(pruned.every(({row}) => row >= K && row < rows));
    const places = [...at.values(), ...pruned].map((p) => `${p.col},${p.row}`);
    assert.equal(new Set(places).size, places.length);
    assert.equal(columns, tree.steps.length + 1);
    assert.equal(pathTo(tree, tree.winner)[0], 0); // the winner grows from <s>
  }
});
