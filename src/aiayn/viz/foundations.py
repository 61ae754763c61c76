"""Chapters 1 and 2, why attention and embeddings: paths, costs, timings, magnitudes, the learned table."""

from __future__ import annotations

import altair as alt

from ._figures import closed_figure


def path_length_figure(words: list[str], source: int, target: int):
    """One sentence drawn twice: as a recurrent chain and as all-pairs self-attention.

    The path that carries information from the input at ``source`` to the output at ``target``
    is drawn in colour, and each panel's title counts its arrows.

    Args:
        words: the tokens of the sentence, left to right.
        source: position whose input is to reach the output at ``target``; ``source < target``.
        target: position of the output.
    """
    if not 0 <= source < target < len(words):
        raise ValueError(
            f"need 0 <= source < target < {len(words)}, got source={source}, target={target}"
        )
    n = len(words)
    fig = closed_figure(0.95 * n + 1.5, 5.0)
    rnn_ax, attn_ax = fig.subplots(2, 1)
    grey, hot = "#b0b0b0", "#c0392b"

    def arrow(ax, start, end, color, width, rad=0.0):
        ax.annotate(
            "",
            xy=end,
            xytext=start,
            arrowprops={
                "arrowstyle": "-|>",
                "color": color,
                "lw": width,
                "shrinkA": 7,
                "shrinkB": 7,
                "connectionstyle": f"arc3,rad={rad}",
            },
        )

    # recurrent layer: x_t -> h_t and h_{t-1} -> h_t
    for t in range(n):
        on_path = t == source
        arrow(
            rnn_ax,
            (t, 0),
            (t, 1),
            hot if on_path else grey,
            2.2 if on_path else 1.0,
        )
        if t > 0:
            on_path = source < t <= target
            arrow(
                rnn_ax,
                (t - 1, 1),
                (t, 1),
                hot if on_path else grey,
                2.2 if on_path else 1.0,
            )
    rnn_steps = 1 + (target - source)
    rnn_ax.set_title(
        f"Recurrent layer: {rnn_steps} arrows from '{words[source]}' to the output at '{words[target]}'",
        fontsize=10,
    )

    # self-attention: every input feeds every output directly
    for i in range(n):
        for j in range(n):
            if (j, i) != (source, target):
                attn_ax.plot(
                    [j, i], [0, 1], color=grey, lw=0.4, alpha=0.6, zorder=1
                )
    arrow(attn_ax, (source, 0), (target, 1), hot, 2.2)
    attn_ax.set_title(
        f"Self-attention: 1 arrow from '{words[source]}' to the output at '{words[target]}'",
        fontsize=10,
    )

    for ax, out_label in (
        (rnn_ax, "output $h_t$"),
        (attn_ax, "output $y_t$"),
    ):
        ax.scatter(
            range(n),
            [0] * n,
            s=90,
            color="white",
            edgecolor="black",
            zorder=3,
        )
        ax.scatter(
            range(n),
            [1] * n,
            s=90,
            color="#dfe9f5",
            edgecolor="black",
            zorder=3,
        )
        ax.set_xticks(
            range(n), [f"{t}\n{w}" for t, w in enumerate(words)], fontsize=9
        )
        ax.set_yticks([0, 1], ["input $x_t$", out_label])
        ax.set(
            xlim=(-0.6, n - 0.4),
            ylim=(-0.35, 1.35),
            xlabel="position in the sentence (word index)",
        )
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    return fig


def influence_figure(
    curves: dict,
    title: str = "How strongly the output at the last position depends on each input",
):
    """Gradient norm of the last position's output with respect to each input, against distance.

    Args:
        curves: label -> 1-D tensor; entry ``k`` is the gradient norm for the input ``k`` positions
            before the last one (``k = 0`` is the last input itself).
        title: the figure title.
    """
    fig = closed_figure(7.5, 3.4)
    ax = fig.subplots()
    for (label, values), marker in zip(curves.items(), "os^v", strict=False):
        v = values.detach().cpu().numpy()
        ax.plot(range(len(v)), v, marker=marker, markersize=3, label=label)
    ax.set_yscale("log")
    ax.set(
        xlabel="distance from the last position (tokens)",
        ylabel="gradient norm ‖∂ output / ∂ input‖ (log scale)",
        title=title,
    )
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


