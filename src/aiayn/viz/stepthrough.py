"""Charts of the published model stepped through (chapters 5 to 7), from ``aiayn.pages.stepthrough``.

Each chart carries the record's numbers for every layer, head and token and picks them in the
browser with sliders, so it works on the static website: the encoder's attention step by step
(q and k, the scores, the mask, the softmax, the weights times V, the heads and W^O), the
encoder layer's Add & Norm and feed-forward network, and the decoder's masked self-attention
and cross-attention for one target piece.
"""

from __future__ import annotations

import json

import altair as alt
import pandas as pd

__all__ = [
    "ATTENTION_STEPS",
    "stepthrough_attention_frame",
    "encoder_attention_steps_chart",
    "add_norm_steps_chart",
    "decoder_attention_steps_chart",
]

# the step slider of the attention charts: what the bars show
ATTENTION_STEPS = ["q·k", "÷ √d_k", "mask", "softmax"]
# the vectors of an encoder layer, in order: (record step, its label); the first two, whose
# sum is layer 1's input, are drawn for layer 1 only
_LAYER_VECTORS = [
    ("token", "embedding × √d_model"),
    ("position", "+ positional encoding"),
    ("input", "x (layer input)"),
    ("attention", "attention(x)"),
    ("add_1", "x + attention(x)"),
    ("norm_1", "y = LayerNorm(…)"),
    ("ffn", "FFN(y)"),
    ("add_2", "y + FFN(y)"),
    ("norm_2", "LayerNorm(…): output"),
]


def _digits(n: int) -> str:
    """Vega's format for a number the record keeps to ``n`` significant digits: those digits,
    no more (d3-format ``r``; ``~`` drops trailing zeros, as the record's floats do)."""
    return f".{n}~r"


def _js(values) -> str:
    return json.dumps(values, ensure_ascii=False)


def _slider(
    name: str, top: int, value: int = 1, label: str = ""
) -> alt.Parameter:
    return alt.param(
        name=name,
        value=value,
        bind=alt.binding_range(
            min=1, max=top, step=1, name=f"{label or name} "
        ),
    )


def _check(record: dict) -> None:
    for key in ("tokens", "sizes", "encoder", "decoder"):
        if key not in record:
            raise ValueError(
                f"record: expected aiayn.pages.stepthrough's record with {key!r}, got the keys {sorted(record)}"
            )


def stepthrough_attention_frame(
    record: dict, stack: str = "encoder", sub: str = "attention"
) -> pd.DataFrame:
    """One row per layer, head and query token of one attention of the record.

    Args:
        record: from ``aiayn.pages.stepthrough.load_stepthrough``.
        stack: ``"encoder"`` or ``"decoder"``.
        sub: ``"attention"`` (encoder), ``"self_attention"`` or ``"cross_attention"`` (decoder).

    Returns:
        Columns ``layer``, ``head`` (from 1), ``token`` (from 0), ``scores`` and ``weights`` (the
        row's q·k, ``None`` where masked, and softmax weights over the keys), ``output`` (W^O's
        output for the token, its first dimensions, on head 1's rows only) and its ``norm``;
        with q, k and v in the record also ``q``, ``k``, ``v``, ``out`` (the head's output) and
        ``w_col`` (the weight each query gives this token as a key).
    """
    _check(record)
    layers = record[stack]["layers"]
    if sub not in layers[0]:
        raise ValueError(
            f"{stack} layers have no {sub!r}; expected one of {sorted(layers[0])}"
        )
    rows = []
    for n, layer in enumerate(layers, start=1):
        a = layer[sub]
        for head, (scores, weights) in enumerate(
            zip(a["scores"], a["weights"], strict=True), start=1
        ):
            for token, (s, w) in enumerate(
                zip(scores, weights, strict=True)
            ):
                row = {"layer": n, "head": head, "token": token, "scores": s, "weights": w,
                       "output": None, "norm": None}  # fmt: skip
                if head == 1:  # the same for every head: kept once
                    row["output"] = a["output"]["first"][token]
                    row["norm"] = a["output"]["norm"][token]
                if "q" in a:
                    i = head - 1
                    row |= {"q": a["q"][i][token], "k": a["k"][i][token], "v": a["v"][i][token],
                            "out": a["heads"][i][token], "w_col": [r[token] for r in weights]}  # fmt: skip
                rows.append(row)
    return pd.DataFrame(rows)


