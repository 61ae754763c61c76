"""Something to touch in every chapter: on a page of each chapter 1-12, moving one control changes the page.

No kernel: the website has none. A control counts when moving it redraws a chart (Vega, in the browser) or
changes what a page module shows (``data-aiayn-live``: the translator of 11.4, the BLEU calculator of 9).
For each chapter the pages are tried in the book's order until one of them answers.
"""

from __future__ import annotations

import re

import pytest
import siteutil as su

CHAPTERS = range(1, 13)
WAIT_MS = 8000

# what a reader sees change: every chart's marks and every live module's text and drawings
_SEEN = """() => {
  const art = document.querySelector('article.bd-article') || document.body;
  const charts = Array.from(art.querySelectorAll('.aiayn-chart svg')).map(s => s.innerHTML);
  const live = Array.from(art.querySelectorAll('[data-aiayn-live]'))
    .map(el => el.innerText + Array.from(el.querySelectorAll('svg, canvas'))
      .map(g => g.outerHTML.length).join(','));
  return charts.join('|') + '#' + live.join('|');
}"""

# move the index-th control the page answers in the browser to another value, as a reader would
_MOVE = """(index) => {
  const art = document.querySelector('article.bd-article') || document.body;
  const controls = Array.from(art.querySelectorAll(
      '.aiayn-chart .vega-bindings input, .aiayn-chart .vega-bindings select, ' +
      '[data-aiayn-live] input, [data-aiayn-live] select, [data-aiayn-live] textarea'))
    .filter(el => el.offsetParent !== null && !el.disabled);
  const el = controls[index];
  if (!el) return null;
  let to;
  if (el.tagName === 'SELECT') {
    el.selectedIndex = (el.selectedIndex + 1) % el.options.length;
    to = el.value;
  } else if (el.type === 'range') {
    const min = Number(el.min || 0), max = Number(el.max || 100);
    el.value = Number(el.value) === max ? min : max;
    to = el.value;
  } else if (el.type === 'checkbox' || el.type === 'radio') {
    el.click();
    to = String(el.checked);
  } else {
    el.value = el.value + ' und ein Hund';
    to = el.value;
  }
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return {control: `${el.tagName.toLowerCase()}[${el.type || ''}] ${el.name || el.id || ''}`, to};
}"""


def chapter_pages(chapter: int) -> list[str]:
    return [d for d in su.toc_docnames() if re.match(rf"book/{chapter:02d}_", d)]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda n: f"chapter-{n}")
def test_a_control_changes_a_page_of_every_chapter(chapter, open_pages):
    pages = chapter_pages(chapter)
    assert pages, f"chapter {chapter} has no page in _toc.yml"
    tried = []
    for docname in pages:
        page, _ = open_pages.get(docname)
        before = page.evaluate(_SEEN)
        moved = page.evaluate(_MOVE, 0)
        if moved is None:
            tried.append(f"{docname}: no control")
            continue
        try:
            page.wait_for_function(f"(before) => ({_SEEN})() !== before", arg=before, timeout=WAIT_MS)
        except Exception:  # noqa: BLE001
            tried.append(f"{docname}: {moved['control']} -> {moved['to']!r} changed nothing")
            continue
        print(f"chapter {chapter}: {docname}: {moved['control']} -> {moved['to']!r} redrew the page")
        return
    pytest.fail(f"chapter {chapter}: no page answers a control without a kernel: {tried}")
