"""Each page at a desktop and a phone width: a screenshot for a person to look at, and no sideways scrolling.

Screenshots go to _build/screenshots/<page>-desktop.png and -phone.png (the top 5000 px of each page).
"""

from __future__ import annotations

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


def test_phone_layout_does_not_scroll_sideways(docname, browser, base_url, site):
    assert (site / su.html_path(docname)).is_file(), f"{su.html_path(docname)} is listed in _toc.yml but was not built"
    context = su.new_context(browser, base_url, viewport=su.PHONE)
    try:
        page, _ = su.open_page(context, base_url, su.html_path(docname))
        overflow = page.evaluate("() => window.__aiayn.overflow()")
        size = su.screenshot(page, su.screenshot_path(docname, "phone"))
    finally:
        context.close()
    print(f"{docname} phone: screenshot {size / 1e3:.0f} kB; widths {overflow}")
    width = overflow["innerWidth"]
    assert overflow["html"] <= width + 1 and overflow["body"] <= width + 1, describe(docname, overflow)


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
