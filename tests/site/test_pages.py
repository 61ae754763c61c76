"""Every page of the book, as a reader's browser sees it: local files only, no errors, images, math, widgets."""

from __future__ import annotations

import siteutil as su


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


def test_no_console_warning_or_error(docname, page_reports):
    """A reader who opens the console sees nothing to worry about: no warning (Vega's while it compiles a chart
    included: the page is read once drawn), no error, nothing thrown."""
    report = page_reports(docname)
    problems = [f"console warning: {w}" for w in report.console_warnings]
    problems += [f"console error: {e}" for e in report.console_errors]
    problems += [f"page error: {e}" for e in report.page_errors]
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


def test_code_fits_its_box(docname, page_reports):
    """No code block or printed output scrolls sideways at 1280 px, in the theme's own font and white-space."""
    wide = page_reports(docname).wide_code
    assert not wide, f"{docname}: {len(wide)} code boxes are cut off at the right:\n" + "\n".join(
        f"  {w['chars']} chars, {w['overflowPx']} px too wide: {w['line']}" for w in wide[:10]
    )


def test_no_control_on_the_static_page_is_dead(docname, page_reports):
    """Every slider, menu or field on the page redraws something in the browser: ipywidgets need a kernel.

    A control counts when it belongs to a Vega chart, or to a page module that answers it in the browser
    (``data-aiayn-live``, the translator of 11.4, whose own test drives every control it has)."""
    report = page_reports(docname)
    dead = [c for c in report.controls if c["widget"] or not (c["chart"] or c["live"])]
    assert report.widgets["views"] == 0, f"{docname} embeds {report.widgets['views']} ipywidgets views"
    assert not dead, f"{docname}: controls that nothing in the browser answers: {dead[:10]}"
