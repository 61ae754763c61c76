"""Every page of the book, as a reader's browser sees it: local files only, no errors, images, math, widgets."""

from __future__ import annotations

import pytest
import siteutil as su

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def widget_pages() -> list[str]:
    """The pages whose HTML carries ipywidgets state (read from the built site at collection time)."""
    out = []
    for doc in su.toc_docnames():
        html = su.SITE / su.html_path(doc)
        if html.is_file() and WIDGET_STATE in html.read_text(encoding="utf-8"):
            out.append(doc)
    return out


def test_index_redirects_to_the_first_page(browser, base_url):
    root = su.toc_docnames()[0]
    context = su.new_context(browser, base_url)
    try:
        page = context.new_page()
        page.goto(f"{base_url}/index.html")
        page.wait_for_url(f"{base_url}/{su.html_path(root)}", timeout=10_000)
    finally:
        context.close()


def test_no_request_leaves_the_site(docname, page_reports):
    report = page_reports(docname)
    hosts = sorted({url.split("/")[2] for url in report.external if "//" in url})
    assert not report.external, (
        f"{docname} asked {len(report.external)} times for files on other hosts {hosts}: "
        + ", ".join(report.external[:10])
    )


def test_no_console_or_page_errors(docname, page_reports):
    report = page_reports(docname)
    problems = [f"console error: {e}" for e in report.console_errors] + [f"page error: {e}" for e in report.page_errors]
    assert not problems, f"{docname}:\n" + "\n".join(problems)


def test_every_local_file_loads(docname, page_reports):
    report = page_reports(docname)
    assert not report.failed_local, f"{docname}: files of the site that did not load:\n" + "\n".join(
        report.failed_local
    )


def test_page_finishes_drawing(docname, page_reports):
    report = page_reports(docname)
    assert report.settled, (
        f"{docname} did not finish drawing within {su.SETTLE_MS / 1000:.0f} s "
        f"(charts drawn {report.charts}, widgets {report.widgets}): {report.settle_error}"
    )


def test_images_load(docname, page_reports):
    report = page_reports(docname)
    broken = [img for img in report.images if img["decode"] != "ok" or img["width"] <= 0]
    assert not broken, f"{docname}: broken images:\n" + "\n".join(f"{i['src']} ({i['decode']})" for i in broken)


def test_math_is_typeset(docname, page_reports):
    math = page_reports(docname).math
    assert not math["raw"], f"{docname}: TeX left as text in the article:\n" + "\n".join(math["raw"])
    if math["mathElements"]:
        assert math["containers"] > 0, f"{docname} has {math['mathElements']} formulas but MathJax drew none"
    assert not math["unrendered"], f"{docname}: formulas MathJax did not draw: {math['unrendered'][:5]}"
    assert not math["errors"], f"{docname}: MathJax errors: {math['errors'][:5]}"


@pytest.mark.parametrize("docname", widget_pages(), ids=su.page_id)
def test_widgets_render_from_their_stored_state(docname, page_reports):
    widgets = page_reports(docname).widgets
    assert widgets["error"] is None, f"{docname}: {widgets['error']}"
    assert widgets["widgets"] > 0, f"{docname} stores widget state but shows no widget: {widgets}"
    assert widgets["rendered"] == widgets["views"], (
        f"{docname}: {widgets['views'] - widgets['rendered']} of {widgets['views']} widget outputs not drawn"
    )
