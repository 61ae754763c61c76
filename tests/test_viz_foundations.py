"""Tests for the chart helpers of chapters 1 and 2 (why attention, embeddings): specs, params, data.

Nothing is rendered. The interactive charts' Vega expressions are evaluated with the site's own
Vega packages under Node.js (``tests/vega_runner.py``) and compared with the formulas they draw.
"""

import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
import torch
from torch.testing import assert_close

matplotlib.use("Agg")

from vega_runner import vega_rows  # noqa: E402

from aiayn import viz  # noqa: E402
from aiayn.embeddings import sinusoidal_encoding  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
run_vega = vega_rows


def walk(spec):
    """Every dict inside a (nested) spec, the spec itself included."""
    if isinstance(spec, dict):
        yield spec
        for value in spec.values():
            yield from walk(value)
    elif isinstance(spec, list):
        for value in spec:
            yield from walk(value)


def inline_rows(spec: dict) -> int:
    rows = sum(len(d["values"]) for d in walk(spec) if isinstance(d.get("values"), list))
    return rows + sum(len(v) for v in spec.get("datasets", {}).values())


def axis_titles(spec: dict) -> list[str]:
    titles = []
    for d in walk(spec):
        for channel in ("x", "y"):
            enc = d.get("encoding", {}).get(channel)
            if isinstance(enc, dict) and "field" in enc and "title" in enc:
                titles.append(enc["title"])
    return titles


# --- matplotlib figures --------------------------------------------------------------------------


def test_path_length_figure_counts_the_arrows():
    words = "I arrived at the bank after crossing the river".split()
    fig = viz.path_length_figure(words, source=4, target=8)
    rnn_ax, attn_ax = fig.axes
    assert rnn_ax.get_title() == "Recurrent layer: 5 arrows from 'bank' to the output at 'river'"
    assert attn_ax.get_title() == "Self-attention: 1 arrow from 'bank' to the output at 'river'"
    for ax in fig.axes:
        assert ax.get_xlabel() == "position in the sentence (word index)"
        assert [t.get_text() for t in ax.get_xticklabels()][4] == "4\nbank"
    # the chain: n input arrows and n - 1 state arrows; attention: n * n pairs, one of them an arrow
    assert len(rnn_ax.texts) == 2 * len(words) - 1
    assert len(attn_ax.lines) == len(words) ** 2 - 1 and len(attn_ax.texts) == 1


@pytest.mark.parametrize("source, target", [(3, 3), (5, 2), (-1, 4), (0, 9)])
def test_path_length_figure_rejects_bad_positions(source, target):
    with pytest.raises(ValueError, match=rf"need 0 <= source < target < 9, got source={source}, target={target}"):
        viz.path_length_figure(list("abcdefghi"), source, target)


def test_influence_figure_one_log_line_per_layer():
    curves = {"rnn": torch.tensor([1.0, 0.1, 0.01]), "attention": torch.tensor([0.2, 0.2, 0.2])}
    fig = viz.influence_figure(curves)
    (ax,) = fig.axes
    assert ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.lines] == ["rnn", "attention"]
    assert_close(torch.tensor(ax.lines[0].get_ydata(), dtype=torch.float32), curves["rnn"])
    assert ax.get_xlabel() == "distance from the last position (tokens)"
    assert "gradient norm" in ax.get_ylabel()


def test_embedding_norms_figure_before_and_after_the_scale():
    pe_norms = sinusoidal_encoding(4, 64).norm(dim=-1)
    norms = {"N(0, 1)": (torch.full((4,), 8.0), torch.full((4,), 64.0))}
    fig = viz.embedding_norms_figure(norms, pe_norms, ["a", "b", "c", "d"], d_model=64)
    before, after = fig.axes
    assert before.get_ylabel() == "vector norm ‖·‖₂ (log scale)" and before.get_yscale() == "log"
    assert after.get_title() == "token embedding × √d_model (= 8.0)"
    for ax, expected in ((before, 8.0), (after, 64.0)):
        assert ax.get_xlabel() == "token (position in the sentence)"
        pe_line, token_line = ax.lines
        assert_close(torch.tensor(pe_line.get_ydata(), dtype=torch.float32), torch.full((4,), math.sqrt(32)))
        assert list(token_line.get_ydata()) == [expected] * 4
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["positional encoding", "N(0, 1)"]


# --- Altair charts -------------------------------------------------------------------------------


def test_table1_chart_sliders_and_no_embedded_data():
    spec = viz.table1_chart(d_model=256, k=5, r=32).to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert set(params) == {"d", "k", "r"}
    assert (params["d"]["value"], params["k"]["value"], params["r"]["value"]) == (256, 5, 32)
    assert all(p["bind"]["input"] == "range" for p in params.values())
    assert inline_rows(spec) == 0  # the grid of n values is generated in the browser
    assert "operations per layer (multiply-adds, log scale)" in axis_titles(spec)
    assert "maximum path length (steps, log scale)" in axis_titles(spec)
    assert "sequence length n (tokens, log scale)" in axis_titles(spec)


