"""Report how heavy the built website is: total size, the heaviest page, the largest chart data set.

Usage: python tools/site_report.py [SITE_DIR] [--json PATH] [--check]

SITE_DIR defaults to _build/html; the report is also written as JSON (default: SITE_DIR/../site_report.json).
--check exits with status 1 when a limit below is broken (tests/site/test_lean.py asserts the same limits).

Definitions
- site size: every file under SITE_DIR.
- shared assets: everything under _static/ (theme, fonts, Vega, MathJax, the widget manager) and any other
  file that more than one page loads (searchindex.js): counted once, in the site size.
- page weight: the page's HTML file plus the files the browser loads for this page alone (its figures in
  _images/, ...): what this page adds to the site. Links (downloads, _sources/) are not loads.
- chart data set: one array of rows embedded in a chart's Vega-Lite spec (an entry of ``datasets`` or a
  ``data.values``), counted in rows and in bytes of JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
MAX_CHART_ROWS = 5000  # rows in one embedded data set
MAX_PAGE_BYTES = 5_000_000  # one HTML file

# the HTML that aiayn.viz.book_renderer writes for a chart: the div, then a script holding the spec on one line
CHART_RE = re.compile(
    r'<div id="(?P<id>aiayn-chart-[0-9a-f]+)" class="aiayn-chart"></div>\s*<script>.*?var spec = (?P<spec>.*?);\n',
    re.S,
)


def chart_specs(html: str) -> list[tuple[str, dict]]:
    """(chart id, Vega-Lite spec) for every chart on a page, in page order."""
    return [(m["id"], json.loads(m["spec"])) for m in CHART_RE.finditer(html)]


def datasets(spec: dict) -> list[tuple[str, list]]:
    """Every data array embedded in a spec, with a name: top-level ``datasets`` and any ``data.values``."""
    found: list[tuple[str, list]] = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for name, rows in (node.get("datasets") or {}).items():
                if isinstance(rows, list):
                    found.append((name, rows))
            data = node.get("data")
            for i, entry in enumerate(data if isinstance(data, list) else [data]):
                if isinstance(entry, dict) and isinstance(entry.get("values"), list):
                    found.append((entry.get("name") or f"{where}/data[{i}]", entry["values"]))
            for key, value in node.items():
                if key not in ("datasets", "data"):
                    walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    walk(spec, "spec")
    return found


def sequence_rows(spec: dict) -> int:
    """Rows a spec generates in the browser (``data.sequence``): not embedded bytes, but marks to draw."""
    total = 0

    def walk(node) -> None:
        nonlocal total
        if isinstance(node, dict):
            seq = node.get("sequence")
            if isinstance(seq, dict) and {"start", "stop"} <= seq.keys():
                step = seq.get("step") or 1
                total += max(0, int((seq["stop"] - seq["start"]) / step))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return total


def range_bindings(spec: dict) -> list[str]:
    """Labels of the range sliders a spec binds (what the page shows next to each slider)."""
    labels: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            bind = node.get("bind")
            if isinstance(bind, dict) and bind.get("input") == "range":
                labels.append(str(bind.get("name") or node.get("name") or "").strip())
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    return labels


# the tags and attributes through which a browser loads a file while showing the page (links are not loads)
_LOADS = {
    "img": "src",
    "script": "src",
    "link": "href",
    "source": "src",
    "video": "src",
    "audio": "src",
    "iframe": "src",
    "embed": "src",
    "object": "data",
    "image": "href",
}


class _Loads(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag, attrs):
        want = _LOADS.get(tag)
        attrs = dict(attrs)
        if tag == "link" and not ({"stylesheet", "icon", "preload"} & set((attrs.get("rel") or "").split())):
            return
        if want and attrs.get(want):
            self.refs.append(attrs[want])


def loaded_files(page: Path, site: Path, html: str) -> set[Path]:
    """Local files outside _static/ that the browser loads for a page (images, scripts, ...)."""
    parser = _Loads()
    parser.feed(html)
    files: set[Path] = set()
    for ref in parser.refs:
        parts = urlsplit(ref)
        if parts.scheme or parts.netloc or not parts.path:
            continue
        target = (page.parent / unquote(parts.path)).resolve()
        try:
            rel = target.relative_to(site.resolve())
        except ValueError:
            continue
        if rel.parts[0] != "_static" and target.is_file():
            files.add(target)
    return files


def build_report(site: Path) -> dict:
    site = Path(site)
    files = [p for p in site.rglob("*") if p.is_file()]
    total = sum(p.stat().st_size for p in files)
    static = sum(p.stat().st_size for p in files if p.relative_to(site).parts[0] == "_static")
    pages, charts, sets = [], [], []
    htmls = {page: page.read_text(encoding="utf-8", errors="replace") for page in sorted(site.rglob("*.html"))}
    loads = {page: loaded_files(page, site, html) for page, html in htmls.items()}
    users: dict[Path, int] = {}
    for files_of_page in loads.values():
        for f in files_of_page:
            users[f] = users.get(f, 0) + 1
    for page, html in htmls.items():
        name = page.relative_to(site).as_posix()
        assets = sorted(f for f in loads[page] if users[f] == 1)
        html_bytes = page.stat().st_size
        asset_bytes = sum(p.stat().st_size for p in assets)
        specs = chart_specs(html)
        pages.append(
            {
                "page": name,
                "html_bytes": html_bytes,
                "own_asset_bytes": asset_bytes,
                "own_assets": [p.relative_to(site.resolve()).as_posix() for p in assets],
                "weight_bytes": html_bytes + asset_bytes,
                "charts": len(specs),
                "sliders": sum(len(range_bindings(spec)) for _, spec in specs),
            }
        )
        for chart_id, spec in specs:
            data = datasets(spec)
            charts.append(
                {
                    "page": name,
                    "chart": chart_id,
                    "spec_bytes": len(json.dumps(spec, separators=(",", ":"))),
                    "sliders": range_bindings(spec),
                    "rows": sum(len(rows) for _, rows in data),
                    "generated_rows": sequence_rows(spec),
                }
            )
            for set_name, rows in data:
                sets.append(
                    {
                        "page": name,
                        "chart": chart_id,
                        "dataset": set_name,
                        "rows": len(rows),
                        "bytes": len(json.dumps(rows, separators=(",", ":"))),
                    }
                )
    heaviest = max(pages, key=lambda p: p["weight_bytes"], default=None)
    largest_html = max(pages, key=lambda p: p["html_bytes"], default=None)
    largest_set = max(sets, key=lambda s: (s["rows"], s["bytes"]), default=None)
    return {
        "site": str(site),
        "files": len(files),
        "total_bytes": total,
        "shared_static_bytes": static,
        "pages_html_bytes": sum(p["html_bytes"] for p in pages),
        "heaviest_page": heaviest,
        "largest_html_page": largest_html,
        "largest_dataset": largest_set,
        "charts_total": len(charts),
        "limits": {"max_chart_rows": MAX_CHART_ROWS, "max_page_bytes": MAX_PAGE_BYTES},
        "pages": pages,
        "charts": charts,
        "datasets": sets,
    }


def problems(report: dict) -> list[str]:
    out = [
        f"{s['page']} {s['chart']}: data set {s['dataset']} has {s['rows']} rows (limit {MAX_CHART_ROWS})"
        for s in report["datasets"]
        if s["rows"] > MAX_CHART_ROWS
    ]
    out += [
        f"{p['page']}: {p['html_bytes'] / 1e6:.2f} MB of HTML (limit {MAX_PAGE_BYTES / 1e6:.0f} MB)"
        for p in report["pages"]
        if p["html_bytes"] > MAX_PAGE_BYTES
    ]
    return out


def summary(report: dict) -> str:
    mb = 1e6
    lines = [
        f"site: {report['total_bytes'] / mb:.2f} MB in {report['files']} files "
        f"(shared _static/: {report['shared_static_bytes'] / mb:.2f} MB, "
        f"HTML pages: {report['pages_html_bytes'] / mb:.2f} MB)"
    ]
    page = report["heaviest_page"]
    if page:
        lines.append(
            f"heaviest page: {page['page']}: {page['weight_bytes'] / mb:.2f} MB "
            f"(HTML {page['html_bytes'] / mb:.2f} MB + {len(page['own_assets'])} own files "
            f"{page['own_asset_bytes'] / mb:.2f} MB), {page['charts']} charts"
        )
    data = report["largest_dataset"]
    lines.append(
        f"charts: {report['charts_total']}; largest data set: "
        + (f"{data['rows']} rows, {data['bytes'] / 1e3:.1f} kB ({data['page']} {data['chart']})" if data else "none")
    )
    generated = max(report["charts"], key=lambda c: c["generated_rows"], default=None)
    if generated and generated["generated_rows"]:
        lines.append(
            f"most rows generated in the browser (data.sequence): {generated['generated_rows']} "
            f"({generated['page']} {generated['chart']})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", nargs="?", default=str(ROOT / "_build" / "html"))
    parser.add_argument("--json", help="where to write the report (default: SITE/../site_report.json)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a limit is broken")
    args = parser.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"no website in {site}: run `make book` first", file=sys.stderr)
        return 2
    report = build_report(site)
    out = Path(args.json) if args.json else site.parent / "site_report.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(summary(report))
    print(f"report written to {out}")
    broken = problems(report)
    for line in broken:
        print("LIMIT:", line)
    return 1 if (args.check and broken) else 0


if __name__ == "__main__":
    sys.exit(main())
