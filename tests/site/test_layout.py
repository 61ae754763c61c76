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
