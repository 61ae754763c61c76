"""Tests for the chart helpers of chapters 3 and 4 (positional encoding, masking): specs, params, sliders.

Nothing is rendered here. The charts' Vega expressions are evaluated with the site's own Vega
packages under Node.js (``tests/vega_runner.py``) and compared with ``aiayn.embeddings`` and ``aiayn.masks``.
"""

import json
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close
from vega_runner import vega_data

from aiayn import viz
from aiayn.embeddings import sinusoidal_encoding
from aiayn.masks import decoder_mask, padding_mask, subsequent_mask

ROOT = Path(__file__).resolve().parent.parent
def params_by_name(spec: dict) -> dict[str, dict]:
    return {p["name"]: p for p in spec.get("params", [])}


def all_transforms(spec) -> list[dict]:
    """Every transform anywhere in a (nested) spec."""
    found = []
    if isinstance(spec, dict):
        found += spec.get("transform", [])
        for value in spec.values():
            found += all_transforms(value)
    elif isinstance(spec, list):
        for value in spec:
            found += all_transforms(value)
    return found


def axis_titles(spec) -> list[str]:
    """The titles of every x and y encoding anywhere in a spec."""
    titles = []
    if isinstance(spec, dict):
        for channel in ("x", "y"):
            enc = spec.get("encoding", {}).get(channel)
            if isinstance(enc, dict) and "field" in enc:
                titles.append(enc.get("title"))
        for value in spec.values():
            titles += axis_titles(value)
    elif isinstance(spec, list):
        for value in spec:
            titles += axis_titles(value)
    return titles


def inline_values(spec) -> int:
    """Number of embedded data rows (``values`` and ``datasets``) in a spec."""
    count = 0
    if isinstance(spec, dict):
        if isinstance(spec.get("values"), list):
            count += len(spec["values"])
        for rows in spec.get("datasets", {}).values():
            count += len(rows)
        for key, value in spec.items():
            if key != "datasets":
                count += inline_values(value)
    elif isinstance(spec, list):
        for value in spec:
            count += inline_values(value)
    return count


# --- matplotlib figures --------------------------------------------------------------------------


def labels_of(fig) -> list[tuple[str, str]]:
    return [(ax.get_xlabel(), ax.get_ylabel()) for ax in fig.axes if ax.get_label() != "<colorbar>"]


def test_pe_heatmap_draws_the_table_with_labelled_axes():
    pe = sinusoidal_encoding(30, 16)
    fig = viz.pe_heatmap(pe, title="t")
    ax = fig.axes[0]
    assert ax.get_title() == "t"
    assert labels_of(fig)[0] == ("dimension (column of the table)", "position in the sequence")
    assert_close(torch.tensor(ax.images[0].get_array()), pe)
    assert len(fig.axes) == 2  # the heatmap and its colour bar
    assert fig.axes[1].get_ylabel() == "PE value"


def test_pe_curves_one_line_per_column():
    pe = sinusoidal_encoding(50, 20)
    fig = viz.pe_curves(pe, dims=(4, 5, 6, 7))
    ax = fig.axes[0]
    assert [line.get_label() for line in ax.lines] == [
        "dimension 4 (sin)",
        "dimension 5 (cos)",
        "dimension 6 (sin)",
        "dimension 7 (cos)",
    ]
    assert_close(torch.tensor(ax.lines[2].get_ydata()), pe[:, 6])
    assert labels_of(fig) == [("position in the sequence", "PE value")]


def test_pe_curves_rejects_missing_columns():
    with pytest.raises(ValueError, match=r"dims must be columns of a table with 8 columns, got \(4, 9\)"):
        viz.pe_curves(sinusoidal_encoding(10, 8), dims=(4, 9))


def test_pe_similarity_is_the_gram_matrix():
    pe = sinusoidal_encoding(20, 8)
    fig = viz.pe_similarity(pe)
    assert_close(torch.tensor(fig.axes[0].images[0].get_array()), pe @ pe.T)
    assert labels_of(fig)[0] == ("position q", "position p")


@pytest.mark.parametrize("fn", [viz.pe_heatmap, viz.pe_similarity, viz.pe_curves])
def test_pe_figures_reject_a_batch(fn):
    with pytest.raises(ValueError, match=r"pe: expected a 2-D tensor, got shape \(1, 10, 8\)"):
        fn(torch.zeros(1, 10, 8))


