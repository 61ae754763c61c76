"""Tests for the step-through charts of chapters 5 to 7 (aiayn.viz.stepthrough): the browser picks the
committed record's numbers for the layer, head, token and step its sliders name. No model is needed."""

from __future__ import annotations

import math

import pytest
from vega_runner import vega_data

from aiayn import viz
from aiayn.pages.stepthrough import load_stepthrough

RECORD = load_stepthrough()
D_K = RECORD["sizes"]["d_k"]


def rows_with(data: dict, *fields: str) -> list[dict]:
    """The rows of the first dataset whose rows carry all ``fields``, deduplicated by the last one."""
    for rows in data.values():
        if rows and all(f in rows[0] for f in fields):
            return rows
    raise AssertionError(f"no dataset has {fields}: {[list(r[0]) for r in data.values() if r]}")


def params(chart) -> dict:
    return {p["name"]: p for p in chart.to_dict()["params"]}


def test_the_encoder_chart_shows_each_step_of_the_chosen_layer_head_and_token():
    chart = viz.encoder_attention_steps_chart(RECORD)
    sliders = {name: p["bind"]["max"] for name, p in params(chart).items()}
    S = len(RECORD["tokens"]["source"])
    assert sliders == {"layer": RECORD["sizes"]["N"], "head": RECORD["sizes"]["h"], "token": S, "step": 4}
    a = RECORD["encoder"]["layers"][1]["attention"]  # layer 2
    head, query = 2, 3  # head 3, token 4 (from 1 on the sliders)
    scores, weights = a["scores"][head][query], a["weights"][head][query]
    expected = {1: scores, 2: [s / math.sqrt(D_K) for s in scores], 3: [s / math.sqrt(D_K) for s in scores],
                4: weights}  # fmt: skip
    for step, values in expected.items():
        data = vega_data(chart, layer=2, head=3, token=4, step=step)
        bars = sorted(rows_with(data, "key", "value", "label"), key=lambda r: r["key"])
        assert [r["value"] for r in bars] == pytest.approx(values)
    cells = rows_with(data, "which", "value", "row", "dim")
    q_row = sorted((r for r in cells if r["row"] == -1), key=lambda r: r["dim"])
    assert [r["value"] for r in q_row] == a["q"][head][query]
    k_row = sorted((r for r in cells if r["row"] == 5), key=lambda r: r["dim"])
    assert [r["value"] for r in k_row] == a["k"][head][5]
    weighted = [r for r in vega_data(chart, layer=2, head=3, token=4).values() if r and "wv" in r[0]][-1]
    w_v = {(r["row"], r["dim"]): r["value"] for r in weighted}
    assert w_v[5, 7] == pytest.approx(weights[5] * a["v"][head][5][7])
    assert w_v[S, 7] == a["heads"][head][query][7]  # the last row: the head's output


def test_the_add_norm_chart_shows_the_layers_vectors_and_the_units_that_fire():
    chart = viz.add_norm_steps_chart(RECORD)
    assert {n: p["bind"]["max"] for n, p in params(chart).items()} == {
        "layer": RECORD["sizes"]["N"], "token": len(RECORD["tokens"]["source"])}  # fmt: skip
    data = vega_data(chart, layer=3, token=2)
    layer = RECORD["encoder"]["layers"][2]
    ffn = layer["feed_forward"]
    label = rows_with(data, "label", "active")[0]["label"]
    assert label == f"{ffn['active'][1]} of 2048 units are above 0"
    units = sorted(rows_with(data, "unit", "act", "rank"), key=lambda r: r["rank"])
    assert [r["unit"] for r in units] == ffn["units"][1]
    cells = rows_with(data, "which", "value", "step", "dim")
    norm_1 = sorted((r for r in cells if r["step"] == 5), key=lambda r: r["dim"])
    assert [r["value"] for r in norm_1] == layer["add_norm_1"]["norm"]["first"][1]
    norms = {r["step"]: r["norm"] for r in rows_with(data, "which", "norm", "step")}
    assert norms[8] == layer["add_norm_2"]["norm"]["norm"][1]
    assert {r["step"] for r in cells} == set(range(2, 9))  # no embedding rows after layer 1
    first = rows_with(vega_data(chart, layer=1, token=2), "which", "value", "step", "dim")
    position = sorted((r for r in first if r["step"] == 1), key=lambda r: r["dim"])
    assert [r["value"] for r in position] == RECORD["encoder"]["embed"]["position"]["first"][1]


def test_the_decoder_chart_masks_later_pieces_and_shows_the_weights():
    chart = viz.decoder_attention_steps_chart(RECORD)
    T = len(RECORD["tokens"]["decoder_out"])
    assert params(chart)["token"]["bind"]["max"] == T
    layer = RECORD["decoder"]["layers"][2]
    head, t = 4, 3  # head 5, target piece 4
    for step in (3, 4):
        data = vega_data(chart, layer=3, head=5, token=4, step=step)
        sets = [sorted(r, key=lambda r: r["key"]) for r in data.values() if r and "label" in r[0]]
        own = next(s for s in sets if len(s) == T)  # the labels of every key
        cross = next(s for s in sets if len(s) == len(RECORD["tokens"]["source"]))
        if step == 3:
            assert [r["label"] for r in own[t + 1 :]] == ["−∞"] * (T - t - 1)
            assert all(r["label"] != "−∞" for r in own[: t + 1] + cross)
        else:
            assert [r["value"] for r in own] == layer["self_attention"]["weights"][head][t]
            assert [r["value"] for r in cross] == layer["cross_attention"]["weights"][head][t]
    following = sorted(rows_with(data, "piece", "prob", "rank"), key=lambda r: r["rank"])
    assert [r["piece"] for r in following] == RECORD["next"]["pieces"][t]


def test_wrong_records_are_refused_by_name():
    with pytest.raises(ValueError, match="expected aiayn.pages.stepthrough's record with 'tokens'"):
        viz.encoder_attention_steps_chart({"layers": []})
    with pytest.raises(ValueError, match="encoder layers have no 'cross_attention'"):
        viz.stepthrough_attention_frame(RECORD, "encoder", "cross_attention")
