"""The book's own widgets readable in dark mode and in light: chapter 11.4's translator and attention map, and
chapter 9's BLEU calculator, in Chromium with the reader's system set to each scheme.

pydata-sphinx-theme follows the system's scheme (``html[data-theme]``) for a reader who chose "System
Settings" in its switch (the site starts in light mode: ``default_mode`` in _config.yml); every visible text of
a widget, HTML or SVG, must then stand out from what is behind it by WCAG 2's contrast ratio of 4.5:1 (level AA
for text), and each form control from what is around it by 3:1 (WCAG's rule for the parts of a control). A
disabled button is exempt, as WCAG exempts inactive controls. The worst text of each page is printed
(``pytest -s``).

Beside colour, what else a reader must be able to read: the BLEU calculator's chips say their kind in a mark,
not by colour alone, and its table stays inside a 390 px phone; the step-through charts' tooltips show the
record's digits; chapter 2.3's chart loads without a warning on the console.
"""

from __future__ import annotations

import json

import pytest
import siteutil as su

TRANSLATOR = "book/11_4_in_your_browser"
BLEU = "book/09_bleu"
TEXT_RATIO = 4.5  # WCAG 2.x AA, normal text
EDGE_RATIO = 3.0  # WCAG 2.1 non-text contrast: the boundary of a control
SCHEMES = ["light", "dark"]


def _open(browser, base_url, docname: str, scheme: str, viewport: dict = su.DESKTOP, routes=()):
    """The page in a browser whose system is set to ``scheme``, for a reader who chose the theme's "System
    Settings" (the site's default mode is light: _config.yml)."""
    context = su.new_context(browser, base_url, viewport=viewport, color_scheme=scheme)
    context.add_init_script("localStorage.setItem('mode', 'auto')")
    for pattern, handler in routes:
        context.route(pattern, handler)
    page, report = su.open_page(context, base_url, su.html_path(docname))
    theme = page.evaluate("() => document.documentElement.dataset.theme")
    assert theme == scheme, f"the system's scheme is {scheme}, but the theme drew the page {theme}"
    return context, page, report


def _check(found: list[dict], what: str) -> None:
    assert found, f"{what}: no text found to measure"
    texts = [f for f in found if f["kind"] != "edge" and not f["disabled"]]
    edges = [f for f in found if f["kind"] == "edge" and not f["disabled"]]
    worst = min(texts, key=lambda f: f["ratio"])
    print(f"\n{what}: {len(texts)} texts, worst {worst['ratio']:.2f}:1 ({worst['fg']} on {worst['bg']}, "
          f"{worst['where']}: {worst['text']!r})")  # fmt: skip
    if edges:
        edge = min(edges, key=lambda f: f["ratio"])
        print(f"{what}: {len(edges)} controls, faintest edge {edge['ratio']:.2f}:1 ({edge['where']})")
    low = [f for f in texts if f["ratio"] < TEXT_RATIO] + [f for f in edges if f["ratio"] < EDGE_RATIO]
    assert not low, "\n".join(
        f"{f['ratio']:.2f}:1 {f['kind']} {f['where']} {f['fg']} on {f['bg']}: {f['text']!r}" for f in low
    )


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_translator_is_readable(browser, base_url, site, scheme):
    """The live translator before its model loads: the box, the choices, sampling's settings, the buttons, the
    lines under the box, a message, and the error of a failed load (every file it downloads answers 404; where
    some arrived, their progress would write over the error: page.mjs)."""
    built = json.loads((site / "_static" / "translator" / "site.json").read_text())
    if built["model"] is None:
        pytest.skip("the site was built without the model: the examples' test measures what it shows")
    routes = [("**/_static/translator/model/*.{onnx,json}", _unless_manifest), ("**/*.wasm", _missing)]
    context, page, _ = _open(browser, base_url, TRANSLATOR, scheme, routes=routes)
    try:
        page.wait_for_selector(".aiayn-translator .aiayn-load", timeout=20_000)
        page.check("input[name=aiayn-decoding][value=sample]")  # sampling's settings appear
        assert page.is_visible(".aiayn-sampling")
        _check(su.contrasts(page, ".aiayn-translator"), f"11.4 translator, {scheme}")
        page.click(".aiayn-load")
        page.wait_for_selector(".aiayn-message.aiayn-error", timeout=60_000)
        found = su.contrasts(page, ".aiayn-translator")
        assert any(f["where"] == "p.aiayn-message.aiayn-error" for f in found), found
        _check(found, f"11.4 translator after a failed load, {scheme}")
    finally:
        context.close()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_examples_and_their_attention_map_are_readable(browser, base_url, scheme):
    """Without the model: the menu, the German and English lines and the map's labels, titles and legend."""
    routes = [("**/_static/translator/site.json", _without_model(base_url))]
    context, page, _ = _open(browser, base_url, TRANSLATOR, scheme, routes=routes)
    try:
        page.wait_for_selector(".aiayn-heatmap g.cells rect", timeout=20_000)
        found = su.contrasts(page, ".aiayn-translator")
        svg = [f for f in found if f["kind"] == "svg text"]
        assert len(svg) > 10 and any("German piece" in f["text"] for f in svg), svg  # labels and titles
        assert any(f["where"].startswith("p.aiayn-english") for f in found), found
        _check(found, f"11.4 examples and map, {scheme}")
        page.select_option(".aiayn-kind", "decoder_self")  # a redrawn map keeps the theme's colours
        _check(su.contrasts(page, ".aiayn-heatmap"), f"11.4 decoder self-attention map, {scheme}")
    finally:
        context.close()


