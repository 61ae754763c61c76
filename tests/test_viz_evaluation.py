"""Tests for the helpers of chapters 9 (BLEU) and 10 (label smoothing): aiayn.calibration, and their
additions to aiayn.viz and aiayn.pages.widgets."""

import math
import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from aiayn.bleu import sentence_bleu  # noqa: E402
from aiayn.calibration import (
    confidence_and_correct,
    expected_calibration_error,
    reliability_bins,
)
from aiayn.pages.widgets import BleuCalculator  # noqa: E402
from aiayn.viz import (
    bleu_match_html,
    bleu_table,
    brevity_penalty_figure,
    label_smoothing_chart,
    reliability_figure,
    sentence_bleu_histogram,
    smoothing_loss_figure,
)
from aiayn.viz.evaluation import _bleu_ngram_status  # noqa: E402

THANKS = "Thank you so much, my brother"
COUCH = "A man sleeping in a green room on a couch."
CLASSES = ["<pad>", "<eos>", "a", "cat", "dog", "mat", "on", "sat", "the"]


# --- aiayn.calibration ---------------------------------------------------------------------------


def ece_loop(confidence: torch.Tensor, correct: torch.Tensor, n_bins: int) -> float:
    """The textbook definition, one bin at a time."""
    total = 0.0
    for b in range(n_bins):
        lo, hi = b / n_bins, (b + 1) / n_bins
        in_bin = (confidence >= lo) & ((confidence < hi) if b < n_bins - 1 else (confidence <= hi))
        if in_bin.any():
            gap = correct[in_bin].float().mean() - confidence[in_bin].mean()
            total += in_bin.float().mean().item() * abs(gap.item())
    return total


def test_ece_is_zero_when_accuracy_matches_confidence():
    confidence = torch.tensor([0.25] * 4 + [0.75] * 4)
    correct = torch.tensor([1, 0, 0, 0, 1, 1, 1, 0], dtype=torch.bool)
    assert expected_calibration_error(confidence, correct) == pytest.approx(0.0, abs=1e-12)


def test_ece_of_an_over_confident_model():
    confidence = torch.full((10,), 0.9)
    correct = torch.tensor([1, 0] * 5, dtype=torch.bool)
    assert expected_calibration_error(confidence, correct) == pytest.approx(0.4)


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
def test_ece_equals_the_loop_definition(n_bins):
    g = torch.Generator().manual_seed(0)
    confidence = torch.rand(500, generator=g)
    confidence[:3] = torch.tensor([0.0, 1.0, 0.5])  # the edges
    correct = torch.rand(500, generator=g) < confidence**2
    assert expected_calibration_error(confidence, correct, n_bins) == pytest.approx(
        ece_loop(confidence, correct, n_bins), abs=1e-6  # the loop sums in float32
    )


def test_reliability_bins_counts_weights_and_edges():
    confidence = torch.tensor([0.0, 0.05, 0.1, 0.55, 0.999, 1.0])
    correct = torch.tensor([0, 0, 1, 1, 1, 0], dtype=torch.bool)
    bins = reliability_bins(confidence, correct, n_bins=10)
    assert bins.count.tolist() == [2, 1, 0, 0, 0, 1, 0, 0, 0, 2]  # 1.0 goes into the last bin
    assert bins.edges.tolist() == pytest.approx([i / 10 for i in range(11)])
    assert float(bins.weight.sum()) == pytest.approx(1.0)
    assert bins.accuracy[9].item() == pytest.approx(0.5) and bins.confidence[9].item() == pytest.approx(0.9995)
    assert bins.accuracy[2].item() == 0 and bins.confidence[2].item() == 0  # empty bins report 0 and weigh 0


def test_confidence_and_correct_flattens_and_drops_padding():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)  # (B, T, C)
    target = logits.argmax(-1)
    target[0, 0] = (target[0, 0] + 1) % 5  # one wrong prediction
    target[1, 2] = 0  # padding, dropped below
    confidence, correct = confidence_and_correct(logits, target, ignore_index=0)
    keep = target.reshape(-1) != 0
    expected = logits.softmax(-1).max(-1).values.reshape(-1)[keep]
    torch.testing.assert_close(confidence, expected)
    assert correct.dtype == torch.bool and correct.shape == confidence.shape
    assert correct.sum().item() == keep.sum().item() - (1 if target[0, 0] != 0 else 0)
    all_confidence, _ = confidence_and_correct(logits.reshape(6, 5), target.reshape(6))  # (N, C) works too
    assert all_confidence.shape == (6,)


