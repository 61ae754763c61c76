"""Measure how long each page of a built site is for a reader: its height at 1280 px, in pixels and screens.

Usage: python tools/page_heights.py [SITE]   (default _build/html; a screen is the 900 px of the test window)
Collapsed toggles (hidden input, dropdown solutions) count as collapsed, as a reader first sees them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "site"))
import siteutil as su  # noqa: E402


def heights(site: Path) -> dict[str, int]:
    from playwright.sync_api import sync_playwright

    server, base = su.serve(site)
    out = {}
    try:
        with sync_playwright() as playwright:
            browser = su.launch(playwright)
            for doc in su.toc_docnames():
                if not (site / su.html_path(doc)).is_file():
                    continue
                context = su.new_context(browser, base)
                try:
                    page, _ = su.open_page(context, base, su.html_path(doc))
                    out[doc] = page.evaluate("() => document.documentElement.scrollHeight")
                finally:
                    context.close()
            browser.close()
    finally:
        server.shutdown()
    return out


def main(argv: list[str]) -> None:
    site = Path(argv[0]) if argv else ROOT / "_build" / "html"
    screen = su.DESKTOP["height"]
    for doc, px in heights(site).items():
        print(f"{doc:32s} {px:7d} px  {px / screen:5.1f} screens")


if __name__ == "__main__":
    main(sys.argv[1:])
