"""Chapter 8, training: the Noam schedule, training curves, sampling filters."""

from __future__ import annotations

import json

import altair as alt

from ._figures import closed_figure


def noam_schedule_chart(
    max_step: int = 20000,
    n_points: int = 200,
    d_model: int = 512,
    warmup: int = 4000,
    d_model_range: tuple[int, int, int] = (256, 1024, 64),
    warmup_range: tuple[int, int, int] = (500, 8000, 100),
    description: str | None = None,
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
        description: what the chart shows, for screen readers (Vega-Lite's top-level description).
    """
    lo_d, hi_d, _ = d_model_range
    lo_w, hi_w, _ = warmup_range
    if not (
        0 < lo_d <= d_model <= hi_d and 0 < lo_w <= warmup <= hi_w < max_step
    ):
        raise ValueError(
            f"need min <= value <= max for both sliders and warmup below max_step={max_step}, got d_model "
            f"{d_model} in {d_model_range} and warmup {warmup} in {warmup_range}"
        )
    every = max_step / n_points
    d_param = alt.param(
        name="d_model",
        value=d_model,
        bind=alt.binding_range(
            min=lo_d, max=hi_d, step=d_model_range[2], name="d_model "
        ),
    )
    w_param = alt.param(
        name="warmup",
        value=warmup,
        bind=alt.binding_range(
            min=lo_w, max=hi_w, step=warmup_range[2], name="warmup (steps) "
        ),
    )
    top = (
        lo_d**-0.5 * lo_w**-0.5
    )  # the highest peak any slider setting can reach
    y_max = float(f"{top * 1.05:.1e}")
    names = [
        "lrate = min of the two",
        "d_model^-0.5 · step^-0.5",
        "d_model^-0.5 · step · warmup^-1.5",
    ]
    x = alt.X(
        "step:Q",
        title="training step",
        scale=alt.Scale(domain=[0, max_step], nice=False),
    )
    y_scale = alt.Scale(domain=[0, y_max], nice=False)
    curves = (
        alt.Chart(alt.sequence(0, n_points + 1, as_="i"))
        .transform_calculate(step=f"max(1, datum.i * {every})")
        .transform_calculate(
            decay="pow(d_model, -0.5) * pow(datum.step, -0.5)",
            ramp="pow(d_model, -0.5) * datum.step * pow(warmup, -1.5)",
        )
        .transform_calculate(lrate="min(datum.decay, datum.ramp)")
        .transform_fold(
            ["decay", "ramp", "lrate"], as_=["term", "rate"]
        )  # the schedule drawn last, on top
        .transform_calculate(
            curve=f"datum.term == 'lrate' ? '{names[0]}' : datum.term == 'decay' ? '{names[1]}' : '{names[2]}'"
        )
        .mark_line(clip=True)
        .encode(
            x=x,
            y=alt.Y(
                "rate:Q",
                title="learning rate",
                scale=y_scale,
                axis=alt.Axis(format=".1e"),
            ),
            color=alt.Color(
                "curve:N",
                title=None,
                scale=alt.Scale(
                    domain=names, range=["#1f5fa8", "#999999", "#d08c2d"]
                ),
                legend=alt.Legend(
                    orient="bottom", direction="vertical", labelLimit=360
                ),
            ),
            strokeDash=alt.condition(
                "datum.term == 'lrate'", alt.value([1, 0]), alt.value([5, 4])
            ),
            strokeWidth=alt.condition(
                "datum.term == 'lrate'", alt.value(3), alt.value(1.5)
            ),
            tooltip=[
                alt.Tooltip("curve:N", title="curve"),
                alt.Tooltip("step:Q", title="step", format=","),
                alt.Tooltip("rate:Q", title="rate", format=".3e"),
            ],
        )
    )
    peak_data = (
        alt.Chart(alt.sequence(0, 1, as_="i"))
        .transform_calculate(
            step="warmup", rate="pow(d_model, -0.5) * pow(warmup, -0.5)"
        )
        .transform_calculate(
            label="'peak at step ' + datum.step + ': ' + format(datum.rate, '.2e')"
        )
    )
    rule = peak_data.mark_rule(strokeDash=[2, 3], color="#1f5fa8").encode(
        x="step:Q"
    )
    dot = peak_data.mark_point(filled=True, size=70, color="#1f5fa8").encode(
        x=x,
        y=alt.Y("rate:Q", scale=y_scale),
        tooltip=alt.Tooltip("label:N", title=""),
    )
    label = peak_data.mark_text(
        align="left", dx=8, dy=-8, fontSize=11
    ).encode(x=x, y=alt.Y("rate:Q", scale=y_scale), text="label:N")
    return (
        alt.layer(curves, rule, dot, label)
        .add_params(d_param, w_param)
        .properties(
            width=480,
            height=260,
            title="The learning rate of section 5.3 (computed in your browser)",
            description=description
            or (
                "Line chart of the learning rate against the training step: "
                "a linear rise until step warmup, then inverse square-root "
                "decay; sliders set d_model and warmup."
            ),
        )
    )


def training_curves_figure(
    history,
    metric: str | None = None,
    metric_label: str | None = None,
    title: str = "",
):
    """The learning rate, the training loss and (optionally) an evaluation metric against the step.

    Args:
        history: an ``aiayn.training.history.History`` (``step``, ``lr``, ``loss`` and ``evals``).
        metric: a key of the dicts in ``history.evals`` to draw in a third panel (e.g. ``"exact match"``).
        metric_label: the y-axis title of that panel; default: ``metric``.
        title: the figure title.

    Returns:
        A matplotlib Figure (closed), one panel per quantity, sharing the step axis.
    """
    if not history.step:
        raise ValueError(
            "history is empty: train for at least one step first"
        )
    if metric is not None and not any(metric in e for e in history.evals):
        raise ValueError(
            f"no evaluation in history.evals has the metric {metric!r}"
        )
    rows = 2 if metric is None else 3
    fig = closed_figure(7.0, 1.9 * rows + 0.5)
    axes = fig.subplots(rows, 1, sharex=True)
    axes[0].plot(history.step, history.lr, color="#1f5fa8")
    axes[0].set_ylabel("learning rate")
    axes[0].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    axes[1].plot(history.step, history.loss, color="#c0392b", linewidth=1)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("training loss\n(nats/token, log)")
    if metric is not None:
        evals = [e for e in history.evals if metric in e]
        axes[2].plot(
            [e["step"] for e in evals],
            [e[metric] for e in evals],
            marker="o",
            markersize=3,
            color="#2e8b57",
        )
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
    description: str | None = None,
) -> alt.LayerChart:
    """Bars of the distribution a sampler draws from, after temperature, top-k and top-p, with three sliders.

    Computed in the browser in the order of ``aiayn.decoding.search.sample``: the logits are divided by the
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
        description: what the chart shows, for screen readers (Vega-Lite's top-level description).

    Returns:
        A layered Altair chart that owns the ``temperature``, ``top_p`` and ``top_k`` params.
    """
    import pandas as pd

    values = [
        float(v)
        for v in (logits.tolist() if hasattr(logits, "tolist") else logits)
    ]
    labels = [str(label) for label in labels]
    if len(values) != len(labels) or len(values) < 2:
        raise ValueError(
            f"need one logit per label (at least two), got {len(values)} logits and {len(labels)} labels"
        )
    if not 0 < t_min <= t_init <= t_max:
        raise ValueError(
            f"need 0 < t_min <= t_init <= t_max, got {t_min}, {t_init}, {t_max}"
        )
    if not 0.05 <= top_p_init <= 1:
        raise ValueError(
            f"top_p_init must be in [0.05, 1], got {top_p_init}"
        )
    V = len(values)
    data = pd.DataFrame(
        {
            "position": range(V),
            "token": labels,
            "logit": [round(v, 4) for v in values],
        }
    )
    temperature = alt.param(
        name="temperature",
        value=t_init,
        bind=alt.binding_range(
            min=t_min, max=t_max, step=0.05, name="temperature T "
        ),
    )
    top_k = alt.param(
        name="top_k",
        value=V,
        bind=alt.binding_range(min=1, max=V, step=1, name="top-k "),
    )
    top_p = alt.param(
        name="top_p",
        value=top_p_init,
        bind=alt.binding_range(min=0.05, max=1.0, step=0.05, name="top-p "),
    )
    by_probability = [
        {"field": "p", "order": "descending"},
        {"field": "position", "order": "ascending"},
    ]
    base = (
        alt.Chart(data)
        .transform_calculate(z="datum.logit / temperature")
        .transform_joinaggregate(z_max="max(z)")
        .transform_calculate(e="exp(datum.z - datum.z_max)")
        .transform_joinaggregate(e_sum="sum(e)")
        .transform_calculate(p="datum.e / datum.e_sum")
        .transform_window(
            rank="rank()", sort=[{"field": "p", "order": "descending"}]
        )  # ties share a rank
        .transform_calculate(p_in="(datum.rank <= top_k) * datum.p")
        .transform_joinaggregate(k_sum="sum(p_in)")
        .transform_calculate(p_k="datum.p_in / datum.k_sum")
        .transform_window(
            cum_k="sum(p_k)", sort=by_probability, frame=[None, 0]
        )
        .transform_calculate(
            keep="(datum.rank <= top_k) * (datum.cum_k - datum.p_k < top_p)"
        )
        .transform_calculate(q="datum.keep * datum.p")
        .transform_joinaggregate(q_sum="sum(q)")
        .transform_calculate(sampled="datum.q / datum.q_sum")
    )
    x = alt.X(
        "position:O",
        title="next token",
        axis=alt.Axis(
            labelExpr=f"{json.dumps(labels)}[datum.value]", labelAngle=0
        ),
    )
    y_scale = alt.Scale(domain=[0, 1])
    tooltip = [
        alt.Tooltip("token:N", title="token"),
        alt.Tooltip("logit:Q", title="logit", format=".2f"),
        alt.Tooltip("p:Q", title="softmax(logit / T)", format=".3f"),
        alt.Tooltip("sampled:Q", title="sampled with", format=".3f"),
    ]
    before = base.mark_bar(color="#cfcfcf", xOffset=-5, width=12).encode(
        x=x,
        y=alt.Y("p:Q", scale=y_scale, title="probability"),
        tooltip=tooltip,
    )
    after = base.mark_bar(color="#1f5fa8", xOffset=5, width=12).encode(
        x=x, y=alt.Y("sampled:Q", scale=y_scale), tooltip=tooltip
    )
    values_text = (
        base.transform_filter("datum.sampled > 0")
        .mark_text(dy=-6, dx=5, fontSize=10)
        .encode(
            x=x,
            y=alt.Y("sampled:Q", scale=y_scale),
            text=alt.Text("sampled:Q", format=".2f"),
        )
    )
    return (
        alt.layer(before, after, values_text)
        .add_params(temperature, top_p, top_k)
        .properties(
            width=max(300, 44 * V),
            height=220,
            title=title
            or "grey: softmax(logits / T); blue: what the sampler draws from",
            description=description
            or (
                "Bars of next-token probabilities: grey after the temperature, "
                "blue after top-k and top-p, what the sampler draws from."
            ),
        )
    )


__all__ = [
    "noam_schedule_chart",
    "training_curves_figure",
    "sampling_filter_chart",
]
