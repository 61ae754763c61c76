"""Chapters 3 and 4, positional encoding and masking: tables, waves and masks."""

from __future__ import annotations

import altair as alt

from ._figures import closed_figure


def _as_matrix(tensor, name: str):
    """A 2-D tensor as a NumPy array, or a ``ValueError`` that names the shape that arrived."""
    if tensor.dim() != 2:
        raise ValueError(
            f"{name}: expected a 2-D tensor, got shape {tuple(tensor.shape)}"
        )
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
    fig = closed_figure(7.5, 4.0)
    ax = fig.subplots()
    image = ax.imshow(
        table,
        aspect="auto",
        cmap="RdBu_r",
        vmin=-1,
        vmax=1,
        interpolation="nearest",
    )
    ax.set(
        xlabel="dimension (column of the table)",
        ylabel="position in the sequence",
        title=title,
    )
    fig.colorbar(image, ax=ax, label="PE value")
    return fig


def pe_curves(
    pe,
    dims=(4, 5, 6, 7),
    title: str = "Dimensions of the encoding over positions",
):
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
        raise ValueError(
            f"dims must be columns of a table with {table.shape[1]} columns, got {tuple(dims)}"
        )
    fig = closed_figure(7.5, 3.2)
    ax = fig.subplots()
    for dim in dims:
        kind = "sin" if dim % 2 == 0 else "cos"
        ax.plot(
            table[:, dim],
            label=f"dimension {dim} ({kind})",
            linestyle="-" if dim % 2 == 0 else "--",
        )
    ax.set(
        xlabel="position in the sequence",
        ylabel="PE value",
        title=title,
        ylim=(-1.1, 1.1),
    )
    ax.legend(loc="upper right", fontsize="small", ncols=2)
    ax.grid(alpha=0.3)
    return fig


def pe_similarity(
    pe, title: str = "Dot product between the encodings of two positions"
):
    """Heatmap of ``pe @ pe.T``: entry ``(p, q)`` is the dot product of positions ``p`` and ``q``.

    Args:
        pe: ``(max_len, d_model)`` tensor.
        title: the figure title.

    Returns:
        a matplotlib Figure (closed).
    """
    table = _as_matrix(pe, "pe")
    sim = table @ table.T  # (max_len, max_len)
    fig = closed_figure(5.6, 4.6)
    ax = fig.subplots()
    image = ax.imshow(sim, cmap="viridis", interpolation="nearest")
    ax.set(xlabel="position q", ylabel="position p", title=title)
    fig.colorbar(image, ax=ax, label="PE[p] · PE[q]")
    return fig


def pe_wavelengths(
    curves: dict, title: str = "Wavelength of each pair of columns"
):
    """Wavelength (in positions, log scale) of each pair of columns, one line per variant of the formula.

    Args:
        curves: label -> 1-D tensor of wavelengths, one per pair ``i`` (columns ``2i`` and ``2i + 1``).
        title: the figure title.

    Returns:
        a matplotlib Figure (closed).
    """
    fig = closed_figure(7.5, 3.2)
    ax = fig.subplots()
    for (label, wavelengths), marker in zip(
        curves.items(), "os^v", strict=False
    ):
        values = wavelengths.detach().cpu().numpy()
        ax.plot(
            range(len(values)),
            values,
            marker=marker,
            markersize=3,
            label=label,
        )
    ax.set_yscale("log")
    ax.set(
        xlabel="pair i (columns 2i and 2i + 1)",
        ylabel="wavelength (positions, log scale)",
        title=title,
    )
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")
    return fig


