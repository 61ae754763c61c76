"""Tests for the chart helpers of chapters 6 (Add & Norm) and 7 (the full model): structure only, no rendering."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from aiayn import viz  # noqa: E402


def test_norm_groups_figure_shades_columns_then_rows():
    fig = viz.norm_groups_figure(batch=4, features=6)
    bn, ln = (np.asarray(ax.images[0].get_array()) for ax in fig.axes)
    assert bn.shape == ln.shape == (4, 6)
    assert (bn == bn[0]).all() and len(set(bn[0])) == 6  # one group per column
    assert (ln == ln[:, :1]).all() and len(set(ln[:, 0])) == 4  # one group per row
    assert "BatchNorm" in fig.axes[0].get_title() and "LayerNorm" in fig.axes[1].get_title()
    with pytest.raises(ValueError, match=r"need at least a 2 x 2 grid, got batch=1, features=6"):
        viz.norm_groups_figure(batch=1, features=6)


def test_per_layer_figure():
    panels = {
        "gradients": ("gradient norm", {"post-norm": [1.0, 2.0, 4.0], "pre-norm": [3.0, 2.0, 1.0]}),
        "stream": ("RMS", {"post-norm": [1.0, 1.0, 1.0]}),
    }
    fig = viz.per_layer_figure(panels)
    assert len(fig.axes) == 2
    left, right = fig.axes
    assert left.get_yscale() == "log" and left.get_ylabel() == "gradient norm"
    assert [line.get_label() for line in left.lines] == ["post-norm", "pre-norm"]
    assert list(left.lines[0].get_xdata()) == [1, 2, 3] and list(left.lines[1].get_ydata()) == [3.0, 2.0, 1.0]
    assert len(right.lines) == 1
    assert viz.per_layer_figure({"one": ("y", {"a": [1, 2]})}, logy=False).axes[0].get_yscale() == "linear"
    top, bottom = viz.per_layer_figure(panels, stacked=True).axes
    assert top.get_xlabel() == "" and bottom.get_xlabel().startswith("layer")
    assert top.get_position().y0 > bottom.get_position().y0  # one above the other
    with pytest.raises(ValueError, match=r"panels is empty"):
        viz.per_layer_figure({})


def test_future_change_figure():
    changes = {"with the look-ahead mask": [0.0, 0.0, 0.0, 1.5, 2.0], "without": [0.5, 0.7, 0.9, 1.5, 2.0]}
    fig = viz.future_change_figure(changes, changed=3)
    ax = fig.axes[0]
    assert len(ax.patches) == 10  # 5 positions x 2 variants
    heights = [p.get_height() for p in ax.patches]
    assert heights[:5] == changes["with the look-ahead mask"]
    assert ax.get_xlabel() == "target position i"


def test_param_count_chart_skips_rows_without_a_paper_count():
    frame = pd.DataFrame(
        {
            "row": ["base", "A1", "C1"],
            "change": ["-", "h=1", "N=2"],
            "ours": [63.1, 63.1, 33.7],
            "paper": [65.0, math.nan, 36.0],
        }
    )
    spec = viz.param_count_chart(frame).to_dict()
    assert len(spec["layer"]) == 3
    datasets = [rows for rows in spec["datasets"].values() if rows and "row" in rows[0]]
    assert [r["row"] for r in datasets[0]] == ["base", "C1"]
    assert [r["gap"] for r in datasets[0]] == [-1.9, -2.3]


def test_param_count_chart_describes_itself():
    frame = pd.DataFrame(
        {"row": ["base"], "change": ["-"], "ours": [63.1], "paper": [65.0]}
    )
    assert "Table 3" in viz.param_count_chart(frame).to_dict()["description"]
    chart = viz.param_count_chart(frame, description="Gaps per row.")
    assert chart.to_dict()["description"] == "Gaps per row."


# --- chapter 12: the three families' masks ---------------------------------------------------------

SOURCE, TARGET = ["Ein", "Hund", "rennt", "</s>"], ["<s>", "A", "dog"]


def expected_family_masks(S: int, T: int) -> dict:
    """Each family's mask over S source then T target tokens, put together here from aiayn.masks."""
    import torch

    from aiayn.masks import decoder_mask, padding_mask, subsequent_mask

    L = S + T
    real = torch.ones(1, L, dtype=torch.long)  # no padding: every id is 1
    enc_dec = torch.zeros(L, L, dtype=torch.bool)
    enc_dec[:S, :S] = padding_mask(real[:, :S], 0)[0, 0]  # broadcast over the S queries
    enc_dec[S:, :S] = padding_mask(real[:, :S], 0)[0, 0]  # cross-attention: the whole source
    enc_dec[S:, S:] = subsequent_mask(T)  # the decoder: itself and earlier targets
    return {
        "encoder-only (BERT)": padding_mask(real, 0)[0, 0].expand(L, L),
        "decoder-only (GPT)": decoder_mask(real, 0)[0, 0],
        "encoder-decoder (T5)": enc_dec,
    }


@pytest.mark.parametrize("family", list(viz.FAMILIES))
def test_family_mask_chart_shows_the_package_s_masks(family):
    import torch
    from vega_runner import vega_data

    chart = viz.family_mask_chart(SOURCE, TARGET)
    spec = chart.to_dict()
    (param,) = spec["params"]
    assert param["bind"] == {"input": "select", "options": list(viz.FAMILIES), "name": "architecture "}
    data = vega_data(chart, family=family)
    L = len(SOURCE) + len(TARGET)
    # the embedded rows of all three families, and what the menu lets through
    embedded, *drawn = sorted((rows for rows in data.values() if rows), key=len, reverse=True)
    assert len(embedded) == 3 * L * L and {row["family"] for row in embedded} == set(viz.FAMILIES)
    cells = drawn[0]
    assert all(rows == cells for rows in drawn)
    assert {row["family"] for row in cells} == {family} and len(cells) == L * L
    got = torch.zeros(L, L, dtype=torch.bool)
    for row in cells:
        got[row["query"], row["key"]] = row["value"] == "T"
        assert row["status"].startswith(("self", "cross")) == (row["value"] == "T")
    assert torch.equal(got, expected_family_masks(len(SOURCE), len(TARGET))[family])
    cross = {(r["query"], r["key"]) for r in cells if r["status"].startswith("cross")}
    S = len(SOURCE)
    if family == "encoder-decoder (T5)":  # every target query reads every source key, and only those
        assert cross == {(q, k) for q in range(S, L) for k in range(S)}
        assert all(r["status"].startswith("none") for r in cells if r["query"] < S <= r["key"])
    else:
        assert not cross


def test_family_masks_are_the_package_s():
    import torch

    for family, mask in viz.family_masks(3, 5).items():
        assert torch.equal(mask, expected_family_masks(3, 5)[family]), family


def test_family_mask_chart_needs_both_sides():
    with pytest.raises(ValueError, match="at least one source and one target token, got 2 and 0"):
        viz.family_mask_chart(["a", "b"], [])
