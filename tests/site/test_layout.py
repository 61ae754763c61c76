"""Each page at a desktop and a phone width: a screenshot for a person to look at, and no sideways scrolling.

Screenshots go to _build/screenshots/<page>-desktop.png and -phone.png (the top 5000 px of each page).
"""

from __future__ import annotations

import re

import pytest
import siteutil as su


def describe(docname: str, overflow: dict) -> str:
    width = overflow["innerWidth"]
    return (
        f"{docname} scrolls sideways in a {width} px wide window: the page is {overflow['html']} px wide "
        f"(body {overflow['body']} px); elements that stick out: {overflow['culprits']}"
    )


def test_desktop_layout(docname, page_reports):
    report = page_reports(docname)  # loaded at 1280 x 900 and photographed there
    overflow = report.overflow
    print(f"{docname} desktop: screenshot {report.screenshot_bytes / 1e3:.0f} kB; widths {overflow}")
    assert overflow["html"] <= overflow["innerWidth"] + 1, describe(docname, overflow)
    assert overflow["body"] <= overflow["innerWidth"] + 1, describe(docname, overflow)


def test_nothing_is_wider_than_the_column(docname, page_reports):
    """At 1280 px no formula, table, chart or figure reaches past the right edge of the text column.

    The page itself does not scroll sideways (the test above), but the boxes that hold outputs and display math
    do: what sticks out of the column there is hidden until a reader scrolls that box, or cut off for good.
    """
    cut = page_reports(docname).cut_off
    assert cut["column"] is not None, f"{docname} has no article.bd-article: the theme changed?"
    elements = cut["elements"]
    assert not elements, (
        f"{docname}: {len(elements)} elements are wider than the text column "
        f"(its right edge is at x = {cut['column']['right']} px):\n"
        + "\n".join(
            f"  {e['overflowPx']} px past the edge: {e['selector']}"
            + (f", hidden by {e['hiddenBy']}" if e["hiddenBy"] else ", over the margin")
            + f" {e['text']!r}"
            for e in elements[:10]
        )
    )


# Opens every fold of the article: <details> (hidden code cells, dropdowns) and sphinx-togglebutton's admonitions
# (the exercises' solutions), whose title takes the click; returns how many it opened.
OPEN_FOLDS = """() => {
  const art = document.querySelector('article.bd-article') || document.body;
  const closed = Array.from(art.querySelectorAll('details:not([open])'));
  closed.forEach(d => { d.open = true; });
  const toggles = Array.from(art.querySelectorAll('.admonition.toggle-hidden > .admonition-title'));
  toggles.forEach(title => title.click());
  return closed.length + toggles.length;
}"""
# the folds open at once instead of fading in over 0.3 s: what is measured after is their final layout
NO_TRANSITIONS = "*, *::before, *::after { transition: none !important; animation: none !important; }"


@pytest.fixture(scope="module")
def phone_reports(reader, base_url, site):
    """docname -> what a page measures at 390 x 844 (its widths, what sticks out of its column), loaded once."""
    cache: dict[str, dict] = {}

    def get(docname: str) -> dict:
        if docname not in cache:
            html = su.html_path(docname)
            assert (site / html).is_file(), f"{html} is listed in _toc.yml but was not built"
            page, _ = su.open_page(reader, base_url, html, viewport=su.PHONE)
            try:
                report = {
                    "overflow": page.evaluate("() => window.__aiayn.overflow()"),
                    "screenshot_bytes": su.screenshot(page, su.screenshot_path(docname, "phone")),
                }
                # what sticks out is measured with every fold open: a reader opens the solutions and hidden code too
                page.add_style_tag(content=NO_TRANSITIONS)
                report["folds_opened"] = page.evaluate(OPEN_FOLDS)
                report["cut_off"] = page.evaluate("() => window.__aiayn.cutOff()")
                cache[docname] = report
            finally:
                su.close_tab(page)
        return cache[docname]

    return get


def test_phone_layout_does_not_scroll_sideways(docname, phone_reports):
    report = phone_reports(docname)
    overflow = report["overflow"]
    print(f"{docname} phone: screenshot {report['screenshot_bytes'] / 1e3:.0f} kB; widths {overflow}")
    width = overflow["innerWidth"]
    assert overflow["html"] <= width + 1 and overflow["body"] <= width + 1, describe(docname, overflow)


SCROLLS = re.compile(r"\(overflow-x: (auto|scroll)\)$")  # cutOff()'s hiddenBy of a box that scrolls sideways


def out_of_reach(cut: dict, width: int) -> list[dict]:
    """The elements of a cutOff() report that a reader cannot bring onto a screen ``width`` px wide.

    An element past the column's edge is within reach when the box that clips it scrolls sideways (a code box,
    a table, display math, a long inline formula), or, with no such box, when it still ends on the screen.
    Anything else (clipped by ``overflow: hidden``, or past the screen's edge of a page that does not scroll
    sideways) cannot be read.
    """
    right = cut["column"]["right"]
    return [
        e
        for e in cut["elements"]
        if not (SCROLLS.search(e["hiddenBy"]) if e["hiddenBy"] else right + e["overflowPx"] <= width + 1)
    ]


def test_nothing_is_cut_off_on_a_phone(docname, phone_reports):
    """At 390 x 844 every formula, table, chart and code line can be read to its end, folds opened.

    A phone's column is narrower than many formulas and outputs: what does not fit must scroll inside its own
    box. The theme clips inline math (``span.math { overflow: hidden }``), which cut the ends off long
    formulas on seven pages; assets/book.css lets them scroll.
    """
    report = phone_reports(docname)
    cut, width = report["cut_off"], report["overflow"]["innerWidth"]
    assert cut["column"] is not None, f"{docname} has no article.bd-article: the theme changed?"
    lost = out_of_reach(cut, width)
    print(f"{docname} phone: {report['folds_opened']} folds opened, {len(cut['elements'])} elements past the column")
    assert not lost, (
        f"{docname}: {len(lost)} elements are cut off in a {width} px wide window (every fold open), with no "
        f"way to scroll to their ends (the column's right edge is at x = {cut['column']['right']} px):\n"
        + "\n".join(
            f"  {e['overflowPx']} px past the column: {e['selector']}"
            + (f", hidden by {e['hiddenBy']}" if e["hiddenBy"] else ", past the edge of the screen")
            + f" {e['text']!r}"
            for e in lost[:10]
        )
    )


# A page a reader finishes: D2L keeps its sections to 5-10 screens; past 15 readers stop scrolling.
MAX_SCREENS = 15


def test_every_page_is_at_most_15_screens_tall(docname, page_reports):
    """At 1280 x 900 no page is taller than 15 screens; a longer chapter is split into sections (_toc.yml)."""
    report = page_reports(docname)
    screens = report.height / su.DESKTOP["height"]
    print(f"{docname}: {report.height} px, {screens:.1f} screens")
    assert screens <= MAX_SCREENS, (
        f"{docname} is {screens:.1f} screens tall at {su.DESKTOP['width']} x {su.DESKTOP['height']} "
        f"(at most {MAX_SCREENS}): split it into sections of its own, each a notebook in _toc.yml"
    )
