"""Helpers for the website tests: the pages from _toc.yml, loading a page in Chromium, reading what charts draw.

Everything here is plain functions (no fixtures), so a script can reuse it, e.g. to count the requests a
differently configured build makes.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import io
import json
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("AIAYN_SITE", ROOT / "_build" / "html"))
TOC = Path(os.environ.get("AIAYN_TOC", ROOT / "_toc.yml"))

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    # no host but the test server resolves: nothing leaves the machine, in any context (the reader's profile
    # has no route, which would turn its cache off), and a request for another host fails where it is made
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS = SITE.parent / "screenshots"  # _build/screenshots
MAX_SHOT_HEIGHT = 5000  # px: the top of a very long page is enough to look at, and keeps the files small
SETTLE_MS = 20_000  # the longest a page may take to draw its charts, math and widgets
QUIET_MS = 150  # a page is loaded when it has drawn and asked for nothing for this long


def _load_site_report():
    spec = importlib.util.spec_from_file_location("site_report", ROOT / "tools" / "site_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


site_report = _load_site_report()


# --- the pages -------------------------------------------------------------------------------------------


def toc_docnames(toc: Path = TOC) -> list[str]:
    """Every document in _toc.yml, root first, in reading order (``book/intro``, ``book/02_...``)."""
    data = yaml.safe_load(toc.read_text())
    names = [data["root"]]

    def walk(entries) -> None:
        for entry in entries or []:
            if "file" in entry:
                names.append(entry["file"])
            elif "glob" in entry:
                base = toc.parent
                names.extend(
                    sorted(p.relative_to(base).with_suffix("").as_posix() for p in base.glob(entry["glob"] + ".*"))
                )
            walk(entry.get("sections"))
            walk(entry.get("chapters"))

    walk(data.get("chapters"))
    for part in data.get("parts") or []:
        walk(part.get("chapters"))
    return [re.sub(r"\.(ipynb|md)$", "", name) for name in names]


def html_path(docname: str) -> str:
    return f"{docname}.html"


def page_id(docname: str) -> str:
    return docname.rsplit("/", 1)[-1]


def chart_ids(html_file: Path) -> list[str]:
    if not html_file.is_file():
        return []
    return [cid for cid, _ in site_report.chart_specs(html_file.read_text(encoding="utf-8"))]


def page_chart_ids(page) -> list[str]:
    """The ids of the charts on an open page."""
    return page.evaluate("() => Array.from(document.querySelectorAll('.aiayn-chart')).map(c => c.id)")


def slider_labels(html_file: Path) -> list[str]:
    if not html_file.is_file():
        return []
    specs = site_report.chart_specs(html_file.read_text(encoding="utf-8"))
    return [label for _, spec in specs for label in site_report.range_bindings(spec)]


# --- the server and the browser --------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the signature of the base class
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # a browser closing a connection early is not news
        pass


def serve(directory: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve a folder on 127.0.0.1 at a free port, in a thread; returns the server and its base URL."""
    server = _QuietServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, name="site-server", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


def chromium_executable() -> str | None:
    """The Chromium to launch: $AIAYN_CHROMIUM, else a system Chromium, else Playwright's own (None)."""
    if os.environ.get("AIAYN_CHROMIUM"):
        return os.environ["AIAYN_CHROMIUM"]
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def launch(playwright):
    return playwright.chromium.launch(executable_path=chromium_executable(), args=CHROMIUM_ARGS, headless=True)


def launch_reader(playwright, profile: Path):
    """A Chromium with a profile on disk in ``profile``, as a reader has: one page after another, whose
    HTTP cache and V8's code cache keep the scripts every page loads (MathJax, Vega, the theme's).

    A fresh context (``new_context``) is incognito: it starts with empty caches and has no code cache,
    so each page parses and compiles those scripts again. Pages opened here load in about 40 % less
    time (1.6 s against 2.7 s here). They share one origin's storage: ``close_tab`` clears it.
    """
    context = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=chromium_executable(), args=CHROMIUM_ARGS, headless=True,
        viewport=DESKTOP, device_scale_factor=1,
    )  # fmt: skip
    context.add_init_script(PAGE_JS)
    return context


def close_tab(page) -> None:
    """Close a page of the reader's profile, leaving its storage as the next page expects it: empty."""
    if not page.is_closed():
        page.evaluate("() => { localStorage.clear(); sessionStorage.clear(); }")
        page.close()


# --- JavaScript the tests call in the page (installed with context.add_init_script) ----------------------

