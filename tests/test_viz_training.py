"""Tests for the chapter 8 (training) helpers in aiayn.viz: the Noam chart, the training curves, the sampling chart.

The charts compute in the browser with Vega expressions; ``run_transforms`` below applies the same
transforms in Python, so the numbers a reader sees can be checked against the package.
"""

import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from aiayn.decoding.search import _filter_top_k, _filter_top_p  # noqa: E402
from aiayn.schedule import noam_rate  # noqa: E402
from aiayn.training.history import History
from aiayn.viz import (
    noam_schedule_chart,
    sampling_filter_chart,
    training_curves_figure,
)

FUNCTIONS = {"exp": math.exp, "pow": pow, "min": min, "max": max}


def run_transforms(rows: list[dict], transforms: list[dict], params: dict) -> list[dict]:
    """Apply Vega-Lite calculate, joinaggregate, window, fold and filter transforms in Python, as the browser would.

    Only what the chapter's charts use: arithmetic and comparisons in ``calculate`` (string-valued ones with
    ``?:`` or ``format`` are skipped), ``max``/``sum`` aggregates, ``row_number``, ``rank`` and cumulative
    ``sum`` windows.
    """
    rows = [dict(r) for r in rows]
    for t in transforms:
        if "calculate" in t:
            expr = t["calculate"]
            if "?" in expr or "format(" in expr or "'" in expr:
                continue
            expr = expr.replace("datum.", "")
            for r in rows:
                r[t["as"]] = eval(expr, dict(FUNCTIONS, **params), dict(r))  # noqa: S307
        elif "joinaggregate" in t:
            for agg in t["joinaggregate"]:
                result = {"max": max, "sum": sum}[agg["op"]](r[agg["field"]] for r in rows)
                for r in rows:
                    r[agg["as"]] = result
        elif "window" in t:
            order = list(rows)
            for key in reversed(t.get("sort", [])):
                order.sort(key=lambda r, k=key: r[k["field"]], reverse=key.get("order") == "descending")
            total = 0.0
            sort_key = [k["field"] for k in t.get("sort", [])]
            for n, r in enumerate(order, start=1):
                for w in t["window"]:
                    if w["op"] == "row_number":
                        r[w["as"]] = n
                    elif w["op"] == "rank":  # ties (equal sort fields) share the rank of the first of them
                        r[w["as"]] = 1 + sum(any(o[f] != r[f] for f in sort_key) for o in order[: n - 1])
                    elif w["op"] == "sum":
                        total += r[w["field"]]
                        r[w["as"]] = total
                    else:
                        raise AssertionError(f"unexpected window op {w}")
        elif "fold" in t:
            key, value = t.get("as", ["key", "value"])
            rows = [dict(r, **{key: f, value: r[f]}) for f in t["fold"] for r in rows]
        elif "filter" in t:
            rows = [r for r in rows if eval(t["filter"].replace("datum.", ""), dict(params), dict(r))]  # noqa: S307
        else:
            raise AssertionError(f"unexpected transform {t}")
    return rows


def layer_rows(spec: dict, layer: dict) -> list[dict]:
    """The rows a layer starts from: its own data, or the chart's shared data."""
    return spec["datasets"][layer.get("data", spec.get("data"))["name"]]


def sequence_rows(layer: dict) -> list[dict]:
    seq = layer["data"]["sequence"]
    return [{seq.get("as", "data"): i} for i in range(seq["start"], seq["stop"])]


# --- noam_schedule_chart -------------------------------------------------------------------------


def noam_spec(**kw) -> dict:
    return noam_schedule_chart(**kw).to_dict()


def curves_layer(spec: dict) -> dict:
    return next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line")


def schedule(spec: dict, d_model: int, warmup: int) -> dict[int, float]:
    """step -> learning rate of the thick curve, as the browser computes it."""
    layer = curves_layer(spec)
    rows = run_transforms(sequence_rows(layer), layer["transform"], {"d_model": d_model, "warmup": warmup})
    return {r["step"]: r["rate"] for r in rows if r["term"] == "lrate"}