def test_pe_wavelengths_log_scale_one_line_per_variant():
    fig = viz.pe_wavelengths({"a": torch.tensor([1.0, 10.0, 100.0]), "b": torch.tensor([1.0, 100.0, 1e4])})
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    assert [line.get_label() for line in ax.lines] == ["a", "b"]
    assert ax.get_ylabel() == "wavelength (positions, log scale)"
    assert ax.get_xlabel() == "pair i (columns 2i and 2i + 1)"


def test_mask_heatmaps_one_panel_per_mask():
    masks = {"padding": padding_mask(torch.tensor([[3, 4, 0]]), 0)[0, 0].expand(3, 3), "look-ahead": subsequent_mask(3)}
    fig = viz.mask_heatmaps(masks, ["A", "B", "<pad>"])
    assert [ax.get_title() for ax in fig.axes] == ["padding", "look-ahead"]
    assert labels_of(fig) == [("key (attended to)", "query (attending)")] * 2
    ax = fig.axes[1]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["A", "B", "<pad>"]
    assert torch.equal(torch.tensor(ax.images[0].get_array()).bool(), subsequent_mask(3))
    assert [t.get_text() for t in ax.texts] == ["T", "F", "F", "T", "T", "F", "T", "T", "T"]


def test_mask_heatmaps_rejects_mismatched_labels():
    with pytest.raises(ValueError, match=r"mask 'm' of shape \(3, 3\) does not match 2 queries and 2 keys"):
        viz.mask_heatmaps({"m": subsequent_mask(3)}, ["A", "B"])


# --- positional_encoding_chart -------------------------------------------------------------------


def test_positional_encoding_chart_has_three_named_sliders():
    spec = viz.positional_encoding_chart(max_positions=60, max_d_model=64).to_dict()
    params = params_by_name(spec)
    assert set(params) == {"d_model", "positions", "dimension"}
    for name, label in [("d_model", "d_model"), ("positions", "positions shown"), ("dimension", "dimension")]:
        bind = params[name]["bind"]
        assert bind["input"] == "range"
        assert bind["name"].strip() == label
    assert params["d_model"]["bind"]["max"] == 64
    assert params["positions"]["bind"]["max"] == 60
    assert params["dimension"]["bind"]["max"] == 63


def test_positional_encoding_chart_computes_in_the_browser():
    spec = viz.positional_encoding_chart().to_dict()
    assert inline_values(spec) == 0  # generated by `sequence`, nothing embedded
    expressions = " ".join(t.get("calculate", "") + t.get("filter", "") for t in all_transforms(spec))
    for word in ("sin(", "cos(", "pow(10000", "d_model", "positions", "dimension"):
        assert word in expressions
    assert all(axis_titles(spec))
    assert len(json.dumps(spec)) < 20_000
    params = params_by_name(spec)
    worst = params["positions"]["bind"]["max"] * params["d_model"]["bind"]["max"]
    assert worst <= 7_000  # heatmap cells at the sliders' ends: an SVG redraws that in a few seconds at most


def test_positional_encoding_chart_rejects_bad_ranges():
    with pytest.raises(ValueError, match="max_d_model a positive multiple of 8, got 80 and 100"):
        viz.positional_encoding_chart(max_positions=80, max_d_model=100)


@pytest.mark.parametrize(("d_model", "positions", "dimension"), [(16, 12, 5), (64, 40, 30), (8, 10, 100)])
def test_positional_encoding_chart_values_match_the_package(d_model, positions, dimension):
    chart = viz.positional_encoding_chart()
    data = vega_data(chart, d_model=d_model, positions=positions, dimension=dimension)
    table = sinusoidal_encoding(positions, d_model)
    (grid,) = [rows for rows in data.values() if rows and "pos_end" in rows[0]]  # the heatmap's cells
    assert len(grid) == positions * d_model
    got = torch.zeros(positions, d_model)
    for row in grid:
        got[row["pos"], row["dim"]] = row["value"]
    assert_close(got, table, atol=1e-5, rtol=0)
    # the wave underneath: the chosen column (clamped to the table), sampled between positions too
    column = min(dimension, d_model - 1)
    waves = [rows for rows in data.values() if rows and "value" in rows[0] and "pos_end" not in rows[0]]
    (line,) = [rows for rows in waves if any(row["pos"] != int(row["pos"]) for row in rows)]
    assert len(line) == 4 * (positions - 1) + 1  # four steps per position
    at_integers = {row["pos"]: row["value"] for row in line if row["pos"] == int(row["pos"])}
    assert sorted(at_integers) == list(range(positions))
    assert_close(torch.tensor([at_integers[p] for p in range(positions)]), table[:, column], atol=1e-5, rtol=0)
    assert {row["dim"] for row in line} == {column}