def _missing(route):
    route.fulfill(status=404, body="not here")


def _unless_manifest(route):
    """The manifest as it is (the page offers to load the model); any other file of the model: 404."""
    if route.request.url.endswith("/manifest.json"):
        route.continue_()
    else:
        _missing(route)


def _without_model(base_url):
    """A route handler answering site.json as this build's, with no model: the page shows the examples."""

    def handle(route):
        real = json.loads(route.fetch().text())
        route.fulfill(json=real | {"model": None})

    return handle


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_bleu_calculator_is_readable(browser, base_url, scheme):
    """The fields, the tokens, every kind of n-gram chip (matched, clipped, missed), the table and the score."""
    context, page, _ = _open(browser, base_url, BLEU, scheme)
    try:
        page.wait_for_selector("#aiayn-bleu[data-aiayn-live] [data-bleu='score']", timeout=10_000)
        page.fill("#aiayn-bleu input[name=hypothesis]", "the the the cat sat on a red mat")  # all three kinds
        page.fill("#aiayn-bleu textarea[name=references]", "the cat sat on the mat")
        for kind in ("hit", "clip", "miss"):
            assert page.locator(f"#aiayn-bleu .aiayn-{kind}").count() > 0, kind
        _check(su.contrasts(page, "#aiayn-bleu"), f"9 BLEU calculator, {scheme}")
    finally:
        context.close()


CHIPS_JS = """() => Array.from(document.querySelectorAll('#aiayn-bleu .aiayn-gram'))
  .map(c => [c.className, c.textContent])"""
FIT_JS = """() => {
  const root = document.getElementById('aiayn-bleu');
  const table = root.querySelector('table');
  const box = table.closest('.aiayn-table-box') || table;
  const width = document.documentElement.clientWidth;
  const right = el => el.getBoundingClientRect().right;
  return {width, page: document.documentElement.scrollWidth, root: right(root), box: right(box),
          boxScrolls: getComputedStyle(box).overflowX, table: table.getBoundingClientRect().width,
          boxWidth: box.clientWidth, score: right(root.querySelector('.aiayn-total'))};
}"""


def test_the_bleu_chips_say_what_they_are_without_colour_and_the_table_fits_a_phone(browser, base_url):
    """At 390 px: each chip's kind is written on it (a mark and, for a clipped one, its clipped count), not told
    by colour alone; the calculator stays inside the page, its table inside its own box."""
    context, page, _ = _open(browser, base_url, BLEU, "light", viewport=su.PHONE)
    try:
        page.wait_for_selector("#aiayn-bleu[data-aiayn-live] [data-bleu='score']", timeout=10_000)
        page.fill("#aiayn-bleu input[name=hypothesis]", "the the the cat sat on a red mat")
        page.fill("#aiayn-bleu textarea[name=references]", "the cat sat on the mat\nthe mat the cat sat on")
        chips = page.evaluate(CHIPS_JS)
        marks = {"aiayn-hit": "✓", "aiayn-clip": "✓", "aiayn-miss": "✗"}
        kinds = set()
        for classes, text in chips:
            kind = next(k for k in marks if k in classes.split())
            kinds.add(kind)
            assert text.startswith(marks[kind]), (kind, text)
            if kind == "aiayn-clip":
                assert "→" in text, text  # "the ×3 → 2": its count and what it is clipped to
        assert kinds == set(marks), kinds
        # the clipped count the chip shows is the most any one reference has: "the" twice in each
        assert any(t.endswith("the ×3 → 2") for _, t in chips), chips
        fit = page.evaluate(FIT_JS)
        assert fit["page"] <= fit["width"], f"the page is {fit['page']} px wide at {fit['width']} px: {fit}"
        assert fit["root"] <= fit["width"] and fit["box"] <= fit["width"], fit
        assert fit["score"] <= fit["width"], fit
        if fit["table"] > fit["boxWidth"] + 1:  # a wider table scrolls inside its own box
            assert fit["boxScrolls"] in ("auto", "scroll"), fit
    finally:
        context.close()