_TABLE1_KINDS = [
    "Self-attention",
    "Recurrent",
    "Convolutional (dilated)",
    "Self-attention (restricted)",
]


def table1_chart(
    d_model: int = 512, k: int = 3, r: int = 16, n_max: int = 4096
) -> alt.VConcatChart:
    """Table 1 of the paper as curves over the sequence length n, computed in the browser.

    Top: operations per layer (n²·d, n·d², k·n·d², r·n·d; constants dropped). Bottom: maximum path
    length between two positions (1, n, ⌈log_k n⌉ for dilated convolutions, ⌈n / r⌉). Sliders set
    the width ``d``, the kernel width ``k`` and the neighbourhood ``r``; a rule marks ``n = d``,
    where self-attention and recurrence cost the same. No table is embedded: the grid of n values
    is generated by ``alt.sequence`` and every value by a Vega expression.

    Args:
        d_model: initial width d.
        k: initial kernel width.
        r: initial neighbourhood size of restricted self-attention.
        n_max: largest sequence length drawn (n runs over powers of 2^(1/4) from 2).
    """
    import math

    d = alt.param(
        name="d",
        value=d_model,
        bind=alt.binding_range(min=16, max=2048, step=16, name="d (width) "),
    )
    kp = alt.param(
        name="k",
        value=k,
        bind=alt.binding_range(
            min=2, max=16, step=1, name="k (kernel width) "
        ),
    )
    rp = alt.param(
        name="r",
        value=r,
        bind=alt.binding_range(
            min=2, max=256, step=2, name="r (neighbourhood) "
        ),
    )
    per_kind = 4 * int(math.log2(n_max))  # grid points per layer kind
    kinds = "[" + ", ".join(f"'{name}'" for name in _TABLE1_KINDS) + "]"
    ops = (
        "datum.kind_id == 0 ? datum.n * datum.n * d : datum.kind_id == 1 ? datum.n * d * d"
        " : datum.kind_id == 2 ? k * datum.n * d * d : r * datum.n * d"
    )
    path = (
        "datum.kind_id == 0 ? 1 : datum.kind_id == 1 ? datum.n"
        " : datum.kind_id == 2 ? max(1, ceil(log(datum.n) / log(k) - 1e-9)) : max(1, ceil(datum.n / r))"
    )
    base = (
        alt.Chart(alt.sequence(0, 4 * (per_kind + 1), as_="i"))
        .transform_calculate(
            kind_id=f"floor(datum.i / {per_kind + 1})",
            n=f"round(pow(2, 1 + (datum.i % {per_kind + 1}) / 4))",
        )
        .transform_filter(f"datum.n <= {n_max}")
        .transform_calculate(
            kind=f"{kinds}[datum.kind_id]", ops=ops, path=path
        )
    )
    color = alt.Color(
        "kind:N",
        title="layer type",
        scale=alt.Scale(domain=_TABLE1_KINDS),
        legend=alt.Legend(orient="bottom", columns=2, labelLimit=300),
    )
    x = alt.X(
        "n:Q",
        title="sequence length n (tokens, log scale)",
        scale=alt.Scale(type="log", domain=[2, n_max], nice=False),
    )
    tooltip = [
        alt.Tooltip("kind:N", title="layer"),
        alt.Tooltip("n:Q", title="n"),
        alt.Tooltip("ops:Q", title="operations", format=".3~s"),
        alt.Tooltip("path:Q", title="path length", format=",d"),
    ]
    cost = base.mark_line().encode(
        x=x,
        y=alt.Y(
            "ops:Q",
            title="operations per layer (multiply-adds, log scale)",
            scale=alt.Scale(type="log"),
        ),
        color=color,
        tooltip=tooltip,
    )
    crossover = (
        alt.Chart(alt.sequence(0, 1, as_="i"))
        .transform_calculate(n="d", label="'n = d'")
        .mark_rule(strokeDash=[4, 4], color="#555")
        .encode(x="n:Q", tooltip=alt.Tooltip("label:N", title=""))
    )
    hops = base.mark_line(interpolate="step-after").encode(
        x=x,
        y=alt.Y(
            "path:Q",
            title="maximum path length (steps, log scale)",
            scale=alt.Scale(type="log"),
        ),
        color=color,
        tooltip=tooltip,
    )
    top = (cost + crossover).properties(
        width=460, height=230, title="Work per layer"
    )
    bottom = hops.properties(
        width=460,
        height=200,
        title="Steps between the two farthest positions",
    )
    return alt.vconcat(top, bottom).add_params(d, kp, rp)


