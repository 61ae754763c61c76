"""How long chapter 11.4's translator takes to start: downloading its files, and from the browser's cache.

The page keeps the files it downloads in the browser's Cache Storage, so a second visit does not download them
again; it still starts onnxruntime-web and the three graphs and compiles the search, and that is most of the
start. This tool serves the built site on 127.0.0.1, opens 11.4 in headless Chromium and presses Load twice in
one browser context: the first visit downloads, the second reads the cache. Each round is a fresh context (an
empty cache). The figure recorded is the page's own, the "started in … s" of its Ready line, which a reader
sees; the seconds from the press to the enabled Translate button, timed here, are recorded beside it.

    python tools/page_start.py                     # 5 rounds; writes src/aiayn/results/page_start.json
    python tools/page_start.py --baseline main     # this tree's page against main's, rounds interleaved A B A B

With ``--baseline REF`` the page's modules (page.mjs, worker.mjs) are served as they are at the git revision REF
for every other load, the site and the files being the same; it prints the ratio of the cache starts, round by
round, and writes nothing. The site must be built with the model (``AIAYN_MODEL=… make book``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "site"))
import siteutil as su  # noqa: E402 - the site tests' server and browser

RESULTS = ROOT / "src" / "aiayn" / "results" / "page_start.json"
DOC = "book/11_4_in_your_browser"
MODULES = ("page.mjs", "worker.mjs")  # what --baseline serves from another revision
LOAD_MS = 180_000
STARTED = re.compile(r"(downloaded|from this browser's cache) and started in ([\d.]+) s")


def start(context, base: str) -> dict:
    """Open 11.4, press Load, wait for Translate: the page's own seconds, the seconds timed here, and whether
    its files came from the cache."""
    page = context.new_page()
    try:
        page.goto(f"{base}/{su.html_path(DOC)}", wait_until="load")
        page.wait_for_selector(".aiayn-load", timeout=20_000)
        pressed = page.evaluate("() => performance.now()")
        page.click(".aiayn-load")
        page.wait_for_function("() => !document.querySelector('.aiayn-translate').disabled", timeout=LOAD_MS)
        waited = (page.evaluate("() => performance.now()") - pressed) / 1000
        said = page.inner_text(".aiayn-message")
        found = STARTED.search(said)
        if found is None:
            raise RuntimeError(f"the page did not say it was ready: {said!r}")
        return {"page_s": float(found.group(2)), "waited_s": round(waited, 2), "cached": found.group(1) != "downloaded"}
    finally:
        page.close()


def serve_from(context, revision: str) -> None:
    """Answer the page's modules with their text at git ``revision``."""
    for name in MODULES:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{revision}:src/aiayn/web/{name}"],
                              capture_output=True, text=True, check=True).stdout  # fmt: skip
        context.route(f"**/_static/translator/{name}*", _answer(text))


def _answer(text: str):
    """A route handler that answers ``text`` as JavaScript (one parameter: Playwright passes the request to a
    handler that takes two)."""
    return lambda route: route.fulfill(body=text, content_type="text/javascript")


def round_trip(browser, base: str, revision: str | None = None) -> tuple[dict, dict]:
    """A fresh context: a first start (downloading) and a second (from the cache)."""
    context = su.new_context(browser, base)
    try:
        if revision is not None:
            serve_from(context, revision)
        first, second = start(context, base), start(context, base)
    finally:
        context.close()
    if first["cached"] or not second["cached"]:
        raise RuntimeError(f"the first start should download and the second read the cache: {first}, {second}")
    return first, second


def machine() -> dict:
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        found = re.search(r"model name\s*:\s*(.+)", cpuinfo.read_text())
        model = found.group(1).strip() if found else ""
    return {"cpu": model or platform.processor() or platform.machine(), "cores": os.cpu_count()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="fresh contexts, each two starts (default 5)")
    parser.add_argument("--baseline", metavar="REF", help="compare with the page's modules at this git revision")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be 1 or more, got {args.rounds}")
    if not (su.SITE / su.html_path(DOC)).is_file():
        sys.exit(f"no built site in {su.SITE}: build it with the model first (AIAYN_MODEL=… make book)")
    from playwright.sync_api import sync_playwright

    server, base = su.serve(su.SITE)
    load_before = os.getloadavg()[0]
    try:
        with sync_playwright() as playwright:
            browser = su.launch(playwright)
            version = browser.version
            runs = {"this tree": [], args.baseline: []} if args.baseline else {"this tree": []}
            for n in range(args.rounds):
                for name in runs:  # A B A B: a machine that slows down slows both
                    runs[name].append(round_trip(browser, base, None if name == "this tree" else name))
                    print(f"round {n + 1}, {name}: " + ", ".join(
                        f"{'cache' if s['cached'] else 'download'} {s['page_s']:.1f} s" for s in runs[name][-1]))
            browser.close()
    finally:
        server.shutdown()
        server.server_close()
    load_after = os.getloadavg()[0]
    if args.baseline:
        ratios = [a[1]["page_s"] / b[1]["page_s"] for a, b in zip(runs["this tree"], runs[args.baseline], strict=True)]
        print(f"cache start, this tree / {args.baseline}: median {statistics.median(ratios):.2f}, "
              f"from {min(ratios):.2f} to {max(ratios):.2f} over {len(ratios)} rounds "
              f"(load average {load_before:.1f} before, {load_after:.1f} after, {os.cpu_count()} cores)")
        return
    rounds = runs["this tree"]
    record = {"what": "seconds from pressing Load to a ready translator on chapter 11.4, as the page's Ready line "
                      "says them, in headless Chromium, the site served from the same machine (127.0.0.1)",
              "rounds": len(rounds)}  # fmt: skip
    for key, i in (("downloaded", 0), ("cache", 1)):
        seconds = [r[i]["page_s"] for r in rounds]
        record[key] = {"page_s": seconds, "median_s": round(statistics.median(seconds), 1),
                       "waited_s": [r[i]["waited_s"] for r in rounds]}  # fmt: skip
    record |= {"command": "python tools/page_start.py", "chromium": version, "machine": machine(),
               "load_average": [round(load_before, 1), round(load_after, 1)],
               "measured_at": date.today().isoformat()}  # fmt: skip
    RESULTS.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}: downloaded {record['downloaded']['median_s']} s, "
          f"from the cache {record['cache']['median_s']} s (medians of {len(rounds)})")


if __name__ == "__main__":
    main()
