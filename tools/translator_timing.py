"""Time chapter 11.4's translator in Chromium: two builds of the page, interleaved in one browser run.

    python tools/translator_timing.py --make-old /tmp/site-old --commit COMMIT --export DIR
    python tools/translator_timing.py --old /tmp/site-old [--new _build/html] [--rounds 7] [--out FILE]

The first command makes the page as it was at COMMIT from the new build (``--new``): the same site,
with COMMIT's page modules (``src/aiayn/web/*.mjs``) and the model files that COMMIT's
``tools/site_assets.py`` lists (``MODEL_FILES``), copied from an export that holds them (DIR, e.g.
``_build/translator-export/KEY``: an export writes the whole-prefix decoder too).

The second serves both sites, opens chapter 11.4 in each (its own browser context), loads the
translator in both, then translates the 13-word caption of the browser tests, greedy and with beam
search, ``--rounds`` times, old and new in turn (A B, then B A), and reads the time each page shows
(the search alone, in the worker, on one WebAssembly thread). It prints, for each search, the median
and the range of each page's times and the ratio of the medians. The times are this machine's: the
output names its cores and the browser.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "site"))
import siteutil as su  # noqa: E402

DOC = "book/11_4_in_your_browser"
SENTENCE = "Eine Frau in einem roten Mantel geht mit ihrem Hund durch den Park."  # 13 words
TRANSLATOR = Path("_static") / "translator"


def _git_show(commit: str, path: str) -> bytes:
    return subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout


def _model_files(commit: str) -> list[str]:
    """``MODEL_FILES`` of COMMIT's ``tools/site_assets.py``: what that page downloads."""
    tree = ast.parse(_git_show(commit, "tools/site_assets.py"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MODEL_FILES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"tools/site_assets.py at {commit} has no MODEL_FILES")


def make_old(new: Path, out: Path, commit: str, export: Path) -> None:
    """The site ``new`` with the page of COMMIT: its modules and the model files it downloads."""
    if out.exists():
        raise SystemExit(f"--make-old {out} exists; give a new folder")
    shutil.copytree(new, out)
    translator = out / TRANSLATOR
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", commit, "src/aiayn/web/"], cwd=ROOT, check=True, capture_output=True,
        text=True,
    ).stdout.split()  # fmt: skip
    for old in translator.glob("*.mjs"):
        old.unlink()
    for name in names:
        if name.endswith(".mjs"):
            (translator / Path(name).name).write_bytes(_git_show(commit, name))
    shutil.rmtree(translator / "model")
    (translator / "model").mkdir()
    files = _model_files(commit)
    for name in files:
        shutil.copy2(export / name, translator / "model" / name)
    site = json.loads((translator / "site.json").read_text())
    model = sum((export / n).stat().st_size for n in files if n != "manifest.json")
    site["download"] = {"bytes": model + site["runtime"]["bytes"]}
    (translator / "site.json").write_text(json.dumps(site, indent=1) + "\n")
    print(f"made {out}: the page of {commit} ({', '.join(files)})")


def _open(browser, base: str):
    """Chapter 11.4 in a new context, the translator loaded and the sentence typed in."""
    context = su.new_context(browser, base)
    page, _ = su.open_page(context, base, su.html_path(DOC))
    page.wait_for_selector(".aiayn-load", timeout=20_000)
    page.click(".aiayn-load")
    page.wait_for_function("() => !document.querySelector('.aiayn-translate').disabled", timeout=300_000)
    page.fill("#aiayn-german", SENTENCE)
    return context, page


def _time(page, beam: bool) -> tuple[int, str]:
    """One search as the reader starts it; the milliseconds the page shows, and its English."""
    page.check(f"input[name=aiayn-decoding][value={'beam' if beam else 'greedy'}]")
    page.evaluate("() => { document.querySelector('.aiayn-timing').textContent = ''; }")
    page.click(".aiayn-translate")
    page.wait_for_function(
        """() => document.querySelector('.aiayn-timing').textContent !== ''
             && !document.querySelector('.aiayn-translate').disabled""",
        timeout=120_000,
    )
    timing = page.inner_text(".aiayn-timing")
    return int(re.search(r": ([\d,]+) ms", timing).group(1).replace(",", "")), page.inner_text(".aiayn-english")