def timing_chart(frame) -> alt.LayerChart:
    """Measured forward time of each layer against the sequence length, log-log.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``n`` (tokens), ``layer`` (name) and ``ms``
            (median forward time in milliseconds).
    """
    x = alt.X(
        "n:Q",
        title="sequence length n (tokens, log scale)",
        scale=alt.Scale(type="log", nice=False),
    )
    y = alt.Y(
        "ms:Q",
        title="forward time (milliseconds, log scale)",
        scale=alt.Scale(type="log"),
    )
    color = alt.Color("layer:N", title="layer")
    tooltip = [
        alt.Tooltip("layer:N"),
        alt.Tooltip("n:Q", title="n"),
        alt.Tooltip("ms:Q", title="time (ms)", format=".3f"),
    ]
    base = alt.Chart(frame).encode(x=x, y=y, color=color, tooltip=tooltip)
    return (base.mark_line() + base.mark_point(filled=True)).properties(
        width=460,
        height=280,
        title="One layer's forward pass, measured on the machine that built this page",
    )


def embedding_norms_figure(
    norms: dict, pe_norms, words: list[str], d_model: int
):
    """Vector norms of token embeddings before and after the sqrt(d_model) scale, next to the encoding's.

    Args:
        norms: init label -> ``(before, after)``, two 1-D tensors of per-token norms.
        pe_norms: 1-D tensor, norm of the positional encoding at each position.
        words: the tokens, for the x axis.
        d_model: the width, for the titles.
    """
    import math

    fig = closed_figure(10.0, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    titles = (
        "token embedding as looked up",
        f"token embedding × √d_model (= {math.sqrt(d_model):.1f})",
    )
    positions = range(len(words))
    for side, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        ax.plot(
            positions,
            pe_norms.detach().cpu().numpy(),
            color="black",
            lw=2,
            label="positional encoding",
        )
        for (label, pair), marker in zip(
            norms.items(), "os^v", strict=False
        ):
            ax.plot(
                positions,
                pair[side].detach().cpu().numpy(),
                marker=marker,
                linestyle=":",
                label=label,
            )
        ax.set_yscale("log")
        ax.set_xticks(
            list(positions), words, rotation=45, ha="right", fontsize=9
        )
        ax.set(xlabel="token (position in the sentence)", title=title)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("vector norm ‖·‖₂ (log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncols=2,
        fontsize="small",
    )
    fig.suptitle(
        f"How big is each vector that gets added? (d_model = {d_model})",
        fontsize=11,
    )
    return fig


_INITS = [
    "N(0, 1): nn.Embedding default",
    "Xavier uniform: Annotated Transformer, aiayn",
    "N(0, 1/d_model): tensor2tensor",
]


def embedding_scale_chart(
    vocab_size: int = 37000, max_d_model: int = 4096
) -> alt.LayerChart:
    """Expected norm of a scaled token embedding divided by the positional encoding's, against d_model.

    A row of d independent entries of standard deviation σ has norm about σ·√d, and every row of the
    sinusoidal table has norm exactly √(d/2). After the √d scale the ratio is √(2d) for N(0, 1),
    2·√(d / (V + d)) for Xavier uniform (σ² = 2 / (V + d)) and √2 for N(0, 1/d). A slider sets the
    vocabulary size V, which only the Xavier curve depends on. Computed in the browser.

    Args:
        vocab_size: initial vocabulary size V.
        max_d_model: largest width drawn.
    """
    import math

    vocab = alt.param(
        name="V",
        value=vocab_size,
        bind=alt.binding_range(
            min=1000, max=100000, step=1000, name="vocabulary size V "
        ),
    )
    per_init = 4 * int(
        math.log2(max_d_model / 16)
    )  # grid points per init, from d_model = 16
    inits = "[" + ", ".join(f"'{name}'" for name in _INITS) + "]"
    ratio = (
        "datum.init_id == 0 ? sqrt(2 * datum.d_model) : datum.init_id == 1"
        " ? 2 * sqrt(datum.d_model / (V + datum.d_model)) : sqrt(2)"
    )
    curves = (
        alt.Chart(alt.sequence(0, 3 * (per_init + 1), as_="i"))
        .transform_calculate(
            init_id=f"floor(datum.i / {per_init + 1})",
            d_model=f"round(16 * pow(2, (datum.i % {per_init + 1}) / 4))",
        )
        .transform_calculate(init=f"{inits}[datum.init_id]", ratio=ratio)
        .mark_line()
        .encode(
            x=alt.X(
                "d_model:Q",
                title="d_model (width, log scale)",
                scale=alt.Scale(type="log", domain=[16, max_d_model]),
            ),
            y=alt.Y(
                "ratio:Q",
                title="‖embedding × √d_model‖ / ‖PE‖ (log scale)",
                scale=alt.Scale(type="log", domain=[0.01, 100]),
            ),
            color=alt.Color(
                "init:N",
                title="initialisation",
                scale=alt.Scale(domain=_INITS),
                legend=alt.Legend(
                    orient="bottom", direction="vertical", labelLimit=300
                ),
            ),
            tooltip=[
                alt.Tooltip("init:N", title="init"),
                alt.Tooltip("d_model:Q", title="d_model"),
                alt.Tooltip("ratio:Q", title="ratio", format=".3f"),
            ],
        )
    )
    equal = (
        alt.Chart(alt.sequence(0, 1, as_="i"))
        .transform_calculate(ratio="1", label="'equal size'")
        .mark_rule(strokeDash=[4, 4], color="#555")
        .encode(y="ratio:Q", tooltip=alt.Tooltip("label:N", title=""))
    )
    return (
        (curves + equal)
        .add_params(vocab)
        .properties(
            width=460,
            height=280,
            title="Scaled token embedding against the positional encoding",
        )
    )


_LANGUAGES = {
    "de": "German",
    "en": "English",
    "both": "both",
    "neither": "neither",
}
_LANGUAGE_COLOURS = {
    "German": "#d6604d",
    "English": "#2b7bba",
    "both": "#7f7f7f",
    "neither": "#bbbbbb",
}


def embedding_map_chart(
    record: dict, piece: str = "\u2581Hund", k: int = 6
) -> alt.HConcatChart:
    """The published table's common pieces on a 2-D map; a menu picks one and shows its nearest pieces.

    Every point is one piece of ``record`` (``aiayn.pages.embedding_map.load_embedding_map()``) at its
    PCA coordinates, coloured by the language it occurs in. The chosen piece and its ``k`` nearest
    pieces among the map's (by cosine in all d_model dimensions, not on the map) are drawn larger,
    joined and labelled, and listed on the right with their cosines. Chosen in the browser.

    Args:
        record: the embedding map's record.
        piece: the piece chosen first, e.g. ``"▁Hund"``.
        k: the neighbours drawn, at most the record's ``k``.
    """
    import pandas as pd

    points = record["pieces"]
    where = {p["piece"]: p for p in points}
    if not 1 <= k <= record["k"]:
        raise ValueError(f"k must be between 1 and {record['k']}, got {k}")
    if piece not in where:
        raise ValueError(
            f"piece {piece!r} is not on the map; it holds {len(points)} "
            f"pieces, e.g. {[p['piece'] for p in points[:5]]}"
        )
    dots = [
        {"piece": p["piece"], "x": p["x"], "y": p["y"],
         "language": _LANGUAGES[p["lang"]],
         "near": [name for name, _ in p["neighbours"][:k]],
         "cos": [cosine for _, cosine in p["neighbours"][:k]]}
        for p in points
    ]  # fmt: skip
    table = pd.DataFrame(dots)
    options = sorted(where, key=lambda name: (name.lower(), name))
    chosen = alt.param(
        name="piece",
        value=piece,
        bind=alt.binding_select(options=options, name="piece "),
    )
    x = alt.X("x:Q", title="first principal direction")
    y = alt.Y("y:Q", title="second principal direction")
    present = [name for lang, name in _LANGUAGES.items()
               if any(p["lang"] == lang for p in points)]  # fmt: skip
    palette = alt.Scale(
        domain=present,
        range=[_LANGUAGE_COLOURS[name] for name in present],
    )
    colour = alt.Color(
        "language:N",
        title="occurs mostly in",
        scale=palette,
        legend=alt.Legend(orient="bottom"),
    )
    base = alt.Chart(table)
    everyone = base.mark_circle(size=22, opacity=0.35).encode(
        x=x, y=y, color=colour, tooltip=[alt.Tooltip("piece:N")]
    )
    near = (  # the chosen piece's neighbours, one row each, where they are
        base.transform_filter("datum.piece == piece")
        .transform_flatten(["near", "cos"], as_=["neighbour", "cosine"])
        .transform_window(rank="row_number()")
        .transform_lookup(
            lookup="neighbour",
            from_=alt.LookupData(table, "piece", ["x", "y", "language"]),
            as_=["nx", "ny", "language"],
        )
    )
    spokes = near.mark_rule(color="#555", opacity=0.5).encode(
        x="x:Q", y="y:Q", x2="nx:Q", y2="ny:Q"
    )
    rings = near.mark_circle(size=90, stroke="black", opacity=1).encode(
        x="nx:Q", y="ny:Q", color=colour,
        tooltip=[alt.Tooltip("neighbour:N"), alt.Tooltip("cosine:Q")],
    )  # fmt: skip
    names = near.mark_text(align="left", dx=6, dy=-6, fontSize=11).encode(
        x="nx:Q", y="ny:Q", text="neighbour:N"
    )
    me = base.transform_filter("datum.piece == piece")
    centre = me.mark_point(size=220, shape="diamond", filled=True).encode(
        x=x, y=y, color=alt.value("black")
    )
    label = me.mark_text(
        align="left", dx=9, dy=10, fontSize=13, fontWeight="bold"
    ).encode(x=x, y=y, text="piece:N")
    map_ = (everyone + spokes + rings + names + centre + label).properties(
        width=390, height=360
    )
    listing = (
        near.transform_calculate(
            line="datum.rank + '. ' + datum.neighbour + '  ' "
            "+ format(datum.cosine, '.2f')"
        )
        .mark_text(align="left", fontSize=12)
        .encode(
            x=alt.value(0),
            y=alt.Y("rank:O", axis=None),
            text="line:N",
            color=colour,  # the map's scale and legend: one legend, shared
        )
        .properties(
            width=140,
            height=alt.Step(22),
            title=alt.TitleParams(
                alt.expr("'nearest to ' + piece"), subtitle="cosine"
            ),
        )
    )
    return (
        alt.hconcat(map_, listing)
        .add_params(chosen)
        .properties(
            title=alt.TitleParams(
                "The published model's embedding table, "
                f"{len(points)} common pieces",
                subtitle=(
                    f"PCA of the unit rows ({record['explained'][0]:.0%} and "
                    f"{record['explained'][1]:.0%} of the variance); "
                    f"{k} nearest by cosine in all dimensions"
                ),
            )
        )
    )


__all__ = [
    "path_length_figure",
    "influence_figure",
    "table1_chart",
    "timing_chart",
    "embedding_norms_figure",
    "embedding_scale_chart",
    "embedding_map_chart",
]
