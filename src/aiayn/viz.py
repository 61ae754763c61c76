"""Charts for the chapters: Altair for interactive figures, matplotlib for static ones.

Importing this module switches Altair to the book's renderer. A chart's output then carries both
the Vega-Lite spec (which Jupyter and Colab draw themselves) and an HTML snippet that draws it with
the website's own copies of Vega, Vega-Lite and vega-embed, loaded once per page from ``_static``.
On Colab, Altair's default renderer is kept.

Each chart helper returns a chart so that a chapter's plot cell is one line.
"""

from __future__ import annotations

import hashlib
import json
import sys

import altair as alt

__all__ = ["enable_book_renderer", "book_renderer"]

_EMBED_OPTIONS = {"actions": False, "renderer": "svg"}


def book_renderer(spec: dict, **metadata) -> dict:
    """Altair renderer: the Vega-Lite mimetype for notebooks plus HTML for the static website.

    The HTML has no ``<script src>``: the page provides ``vegaEmbed``. Element ids are derived from
    the spec, so re-running a notebook stores the same output.
    """
    spec_json = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    chart_id = "aiayn-chart-" + hashlib.sha1(spec_json.encode()).hexdigest()[:12]
    options = json.dumps(_EMBED_OPTIONS, sort_keys=True)
    html = (
        f'<div id="{chart_id}" class="aiayn-chart"></div>\n'
        "<script>\n"
        "(function () {\n"
        f"  var spec = {spec_json};\n"
        "  function draw() {\n"
        f'    vegaEmbed("#{chart_id}", spec, {options}).catch(function (e) {{ console.error(e); }});\n'
        "  }\n"
        '  if (window.vegaEmbed) { draw(); } else { window.addEventListener("load", draw); }\n'
        "})();\n"
        "</script>"
    )
    return {
        _vegalite_mime(): spec,
        "text/html": html,
        "text/plain": f"<{spec.get('$schema', 'Vega-Lite').rsplit('/', 1)[-1]} chart {chart_id}>",
    }


def _vegalite_mime() -> str:
    major = alt.SCHEMA_VERSION.lstrip("v").split(".")[0]
    return f"application/vnd.vegalite.v{major}+json"


def enable_book_renderer() -> None:
    """Use the book's renderer, except on Colab where Altair's default already works."""
    if "google.colab" in sys.modules:
        alt.renderers.enable("default")
        return
    if "aiayn" not in alt.renderers.names():
        alt.renderers.register("aiayn", book_renderer)
    alt.renderers.enable("aiayn")


enable_book_renderer()


