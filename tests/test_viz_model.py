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
