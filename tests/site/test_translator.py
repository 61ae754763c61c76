"""Chapter 11.4: the translator that runs in the reader's browser, driven in Chromium.

With the model in the built site (``make book`` with ``$AIAYN_MODEL``), the page must give, for a sentence of
its reader's, the English that ``aiayn.export`` gives in Python for the same int8 files, greedy and with beam
search; draw that sentence's attention and redraw it for another layer and head; refuse bad input with a
message; and load nothing heavy before the reader asks, nor anything twice. Without the model files, it shows
chapter 11.2's examples and one line on how to get the live version.

A site built without the model on a machine that has it fails here: it would publish the examples instead.
The times the page shows are printed (``pytest -s``), not asserted: they are the reader's machine's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import siteutil as su

DOC = "book/11_4_in_your_browser"
TRANSLATOR = su.SITE / "_static" / "translator"
MODEL = TRANSLATOR / "model"
PUBLISHED = su.ROOT.parent / "shared" / "runs" / "multi30k-h100"  # as tests/conftest.py
SENTENCE = "Eine Frau in einem roten Mantel geht mit ihrem Hund durch den Park."  # 13 words, not one of 11.2's
LOAD_MS = 180_000  # 51 MB from 127.0.0.1, and onnxruntime-web's start
TRANSLATE_MS = 120_000
HEAVY = re.compile(r"\.(onnx|wasm)$")


def built_model(site) -> Path:
    """The int8 files of the built site; a failure (not a skip) if the site lacks them but this machine has the
    model, and a skip, saying so, where no model is to be had."""
    built = json.loads((TRANSLATOR / "site.json").read_text())  # tools/site_assets.py: what the build holds
    if built["model"] is not None and (MODEL / "manifest.json").is_file():
        return MODEL
    here = [p for p in (os.environ.get("AIAYN_MODEL"), str(PUBLISHED)) if p and Path(p).is_dir()]
    if here:
        pytest.fail(
            f"the site in {site} was built without the model, though {here[0]} holds it: its page 11.4 shows "
            f"examples instead of the translator. Build it with `AIAYN_MODEL={here[0]} make book`"
        )
    pytest.skip("no published model on this machine ($AIAYN_MODEL, ../shared/runs): the site has no translator")


def python_twin(model_files: Path):
    """aiayn.export over the site's own files: the model, vocabulary, settings and the sentence's ids."""
    from aiayn.export import OnnxModel, Vocabulary, source_ids

    vocab = Vocabulary.load(model_files)
    settings = json.loads((model_files / "translator.json").read_text())
    ids = source_ids(vocab, SENTENCE, settings["max_len"])
    return OnnxModel(model_files), vocab, settings, ids


def _expected(twin, beam: int):
    from aiayn.export import attention, detokenize, translate_ids

    model, vocab, settings, ids = twin
    ys = translate_ids(model, vocab, ids, settings, beam)
    return ys, detokenize(vocab, ys), attention(model, ids, ys)


CELLS_JS = """() => Array.from(document.querySelectorAll('.aiayn-heatmap g.cells rect'))
  .map(r => [r.getAttribute('x'), r.getAttribute('y'), r.getAttribute('fill'), r.textContent])"""
LABELS_JS = """() => Array.from(document.querySelectorAll('.aiayn-heatmap g.labels text')).map(t => t.textContent)"""
WATCH_BUTTON_JS = """() => {
  window.__disabledWhileTranslating = false;
  const button = document.querySelector('.aiayn-translate');
  new MutationObserver(() => { if (button.disabled) window.__disabledWhileTranslating = true; })
    .observe(button, {attributes: true, attributeFilter: ['disabled']});
}"""


def _cells(page) -> list:
    return page.evaluate(CELLS_JS)


def _weights(cells, rows: int, cols: int) -> np.ndarray:
    """The map as the page shows it: each cell's tooltip ends in its weight, to 2 decimals."""
    xs = sorted({float(x) for x, _, _, _ in cells})
    ys = sorted({float(y) for _, y, _, _ in cells})
    assert (len(ys), len(xs)) == (rows, cols), f"the map has {len(ys)} x {len(xs)} cells, not {rows} x {cols}"
    w = np.zeros((rows, cols))
    for x, y, _, title in cells:
        w[ys.index(float(y)), xs.index(float(x))] = float(title.rsplit(": ", 1)[1])
    return w