def test_table1_chart_computes_table_1_in_the_browser():
    rows = run_vega(viz.table1_chart(), d=64, k=4, r=8)
    points = {(row["kind"], row["n"]): row for row in rows if "ops" in row}
    ns = sorted({n for _, n in points})
    assert ns[0] == 2 and ns[-1] == 4096 and len(points) == 4 * len(ns)
    for n in ns:
        assert points["Self-attention", n]["ops"] == n * n * 64
        assert points["Recurrent", n]["ops"] == n * 64 * 64
        assert points["Convolutional (dilated)", n]["ops"] == 4 * n * 64 * 64
        assert points["Self-attention (restricted)", n]["ops"] == 8 * n * 64
        assert points["Self-attention", n]["path"] == 1
        assert points["Recurrent", n]["path"] == n
        assert points["Convolutional (dilated)", n]["path"] == max(1, math.ceil(math.log(n, 4) - 1e-9))
        assert points["Self-attention (restricted)", n]["path"] == max(1, math.ceil(n / 8))
    rule = [row for row in rows if row.get("label") == "n = d"]
    assert [row["n"] for row in rule] == [64]


def test_timing_chart_draws_the_measured_frame():
    frame = pd.DataFrame({"n": [16, 32, 16, 32], "layer": ["a", "a", "b", "b"], "ms": [0.1, 0.2, 0.3, 0.9]})
    spec = viz.timing_chart(frame).to_dict()
    (rows,) = spec["datasets"].values()
    assert rows == frame.to_dict(orient="records")
    x, y = spec["layer"][0]["encoding"]["x"], spec["layer"][0]["encoding"]["y"]
    assert x["scale"]["type"] == "log" and y["scale"]["type"] == "log"
    assert x["title"] == "sequence length n (tokens, log scale)"
    assert y["title"] == "forward time (milliseconds, log scale)"
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["line", "point"]


def test_embedding_scale_chart_slider_and_no_embedded_data():
    spec = viz.embedding_scale_chart(vocab_size=20000).to_dict()
    (param,) = spec["params"]
    assert param["name"] == "V" and param["value"] == 20000 and param["bind"]["input"] == "range"
    assert inline_rows(spec) == 0
    assert "‖embedding × √d_model‖ / ‖PE‖ (log scale)" in axis_titles(spec)
    assert "d_model (width, log scale)" in axis_titles(spec)


def test_embedding_scale_chart_matches_measured_norms():
    rows = [row for row in run_vega(viz.embedding_scale_chart(), V=10000) if "ratio" in row and "init" in row]
    by_init = {}
    for row in rows:
        by_init.setdefault(row["init"], {})[row["d_model"]] = row["ratio"]
    normal, xavier, t2t = (by_init[name] for name in viz.foundations._INITS)
    assert min(normal) == 16 and max(normal) == 4096
    for d in (64, 512):  # the formulas against norms measured on real tables
        torch.manual_seed(0)
        pe = sinusoidal_encoding(1, d).norm()
        tables = [torch.randn(10000, d), torch.empty(10000, d), torch.randn(10000, d) / math.sqrt(d)]
        torch.nn.init.xavier_uniform_(tables[1])
        for curve, table in zip((normal, xavier, t2t), tables, strict=True):
            measured = (table.norm(dim=-1).mean() * math.sqrt(d) / pe).item()
            assert curve[d] == pytest.approx(measured, rel=0.03)
    assert all(ratio == pytest.approx(math.sqrt(2)) for ratio in t2t.values())


# --- chapter 2.3: the published table's map ------------------------------------------------------


@pytest.mark.parametrize("piece", ["\u2581the"])  # neighbours of both languages; one run, Node is slow to start
def test_embedding_map_chart_highlights_the_record_s_neighbours(piece):
    from vega_runner import vega_data

    from aiayn.pages.embedding_map import load_embedding_map

    record = load_embedding_map()
    where = {p["piece"]: p for p in record["pieces"]}
    chart = viz.embedding_map_chart(record, k=6)
    (param,) = chart.to_dict()["params"]
    assert param["bind"]["input"] == "select" and len(param["bind"]["options"]) == len(record["pieces"])
    data = vega_data(chart, piece=piece)
    (chosen,), *others = [rows for rows in data.values() if len(rows) == 1]  # the diamond and its label
    assert all(rows == [chosen] for rows in others)
    assert chosen["piece"] == piece and (chosen["x"], chosen["y"]) == (where[piece]["x"], where[piece]["y"])
    drawn = [rows for rows in data.values() if len(rows) == 6 and "nx" in rows[0]]
    assert drawn, "no layer draws the neighbours"
    languages = {where[name]["lang"] for name, _ in where[piece]["neighbours"][:6]}
    assert languages == {"de", "en"}, "pick a piece whose neighbours are of both languages"
    for rows in drawn:  # spokes, rings, names and the list: the record's first six, at their places
        assert [(r["neighbour"], r["cosine"]) for r in rows] == [tuple(n) for n in where[piece]["neighbours"][:6]]
        for r in rows:
            assert (r["nx"], r["ny"]) == (where[r["neighbour"]]["x"], where[r["neighbour"]]["y"])
            assert (r["x"], r["y"]) == (where[piece]["x"], where[piece]["y"])
            assert r["language"] == {"de": "German", "en": "English"}[where[r["neighbour"]]["lang"]]


def test_embedding_map_chart_rejects_a_piece_off_the_map():
    from aiayn.pages.embedding_map import load_embedding_map

    with pytest.raises(ValueError, match="piece 'Hund' is not on the map; it holds 300 pieces"):
        viz.embedding_map_chart(load_embedding_map(), piece="Hund")
    with pytest.raises(ValueError, match="k must be between 1 and 10, got 11"):
        viz.embedding_map_chart(load_embedding_map(), k=11)
