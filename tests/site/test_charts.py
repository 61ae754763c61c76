"""Every chart draws marks, every slider changes what is drawn, and the named sliders change it the right way."""

from __future__ import annotations

import os
import re

import pytest
import siteutil as su

# The interactive figures the chapters promise: (chapter file name pattern, slider label pattern). A check is
# generated for every chapter in _toc.yml whose file name matches, and for any other page whose charts carry
# a slider whose label matches; on those pages the chart MUST be there.
NAMED = {
    "temperature": (r"^(?!.*why).*attention", r"temperature"),
    "positional": (r"positional", None),  # every slider of the chapter
    "padding": (r"mask", r"padding|\bpad\b"),
    "warmup": (r"train|schedul|noam|optimi", r"warm"),
    "smoothing": (r"smooth", r"ε|epsilon|smooth"),
}


# The longest a chart may take to redraw after a slider moves (headless Chromium, no GPU, 2 busy cores: a
# heat map of 10,000 SVG cells takes 7-16 s there). Each slider's time is printed (pytest -s).
SLIDER_REDRAW_S = float(os.environ.get("AIAYN_SLIDER_REDRAW_S", 30))


def named_pages(check: str) -> list[str]:
    chapter, slider = NAMED[check]
    docs = su.toc_docnames()
    out = [d for d in docs if re.search(chapter, su.page_id(d), re.I)]
    if slider:
        out += [
            d
            for d in docs
            if d not in out and any(re.search(slider, s, re.I) for s in su.slider_labels(su.SITE / su.html_path(d)))
        ]
    return out


def other_value(slider: dict) -> float:
    return slider["min"] if slider["value"] >= slider["max"] else slider["max"]


def low_value(slider: dict, avoid_zero: bool = False) -> float:
    """The slider's minimum; a tenth of the way up when the minimum is zero or less and that would not make sense."""
    if avoid_zero and slider["min"] <= 0:
        return slider["min"] + 0.1 * (slider["max"] - slider["min"])
    return slider["min"]


def find(page, docname: str, check: str):
    pattern = NAMED[check][1]
    found = su.find_charts_by_slider(page, pattern)
    if not found:
        labels = [s["label"] for c in su.page_chart_ids(page) for s in su.sliders(page, c)]
        pytest.fail(f"{docname}: no chart with a slider labelled /{pattern}/ (sliders on the page: {labels})")
    return found


def no_new_errors(report, before: tuple[int, int], docname: str) -> None:
    errors = report.console_errors[before[0] :] + report.page_errors[before[1] :]
    assert not errors, f"{docname}: errors while moving sliders: {errors}"


# --- every chart -----------------------------------------------------------------------------------------


def test_chart_draws_and_every_slider_changes_it(chart, site, open_pages):
    docname, chart_id = chart
    page, report = open_pages.get(docname)
    try:
        page.wait_for_function("id => window.__aiayn.marks(id).length > 0", arg=chart_id, timeout=su.SETTLE_MS)
    except Exception:  # noqa: BLE001
        pytest.fail(
            f"{docname}: chart {chart_id} drew no marks (no svg, or an empty one); errors: "
            f"{report.console_errors + report.page_errors}"
        )
    kinds = page.evaluate("id => window.__aiayn.markKinds(id)", chart_id)
    errors_before = (len(report.console_errors), len(report.page_errors))
    unchanged, slow = [], []
    for slider in su.sliders(page, chart_id):
        target = other_value(slider)
        taken, changed, seconds = su.set_slider(page, chart_id, slider["index"], target)
        if not changed:  # the first other value may draw the same picture: try the other end
            back = slider["min"] if target == slider["max"] else slider["max"]
            taken, changed, seconds = su.set_slider(page, chart_id, slider["index"], back)
        marks = page.evaluate("id => window.__aiayn.marks(id).length", chart_id)
        print(
            f"{docname} {chart_id} marks {kinds}: slider {slider['label']!r} {slider['value']} -> {taken}: "
            f"{f'redrawn in {seconds:.2f} s, {marks} marks' if changed else 'NO CHANGE'}"
        )
        if not changed:
            unchanged.append(f"{slider['label']!r} ({slider['min']}..{slider['max']}, was {slider['value']})")
        elif seconds > SLIDER_REDRAW_S:
            slow.append(f"{slider['label']!r} -> {taken}: {seconds:.1f} s for {marks} marks")
    assert not unchanged, f"{docname}: chart {chart_id}: moving these sliders changes nothing drawn: {unchanged}"
    assert not slow, (
        f"{docname}: chart {chart_id} takes more than {SLIDER_REDRAW_S} s to redraw (fewer marks, please): {slow}"
    )
    no_new_errors(report, errors_before, docname)


