"""Chapter 11.4's translator as its reader meets it: the English first, messages in the reader's words, a start
from the browser's cache as long as the chapter says, and every control by keyboard.

One context for the module: a first visit loads the translator (downloading its files), a second loads it from
the browser's cache (both timed, printed with ``pytest -s``); the tests then use that second page, and the keyboard
test a third, which its keys load. test_translator.py holds the page's answers to Python's.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import siteutil as su
from test_translator import (
    DOC,
    LONG,
    SENTENCE,
    TRANSLATE_MS,
    _load,
    built_model,
)

PAGE_START = su.ROOT / "src" / "aiayn" / "results" / "page_start.json"  # tools/page_start.py
# what the translator's region looks like after each change of it: is the English there, the announcement, the map
WATCH_ORDER_JS = """() => {
  window.__seen = [];
  const root = document.querySelector('.aiayn-translator');
  const look = () => window.__seen.push({
    english: document.querySelector('.aiayn-english').textContent,
    announced: document.querySelector('.aiayn-announce').textContent,
    map: document.querySelector('.aiayn-heatmap g.cells rect') !== null,
  });
  new MutationObserver(look).observe(root, {subtree: true, childList: true, characterData: true,
    attributes: true});
}"""
DONE_JS = """() => { const text = document.querySelector('.aiayn-message').textContent;
  return text !== '' && !text.startsWith('Translating') && !text.startsWith('Drawing')
    && !document.querySelector('.aiayn-translate').disabled; }"""
ACTIVE_JS = """() => { const el = document.activeElement;
  return [el.tagName.toLowerCase(), el.className || '', el.name || el.id || '', el.type || ''].join(' '); }"""


@pytest.fixture(scope="module")
def visits(browser, base_url, site):
    """11.4 in one context, loaded twice: downloaded, then from the browser's cache; the second page."""
    built_model(site)
    context = su.new_context(browser, base_url)
    try:
        times, said = {}, {}
        for visit in ("downloaded", "from this browser's cache"):
            page, report = su.open_page(context, base_url, su.html_path(DOC))
            page.wait_for_selector(".aiayn-load", timeout=20_000)
            times[visit] = _load(page)
            message = said[visit] = page.inner_text(".aiayn-message")
            assert message.startswith("Ready:") and visit in message, message
            print(f"Load -> ready, {visit}: {times[visit]:.2f} s; the page says: {message}")
            if visit == "downloaded":
                page.close()
        yield SimpleNamespace(context=context, page=page, report=report, times=times, said=said)
    finally:
        context.close()


def _finish(page):
    page.wait_for_function(DONE_JS, timeout=TRANSLATE_MS)


def test_the_english_appears_before_the_map(visits):
    """The English, its time and its announcement are on the page while the attention is still being computed."""
    page = visits.page
    page.check("input[name=aiayn-decoding][value=beam]")
    page.fill("#aiayn-german", SENTENCE)
    page.evaluate(WATCH_ORDER_JS)
    page.click(".aiayn-translate")
    _finish(page)
    seen = page.evaluate("() => window.__seen")
    first = next((s for s in seen if s["english"]), None)
    assert first is not None and seen[-1]["map"], f"no English or no map: {seen[-3:]}"
    assert not first["map"], "the English appeared together with the map, not before it"
    assert first["announced"].startswith(first["english"]), first
    assert page.is_visible(".aiayn-timing")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"temperature": "0"}, "The temperature must be a number above 0, such as 0.7 or 1.5 (got 0)."),
        ({"temperature": ""}, "The temperature must be a number above 0, such as 0.7 or 1.5 (got nothing)."),
        ({"top-k": "2.5"}, "Top-k must be a whole number from 1 up, or nothing to keep every piece (got 2.5)."),
        ({"top-p": "1.5"}, "Top-p must be a number above 0 and at most 1, or nothing to keep every piece (got 1.5)."),
        ({"seed": "-1"}, "The seed must be a whole number from 0 to 4,294,967,295 (got -1)."),
        ({"seed": "4294967296"}, "The seed must be a whole number from 0 to 4,294,967,295 (got 4,294,967,296)."),
    ],
)  # fmt: skip
def test_sampling_refuses_a_field_in_the_reader_s_words(visits, fields, message):
    page = visits.page
    page.fill("#aiayn-german", SENTENCE)
    page.check("input[name=aiayn-decoding][value=sample]")
    defaults = {"temperature": "1", "top-k": "", "top-p": "0.9", "seed": "1"}
    for name, value in (defaults | fields).items():
        page.fill(f"input[name={name}]", value)
    page.evaluate("() => { document.querySelector('.aiayn-message').textContent = ''; }")
    page.click(".aiayn-translate")
    _finish(page)
    assert page.inner_text(".aiayn-message") == message
    assert page.is_visible(".aiayn-message.aiayn-error")
    assert not page.is_visible(".aiayn-english") and not page.is_visible(".aiayn-draws")


def test_the_chapter_states_the_measured_cache_start(visits, site):
    """11.4 says how long a start from the browser's cache took where it was measured (tools/page_start.py's
    results), not that it is instant; and this browser's second visit did read the cache."""
    record = json.loads(PAGE_START.read_text("utf-8"))
    html = (site / su.html_path(DOC)).read_text("utf-8")
    assert "starts at once" not in html
    cached = f"{record['cache']['median_s']:.1f} s"
    stated = re.findall(r"the same from the browser's cache in ([\d.]+ s)", html)
    assert stated == [cached], f"the chapter says {stated}, tools/page_start.py measured {cached}"
    assert re.search(r"from this browser's cache and started in [\d.]+ s", visits.said["from this browser's cache"])