# --- Chapter 5, attention: temperature bars and attention heatmaps -------------------------------


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
        raise ValueError(f"need one score per key, got {len(scores)} scores and {len(keys)} keys")
    if not 0 < t_min <= t_init <= t_max:
        raise ValueError(f"need 0 < t_min <= t_init <= t_max, got {t_min}, {t_init}, {t_max}")
    data = pd.DataFrame({"position": range(len(keys)), "key": keys, "score": [round(s, 4) for s in scores]})
    temperature = alt.param(
        name="temperature",
        value=t_init,
        bind=alt.binding_range(min=t_min, max=t_max, step=step, name="temperature "),
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
        .transform_calculate(e="exp((datum.score - datum.top) / temperature)")
        .transform_joinaggregate(total="sum(e)")
        .transform_calculate(weight="datum.e / datum.total")
    )
    y = alt.Y("weight:Q", title="attention weight softmax(score / T)", scale=alt.Scale(domain=[0, 1]))
    bars = base.mark_bar(color="#4c78a8").encode(
        x=x,
        y=y,
        tooltip=[
            alt.Tooltip("key:N", title="key"),
            alt.Tooltip("score:Q", title="score", format=".2f"),
            alt.Tooltip("weight:Q", title="weight", format=".3f"),
        ],
    )
    values = base.mark_text(dy=-6, fontSize=11).encode(x=x, y=y, text=alt.Text("weight:Q", format=".2f"))
    uniform = (
        alt.Chart(pd.DataFrame({"uniform": [1 / len(keys)]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(y="uniform:Q")
    )
    title = f'Weights of the query "{query}" as the temperature T changes' if query else "softmax(score / T)"
    return (
        alt.layer(uniform, bars, values)
        .add_params(temperature)
        .properties(title=title, width=max(240, 48 * len(keys)), height=220)
    )


def attention_heatmap(weights, query_tokens, key_tokens, ax=None, title: str | None = None, annotate: bool = True):
    """Draw one ``(L_q, L_k)`` matrix of attention weights as a heatmap, queries down, keys across.

    Args:
        weights: ``(L_q, L_k)`` tensor or array with values in [0, 1].
        query_tokens: L_q labels for the rows.
        key_tokens: L_k labels for the columns.
        ax: matplotlib Axes to draw on; a new figure is made when ``None``.
        title: the Axes title.
        annotate: write each weight in its cell (two decimals).

    Returns:
        The Axes; its image is ``ax.images[0]``.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights, dtype=float)
    if w.ndim != 2 or w.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"weights of shape {w.shape} do not match {len(query_tokens)} query and {len(key_tokens)} key tokens"
        )
    if ax is None:
        fig = plt.figure(figsize=(0.5 * len(key_tokens) + 1.5, 0.5 * len(query_tokens) + 1.2))
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
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7, color=color)
    return ax


def attention_heads_figure(weights, query_tokens, key_tokens, titles=None, ncols: int = 4, annotate: bool = True):
    """Small multiples: one attention heatmap per head, with one shared colour bar.

    Args:
        weights: ``(h, L_q, L_k)`` weights of one sequence, e.g. ``layer.attn[0]``.
        query_tokens: L_q labels for the rows.
        key_tokens: L_k labels for the columns.
        titles: h panel titles; default ``"head 0"``, ``"head 1"``, ...
        ncols: panels per row.
        annotate: write each weight in its cell.

    Returns:
        A matplotlib Figure (closed, so that a notebook shows it once, as the cell's value).
    """
    import matplotlib.pyplot as plt

    if weights.ndim != 3:
        raise ValueError(f"weights: expected shape (h, L_q, L_k), got {tuple(weights.shape)}")
    h = weights.shape[0]
    titles = [f"head {i}" for i in range(h)] if titles is None else list(titles)
    if len(titles) != h:
        raise ValueError(f"got {len(titles)} titles for {h} heads")
    ncols = min(ncols, h)
    nrows = -(-h // ncols)
    side = 0.42 * max(len(query_tokens), len(key_tokens)) + 1.3
    figsize = (side * ncols + 1.0, side * nrows + 0.3)
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, layout="constrained")
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.set_visible(False)
            continue
        attention_heatmap(weights[i], query_tokens, key_tokens, ax=ax, title=titles[i], annotate=annotate)
        if i % ncols:
            ax.set_ylabel("")
    fig.colorbar(axes.flat[0].images[0], ax=list(axes.flat), shrink=0.8, label="attention weight")
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

    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights, dtype=float)
    panels = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    if w.ndim != 3 or w.shape[0] != len(panels) or w.shape[1:] != panels[0].images[0].get_array().shape:
        raise ValueError(f"weights of shape {w.shape} do not fit a figure of {len(panels)} panels")
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

    missing = {"d_k", "scores", "largest weight", "gradient norm"} - set(table.columns)
    if missing:
        raise ValueError(f"table is missing columns {sorted(missing)}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.3))
    for label, part in table.groupby("scores", sort=False):
        left.plot(part["d_k"], part["largest weight"], marker="o", label=label)
        right.plot(part["d_k"], part["gradient norm"], marker="o", label=label)
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


__all__ += [
    "softmax_temperature_chart",
    "attention_heatmap",
    "attention_heads_figure",
    "update_attention_heads",
    "softmax_saturation_figure",
]


# --- Chapters 3 and 4, positional encoding and masking: tables, waves and masks -----------------


def _closed_figure(width: float, height: float):
    """A new matplotlib Figure, already closed: a notebook shows it once, as the cell's value."""
    import matplotlib.pyplot as plt  # also lets Jupyter's inline backend register its PNG formatter

    fig = plt.figure(figsize=(width, height), layout="constrained")
    plt.close(fig)
    return fig


def _as_matrix(tensor, name: str):
    """A 2-D tensor as a NumPy array, or a ``ValueError`` that names the shape that arrived."""
    if tensor.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D tensor, got shape {tuple(tensor.shape)}")
    return tensor.detach().cpu().float().numpy()


def pe_heatmap(pe, title: str = "Sinusoidal positional encoding"):
    """Heatmap of a ``(max_len, d_model)`` encoding table: positions down, dimensions across.

    Args:
        pe: ``(max_len, d_model)`` tensor, e.g. ``sinusoidal_encoding(100, 64)``.
        title: the figure title.

    Returns:
        a matplotlib Figure (closed, so that a notebook shows it once, as the cell's value).
    """
    table = _as_matrix(pe, "pe")
    fig = _closed_figure(7.5, 4.0)
    ax = fig.subplots()
    image = ax.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
    ax.set(xlabel="dimension (column of the table)", ylabel="position in the sequence", title=title)
    fig.colorbar(image, ax=ax, label="PE value")
    return fig


def pe_curves(pe, dims=(4, 5, 6, 7), title: str = "Dimensions of the encoding over positions"):
    """Line plot of a few columns of the table against the position.

    Args:
        pe: ``(max_len, d_model)`` tensor.
        dims: the columns to draw; even columns are sines, odd ones cosines.
        title: the figure title.

    Returns:
        a matplotlib Figure (closed).
    """
    table = _as_matrix(pe, "pe")
    if not all(0 <= dim < table.shape[1] for dim in dims):
        raise ValueError(f"dims must be columns of a table with {table.shape[1]} columns, got {tuple(dims)}")
    fig = _closed_figure(7.5, 3.2)
    ax = fig.subplots()
    for dim in dims:
        kind = "sin" if dim % 2 == 0 else "cos"
        ax.plot(table[:, dim], label=f"dimension {dim} ({kind})", linestyle="-" if dim % 2 == 0 else "--")
    ax.set(xlabel="position in the sequence", ylabel="PE value", title=title, ylim=(-1.1, 1.1))
    ax.legend(loc="upper right", fontsize="small", ncols=2)
    ax.grid(alpha=0.3)
    return fig


def pe_similarity(pe, title: str = "Dot product between the encodings of two positions"):
    """Heatmap of ``pe @ pe.T``: entry ``(p, q)`` is the dot product of positions ``p`` and ``q``.

    Args:
        pe: ``(max_len, d_model)`` tensor.
        title: the figure title.

    Returns:
        a matplotlib Figure (closed).
    """
    table = _as_matrix(pe, "pe")
    sim = table @ table.T  # (max_len, max_len)
    fig = _closed_figure(5.6, 4.6)
    ax = fig.subplots()
    image = ax.imshow(sim, cmap="viridis", interpolation="nearest")
    ax.set(xlabel="position q", ylabel="position p", title=title)
    fig.colorbar(image, ax=ax, label="PE[p] · PE[q]")
    return fig


def pe_wavelengths(curves: dict, title: str = "Wavelength of each pair of columns"):
    """Wavelength (in positions, log scale) of each pair of columns, one line per variant of the formula.

    Args:
        curves: label -> 1-D tensor of wavelengths, one per pair ``i`` (columns ``2i`` and ``2i + 1``).
        title: the figure title.

    Returns:
        a matplotlib Figure (closed).
    """
    fig = _closed_figure(7.5, 3.2)
    ax = fig.subplots()
    for (label, wavelengths), marker in zip(curves.items(), "os^v", strict=False):
        values = wavelengths.detach().cpu().numpy()
        ax.plot(range(len(values)), values, marker=marker, markersize=3, label=label)
    ax.set_yscale("log")
    ax.set(xlabel="pair i (columns 2i and 2i + 1)", ylabel="wavelength (positions, log scale)", title=title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def positional_encoding_chart(max_positions: int = 60, max_d_model: int = 112) -> alt.VConcatChart:
    """Interactive sinusoidal encoding, computed in the browser from three sliders.

    Sliders: ``d_model`` (width of the table), ``positions shown`` and ``dimension`` (the column
    drawn as a curve underneath and outlined on the heatmap). Every value is recomputed by Vega
    expressions (``sin``, ``cos``, ``pow``) from a generated grid: no table is embedded in the page.
    The defaults keep the heatmap under 7 000 cells, which an SVG redraws quickly enough.

    Args:
        max_positions: largest value of the ``positions shown`` slider (at least 10).
        max_d_model: largest value of the ``d_model`` slider (a multiple of 8).

    Returns:
        an Altair chart: the heatmap above, the chosen column as a curve below.
    """
    if max_positions < 10 or max_d_model < 8 or max_d_model % 8:
        raise ValueError(
            f"need max_positions >= 10 and max_d_model a positive multiple of 8, got {max_positions} and {max_d_model}"
        )
    d_model = alt.param(
        name="d_model", value=64, bind=alt.binding_range(min=8, max=max_d_model, step=8, name="d_model ")
    )
    positions = alt.param(
        name="positions",
        value=min(40, max_positions),
        bind=alt.binding_range(min=10, max=max_positions, step=5, name="positions shown "),
    )
    dimension = alt.param(
        name="dimension", value=6, bind=alt.binding_range(min=0, max=max_d_model - 1, step=1, name="dimension ")
    )
    column = "min(dimension, d_model - 1)"  # the slider may point past a narrow table
    pe_value = "(datum.dim % 2 == 0 ? sin(datum.angle) : cos(datum.angle))"

    grid = (
        alt.Chart(alt.sequence(0, max_positions * max_d_model, as_="n"))
        .transform_calculate(pos=f"floor(datum.n / {max_d_model})", dim=f"datum.n % {max_d_model}")
        .transform_filter("datum.pos < positions && datum.dim < d_model")
        .transform_calculate(angle="datum.pos / pow(10000, (datum.dim - datum.dim % 2) / d_model)")
        .transform_calculate(value=pe_value, dim_end="datum.dim + 1", pos_end="datum.pos + 1")
    )
    heatmap = grid.mark_rect().encode(
        x=alt.X("dim:Q", title="dimension (column of the table)", scale=alt.Scale(nice=False, zero=True)),
        x2="dim_end:Q",
        y=alt.Y("pos:Q", title="position in the sequence", scale=alt.Scale(reverse=True, nice=False, zero=True)),
        y2="pos_end:Q",
        color=alt.Color("value:Q", title="PE value", scale=alt.Scale(scheme="redblue", domain=[-1, 1], reverse=True)),
        tooltip=[
            alt.Tooltip("pos:Q", title="position"),
            alt.Tooltip("dim:Q", title="dimension"),
            alt.Tooltip("value:Q", title="PE value", format=".3f"),
        ],
    )
    outline = (
        alt.Chart(alt.sequence(0, 1, as_="n"))
        .transform_calculate(dim=column, dim_end=f"{column} + 1", top="0", bottom="positions")
        .mark_rect(fill=None, stroke="black", strokeWidth=2)
        .encode(
            x=alt.X("dim:Q", title="dimension (column of the table)"),
            x2="dim_end:Q",
            y=alt.Y("top:Q", title="position in the sequence"),
            y2="bottom:Q",
        )
    )
    top = (heatmap + outline).properties(width=440, height=240, title="The table PE[position, dimension]")

    steps_per_position = 4  # the wave between integer positions, to show what the table samples
    wave = (
        alt.Chart(alt.sequence(0, max_positions * steps_per_position + 1, as_="n"))
        .transform_calculate(pos=f"datum.n / {steps_per_position}", dim=column)
        .transform_filter("datum.pos <= positions - 1")
        .transform_calculate(angle="datum.pos / pow(10000, (datum.dim - datum.dim % 2) / d_model)")
        .transform_calculate(value=pe_value)
    )
    x_pos = alt.X("pos:Q", title="position in the sequence", scale=alt.Scale(nice=False, zero=True))
    y_val = alt.Y("value:Q", title="PE value", scale=alt.Scale(domain=[-1.05, 1.05]))
    line = wave.mark_line(color="#888", strokeWidth=1).encode(x=x_pos, y=y_val)
    dots = (
        wave.transform_filter("datum.pos == floor(datum.pos)")
        .mark_circle(size=28, color="#c0392b")
        .encode(
            x=x_pos,
            y=y_val,
            tooltip=[alt.Tooltip("pos:Q", title="position"), alt.Tooltip("value:Q", title="PE value", format=".3f")],
        )
    )
    title = (
        f"'Column ' + {column} + ' (' + ({column} % 2 == 0 ? 'sin' : 'cos') + '), wavelength 2π·10000^('"
        f" + ({column} - {column} % 2) + '/' + d_model + ') = '"
        f" + format(2 * PI * pow(10000, ({column} - {column} % 2) / d_model), ',.1f') + ' positions'"
    )
    bottom = (line + dots).properties(width=440, height=160, title=alt.TitleParams(text=alt.expr(title)))
    return alt.vconcat(top, bottom).add_params(d_model, positions, dimension)


def mask_heatmaps(masks: dict, tokens: list[str], keys: list[str] | None = None):
    """Boolean masks side by side: query rows, key columns, a filled cell where the query may attend.

    Args:
        masks: title -> ``(L_q, L_k)`` boolean tensor (``True`` = may attend).
        tokens: labels of the query rows (and of the key columns unless ``keys`` is given).
        keys: labels of the key columns.

    Returns:
        a matplotlib Figure (closed).
    """
    import numpy as np
    from matplotlib.colors import ListedColormap

    keys = tokens if keys is None else keys
    for title, mask in masks.items():
        if tuple(mask.shape) != (len(tokens), len(keys)):
            raise ValueError(
                f"mask {title!r} of shape {tuple(mask.shape)} does not match {len(tokens)} queries and {len(keys)} keys"
            )
    fig = _closed_figure(2.7 * len(masks) + 0.3, 3.0)
    axes = fig.subplots(1, len(masks), squeeze=False)[0]
    cmap = ListedColormap(["#f2f2f2", "#2b7bba"])
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        m = mask.detach().cpu().bool().numpy()
        ax.imshow(m, cmap=cmap, vmin=0, vmax=1)
        for (q, k), allowed in np.ndenumerate(m):
            color = "white" if allowed else "#999999"
            ax.text(k, q, "T" if allowed else "F", ha="center", va="center", fontsize=9, color=color)
        ax.set_xticks(range(len(keys)), keys, rotation=90 if max(map(len, keys)) > 5 else 0)
        ax.set_yticks(range(len(tokens)), tokens)
        ax.set_xticks([x - 0.5 for x in range(1, len(keys))], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, len(tokens))], minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ax.set(xlabel="key (attended to)", ylabel="query (attending)", title=title)
    fig.suptitle("True (blue) = the query may attend to the key", fontsize=10)
    return fig


def mask_chart(max_len: int = 12) -> alt.LayerChart:
    """Interactive mask for a right-padded sequence, computed in the browser.

    Sliders: ``sequence length`` and ``padding tokens``; radio buttons pick the padding mask (the
    encoder's), the look-ahead mask, or both combined (the decoder's). Each cell is a
    (query, key) pair colored by whether the query may attend to the key, and if not, why. With as
    many padding tokens as positions, no key is left: every row is empty.

    Args:
        max_len: the longest sequence the slider offers (at most 26: keys are labelled A, B, C, ...).

    Returns:
        an Altair chart of ``max_len`` × ``max_len`` cells at most, with its three controls.
    """
    if not 2 <= max_len <= 26:
        raise ValueError(f"max_len must be between 2 and 26, got {max_len}")
    seq_len = alt.param(
        name="seq_len",
        value=min(5, max_len),
        bind=alt.binding_range(min=2, max=max_len, step=1, name="sequence length "),
    )
    n_pad = alt.param(
        name="n_pad", value=1, bind=alt.binding_range(min=0, max=max_len - 1, step=1, name="padding tokens ")
    )
    kinds = ["padding (encoder)", "look-ahead", "padding & look-ahead (decoder)"]
    kind = alt.param(name="kind", value=kinds[2], bind=alt.binding_radio(options=kinds, name="mask "))
    letters = "[" + ", ".join(f"'{chr(ord('A') + i)}'" for i in range(max_len)) + "]"
    n_real = "max(seq_len - n_pad, 0)"  # all padding is allowed: every row is then empty
    label = f"datum.value >= {n_real} ? '<pad>' : {letters}[datum.value]"
    statuses = ["may attend (True)", "blocked: future key (False)", "blocked: padding key (False)"]
    chart = (
        alt.Chart(alt.sequence(0, max_len * max_len, as_="n"))
        .transform_calculate(query=f"floor(datum.n / {max_len})", key=f"datum.n % {max_len}")
        .transform_filter("datum.query < seq_len && datum.key < seq_len")
        .transform_calculate(
            is_pad=f"kind != '{kinds[1]}' && datum.key >= {n_real}",
            is_future=f"kind != '{kinds[0]}' && datum.key > datum.query",
        )
        .transform_calculate(
            status=f"datum.is_pad ? '{statuses[2]}' : datum.is_future ? '{statuses[1]}' : '{statuses[0]}'",
            value="datum.is_pad || datum.is_future ? 'False' : 'True'",
            ink="datum.is_pad || datum.is_future ? '#555555' : 'white'",
        )
    )
    cells = chart.mark_rect(stroke="white", strokeWidth=1).encode(
        x=alt.X("key:O", title="key (attended to)", axis=alt.Axis(labelExpr=label, labelAngle=0, orient="top")),
        y=alt.Y("query:O", title="query (attending)", axis=alt.Axis(labelExpr=label)),
        color=alt.Color(
            "status:N",
            title="mask value",
            scale=alt.Scale(domain=statuses, range=["#2b7bba", "#f4a582", "#d9d9d9"]),
            legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=300),
        ),
        tooltip=[
            alt.Tooltip("query:O", title="query position"),
            alt.Tooltip("key:O", title="key position"),
            alt.Tooltip("status:N", title="mask"),
        ],
    )
    text = chart.mark_text(fontSize=10).encode(
        x="key:O",
        y="query:O",
        text="value:N",
        color=alt.Color("ink:N", scale=None),
    )
    return (
        (cells + text)
        .add_params(seq_len, n_pad, kind)
        .properties(width=alt.Step(36), height=alt.Step(28), title="Which keys each query may attend to")
    )


__all__ += [
    "pe_heatmap",
    "pe_curves",
    "pe_similarity",
    "pe_wavelengths",
    "positional_encoding_chart",
    "mask_heatmaps",
    "mask_chart",
]


# --- Chapters 1 and 2, why attention and embeddings: paths, costs, timings, magnitudes ----------


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
        raise ValueError(f"need 0 <= source < target < {len(words)}, got source={source}, target={target}")
    n = len(words)
    fig = _closed_figure(0.95 * n + 1.5, 5.0)
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
        arrow(rnn_ax, (t, 0), (t, 1), hot if on_path else grey, 2.2 if on_path else 1.0)
        if t > 0:
            on_path = source < t <= target
            arrow(rnn_ax, (t - 1, 1), (t, 1), hot if on_path else grey, 2.2 if on_path else 1.0)
    rnn_steps = 1 + (target - source)
    rnn_ax.set_title(
        f"Recurrent layer: {rnn_steps} arrows from '{words[source]}' to the output at '{words[target]}'", fontsize=10
    )

    # self-attention: every input feeds every output directly
    for i in range(n):
        for j in range(n):
            if (j, i) != (source, target):
                attn_ax.plot([j, i], [0, 1], color=grey, lw=0.4, alpha=0.6, zorder=1)
    arrow(attn_ax, (source, 0), (target, 1), hot, 2.2)
    attn_ax.set_title(f"Self-attention: 1 arrow from '{words[source]}' to the output at '{words[target]}'", fontsize=10)

    for ax, out_label in ((rnn_ax, "output $h_t$"), (attn_ax, "output $y_t$")):
        ax.scatter(range(n), [0] * n, s=90, color="white", edgecolor="black", zorder=3)
        ax.scatter(range(n), [1] * n, s=90, color="#dfe9f5", edgecolor="black", zorder=3)
        ax.set_xticks(range(n), [f"{t}\n{w}" for t, w in enumerate(words)], fontsize=9)
        ax.set_yticks([0, 1], ["input $x_t$", out_label])
        ax.set(xlim=(-0.6, n - 0.4), ylim=(-0.35, 1.35), xlabel="position in the sentence (word index)")
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
    return fig


def influence_figure(curves: dict, title: str = "How strongly the output at the last position depends on each input"):
    """Gradient norm of the last position's output with respect to each input, against distance.

    Args:
        curves: label -> 1-D tensor; entry ``k`` is the gradient norm for the input ``k`` positions
            before the last one (``k = 0`` is the last input itself).
        title: the figure title.
    """
    fig = _closed_figure(7.5, 3.4)
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


_TABLE1_KINDS = ["Self-attention", "Recurrent", "Convolutional (dilated)", "Self-attention (restricted)"]


def table1_chart(d_model: int = 512, k: int = 3, r: int = 16, n_max: int = 4096) -> alt.VConcatChart:
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

    d = alt.param(name="d", value=d_model, bind=alt.binding_range(min=16, max=2048, step=16, name="d (width) "))
    kp = alt.param(name="k", value=k, bind=alt.binding_range(min=2, max=16, step=1, name="k (kernel width) "))
    rp = alt.param(name="r", value=r, bind=alt.binding_range(min=2, max=256, step=2, name="r (neighbourhood) "))
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
            kind_id=f"floor(datum.i / {per_kind + 1})", n=f"round(pow(2, 1 + (datum.i % {per_kind + 1}) / 4))"
        )
        .transform_filter(f"datum.n <= {n_max}")
        .transform_calculate(kind=f"{kinds}[datum.kind_id]", ops=ops, path=path)
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
        y=alt.Y("ops:Q", title="operations per layer (multiply-adds, log scale)", scale=alt.Scale(type="log")),
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
        y=alt.Y("path:Q", title="maximum path length (steps, log scale)", scale=alt.Scale(type="log")),
        color=color,
        tooltip=tooltip,
    )
    top = (cost + crossover).properties(width=460, height=230, title="Work per layer")
    bottom = hops.properties(width=460, height=200, title="Steps between the two farthest positions")
    return alt.vconcat(top, bottom).add_params(d, kp, rp)


def timing_chart(frame) -> alt.LayerChart:
    """Measured forward time of each layer against the sequence length, log-log.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``n`` (tokens), ``layer`` (name) and ``ms``
            (median forward time in milliseconds).
    """
    x = alt.X("n:Q", title="sequence length n (tokens, log scale)", scale=alt.Scale(type="log", nice=False))
    y = alt.Y("ms:Q", title="forward time (milliseconds, log scale)", scale=alt.Scale(type="log"))
    color = alt.Color("layer:N", title="layer")
    tooltip = [
        alt.Tooltip("layer:N"),
        alt.Tooltip("n:Q", title="n"),
        alt.Tooltip("ms:Q", title="time (ms)", format=".3f"),
    ]
    base = alt.Chart(frame).encode(x=x, y=y, color=color, tooltip=tooltip)
    return (base.mark_line() + base.mark_point(filled=True)).properties(
        width=460, height=280, title="One layer's forward pass, measured on the machine that built this page"
    )


def embedding_norms_figure(norms: dict, pe_norms, words: list[str], d_model: int):
    """Vector norms of token embeddings before and after the sqrt(d_model) scale, next to the encoding's.

    Args:
        norms: init label -> ``(before, after)``, two 1-D tensors of per-token norms.
        pe_norms: 1-D tensor, norm of the positional encoding at each position.
        words: the tokens, for the x axis.
        d_model: the width, for the titles.
    """
    import math

    fig = _closed_figure(10.0, 3.8)
    axes = fig.subplots(1, 2, sharey=True)
    titles = ("token embedding as looked up", f"token embedding × √d_model (= {math.sqrt(d_model):.1f})")
    positions = range(len(words))
    for side, (ax, title) in enumerate(zip(axes, titles, strict=True)):
        ax.plot(positions, pe_norms.detach().cpu().numpy(), color="black", lw=2, label="positional encoding")
        for (label, pair), marker in zip(norms.items(), "os^v", strict=False):
            ax.plot(positions, pair[side].detach().cpu().numpy(), marker=marker, linestyle=":", label=label)
        ax.set_yscale("log")
        ax.set_xticks(list(positions), words, rotation=45, ha="right", fontsize=9)
        ax.set(xlabel="token (position in the sentence)", title=title)
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("vector norm ‖·‖₂ (log scale)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=2, fontsize="small")
    fig.suptitle(f"How big is each vector that gets added? (d_model = {d_model})", fontsize=11)
    return fig


_INITS = [
    "N(0, 1): nn.Embedding default",
    "Xavier uniform: Annotated Transformer, aiayn",
    "N(0, 1/d_model): tensor2tensor",
]


def embedding_scale_chart(vocab_size: int = 37000, max_d_model: int = 4096) -> alt.LayerChart:
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
        name="V", value=vocab_size, bind=alt.binding_range(min=1000, max=100000, step=1000, name="vocabulary size V ")
    )
    per_init = 4 * int(math.log2(max_d_model / 16))  # grid points per init, from d_model = 16
    inits = "[" + ", ".join(f"'{name}'" for name in _INITS) + "]"
    ratio = (
        "datum.init_id == 0 ? sqrt(2 * datum.d_model) : datum.init_id == 1"
        " ? 2 * sqrt(datum.d_model / (V + datum.d_model)) : sqrt(2)"
    )
    curves = (
        alt.Chart(alt.sequence(0, 3 * (per_init + 1), as_="i"))
        .transform_calculate(
            init_id=f"floor(datum.i / {per_init + 1})", d_model=f"round(16 * pow(2, (datum.i % {per_init + 1}) / 4))"
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
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=300),
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
        .properties(width=460, height=280, title="Scaled token embedding against the positional encoding")
    )


__all__ += [
    "path_length_figure",
    "influence_figure",
    "table1_chart",
    "timing_chart",
    "embedding_norms_figure",
    "embedding_scale_chart",
]


# --- Chapters 6 and 7, Add & Norm and the full model: normalisation groups, per-layer curves, causality ---


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
        raise ValueError(f"need at least a 2 x 2 grid, got batch={batch}, features={features}")
    fig = _closed_figure(10.0, 3.6)
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
        ax.imshow(groups % 10, cmap="tab10", vmin=0, vmax=9, alpha=0.55, interpolation="nearest")
        ax.set_xticks(np.arange(-0.5, features), minor=True)
        ax.set_yticks(np.arange(-0.5, batch), minor=True)
        ax.grid(which="minor", color="white", linewidth=2)
        ax.tick_params(which="both", length=0)
        ax.set_xticks(range(features), [str(j) for j in range(features)], fontsize=8)
        ax.set_yticks(range(batch), [str(i) for i in range(batch)], fontsize=8)
        ax.set(xlabel="feature j (the d_model axis)", ylabel="example i (the batch axis)")
        ax.set_title(title, fontsize=10)
    axes[0].annotate(
        "", xy=(0, batch - 0.6), xytext=(0, -0.4), arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.5}
    )
    axes[1].annotate(
        "", xy=(features - 0.6, 0), xytext=(-0.4, 0), arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.5}
    )
    return fig


