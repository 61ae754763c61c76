"""Chapters 6, 7 and 12: normalisation groups, per-layer curves, causality, the three families' masks."""

from __future__ import annotations

import json

import altair as alt

from ._figures import closed_figure


def norm_groups_figure(batch: int = 6, features: int = 10):
    """BatchNorm and LayerNorm drawn on a ``(batch, features)`` grid: cells of one colour share a mean and variance.

    Left, BatchNorm: one group per feature column, statistics taken down the batch. Right, LayerNorm:
    one group per example row, statistics taken across the features.

    Args:
        batch: number of rows (examples, or tokens).
        features: number of columns (the d_model axis).

    Returns:
        A matplotlib Figure (closed); ``fig.axes[k].images[0].get_array()`` holds panel ``k``'s group ids (mod 10).
    """
    import numpy as np

    if batch < 2 or features < 2:
        raise ValueError(
            f"need at least a 2 x 2 grid, got batch={batch}, features={features}"
        )
    fig = closed_figure(10.0, 3.6)
    axes = fig.subplots(1, 2)
    panels = {
        "BatchNorm: one mean and variance per feature,\ntaken over the batch (down each column)": np.tile(
            np.arange(features), (batch, 1)
        ),
        "LayerNorm: one mean and variance per example,\ntaken over the features (along each row)": np.tile(
            np.arange(batch)[:, None], (1, features)
        ),
    }
    for ax, (title, groups) in zip(axes, panels.items(), strict=True):
        ax.imshow(
            groups % 10,
            cmap="tab10",
            vmin=0,
            vmax=9,
            alpha=0.55,
            interpolation="nearest",
        )
        ax.set_xticks(np.arange(-0.5, features), minor=True)
        ax.set_yticks(np.arange(-0.5, batch), minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="both", length=0)
        ax.set_xticks(
            range(features), [str(j) for j in range(features)], fontsize=8
        )
        ax.set_yticks(
            range(batch), [str(i) for i in range(batch)], fontsize=8
        )
        ax.set(
            xlabel="feature j (the d_model axis)",
            ylabel="example i (the batch axis)",
        )
        ax.set_title(title, fontsize=10)
    axes[0].annotate(
        "",
        xy=(0, batch - 0.6),
        xytext=(0, -0.4),
        arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.5},
    )
    axes[1].annotate(
        "",
        xy=(features - 0.6, 0),
        xytext=(-0.4, 0),
        arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.5},
    )
    return fig


def per_layer_figure(
    panels: dict,
    logy: bool = True,
    xlabel: str = "layer (1 = bottom, nearest the input)",
    stacked: bool = False,
):
    """Panels of per-layer quantities: one line per variant, layer index on the x axis.

    Args:
        panels: panel title -> ``(y-axis label, {line label: sequence of values, bottom layer first})``.
        logy: log scale on every y axis.
        xlabel: the x-axis title.
        stacked: panels one above the other (sharing the x axis) instead of side by side.

    Returns:
        A matplotlib Figure (closed), one Axes per panel, one line per variant.
    """
    if not panels:
        raise ValueError(
            "panels is empty: give at least one {title: (ylabel, {label: values})}"
        )
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    if stacked:
        fig = closed_figure(6.5, 3.0 * len(panels))
        axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    else:
        fig = closed_figure(5.0 * len(panels) + 0.5, 3.6)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, (ylabel, lines)) in zip(
        axes, panels.items(), strict=True
    ):
        drawn = []
        for (label, values), marker in zip(
            lines.items(), "os^vD", strict=False
        ):
            values = [float(v) for v in values]
            drawn += values
            ax.plot(
                range(1, len(values) + 1),
                values,
                marker=marker,
                markersize=4,
                label=label,
            )
        if logy:
            ax.set_yscale("log")
            if (
                min(drawn) > 0 and max(drawn) / min(drawn) < 100
            ):  # less than two decades: plain numbers read better
                plain = FuncFormatter(lambda v, _: f"{v:g}")
                ax.yaxis.set_major_formatter(plain)
                ax.yaxis.set_minor_formatter(plain)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(
            xlabel="" if stacked and ax is not axes[-1] else xlabel,
            ylabel=ylabel,
        )
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    return fig


