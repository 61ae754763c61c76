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