def test_calibration_rejects_bad_input():
    confidence, correct = torch.tensor([0.5, 0.7]), torch.tensor([True, False])
    with pytest.raises(ValueError, match="n_bins must be a positive integer, got 0"):
        reliability_bins(confidence, correct, n_bins=0)
    with pytest.raises(ValueError, match=r"same length, got shapes \(2,\) and \(3,\)"):
        reliability_bins(confidence, torch.tensor([True, False, True]))
    with pytest.raises(ValueError, match=r"confidence must lie in \[0, 1\]"):
        expected_calibration_error(torch.tensor([0.5, 1.5]), correct)
    with pytest.raises(ValueError, match="at least one prediction"):
        expected_calibration_error(torch.tensor([]), torch.tensor([], dtype=torch.bool))
    with pytest.raises(ValueError, match=r"got logits \(2, 3, 5\) and target \(2, 4\)"):
        confidence_and_correct(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


# --- BLEU helpers ----------------------------------------------------------------------------------


def test_ngram_status_clips_repeats_and_uses_the_best_reference():
    hyp = "Thank Thank Thank".split()
    assert _bleu_ngram_status(hyp, [THANKS.split()], 1) == [
        ("Thank", "match"),
        ("Thank", "clipped"),
        ("Thank", "clipped"),
    ]
    assert [s for _, s in _bleu_ngram_status(hyp, [THANKS.split()], 2)] == ["miss", "miss"]
    # the clip is the largest count in any single reference: 2 here, not 1 + 1
    refs = ["the cat is on the mat".split(), "there is a cat on the mat".split()]
    statuses = [s for _, s in _bleu_ngram_status(["the"] * 7, refs, 1)]
    assert statuses == ["match"] * 2 + ["clipped"] * 5


def test_bleu_match_html_shows_the_counts_and_the_score():
    html = bleu_match_html("Thank Thank Thank", THANKS)
    result = sentence_bleu("Thank Thank Thank", THANKS)
    assert "<b>1-grams</b> 1/3" in html and "<b>2-grams</b> 0/2" in html
    assert html.count('title="clipped"') == 2 and html.count('title="match"') == 1
    assert f"sentence BLEU = {result.score:.1f}" in html and f"BP = {result.brevity_penalty:.3f}" in html
    assert "smoothed" in html  # no 2-gram matches: the score comes from smoothing, and the display says so
    assert "smoothed" not in bleu_match_html(COUCH, COUCH)


def _chips(html: str) -> list[tuple[str, str]]:
    """(kind, text without tags) of each n-gram chip of a match display, in order."""
    found = re.findall(r'<span title="(match|clipped|miss)"[^>]*>(.*?)</span>', html)
    return [(kind, re.sub(r"<[^>]+>", "", inner)) for kind, inner in found]


def test_bleu_match_html_marks_each_kind_beside_its_colour():
    # as the calculator's chips: a reader who cannot tell green from orange from grey reads ✓, ✓ ×n → m, ✗
    hyp, refs = "the the the the the the the", ["the cat is on the mat", "there is a cat on the mat"]
    result = sentence_bleu(hyp, refs)
    unigrams = _chips(bleu_match_html(hyp, refs, max_order=1))
    bigrams = _chips(bleu_match_html(hyp, refs, max_order=2))[len(unigrams) :]
    credited, uses = result.counts[0], result.totals[0]
    assert unigrams[:credited] == [("match", "\u2713\u202fthe")] * credited
    clipped = f"\u2713\u202fthe \u00d7{uses} \u2192 {credited}"
    assert unigrams[credited:] == [("clipped", clipped)] * (uses - credited)
    assert bigrams == [("miss", "\u2717\u202fthe the")] * (uses - 1)
    # the clipped copies are struck through, their counts are not
    assert bleu_match_html(hyp, refs).count(">the</s> \u00d7") == uses - credited
    legend = bleu_match_html(hyp, refs).rsplit("margin-top:4px", 1)[1]
    for mark, name in (("\u2713", "in a reference"), ("\u2713", "clipped"), ("\u2717", "not in a reference")):
        assert re.search(f"{mark}\u202f[^<]*{name}", legend), (mark, name, legend)


def test_bleu_match_html_escapes_and_lowercases():
    html = bleu_match_html("<b>A</b> man", "a man")
    assert "<b>A</b>" not in html.split("</b>", 1)[1] and "&lt;" in html
    assert "<b>1-grams</b> 1/" in bleu_match_html("A man", "a man")
    assert "<b>1-grams</b> 2/2" in bleu_match_html("A man", "a man", lowercase=True)


def test_bleu_match_html_rejects_bad_input():
    with pytest.raises(TypeError, match="expected a hypothesis str"):
        bleu_match_html(["not", "a", "str"], COUCH)
    with pytest.raises(TypeError, match="expected a hypothesis str"):
        bleu_match_html("a man", [])


def test_bleu_table_agrees_with_sentence_bleu():
    examples = [("same", COUCH, COUCH), ("short", "Thank you", THANKS)]
    table = bleu_table(examples)
    assert list(table.columns) == ["hypothesis", "reference", "p1", "p2", "p3", "p4", "c", "r", "BP", "BLEU"]
    assert table.loc["same", "BLEU"] == 100.0 and table.loc["same", "p4"] == "8/8"
    short = sentence_bleu("Thank you", THANKS)
    assert table.loc["short", "BLEU"] == round(short.score, 1) and table.loc["short", "p1"] == "2/2"
    assert table.loc["short", "BP"] == pytest.approx(math.exp(1 - 7 / 2), abs=1e-3)


def test_bleu_figures_have_titled_axes():
    fig = brevity_penalty_figure({"'Thank you'": 2 / 7})
    ax = fig.axes[0]
    assert "c / r" in ax.get_xlabel() and "BP" in ax.get_ylabel()
    assert len(ax.lines) == 3  # the curve, the line at c = r, the marked point
    fig = sentence_bleu_histogram([10.0, 50.0, 100.00000000000004], corpus_score=55.0)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "sentence BLEU" and ax.get_ylabel() == "number of sentences"
    assert sum(p.get_height() for p in ax.patches) == 3  # the perfect sentence is not lost past 100


# --- label_smoothing_chart: the target computed by Vega expressions --------------------------------


def js_to_python(expr: str) -> str:
    """Translate the chart's Vega expression (ternaries, ==, datum.) into a Python expression."""
    expr = expr.strip()
    depth, question = 0, None
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == "?":
            question = i
            break
    if question is None:
        if expr.startswith("(") and expr.endswith(")"):
            return "(" + js_to_python(expr[1:-1]) + ")"
        return expr.replace("datum.", "")
    depth, nested = 0, 0
    for j in range(question + 1, len(expr)):
        ch = expr[j]
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and ch == "?":
            nested += 1
        elif depth == 0 and ch == ":":
            if nested == 0:
                break
            nested -= 1
    cond, yes, no = expr[:question], expr[question + 1 : j], expr[j + 1 :]
    return f"(({js_to_python(yes)}) if ({js_to_python(cond)}) else ({js_to_python(no)}))"


def chart_targets(eps: float, convention: str | None = None, pad_class="<pad>") -> list[float]:
    spec = label_smoothing_chart(CLASSES, "cat", pad_class=pad_class).to_dict()
    bars = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "bar")
    (calc,) = [t for t in bars["transform"] if t.get("as") == "target"]
    rows = spec["datasets"][bars["data"]["name"]]
    names = {"eps": eps, "convention": convention}
    return [eval(js_to_python(calc["calculate"]), {}, {**names, **row}) for row in rows]  # noqa: S307


