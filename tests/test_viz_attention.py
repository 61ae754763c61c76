"""Tests for the chapter 5 (attention) helpers in aiayn.viz and aiayn.pages.widgets: specs, data, callbacks."""

import math

import matplotlib
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from aiayn.attention import MultiHeadAttention, set_fused  # noqa: E402
from aiayn.pages.widgets import AttentionTemperatureExplorer  # noqa: E402
from aiayn.viz import (
    attention_heads_figure,
    attention_heatmap,
    paper_figure2,
    softmax_saturation_figure,
    softmax_temperature_chart,
    update_attention_heads,
)

KEYS = ["we", "sat", "on", "the", "bank", "of", "the", "river"]
SCORES = [0.3, 1.1, -0.2, 0.0, 2.4, 0.1, 0.0, 2.9]
TOKENS = ["the", "cat", "sat", "on", "the", "mat"]


# --- paper_figure2 ---------------------------------------------------------------------------------


def test_paper_figure2_is_an_svg_shipped_in_the_package():
    """Chapter 5 shows it as a cell output, so it shows on Colab, where no file lies beside the notebook."""
    svg = paper_figure2()
    assert svg._repr_svg_().startswith("<svg")
    assert 'viewBox="0 0 820 560"' in svg.data and "Figure 2" in svg.data
    assert "href" not in svg.data  # nothing to load from elsewhere


# --- softmax_temperature_chart -------------------------------------------------------------------


def chart_spec() -> dict:
    return softmax_temperature_chart(SCORES, KEYS, query="bank").to_dict()


def bar_layer(spec: dict) -> dict:
    return next(layer for layer in spec["layer"] if layer["mark"]["type"] == "bar")


def run_transforms(rows: list[dict], transforms: list[dict], temperature: float) -> list[dict]:
    """Apply Vega-Lite ``calculate`` and ``joinaggregate`` transforms in Python, as the browser would."""
    rows = [dict(r) for r in rows]
    for t in transforms:
        if "calculate" in t:
            expr = t["calculate"].replace("datum.", "")
            for r in rows:
                r[t["as"]] = eval(expr, {"exp": math.exp, "temperature": temperature}, dict(r))  # noqa: S307
        elif "joinaggregate" in t:
            for agg in t["joinaggregate"]:
                values = [r[agg["field"]] for r in rows]
                result = {"max": max, "sum": sum}[agg["op"]](values)
                for r in rows:
                    r[agg["as"]] = result
        else:
            raise AssertionError(f"unexpected transform {t}")
    return rows


def test_chart_has_a_temperature_slider():
    spec = chart_spec()
    (param,) = [p for p in spec["params"] if p["name"] == "temperature"]
    assert param["value"] == 1.0
    bind = param["bind"]
    assert bind["input"] == "range" and "temperature" in bind["name"]
    assert (bind["min"], bind["max"], bind["step"]) == (0.1, 5.0, 0.05)


def test_chart_computes_softmax_in_the_browser():
    spec = chart_spec()
    bars = bar_layer(spec)
    exprs = [t["calculate"] for t in bars["transform"] if "calculate" in t]
    assert any("exp(" in e and "temperature" in e for e in exprs), "exp(score / temperature) must be a Vega expression"
    ops = [a["op"] for t in bars["transform"] if "joinaggregate" in t for a in t["joinaggregate"]]
    assert ops == ["max", "sum"]
    rows = spec["datasets"][bars["data"]["name"]]
    assert [r["score"] for r in rows] == SCORES and [r["key"] for r in rows] == KEYS  # one row per key, no per-T copies


@pytest.mark.parametrize("temperature", [0.1, 0.5, 1.0, 2.0, 5.0])
def test_chart_weights_equal_torch_softmax(temperature):
    spec = chart_spec()
    bars = bar_layer(spec)
    rows = run_transforms(spec["datasets"][bars["data"]["name"]], bars["transform"], temperature)
    weights = torch.tensor([r["weight"] for r in rows], dtype=torch.float64)
    expected = (torch.tensor(SCORES, dtype=torch.float64) / temperature).softmax(dim=-1)
    torch.testing.assert_close(weights, expected)


def test_tallest_bar_changes_with_temperature():
    spec = chart_spec()
    bars = bar_layer(spec)
    data = spec["datasets"][bars["data"]["name"]]
    tallest = [max(r["weight"] for r in run_transforms(data, bars["transform"], t)) for t in (0.2, 1.0, 4.0)]
    assert tallest[0] > tallest[1] > tallest[2] > 1 / len(KEYS)


def test_chart_axes_have_titles_and_fixed_scale():
    bars = bar_layer(chart_spec())
    x, y = bars["encoding"]["x"], bars["encoding"]["y"]
    assert x["title"] and y["title"]
    assert y["scale"]["domain"] == [0, 1]  # bar heights are comparable as T moves
    assert '"river"' in x["axis"]["labelExpr"]  # keys, repeats included, label the positions


