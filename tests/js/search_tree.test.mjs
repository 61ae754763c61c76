// beamSearch(..., trace) records the tree that Python's beam_search(...,
// trace=SearchTree()) records, node for node: on the float32 graphs the
// same nodes, kept beams, pruned candidates and winner, their numbers within
// float32 rounding (onnxruntime's x86 kernels and its WebAssembly ones add
// in another order: the log-probabilities differ in their last bits, the
// sums of a search by ~1e-5; both sides sum them in doubles); on the int8
// graphs the same tree where the search wrote the same sentence, its numbers
// within int8's differences (translator.int8.test.mjs). With or without a
// trace, the same output. (On int8 the hypotheses are matched by prefix:
// two beams whose scores are 1e-3 apart can swap places, as x86 and
// WebAssembly round them; and where two candidates tie within int8's
// differences at the last place of the beam, one side may keep the one the
// other pruned, on an AMD CPU's int8 kernels as on an Intel one's.)
import assert from 'node:assert/strict';
import {test} from 'node:test';
import {SearchTree, beamSearch, outputLimit} from
  '../../src/aiayn/web/translator.mjs';
import {cases, largestDifference, loadModel, settings, vocab} from
  './exported.mjs';

const traced = (kind) => cases[kind].filter((c) => c.tree);
const FLOAT32 = {score: 1e-4, p: 1e-4, attention: 1e-4};
// the int8 graphs on x86 and in WebAssembly: each piece's log-probability
// ~0.1 apart at most (translator.int8.test.mjs), attention 0.05
const INT8 = {score: 0.1};

/** The ways `got` differs from Python's `expected` tree: its shape exactly,
 *  its numbers beyond `tol`; [] when none. */
export function treeDifferences(got, expected, tol) {
  const out = [];
  const differ = (what, a, b, within) => {
    const far = a === null || b === null ? a !== b :
      largestDifference(a, b) > within;
    if (far) out.push(`${what}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`);
  };
  differ('winner', got.winner, expected.winner, 0);
  differ('node count', got.nodes.length, expected.nodes.length, 0);
  if (out.length) return out;
  got.nodes.forEach((node, i) => {
    const python = expected.nodes[i];
    for (const key of ['id', 'parent', 'step', 'piece', 'finished']) {
      if (node[key] !== python[key]) out.push(`node ${i} ${key}`);
    }
    differ(`node ${i} log_p`, node.log_p, python.log_p, tol.score);
    differ(`node ${i} score`, node.score, python.score, tol.score);
    differ(`node ${i} top pieces`, node.top.map(([p]) => p),
        python.top.map(([p]) => p), 0);
    differ(`node ${i} top p`, node.top.map(([, p]) => p),
        python.top.map(([, p]) => p), tol.p);
    differ(`node ${i} attention`, node.attention, python.attention,
        tol.attention);
  });
  got.steps.forEach((step, t) => {
    differ(`step ${t + 1} kept`, step.kept, expected.steps[t].kept, 0);
    const cut = (c) => [c.parent, c.piece];
    differ(`step ${t + 1} pruned`, step.pruned.map(cut),
        expected.steps[t].pruned.map(cut), 0);
    differ(`step ${t + 1} pruned scores`, step.pruned.map((c) => c.score),
        expected.steps[t].pruned.map((c) => c.score), tol.score);
  });
  return out;
}

/** The largest differences of log P, score, next-piece p and attention
 *  between two trees of the same shape, for the test's diagnostics. */
function largest(got, expected) {
  return ['log_p', 'score', 'p', 'attention'].map((key) => {
    const keyed = (tree) => tree.nodes.flatMap((n) => key === 'p' ?
      n.top.map(([, p]) => p) : n[key] ?? []);
    return `${key} ${largestDifference(keyed(got), keyed(expected))
        .toExponential(1)}`;
  }).join(', ');
}

/** beamSearch with a SearchTree over sentence i: [ids, tree]. */
async function search(model, i, targets = null) {
  const {src} = cases.sentences[i];
  const limit = outputLimit(src.length, settings);
  const trace = new SearchTree();
  const ys = await beamSearch(model, vocab, src, limit, settings.beam,
      settings.length_penalty, targets, trace);
  return [ys, trace.tree];
}

test('float32: beamSearch(..., trace) records Python\'s tree', async (t) => {
  const model = await loadModel('fp32');
  assert.ok(traced('fp32').length >= 3);
  let nodes = 0;
  for (const [i, c] of traced('fp32').entries()) {
    const [ys, tree] = await search(model, i);
    assert.deepEqual(ys, c.beam); // the output, with a trace as without
    assert.deepEqual(treeDifferences(tree, c.tree, FLOAT32), [], c.text);
    const listed = c.shortlisted;
    const [, short] = await search(model, i, listed.targets);
    assert.deepEqual(treeDifferences(short, listed.tree, FLOAT32), []);
    t.diagnostic(`sentence ${i}: ${tree.nodes.length} nodes, largest ` +
      `differences ${largest(tree, c.tree)}; with the shortlist ` +
      `${largest(short, listed.tree)}`);
    nodes += tree.nodes.length + short.nodes.length;
  }
  t.diagnostic(`${nodes} nodes the same as Python's`);
});