def _translate(page, beam: bool) -> tuple[str, str, bool]:
    """Choose greedy or beam search, press Translate, wait; returns the English, the timing line and whether the
    button was disabled meanwhile."""
    page.check("input[name=aiayn-decoding][value=beam]" if beam else "input[name=aiayn-decoding][value=greedy]")
    page.evaluate(WATCH_BUTTON_JS)
    before = page.inner_text(".aiayn-timing") if page.is_visible(".aiayn-timing") else ""
    page.click(".aiayn-translate")
    page.wait_for_function(
        """before => !document.querySelector('.aiayn-translate').disabled
             && document.querySelector('.aiayn-timing').textContent !== before
             && document.querySelector('.aiayn-heatmap g.cells rect') !== null""",
        arg=before,
        timeout=TRANSLATE_MS,
    )
    disabled = page.evaluate("() => window.__disabledWhileTranslating")
    return page.inner_text(".aiayn-english"), page.inner_text(".aiayn-timing"), disabled


def _message_after(page, text: str) -> str:
    page.fill("#aiayn-german", text)
    page.evaluate("() => { document.querySelector('.aiayn-message').textContent = ''; }")
    page.click(".aiayn-translate")
    page.wait_for_function("() => document.querySelector('.aiayn-message').textContent !== ''", timeout=60_000)
    return page.inner_text(".aiayn-message")


def test_the_page_translates_as_python_does(browser, base_url, site):
    twin = python_twin(built_model(site))
    context = su.new_context(browser, base_url)
    try:
        page, report = su.open_page(context, base_url, su.html_path(DOC))
        page.wait_for_selector(".aiayn-load", timeout=20_000)
        label = page.inner_text(".aiayn-load")
        assert re.fullmatch(r"Load the translator \(\d+\.\d MB\)", label), label
        heavy = [u for u in report.requests if HEAVY.search(u)]
        assert not heavy, f"the page loaded {heavy} before the reader asked"

        started = page.evaluate("() => performance.now()")
        page.click(".aiayn-load")
        page.wait_for_function(
            "() => !document.querySelector('.aiayn-translate').disabled || "
            "document.querySelector('.aiayn-message.aiayn-error')",
            timeout=LOAD_MS,
        )
        load_s = (page.evaluate("() => performance.now()") - started) / 1000
        message = page.inner_text(".aiayn-message")
        assert message.startswith("Ready:") and "downloaded" in message, message

        page.fill("#aiayn-german", SENTENCE)
        model, vocab, settings, ids = twin
        times = {}
        for beam in (False, True):
            k = settings["beam"] if beam else 1
            ys, english, maps = _expected(twin, k)
            shown, timing, disabled = _translate(page, beam)
            assert shown == english, f"K = {k}: the page wrote {shown!r}, Python {english!r}"
            assert disabled, "the Translate button stayed enabled while the page translated"
            times[k] = int(re.search(r": ([\d,]+) ms", timing).group(1).replace(",", ""))
            print(f"{'greedy' if k == 1 else f'beam {k}'}: {timing}")

        # the attention of the last translation (beam search): the pieces, then another layer, then another head
        ids_pieces = [vocab.pieces[i] for i in ids]
        out_pieces = [vocab.pieces[i] for i in ys[1:]]
        labels = page.evaluate(LABELS_JS)
        assert labels == out_pieces + ids_pieces, labels
        assert page.input_value(".aiayn-kind") == "cross"
        N, h = maps["cross"].shape[:2]
        assert page.input_value(".aiayn-layer") == str(N) and page.input_value(".aiayn-head") == "mean"
        first = _cells(page)
        page.select_option(".aiayn-layer", "1")
        second = _cells(page)
        assert [c[2] for c in second] != [c[2] for c in first], "the map did not change with the layer"
        page.select_option(".aiayn-head", "2")
        third = _cells(page)
        assert [c[2] for c in third] != [c[2] for c in second], "the map did not change with the head"
        shown = _weights(third, len(out_pieces), len(ids_pieces))
        np.testing.assert_allclose(shown, maps["cross"][0, 1], atol=0.011)  # layer 1, head 2, to 2 decimals

        # bad input gets a message, and the button comes back
        assert _message_after(page, "   ") == "Type a German sentence first."
        assert _message_after(page, "😀🎉").startswith("Nothing to translate")
        too_long = " ".join(["Ein Hund läuft über die Wiese."] * 40)
        assert re.search(r"too long: the sentence has \d+ pieces \+ <eos>, the model reads at most 256",
                         _message_after(page, too_long))
        assert "at most 256" in _message_after(page, "Hund " * 5000)
        assert not page.is_disabled(".aiayn-translate")

        problems = report.console_errors + report.page_errors + report.failed_local + report.external
        assert not problems, problems
        print(f"load: {load_s:.1f} s from the local server; greedy {times[1]} ms, beam {settings['beam']} "
              f"{times[settings['beam']]} ms for {len(SENTENCE.split())} words ({len(ids)} pieces)")

        # a second visit reads the files from Cache Storage
        again, second_report = su.open_page(context, base_url, su.html_path(DOC))
        again.wait_for_selector(".aiayn-load", timeout=20_000)
        before = len(second_report.requests)
        again.click(".aiayn-load")
        again.wait_for_function("() => !document.querySelector('.aiayn-translate').disabled", timeout=LOAD_MS)
        assert "from this browser's cache" in again.inner_text(".aiayn-message")
        fetched = [u for u in second_report.requests[before:] if HEAVY.search(u)]
        assert not fetched, f"the second visit downloaded {fetched} again"
        assert not (second_report.console_errors + second_report.page_errors)
    finally:
        context.close()