PAGE_JS = r"""
window.__aiayn = (() => {
  const MARK = ['path', 'line', 'text', 'image', 'rect', 'circle'].map(t => `g.role-mark > ${t}`).join(', ');
  const ATTRS = ['d', 'fill', 'stroke', 'opacity', 'fill-opacity', 'x', 'y', 'x1', 'x2', 'y1', 'y2',
                 'width', 'height', 'transform'];
  const NUM = '(-?[\\d.]+(?:e[-+]?\\d+)?)';
  const RECT = new RegExp(`^M${NUM},${NUM}h${NUM}v${NUM}h-?[\\d.]+(?:e[-+]?\\d+)?Z$`);
  const chart = id => document.getElementById(id);
  const drawn = el => el.tagName !== 'path' ||
    ((el.getAttribute('d') || '') !== '' && el.getAttribute('d') !== 'M0,0h0v0h0Z');
  const sliders = id => Array.from(chart(id).querySelectorAll('.vega-bindings input[type=range]'));
  const label = input => {
    const l = input.closest('label') || input.closest('.vega-bind');
    const n = l && l.querySelector('.vega-bind-name');
    return ((n ? n.textContent : (l ? l.textContent : '')) || input.name || '').trim();
  };
  function marks(id) {
    const c = chart(id);
    if (!c) return [];
    if (!c.querySelector('svg') && c.querySelector('canvas')) return [c.querySelector('canvas')];  // canvas renderer
    return Array.from(c.querySelectorAll(MARK)).filter(drawn);
  }
  function markKinds(id) {
    const kinds = {};
    for (const el of marks(id)) {
      const kind = (Array.from(el.parentNode.classList).find(k => k.startsWith('mark-')) || 'mark-?').slice(5);
      kinds[kind] = (kinds[kind] || 0) + 1;
    }
    return kinds;
  }
  function signature(id) {
    const c = chart(id);
    if (!c) return null;
    const parts = [];
    const canvas = c.querySelector('svg') ? null : c.querySelector('canvas');
    if (canvas) parts.push(canvas.toDataURL());  // the canvas renderer: compare pixels
    for (const g of c.querySelectorAll('g.role-mark')) {
      parts.push('#' + g.getAttribute('class'));
      for (const el of g.children) {
        parts.push(el.tagName + '|' + ATTRS.map(a => el.getAttribute(a) || '').join('|') +
                   (el.tagName === 'text' ? '|' + el.textContent : ''));
      }
    }
    const text = parts.join('\n');
    let h = 0x811c9dc5;  // FNV-1a: a short fingerprint instead of megabytes of text
    for (let i = 0; i < text.length; i++) { h ^= text.charCodeAt(i); h = Math.imul(h, 0x01000193); }
    return `${parts.length}:${(h >>> 0).toString(16)}`;
  }
  function rects(id) {
    const c = chart(id);
    if (!c) return [];
    return Array.from(c.querySelectorAll('g.mark-rect.role-mark')).map(g =>
      Array.from(g.children).filter(drawn).map(el => {
        // Vega draws a plain rect as "Mx,yhWvHh-WZ": read it, and ask the browser only for other shapes
        const m = RECT.exec(el.getAttribute('d') || '');
        const b = m ? {x: +m[1], y: +m[2], width: +m[3], height: +m[4]} : el.getBBox();
        if (b.width < 0) { b.x += b.width; b.width = -b.width; }
        if (b.height < 0) { b.y += b.height; b.height = -b.height; }
        return {x: b.x, y: b.y, w: b.width, h: b.height, fill: el.getAttribute('fill') || '',
                opacity: el.getAttribute('opacity') || el.getAttribute('fill-opacity') || '1'};
      }));
  }
  function linePoints(el) {
    const d = el.getAttribute('d') || '';
    if (/^[ML0-9.,eE+\-\s]+$/.test(d)) {
      const nums = (d.match(/-?\d*\.?\d+(?:e[+\-]?\d+)?/gi) || []).map(Number);
      const pts = [];
      for (let i = 0; i + 1 < nums.length; i += 2) pts.push([nums[i], nums[i + 1]]);
      return pts;
    }
    const n = 400, L = el.getTotalLength(), pts = [];
    for (let i = 0; i <= n; i++) { const p = el.getPointAtLength(L * i / n); pts.push([p.x, p.y]); }
    return pts;
  }
  function lines(id) {
    const c = chart(id);
    if (!c) return [];
    return Array.from(c.querySelectorAll('g.mark-line.role-mark > path, g.mark-trail.role-mark > path'))
      .filter(drawn).map(linePoints);
  }
  function legend(id) {
    const c = chart(id);
    if (!c) return [];
    const out = [];
    for (const entry of c.querySelectorAll('.role-legend-entry .role-scope > g')) {
      const sym = entry.querySelector('.role-legend-symbol path');
      const lab = entry.querySelector('.role-legend-label text');
      if (sym && lab) out.push({label: lab.textContent, fill: sym.getAttribute('fill') || '',
                                stroke: sym.getAttribute('stroke') || ''});
    }
    return out;
  }
  function axisTicks(id, which) {
    // [pixel position, label text] of the labels of the chart's X or Y axes (one list per axis)
    const c = chart(id);
    if (!c) return [];
    return Array.from(c.querySelectorAll(`g.role-axis[aria-label^="${which}-axis"]`)).map(axis => ({
      scale: axis.getAttribute('aria-label'),
      labels: Array.from(axis.querySelectorAll('.role-axis-label text')).map(t => {
        const m = /translate\(([-\d.e]+),\s*([-\d.e]+)\)/.exec(t.getAttribute('transform') || '');
        return [m ? Number(which === 'Y' ? m[2] : m[1]) : NaN, t.textContent];
      }),
    }));
  }
  function bindings(id) {
    return sliders(id).map((el, index) => ({index, label: label(el), name: el.name, min: Number(el.min),
      max: Number(el.max), step: el.step === 'any' ? 0 : Number(el.step || 1), value: Number(el.value)}));
  }
  function setSlider(id, index, value) {
    const el = sliders(id)[index];
    el.value = String(value);
    el.dispatchEvent(new Event('input', {bubbles: true}));
    el.dispatchEvent(new Event('change', {bubbles: true}));
    return Number(el.value);
  }
  function waitChange(id, before, quietMs, maxMs) {
    // true once the chart's marks differ from `before`; false once the page has been idle (not busy
    // redrawing) for quietMs without a change, or after maxMs
    return new Promise(resolve => {
      const start = performance.now();
      let last = start, quietSince = start;
      const tick = () => {
        const now = performance.now();
        if (signature(id) !== before) return resolve(true);
        if (now - last > 250) quietSince = now;  // the page was busy (drawing?): start the quiet period again
        last = performance.now();
        if (last - quietSince > quietMs || last - start > maxMs) return resolve(false);
        setTimeout(tick, 100);
      };
      setTimeout(tick, 50);
    });
  }
  function chartsState() {
    const all = Array.from(document.querySelectorAll('.aiayn-chart'));
    return {total: all.length, drawn: all.filter(c => c.querySelector('svg') && marks(c.id).length > 0).length};
  }
  function widgetsState() {
    const state = document.querySelector('script[type="application/vnd.jupyter.widget-state+json"]');
    const views = Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]'));
    const rendered = views.filter(s => s.parentElement && s.parentElement.querySelector('.jupyter-widgets'));
    const text = document.body ? document.body.innerText : '';
    const err = /Error displaying widget[^\n]*/.exec(text);
    return {state: !!state, views: views.length, rendered: rendered.length,
            widgets: document.querySelectorAll('.jupyter-widgets').length, error: err ? err[0] : null};
  }
  function wideCode() {
    // code boxes (cell sources, printed outputs, listings) whose text is wider than the box: they scroll sideways
    const art = document.querySelector('article.bd-article') || document.body;
    return Array.from(art.querySelectorAll('pre')).filter(p => p.offsetParent !== null)
      .filter(p => p.scrollWidth > p.clientWidth + 1)
      .map(p => {
        const widest = (p.textContent || '').split('\n').reduce((a, b) => (b.length > a.length ? b : a), '');
        return {overflowPx: p.scrollWidth - p.clientWidth, line: widest.slice(0, 90), chars: widest.length};
      });
  }
  function cutOff() {
    // elements that reach past the right edge of the article's text column: they spill over the margin, or a
    // box that scrolls sideways (or clips) hides their right-hand part. One entry per outermost such element.
    const art = document.querySelector('article.bd-article');
    if (!art) return {column: null, elements: []};
    const box = art.getBoundingClientRect();
    const edge = box.right - parseFloat(getComputedStyle(art).paddingRight);
    const name = el => {
      const cls = (el.getAttribute('class') || '').trim().split(/\s+/).filter(Boolean).slice(0, 3);
      return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + cls.map(c => '.' + c).join('');
    };
    const selector = el => {
      const section = el.closest('section[id]');
      const parts = [];
      for (let p = el; p && p !== art && p !== section && parts.length < 4; p = p.parentElement) parts.unshift(name(p));
      return (section ? `section#${section.id} ` : '') + parts.join(' > ');
    };
    const found = [];
    const visit = (el, clipper) => {
      for (const child of el.children) {
        const s = getComputedStyle(child);
        if (s.display === 'none' || s.visibility === 'hidden' || s.position === 'fixed') continue;
        if (s.position === 'absolute' && s.clip !== 'auto') continue;  // drawn for screen readers only
        const r = child.getBoundingClientRect();
        if (r.width > 0 && r.height > 0 && r.right > edge + 1) {
          found.push({selector: selector(child), overflowPx: Math.round(r.right - edge),
                      hiddenBy: clipper ? `${name(clipper)} (overflow-x: ${getComputedStyle(clipper).overflowX})` : '',
                      text: (child.textContent.trim() ? child : (clipper || child)).textContent.trim()
                        .replace(/\s+/g, ' ').slice(0, 60)});  // MathJax draws its glyphs with CSS: no text
          continue;
        }
        visit(child, s.overflowX !== 'visible' ? child : clipper);
      }
    };
    visit(art, null);
    return {column: {left: Math.round(box.left), right: Math.round(edge)}, elements: found};
  }
  function controls() {
    // every form control in the article, and whether it belongs to a chart that redraws in the browser or to a
    // page module that answers it there (data-aiayn-live: the translator of 11.4, tests/site/test_translator.py)
    const art = document.querySelector('article.bd-article') || document.body;
    return Array.from(art.querySelectorAll('input, select, textarea, .jupyter-widgets'))
      .filter(el => el.offsetParent !== null || el.classList.contains('jupyter-widgets'))
      .map(el => ({tag: el.tagName.toLowerCase(), type: el.type || '',
                   chart: !!el.closest('.aiayn-chart .vega-bindings'), widget: !!el.closest('.jupyter-widgets'),
                   live: !!el.closest('[data-aiayn-live]'), name: el.name || el.className || ''}));
  }
  async function settled() {
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      try { await MathJax.startup.promise; } catch (e) {}
    }
    const c = chartsState(), w = widgetsState();
    const fontsReady = document.fonts ? document.fonts.status === 'loaded' : true;
    return c.drawn === c.total && (!w.state || w.views === 0 || w.rendered === w.views || !!w.error) && fontsReady;
  }
  async function images() {
    const imgs = Array.from(document.images);
    imgs.forEach(i => { if (i.loading === 'lazy') i.loading = 'eager'; });
    const timeout = new Promise(r => setTimeout(() => r('timeout'), 10000));
    const res = await Promise.all(imgs.map(i => Promise.race([i.decode().then(() => 'ok', () => 'broken'), timeout])));
    return imgs.map((i, k) => ({src: i.currentSrc || i.src || '(no src)', decode: res[k], width: i.naturalWidth,
                                complete: i.complete}));
  }
  function math() {
    const art = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
    const style = document.createElement('style');
    style.textContent = 'pre, code, .highlight, .cell_input, script, style { display: none !important; }';
    document.head.appendChild(style);
    const text = art.innerText;
    style.remove();
    const raw = [];
    const re = /\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\$[^$\n]{0,200}?[\\^_{}][^$\n]{0,200}?\$/g;
    let m;
    while ((m = re.exec(text)) && raw.length < 10) {
      raw.push(text.slice(Math.max(0, m.index - 40), m.index + m[0].length + 40).replace(/\s+/g, ' '));
    }
    const mathEls = Array.from(art.querySelectorAll('.math'));
    return {
      mathElements: mathEls.length,
      unrendered: mathEls.filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 80)),
      containers: document.querySelectorAll('mjx-container').length,
      errors: Array.from(document.querySelectorAll('mjx-merror'))
        .map(e => e.getAttribute('data-mjx-error') || e.textContent),
      raw,
    };
  }
  function overflow() {
    const W = window.innerWidth;
    const result = {innerWidth: W, html: document.documentElement.scrollWidth, body: document.body.scrollWidth,
                    culprits: []};
    if (result.html <= W + 1 && result.body <= W + 1) return result;
    const clips = el => { const s = getComputedStyle(el); return s.overflowX !== 'visible' || s.position === 'fixed'; };
    const describe = el => {
      const cls = (el.getAttribute('class') || '').trim().split(/\s+/).filter(Boolean).slice(0, 4).join('.');
      const r = el.getBoundingClientRect();
      return `<${el.tagName.toLowerCase()}${el.id ? ' id=' + el.id : ''}${cls ? ' class=' + cls : ''}> ` +
             `right=${Math.round(r.right + window.scrollX)} width=${Math.round(r.width)} ` +
             JSON.stringify((el.textContent || '').trim().slice(0, 60));
    };
    const walk = el => {
      for (const child of el.children) {
        const s = getComputedStyle(child);
        if (s.display === 'none' || s.position === 'fixed') continue;
        const r = child.getBoundingClientRect();
        if (r.right + window.scrollX > W + 1 && r.width > 0) {
          // the outermost element that sticks out; look inside only if it clips nothing itself
          if (!clips(child)) {
            const before = result.culprits.length;
            walk(child);
            if (result.culprits.length > before) continue;
          }
          result.culprits.push(describe(child));
          if (result.culprits.length >= 10) return;
        } else if (!clips(child)) {
          walk(child);
        }
      }
    };
    walk(document.body);
    return result;
  }
  return {marks, markKinds, signature, waitChange, rects, lines, legend, axisTicks, bindings, setSlider, chartsState,
          widgetsState, settled, images, math, overflow, wideCode, cutOff, controls};
})();
"""