# --- the named interactive figures ------------------------------------------------------------------------


def peak_measure(page, chart_id: str) -> list[float]:
    """Per bar group: the tallest bar as a share of all bars (scale-free), or its value when the axis can be read."""
    out = []
    for values in su.bar_values(page, chart_id):
        if len(values) >= 2 and sum(values) > 0:
            out.append(max(values) / sum(values))
    return out


@pytest.mark.parametrize("docname", named_pages("temperature"), ids=su.page_id)
def test_temperature_reshapes_the_attention_weights(docname, open_pages):
    """A higher temperature flattens softmax: the tallest bar gets shorter (relative to the others)."""
    page, report = open_pages.get(docname)
    errors_before = (len(report.console_errors), len(report.page_errors))
    for chart_id, index, slider in find(page, docname, "temperature"):
        lo, hi = low_value(slider, avoid_zero=True), slider["max"]
        su.set_slider(page, chart_id, index, lo)
        tall_lo, shares_lo = su.tallest_bar_height(page, chart_id), peak_measure(page, chart_id)
        cells_lo = [c["fill"] for g in su.rect_groups(page, chart_id) for c in g]
        su.set_slider(page, chart_id, index, hi)
        tall_hi, shares_hi = su.tallest_bar_height(page, chart_id), peak_measure(page, chart_id)
        cells_hi = [c["fill"] for g in su.rect_groups(page, chart_id) for c in g]
        print(
            f"{docname} {chart_id}: temperature {lo:g} -> {hi:g}: tallest bar {tall_lo:.1f} -> {tall_hi:.1f} px, "
            f"its share {shares_lo} -> {shares_hi}"
        )
        assert cells_lo, f"{chart_id}: the temperature chart draws no bars"
        if shares_lo and shares_hi:
            assert any(h < lo_ - 1e-3 for lo_, h in zip(shares_lo, shares_hi, strict=False)), (
                f"{chart_id}: at temperature {hi:g} the tallest bar is not lower than at {lo:g}: "
                f"share {shares_lo} -> {shares_hi}, {tall_lo:.1f} -> {tall_hi:.1f} px"
            )
        else:  # a heat map of weights: the colours must change
            assert cells_lo != cells_hi, f"{chart_id}: no cell changes colour with temperature"
    no_new_errors(report, errors_before, docname)


@pytest.mark.parametrize("docname", named_pages("positional"), ids=su.page_id)
def test_positional_encoding_sliders_redraw_the_curves(docname, open_pages):
    page, report = open_pages.get(docname)
    charts = su.page_chart_ids(page)
    with_sliders = [(c, s) for c in charts for s in su.sliders(page, c)]
    assert with_sliders, f"{docname}: the positional-encoding chapter has no chart with a slider"
    errors_before = (len(report.console_errors), len(report.page_errors))
    for chart_id, slider in with_sliders:

        def measure(cid=chart_id):
            lines = [[(round(x, 1), round(y, 1)) for x, y in path] for path in su.line_paths(page, cid)]
            cells = [
                (round(c["x"], 1), round(c["y"], 1), round(c["h"], 1), c["fill"])
                for g in su.rect_groups(page, cid)
                for c in g
            ]
            return lines, cells

        before = measure()
        extent_before = [su.line_extent(p) for p in before[0] if p]
        su.set_slider(page, chart_id, slider["index"], other_value(slider))
        after = measure()
        extent_after = [su.line_extent(p) for p in after[0] if p]
        print(
            f"{docname} {chart_id} {slider['label']!r}: {len(before[0])} lines (y-extent {extent_before} -> "
            f"{extent_after}), {len(before[1])} -> {len(after[1])} cells, fills {fills(before[1])} -> "
            f"{fills(after[1])}"
        )
        assert before[0] or before[1], f"{chart_id}: draws neither lines nor cells"
        assert before != after, f"{chart_id}: slider {slider['label']!r} moves no line point and recolours no cell"
    no_new_errors(report, errors_before, docname)