def _step_bars(
    base: alt.Chart,
    keys: list[str],
    d_k: int,
    title: str,
    digits: int,
    cell: int = 26,
) -> alt.LayerChart:
    """Bars over the keys of the chosen query row: the value of the chosen step.

    Its tooltip shows the record's digits: ``digits`` for the weights, one more for the
    scores (and the steps made from them), as ``aiayn.pages.stepthrough`` keeps them.
    """
    k_js = _js(keys)
    value = (
        f"datum.score == null ? (step == 4 ? 0 : null) : step == 1 ? datum.score : "
        f"step < 4 ? datum.score / {d_k**0.5:g} : datum.weight"
    )
    label = (
        "datum.score == null ? (step == 3 ? '−∞' : step == 4 ? '0' : '·') : "
        "format(datum.value, step == 4 ? '.2f' : step == 1 ? '.0f' : '.1f')"
    )
    rows = (
        base.transform_filter(
            "datum.layer == layer && datum.head == head && datum.token == token - 1"
        )
        .transform_flatten(["scores", "weights"], as_=["score", "weight"])
        .transform_window(position="row_number()")
        .transform_calculate(key="datum.position - 1", value=value)
        .transform_calculate(label=label, key_token=f"{k_js}[datum.key]")
        .transform_calculate(
            shown=f"format(datum.value, step < 4 ? '{_digits(digits + 1)}' "
            f": '{_digits(digits)}')"
        )
    )
    x = alt.X(
        "key:O",
        title=None,
        axis=alt.Axis(labelExpr=f"{k_js}[datum.value]", labelAngle=-45),
    )
    bars = rows.mark_bar().encode(
        x=x,
        y=alt.Y("value:Q", title="value at this step"),
        color=alt.condition(
            "datum.value < 0", alt.value("#c0504d"), alt.value("#4472c4")
        ),
        tooltip=[
            alt.Tooltip("key_token:N", title="key"),
            alt.Tooltip("shown:N", title="value"),
        ],
    )
    # the values in a row above the bars
    text = rows.mark_text(baseline="bottom", fontSize=10).encode(
        x=x, y=alt.value(-3), text="label:N"
    )
    steps = _js(ATTENTION_STEPS)
    heading = alt.TitleParams(
        text=alt.expr(f"'{title}, step ' + step + ': ' + {steps}[step - 1]"),
        offset=16,
    )
    return alt.layer(bars, text).properties(
        width=alt.Step(cell), height=120, title=heading
    )


