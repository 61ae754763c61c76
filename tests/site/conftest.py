"""Fixtures for the website tests: the built site served on 127.0.0.1, headless Chromium, page loads.

Two Chromiums: ``browser`` gives a test a fresh incognito context, a page that starts from nothing (empty
caches and storage, its own routes); ``reader`` is one profile on disk where pages open one after another,
their caches warm, as a reader moves through the book (the layout, chart, control and quiz tests).

The site is $AIAYN_SITE (default: _build/html, built by `make book`); its pages are the documents listed in
$AIAYN_TOC (default: _toc.yml). Chromium is $AIAYN_CHROMIUM, else the system's, else Playwright's own.
"""

from __future__ import annotations

import pytest
import siteutil as su


def pytest_generate_tests(metafunc):
    """``docname``: every page in _toc.yml; ``chart``: (docname, chart id) for every chart of the built site."""
    docnames = su.toc_docnames()
    if "docname" in metafunc.fixturenames and "docname" not in _explicit(metafunc):
        metafunc.parametrize("docname", docnames, ids=su.page_id)
    if "chart" in metafunc.fixturenames:
        if not (su.SITE / "index.html").is_file():
            params = [pytest.param(None, id="site-missing")]
        else:
            params = [
                pytest.param((doc, cid), id=f"{su.page_id(doc)}-{cid.removeprefix('aiayn-chart-')}")
                for doc in docnames
                for cid in su.chart_ids(su.SITE / su.html_path(doc))
            ]
        metafunc.parametrize("chart", params)


def _explicit(metafunc) -> set[str]:
    return {name for mark in metafunc.definition.iter_markers("parametrize") for name in _argnames(mark)}


def _argnames(mark) -> list[str]:
    names = mark.args[0]
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


@pytest.fixture(scope="session")
def site():
    if not (su.SITE / "index.html").is_file():
        pytest.fail(f"no website in {su.SITE}: run `make book` first (or point AIAYN_SITE at a built site)")
    return su.SITE


@pytest.fixture(scope="session")
def base_url(site):
    server, url = su.serve(site)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def playwright():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright):
    chromium = su.launch(playwright)
    yield chromium
    chromium.close()


@pytest.fixture(scope="session")
def reader(playwright, tmp_path_factory):
    """A second Chromium, with a profile on disk: the pages a reader reads one after another, its caches warm.

    The tests that read or move what a page shows (layout, charts, controls, quizzes) open their pages
    here, each closed with ``su.close_tab``; tests that need a page to start from nothing (the
    translator's downloads, routes, an emulated colour scheme) take a fresh context of ``browser``.
    """
    context = su.launch_reader(playwright, tmp_path_factory.mktemp("reader-profile"))
    yield context
    context.close()


@pytest.fixture(scope="session")
def page_reports(reader, base_url, site):
    """docname -> PageReport: each page loaded once at desktop size, inspected and photographed, on first use."""
    cache: dict[str, su.PageReport] = {}

    def get(docname: str) -> su.PageReport:
        if docname not in cache:
            html = site / su.html_path(docname)
            if not html.is_file():
                pytest.fail(f"{su.html_path(docname)} is listed in _toc.yml but was not built")
            shot = su.screenshot_path(docname, "desktop")
            cache[docname] = su.inspect_page(reader, base_url, su.html_path(docname), shot=shot)
        return cache[docname]

    return get


class OpenPages:
    """One open page at a time, kept while consecutive tests use it (the chart tests of one chapter)."""

    def __init__(self, reader, base_url, site):
        self.reader, self.base_url, self.site = reader, base_url, site
        self.docname = self.page = self.report = None

    def get(self, docname: str):
        if docname != self.docname:
            self.close()
            if not (self.site / su.html_path(docname)).is_file():
                pytest.fail(f"{su.html_path(docname)} is listed in _toc.yml but was not built")
            self.page, self.report = su.open_page(self.reader, self.base_url, su.html_path(docname))
            self.docname = docname
        return self.page, self.report

    def close(self):
        if self.page is not None:
            su.close_tab(self.page)
        self.docname = self.page = self.report = None


@pytest.fixture(scope="session")
def open_pages(reader, base_url, site):
    pages = OpenPages(reader, base_url, site)
    yield pages
    pages.close()