def per_layer_figure(
    panels: dict, logy: bool = True, xlabel: str = "layer (1 = bottom, nearest the input)", stacked: bool = False
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
        raise ValueError("panels is empty: give at least one {title: (ylabel, {label: values})}")
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    if stacked:
        fig = _closed_figure(6.5, 3.0 * len(panels))
        axes = fig.subplots(len(panels), 1, squeeze=False, sharex=True)[:, 0]
    else:
        fig = _closed_figure(5.0 * len(panels) + 0.5, 3.6)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (title, (ylabel, lines)) in zip(axes, panels.items(), strict=True):
        drawn = []
        for (label, values), marker in zip(lines.items(), "os^vD", strict=False):
            values = [float(v) for v in values]
            drawn += values
            ax.plot(range(1, len(values) + 1), values, marker=marker, markersize=4, label=label)
        if logy:
            ax.set_yscale("log")
            if min(drawn) > 0 and max(drawn) / min(drawn) < 100:  # less than two decades: plain numbers read better
                plain = FuncFormatter(lambda v, _: f"{v:g}")
                ax.yaxis.set_major_formatter(plain)
                ax.yaxis.set_minor_formatter(plain)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel="" if stacked and ax is not axes[-1] else xlabel, ylabel=ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    return fig


def future_change_figure(changes: dict, changed: int, title: str | None = None):
    """How much the logits at each target position move when the token at position ``changed`` is replaced.

    Args:
        changes: label -> 1-D sequence, the largest absolute change of the logits at each position.
        changed: the position whose input token was replaced (a dashed line marks where it starts).
        title: the figure title.

    Returns:
        A matplotlib Figure (closed) with grouped bars, one group per target position.
    """
    import numpy as np

    fig = _closed_figure(7.5, 3.4)
    ax = fig.subplots()
    width = 0.8 / max(len(changes), 1)
    for k, (label, values) in enumerate(changes.items()):
        values = np.asarray([float(v) for v in values])
        ax.bar(np.arange(len(values)) + (k - (len(changes) - 1) / 2) * width, values, width=width, label=label)
    ax.axvline(changed - 0.5, color="black", linestyle="--", linewidth=1)  # earlier positions to its left
    ax.text(changed - 0.45, ax.get_ylim()[1] * 0.92, f"token changed at position {changed} →", fontsize=9)
    ax.set_xticks(range(max(len(v) for v in changes.values())))
    ax.set(xlabel="target position i", ylabel="max |change of the logits at i|")
    ax.set_title(title or "Which positions notice a change at a later position?", fontsize=10)
    ax.legend(fontsize="small", loc="upper left")
    return fig


def param_count_chart(frame) -> alt.LayerChart:
    """How far our parameter counts are from the paper's Table 3: one point per row, the gap against the size.

    Args:
        frame: a ``pandas.DataFrame`` with columns ``row`` (name), ``paper`` and ``ours`` (millions of
            parameters) and ``change`` (what the row changes); rows without a paper count are skipped.
    """
    data = frame.dropna(subset=["paper"])[["row", "change", "paper", "ours"]]
    data = data.assign(gap=(data.ours - data.paper).round(2), ours=data.ours.round(2))
    domain = [float(data.paper.min()) * 0.8, float(data.paper.max()) * 1.25]
    scale = alt.Scale(type="log", domain=domain)
    x = alt.X("paper:Q", title="paper's count, Table 3 (millions, log scale)", scale=scale)
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=70)
        .encode(
            x=x,
            y=alt.Y("gap:Q", title="ours − paper (millions of parameters)"),
            color=alt.condition("datum.gap < 0", alt.value("#2b7bba"), alt.value("#d6604d")),
            tooltip=[
                alt.Tooltip("row:N"),
                alt.Tooltip("change:N", title="setting"),
                alt.Tooltip("paper:Q", title="paper (M)"),
                alt.Tooltip("ours:Q", title="ours (M)"),
                alt.Tooltip("gap:Q", title="ours − paper (M)"),
            ],
        )
    )
    labels = points.mark_text(align="left", dx=7, fontSize=10, color="black").encode(text="row:N")
    zero = alt.Chart(alt.sequence(0, 1, as_="i")).mark_rule(strokeDash=[4, 4], color="#555").encode(y=alt.datum(0))
    return (zero + points + labels).properties(
        width=520, height=300, title="Our parameter counts minus the paper's (dashed: equal)"
    )


