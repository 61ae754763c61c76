"""Chapter 5, attention: the paper's Figure 2, temperature bars and attention heatmaps."""

from __future__ import annotations

import json

import altair as alt


def paper_figure2():
    """The paper's Figure 2, redrawn: scaled dot-product attention beside multi-head attention.

    The drawing ships inside the package (``aiayn/figures/figure2_attention.svg``), so a notebook
    shows it wherever it runs, Colab included, and its stored output needs no file beside it.

    Returns:
        An ``IPython.display.SVG``: a cell that ends with it draws the figure.
    """
    from importlib.resources import files

    from IPython.display import SVG

    path = files("aiayn") / "figures" / "figure2_attention.svg"
    return SVG(data=path.read_text(encoding="utf-8"))


def softmax_temperature_chart(
    scores,
    keys,
    query: str = "",
    t_min: float = 0.1,
    t_max: float = 5.0,
    t_init: float = 1.0,
    step: float = 0.05,
) -> alt.LayerChart:
    """Bars of softmax(scores / T) for one query, with T on a slider named "temperature".

    The softmax is computed in the browser by Vega expressions, so the chart stays interactive on
    the static website: subtract the row's largest score (a joinaggregate ``max``), take ``exp`` of
    the difference divided by T, divide by the row's sum (a joinaggregate ``sum``). A dashed rule
    marks the uniform weight 1/n that every bar approaches as T grows.

    Args:
        scores: ``(n,)`` scaled scores of one query against n keys (a sequence or 1-D tensor).
        keys: the n key tokens, shown under the bars in order (repeats allowed).
        query: the query token, used in the title.
        t_min, t_max, t_init, step: range, start value and step of the temperature slider.

    Returns:
        A layered Altair chart (bars, value labels, uniform rule) that owns the ``temperature`` param.
    """
    import pandas as pd

    scores = [float(s) for s in scores]
    keys = [str(k) for k in keys]
    if len(scores) != len(keys) or not scores:
        raise ValueError(
            f"need one score per key, got {len(scores)} scores and {len(keys)} keys"
        )
    if not 0 < t_min <= t_init <= t_max:
        raise ValueError(
            f"need 0 < t_min <= t_init <= t_max, got {t_min}, {t_init}, {t_max}"
        )
    data = pd.DataFrame(
        {
            "position": range(len(keys)),
            "key": keys,
            "score": [round(s, 4) for s in scores],
        }
    )
    temperature = alt.param(
        name="temperature",
        value=t_init,
        bind=alt.binding_range(
            min=t_min, max=t_max, step=step, name="temperature "
        ),
    )
    labels = json.dumps(keys)
    x = alt.X(
        "position:O",
        title="key (the token attended to)",
        axis=alt.Axis(labelExpr=f"{labels}[datum.value]", labelAngle=0),
    )
    base = (
        alt.Chart(data)
        .transform_joinaggregate(top="max(score)")
        .transform_calculate(
            e="exp((datum.score - datum.top) / temperature)"
        )
        .transform_joinaggregate(total="sum(e)")
        .transform_calculate(weight="datum.e / datum.total")
    )
    y = alt.Y(
        "weight:Q",
        title="attention weight softmax(score / T)",
        scale=alt.Scale(domain=[0, 1]),
    )
    bars = base.mark_bar(color="#4c78a8").encode(
        x=x,
        y=y,
        tooltip=[
            alt.Tooltip("key:N", title="key"),
            alt.Tooltip("score:Q", title="score", format=".2f"),
            alt.Tooltip("weight:Q", title="weight", format=".3f"),
        ],
    )
    values = base.mark_text(dy=-6, fontSize=11).encode(
        x=x, y=y, text=alt.Text("weight:Q", format=".2f")
    )
    uniform = (
        alt.Chart(pd.DataFrame({"uniform": [1 / len(keys)]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(y="uniform:Q")
    )
    title = (
        f'Weights of the query "{query}" as the temperature T changes'
        if query
        else "softmax(score / T)"
    )
    return (
        alt.layer(uniform, bars, values)
        .add_params(temperature)
        .properties(title=title, width=max(240, 48 * len(keys)), height=220)
    )


def attention_heatmap(
    weights,
    query_tokens,
    key_tokens,
    ax=None,
    title: str | None = None,
    annotate: bool = True,
    fontsize: float = 7.0,
):
    """Draw one ``(L_q, L_k)`` matrix of attention weights as a heatmap, queries down, keys across.

    Args:
        weights: ``(L_q, L_k)`` tensor or array with values in [0, 1].
        query_tokens: L_q labels for the rows.
        key_tokens: L_k labels for the columns.
        ax: matplotlib Axes to draw on; a new figure is made when ``None``.
        title: the Axes title.
        annotate: write each weight in its cell (two decimals).
        fontsize: size in points of the numbers written in the cells.

    Returns:
        The Axes; its image is ``ax.images[0]``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    w = np.asarray(
        weights.detach().cpu() if hasattr(weights, "detach") else weights,
        dtype=float,
    )
    if w.ndim != 2 or w.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"weights of shape {w.shape} do not match {len(query_tokens)} query and {len(key_tokens)} key tokens"
        )
    if ax is None:
        fig = plt.figure(
            figsize=(
                0.5 * len(key_tokens) + 1.5,
                0.5 * len(query_tokens) + 1.2,
            )
        )
        ax = fig.add_subplot()
        plt.close(fig)
    ax.imshow(w, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(key_tokens)), key_tokens, rotation=90)
    ax.set_yticks(range(len(query_tokens)), query_tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title, fontsize=10)
    if annotate:
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                color = "white" if w[i, j] > 0.6 else "black"
                ax.text(
                    j,
                    i,
                    f"{w[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=fontsize,
                    color=color,
                )
    return ax


def attention_heads_figure(
    weights,
    query_tokens,
    key_tokens,
    titles=None,
    ncols: int = 4,
    annotate: bool = True,
    fontsize: float = 10.0,
):
    """Small multiples: one attention heatmap per head, with one shared colour bar.

    Sized for the website: the numbers in the cells, the token labels and the titles are at
    least 10 points, the key axis is labelled once under the bottom row, so that no title
    meets the labels of the panel above it.

    Args:
        weights: ``(h, L_q, L_k)`` weights of one sequence, e.g. ``layer.attn[0]``.
        query_tokens: L_q labels for the rows.
        key_tokens: L_k labels for the columns.
        titles: h panel titles; default ``"head 0"``, ``"head 1"``, ...
        ncols: panels per row.
        annotate: write each weight in its cell.
        fontsize: size in points of the numbers in the cells (labels are 10.5 points).

    Returns:
        A matplotlib Figure (closed, so that a notebook shows it once, as the cell's value).
    """
    import matplotlib.pyplot as plt

    if weights.ndim != 3:
        raise ValueError(
            f"weights: expected shape (h, L_q, L_k), got {tuple(weights.shape)}"
        )
    h = weights.shape[0]
    titles = (
        [f"head {i}" for i in range(h)] if titles is None else list(titles)
    )
    if len(titles) != h:
        raise ValueError(f"got {len(titles)} titles for {h} heads")
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    side = 0.5 * max(len(query_tokens), len(key_tokens)) + 1.0
    figsize = (side * ncols + 1.2, side * nrows + 0.6)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=figsize, squeeze=False, layout="constrained"
    )
    fig.get_layout_engine().set(h_pad=0.15, w_pad=0.1)
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.set_visible(False)
            continue
        attention_heatmap(
            weights[i],
            query_tokens,
            key_tokens,
            ax=ax,
            title=titles[i],
            annotate=annotate,
            fontsize=fontsize,
        )
        ax.set_title(titles[i], fontsize=11)
        ax.tick_params(labelsize=10.5)
        ax.set_ylabel("query (attending)" if i % ncols == 0 else "")
        ax.set_xlabel("key (attended to)" if i >= h - ncols else "")
        ax.yaxis.label.set_fontsize(10.5)
        ax.xaxis.label.set_fontsize(10.5)
    bar = fig.colorbar(
        axes.flat[0].images[0],
        ax=list(axes.flat),
        shrink=0.8,
        label="attention weight",
    )
    bar.ax.tick_params(labelsize=10)
    bar.ax.yaxis.label.set_fontsize(10.5)
    plt.close(fig)
    return fig


def update_attention_heads(fig, weights) -> None:
    """Redraw the heatmaps of a figure from ``attention_heads_figure`` with new weights, in place.

    Faster than drawing a new figure: only the images and the numbers in the cells change.

    Args:
        fig: a figure made by ``attention_heads_figure`` for the same shape.
        weights: ``(h, L_q, L_k)`` new weights.
    """
    import numpy as np

    w = np.asarray(
        weights.detach().cpu() if hasattr(weights, "detach") else weights,
        dtype=float,
    )
    panels = [
        ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"
    ]
    if (
        w.ndim != 3
        or w.shape[0] != len(panels)
        or w.shape[1:] != panels[0].images[0].get_array().shape
    ):
        raise ValueError(
            f"weights of shape {w.shape} do not fit a figure of {len(panels)} panels"
        )
    for ax, head in zip(panels, w, strict=True):
        ax.images[0].set_data(head)
        if len(ax.texts) == head.size:
            for text, value in zip(ax.texts, head.flat, strict=True):
                text.set_text(f"{value:.2f}")
                text.set_color("white" if value > 0.6 else "black")


def softmax_saturation_figure(table):
    """Two panels against d_k: how peaked softmax is, and how much gradient flows back through it.

    Args:
        table: a pandas DataFrame in long form with columns ``d_k``, ``scores`` (a label such as
            ``"q·k"`` or ``"q·k / √d_k"``), ``largest weight`` (mean over rows of the row maximum)
            and ``gradient norm`` (median over rows of the Frobenius norm of d softmax / d scores).

    Returns:
        A matplotlib Figure (closed).
    """
    import matplotlib.pyplot as plt

    missing = {"d_k", "scores", "largest weight", "gradient norm"} - set(
        table.columns
    )
    if missing:
        raise ValueError(f"table is missing columns {sorted(missing)}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.3))
    for label, part in table.groupby("scores", sort=False):
        left.plot(
            part["d_k"], part["largest weight"], marker="o", label=label
        )
        right.plot(
            part["d_k"], part["gradient norm"], marker="o", label=label
        )
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k (query/key width)")
        ax.grid(alpha=0.3)
    left.set_ylim(0, 1.05)
    left.set_ylabel("largest weight in a row (mean)")
    left.set_title("How peaked is softmax?", fontsize=10)
    right.set_yscale("log")
    right.set_ylabel("‖∂ softmax / ∂ scores‖ (median)")
    right.set_title("How much gradient gets through?", fontsize=10)
    left.legend(title="softmax of")
    fig.tight_layout()
    plt.close(fig)
    return fig


__all__ = [
    "paper_figure2",
    "softmax_temperature_chart",
    "attention_heatmap",
    "attention_heads_figure",
    "update_attention_heads",
    "softmax_saturation_figure",
]