def measure(old: Path, new: Path, rounds: int) -> dict:
    from playwright.sync_api import sync_playwright

    servers = {name: su.serve(folder) for name, folder in (("old", old), ("new", new))}
    times = {(name, beam): [] for name in servers for beam in (False, True)}
    english = {}
    try:
        with sync_playwright() as p:
            browser = su.launch(p)
            pages = {name: _open(browser, base) for name, (_, base) in servers.items()}
            for name, (_, page) in pages.items():  # once untimed: the page's first search warms it
                for beam in (False, True):
                    english[name, beam] = _time(page, beam)[1]
            for r in range(rounds):
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                for beam in (False, True):
                    for name in order:
                        times[name, beam].append(_time(pages[name][1], beam)[0])
            version = browser.version
            for context, _ in pages.values():
                context.close()
            browser.close()
    finally:
        for server, _ in servers.values():
            server.shutdown()
    return {"times": times, "english": english, "browser": version}


def record(found: dict, args: argparse.Namespace) -> dict:
    """What ``--out`` writes: each page's times, medians and download, and the ratios of the medians."""
    from datetime import date

    searches = {}
    for beam, key in ((False, "greedy"), (True, "beam4")):
        times = {name: found["times"][name, beam] for name in ("old", "new")}
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        searches[key] = {
            "ms": times,
            "median_ms": medians,
            "range_ms": {name: [min(ts), max(ts)] for name, ts in times.items()},
            "new_over_old": round(medians["new"] / medians["old"], 3),
            "english": {name: found["english"][name, beam] for name in ("old", "new")},
        }
    download = {}
    for name, folder in (("old", args.old), ("new", args.new)):
        site = json.loads((folder / TRANSLATOR / "site.json").read_text())
        download[name] = site["download"]["bytes"]
    return {
        "what": "chapter 11.4's search of one caption, the milliseconds the page shows (the search alone, in its "
        "worker, one WebAssembly thread), the old and the new build interleaved in one browser",
        "sentence": SENTENCE,
        "rounds": args.rounds,
        "old": args.old_commit or str(args.old.name),
        "searches": searches,
        "download_bytes": download,
        "browser": f"Chromium {found['browser']} headless",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared with other jobs",
        "load_average": found["load_average"],  # the machine's 1-minute load before and after the rounds
        "command": "python tools/translator_timing.py --old OLD --rounds "
        f"{args.rounds} --out src/aiayn/results/translator_timing.json",
        "measured_at": date.today().isoformat(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new", type=Path, default=ROOT / "_build" / "html", help="the new build (_build/html)")
    parser.add_argument("--old", type=Path, help="the old build, e.g. made by --make-old")
    parser.add_argument("--rounds", type=int, default=7, help="searches of each kind on each page")
    parser.add_argument("--make-old", type=Path, help="make the old build here instead of timing")
    parser.add_argument("--commit", help="with --make-old: the commit whose page to rebuild")
    parser.add_argument("--export", type=Path, help="with --make-old: an export that holds its model files")
    parser.add_argument("--out", type=Path, help="also write the times as JSON here")
    parser.add_argument("--old-commit", default="", help="with --out: the commit the old build is of, for the record")
    args = parser.parse_args()
    if args.make_old:
        if not (args.commit and args.export):
            parser.error("--make-old needs --commit and --export")
        make_old(args.new, args.make_old, args.commit, args.export)
        return
    if args.old is None:
        parser.error("--old is required (or --make-old to make it)")
    load_before = os.getloadavg()[0]
    found = measure(args.old, args.new, args.rounds)
    found["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # 1-minute, before and after
    if args.out:
        args.out.write_text(json.dumps(record(found, args), indent=1) + "\n")
    print(f"{SENTENCE!r}, {args.rounds} rounds, old and new interleaved; {found['browser']} headless, "
          f"one WebAssembly thread; {platform.machine()}, {os.cpu_count()} cores")
    for beam, label in ((False, "greedy"), (True, "beam 4")):
        stats = {}
        for name in ("old", "new"):
            ts = found["times"][name, beam]
            stats[name] = statistics.median(ts)
            print(f"  {label:7} {name}: median {stats[name]:5.0f} ms, range {min(ts)}-{max(ts)} ms, all {ts}")
            print(f"          {name} writes: {found['english'][name, beam]}")
        print(f"  {label:7} new / old: {stats['new'] / stats['old']:.2f} "
              f"({stats['old'] / stats['new']:.1f}x faster)")


if __name__ == "__main__":
    main()