def test_noam_chart_has_d_model_and_warmup_sliders():
    params = {p["name"]: p for p in noam_spec()["params"]}
    assert set(params) == {"d_model", "warmup"}
    assert (params["d_model"]["value"], params["warmup"]["value"]) == (512, 4000)  # the paper's base model
    d_bind, w_bind = params["d_model"]["bind"], params["warmup"]["bind"]
    assert d_bind["input"] == w_bind["input"] == "range"
    assert "d_model" in d_bind["name"] and "warmup" in w_bind["name"]
    assert (d_bind["min"], d_bind["max"], d_bind["step"]) == (256, 1024, 64)
    assert (w_bind["min"], w_bind["max"], w_bind["step"]) == (500, 8000, 100)


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (256, 500), (1024, 8000), (768, 2300)])
def test_noam_chart_computes_noam_rate_in_the_browser(d_model, warmup):
    spec = noam_spec()
    rates = schedule(spec, d_model, warmup)
    assert len(rates) == 201 and min(rates) == 1 and max(rates) == 20000
    for step, rate in rates.items():
        assert rate == pytest.approx(noam_rate(int(step), d_model, warmup), rel=1e-12)
    layer = curves_layer(spec)
    exprs = [t["calculate"] for t in layer["transform"] if "calculate" in t]
    assert any("warmup" in e and "d_model" in e for e in exprs), "the rate must be a Vega expression of the params"
    assert len(spec["layer"][0]["data"]) == 1  # no per-setting copies of the data: a sequence generated in the page


def test_noam_chart_peak_is_at_warmup_for_every_slider_value():
    spec = noam_spec()
    for warmup in range(500, 8001, 100):
        rates = schedule(spec, 512, warmup)
        peak = max(rates, key=rates.get)
        assert peak == warmup, f"warmup {warmup}: the drawn curve peaks at step {peak}"


def test_noam_chart_marks_the_peak_and_keeps_it_on_the_axis():
    spec = noam_spec()
    marker = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "point")
    (row,) = run_transforms(sequence_rows(marker), marker["transform"], {"d_model": 256, "warmup": 500})
    assert row["step"] == 500
    assert row["rate"] == pytest.approx(256**-0.5 * 500**-0.5, rel=1e-12)
    top = curves_layer(spec)["encoding"]["y"]["scale"]["domain"][1]
    assert top >= row["rate"], "the highest peak a reader can set must stay inside the y axis"
    assert top <= 1.1 * row["rate"]


def test_noam_chart_axes_and_legend():
    enc = curves_layer(noam_spec())["encoding"]
    assert enc["x"]["title"] == "training step" and enc["y"]["title"] == "learning rate"
    assert len(enc["color"]["scale"]["domain"]) == 3  # the schedule and its two terms


def test_noam_chart_rejects_bad_input():
    with pytest.raises(ValueError, match="min <= value <= max"):
        noam_schedule_chart(warmup=100)
    with pytest.raises(ValueError, match="warmup below max_step"):
        noam_schedule_chart(max_step=5000)


# --- training_curves_figure ----------------------------------------------------------------------


def small_history() -> History:
    history = History()
    for step in range(1, 21):
        history.record(step, 0, loss=2.0 / step, lr=noam_rate(step, 32, 5), tokens=10, seconds=0.01)
    history.evals += [{"step": s, "epoch": 0, "exact match": s / 20} for s in (5, 10, 15, 20)]
    return history


def test_training_curves_figure_draws_lr_loss_and_metric():
    fig = training_curves_figure(small_history(), metric="exact match", title="copy task")
    lr_ax, loss_ax, metric_ax = fig.axes
    assert list(lr_ax.lines[0].get_ydata()) == pytest.approx([noam_rate(s, 32, 5) for s in range(1, 21)])
    assert list(loss_ax.lines[0].get_ydata()) == pytest.approx([2.0 / s for s in range(1, 21)])
    assert loss_ax.get_yscale() == "log"
    assert list(metric_ax.lines[0].get_xdata()) == [5, 10, 15, 20]
    assert all(ax.get_ylabel() for ax in fig.axes) and metric_ax.get_xlabel() == "optimizer step"
    assert fig._suptitle.get_text() == "copy task"


def test_training_curves_figure_without_metric_and_bad_input():
    assert len(training_curves_figure(small_history()).axes) == 2
    with pytest.raises(ValueError, match="history is empty"):
        training_curves_figure(History())
    with pytest.raises(ValueError, match="no evaluation .* 'bleu'"):
        training_curves_figure(small_history(), metric="bleu")