def future_change_figure(
    changes: dict, changed: int, title: str | None = None
):
    """How much the logits at each target position move when the token at position ``changed`` is replaced.

    Args:
        changes: label -> 1-D sequence, the largest absolute change of the logits at each position.
        changed: the position whose input token was replaced (a dashed line marks where it starts).
        title: the figure title.

    Returns:
        A matplotlib Figure (closed) with grouped bars, one group per target position.
    """
    import numpy as np

    fig = closed_figure(7.5, 3.4)
    ax = fig.subplots()
    width = 0.8 / max(len(changes), 1)
    for k, (label, values) in enumerate(changes.items()):
        values = np.asarray([float(v) for v in values])
        ax.bar(
            np.arange(len(values)) + (k - (len(changes) - 1) / 2) * width,
            values,
            width=width,
            label=label,
        )
    ax.axvline(
        changed - 0.5, color="black", linestyle="--", linewidth=1
    )  # earlier positions to its left
    ax.text(
        changed - 0.45,
        ax.get_ylim()[1] * 0.92,
        f"token changed at position {changed} →",
        fontsize=9,
    )
    ax.set_xticks(range(max(len(v) for v in changes.values())))
    ax.set(
        xlabel="target position i", ylabel="max |change of the logits at i|"
    )
    ax.set_title(
        title or "Which positions notice a change at a later position?",
        fontsize=10,
    )
    ax.legend(fontsize="small", loc="upper left")
    return fig


def param_count_chart(
    frame, description: str | None = None
) -> alt.LayerChart:
    """How far our parameter counts are from the paper's Table 3: one point per row, the gap against the size.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``row`` (name), ``paper`` and ``ours`` (millions of
            parameters) and ``change`` (what the row changes); rows without a paper count are skipped.
        description: what the chart shows, for screen readers (Vega-Lite's top-level description).
    """
    data = frame.dropna(subset=["paper"])[["row", "change", "paper", "ours"]]
    data = data.assign(
        gap=(data.ours - data.paper).round(2), ours=data.ours.round(2)
    )
    domain = [float(data.paper.min()) * 0.8, float(data.paper.max()) * 1.25]
    scale = alt.Scale(type="log", domain=domain)
    x = alt.X(
        "paper:Q",
        title="paper's count, Table 3 (millions, log scale)",
        scale=scale,
    )
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("gap:Q", title="ours − paper (millions of parameters)"),
            color=alt.condition(
                "datum.gap < 0", alt.value("#2b7bba"), alt.value("#d6604d")
            ),
            tooltip=[
                alt.Tooltip("row:N"),
                alt.Tooltip("change:N", title="setting"),
                alt.Tooltip("paper:Q", title="paper (M)"),
                alt.Tooltip("ours:Q", title="ours (M)"),
                alt.Tooltip("gap:Q", title="ours − paper (M)"),
            ],
        )
    )
    labels = points.mark_text(
        align="left", dx=7, fontSize=10, color="black"
    ).encode(text="row:N")
    zero = (
        alt.Chart(alt.sequence(0, 1, as_="i"))
        .mark_rule(strokeDash=[4, 4], color="#555")
        .encode(y=alt.datum(0))
    )
    return (zero + points + labels).properties(
        width=520,
        height=300,
        title="Our parameter counts minus the paper's (dashed: equal)",
        description=description
        or (
            "Scatter plot, one point per row of Table 3: the paper's "
            "parameter count (log scale) against our count minus the paper's."
        ),
    )


FAMILIES = (
    "encoder-only (BERT)",
    "decoder-only (GPT)",
    "encoder-decoder (T5)",
)
FAMILY_STATUSES = (
    "self-attention: may attend",
    "cross-attention: may attend",
    "blocked: a later token (look-ahead)",
    "none: the encoder never reads the target",
)


def family_masks(n_source: int, n_target: int) -> dict:
    """Which key each query may attend to, family by family, over one sequence of source then target tokens.

    Built from ``aiayn.masks``: BERT's stack passes the padding mask alone (every token sees every
    token); GPT's passes ``decoder_mask`` (itself and earlier tokens); the paper's (and T5's) encoder
    uses the padding mask on the source, its decoder ``decoder_mask`` on the target and the source's
    padding mask for cross-attention, and no source token reads the target. No token is padding.

    Args:
        n_source: S, the source tokens (first in the sequence).
        n_target: T, the target tokens (the decoder's input, after them).

    Returns:
        family name (``FAMILIES``) -> ``(S + T, S + T)`` boolean, ``True`` = may attend.
    """
    import torch

    from ..masks import decoder_mask, padding_mask

    S, T, L = n_source, n_target, n_source + n_target
    ids = torch.arange(1, L + 1)[None]  # (1, L): real tokens, pad id 0
    src, tgt = ids[:, :S], ids[:, S:]  # (1, S), (1, T)
    both = torch.zeros(L, L, dtype=torch.bool)
    both[:S, :S] = padding_mask(src, 0)[0, 0].expand(S, S)  # encoder
    both[S:, S:] = decoder_mask(tgt, 0)[0, 0]  # decoder self-attention
    both[S:, :S] = padding_mask(src, 0)[0, 0].expand(T, S)  # cross
    return {
        FAMILIES[0]: padding_mask(ids, 0)[0, 0].expand(L, L),
        FAMILIES[1]: decoder_mask(ids, 0)[0, 0],
        FAMILIES[2]: both,
    }