def _tab_to(page, selector: str, key: str = "Tab", limit: int = 25) -> list[str]:
    """Press Tab (or Shift+Tab) until the focus is on ``selector``; the elements passed on the way."""
    passed = []
    for _ in range(limit):
        page.keyboard.press(key)
        if page.evaluate("s => document.activeElement.matches(s)", selector):
            return passed
        passed.append(page.evaluate(ACTIVE_JS))
    raise AssertionError(f"{key} never reached {selector}; it went through {passed}")


def test_every_control_works_by_keyboard(visits, base_url):
    """Load, the box, the search's settings, Translate, the shortlist switch, the sampling fields, the list of
    draws, the map's menus and its scroll box: each reached with Tab and operated with keys alone."""
    page, _ = su.open_page(visits.context, base_url, su.html_path(DOC))
    try:
        page.wait_for_selector(".aiayn-load", timeout=20_000)
        page.focus("#aiayn-german")  # where a reader starts: in the box
        page.keyboard.press("Control+A")
        page.keyboard.type("Zwei Hunde spielen im Schnee.")
        _tab_to(page, ".aiayn-load")
        page.keyboard.press("Enter")
        page.wait_for_function("() => !document.querySelector('.aiayn-translate').disabled", timeout=60_000)
        assert page.evaluate("() => document.activeElement.matches('.aiayn-translate')")
        page.keyboard.press("Enter")  # Translate, greedy
        _finish(page)
        assert "dogs" in page.inner_text(".aiayn-english")

        # each answer gives the focus back to the box; the search's choices follow it, and arrows choose
        _tab_to(page, "input[name=aiayn-decoding]:checked")
        page.keyboard.press("ArrowRight")
        assert page.is_checked("input[name=aiayn-decoding][value=beam]")
        _tab_to(page, "input[name=aiayn-shortlist]")
        page.keyboard.press("Space")
        assert page.is_checked("input[name=aiayn-shortlist]")
        _tab_to(page, ".aiayn-translate", "Shift+Tab")
        page.keyboard.press("Enter")
        _finish(page)
        assert page.inner_text(".aiayn-timing").startswith("Beam search, K = 4, shortlist"), page.inner_text(
            ".aiayn-timing")

        _tab_to(page, "input[name=aiayn-decoding]:checked")
        page.keyboard.press("ArrowRight")
        assert page.is_checked("input[name=aiayn-decoding][value=sample]") and page.is_visible(".aiayn-sampling")
        for name, value in (("temperature", "1.3"), ("top-k", ""), ("top-p", "0.95"), ("seed", "7")):
            _tab_to(page, f"input[name={name}]")
            page.keyboard.press("Control+A")
            page.keyboard.press("Backspace")
            page.keyboard.type(value)
        page.keyboard.press("Enter")  # in a field of the form: submits it
        _finish(page)
        assert "T = 1.3" in page.inner_text(".aiayn-timing") and "seed 7" in page.inner_text(".aiayn-timing")
        assert page.eval_on_selector_all(".aiayn-draws li", "lis => lis.length") > 1
        # the list of draws scrolls (to its last line as they come): a named stop of the Tab key in any browser
        _tab_to(page, ".aiayn-draws")
        named = page.evaluate("() => { const d = document.activeElement;"
                              " return [d.tabIndex, d.getAttribute('aria-label') || '', d.scrollTop]; }")
        assert named[0] == 0 and "draws" in named[1], named
        if named[2] > 0:  # longer than its box: the keys scroll it
            page.keyboard.press("Home")
            page.wait_for_function("() => document.querySelector('.aiayn-draws').scrollTop === 0", timeout=5_000)

        # a sentence whose map is wider than the column, greedy: the map's menus and its box, by keyboard
        _tab_to(page, "input[name=aiayn-decoding]:checked", "Shift+Tab")
        page.keyboard.press("ArrowRight")  # from the last choice round to the first: greedy
        assert page.is_checked("input[name=aiayn-decoding][value=greedy]")
        _tab_to(page, "#aiayn-german", "Shift+Tab")
        page.keyboard.press("Control+A")
        page.keyboard.type(f"{LONG} {LONG}")
        page.keyboard.press("Enter")
        _finish(page)
        _tab_to(page, ".aiayn-layer")
        before = page.inner_html(".aiayn-heatmap svg")
        page.keyboard.press("ArrowUp")
        page.wait_for_function("b => document.querySelector('.aiayn-heatmap svg').innerHTML !== b", arg=before)
        _tab_to(page, ".aiayn-heatmap")
        wide = page.evaluate("() => { const b = document.querySelector('.aiayn-heatmap');"
                             " return [b.scrollWidth, b.clientWidth]; }")
        assert wide[0] > wide[1], f"the map ({wide[0]} px) is not wider than its box ({wide[1]} px)"
        page.keyboard.press("ArrowRight")
        page.wait_for_function("() => document.querySelector('.aiayn-heatmap').scrollLeft > 0", timeout=5_000)
    finally:
        page.close()