def test_chart_has_an_epsilon_slider_and_a_convention_switch():
    spec = label_smoothing_chart(CLASSES, "cat", pad_class="<pad>").to_dict()
    params = {p["name"]: p for p in spec["params"]}
    slider = params["eps"]["bind"]
    assert slider["input"] == "range" and slider["min"] == 0 and slider["max"] == 1
    assert re.search("ε|smooth", slider["name"]) and params["eps"]["value"] == 0.1
    assert params["convention"]["bind"]["input"] == "radio"
    assert "convention" not in {p["name"] for p in label_smoothing_chart(CLASSES, "cat").to_dict()["params"]}


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.5, 1.0])
def test_chart_target_is_pytorchs_smoothed_target(eps):
    options = label_smoothing_chart(CLASSES, "cat", pad_class="<pad>").to_dict()["params"][1]["bind"]["options"]
    C, true = len(CLASSES), CLASSES.index("cat")
    expected = (1 - eps) * torch.nn.functional.one_hot(torch.tensor(true), C).double() + eps / C
    for values in (chart_targets(eps, options[0]), chart_targets(eps, pad_class=None)):
        assert values == pytest.approx(expected.tolist())
        assert sum(values) == pytest.approx(1.0)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_chart_target_in_the_annotated_transformers_convention(eps):
    options = label_smoothing_chart(CLASSES, "cat", pad_class="<pad>").to_dict()["params"][1]["bind"]["options"]
    values = dict(zip(CLASSES, chart_targets(eps, options[1]), strict=True))
    assert values["cat"] == pytest.approx(1 - eps) and values["<pad>"] == 0
    assert values["dog"] == pytest.approx(eps / (len(CLASSES) - 2))
    assert sum(values.values()) == pytest.approx(1.0)


