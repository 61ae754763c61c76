// The head grid's presets (web/heads.mjs), from a record laid out as
// heads.json: every head; one head a layer, the one 11.2's record kept; no
// cross-attention in layer n; without the heads 11.2 found costly.
import assert from 'node:assert/strict';
import {test} from 'node:test';
import {allOn, filled, presets} from '../../src/aiayn/web/heads.mjs';

const record = {shape: [3, 2, 4], kept: [[1, 3], [0, 0], [2, 1]],
  costly: [[0, 1, 2], [2, 0, 3]]};
const byId = Object.fromEntries(presets(record).map((p) => [p.id, p]));
const count = (mask) => mask.flat(2).filter((v) => v === 1).length;

test('every head, and allOn', () => {
  assert.deepEqual(byId.all.mask, filled([3, 2, 4], 1));
  assert.ok(allOn(byId.all.mask));
  assert.ok(!allOn(byId.one.mask));
});

test('one head a layer: the head 11.2 kept, named in the label', () => {
  const {mask, label} = byId.one;
  record.kept.forEach((layers, k) => layers.forEach((i, n) => {
    assert.deepEqual(mask[k][n], [0, 1, 2, 3].map((j) => (j === i ? 1 : 0)));
  }));
  assert.equal(count(mask), 6);
  assert.match(label, /encoder 2, 4; decoder 1, 1; cross 3, 2/);
});

test('no cross-attention in layer n: that layer\'s cross heads only', () => {
  for (const n of [0, 1]) {
    const {mask} = byId[`no-cross-${n + 1}`];
    assert.deepEqual(mask[2][n], [0, 0, 0, 0]);
    assert.equal(count(mask), 24 - 4);
  }
  assert.equal(byId['no-cross-3'], undefined); // N = 2 layers
});

test('without the costly heads: exactly those off', () => {
  const {mask, label} = byId.costly;
  assert.equal(count(mask), 22);
  assert.equal(mask[0][1][2], 0);
  assert.equal(mask[2][0][3], 0);
  assert.match(label, /encoder layer 2 head 3, cross layer 1 head 4/);
});