def positional_encoding_chart(
    max_positions: int = 60, max_d_model: int = 112
) -> alt.VConcatChart:
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
        name="d_model",
        value=64,
        bind=alt.binding_range(
            min=8, max=max_d_model, step=8, name="d_model "
        ),
    )
    positions = alt.param(
        name="positions",
        value=min(40, max_positions),
        bind=alt.binding_range(
            min=10, max=max_positions, step=5, name="positions shown "
        ),
    )
    dimension = alt.param(
        name="dimension",
        value=6,
        bind=alt.binding_range(
            min=0, max=max_d_model - 1, step=1, name="dimension "
        ),
    )
    column = "min(dimension, d_model - 1)"  # the slider may point past a narrow table
    pe_value = "(datum.dim % 2 == 0 ? sin(datum.angle) : cos(datum.angle))"

    grid = (
        alt.Chart(alt.sequence(0, max_positions * max_d_model, as_="n"))
        .transform_calculate(
            pos=f"floor(datum.n / {max_d_model})",
            dim=f"datum.n % {max_d_model}",
        )
        .transform_filter("datum.pos < positions && datum.dim < d_model")
        .transform_calculate(
            angle="datum.pos / pow(10000, (datum.dim - datum.dim % 2) / d_model)"
        )
        .transform_calculate(
            value=pe_value, dim_end="datum.dim + 1", pos_end="datum.pos + 1"
        )
    )
    heatmap = grid.mark_rect().encode(
        x=alt.X(
            "dim:Q",
            title="dimension (column of the table)",
            scale=alt.Scale(nice=False, zero=True),
        ),
        x2="dim_end:Q",
        y=alt.Y(
            "pos:Q",
            title="position in the sequence",
            scale=alt.Scale(reverse=True, nice=False, zero=True),
        ),
        y2="pos_end:Q",
        color=alt.Color(
            "value:Q",
            title="PE value",
            scale=alt.Scale(scheme="redblue", domain=[-1, 1], reverse=True),
        ),
        tooltip=[
            alt.Tooltip("pos:Q", title="position"),
            alt.Tooltip("dim:Q", title="dimension"),
            alt.Tooltip("value:Q", title="PE value", format=".3f"),
        ],
    )
    outline = (
        alt.Chart(alt.sequence(0, 1, as_="n"))
        .transform_calculate(
            dim=column, dim_end=f"{column} + 1", top="0", bottom="positions"
        )
        .mark_rect(fill=None, stroke="black", strokeWidth=2)
        .encode(
            x=alt.X("dim:Q", title="dimension (column of the table)"),
            x2="dim_end:Q",
            y=alt.Y("top:Q", title="position in the sequence"),
            y2="bottom:Q",
        )
    )
    top = (heatmap + outline).properties(
        width=440, height=240, title="The table PE[position, dimension]"
    )

    steps_per_position = 4  # the wave between integer positions, to show what the table samples
    wave = (
        alt.Chart(
            alt.sequence(0, max_positions * steps_per_position + 1, as_="n")
        )
        .transform_calculate(
            pos=f"datum.n / {steps_per_position}", dim=column
        )
        .transform_filter("datum.pos <= positions - 1")
        .transform_calculate(
            angle="datum.pos / pow(10000, (datum.dim - datum.dim % 2) / d_model)"
        )
        .transform_calculate(value=pe_value)
    )
    x_pos = alt.X(
        "pos:Q",
        title="position in the sequence",
        scale=alt.Scale(nice=False, zero=True),
    )
    y_val = alt.Y(
        "value:Q", title="PE value", scale=alt.Scale(domain=[-1.05, 1.05])
    )
    line = wave.mark_line(color="#888", strokeWidth=1).encode(
        x=x_pos, y=y_val
    )
    dots = (
        wave.transform_filter("datum.pos == floor(datum.pos)")
        .mark_circle(size=28, color="#c0392b")
        .encode(
            x=x_pos,
            y=y_val,
            tooltip=[
                alt.Tooltip("pos:Q", title="position"),
                alt.Tooltip("value:Q", title="PE value", format=".3f"),
            ],
        )
    )
    title = (
        f"'Column ' + {column} + ' (' + ({column} % 2 == 0 ? 'sin' : 'cos') + '), wavelength 2π·10000^('"
        f" + ({column} - {column} % 2) + '/' + d_model + ') = '"
        f" + format(2 * PI * pow(10000, ({column} - {column} % 2) / d_model), ',.1f') + ' positions'"
    )
    bottom = (line + dots).properties(
        width=440, height=160, title=alt.TitleParams(text=alt.expr(title))
    )
    return alt.vconcat(top, bottom).add_params(d_model, positions, dimension)


def mask_heatmaps(
    masks: dict, tokens: list[str], keys: list[str] | None = None
):
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
    fig = closed_figure(2.7 * len(masks) + 0.3, 3.0)
    axes = fig.subplots(1, len(masks), squeeze=False)[0]
    cmap = ListedColormap(["#f2f2f2", "#2b7bba"])
    for ax, (title, mask) in zip(axes, masks.items(), strict=True):
        m = mask.detach().cpu().bool().numpy()
        ax.imshow(m, cmap=cmap, vmin=0, vmax=1)
        for (q, k), allowed in np.ndenumerate(m):
            color = "white" if allowed else "#999999"
            ax.text(
                k,
                q,
                "T" if allowed else "F",
                ha="center",
                va="center",
                fontsize=9,
                color=color,
            )
        ax.set_xticks(
            range(len(keys)),
            keys,
            rotation=90 if max(map(len, keys)) > 5 else 0,
        )
        ax.set_yticks(range(len(tokens)), tokens)
        ax.set_xticks([x - 0.5 for x in range(1, len(keys))], minor=True)
        ax.set_yticks([y - 0.5 for y in range(1, len(tokens))], minor=True)
        ax.grid(which="minor", color="white", linewidth=1)
        ax.tick_params(which="minor", length=0)
        ax.set(
            xlabel="key (attended to)",
            ylabel="query (attending)",
            title=title,
        )
    fig.suptitle(
        "True (blue) = the query may attend to the key", fontsize=10
    )
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
        bind=alt.binding_range(
            min=2, max=max_len, step=1, name="sequence length "
        ),
    )
    n_pad = alt.param(
        name="n_pad",
        value=1,
        bind=alt.binding_range(
            min=0, max=max_len - 1, step=1, name="padding tokens "
        ),
    )
    kinds = [
        "padding (encoder)",
        "look-ahead",
        "padding & look-ahead (decoder)",
    ]
    kind = alt.param(
        name="kind",
        value=kinds[2],
        bind=alt.binding_radio(options=kinds, name="mask "),
    )
    letters = (
        "["
        + ", ".join(f"'{chr(ord('A') + i)}'" for i in range(max_len))
        + "]"
    )
    n_real = "max(seq_len - n_pad, 0)"  # all padding is allowed: every row is then empty
    label = f"datum.value >= {n_real} ? '<pad>' : {letters}[datum.value]"
    statuses = [
        "may attend (True)",
        "blocked: future key (False)",
        "blocked: padding key (False)",
    ]
    chart = (
        alt.Chart(alt.sequence(0, max_len * max_len, as_="n"))
        .transform_calculate(
            query=f"floor(datum.n / {max_len})", key=f"datum.n % {max_len}"
        )
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
            title="mask value",
            scale=alt.Scale(
                domain=statuses, range=["#2b7bba", "#f4a582", "#d9d9d9"]
            ),
            legend=alt.Legend(
                orient="bottom", direction="vertical", labelLimit=300
            ),
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
        .properties(
            width=alt.Step(36),
            height=alt.Step(28),
            title="Which keys each query may attend to",
        )
    )


__all__ = [
    "pe_heatmap",
    "pe_curves",
    "pe_similarity",
    "pe_wavelengths",
    "positional_encoding_chart",
    "mask_heatmaps",
    "mask_chart",
]