__all__ += ["norm_groups_figure", "per_layer_figure", "future_change_figure", "param_count_chart"]


# --- Chapter 8, training: the Noam schedule, training curves, sampling filters ---------------------


def noam_schedule_chart(
    max_step: int = 20000,
    n_points: int = 200,
    d_model: int = 512,
    warmup: int = 4000,
    d_model_range: tuple[int, int, int] = (256, 1024, 64),
    warmup_range: tuple[int, int, int] = (500, 8000, 100),
) -> alt.LayerChart:
    """The learning rate of section 5.3 against the step, with sliders for d_model and warmup.

    Three curves are computed in the browser for steps 1, s, 2s, ..., ``max_step`` (s = max_step / n_points):
    the two terms of the minimum, d_model^-0.5 · step^-0.5 (the decay) and d_model^-0.5 · step · warmup^-1.5
    (the ramp), dashed, and the schedule itself, lrate = min of the two, drawn thick. A dot and a dashed
    rule mark the peak, at step = warmup with the value d_model^-0.5 · warmup^-0.5. The y axis is fixed
    so that moving d_model moves the curve; the dashed terms leave it and are clipped.

    Args:
        max_step: last step drawn.
        n_points: number of intervals on the step axis; choose the warmup slider's step as a multiple of
            max_step / n_points so that every warmup value is a sampled step and the peak is drawn exactly.
        d_model, warmup: initial slider values (the paper's base model: 512 and 4000).
        d_model_range, warmup_range: (min, max, step) of the two sliders.
    """
    lo_d, hi_d, _ = d_model_range
    lo_w, hi_w, _ = warmup_range
    if not (0 < lo_d <= d_model <= hi_d and 0 < lo_w <= warmup <= hi_w < max_step):
        raise ValueError(
            f"need min <= value <= max for both sliders and warmup below max_step={max_step}, got d_model "
            f"{d_model} in {d_model_range} and warmup {warmup} in {warmup_range}"
        )
    every = max_step / n_points
    d_param = alt.param(
        name="d_model",
        value=d_model,
        bind=alt.binding_range(min=lo_d, max=hi_d, step=d_model_range[2], name="d_model "),
    )
    w_param = alt.param(
        name="warmup",
        value=warmup,
        bind=alt.binding_range(min=lo_w, max=hi_w, step=warmup_range[2], name="warmup (steps) "),
    )
    top = lo_d**-0.5 * lo_w**-0.5  # the highest peak any slider setting can reach
    y_max = float(f"{top * 1.05:.1e}")
    names = ["lrate = min of the two", "d_model^-0.5 · step^-0.5", "d_model^-0.5 · step · warmup^-1.5"]
    x = alt.X("step:Q", title="training step", scale=alt.Scale(domain=[0, max_step], nice=False))
    y_scale = alt.Scale(domain=[0, y_max], nice=False)
    curves = (
        alt.Chart(alt.sequence(0, n_points + 1, as_="i"))
        .transform_calculate(step=f"max(1, datum.i * {every})")
        .transform_calculate(
            decay="pow(d_model, -0.5) * pow(datum.step, -0.5)",
            ramp="pow(d_model, -0.5) * datum.step * pow(warmup, -1.5)",
        )
        .transform_calculate(lrate="min(datum.decay, datum.ramp)")
        .transform_fold(["decay", "ramp", "lrate"], as_=["term", "rate"])  # the schedule drawn last, on top
        .transform_calculate(
            curve=f"datum.term == 'lrate' ? '{names[0]}' : datum.term == 'decay' ? '{names[1]}' : '{names[2]}'"
        )
        .mark_line(clip=True)
        .encode(
            x=x,
            y=alt.Y("rate:Q", title="learning rate", scale=y_scale, axis=alt.Axis(format=".1e")),
            color=alt.Color(
                "curve:N",
                title=None,
                scale=alt.Scale(domain=names, range=["#1f5fa8", "#999999", "#d08c2d"]),
                legend=alt.Legend(orient="bottom", direction="vertical", labelLimit=360),
            ),
            strokeDash=alt.condition("datum.term == 'lrate'", alt.value([1, 0]), alt.value([5, 4])),
            strokeWidth=alt.condition("datum.term == 'lrate'", alt.value(3), alt.value(1.5)),
            tooltip=[
                alt.Tooltip("curve:N", title="curve"),
                alt.Tooltip("step:Q", title="step", format=","),
                alt.Tooltip("rate:Q", title="rate", format=".3e"),
            ],
        )
    )
    peak_data = (
        alt.Chart(alt.sequence(0, 1, as_="i"))
        .transform_calculate(step="warmup", rate="pow(d_model, -0.5) * pow(warmup, -0.5)")
        .transform_calculate(label="'peak at step ' + datum.step + ': ' + format(datum.rate, '.2e')")
    )
    rule = peak_data.mark_rule(strokeDash=[2, 3], color="#1f5fa8").encode(x="step:Q")
    dot = peak_data.mark_point(filled=True, size=70, color="#1f5fa8").encode(
        x=x, y=alt.Y("rate:Q", scale=y_scale), tooltip=alt.Tooltip("label:N", title="")
    )
    label = peak_data.mark_text(align="left", dx=8, dy=-8, fontSize=11).encode(
        x=x, y=alt.Y("rate:Q", scale=y_scale), text="label:N"
    )
    return (
        alt.layer(curves, rule, dot, label)
        .add_params(d_param, w_param)
        .properties(width=480, height=260, title="The learning rate of section 5.3 (computed in your browser)")
    )


