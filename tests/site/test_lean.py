"""The site stays lean: its size is reported, no chart embeds a huge data set, no page is huge.

Prints the report (run pytest with -s to see it) and writes it to _build/site_report.json;
tools/site_report.py makes the same report from the command line and defines what is measured.
"""

from __future__ import annotations

import json
import re

import siteutil as su

tool = su.site_report
MAX_SCREENSHOTS_BYTES = 20_000_000


def test_site_report(site):
    report = tool.build_report(site)
    out = site.parent / "site_report.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print("\n" + tool.summary(report) + f"\nreport written to {out}")
    big = [s for s in report["datasets"] if s["rows"] > tool.MAX_CHART_ROWS]
    assert not big, f"charts embedding more than {tool.MAX_CHART_ROWS} rows: " + "; ".join(
        f"{s['page']} {s['chart']} {s['dataset']}: {s['rows']} rows" for s in big
    )
    largest = report["largest_html_page"]
    assert largest["html_bytes"] <= tool.MAX_PAGE_BYTES, (
        f"{largest['page']} is {largest['html_bytes'] / 1e6:.1f} MB of HTML (limit {tool.MAX_PAGE_BYTES / 1e6:.0f} MB)"
    )


def test_screenshots_stay_small():
    """The screenshots the layout tests took (if they ran first) stay under 20 MB together."""
    shots = [su.screenshot_path(d, kind) for d in su.toc_docnames() for kind in ("desktop", "phone")]
    total = sum(p.stat().st_size for p in shots if p.is_file())
    print(f"screenshots: {sum(p.is_file() for p in shots)} files, {total / 1e6:.1f} MB in {su.SCREENSHOTS}")
    assert total <= MAX_SCREENSHOTS_BYTES, f"screenshots take {total / 1e6:.1f} MB (limit 20 MB)"


VEGA = re.compile(r'<script[^>]+src="[^"]*/vendor/vega[-a-z]*\.min\.js')


def test_only_the_pages_that_draw_a_chart_load_vega(site):
    """Vega's three scripts (0.8 MB, in the head, where they hold the page up) are on the pages with a chart only."""
    loads, charts = {}, {}
    for docname in su.toc_docnames():
        html = site / su.html_path(docname)
        loads[docname] = len(VEGA.findall(html.read_text(encoding="utf-8")))
        charts[docname] = len(su.chart_ids(html))
    print(f"{sum(n > 0 for n in charts.values())} of {len(charts)} pages draw a chart")
    wrong = {d: f"{charts[d]} charts, {n} of Vega's scripts" for d, n in loads.items() if n != (3 if charts[d] else 0)}
    assert not wrong, wrong