def fills(cells: list[tuple]) -> dict[str, int]:
    return su.fill_counts([{"fill": c[-1]} for c in cells])


MAY_ATTEND = re.compile(r"attend|allow|visible|keep|seen|yes|true|^1$", re.I)
BLOCKED = re.compile(r"not|block|mask|hidden|cannot|can't|no\b|false|^0$", re.I)


@pytest.mark.parametrize("docname", named_pages("padding"), ids=su.page_id)
def test_padding_slider_changes_the_cells_that_may_attend(docname, open_pages):
    """More padding: fewer (query, key) cells coloured 'may attend'."""
    page, report = open_pages.get(docname)
    errors_before = (len(report.console_errors), len(report.page_errors))
    for chart_id, index, slider in find(page, docname, "padding"):
        entries = su.legend(page, chart_id)
        attend = [e["fill"] for e in entries if MAY_ATTEND.search(e["label"]) and not BLOCKED.search(e["label"])]
        su.set_slider(page, chart_id, index, slider["min"])
        cells_lo = [c for g in su.rect_groups(page, chart_id) for c in g]
        su.set_slider(page, chart_id, index, slider["max"])
        cells_hi = [c for g in su.rect_groups(page, chart_id) for c in g]
        counts_lo, counts_hi = su.fill_counts(cells_lo), su.fill_counts(cells_hi)
        print(
            f"{docname} {chart_id}: padding {slider['min']:g} -> {slider['max']:g}: cells by colour "
            f"{counts_lo} -> {counts_hi}; legend {entries}"
        )
        assert cells_lo, f"{chart_id}: the mask chart draws no cells"
        if attend:
            n_lo = sum(counts_lo.get(f, 0) for f in attend)
            n_hi = sum(counts_hi.get(f, 0) for f in attend)
            assert n_hi < n_lo, (
                f"{chart_id}: with padding {slider['max']:g} {n_hi} cells may attend, not fewer than the {n_lo} "
                f"with padding {slider['min']:g} (colour {attend})"
            )
        else:  # no legend to name the colour: the count of some colour must change
            assert counts_lo != counts_hi, f"{chart_id}: the padding slider recolours no cell"
    no_new_errors(report, errors_before, docname)


@pytest.mark.parametrize("docname", named_pages("warmup"), ids=su.page_id)
def test_warmup_slider_moves_the_learning_rate_peak(docname, open_pages):
    """The Noam schedule peaks at step = warmup: a longer warm-up moves the peak right."""
    page, report = open_pages.get(docname)
    errors_before = (len(report.console_errors), len(report.page_errors))
    for chart_id, index, slider in find(page, docname, "warmup"):
        su.set_slider(page, chart_id, index, low_value(slider, avoid_zero=True))
        lines_lo = su.line_paths(page, chart_id)
        su.set_slider(page, chart_id, index, slider["max"])
        lines_hi = su.line_paths(page, chart_id)
        assert lines_lo and lines_hi, f"{chart_id}: the schedule chart draws no line"
        peaks_lo = [su.line_peak_x(p) for p in lines_lo if p]
        peaks_hi = [su.line_peak_x(p) for p in lines_hi if p]
        print(f"{docname} {chart_id}: warmup {slider['min']:g} -> {slider['max']:g}: peak x {peaks_lo} -> {peaks_hi}")
        pairs = list(zip(peaks_lo, peaks_hi, strict=False))
        assert any(hi > lo + 1 for lo, hi in pairs), f"{chart_id}: no line's peak moves right: {pairs}"
        assert not any(hi < lo - 1 for lo, hi in pairs), f"{chart_id}: a line's peak moves left: {pairs}"
    no_new_errors(report, errors_before, docname)