def training_curves_figure(history, metric: str | None = None, metric_label: str | None = None, title: str = ""):
    """The learning rate, the training loss and (optionally) an evaluation metric against the step.

    Args:
        history: an ``aiayn.training.History`` (``step``, ``lr``, ``loss`` and ``evals``).
        metric: a key of the dicts in ``history.evals`` to draw in a third panel (e.g. ``"exact match"``).
        metric_label: the y-axis title of that panel; default: ``metric``.
        title: the figure title.

    Returns:
        A matplotlib Figure (closed), one panel per quantity, sharing the step axis.
    """
    if not history.step:
        raise ValueError("history is empty: train for at least one step first")
    if metric is not None and not any(metric in e for e in history.evals):
        raise ValueError(f"no evaluation in history.evals has the metric {metric!r}")
    rows = 2 if metric is None else 3
    fig = _closed_figure(7.0, 1.9 * rows + 0.5)
    axes = fig.subplots(rows, 1, sharex=True)
    axes[0].plot(history.step, history.lr, color="#1f5fa8")
    axes[0].set_ylabel("learning rate")
    axes[0].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    axes[1].plot(history.step, history.loss, color="#c0392b", linewidth=1)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("training loss\n(nats/token, log)")
    if metric is not None:
        evals = [e for e in history.evals if metric in e]
        axes[2].plot([e["step"] for e in evals], [e[metric] for e in evals], marker="o", markersize=3, color="#2e8b57")
        axes[2].set_ylabel(metric_label or metric)
        axes[2].set_ylim(-0.03, 1.03)
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
    axes[-1].set_xlabel("optimizer step")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def sampling_filter_chart(
    logits,
    labels,
    title: str = "",
    t_min: float = 0.2,
    t_max: float = 3.0,
    t_init: float = 1.0,
    top_p_init: float = 0.9,
) -> alt.LayerChart:
    """Bars of the distribution a sampler draws from, after temperature, top-k and top-p, with three sliders.

    Computed in the browser in the order of ``aiayn.decoding.sample``: the logits are divided by the
    temperature T and turned into probabilities p (grey bars); only the k most probable tokens are kept
    (and any tied with the k-th, as ``torch.topk``'s threshold keeps them);
    of those, renormalised, only the smallest set whose probability reaches top_p (the tokens before a
    token must not already reach it); what is left is renormalised (blue bars).

    Args:
        logits: ``(V,)`` next-token logits (a sequence or a 1-D tensor).
        labels: V token names, in vocabulary order.
        title: the chart title.
        t_min, t_max, t_init: range and start value of the temperature slider.
        top_p_init: start value of the top-p slider (0.9, a common nucleus setting; 1 keeps every token).
            Top-k starts at V (no limit). The sliders come in the order temperature, top-p, top-k.

    Returns:
        A layered Altair chart that owns the ``temperature``, ``top_p`` and ``top_k`` params.
    """
    import pandas as pd

    values = [float(v) for v in (logits.tolist() if hasattr(logits, "tolist") else logits)]
    labels = [str(label) for label in labels]
    if len(values) != len(labels) or len(values) < 2:
        raise ValueError(f"need one logit per label (at least two), got {len(values)} logits and {len(labels)} labels")
    if not 0 < t_min <= t_init <= t_max:
        raise ValueError(f"need 0 < t_min <= t_init <= t_max, got {t_min}, {t_init}, {t_max}")
    if not 0.05 <= top_p_init <= 1:
        raise ValueError(f"top_p_init must be in [0.05, 1], got {top_p_init}")
    V = len(values)
    data = pd.DataFrame({"position": range(V), "token": labels, "logit": [round(v, 4) for v in values]})
    temperature = alt.param(
        name="temperature",
        value=t_init,
        bind=alt.binding_range(min=t_min, max=t_max, step=0.05, name="temperature T "),
    )
    top_k = alt.param(name="top_k", value=V, bind=alt.binding_range(min=1, max=V, step=1, name="top-k "))
    top_p = alt.param(
        name="top_p", value=top_p_init, bind=alt.binding_range(min=0.05, max=1.0, step=0.05, name="top-p ")
    )
    by_probability = [{"field": "p", "order": "descending"}, {"field": "position", "order": "ascending"}]
    base = (
        alt.Chart(data)
        .transform_calculate(z="datum.logit / temperature")
        .transform_joinaggregate(z_max="max(z)")
        .transform_calculate(e="exp(datum.z - datum.z_max)")
        .transform_joinaggregate(e_sum="sum(e)")
        .transform_calculate(p="datum.e / datum.e_sum")
        .transform_window(rank="rank()", sort=[{"field": "p", "order": "descending"}])  # ties share a rank
        .transform_calculate(p_in="(datum.rank <= top_k) * datum.p")
        .transform_joinaggregate(k_sum="sum(p_in)")
        .transform_calculate(p_k="datum.p_in / datum.k_sum")
        .transform_window(cum_k="sum(p_k)", sort=by_probability, frame=[None, 0])
        .transform_calculate(keep="(datum.rank <= top_k) * (datum.cum_k - datum.p_k < top_p)")
        .transform_calculate(q="datum.keep * datum.p")
        .transform_joinaggregate(q_sum="sum(q)")
        .transform_calculate(sampled="datum.q / datum.q_sum")
    )
    x = alt.X(
        "position:O",
        title="next token",
        axis=alt.Axis(labelExpr=f"{json.dumps(labels)}[datum.value]", labelAngle=0),
    )
    y_scale = alt.Scale(domain=[0, 1])
    tooltip = [
        alt.Tooltip("token:N", title="token"),
        alt.Tooltip("logit:Q", title="logit", format=".2f"),
        alt.Tooltip("p:Q", title="softmax(logit / T)", format=".3f"),
        alt.Tooltip("sampled:Q", title="sampled with", format=".3f"),
    ]
    before = base.mark_bar(color="#cfcfcf", xOffset=-5, width=12).encode(
        x=x, y=alt.Y("p:Q", scale=y_scale, title="probability"), tooltip=tooltip
    )
    after = base.mark_bar(color="#1f5fa8", xOffset=5, width=12).encode(
        x=x, y=alt.Y("sampled:Q", scale=y_scale), tooltip=tooltip
    )
    values_text = (
        base.transform_filter("datum.sampled > 0")
        .mark_text(dy=-6, dx=5, fontSize=10)
        .encode(x=x, y=alt.Y("sampled:Q", scale=y_scale), text=alt.Text("sampled:Q", format=".2f"))
    )
    return (
        alt.layer(before, after, values_text)
        .add_params(temperature, top_p, top_k)
        .properties(
            width=max(300, 44 * V),
            height=220,
            title=title or "grey: softmax(logits / T); blue: what the sampler draws from",
        )
    )


__all__ += ["noam_schedule_chart", "training_curves_figure", "sampling_filter_chart"]


# --- Chapters 9 and 10, BLEU and label smoothing: n-gram matches, worked examples, targets, calibration ---

_MATCH_STYLE = {  # chip colours of the BLEU match display: background, border
    "match": ("#c7e9c0", "#31a354"),
    "clipped": ("#fdd0a2", "#e6550d"),
    "miss": ("#eeeeee", "#bbbbbb"),
}


def _bleu_ngram_status(hyp: list[str], refs: list[list[str]], n: int) -> list[tuple[str, str]]:
    """For each n-gram of ``hyp`` in order: (text, "match" | "clipped" | "miss"), clipped as BLEU clips.

    An n-gram is credited at most as often as it occurs in the reference that has it most often; its
    first occurrences take the credit, later ones are "clipped". "miss": no reference has it.
    """
    from collections import Counter

    most: Counter = Counter()
    for ref in refs:
        for gram, k in Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)).items():
            most[gram] = max(most[gram], k)
    used: Counter = Counter()
    out = []
    for i in range(len(hyp) - n + 1):
        gram = tuple(hyp[i : i + n])
        if most[gram] == 0:
            status = "miss"
        elif used[gram] < most[gram]:
            status, used[gram] = "match", used[gram] + 1
        else:
            status = "clipped"
        out.append((" ".join(gram), status))
    return out