def encoder_attention_steps_chart(
    record: dict, layer: int = 1, head: int = 1, token: int = 2
):
    """The encoder's self-attention of one layer, head and token, step by step.

    Sliders pick the ``layer``, the ``head``, the query ``token`` and the ``step`` of the bars
    (q·k, ÷ √d_k, the mask, the softmax). Panels: q of the token above k of every token (the
    scores are the sums of their products); the chosen step over the keys; each value vector
    times its weight, and their sum, the head's output; the outputs of all heads for the token,
    which Concat lays side by side; W^O's output (the first dimensions).

    Args:
        record: from ``aiayn.pages.stepthrough.load_stepthrough``.
        layer, head, token: where the sliders start (from 1).
    """
    frame = stepthrough_attention_frame(record, "encoder", "attention")
    sizes, source = record["sizes"], record["tokens"]["source"]
    shown = _digits(sizes["digits"])  # tooltips: the record's digits
    s_js = _js(source)
    base = alt.Chart(frame)
    in_head = "datum.layer == layer && datum.head == head"
    diverging = {"scheme": "redblue", "reverse": True, "domainMid": 0}
    flat = (
        base.transform_filter(in_head)
        .transform_flatten(
            ["q", "k", "v", "out"], as_=["qd", "kd", "vd", "od"]
        )
        .transform_window(dim="row_number()", groupby=["token"])
        .transform_calculate(dim="datum.dim - 1")
    )
    qk = (
        flat.transform_fold(["qd", "kd"], as_=["which", "value"])
        .transform_filter("datum.which == 'kd' || datum.token == token - 1")
        .transform_calculate(row="datum.which == 'qd' ? -1 : datum.token")
        .mark_rect()
        .encode(
            x=alt.X(
                "dim:O",
                title="dimension of the head (d_k = 64)",
                axis=alt.Axis(values=[0, 16, 32, 48, 63]),
            ),
            y=alt.Y(
                "row:O",
                title=None,
                axis=alt.Axis(
                    labelExpr=f"datum.value < 0 ? 'q: ' + {s_js}[token - 1] "
                    f": 'k: ' + {s_js}[datum.value]"
                ),
            ),  # fmt: skip
            color=alt.Color(
                "value:Q", scale=alt.Scale(**diverging), title="q, k"
            ),
            tooltip=[
                alt.Tooltip("dim:O"),
                alt.Tooltip("value:Q", format=shown),
            ],
        )
        .properties(
            width=512,
            height=alt.Step(12),
            title="q of the query, k of every token",
        )
    )
    bars = _step_bars(
        base, source, sizes["d_k"], "the scores", sizes["digits"]
    )
    wv = (
        flat.transform_calculate(wv="datum.w_col[token - 1] * datum.vd")
        .transform_fold(["wv", "od"], as_=["which", "value"])
        .transform_filter("datum.which == 'wv' || datum.token == token - 1")
        .transform_calculate(
            row=f"datum.which == 'od' ? {len(source)} : datum.token"
        )
        .mark_rect()
        .encode(
            x=alt.X(
                "dim:O",
                title="dimension of the head (d_v = 64)",
                axis=alt.Axis(values=[0, 16, 32, 48, 63]),
            ),
            y=alt.Y(
                "row:O",
                title=None,
                axis=alt.Axis(
                    labelExpr=f"datum.value == {len(source)} ? '= head output' "
                    f": 'w·v: ' + {s_js}[datum.value]"
                ),
            ),  # fmt: skip
            color=alt.Color(
                "value:Q", scale=alt.Scale(**diverging), title="w·v"
            ),
            tooltip=[
                alt.Tooltip("dim:O"),
                alt.Tooltip("value:Q", format=shown),
            ],
        )
        .properties(
            width=512,
            height=alt.Step(12),
            title="each v times its weight; their sum is the head's output",
        )
    )
    heads = (
        base.transform_filter(
            "datum.layer == layer && datum.token == token - 1"
        )
        .transform_flatten(["out"], as_=["od"])
        .transform_window(dim="row_number()", groupby=["head"])
        .transform_calculate(dim="datum.dim - 1")
        .mark_rect()
        .encode(
            x=alt.X(
                "dim:O",
                title="dimension (Concat puts head i at 64·(i−1) + dimension)",
                axis=alt.Axis(values=[0, 16, 32, 48, 63]),
            ),  # fmt: skip
            y=alt.Y("head:O", title="head"),
            color=alt.Color(
                "od:Q", scale=alt.Scale(**diverging), title="output"
            ),
            opacity=alt.condition(
                "datum.head == head", alt.value(1.0), alt.value(0.45)
            ),
        )
        .properties(
            width=512,
            height=alt.Step(10),
            title="the 8 heads' outputs for the token, side by side",
        )
    )
    w_o = (
        base.transform_filter(
            "datum.layer == layer && datum.head == 1 && datum.token == token - 1"
        )
        .transform_flatten(["output"], as_=["value"])
        .transform_window(dim="row_number()")
        .transform_calculate(dim="datum.dim - 1")
        .mark_bar()
        .encode(
            x=alt.X(
                "dim:O",
                title=f"dimension (the first {sizes['shown']} of {sizes['d_model']})",
            ),
            y=alt.Y("value:Q", title="W^O · Concat"),
            tooltip=[
                alt.Tooltip("dim:O"),
                alt.Tooltip("value:Q", format=shown),
            ],
        )
        .properties(
            width=alt.Step(14),
            height=90,
            title=alt.TitleParams(
                text=alt.expr(
                    f"'W^O mixes the heads: the attention output of ' + {s_js}[token - 1]"
                )
            ),  # fmt: skip
        )
    )
    sliders = [
        _slider("layer", sizes["N"], layer),
        _slider("head", sizes["h"], head),
        _slider("token", len(source), token, "query token"),
        _slider("step", len(ATTENTION_STEPS), 1),
    ]
    chart = (
        alt.vconcat(qk, bars, wv, heads, w_o)
        .add_params(*sliders)
        .resolve_scale(color="independent")
    )
    return chart.properties(
        description=(
            "The published model's encoder self-attention on one test sentence, one layer, head and "
            "query token at a time: q and k, the scores step by step, the weighted values, the heads "
            "and W^O's output."
        )
    )