# --- mask_chart ----------------------------------------------------------------------------------


def test_mask_chart_has_two_sliders_and_a_mask_choice():
    spec = viz.mask_chart(max_len=10).to_dict()
    params = params_by_name(spec)
    assert set(params) == {"seq_len", "n_pad", "kind"}
    assert params["seq_len"]["bind"] == {"input": "range", "min": 2, "max": 10, "step": 1, "name": "sequence length "}
    assert params["n_pad"]["bind"]["input"] == "range"
    assert params["n_pad"]["bind"]["name"].strip() == "padding tokens"
    assert params["kind"]["bind"]["input"] == "radio"
    assert params["kind"]["value"] == "padding & look-ahead (decoder)"
    assert inline_values(spec) == 0
    assert axis_titles(spec)[:2] == ["key (attended to)", "query (attending)"]
    expressions = " ".join(t.get("calculate", "") + t.get("filter", "") for t in all_transforms(spec))
    for word in ("seq_len", "n_pad", "kind", "datum.key > datum.query"):
        assert word in expressions


@pytest.mark.parametrize("max_len", [1, 27])
def test_mask_chart_rejects_bad_max_len(max_len):
    with pytest.raises(ValueError, match=f"max_len must be between 2 and 26, got {max_len}"):
        viz.mask_chart(max_len=max_len)


@pytest.mark.parametrize(
    ("kind", "seq_len", "n_pad"),
    [
        ("padding & look-ahead (decoder)", 5, 1),
        ("padding & look-ahead (decoder)", 7, 3),
        ("padding (encoder)", 6, 2),
        ("look-ahead", 4, 2),
        ("padding & look-ahead (decoder)", 4, 9),  # more padding than positions: all padding, every row empty
        ("look-ahead", 3, 3),  # padding does not change the look-ahead mask
    ],
)
def test_mask_chart_cells_match_the_package(kind, seq_len, n_pad):
    data = vega_data(viz.mask_chart(), seq_len=seq_len, n_pad=n_pad, kind=kind)
    (cells,) = [rows for rows in data.values() if rows and "query" in rows[0]]
    got = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for row in cells:
        got[row["query"], row["key"]] = row["value"] == "True"
    assert len(cells) == seq_len * seq_len
    n_real = max(seq_len - n_pad, 0)
    tokens = torch.tensor([[5] * n_real + [0] * (seq_len - n_real)])
    expected = {
        "padding & look-ahead (decoder)": decoder_mask(tokens, 0)[0, 0],
        "padding (encoder)": padding_mask(tokens, 0)[0, 0].expand(seq_len, seq_len),
        "look-ahead": subsequent_mask(seq_len),
    }[kind]
    assert torch.equal(got, expected)


# --- widgets -------------------------------------------------------------------------------------


def test_positional_encoding_explorer_sliders_redraw_the_image():
    pytest.importorskip("ipywidgets")
    from aiayn.pages.widgets import positional_encoding_explorer

    box = positional_encoding_explorer(max_len=50, max_d_model=64)
    controls, image = box.children
    d_model, positions, dimension = controls.children
    assert (d_model.description, positions.description, dimension.description) == ("d_model", "positions", "dimension")
    assert (d_model.max, positions.max, dimension.max) == (64, 50, 63)
    first = bytes(image.value)
    assert first.startswith(b"\x89PNG")
    d_model.value = 16
    assert dimension.max == 15  # the column slider follows the width of the table
    assert bytes(image.value) != first
    second = bytes(image.value)
    dimension.value = 3
    assert bytes(image.value) != second


def test_positional_encoding_explorer_rejects_bad_ranges():
    pytest.importorskip("ipywidgets")
    from aiayn.pages.widgets import positional_encoding_explorer

    with pytest.raises(ValueError, match="max_d_model a positive multiple of 8, got 50 and 12"):
        positional_encoding_explorer(max_len=50, max_d_model=12)