def family_mask_chart(
    source: list[str], target: list[str]
) -> alt.LayerChart:
    """The same sequence in the three families, one menu: which tokens each token may attend to.

    The cells come from ``family_masks`` (so from ``aiayn.masks``), computed here and embedded;
    the menu only picks a family in the browser. A cell is coloured by its kind: self- or
    cross-attention that is allowed, a later token the look-ahead mask hides, or a pair the
    encoder-decoder never connects (a source token reading the target).

    Args:
        source: S source tokens, e.g. ``["Ein", "Hund", "rennt", "</s>"]``.
        target: T decoder-input tokens, e.g. ``["<s>", "A", "dog", "runs"]``.

    Returns:
        an Altair chart of (S + T)² cells with one menu.
    """
    if not source or not target:
        raise ValueError(
            "family_mask_chart needs at least one source and one target "
            f"token, got {len(source)} and {len(target)}"
        )
    S, labels = len(source), [*source, *target]
    rows = []
    for family, mask in family_masks(S, len(target)).items():
        for (q, k), allowed in _cells(mask):
            cross = family == FAMILIES[2] and q >= S > k
            if allowed:
                status = FAMILY_STATUSES[1 if cross else 0]
            elif family == FAMILIES[2] and q < S <= k:
                status = FAMILY_STATUSES[3]
            else:
                status = FAMILY_STATUSES[2]
            rows.append(
                {"family": family, "query": q, "key": k, "status": status,
                 "value": "T" if allowed else "F"}
            )  # fmt: skip
    family = alt.param(
        name="family",
        value=FAMILIES[2],
        bind=alt.binding_select(
            options=list(FAMILIES), name="architecture "
        ),
    )
    names = "[" + ", ".join(json.dumps(t) for t in labels) + "]"
    label = f"{names}[datum.value]"
    base = alt.Chart(alt.Data(values=rows)).transform_filter(
        "datum.family == family"
    )
    cells = base.mark_rect(stroke="white", strokeWidth=1).encode(
        x=alt.X(
            "key:O",
            title="key (attended to)",
            axis=alt.Axis(labelExpr=label, labelAngle=0, orient="top"),
        ),
        y=alt.Y(
            "query:O",
            title="query (attending)",
            axis=alt.Axis(labelExpr=label),
        ),
        color=alt.Color(
            "status:N",
            title="query → key",
            scale=alt.Scale(
                domain=list(FAMILY_STATUSES),
                range=["#2b7bba", "#1a9850", "#f4a582", "#d9d9d9"],
            ),
            legend=alt.Legend(
                orient="bottom", direction="vertical", labelLimit=320
            ),
        ),
        tooltip=[
            alt.Tooltip("query:O", title="query position"),
            alt.Tooltip("key:O", title="key position"),
            alt.Tooltip("status:N", title="attention"),
        ],
    )
    text = base.mark_text(fontSize=10).encode(
        x="key:O",
        y="query:O",
        text="value:N",
        color=alt.condition(
            "datum.value == 'T'", alt.value("white"), alt.value("#555555")
        ),
    )
    title = f"source: {' '.join(source)} | target: {' '.join(target)}"
    return (
        (cells + text)
        .add_params(family)
        .properties(
            width=alt.Step(40),
            height=alt.Step(28),
            title=alt.TitleParams(
                "Which tokens each token may attend to", subtitle=title
            ),
        )
    )


def _cells(mask):
    """((query, key), allowed) for every cell of a ``(L_q, L_k)`` mask."""
    for q, row in enumerate(mask.tolist()):
        for k, allowed in enumerate(row):
            yield (q, k), allowed


__all__ = [
    "FAMILIES",
    "family_masks",
    "family_mask_chart",
    "norm_groups_figure",
    "per_layer_figure",
    "future_change_figure",
    "param_count_chart",
]