# --- sampling_filter_chart -----------------------------------------------------------------------

LOGITS = [3.1, 2.5, 1.0, 0.2, -1.0, -2.5, 2.5]  # a tie between "b" and "g"
LABELS = ["a", "b", "c", "d", "e", "f", "g"]


def sampled(spec: dict, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    layer = next(layer for layer in spec["layer"] if layer["mark"].get("color") == "#1f5fa8")
    rows = run_transforms(layer_rows(spec, layer), layer["transform"],
                          {"temperature": temperature, "top_k": top_k, "top_p": top_p})  # fmt: skip
    return torch.tensor([r["sampled"] for r in sorted(rows, key=lambda r: r["position"])], dtype=torch.float64)


def test_sampling_chart_has_three_sliders():
    ordered = sampling_filter_chart(LOGITS, LABELS).to_dict()["params"]
    # top-p before top-k: moving top-k to 1 last still changes the bars after top-p was moved
    assert [p["name"] for p in ordered] == ["temperature", "top_p", "top_k"]
    params = {p["name"]: p for p in ordered}
    assert (params["temperature"]["value"], params["top_k"]["value"], params["top_p"]["value"]) == (1.0, 7, 0.9)
    assert "temperature" in params["temperature"]["bind"]["name"]
    assert (params["top_k"]["bind"]["min"], params["top_k"]["bind"]["max"]) == (1, 7)
    assert (params["top_p"]["bind"]["min"], params["top_p"]["bind"]["max"]) == (0.05, 1.0)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"),
    [(1.0, 7, 1.0), (0.5, 7, 1.0), (2.0, 7, 1.0), (1.0, 3, 1.0), (1.0, 7, 0.8), (1.5, 4, 0.6), (1.0, 1, 1.0),
     (1.0, 7, 0.05), (3.0, 2, 0.9)],
)  # fmt: skip
def test_sampling_chart_matches_the_package_filters(temperature, top_k, top_p):
    """The blue bars are the distribution aiayn.decoding.search.sample draws from, for every slider setting."""
    spec = sampling_filter_chart(LOGITS, LABELS).to_dict()
    logits = torch.tensor([LOGITS], dtype=torch.float64) / temperature
    expected = _filter_top_p(_filter_top_k(logits, top_k), top_p).softmax(dim=-1)[0]
    torch.testing.assert_close(sampled(spec, temperature, top_k, top_p), expected)


def test_sampling_chart_grey_bars_are_the_tempered_softmax():
    spec = sampling_filter_chart(LOGITS, LABELS).to_dict()
    grey = next(layer for layer in spec["layer"] if layer["mark"].get("color") == "#cfcfcf")
    rows = run_transforms(layer_rows(spec, grey), grey["transform"],
                          {"temperature": 2.0, "top_k": 7, "top_p": 1.0})  # fmt: skip
    p = torch.tensor([r["p"] for r in sorted(rows, key=lambda r: r["position"])], dtype=torch.float64)
    torch.testing.assert_close(p, (torch.tensor(LOGITS, dtype=torch.float64) / 2.0).softmax(dim=-1))
    assert grey["encoding"]["y"]["scale"]["domain"] == [0, 1] and grey["encoding"]["y"]["title"]
    assert grey["encoding"]["x"]["title"] and '"g"' in grey["encoding"]["x"]["axis"]["labelExpr"]


def test_sampling_chart_rejects_bad_input():
    with pytest.raises(ValueError, match="one logit per label"):
        sampling_filter_chart([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="t_min"):
        sampling_filter_chart([1.0, 2.0], ["a", "b"], t_min=0.0)
    with pytest.raises(ValueError, match="top_p_init"):
        sampling_filter_chart([1.0, 2.0], ["a", "b"], top_p_init=0.0)


def test_charts_describe_themselves_for_screen_readers():
    # Vega-Lite's top-level description becomes the chart's aria-label
    noam = noam_schedule_chart().to_dict()
    assert "learning rate" in noam["description"]
    sampler = sampling_filter_chart([2.0, 1.0, 0.0], ["a", "b", "c"])
    assert "sampler" in sampler.to_dict()["description"]
    given = noam_schedule_chart(description="The schedule, peaking at 4000.")
    assert given.to_dict()["description"] == "The schedule, peaking at 4000."