@pytest.mark.parametrize("docname", named_pages("smoothing"), ids=su.page_id)
def test_label_smoothing_lowers_the_true_class(docname, open_pages):
    """The target is 1 - ε (+ ε/K) for the true class: its bar goes down as ε goes up."""
    page, report = open_pages.get(docname)
    errors_before = (len(report.console_errors), len(report.page_errors))
    for chart_id, index, slider in find(page, docname, "smoothing"):
        su.set_slider(page, chart_id, index, slider["min"])
        values_lo = su.bar_values(page, chart_id)
        tall_lo = su.tallest_bar_height(page, chart_id)
        su.set_slider(page, chart_id, index, slider["max"])
        values_hi = su.bar_values(page, chart_id)
        tall_hi = su.tallest_bar_height(page, chart_id)
        print(
            f"{docname} {chart_id}: ε {slider['min']:g} -> {slider['max']:g}: bars {values_lo} -> {values_hi}, "
            f"tallest {tall_lo:.1f} -> {tall_hi:.1f} px"
        )
        assert any(len(v) >= 2 for v in values_lo), f"{chart_id}: the label-smoothing chart draws no bars"
        lowered = []
        for lo, hi in zip(values_lo, values_hi, strict=False):
            if len(lo) < 2 or len(lo) != len(hi) or sum(lo) <= 0 or sum(hi) <= 0:
                continue
            true = max(range(len(lo)), key=lo.__getitem__)  # the true class: the tallest bar at the smallest ε
            lowered.append(hi[true] / sum(hi) < lo[true] / sum(lo) - 1e-3)
        assert any(lowered), f"{chart_id}: the true class's bar does not go down as ε goes up"
    no_new_errors(report, errors_before, docname)


def translator_pages() -> list[str]:
    """The pages of chapter 11 that hold its attention explorer (section 11.2, what the model attends to)."""
    pages = [d for d in su.toc_docnames() if re.search(r"^11_2_heads", su.page_id(d))]
    assert pages, "no page 11_2_heads* in _toc.yml: where did chapter 11's attention explorer go?"
    return pages


@pytest.mark.parametrize("docname", translator_pages(), ids=su.page_id)
def test_attention_menu_switches_the_sentence_and_sliders_the_head(docname, open_pages):
    """Chapter 11's explorer: the sentence menu and the layer/head sliders each redraw the trained model's map."""
    page, report = open_pages.get(docname)
    menus = page.evaluate(
        "() => Array.from(document.querySelectorAll('.aiayn-chart'))"
        ".filter(c => c.querySelector('.vega-bindings select')).map(c => c.id)"
    )
    assert menus, f"{docname}: no chart with a sentence menu"
    chart = menus[0]
    page.wait_for_function("id => window.__aiayn.marks(id).length > 0", arg=chart, timeout=su.SETTLE_MS)
    before = su.signature(page, chart)
    options = page.evaluate(
        """id => {
          const select = document.getElementById(id).querySelector('.vega-bindings select');
          const values = Array.from(select.options).map(o => o.value);
          const next = values.find(v => v !== select.value);
          select.value = next;
          select.dispatchEvent(new Event('change', {bubbles: true}));
          select.dispatchEvent(new Event('input', {bubbles: true}));
          return values.length;
        }""",
        chart,
    )
    assert options >= 2, f"{docname}: the sentence menu offers {options} sentence(s)"
    changed = page.evaluate("([id, b]) => window.__aiayn.waitChange(id, b, 1500, 60000)", [chart, before])
    assert changed, f"{docname}: choosing another sentence did not redraw the attention map"
    labels = [s["label"] for s in su.sliders(page, chart)]
    assert any(re.search("layer", s, re.I) for s in labels) and any(re.search("head", s, re.I) for s in labels), (
        f"{docname}: the explorer lacks a layer or a head slider: {labels}"
    )
    for index, slider in enumerate(su.sliders(page, chart)):
        before = su.signature(page, chart)
        su.set_slider(page, chart, index, other_value(slider))
        after = su.signature(page, chart)
        assert after != before, f"{docname}: moving '{slider['label']}' did not redraw the attention map"