def test_true_class_bar_goes_down_as_epsilon_goes_up():
    true = CLASSES.index("cat")
    heights = [chart_targets(e, pad_class=None)[true] for e in (0.0, 0.2, 0.6, 1.0)]
    assert heights == sorted(heights, reverse=True) and heights[0] == 1.0


def test_label_smoothing_chart_rejects_bad_input():
    with pytest.raises(ValueError, match="must be among the classes"):
        label_smoothing_chart(CLASSES, "cow")
    with pytest.raises(ValueError, match="pad_class != true_class"):
        label_smoothing_chart(CLASSES, "<pad>", pad_class="<pad>")
    with pytest.raises(ValueError, match="0 <= value <= max_value <= 1"):
        label_smoothing_chart(CLASSES, "cat", value=0.5, max_value=0.2)


# --- label smoothing and calibration figures -----------------------------------------------------


def test_smoothing_loss_figure_marks_the_minimum_at_the_target():
    C = 9
    fig = smoothing_loss_figure(C, eps_values=(0.0, 0.1))
    ax = fig.axes[0]
    curves = [line for line in ax.lines if len(line.get_xdata()) > 1]
    dots = [line for line in ax.lines if len(line.get_xdata()) == 1]
    assert len(curves) == 2 and len(dots) == 1
    assert dots[0].get_xdata()[0] == pytest.approx(1 - 0.1 + 0.1 / C)
    x, y = curves[1].get_xdata(), curves[1].get_ydata()  # the ε = 0.1 curve: lowest next to its dot
    assert x[y.argmin()] == pytest.approx(1 - 0.1 + 0.1 / C, abs=2e-3)
    assert "p(true class)" in ax.get_xlabel() and "loss" in ax.get_ylabel()


def test_reliability_figure_has_one_column_per_model():
    g = torch.Generator().manual_seed(0)
    confidence = torch.rand(200, generator=g)
    results = {
        "a": reliability_bins(confidence, torch.rand(200, generator=g) < confidence),
        "b": reliability_bins(confidence, torch.rand(200, generator=g) < 0.5),
    }
    fig = reliability_figure(results, title="test")
    assert len(fig.axes) == 4
    assert "ECE = " in fig.axes[0].get_title() and fig.axes[0].get_title().startswith("a")
    assert fig.axes[0].get_ylabel() == "accuracy in the bin"


# --- BleuCalculator --------------------------------------------------------------------------------


def test_bleu_calculator_follows_its_boxes():
    calc = BleuCalculator("Thank Thank Thank", THANKS)
    assert calc.result == sentence_bleu("Thank Thank Thank", THANKS)
    assert 'title="clipped"' in calc.html.value
    calc.hypothesis.value = "Thank you so much, my brother"
    assert calc.result.score == pytest.approx(100.0)
    calc.reference.value = "Thank you\n\nThank you so much, my brother"  # two references, blank lines skipped
    assert calc.references == ["Thank you", "Thank you so much, my brother"]
    assert calc.result == sentence_bleu(calc.hypothesis.value, calc.references)
    calc.hypothesis.value = "THANK YOU SO MUCH, MY BROTHER"
    low = calc.result.score
    calc.lowercase.value = True
    assert calc.result.score > low
    calc.reference.value = ""
    assert calc.result is None and "Type a hypothesis" in calc.html.value


def test_bleu_calculator_rejects_non_strings():
    with pytest.raises(TypeError, match="must be str, got list and str"):
        BleuCalculator(["a"], "a")


def test_label_smoothing_chart_describes_itself():
    chart = label_smoothing_chart(["<pad>", "a", "cat"], "cat")
    assert "cat" in chart.to_dict()["description"]
    chart = label_smoothing_chart(["a", "b", "cat"], "cat", description="Bars.")
    assert chart.to_dict()["description"] == "Bars."


def test_bleu_calculator_repr_is_one_short_line():
    # a notebook stores this text beside the widget: it must fit a code box
    calc = BleuCalculator("Thank Thank Thank", THANKS)
    assert repr(calc) == f"BleuCalculator(sentence BLEU = {calc.result.score:.2f})"
    calc.reference.value = ""
    assert repr(calc) == "BleuCalculator(sentence BLEU = -)"
    widget_text = calc._repr_mimebundle_()["text/plain"]
    assert widget_text == repr(calc) and len(widget_text) <= 77