def test_chapter_2_3_logs_no_warning(browser, base_url, site):
    """The embedding map of 2.3 draws without a word from Vega (or anything else) on the console."""
    context = su.new_context(browser, base_url, color_scheme="light")
    page = context.new_page()
    said: list[str] = []
    page.on("console", lambda m: said.append(f"{m.type}: {m.text}") if m.type in ("warning", "error") else None)
    try:
        page.goto(f"{base_url}/{su.html_path('book/02_3_tying_and_sentences')}", wait_until="load")
        page.wait_for_function("() => window.__aiayn.settled()", timeout=su.SETTLE_MS, polling=100)
        charts = page.evaluate("() => window.__aiayn.chartsState()")
        assert charts, "2.3 drew no chart"
        assert not said, (  # the chart is the one the notebook stored: re-execute 2.3 after changing it
            f"{said}; if aiayn.viz.embedding_map_chart no longer makes this, re-execute "
            "book/02_3_tying_and_sentences.ipynb and rebuild"
        )
    finally:
        context.close()


def _tooltip_formats(spec) -> tuple[set[str], list[str]]:
    """Every format a spec's tooltips give a number, and every calculate expression that formats one."""
    formats, calculated = set(), []
    if isinstance(spec, dict):
        tips = spec.get("encoding", {}).get("tooltip")
        for tip in tips if isinstance(tips, list) else [tips] if isinstance(tips, dict) else []:
            if tip.get("type") == "quantitative":
                formats.add(tip.get("format", "(none)"))
        if "format(" in str(spec.get("calculate", "")):
            calculated.append(spec["calculate"])
        parts = spec.values()
    elif isinstance(spec, list):
        parts = spec
    else:
        return formats, calculated
    for part in parts:
        f, c = _tooltip_formats(part)
        formats |= f
        calculated += c
    return formats, calculated


def _flat(x) -> list[float]:
    return [v for item in x for v in _flat(item)] if isinstance(x, list) else [] if x is None else [float(x)]


def test_step_through_tooltips_show_the_record_s_digits(browser, base_url):
    """Chapters 5 to 7's step-through charts (the package's, as a re-executed chapter stores them): each tooltip
    formats a number to the significant digits the record keeps (aiayn.pages.stepthrough: DIGITS, the scores one
    more), and Vega's format, run in the page, gives back exactly the record's numbers: no digit made up, none
    dropped."""
    from aiayn import viz
    from aiayn.pages.stepthrough import DIGITS, load_stepthrough

    record = load_stepthrough()
    assert record["sizes"]["digits"] == DIGITS
    kept, scores = f".{DIGITS}~r", f".{DIGITS + 1}~r"
    for make in (viz.encoder_attention_steps_chart, viz.add_norm_steps_chart, viz.decoder_attention_steps_chart):
        formats, calculated = _tooltip_formats(make(record).to_dict())
        assert formats == {kept}, (make.__name__, formats)
        shown = [c for c in calculated if "datum.value" in c and "~r" in c]  # the step bars' value
        assert all(kept in c and scores in c for c in shown), (make.__name__, calculated)
        assert bool(shown) == ("attention" in make.__name__), (make.__name__, calculated)
    layer = record["encoder"]["layers"][0]
    values = {
        kept: _flat(layer["attention"]["weights"])[:60] + _flat(layer["attention"]["q"])[:60]
        + _flat(layer["feed_forward"]["activations"])[:30] + _flat(record["next"]["p"])[:60]
        + _flat(layer["add_norm_1"]["norm"]["norm"])[:20],
        scores: _flat(layer["attention"]["scores"])[:120],
    }  # fmt: skip
    context = su.new_context(browser, base_url)
    try:
        page, _ = su.open_page(context, base_url, su.html_path("book/05_4_heads_and_cross"))
        for fmt, numbers in values.items():
            expression = "[" + ", ".join(f"format({v!r}, '{fmt}')" for v in numbers) + "]"
            texts = page.evaluate(
                """async (expression) => {
                  const view = new vega.View(vega.parse({signals: [{name: 'out', update: expression}]}),
                                             {renderer: 'none'});
                  await view.runAsync();
                  return view.signal('out');
                }""",
                expression,
            )
            back = [float(t.replace("\u2212", "-")) for t in texts]
            assert back == numbers, [(t, v) for t, v in zip(texts, numbers, strict=True) if float(
                t.replace("\u2212", "-")) != v][:5]  # fmt: skip
            assert any(len(t.lstrip("\u2212-0.").replace(".", "")) == int(fmt[1]) for t in texts), texts
    finally:
        context.close()