def _fallback(browser, base_url, site_json: dict | None):
    """The page with every file of translator/model answered 404 (and site.json replaced, if given)."""
    context = su.new_context(browser, base_url)
    context.route("**/_static/translator/model/**", lambda route: route.fulfill(status=404, body="not here"))
    if site_json is not None:
        context.route("**/_static/translator/site.json", lambda route: route.fulfill(json=site_json))
    page, report = su.open_page(context, base_url, su.html_path(DOC))
    page.wait_for_selector(".aiayn-heatmap g.cells rect", timeout=20_000)
    return context, page, report


def _check_examples(page):
    hint = page.inner_text(".aiayn-hint")
    assert "AIAYN_MODEL=… make book" in hint and "book's website" in hint, hint
    assert len(page.query_selector_all("p.aiayn-hint")) == 1
    assert "non-commercial research and educational purposes only" in page.inner_text(".aiayn-terms")
    options = page.eval_on_selector_all(".aiayn-example option", "os => os.map(o => o.textContent)")
    assert options[0] == "test line 209: Zwei Bauarbeiter diskutieren auf einer Baustelle.", options
    assert len(options) == 3
    assert "construction workers" in page.inner_text(".aiayn-english")
    first = _cells(page)
    page.select_option(".aiayn-layer", "1")
    assert [c[2] for c in _cells(page)] != [c[2] for c in first], "the layer menu did not redraw the map"
    second = _cells(page)
    page.select_option(".aiayn-head", "8")
    assert [c[2] for c in _cells(page)] != [c[2] for c in second], "the head menu did not redraw the map"
    page.select_option(".aiayn-example", "757")
    assert "drums" in page.inner_text(".aiayn-english")


def test_a_site_without_the_model_shows_the_examples(browser, base_url, site):
    """A build without the model: site.json names none, and the page asks the model folder for nothing."""
    real = json.loads((site / "_static" / "translator" / "site.json").read_text())
    context, page, report = _fallback(browser, base_url, real | {"model": None})
    try:
        _check_examples(page)
        asked = [u for u in report.requests if "/translator/model/" in u]
        assert not asked, asked
        problems = report.console_errors + report.page_errors + report.failed_local + report.external
        assert not problems, problems
    finally:
        context.close()


def test_missing_model_files_fall_back_to_the_examples(browser, base_url):
    """site.json names a model whose files answer 404: the same examples. The one console error is Chromium's
    own line for the failed request of the manifest (a browser logs every 404; no page code can stop it)."""
    context, page, report = _fallback(browser, base_url, None)
    try:
        _check_examples(page)
        assert not report.page_errors, report.page_errors
        others = [e for e in report.console_errors
                  if not (e.startswith("Failed to load resource: the server responded with a status of 404")
                          and "/_static/translator/model/manifest.json" in e)]  # fmt: skip
        assert not others, others
    finally:
        context.close()
