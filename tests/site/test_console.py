"""Every page of the built site opens without a word on the browser's console: no warning, no error.

One browser context and one tab walk the pages of _toc.yml in the book's order, each drawn as test_pages waits
for it (math, charts, widgets); whatever a page logs as a warning or an error, or throws, fails the test with the
page's name and the message. A reader who opens the console must see nothing to worry about, and a new warning
is caught the day it appears. Light theme, desktop size: test_contrast and test_phone look at the others.
"""

from __future__ import annotations

import time

import siteutil as su


def test_no_page_logs_a_warning_or_an_error(browser, base_url, site):
    docnames = su.toc_docnames()
    missing = [d for d in docnames if not (site / su.html_path(d)).is_file()]
    assert not missing, f"listed in _toc.yml but not built: {missing}"
    context = su.new_context(browser, base_url, color_scheme="light")
    page = context.new_page()
    said: list[tuple[str, str]] = []  # (page, what it logged)
    current = [""]

    def on_console(message):
        if message.type in ("warning", "error"):
            where = (message.location or {}).get("url", "").removeprefix(base_url)
            said.append((current[0], f"{message.type}: {message.text} ({where})"))

    page.on("console", on_console)
    page.on("pageerror", lambda error: said.append((current[0], f"uncaught: {error}")))
    started = time.perf_counter()
    try:
        for docname in docnames:
            current[0] = docname
            page.goto(f"{base_url}/{su.html_path(docname)}", wait_until="load")
            # drawn: Vega warns while it compiles a chart, before it draws it
            page.wait_for_function("() => window.__aiayn.settled()", timeout=su.SETTLE_MS, polling=100)
    finally:
        context.close()
    print(f"{len(docnames)} pages in {time.perf_counter() - started:.1f} s")
    assert not said, f"{len(said)} console messages:\n" + "\n".join(f"{d}: {m}" for d, m in said)
