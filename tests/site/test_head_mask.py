"""Chapter 11.4's head grid (issue 44): the reader switches attention heads off in the page's translator.

Driven in Chromium on the built site, against ``aiayn.export.translator`` on the site's own int8 files: with
every head the page's English is the one it gave before any click; each preset gives the English that Python
gives with the same mask (read back from the buttons' aria-pressed); the 100-sentence sacreBLEU the page prints is
sacreBLEU of the page's own translations, which are Python's (``masked_bleu``) but for at most 100 - INT8_SAME
(int8 rounds apart on x86 and in WebAssembly), and Python's BLEU to the digit where all are; a scoring run takes
at most SCORE_S seconds on one idle core, or NATIVE times what onnxruntime takes for the same run on one thread
of this machine where that is more (a slower CPU), the limit grown with the machine's load average (printed
with ``pytest -s``: the machine is shared); the grid is one stop of the Tab key whose arrow keys move and whose Space
toggles; it fits a 390 px phone; its text stands out 4.5:1 in light and dark; and while it scores, no script of
the page's holds the main thread over LONGEST_TASK_MS (Chromium's long animation frames name the scripts).
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest
import siteutil as su
from test_contrast import SCHEMES, _check, _open
from test_translator import DOC, SENTENCE, TRANSLATE_MS, _load, built_model

HEADS = su.SITE / "_static" / "translator" / "model" / "heads.json"
SCORE_S = 10.0  # the limit for a scoring run, on one thread of an idle core
# ... on a slower CPU, this many times Python's onnxruntime on one thread (an AMD EPYC with AVX2: the page
# 15.4 s at load 3.0 on 2 cores, Python 5.3 s at load 0.7)
NATIVE = 3.5
SCORE_MS = 180_000  # what the test waits for two runs on a loaded machine
LONGEST_TASK_MS = 50  # the limit for any task of the page's main thread
INT8_SAME = 97  # of the 100 translations, the page's (WebAssembly) equal to Python's (x86) on the int8 files
MASK_JS = """() => {
  const mask = [];
  for (const b of document.querySelectorAll('.aiayn-head-toggle')) {
    const [k, n, i] = ['kind', 'layer', 'head'].map(a => Number(b.dataset[a]));
    ((mask[k] ??= [])[n] ??= [])[i] = b.getAttribute('aria-pressed') === 'true' ? 1 : 0;
  }
  return mask;
}"""
DONE_JS = """() => { const text = document.querySelector('.aiayn-message').textContent;
  return text !== '' && !text.startsWith('Translating') && !text.startsWith('Drawing')
    && !document.querySelector('.aiayn-translate').disabled; }"""
FOCUS_JS = """() => { const b = document.activeElement;
  if (!b.classList.contains('aiayn-head-toggle')) return null;
  return [b.dataset.kind, b.dataset.layer, b.dataset.head].map(Number); }"""
# Chromium's long animation frames while the page scores, with the scripts that ran in them (those over 5 ms, each
# named by its file): which of the page's own modules held the main thread, and for how long, apart from what a
# loaded machine adds to a frame's rendering
OBSERVE_FRAMES_JS = """() => {
  window.__frames = [];
  window.__longTasks = [];
  new PerformanceObserver(list => {
    for (const e of list.getEntries()) window.__frames.push({ms: e.duration, blocking: e.blockingDuration,
      scripts: e.scripts.map(s => ({url: s.sourceURL, ms: s.duration, function: s.sourceFunctionName,
        at: s.sourceCharPosition, invoker: s.invoker, layout_ms: s.forcedStyleAndLayoutDuration}))});
  }).observe({type: 'long-animation-frame'});
  new PerformanceObserver(list => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
    .observe({type: 'longtask'});
}"""
SCORED_JS = """() => !document.querySelector('.aiayn-score').disabled
  && /sacreBLEU|failed/.test(document.querySelector('.aiayn-heads-line').textContent)"""


def twin(model_files):
    from aiayn.export.translator import OnnxModel, Vocabulary, load_settings

    return OnnxModel(model_files), Vocabulary.load(model_files), load_settings(model_files)


def python_english(tw, mask) -> str:
    from aiayn.export.translator import detokenize, source_ids, translate_ids

    model, vocab, settings = tw
    ids = source_ids(vocab, SENTENCE, settings["max_len"])
    return detokenize(vocab, translate_ids(model, vocab, ids, settings, 1, head_mask=mask))


def _opened(page):
    """Load the translator, open the grid."""
    page.wait_for_selector(".aiayn-load", timeout=20_000)
    _load(page)
    page.wait_for_selector(".aiayn-heads summary", timeout=20_000)
    page.click(".aiayn-heads summary")
    page.wait_for_selector(".aiayn-head-toggle", state="visible")


def _english_after(page, act) -> str:
    """Do ``act`` (a click, a preset) and wait for the page's translation to end; the English."""
    page.evaluate("() => { document.querySelector('.aiayn-message').textContent = ''; }")
    act()
    page.wait_for_function(DONE_JS, timeout=TRANSLATE_MS)
    return page.inner_text(".aiayn-english")


@pytest.fixture(scope="module")
def grid(browser, base_url, site):
    built_model(site)
    if not HEADS.is_file():
        pytest.fail(f"{HEADS} is missing: build the site with the test sentences ($AIAYN_DATA)")
    context = su.new_context(browser, base_url)
    try:
        page, report = su.open_page(context, base_url, su.html_path(DOC))
        _opened(page)
        page.check("input[name=aiayn-decoding][value=greedy]")
        page.fill("#aiayn-german", SENTENCE)
        before = _english_after(page, lambda: page.click(".aiayn-translate"))
        yield page, report, before
    finally:
        context.close()


def test_every_head_gives_the_english_unchanged(grid, site):
    page, report, before = grid
    tw = twin(built_model(site))
    assert page.evaluate(MASK_JS) == [[[1] * 8] * 3] * 3
    assert before == python_english(tw, None)
    assert _english_after(page, lambda: page.select_option(".aiayn-preset", "no-cross-3")) != before
    assert _english_after(page, lambda: page.select_option(".aiayn-preset", "all")) == before
    assert not (report.console_errors + report.page_errors)


def test_each_preset_changes_the_english_where_python_does(grid, site):
    page, report, before = grid
    tw = twin(built_model(site))
    record = json.loads(HEADS.read_text("utf-8"))
    changed = []
    for preset in ("one", "no-cross-1", "no-cross-2", "no-cross-3", "costly"):
        shown = _english_after(page, lambda p=preset: page.select_option(".aiayn-preset", p))
        mask = page.evaluate(MASK_JS)
        assert mask != [[[1] * 8] * 3] * 3
        assert shown == python_english(tw, mask), preset
        heads = 3 * record["shape"][1] * record["shape"][2]
        assert re.search(rf"\d+ of {heads} heads", page.inner_text(".aiayn-timing"))
        if shown != before:
            changed.append(preset)
        print(f"{preset}: {shown}")
    assert "one" in changed and "no-cross-3" in changed, changed  # the heads that carry the alignment
    # a click on one button: the mask Python is given is the buttons'
    shown = _english_after(page, lambda: page.click(".aiayn-head-toggle[data-kind='2'][data-layer='2'][data-head='0']"))
    assert shown == python_english(tw, page.evaluate(MASK_JS))
    assert page.input_value(".aiayn-preset") == "own"
    assert not (report.console_errors + report.page_errors)


def test_the_100_sentence_bleu_is_python_s(grid, site):
    """Both runs the page scores (every head, then the preset's mask), within SCORE_S each; no task of the main
    thread longer than LONGEST_TASK_MS meanwhile."""
    from sacrebleu.metrics import BLEU

    from aiayn.export.scores import masked_bleu

    page, report, _ = grid
    model, vocab, settings = twin(built_model(site))
    record = json.loads(HEADS.read_text("utf-8"))
    assert len(record["pairs"]) == 100
    _english_after(page, lambda: page.select_option(".aiayn-preset", "no-cross-3"))
    mask = page.evaluate(MASK_JS)
    page.evaluate(OBSERVE_FRAMES_JS)
    page.click(".aiayn-score")
    page.wait_for_function("() => document.querySelector('.aiayn-heads-line').textContent.includes('Scoring')")
    page.wait_for_function(SCORED_JS, timeout=SCORE_MS)
    line = page.inner_text(".aiayn-heads-line")
    frames, tasks = page.evaluate("() => [window.__frames, window.__longTasks]")
    ours = [x for f in frames for x in f["scripts"] if "/_static/translator/" in x["url"]]
    load = os.getloadavg()[0]
    print(f"the page: {line}\nwhile scoring, the load average {load:.1f} on {os.cpu_count()} cores: "
          f"{len(frames)} animation frames over 50 ms (blocking {max((f['blocking'] for f in frames), default=0):.0f} "
          f"ms at most), tasks over 50 ms {[round(t) for t in tasks]}; the page's own scripts over 5 ms in them: "
          f"{[(x['url'].rsplit('/', 1)[1], round(x['ms'])) for x in ours]}")
    found = re.search(r"([\d.]+) with (\d+) of 72 heads, ([\d.]+) with every head; ([\d.]+) s", line)
    assert found, line
    printed, on, every, seconds = found.groups()
    assert int(on) == sum(map(sum, sum(mask, [])))
    pairs = [tuple(p) for p in record["pairs"]]
    references = [[english for _, english in pairs]]
    shown = page.eval_on_selector_all(".aiayn-heads-list .aiayn-hyp", "spans => spans.map(s => s.textContent)")
    # the printed BLEU is sacreBLEU of the page's own 100 translations
    assert printed == f"{BLEU().corpus_score(shown, references).score:.2f}"
    started = time.perf_counter()
    python = masked_bleu(model, vocab, settings, pairs, mask)
    native = time.perf_counter() - started
    python_every = masked_bleu(model, vocab, settings, pairs)
    same = sum(a == b for a, b in zip(shown, python["hypotheses"], strict=True))
    print(f"Python on the same files: {python['bleu']:.2f} with the mask ({native:.1f} s), "
          f"{python_every['bleu']:.2f} every head; {same} of 100 translations the same as the page's with the mask")
    assert every == f"{python_every['bleu']:.2f}"
    # int8 on x86 and in WebAssembly round some sums apart (aiayn.export.translator's docstring): about one
    # sentence in 50 may differ; where none does, the BLEU is Python's to the digit
    assert same >= INT8_SAME, f"only {same} of 100 translations are Python's"
    if same == 100:
        assert printed == f"{python['bleu']:.2f}"
    assert abs(float(printed) - python["bleu"]) < 0.5
    assert float(printed) < float(every)  # the last layer's cross-attention carries the alignment
    # one thread of a machine whose other jobs leave it 1 / (load / cores) of a core is that much slower
    limit = max(SCORE_S, NATIVE * native) * max(1.0, load / os.cpu_count())
    assert float(seconds) <= limit, (
        f"scoring took {seconds} s, more than {limit:.1f} s at load {load:.1f} (Python: {native:.1f} s)")
    held = [x for x in ours if x["ms"] > LONGEST_TASK_MS]
    assert not held, f"the page's scripts held the main thread: {held}"
    assert not (report.console_errors + report.page_errors)


def test_the_grid_works_by_keyboard(grid):
    """One stop of the Tab key; the arrows move, Home and End reach a row's ends, Space switches a head."""
    page, _, _ = grid
    _english_after(page, lambda: page.select_option(".aiayn-preset", "all"))
    page.focus(".aiayn-preset")
    page.keyboard.press("Tab")
    start = page.evaluate(FOCUS_JS)
    assert start is not None, "Tab from the preset menu does not reach the grid"
    page.evaluate("() => document.querySelector('.aiayn-head-toggle[tabindex=\"0\"]').focus()")
    page.keyboard.press("Home")
    for key in ("ArrowUp",) * 9:
        page.keyboard.press(key)
    assert page.evaluate(FOCUS_JS) == [0, 0, 0]
    for key, where in [("ArrowRight", [0, 0, 1]), ("ArrowDown", [0, 1, 1]), ("End", [0, 1, 7]),
                       ("ArrowRight", [0, 1, 7]), ("ArrowDown", [0, 2, 7]), ("ArrowDown", [1, 0, 7])]:  # fmt: skip
        page.keyboard.press(key)
        assert page.evaluate(FOCUS_JS) == where, key
    selector = ".aiayn-head-toggle[data-kind='1'][data-layer='0'][data-head='7']"
    _english_after(page, lambda: page.keyboard.press("Space"))
    assert page.get_attribute(selector, "aria-pressed") == "false"
    assert page.evaluate(FOCUS_JS) == [1, 0, 7]  # the focus stays on the head
    page.keyboard.press("Tab")
    on_score = page.evaluate("() => document.activeElement.classList.contains('aiayn-score')")
    assert on_score, "the grid is more than one stop of the Tab key"
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(FOCUS_JS) == [1, 0, 7]  # back where the reader left
    _english_after(page, lambda: page.keyboard.press("Enter"))
    assert page.get_attribute(selector, "aria-pressed") == "true"


FIT_JS = """() => {
  const root = document.querySelector('.aiayn-heads');
  const wide = [...root.querySelectorAll('*')].filter(el => el.getBoundingClientRect().right > innerWidth + 0.5)
    .map(el => `${el.tagName.toLowerCase()}.${el.className}: ${Math.round(el.getBoundingClientRect().right)}`);
  return {wide, scroll: document.documentElement.scrollWidth, width: innerWidth};
}"""


def test_the_grid_fits_a_phone(browser, base_url, site):
    built_model(site)
    context = su.new_context(browser, base_url, viewport=su.PHONE)
    try:
        page, report = su.open_page(context, base_url, su.html_path(DOC))
        _opened(page)
        fit = page.evaluate(FIT_JS)
        print(f"390 px: {fit}")
        assert not fit["wide"] and fit["scroll"] <= fit["width"], fit
        box = page.locator(".aiayn-head-toggle").first.bounding_box()
        assert box["width"] >= 24 and box["height"] >= 24, box  # a target a finger can press
        page.locator(".aiayn-heads").screenshot(path=str(su.screenshot_path(DOC, "phone-heads")))
        assert not (report.console_errors + report.page_errors)
    finally:
        context.close()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_grid_is_readable(browser, base_url, site, scheme):
    """Heads on and off, the preset menu, the buttons and the lines, 4.5:1 in light and in dark."""
    built_model(site)
    context, page, _ = _open(browser, base_url, DOC, scheme)
    try:
        _opened(page)
        page.click(".aiayn-head-toggle[data-kind='0'][data-layer='0'][data-head='0']")  # one head off
        found = su.contrasts(page, ".aiayn-heads")
        assert any("aiayn-head-toggle" in f["where"] for f in found), found
        _check(found, f"11.4 head grid, {scheme}")
    finally:
        context.close()