def bleu_match_html(hypothesis: str, references, max_order: int = 4, lowercase: bool = False) -> str:
    """HTML that shows how BLEU scores one hypothesis: every n-gram coloured, then each factor.

    Both sides are tokenized as BLEU does (``tokenize_13a``). For n = 1..max_order, each n-gram of the
    hypothesis is a chip: green when a reference has it, orange when a reference has it but fewer times
    than the hypothesis uses it (the extra copies are clipped), grey when no reference has it. Then a
    table gives the modified precisions (matches / n-grams), c, r, the brevity penalty and the sentence
    BLEU of ``aiayn.bleu.sentence_bleu`` (sacreBLEU's sentence defaults: ``exp`` smoothing, effective order).

    Args:
        hypothesis: one detokenized system output.
        references: one reference string or a list of them.
        max_order: the highest n-gram order.
        lowercase: compare case-insensitively.

    Returns:
        An HTML fragment (a ``<div>``); show it with ``IPython.display.HTML`` or an ``ipywidgets.HTML``.
    """
    import html

    from .bleu import sentence_bleu, tokenize_13a

    refs = [references] if isinstance(references, str) else list(references)
    if not isinstance(hypothesis, str) or not refs or not all(isinstance(r, str) for r in refs):
        raise TypeError("expected a hypothesis str and a reference str (or a non-empty list of str)")

    def tokens(text: str) -> list[str]:
        return tokenize_13a((text.lower() if lowercase else text).rstrip()).split()

    hyp, ref_tokens = tokens(hypothesis), [tokens(r) for r in refs]
    result = sentence_bleu(hypothesis, refs, max_order=max_order, lowercase=lowercase)
    rows = []
    for n in range(1, max_order + 1):
        chips = []
        for text, status in _bleu_ngram_status(hyp, ref_tokens, n):
            background, border = _MATCH_STYLE[status]
            strike = "text-decoration:line-through;" if status == "clipped" else ""
            chips.append(
                f'<span title="{status}" style="background:{background};border:1px solid {border};'
                f'border-radius:4px;padding:1px 5px;margin:2px;display:inline-block;{strike}">'
                f"{html.escape(text)}</span>"
            )
        matched, total = result.counts[n - 1], result.totals[n - 1]
        label = f"<b>{n}-grams</b> {matched}/{total}"
        rows.append(f'<div style="margin:3px 0">{label}: {"".join(chips) or "<i>(none)</i>"}</div>')
    cells = [f"p{n} = {m}/{t}" for n, (m, t) in enumerate(zip(result.counts, result.totals, strict=True), 1)]
    factors = (
        " · ".join(cells)
        + f" · c = {result.hyp_len}, r = {result.ref_len} · BP = {result.brevity_penalty:.3f}"
        + f" · <b>sentence BLEU = {result.score:.1f}</b>"
    )
    if any(m == 0 < t for m, t in zip(result.counts, result.totals, strict=True)) and any(result.counts):
        factors += " (orders without a match are smoothed: the first gets 1/(2·n-grams), the next 1/(4·n-grams), ...)"
    legend = " ".join(
        f'<span style="background:{_MATCH_STYLE[s][0]};border:1px solid {_MATCH_STYLE[s][1]};'
        f'border-radius:4px;padding:0 5px">{name}</span>'
        for s, name in (("match", "in a reference"), ("clipped", "clipped (used up)"), ("miss", "not in a reference"))
    )
    return (
        '<div class="aiayn-bleu" style="line-height:1.9;font-size:0.95em">'
        + "".join(rows)
        + f'<div style="margin-top:6px">{factors}</div>'
        + f'<div style="margin-top:4px;font-size:0.85em">{legend}</div></div>'
    )


def bleu_table(examples, max_order: int = 4):
    """Sentence BLEU of worked examples, factor by factor, as a pandas DataFrame.

    Args:
        examples: ``(case, hypothesis, reference)`` triples.
        max_order: the highest n-gram order.

    Returns:
        A DataFrame indexed by case with columns hypothesis, reference, p1..p{max_order} (as
        "matches/n-grams"), c, r, BP and BLEU (``aiayn.bleu.sentence_bleu``, rounded to 1 decimal).
    """
    import pandas as pd

    from .bleu import sentence_bleu

    rows = []
    for case, hypothesis, reference in examples:
        r = sentence_bleu(hypothesis, reference, max_order=max_order)
        row = {"case": case, "hypothesis": hypothesis, "reference": reference}
        row.update({f"p{n}": f"{m}/{t}" for n, (m, t) in enumerate(zip(r.counts, r.totals, strict=True), 1)})
        row.update({"c": r.hyp_len, "r": r.ref_len, "BP": round(r.brevity_penalty, 3), "BLEU": round(r.score, 1)})
        rows.append(row)
    return pd.DataFrame(rows).set_index("case")


def brevity_penalty_figure(points: dict | None = None):
    """The brevity penalty BP = min(1, exp(1 − r/c)) against the length ratio c/r.

    Args:
        points: optional ``label -> c/r`` to mark on the curve.

    Returns:
        A matplotlib Figure (closed).
    """
    import numpy as np

    ratio = np.linspace(0.05, 1.6, 400)
    bp = np.minimum(1.0, np.exp(1 - 1 / ratio))
    fig = _closed_figure(6.0, 3.2)
    ax = fig.subplots()
    ax.plot(ratio, bp, linewidth=2)
    ax.axvline(1.0, color="gray", linestyle="--", linewidth=1)
    for k, (label, x) in enumerate((points or {}).items()):
        y = min(1.0, float(np.exp(1 - 1 / x)))
        ax.plot([x], [y], "o", color="#d6604d")
        ax.annotate(  # labels stacked in the empty corner under the curve, with an arrow to their point
            f"{label}: c/r = {x:.2f}, BP = {y:.2f}",
            (x, y),
            xytext=(0.62, 0.06 + 0.12 * k),
            fontsize=9,
            arrowprops={"arrowstyle": "->", "color": "gray"},
        )
    ax.set(xlabel="length ratio c / r (hypothesis words / reference words)", ylabel="brevity penalty BP")
    ax.set_ylim(0, 1.08)
    ax.set_title("Shorter than the references costs a factor; longer costs nothing", fontsize=10)
    ax.grid(alpha=0.3)
    return fig


def sentence_bleu_histogram(scores, corpus_score: float, bins: int = 20):
    """Histogram of sentence-level BLEU over a test set, with the corpus BLEU and the mean marked.

    Args:
        scores: one sentence BLEU per sentence (0..100).
        corpus_score: the corpus BLEU of the same hypotheses.
        bins: number of histogram bins over 0..100.

    Returns:
        A matplotlib Figure (closed).
    """
    import numpy as np

    scores = np.clip([float(s) for s in scores], 0, 100)  # a perfect sentence can come out as 100.00000000000004
    fig = _closed_figure(6.5, 3.2)
    ax = fig.subplots()
    ax.hist(scores, bins=bins, range=(0, 100), color="#9ecae1", edgecolor="white")
    ax.axvline(scores.mean(), color="#3182bd", linestyle="--", label=f"mean of sentence BLEU = {scores.mean():.1f}")
    ax.axvline(corpus_score, color="#d6604d", linewidth=2, label=f"corpus BLEU = {corpus_score:.1f}")
    ax.set(xlabel="sentence BLEU", ylabel="number of sentences")
    ax.set_title(f"{len(scores)} sentences: sentence BLEU is spread wide", fontsize=10)
    ax.legend(fontsize="small")
    return fig


def label_smoothing_chart(
    classes,
    true_class: str,
    pad_class: str | None = None,
    value: float = 0.1,
    max_value: float = 1.0,
    step: float = 0.01,
) -> alt.LayerChart:
    """Bars of the smoothed training target for one token, with ε on a slider ("ε (label smoothing)").

    The target is computed in the browser: y'_c = (1 − ε) · [c is the true class] + ε / C, PyTorch's
    convention (``F.cross_entropy(label_smoothing=ε)``). When ``pad_class`` is given, a radio button
    switches to the Annotated Transformer's convention: the true class gets 1 − ε, the padding class 0,
    and every other class ε / (C − 2). The true class's bar is drawn in orange; a dashed rule marks 1/C.

    Args:
        classes: the C class names (tokens), in the order drawn.
        true_class: the one that is correct.
        pad_class: the padding token, to offer the Annotated Transformer's convention; ``None``: no switch.
        value, max_value, step: initial value, largest value and step of the ε slider (smallest: 0).

    Returns:
        A layered Altair chart that owns the ``eps`` param (and ``convention`` with ``pad_class``).
    """
    import pandas as pd

    classes = [str(c) for c in classes]
    if true_class not in classes or (pad_class is not None and pad_class not in classes):
        raise ValueError(f"true_class {true_class!r} and pad_class {pad_class!r} must be among the classes {classes}")
    if pad_class == true_class or len(set(classes)) != len(classes) or len(classes) < 3:
        raise ValueError(f"need at least 3 distinct classes and pad_class != true_class, got {classes}")
    if not 0 <= value <= max_value <= 1:
        raise ValueError(f"need 0 <= value <= max_value <= 1, got {value} and {max_value}")
    C = len(classes)
    data = pd.DataFrame(
        {
            "position": range(C),
            "token": classes,
            "is_true": [int(c == true_class) for c in classes],
            "is_pad": [int(c == pad_class) for c in classes],
        }
    )
    eps = alt.param(
        name="eps", value=value, bind=alt.binding_range(min=0, max=max_value, step=step, name="ε (label smoothing) ")
    )
    params = [eps]
    pytorch = f"(1 - eps) * datum.is_true + eps / {C}"
    target = pytorch
    if pad_class is not None:
        options = ["all C classes (PyTorch)", "C − 2 classes (Annotated Transformer)"]
        convention = alt.param(
            name="convention", value=options[0], bind=alt.binding_radio(options=options, name="spread ε over ")
        )
        params.append(convention)
        annotated = f"datum.is_pad ? 0 : (datum.is_true ? 1 - eps : eps / {C - 2})"
        target = f"convention == '{options[0]}' ? {pytorch} : ({annotated})"
    labels = json.dumps(classes)
    x = alt.X(
        "position:O",
        title=f"class (token); C = {C}",
        axis=alt.Axis(labelExpr=f"{labels}[datum.value]", labelAngle=0),
    )
    y = alt.Y("target:Q", title="target probability y'", scale=alt.Scale(domain=[0, 1]))
    base = alt.Chart(data).transform_calculate(target=target)
    bars = base.mark_bar().encode(
        x=x,
        y=y,
        color=alt.condition("datum.is_true == 1", alt.value("#e6550d"), alt.value("#4c78a8")),
        tooltip=[alt.Tooltip("token:N"), alt.Tooltip("target:Q", format=".4f")],
    )
    values = base.mark_text(dy=-6, fontSize=11).encode(x=x, y=y, text=alt.Text("target:Q", format=".3f"))
    uniform = alt.Chart(pd.DataFrame({"u": [1 / C]})).mark_rule(strokeDash=[4, 4], color="gray").encode(y="u:Q")
    return (
        alt.layer(uniform, bars, values)
        .add_params(*params)
        .properties(
            title=f'Training target when the next token is "{true_class}" (orange); dashed: uniform 1/C',
            width=max(300, 52 * C),
            height=230,
        )
    )