/** A tree's nodes by their prefix, the pieces from <bos> on: two beams
 *  whose scores are ~1e-3 apart can swap places (and numbers) on int8. */
function byPrefix(tree) {
  const prefix = (n) => (n === null ? '' :
    `${prefix(tree.nodes[n].parent)},${tree.nodes[n].piece}`);
  return new Map(tree.nodes.map((node) => [prefix(node.id), node]));
}

/** Whether `tree` pruned the candidate `piece` after node `parent` at step
 *  `step` within `tol.score` of the last beam it kept there: a near tie. */
function nearTie(tree, parent, piece, step, tol) {
  const {kept, pruned} = tree.steps[step - 1];
  const last = Math.min(...kept.filter((n) => n !== null)
      .map((n) => tree.nodes[n].score));
  const cut = pruned.find((c) => c.parent === parent && c.piece === piece);
  return cut !== undefined && last - cut.score <= tol.score;
}

/** How `got` differs from Python's `expected`, hypothesis by hypothesis
 *  (matched by prefix): the same prefixes, each piece's log P within `tol`
 *  (the score, a sum of such, within `tol` a step). A beam
 *  kept on one side only must have been a near tie on the other (kept by
 *  one, pruned within `tol` of the last kept by the other); its descendants
 *  go with it. */
function hypothesisDifferences(got, expected, tol) {
  const [mine, python] = [byPrefix(got), byPrefix(expected)];
  const out = [];
  for (const [here, there, tree] of
    [[mine, python, expected], [python, mine, got]]) {
    for (const [prefix, node] of here) {
      const parent = prefix.slice(0, prefix.lastIndexOf(','));
      if (there.has(prefix) || !there.has(parent)) continue;
      if (!nearTie(tree, there.get(parent).id, node.piece, node.step, tol)) {
        out.push(`${prefix}: kept on one side only, and no near tie`);
      }
    }
  }
  // each step's log P within tol; a sum of `step` of them within step * tol
  const own = (tree, n) => n.log_p - (n.parent === null ? 0 :
    tree.nodes[n.parent].log_p);
  for (const [prefix, node] of mine) {
    const other = python.get(prefix);
    if (other === undefined) continue;
    const [a, b] = [own(got, node), own(expected, other)];
    if (Math.abs(a - b) > tol.score) {
      out.push(`${prefix} its piece's log P: ${a} != ${b}`);
    }
    if (Math.abs(node.score - other.score) > tol.score * node.step) {
      out.push(`${prefix} score: ${node.score} != ${other.score}`);
    }
    if (node.finished !== other.finished) out.push(`${prefix} finished`);
  }
  const winner = (tree) => [...byPrefix(tree)].find(
      ([, n]) => n.id === tree.winner)[0];
  if (winner(got) !== winner(expected)) out.push('another winner');
  return out;
}

test('int8: the same hypotheses where the sentence is the same', async (t) => {
  const model = await loadModel('int8');
  let same = 0;
  for (const [i, c] of traced('int8').entries()) {
    const [ys, tree] = await search(model, i);
    if (ys.join() !== c.beam.join()) continue; // int8 rounding moved a piece
    assert.deepEqual(hypothesisDifferences(tree, c.tree, INT8), [], c.text);
    const shape = {score: Infinity, p: Infinity, attention: Infinity};
    const swapped = treeDifferences(tree, c.tree, shape).length > 0;
    const [mine, python] = [byPrefix(tree), byPrefix(c.tree)];
    const oneSide = [...mine.keys()].filter((k) => !python.has(k)).length +
      [...python.keys()].filter((k) => !mine.has(k)).length;
    t.diagnostic(`sentence ${i}: ${tree.nodes.length} nodes` + (oneSide ?
      `, ${oneSide} hypotheses on one side only, after a near tie` :
      swapped ? ', two near-equal beams in another order' :
      `, largest differences ${largest(tree, c.tree)}`));
    same++;
  }
  assert.ok(same >= traced('int8').length - 1, `${same} trees the same`);
});

test('a trace changes nothing, and refuses nothing', async () => {
  const model = await loadModel('fp32');
  const {src} = cases.sentences[0];
  const [ys, tree] = await search(model, 0);
  const pieces = [];
  for (let n = tree.winner; n !== null; n = tree.nodes[n].parent) {
    pieces.unshift(tree.nodes[n].piece);
  }
  assert.deepEqual(pieces, ys); // the winner's path is the output
  const one = new SearchTree();
  assert.deepEqual(await beamSearch(model, vocab, src, 1, 4, 0.6, null, one),
      [vocab.bosId]); // no step: the root wins
  assert.equal(one.tree.winner, 0);
  assert.equal(one.tree.steps.length, 0);
});
