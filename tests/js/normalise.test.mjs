// How the page reads a sentence before it splits it: isBlank and normalise
// are Python's translation.is_blank and normalise, on the committed cases
// (tests/test_web_js.py writes them from the Python) and on every code point.
// No model needed.
import assert from 'node:assert/strict';
import {readFileSync} from 'node:fs';
import {test} from 'node:test';
import {isBlank, normalise} from '../../src/aiayn/web/translator.mjs';

const cases = JSON.parse(readFileSync(
    new URL('./normalise.cases.json', import.meta.url), 'utf-8'));

test('normalise and isBlank give Python\'s on odd input', () => {
  assert.ok(cases.texts.length >= 10);
  for (const c of cases.texts) {
    assert.equal(normalise(c.text), c.normalised, JSON.stringify(c.text));
    assert.equal(isBlank(c.text), c.blank, JSON.stringify(c.text));
  }
});

test('whitespace is str.isspace\'s, code point by code point', (t) => {
  const space = new Set(cases.whitespace);
  const zeroWidth = new Set(cases.zero_width);
  let checked = 0;
  for (let cp = 0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue; // surrogates: no character
    const c = String.fromCodePoint(cp);
    const blank = space.has(cp) || zeroWidth.has(cp);
    if (isBlank(c) !== blank) assert.fail(`U+${cp.toString(16)}: ${!blank}`);
    // a space between two words is one space; anything else stays
    const between = normalise(`a${c}${c}b`);
    if (space.has(cp) ? between !== 'a b' : between.length < 3) {
      assert.fail(`U+${cp.toString(16)} between words: ${between}`);
    }
    checked++;
  }
  t.diagnostic(`${checked} code points, ${space.size} of them whitespace`);
});

// NFKC code point by code point: Python writes what its normalise makes of
// every code point its Unicode assigns (tests/test_web_js.py, for this run
// only, as $AIAYN_NFKC_CASES); Node may know a newer Unicode, so code points
// Python does not assign are left out (assigned ones keep their
// decompositions, by Unicode's stability policy).
test('normalise applies NFKC as Python does, code point by code point',
    (t) => {
      const file = process.env.AIAYN_NFKC_CASES;
      if (!file) {
        t.skip('no $AIAYN_NFKC_CASES (tests/test_web_js.py sets it)');
        return;
      }
      const nfkc = JSON.parse(readFileSync(file, 'utf-8'));
      const unassigned = nfkc.unassigned;
      let range = 0;
      let checked = 0;
      for (let cp = 0; cp <= 0x10ffff; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        while (range < unassigned.length && unassigned[range][1] < cp) range++;
        if (range < unassigned.length && unassigned[range][0] <= cp) continue;
        const c = String.fromCodePoint(cp);
        const expected = nfkc.changed[cp] ?? c;
        const got = normalise(c);
        if (got !== expected) {
          assert.fail(`U+${cp.toString(16)}: ${JSON.stringify(got)}, ` +
              `Python ${JSON.stringify(expected)}`);
        }
        checked++;
      }
      assert.equal(normalise('Ｅｉｎ Ｈｕｎｄ'), 'Ein Hund');
      assert.equal(normalise('Schiﬀ ﬁnden'), 'Schiff finden');
      t.diagnostic(`${checked} code points of Unicode ${nfkc.unicode}, ` +
          `${Object.keys(nfkc.changed).length} changed by NFKC`);
    });