def smoothing_loss_figure(C: int, eps_values=(0.0, 0.1, 0.2)):
    """The lowest loss reachable at each confidence p(true), with and without label smoothing.

    For a model that puts p on the true class and spreads 1 − p evenly over the other C − 1 (the best
    it can do for a given p), the smoothed cross-entropy is L(p) = −a·log p − (1 − a)·log((1 − p)/(C − 1))
    with a = 1 − ε + ε/C. Without smoothing (a = 1) it falls all the way to 0 at p = 1; with smoothing it
    has its minimum at p = a (dots) and rises again after it.

    Args:
        C: number of classes.
        eps_values: the ε of each curve.

    Returns:
        A matplotlib Figure (closed).
    """
    import numpy as np

    p = np.linspace(0.02, 0.9995, 800)
    fig = _closed_figure(6.5, 3.6)
    ax = fig.subplots()
    for eps in eps_values:
        a = 1 - eps + eps / C
        rest = (1 - a) * np.log((1 - p) / (C - 1)) if eps > 0 else 0.0
        loss = -a * np.log(p) - rest
        (line,) = ax.plot(p, loss, linewidth=2, label=f"ε = {eps:g}")
        if eps > 0:
            best = -a * np.log(a) - (1 - a) * np.log((1 - a) / (C - 1))
            ax.plot([a], [best], "o", color=line.get_color())
            ax.annotate(f"min at p = {a:.3f}", (a, best), textcoords="offset points", xytext=(-95, 12), fontsize=9)
    ax.set_ylim(0, 3)
    ax.set(xlabel="p(true class), the model's confidence in the right token", ylabel="loss (nats per token)")
    ax.set_title(f"Smoothed cross-entropy against confidence (C = {C})", fontsize=10)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def reliability_figure(results: dict, title: str = "Reliability on held-out data"):
    """Reliability diagrams (top) and confidence histograms (bottom), one column per model.

    Top: for each confidence bin, a bar up to the accuracy of the predictions in it, and a hatched
    red box from there to the bin's mean confidence (the gap that ECE averages). The dashed diagonal
    is perfect calibration: a bar that stops below its box is over-confident. Bottom: the share of
    predictions in each bin.

    Args:
        results: ``label -> aiayn.calibration.ReliabilityBins``.
        title: the figure title.

    Returns:
        A matplotlib Figure (closed).
    """
    import numpy as np

    fig = _closed_figure(4.2 * len(results), 5.6)
    axes = fig.subplots(2, len(results), squeeze=False, height_ratios=[2.2, 1], sharex=True, sharey="row")
    for k, (label, bins) in enumerate(results.items()):
        edges = bins.edges.numpy()
        width = edges[1] - edges[0]
        filled = bins.count.numpy() > 0
        left, acc, conf = edges[:-1][filled], bins.accuracy.numpy()[filled], bins.confidence.numpy()[filled]
        top, low = axes[0, k], axes[1, k]
        top.bar(left, acc, width=width, align="edge", color="#4c78a8", edgecolor="white", label="accuracy")
        top.bar(
            left,
            np.abs(conf - acc),
            bottom=np.minimum(acc, conf),
            width=width,
            align="edge",
            fill=False,
            hatch="//",
            edgecolor="#d6604d",
            linewidth=0.8,
            label="gap to mean confidence",
        )
        top.plot([0, 1], [0, 1], "--", color="gray", linewidth=1, label="calibrated")
        top.set(xlim=(0, 1), ylim=(0, 1))
        top.set_title(f"{label}: ECE = {bins.ece:.3f}", fontsize=10)
        top.legend(fontsize="x-small", loc="upper left")
        low.bar(edges[:-1], bins.weight.numpy(), width=width, align="edge", color="#9ecae1", edgecolor="white")
        low.set(xlabel="confidence (largest probability)")
    axes[0, 0].set_ylabel("accuracy in the bin")
    axes[1, 0].set_ylabel("share of predictions")
    fig.suptitle(title, fontsize=11)
    return fig


__all__ += [
    "bleu_match_html",
    "bleu_table",
    "brevity_penalty_figure",
    "sentence_bleu_histogram",
    "label_smoothing_chart",
    "smoothing_loss_figure",
    "reliability_figure",
]


# --- Chapter 11, translating Multi30k: lengths, a run's curves, attention maps, published results ---


def length_histograms_figure(panels: dict, title: str = ""):
    """Side-by-side histograms of sentence lengths, one panel per unit, the languages overlaid.

    Args:
        panels: panel title -> {label: lengths}, e.g.
            ``{"words": {"German": [...], "English": [...]}, "BPE pieces": {...}}``.
        title: the figure title.

    Returns:
        A matplotlib Figure (closed), one histogram per panel with one outline per label and its mean.
    """
    import numpy as np

    if not panels or not all(panels.values()):
        raise ValueError("panels: expected {panel title: {label: lengths}} with at least one label per panel")
    fig = _closed_figure(4.2 * len(panels), 3.2)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (unit, series) in zip(axes, panels.items(), strict=True):
        arrays = {label: np.asarray(list(lengths), dtype=float) for label, lengths in series.items()}
        empty = [label for label, values in arrays.items() if values.size == 0]
        if empty:
            raise ValueError(f"panel {unit!r}: no lengths for {empty[0]!r}")
        bins = np.arange(0.5, max(values.max() for values in arrays.values()) + 1.5)  # one bin per length
        for label, values in arrays.items():
            ax.hist(values, bins=bins, histtype="step", linewidth=1.5, label=f"{label} (mean {values.mean():.1f})")
        ax.set(xlabel=f"{unit} per sentence", ylabel="sentences")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


def run_curves_figure(records, title: str = ""):
    """The training loss of every logged step and the validation loss and perplexity of every evaluation.

    Args:
        records: the lines of a run's ``metrics.jsonl`` as dicts: ``{"event": "step", "step", "loss", ...}``
            and ``{"event": "eval", "step", "val_loss", "val_ppl", ...}``.
        title: the figure title.

    Returns:
        A matplotlib Figure (closed) with two panels sharing the step axis: losses (training, label-smoothed;
        validation, plain cross-entropy) and validation perplexity.
    """
    from matplotlib.ticker import FuncFormatter

    steps = [r for r in records if r.get("event") == "step"]
    evals = [r for r in records if r.get("event") == "eval"]
    if not steps:
        raise ValueError("records: no training steps (event 'step') to draw")
    fig = _closed_figure(7.0, 4.6)
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.plot([r["step"] for r in steps], [r["loss"] for r in steps], color="#c0392b", linewidth=1,
             label="training loss (label-smoothed)")  # fmt: skip
    if evals:
        x = [r["step"] for r in evals]
        top.plot(x, [r["val_loss"] for r in evals], marker="o", color="#1f5fa8", label="validation loss")
        bottom.plot(x, [r["val_ppl"] for r in evals], marker="o", color="#2e8b57")
        for r in evals if len(evals) <= 8 else [evals[0], evals[-1]]:  # a long run: the first and the last
            bottom.annotate(f"{r['val_ppl']:.1f}", (r["step"], r["val_ppl"]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
    bottom.set_yscale("log")
    ppl = [r["val_ppl"] for r in evals] or [1.0]
    narrow = max(ppl) / min(ppl) < 10  # within a decade every tick gets a number, else only 2s and 5s
    bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))  # 80, not 8 × 10^1
    bottom.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if narrow or f"{v:g}"[0] in "25" else ""))
    top.set_ylabel("loss (nats per token)")
    top.legend(fontsize="small")
    bottom.set(xlabel="optimizer step", ylabel="validation perplexity\n(log scale)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3, which="both")
    if title:
        fig.suptitle(title, fontsize=11)
    return fig


ATTENTION_KINDS = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "cross-attention",
}


def attention_maps_frame(maps: dict, batch_index: int = 0, decimals: int = 3, drop_masked: bool = True):
    """The weights of ``Transformer.attention_maps()`` for one sentence as a long table, one row per cell.

    Args:
        maps: ``{"encoder": [(B, h, S, S)] * N, "decoder_self": [(B, h, T, T)] * N, "cross": [(B, h, T, S)] * N}``.
        batch_index: which sentence of the batch.
        decimals: rounding of the weights (keeps the embedded chart data small).
        drop_masked: leave out cells whose weight is exactly 0, the masked ones (the future positions of
            decoder self-attention, padding): a chart then leaves them blank.

    Returns:
        A ``pandas.DataFrame`` with columns ``kind``, ``layer`` and ``head`` (both counted from 1),
        ``query`` and ``key`` (positions from 0) and ``weight``.
    """
    import pandas as pd

    unknown = sorted(set(maps) - set(ATTENTION_KINDS))
    if unknown:
        raise ValueError(f"maps: unknown kinds {unknown}; expected some of {list(ATTENTION_KINDS)}")
    frames = []
    for kind, layers in maps.items():
        for n, weights in enumerate(layers, start=1):
            if weights.dim() != 4:
                raise ValueError(f"{kind} layer {n}: expected (B, h, L_q, L_k) weights, got {tuple(weights.shape)}")
            w = weights[batch_index].detach().float().cpu()  # (h, L_q, L_k)
            h, L_q, L_k = w.shape
            cells = [range(1, h + 1), range(L_q), range(L_k)]
            index = pd.MultiIndex.from_product(cells, names=["head", "query", "key"])
            flat = w.reshape(-1).numpy()
            part = pd.DataFrame({"weight": flat.round(decimals)}, index=index).reset_index()
            if drop_masked:
                part = part[flat != 0.0]
            frames.append(part.assign(kind=kind, layer=n))
    if not frames:
        raise ValueError("maps: no attention weights given")
    return pd.concat(frames, ignore_index=True)[["kind", "layer", "head", "query", "key", "weight"]]