def test_chart_rejects_bad_input():
    with pytest.raises(ValueError, match="one score per key"):
        softmax_temperature_chart([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="t_min"):
        softmax_temperature_chart([1.0], ["a"], t_min=0.0)


# --- heatmaps ------------------------------------------------------------------------------------


def test_attention_heatmap_draws_the_weights():
    weights = torch.rand(6, 6).softmax(dim=-1)
    ax = attention_heatmap(weights, TOKENS, TOKENS, title="one head")
    assert ax.images[0].get_array().shape == (6, 6)
    torch.testing.assert_close(torch.tensor(ax.images[0].get_array().data), weights.double())
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title() == "one head"
    assert len(ax.texts) == 36


def test_attention_heatmap_rejects_mismatched_tokens():
    with pytest.raises(ValueError, match="do not match"):
        attention_heatmap(torch.rand(6, 5), TOKENS, TOKENS)


def test_attention_heads_figure_and_update():
    torch.manual_seed(0)
    weights = torch.rand(4, 6, 6).softmax(dim=-1)
    fig = attention_heads_figure(weights, TOKENS, TOKENS, titles=list("abcd"), ncols=2)
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == list("abcd")
    assert len(fig.axes) == 5  # four heads and a colour bar
    new = torch.rand(4, 6, 6).softmax(dim=-1)
    update_attention_heads(fig, new)
    for ax, head in zip(panels, new, strict=True):
        torch.testing.assert_close(torch.tensor(ax.images[0].get_array().data), head.double())
        assert ax.texts[0].get_text() == f"{head[0, 0]:.2f}"
    with pytest.raises(ValueError, match="do not fit"):
        update_attention_heads(fig, torch.rand(2, 6, 6))


def test_attention_heads_figure_rejects_bad_input():
    with pytest.raises(ValueError, match="expected shape"):
        attention_heads_figure(torch.rand(6, 6), TOKENS, TOKENS)
    with pytest.raises(ValueError, match="titles"):
        attention_heads_figure(torch.rand(2, 6, 6), TOKENS, TOKENS, titles=["only one"])


def test_softmax_saturation_figure():
    table = pd.DataFrame(
        {
            "d_k": [4, 16, 4, 16],
            "scores": ["q·k", "q·k", "q·k / √d_k", "q·k / √d_k"],
            "largest weight": [0.5, 0.7, 0.3, 0.3],
            "gradient norm": [0.3, 0.2, 0.34, 0.34],
        }
    )
    fig = softmax_saturation_figure(table)
    left, right = fig.axes
    assert len(left.lines) == 2 and len(right.lines) == 2
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in (left, right))
    with pytest.raises(ValueError, match="missing columns"):
        softmax_saturation_figure(table.drop(columns="gradient norm"))


# --- AttentionTemperatureExplorer ----------------------------------------------------------------


def make_explorer(**kw) -> tuple[AttentionTemperatureExplorer, MultiHeadAttention]:
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, dropout=0.0)
    x = 3 * torch.randn(1, len(TOKENS), 16)
    return AttentionTemperatureExplorer(layer, x, TOKENS, **kw), layer


def test_explorer_builds_with_a_named_slider_and_a_picture():
    explorer, layer = make_explorer(t_min=0.2, t_max=4.0)
    assert explorer.slider.description == "T"
    assert (explorer.slider.min, explorer.slider.max, explorer.slider.value) == (0.2, 4.0, 1.0)
    assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert explorer.weights.shape == (4, 6, 6)
    assert layer.temperature == 1.0


def test_explorer_callback_sets_the_temperature_and_redraws():
    explorer, layer = make_explorer()
    before_png, before_weights, before_text = explorer.image.value, explorer.weights, explorer.summary.value
    explorer.slider.value = 0.3  # goes through the slider's observer, as a drag would
    assert layer.temperature == 0.3
    assert explorer.image.value != before_png
    assert explorer.summary.value != before_text and "T = 0.30" in explorer.summary.value
    assert explorer.weights.max(dim=-1).values.mean() > before_weights.max(dim=-1).values.mean()
    explorer.slider.value = 4.0
    assert explorer.weights.max(dim=-1).values.mean() < before_weights.max(dim=-1).values.mean()
    explorer.slider.value = 1.0
    torch.testing.assert_close(explorer.weights, before_weights)


def test_explorer_keeps_the_layer_mode_and_fused_setting():
    explorer, layer = make_explorer()
    layer.train()
    set_fused(layer, True)
    explorer.slider.value = 0.5
    assert layer.training and layer.use_fused
    assert explorer.weights.shape == (4, 6, 6)


def test_explorer_rejects_bad_input():
    layer = MultiHeadAttention(16, 4)
    with pytest.raises(TypeError, match="MultiHeadAttention"):
        AttentionTemperatureExplorer(torch.nn.Linear(16, 16), torch.randn(1, 6, 16), TOKENS)
    with pytest.raises(ValueError, match=r"expected shape \(1, L, 16\)"):
        AttentionTemperatureExplorer(layer, torch.randn(2, 6, 16), TOKENS)
    with pytest.raises(ValueError, match="tokens"):
        AttentionTemperatureExplorer(layer, torch.randn(1, 5, 16), TOKENS)