def add_norm_steps_chart(record: dict, layer: int = 1, token: int = 2):
    """An encoder layer's Add & Norm and feed-forward network for one token, with real numbers.

    Sliders pick the ``layer`` and the ``token``. Panels: the first dimensions of the seven vectors
    of the layer, from its input to its output (a heat map; in layer 1 the token's embedding times
    sqrt(d_model) and its positional encoding above them), their norms (bars), and the
    feed-forward network's largest hidden units with how many of d_ff are above zero.

    Args:
        record: from ``aiayn.pages.stepthrough.load_stepthrough``.
        layer, token: where the sliders start (from 1).
    """
    _check(record)
    sizes, source = record["sizes"], record["tokens"]["source"]
    shown = _digits(sizes["digits"])  # tooltips: the record's digits
    rows = []
    for n, steps in enumerate(record["encoder"]["layers"], start=1):
        embed = record["encoder"]["embed"] if n == 1 else {}
        vectors = {
            "token": embed.get("token"),
            "position": embed.get("position"),
            "input": steps["input"],
            "attention": steps["attention"]["output"],
            "add_1": steps["add_norm_1"]["add"],
            "norm_1": steps["add_norm_1"]["norm"],
            "ffn": steps["feed_forward"]["output"],
            "add_2": steps["add_norm_2"]["add"],
            "norm_2": steps["add_norm_2"]["norm"],
        }
        ffn = steps["feed_forward"]
        for t in range(len(source)):
            row = {"layer": n, "token": t, "units": ffn["units"][t], "acts": ffn["activations"][t],
                   "active": ffn["active"][t]}  # fmt: skip
            for i, (name, _) in enumerate(_LAYER_VECTORS):
                v = vectors[name]
                row[f"v{i}"] = v["first"][t] if v else None
                row[f"n{i}"] = v["norm"][t] if v else None
            rows.append(row)
    frame = pd.DataFrame(rows)
    labels = _js([label for _, label in _LAYER_VECTORS])
    s_js = _js(source)
    base = alt.Chart(frame).transform_filter(
        "datum.layer == layer && datum.token == token - 1"
    )
    names = [f"v{i}" for i in range(len(_LAYER_VECTORS))]
    step_axis = alt.Axis(labelExpr=f"{labels}[datum.value]")
    vectors = (
        base.transform_fold(names, as_=["which", "values"])
        .transform_filter("datum.values != null")  # layer 1's embedding rows
        .transform_flatten(["values"], as_=["value"])
        .transform_window(dim="row_number()", groupby=["which"])
        .transform_calculate(
            dim="datum.dim - 1", step="toNumber(substring(datum.which, 1))"
        )
        .mark_rect()
        .encode(
            x=alt.X(
                "dim:O",
                title=f"dimension (the first {sizes['shown']} of {sizes['d_model']})",
                axis=alt.Axis(values=[0, 8, 16, 24, 31]),
            ),  # fmt: skip
            y=alt.Y("step:O", title=None, axis=step_axis),
            color=alt.Color(
                "value:Q",
                scale=alt.Scale(scheme="redblue", reverse=True, domainMid=0),
                title="value",
            ),
            tooltip=[
                alt.Tooltip("dim:O"),
                alt.Tooltip("value:Q", format=shown),
            ],
        )
        .properties(
            width=alt.Step(11),
            height=alt.Step(16),
            title=alt.TitleParams(
                text=alt.expr(
                    f"'one encoder layer on ' + {s_js}[token - 1] + ', top to bottom'"
                )
            ),
        )
    )
    norms = (
        base.transform_fold(
            [f"n{i}" for i in range(len(_LAYER_VECTORS))],
            as_=["which", "norm"],
        )
        .transform_calculate(step="toNumber(substring(datum.which, 1))")
        .mark_bar()
        .encode(
            y=alt.Y(
                "step:O",
                title=None,
                axis=alt.Axis(labels=False, ticks=False),
            ),
            x=alt.X("norm:Q", title="norm of all 512"),
            tooltip=[alt.Tooltip("norm:Q", format=shown)],
        )
        .properties(width=120, height=alt.Step(16), title="norm")
    )
    bars = (
        base.transform_flatten(["units", "acts"], as_=["unit", "act"])
        .transform_window(rank="row_number()")
        .mark_bar()
        .encode(
            x=alt.X(
                "unit:N",
                sort=alt.EncodingSortField("rank"),
                title=f"hidden unit (of {sizes['d_ff']})",
            ),
            y=alt.Y("act:Q", title="ReLU(y W₁ + b₁)"),
            tooltip=[
                alt.Tooltip("unit:N"),
                alt.Tooltip("act:Q", format=shown),
            ],
        )
    )
    count = (
        base.transform_calculate(
            label=f"datum.active + ' of {sizes['d_ff']} units are above 0'"
        )
        .mark_text(
            x="width", y=0, align="right", baseline="top", fontSize=12
        )
        .encode(text="label:N")
    )
    units = alt.layer(bars, count).properties(
        width=alt.Step(40),
        height=100,
        title=f"the feed-forward network's {sizes['top_units']} largest hidden units",
    )
    chart = alt.vconcat(alt.hconcat(vectors, norms), units).add_params(
        _slider("layer", sizes["N"], layer),
        _slider("token", len(source), token),
    )
    return chart.properties(
        description=(
            "The published model's encoder layer on one token: its input, the attention output, "
            "the residual sum and LayerNorm, the feed-forward output, the second sum and LayerNorm, "
            "as heat maps of the first dimensions with each vector's norm, and the largest hidden "
            "units of the feed-forward network."
        )
    )