def attention_maps_chart(
    frame, src_tokens, tgt_tokens, cell: int = 13, max_rows: int = 5000, title: str = ""
) -> alt.HConcatChart:
    """Heat maps of the three kinds of attention of one sentence, with sliders for the layer and the head.

    The three panels (encoder self-attention over the source, decoder self-attention over the target,
    cross-attention from target to source) each embed only their own rows; the browser keeps the rows of
    the chosen layer and head (a ``filter`` on two params named ``layer`` and ``head``), so the chart stays
    interactive on the static website. The colour scale is a square root of the weight, so that the
    small weights of a spread-out head still show; cells left out of ``frame`` (masked) stay blank.

    Args:
        frame: from ``attention_maps_frame``.
        src_tokens: the S source tokens (keys of encoder and cross-attention).
        tgt_tokens: the T decoder input tokens (queries of the decoder's attentions).
        cell: side of one cell in pixels.
        max_rows: the most rows one panel may embed.
        title: the chart title.

    Returns:
        An Altair ``HConcatChart`` that owns the ``layer`` and ``head`` params.
    """
    src_tokens, tgt_tokens = [str(t) for t in src_tokens], [str(t) for t in tgt_tokens]
    tokens = {"encoder": (src_tokens, src_tokens), "decoder_self": (tgt_tokens, tgt_tokens),
              "cross": (tgt_tokens, src_tokens)}  # fmt: skip
    kinds = [k for k in ATTENTION_KINDS if k in set(frame["kind"])]
    if not kinds:
        raise ValueError(f"frame: no rows of the kinds {list(ATTENTION_KINDS)}")
    N, h = int(frame["layer"].max()), int(frame["head"].max())
    layer = alt.param(name="layer", value=N, bind=alt.binding_range(min=1, max=N, step=1, name="layer "))
    head = alt.param(name="head", value=1, bind=alt.binding_range(min=1, max=h, step=1, name="head "))
    scale = alt.Scale(type="sqrt", domain=[0, 1], scheme="blues")
    legend = alt.Legend(orient="bottom", direction="horizontal", gradientLength=160)
    panels = []
    for kind in kinds:
        rows = frame[frame["kind"] == kind].drop(columns="kind")
        if len(rows) > max_rows:
            raise ValueError(
                f"{kind}: {len(rows)} rows exceed max_rows={max_rows}; choose a shorter sentence "
                "(rows = layers × heads × L_q × L_k)"
            )
        queries, keys = tokens[kind]
        n_q, n_k = int(rows["query"].max()) + 1, int(rows["key"].max()) + 1
        if n_q > len(queries) or n_k > len(keys):
            raise ValueError(
                f"{kind}: the weights reach {n_q} × {n_k} cells, but {len(queries)} query and {len(keys)} key "
                "tokens were given"
            )
        q_json, k_json = json.dumps(queries), json.dumps(keys)
        x_axis = alt.Axis(labelExpr=f"{k_json}[datum.value]", labelAngle=-60)
        y_axis = alt.Axis(labelExpr=f"{q_json}[datum.value]")
        panels.append(
            alt.Chart(rows)
            .transform_filter("datum.layer == layer && datum.head == head")
            .transform_calculate(query_token=f"{q_json}[datum.query]", key_token=f"{k_json}[datum.key]")
            .mark_rect()
            .encode(
                x=alt.X("key:O", title="key (attended to)", axis=x_axis),
                y=alt.Y("query:O", title=None, axis=y_axis),
                color=alt.Color("weight:Q", title="weight (√ scale)", scale=scale, legend=legend),
                tooltip=[
                    alt.Tooltip("query_token:N", title="query"),
                    alt.Tooltip("key_token:N", title="key"),
                    alt.Tooltip("weight:Q", title="weight", format=".3f"),
                ],
            )
            .properties(title=ATTENTION_KINDS[kind], width=cell * len(keys), height=cell * len(queries))
        )
    chart = alt.hconcat(*panels).add_params(layer, head).resolve_scale(color="shared")
    return chart.properties(title=title) if title else chart


# The published full run: book/results/<name>.json and <name>.<split>.hyp.en, written on a GPU machine by
# write_published_results from a run folder of aiayn.recipes (config.json, summary.json, results.json).

PUBLISHED_KEYS = ("name", "measured_at", "device_name", "torch", "config", "train", "split", "test", "hypotheses")


def write_published_results(
    run_dir, results_dir, name: str | None = None, split: str = "test2016", measured_at: str | None = None
):
    """Copy a trained and evaluated run's numbers and translations into the book's results folder.

    Writes ``<results_dir>/<name>.json`` (the run's config, training summary and the split's scores,
    with the time of writing) and ``<results_dir>/<name>.<split>.hyp.en`` (the translations), so that a
    chapter can show and re-score them without the run folder. Machine paths are left out.

    Args:
        run_dir: a run folder after ``recipes.train`` and ``recipes.evaluate(run_dir, split=split)``.
        results_dir: e.g. ``book/results``.
        name: file stem; default the run's preset name (``multi30k``).
        split: the evaluated split.
        measured_at: a date to record; default now, in UTC (ISO 8601).

    Returns:
        The path of the JSON file.
    """
    import datetime
    import shutil
    from pathlib import Path

    run, out = Path(run_dir), Path(results_dir)
    needed = ["config.json", "summary.json", "results.json", f"{split}.hyp.en"]
    missing = [f for f in needed if not (run / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{run} lacks {missing}: train it (python -m aiayn.train) and evaluate it "
            f"(python -m aiayn.evaluate {run} --split {split}) first"
        )
    config = json.loads((run / "config.json").read_text())
    summary = {k: v for k, v in json.loads((run / "summary.json").read_text()).items() if k != "out_dir"}
    results = json.loads((run / "results.json").read_text())
    if split not in results:
        raise ValueError(f"{run / 'results.json'} has no scores for {split!r} (it has {sorted(results)})")
    name = name or config["name"]
    hyp_name = f"{name}.{split}.hyp.en"
    when = measured_at or datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    record = {
        "name": name,
        "measured_at": when,
        "device_name": summary.get("device_name"),
        "torch": summary.get("torch"),
        "config": config,
        "train": summary,
        "split": split,
        "test": results[split],
        "hypotheses": hyp_name,
    }
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run / f"{split}.hyp.en", out / hyp_name)
    path = out / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def load_published_results(path) -> dict | None:
    """Read a file written by ``write_published_results``; ``None`` when it does not exist (not published yet).

    Args:
        path: e.g. ``book/results/multi30k.json``.

    Returns:
        The record, or ``None``. A file without one of ``PUBLISHED_KEYS`` raises a ``ValueError``.
    """
    from pathlib import Path

    path = Path(path)
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    missing = [k for k in PUBLISHED_KEYS if k not in record]
    if missing:
        raise ValueError(f"{path} lacks {missing}: write it with aiayn.viz.write_published_results")
    return record


def published_results_frame(record: dict):
    """The published run as a two-column table a reader can scan: what was measured, and the value.

    Args:
        record: from ``load_published_results``.

    Returns:
        A ``pandas.DataFrame`` indexed by the quantity, with one column ``value`` (strings, rounded).
    """
    import pandas as pd

    c, t, s = record["config"], record["train"], record["test"]

    def num(value, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    rows = {
        "measured at": record["measured_at"],
        "device": record["device_name"],
        "torch": record["torch"],
        "model": f"N = {c['N']}, d_model = {c['d_model']}, d_ff = {c['d_ff']}, h = {c['h']}, P_drop = {c['dropout']}",
        "vocabulary, batch": f"{c['vocab_size']:,} joint BPE pieces, {c['max_tokens']:,} padded tokens per batch",
        "schedule": f"{c['epochs']} epochs, warmup {c['warmup']}, factor {c['lr_factor']}, ε_ls {c['label_smoothing']}",
        "parameters": num(t.get("parameters"), ","),
        "steps, epochs": f"{num(t.get('steps'), ',')} steps, {t.get('epochs_done')} epochs",
        "wall time": f"{num(t.get('wall_s'), '.0f')} s ({t.get('amp') or 'float32'}, compile {t.get('compile')})",
        "training speed": f"{num(t.get('tokens_per_s'), ',.0f')} target tokens/s",
        "validation loss, perplexity": f"{num(t.get('val_loss'), '.3f')}, {num(t.get('val_ppl'), '.2f')}",
        f"{record['split']}: loss, perplexity": f"{num(s.get('loss'), '.3f')}, {num(s.get('ppl'), '.2f')}",
        "decoding": f"beam {s.get('beam')}, α {s.get('length_penalty')}, mean of {', '.join(s.get('checkpoints', []))}",
        f"{record['split']}: our BLEU": f"{num(s.get('bleu'), '.2f')} on {s.get('sentences')} sentences",
        f"{record['split']}: sacreBLEU": num(s.get("sacrebleu"), ".2f"),
        "sacreBLEU signature": s.get("signature") or "n/a",
    }  # fmt: skip
    return pd.DataFrame({"value": list(rows.values())}, index=pd.Index(list(rows), name="quantity"))


def rescore_hypotheses(hypotheses_path, references) -> dict:
    """Score a file of translations (one per line) against references with our BLEU and with sacreBLEU.

    Args:
        hypotheses_path: a ``.hyp.en`` file as written by ``recipes.evaluate``.
        references: one reference string per line of the file, in order.

    Returns:
        ``{"sentences", "bleu", "bleu_detail", "sacrebleu", "signature"}`` (the last two ``None`` without sacreBLEU).
    """
    from pathlib import Path

    from .bleu import corpus_bleu

    lines = Path(hypotheses_path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    references = list(references)
    if len(lines) != len(references):
        raise ValueError(f"{hypotheses_path} has {len(lines)} lines but {len(references)} references were given")
    ours = corpus_bleu(lines, references)
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        sacre, signature = None, None
    else:
        bleu = BLEU()
        sacre, signature = bleu.corpus_score(lines, [references]).score, str(bleu.get_signature())
    return {"sentences": len(lines), "bleu": ours.score, "bleu_detail": str(ours), "sacrebleu": sacre,
            "signature": signature}  # fmt: skip


__all__ += [
    "length_histograms_figure",
    "run_curves_figure",
    "ATTENTION_KINDS",
    "attention_maps_frame",
    "attention_maps_chart",
    "PUBLISHED_KEYS",
    "write_published_results",
    "load_published_results",
    "published_results_frame",
    "rescore_hypotheses",
]