# --- loading a page --------------------------------------------------------------------------------------


def is_local(url: str, base: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in ("data", "blob", "about", "javascript", ""):
        return True
    return f"{parts.scheme}://{parts.netloc}" == base


def new_context(browser, base: str, viewport: dict = DESKTOP, **kwargs):
    """A browser context that runs PAGE_JS in every page and answers no request to another host."""
    context = browser.new_context(viewport=viewport, device_scale_factor=1, **kwargs)
    context.add_init_script(PAGE_JS)
    context.route(lambda url: not is_local(url, base), lambda route: route.abort("blockedbyclient"))
    return context


@dataclass
class PageReport:
    url: str
    requests: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    failed_local: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    console_warnings: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    settled: bool = False
    settle_error: str = ""
    images: list[dict] = field(default_factory=list)
    math: dict = field(default_factory=dict)
    charts: dict = field(default_factory=dict)
    widgets: dict = field(default_factory=dict)
    overflow: dict = field(default_factory=dict)
    wide_code: list[dict] = field(default_factory=list)
    cut_off: dict = field(default_factory=dict)
    controls: list[dict] = field(default_factory=list)
    height: int = 0  # the page's full height in px, toggles collapsed as a reader first sees them
    screenshot_bytes: int = 0
    in_flight: int = 0  # requests made and not yet finished or failed
    last_request: float = 0.0  # time.perf_counter() of the latest request


def watch(page, base: str) -> PageReport:
    """Record every request, failed local load, console error or warning and page error of a page."""
    report = PageReport(url="")

    def on_request(request):
        report.requests.append(request.url)
        report.in_flight += 1
        report.last_request = time.perf_counter()
        if not is_local(request.url, base):
            report.external.append(request.url)

    def on_response(response):
        if response.status >= 400 and is_local(response.url, base):
            report.failed_local.append(f"{response.status} {response.url}")

    def on_done(request):
        report.in_flight -= 1

    def on_failed(request):
        on_done(request)
        if is_local(request.url, base) and not request.url.startswith("data:"):
            report.failed_local.append(f"{request.failure} {request.url}")

    def on_console(message):
        if message.type in ("error", "warning"):
            location = message.location or {}
            where = location.get("url", "").removeprefix(base)
            said = report.console_errors if message.type == "error" else report.console_warnings
            said.append(f"{message.text} ({where}:{location.get('lineNumber', '')})")

    page.on("request", on_request)
    page.on("response", on_response)
    page.on("requestfinished", on_done)
    page.on("requestfailed", on_failed)
    page.on("console", on_console)
    page.on("pageerror", lambda error: report.page_errors.append(str(error)))
    return report


def open_page(context, base: str, path: str, settle_ms: int = SETTLE_MS, viewport: dict | None = None):
    """Open a page and wait until its math, charts and widgets are drawn; returns (page, report).

    ``viewport`` sizes this page before it loads, where the context's own size is not the one wanted
    (the reader's profile opens its pages at DESKTOP).
    """
    page = context.new_page()
    if viewport is not None:
        page.set_viewport_size(viewport)
    report = watch(page, base)
    report.url = f"{base}/{path}"
    page.goto(report.url, wait_until="load")
    try:
        page.wait_for_function("() => window.__aiayn.settled()", timeout=settle_ms, polling=100)
        report.settled = True
    except Exception as error:  # noqa: BLE001 - the tests report what was not drawn
        report.settle_error = str(error).splitlines()[0]
    quiet(page, report)
    return page, report


def quiet(page, report: PageReport, quiet_ms: int = QUIET_MS, most_ms: int = 5_000) -> bool:
    """Wait until no request is in flight and none started for ``quiet_ms``, or ``most_ms`` went by.

    Playwright's "networkidle" waits 500 ms after the last request of every load; a drawn page has
    usually asked for everything by then, so this waits less. A page that keeps polling is judged on
    what it requested (False).
    """
    end = time.perf_counter() + most_ms / 1000
    while time.perf_counter() < end:
        idle = time.perf_counter() - report.last_request
        if report.in_flight <= 0 and idle * 1000 >= quiet_ms:
            return True
        page.wait_for_timeout(25)
    return False


def screenshot(page, path: Path, max_height: int = MAX_SHOT_HEIGHT) -> int:
    """A full-page screenshot cut at max_height pixels, saved as a 256-colour PNG; returns its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    viewport = page.viewport_size
    height = min(page.evaluate("() => document.documentElement.scrollHeight"), max_height)
    png = page.screenshot(
        full_page=True,
        clip={"x": 0, "y": 0, "width": viewport["width"], "height": max(height, viewport["height"])},
        animations="disabled",
        caret="hide",
    )
    try:  # a palette keeps the files a third of the size, and is plenty to look at a layout
        from PIL import Image

        Image.open(io.BytesIO(png)).convert("RGB").quantize(256, method=Image.Quantize.FASTOCTREE).save(path)
    except ImportError:
        path.write_bytes(png)
    return path.stat().st_size


def inspect_page(context, base: str, path: str, shot: Path | None = None) -> PageReport:
    """Load a page once and collect everything the page tests assert on; optionally take a screenshot."""
    page, report = open_page(context, base, path)
    try:
        report.images = page.evaluate("() => window.__aiayn.images()")
        report.math = page.evaluate("() => window.__aiayn.math()")
        report.charts = page.evaluate("() => window.__aiayn.chartsState()")
        report.widgets = page.evaluate("() => window.__aiayn.widgetsState()")
        report.overflow = page.evaluate("() => window.__aiayn.overflow()")
        report.wide_code = page.evaluate("() => window.__aiayn.wideCode()")
        report.cut_off = page.evaluate("() => window.__aiayn.cutOff()")
        report.controls = page.evaluate("() => window.__aiayn.controls()")
        report.height = page.evaluate("() => document.documentElement.scrollHeight")
        if shot is not None:
            report.screenshot_bytes = screenshot(page, shot)
    finally:
        close_tab(page)
    return report


def screenshot_path(docname: str, kind: str) -> Path:
    return SCREENSHOTS / f"{page_id(docname)}-{kind}.png"


# --- what a chart draws ----------------------------------------------------------------------------------


def signature(page, chart: str) -> str:
    return page.evaluate("id => window.__aiayn.signature(id)", chart)


def sliders(page, chart: str) -> list[dict]:
    return page.evaluate("id => window.__aiayn.bindings(id)", chart)


def set_slider(page, chart: str, index: int, value: float, quiet_ms: int = 1500, max_ms: int = 60_000):
    """Move a slider and wait until the chart's marks change, or until the page sat idle for quiet_ms.

    Returns (the value the slider took, whether the marks changed, seconds until they did).
    """
    before = signature(page, chart)
    was = sliders(page, chart)[index]["value"]
    start = time.perf_counter()
    taken = page.evaluate("([id, i, v]) => window.__aiayn.setSlider(id, i, v)", [chart, index, value])
    if taken == was:  # the slider did not move (already there, or snapped back): nothing to wait for
        return taken, False, 0.0
    changed = page.evaluate(
        "([id, before, quiet, most]) => window.__aiayn.waitChange(id, before, quiet, most)",
        [chart, before, quiet_ms, max_ms],
    )
    seconds = time.perf_counter() - start
    page.wait_for_timeout(50)  # let Vega finish the frame it is drawing
    return taken, changed, seconds


def find_charts_by_slider(page, pattern: str) -> list[tuple[str, int, dict]]:
    """(chart id, slider index, slider) for every range slider on the page whose label matches a regex."""
    found = []
    regex = re.compile(pattern, re.I)
    for chart in page_chart_ids(page):
        for slider in sliders(page, chart):
            if regex.search(slider["label"]) or regex.search(slider["name"]):
                found.append((chart, slider["index"], slider))
    return found


def rect_groups(page, chart: str) -> list[list[dict]]:
    """The rect marks (bars, heat-map cells) of a chart, one list per mark group: x, y, w, h, fill."""
    return json.loads(page.evaluate("id => JSON.stringify(window.__aiayn.rects(id))", chart))


def line_paths(page, chart: str) -> list[list[tuple[float, float]]]:
    """The points of every line a chart draws, in SVG pixels (y grows downwards)."""
    paths = json.loads(page.evaluate("id => JSON.stringify(window.__aiayn.lines(id))", chart))
    return [[tuple(p) for p in path] for path in paths]


def legend(page, chart: str) -> list[dict]:
    return page.evaluate("id => window.__aiayn.legend(id)", chart)


def bar_orientation(bars: list[dict]) -> str:
    """'vertical' when the bars share a width (their heights carry the value), else 'horizontal'."""
    widths = {round(b["w"], 1) for b in bars}
    heights = {round(b["h"], 1) for b in bars}
    return "vertical" if len(widths) <= len(heights) else "horizontal"


def bar_lengths(bars: list[dict]) -> list[float]:
    """The length of each bar in pixels along its value axis."""
    key = "h" if bar_orientation(bars) == "vertical" else "w"
    return [b[key] for b in bars]


def tallest_bar_height(page, chart: str) -> float:
    """The height (length along the value axis) of the tallest bar of a chart, in pixels."""
    return max((length for bars in rect_groups(page, chart) if bars for length in bar_lengths(bars)), default=0.0)


def _number(text: str) -> float | None:
    t = text.strip().replace("\u2212", "-").replace(",", "").replace("\u2009", "")
    scale = 1.0
    if t.endswith("%"):
        t, scale = t[:-1], 0.01
    elif t[-1:] in ("k", "M", "G", "m", "µ", "u"):
        t, scale = t[:-1], {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "µ": 1e-6, "u": 1e-6}[t[-1]]
    try:
        return float(t) * scale
    except ValueError:
        return None


def axis_mapper(page, chart: str, which: str = "Y"):
    """pixel -> data value along the chart's only linear X or Y axis, read from its tick labels (or None)."""
    axes = page.evaluate("([id, w]) => window.__aiayn.axisTicks(id, w)", [chart, which])
    if len(axes) != 1 or "linear" not in (axes[0]["scale"] or ""):
        return None
    ticks = sorted({(pos, value) for pos, text in axes[0]["labels"] if (value := _number(text)) is not None})
    if len(ticks) < 2 or ticks[0][0] == ticks[-1][0]:
        return None
    (p0, v0), (p1, v1) = ticks[0], ticks[-1]
    return lambda pixel: v0 + (pixel - p0) * (v1 - v0) / (p1 - p0)


def bar_values(page, chart: str) -> list[list[float]]:
    """Each bar's length in data units when the value axis can be read, else in pixels; one list per group."""
    out = []
    for bars in rect_groups(page, chart):
        if not bars:
            continue
        vertical = bar_orientation(bars) == "vertical"
        to_value = axis_mapper(page, chart, "Y" if vertical else "X")
        if to_value is None:
            out.append(bar_lengths(bars))
        elif vertical:
            out.append([abs(to_value(b["y"]) - to_value(b["y"] + b["h"])) for b in bars])
        else:
            out.append([abs(to_value(b["x"] + b["w"]) - to_value(b["x"])) for b in bars])
    return out


def cell_fill(cells: list[dict], column: int, row: int) -> str:
    """The fill colour of the heat-map cell in a given column and row (0-based, left to right, top to bottom)."""
    xs = sorted({round(c["x"], 1) for c in cells})
    ys = sorted({round(c["y"], 1) for c in cells})
    for c in cells:
        if round(c["x"], 1) == xs[column] and round(c["y"], 1) == ys[row]:
            return c["fill"]
    raise LookupError(f"no cell at column {column}, row {row}")


def fill_counts(cells: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["fill"]] = counts.get(c["fill"], 0) + 1
    return counts


def line_extent(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(top, bottom) of a line in SVG pixels: the smallest and largest y."""
    ys = [y for _, y in points]
    return min(ys), max(ys)


def line_peak_x(points: list[tuple[float, float]]) -> float:
    """The x of a line's highest point (its smallest SVG y); the first one on a plateau."""
    top = min(y for _, y in points)
    return next(x for x, y in points if y <= top + 1e-6)


# --- contrast: every visible text against what is behind it (WCAG 2's ratio) -------------------------------

CONTRAST_JS = r"""(selector) => {
  const parse = s => {
    const m = /^rgba?\(([^)]*)\)$/.exec(s.trim());
    if (!m) return null;  // a colour Chromium did not resolve to sRGB: reported, never passed
    const p = m[1].split(/[\s,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat(1);
  const fade = (c, opacity) => [c[0], c[1], c[2], c[3] * opacity];
  const lin = v => { v /= 255; return v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const luminance = c => 0.2126 * lin(c[0]) + 0.7152 * lin(c[1]) + 0.0722 * lin(c[2]);
  const ratio = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const hex = c => '#' + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, '0')).join('');
  // the colour behind an element: its ancestors' backgrounds laid over the canvas (white), outermost first,
  // each faded by the opacity of the ancestors it sits in; and that opacity, for the element's own colours
  const behind = el => {
    const chain = [];
    for (let e = el; e; e = e.parentElement) chain.unshift(e);
    let colour = [255, 255, 255, 1], opacity = 1, images = [];
    for (const e of chain) {
      const style = getComputedStyle(e);
      opacity *= Number(style.opacity);
      const bg = parse(style.backgroundColor);
      if (bg) colour = over(fade(bg, opacity), colour);
      if (style.backgroundImage !== 'none') images.push(e.tagName.toLowerCase() + '.' + e.className);
    }
    return {colour, opacity, images};
  };
  const describe = el => el.tagName.toLowerCase() +
    (el.getAttribute('class') ? '.' + el.getAttribute('class').trim().split(/\s+/).join('.') : '');
  const shown = el => el.checkVisibility({visibilityProperty: true}) &&
    Array.from(el.getClientRects()).some(r => r.width > 0 && r.height > 0);
  const results = [];
  const add = (el, kind, text, fg, under) => {
    if (!fg) { results.push({kind, text, where: describe(el), fg: null, bg: hex(under.colour), ratio: 0}); return; }
    const colour = over(fade(fg, under.opacity), under.colour);
    results.push({kind, text: text.trim().slice(0, 60), where: describe(el), fg: hex(colour),
                  bg: hex(under.colour), ratio: ratio(colour, under.colour), images: under.images,
                  disabled: Boolean(el.closest(':disabled'))});
  };
  for (const root of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const el = node.parentElement;
      if (!node.textContent.trim() || !el || el.closest('option, script, style, title, noscript')) continue;
      if (!shown(el)) continue;
      if (el instanceof SVGElement) {  // SVG text: its fill, against the page behind the drawing
        const style = getComputedStyle(el);
        const fill = parse(style.fill);
        add(el, 'svg text', node.textContent,
            fill && fade(fill, Number(style.fillOpacity)), behind(el.ownerSVGElement.parentElement));
      } else {
        add(el, 'text', node.textContent, parse(getComputedStyle(el).color), behind(el));
      }
    }
    // what a control shows as its value, and the edge that shows where it is (WCAG's 3:1 for components)
    for (const el of root.querySelectorAll('input:not([type=checkbox]):not([type=radio]):not([type=range]), ' +
                                           'textarea, select, button')) {
      if (!shown(el)) continue;
      if (el.tagName !== 'BUTTON') add(el, 'value', el.value, parse(getComputedStyle(el).color), behind(el));
      const style = getComputedStyle(el);
      const edge = parse(style.borderTopColor);
      const outside = behind(el.parentElement);
      const filled = parse(style.backgroundColor);
      const inside = filled ? over(fade(filled, outside.opacity), outside.colour) : outside.colour;
      // the edge is the border, or, where the control's own fill stands out more, the fill
      const border = Number.parseFloat(style.borderTopWidth) > 0 && edge ? ratio(over(edge, outside.colour),
                                                                                 outside.colour) : 0;
      results.push({kind: 'edge', text: el.value || el.textContent.trim().slice(0, 60), where: describe(el),
                    fg: edge && hex(over(edge, outside.colour)), bg: hex(outside.colour),
                    ratio: Math.max(border, ratio(inside, outside.colour)),
                    disabled: el.disabled});
    }
  }
  return results;
}"""


def contrasts(page, selector: str) -> list[dict]:
    """Each visible text (HTML and SVG) and form control under ``selector`` with its colour, the colour behind it
    and their contrast ratio (WCAG 2: 1 to 21); kind 'text', 'svg text', 'value' (a control's value) or 'edge'
    (a control against what is around it: its border, or its fill where that stands out more)."""
    return page.evaluate(CONTRAST_JS, selector)


# --- the translator's page without its model (chapter 11.4 shows chapter 11.2's committed examples) -----------


def without_model(context) -> None:
    """Answer every request for the translator's model files with a 404, so that page 11.4 falls back to its
    committed examples (as a site built without the model does)."""
    context.route("**/_static/translator/model/**", lambda route: route.fulfill(status=404, body="not here"))