def decoder_attention_steps_chart(
    record: dict, layer: int = 1, head: int = 1, token: int = 3
):
    """The decoder's masked self-attention and cross-attention for one target piece, step by step.

    Sliders pick the ``layer``, the ``head``, the target ``token`` (the piece the decoder is
    about to write) and the ``step`` (q·k, ÷ √d_k, the mask, the softmax). Panels: the chosen
    step over the English pieces read so far (masked self-attention: later pieces get −∞, then
    0), over the German pieces (cross-attention: nothing masked), and the model's most likely
    next pieces at that position.

    Args:
        record: from ``aiayn.pages.stepthrough.load_stepthrough``.
        layer, head, token: where the sliders start (from 1).
    """
    _check(record)
    sizes, tokens = record["sizes"], record["tokens"]
    shown = _digits(sizes["digits"])  # tooltips: the record's digits
    out_js = _js(tokens["decoder_out"])
    kept = ["layer", "head", "token", "scores", "weights"]
    self_frame = stepthrough_attention_frame(
        record, "decoder", "self_attention"
    )[kept]
    cross_frame = stepthrough_attention_frame(
        record, "decoder", "cross_attention"
    )[kept]
    d_k = sizes["d_k"]
    self_bars = _step_bars(
        alt.Chart(self_frame),
        tokens["decoder_in"],
        d_k,
        "masked self-attention",
        sizes["digits"],
        cell=24,
    )
    cross_bars = _step_bars(
        alt.Chart(cross_frame),
        tokens["source"],
        d_k,
        "cross-attention to the German",
        sizes["digits"],
        cell=24,
    )
    nxt = record["next"]
    frame = pd.DataFrame(
        {
            "token": range(len(nxt["p"])),
            "pieces": nxt["pieces"],
            "p": nxt["p"],
        }
    )
    following = (
        alt.Chart(frame)
        .transform_filter("datum.token == token - 1")
        .transform_flatten(["pieces", "p"], as_=["piece", "prob"])
        .transform_window(rank="row_number()")
        .mark_bar()
        .encode(
            y=alt.Y(
                "piece:N", sort=alt.EncodingSortField("rank"), title=None
            ),
            x=alt.X(
                "prob:Q",
                title="probability (after the last layer)",
                scale=alt.Scale(domain=[0, 1]),
            ),
            tooltip=[
                alt.Tooltip("piece:N"),
                alt.Tooltip("prob:Q", format=shown),
            ],
        )
        .properties(
            width=300,
            height=alt.Step(14),
            title=alt.TitleParams(
                text=alt.expr(
                    f"'the next piece: it wrote ' + {out_js}[token - 1]"
                )
            ),
        )
    )
    sliders = [
        _slider("layer", sizes["N"], layer),
        _slider("head", sizes["h"], head),
        _slider("token", len(tokens["decoder_out"]), token, "target piece"),
        _slider("step", len(ATTENTION_STEPS), 1),
    ]
    attention = alt.hconcat(self_bars, cross_bars)
    chart = alt.vconcat(attention, following).add_params(*sliders)
    return chart.properties(
        description=(
            "The published model's decoder on its own translation: for one layer, head and target "
            "piece, the masked self-attention and the cross-attention scores step by step, and the "
            "most likely next pieces."
        )
    )
