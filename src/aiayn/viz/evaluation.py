"""Chapters 9 and 10, BLEU and label smoothing: n-gram matches, worked examples, targets, calibration."""

from __future__ import annotations

import json

import altair as alt

from ._figures import closed_figure

_MATCH_STYLE = {  # chip colours of the BLEU match display: background, border
    "match": ("#c7e9c0", "#31a354"),
    "clipped": ("#fdd0a2", "#e6550d"),
    "miss": ("#eeeeee", "#bbbbbb"),
}
# a chip's kind without its colour: the BLEU calculator's marks (web/bleu_page.mjs)
_MATCH_MARK = {"match": "✓", "clipped": "✓", "miss": "✗"}


def _bleu_ngram_status(
    hyp: list[str], refs: list[list[str]], n: int
) -> list[tuple[str, str]]:
    """For each n-gram of ``hyp`` in order: (text, "match" | "clipped" | "miss"), clipped as BLEU clips.

    An n-gram is credited at most as often as it occurs in the reference that has it most often; its
    first occurrences take the credit, later ones are "clipped". "miss": no reference has it.
    """
    from collections import Counter

    most: Counter = Counter()
    for ref in refs:
        for gram, k in Counter(
            tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)
        ).items():
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


def bleu_match_html(
    hypothesis: str, references, max_order: int = 4, lowercase: bool = False
) -> str:
    """HTML that shows how BLEU scores one hypothesis: every n-gram coloured, then each factor.

    Both sides are tokenized as BLEU does (``tokenize_13a``). For n = 1..max_order, each n-gram of the
    hypothesis is a chip: green when a reference has it, orange when a reference has it but fewer times
    than the hypothesis uses it (the extra copies are clipped), grey when no reference has it. A mark says
    the same without the colour, as the BLEU calculator's chips do: ✓ a match, ✓ ×n → m a clipped copy
    (n in the hypothesis, m credited), ✗ a miss. Then a table gives the modified precisions
    (matches / n-grams), c, r, the brevity penalty and the sentence BLEU of ``aiayn.bleu.sentence_bleu``
    (sacreBLEU's sentence defaults: ``exp`` smoothing, effective order).

    Args:
        hypothesis: one detokenized system output.
        references: one reference string or a list of them.
        max_order: the highest n-gram order.
        lowercase: compare case-insensitively.

    Returns:
        An HTML fragment (a ``<div>``); show it with ``IPython.display.HTML`` or an ``ipywidgets.HTML``.
    """
    import html
    from collections import Counter

    from ..bleu import sentence_bleu, tokenize_13a

    refs = [references] if isinstance(references, str) else list(references)
    if (
        not isinstance(hypothesis, str)
        or not refs
        or not all(isinstance(r, str) for r in refs)
    ):
        raise TypeError(
            "expected a hypothesis str and a reference str (or a non-empty list of str)"
        )

    def tokens(text: str) -> list[str]:
        return tokenize_13a(
            (text.lower() if lowercase else text).rstrip()
        ).split()

    hyp, ref_tokens = tokens(hypothesis), [tokens(r) for r in refs]
    result = sentence_bleu(
        hypothesis, refs, max_order=max_order, lowercase=lowercase
    )
    rows = []
    for n in range(1, max_order + 1):
        chips = []
        statuses = _bleu_ngram_status(hyp, ref_tokens, n)
        count = Counter(text for text, _ in statuses)  # in the hypothesis
        credit = Counter(text for text, s in statuses if s == "match")
        for text, status in statuses:
            background, border = _MATCH_STYLE[status]
            gram = html.escape(text)
            if status == "clipped":  # "✓ the ×3 → 2", the n-gram struck
                gram = (
                    '<s style="text-decoration-thickness:1px">'
                    f"{gram}</s> \u00d7{count[text]} \u2192 {credit[text]}"
                )
            chips.append(
                f'<span title="{status}" style="background:{background};border:1px solid {border};'
                f'border-radius:4px;padding:1px 5px;margin:2px;display:inline-block">'
                f"{_MATCH_MARK[status]}\u202f{gram}</span>"
            )
        matched, total = result.counts[n - 1], result.totals[n - 1]
        label = f"<b>{n}-grams</b> {matched}/{total}"
        rows.append(
            f'<div style="margin:3px 0">{label}: {"".join(chips) or "<i>(none)</i>"}</div>'
        )
    cells = [
        f"p{n} = {m}/{t}"
        for n, (m, t) in enumerate(
            zip(result.counts, result.totals, strict=True), 1
        )
    ]
    factors = (
        " · ".join(cells)
        + f" · c = {result.hyp_len}, r = {result.ref_len} · BP = {result.brevity_penalty:.3f}"
        + f" · <b>sentence BLEU = {result.score:.1f}</b>"
    )
    if any(
        m == 0 < t for m, t in zip(result.counts, result.totals, strict=True)
    ) and any(result.counts):
        factors += " (orders without a match are smoothed: the first gets 1/(2·n-grams), the next 1/(4·n-grams), ...)"
    legend = " ".join(
        f'<span style="background:{_MATCH_STYLE[s][0]};border:1px solid {_MATCH_STYLE[s][1]};'
        f'border-radius:4px;padding:0 5px">{_MATCH_MARK[s]}\u202f{name}</span>'
        for s, name in (
            ("match", "in a reference"),
            ("clipped", "\u00d73 \u2192 2 clipped (used up)"),
            ("miss", "not in a reference"),
        )
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

    from ..bleu import sentence_bleu

    rows = []
    for case, hypothesis, reference in examples:
        r = sentence_bleu(hypothesis, reference, max_order=max_order)
        row = {
            "case": case,
            "hypothesis": hypothesis,
            "reference": reference,
        }
        row.update(
            {
                f"p{n}": f"{m}/{t}"
                for n, (m, t) in enumerate(
                    zip(r.counts, r.totals, strict=True), 1
                )
            }
        )
        row.update(
            {
                "c": r.hyp_len,
                "r": r.ref_len,
                "BP": round(r.brevity_penalty, 3),
                "BLEU": round(r.score, 1),
            }
        )
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
    fig = closed_figure(6.0, 3.2)
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
    ax.set(
        xlabel="length ratio c / r (hypothesis words / reference words)",
        ylabel="brevity penalty BP",
    )
    ax.set_ylim(0, 1.08)
    ax.set_title(
        "Shorter than the references costs a factor; longer costs nothing",
        fontsize=10,
    )
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

    scores = np.clip(
        [float(s) for s in scores], 0, 100
    )  # a perfect sentence can come out as 100.00000000000004
    fig = closed_figure(6.5, 3.2)
    ax = fig.subplots()
    ax.hist(
        scores, bins=bins, range=(0, 100), color="#9ecae1", edgecolor="white"
    )
    ax.axvline(
        scores.mean(),
        color="#3182bd",
        linestyle="--",
        label=f"mean of sentence BLEU = {scores.mean():.1f}",
    )
    ax.axvline(
        corpus_score,
        color="#d6604d",
        linewidth=2,
        label=f"corpus BLEU = {corpus_score:.1f}",
    )
    ax.set(xlabel="sentence BLEU", ylabel="number of sentences")
    ax.set_title(
        f"{len(scores)} sentences: sentence BLEU is spread wide", fontsize=10
    )
    ax.legend(fontsize="small")
    return fig


def label_smoothing_chart(
    classes,
    true_class: str,
    pad_class: str | None = None,
    value: float = 0.1,
    max_value: float = 1.0,
    step: float = 0.01,
    description: str | None = None,
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
        description: what the chart shows, for screen readers (Vega-Lite's top-level description).

    Returns:
        A layered Altair chart that owns the ``eps`` param (and ``convention`` with ``pad_class``).
    """
    import pandas as pd

    classes = [str(c) for c in classes]
    if true_class not in classes or (
        pad_class is not None and pad_class not in classes
    ):
        raise ValueError(
            f"true_class {true_class!r} and pad_class {pad_class!r} must be among the classes {classes}"
        )
    if (
        pad_class == true_class
        or len(set(classes)) != len(classes)
        or len(classes) < 3
    ):
        raise ValueError(
            f"need at least 3 distinct classes and pad_class != true_class, got {classes}"
        )
    if not 0 <= value <= max_value <= 1:
        raise ValueError(
            f"need 0 <= value <= max_value <= 1, got {value} and {max_value}"
        )
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
        name="eps",
        value=value,
        bind=alt.binding_range(
            min=0, max=max_value, step=step, name="ε (label smoothing) "
        ),
    )
    params = [eps]
    pytorch = f"(1 - eps) * datum.is_true + eps / {C}"
    target = pytorch
    if pad_class is not None:
        options = [
            "all C classes (PyTorch)",
            "C − 2 classes (Annotated Transformer)",
        ]
        convention = alt.param(
            name="convention",
            value=options[0],
            bind=alt.binding_radio(options=options, name="spread ε over "),
        )
        params.append(convention)
        annotated = (
            f"datum.is_pad ? 0 : (datum.is_true ? 1 - eps : eps / {C - 2})"
        )
        target = f"convention == '{options[0]}' ? {pytorch} : ({annotated})"
    labels = json.dumps(classes)
    x = alt.X(
        "position:O",
        title=f"class (token); C = {C}",
        axis=alt.Axis(labelExpr=f"{labels}[datum.value]", labelAngle=0),
    )
    y = alt.Y(
        "target:Q",
        title="target probability y'",
        scale=alt.Scale(domain=[0, 1]),
    )
    base = alt.Chart(data).transform_calculate(target=target)
    bars = base.mark_bar().encode(
        x=x,
        y=y,
        color=alt.condition(
            "datum.is_true == 1", alt.value("#e6550d"), alt.value("#4c78a8")
        ),
        tooltip=[
            alt.Tooltip("token:N"),
            alt.Tooltip("target:Q", format=".4f"),
        ],
    )
    values = base.mark_text(dy=-6, fontSize=11).encode(
        x=x, y=y, text=alt.Text("target:Q", format=".3f")
    )
    uniform = (
        alt.Chart(pd.DataFrame({"u": [1 / C]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(y="u:Q")
    )
    return (
        alt.layer(uniform, bars, values)
        .add_params(*params)
        .properties(
            title=f'Training target when the next token is "{true_class}" (orange); dashed: uniform 1/C',
            width=max(300, 52 * C),
            height=230,
            description=description
            or (
                f"Bar chart of the smoothed training target over {C} tokens "
                f"when the next token is {true_class}; a slider sets epsilon."
            ),
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
    fig = closed_figure(6.5, 3.6)
    ax = fig.subplots()
    for eps in eps_values:
        a = 1 - eps + eps / C
        rest = (1 - a) * np.log((1 - p) / (C - 1)) if eps > 0 else 0.0
        loss = -a * np.log(p) - rest
        (line,) = ax.plot(p, loss, linewidth=2, label=f"ε = {eps:g}")
        if eps > 0:
            best = -a * np.log(a) - (1 - a) * np.log((1 - a) / (C - 1))
            ax.plot([a], [best], "o", color=line.get_color())
            ax.annotate(
                f"min at p = {a:.3f}",
                (a, best),
                textcoords="offset points",
                xytext=(-95, 12),
                fontsize=9,
            )
    ax.set_ylim(0, 3)
    ax.set(
        xlabel="p(true class), the model's confidence in the right token",
        ylabel="loss (nats per token)",
    )
    ax.set_title(
        f"Smoothed cross-entropy against confidence (C = {C})", fontsize=10
    )
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def reliability_figure(
    results: dict, title: str = "Reliability on held-out data"
):
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

    fig = closed_figure(4.2 * len(results), 5.6)
    axes = fig.subplots(
        2,
        len(results),
        squeeze=False,
        height_ratios=[2.2, 1],
        sharex=True,
        sharey="row",
    )
    for k, (label, bins) in enumerate(results.items()):
        edges = bins.edges.numpy()
        width = edges[1] - edges[0]
        filled = bins.count.numpy() > 0
        left, acc, conf = (
            edges[:-1][filled],
            bins.accuracy.numpy()[filled],
            bins.confidence.numpy()[filled],
        )
        top, low = axes[0, k], axes[1, k]
        top.bar(
            left,
            acc,
            width=width,
            align="edge",
            color="#4c78a8",
            edgecolor="white",
            label="accuracy",
        )
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
        top.plot(
            [0, 1],
            [0, 1],
            "--",
            color="gray",
            linewidth=1,
            label="calibrated",
        )
        top.set(xlim=(0, 1), ylim=(0, 1))
        top.set_title(f"{label}: ECE = {bins.ece:.3f}", fontsize=10)
        top.legend(fontsize="x-small", loc="upper left")
        low.bar(
            edges[:-1],
            bins.weight.numpy(),
            width=width,
            align="edge",
            color="#9ecae1",
            edgecolor="white",
        )
        low.set(xlabel="confidence (largest probability)")
    axes[0, 0].set_ylabel("accuracy in the bin")
    axes[1, 0].set_ylabel("share of predictions")
    fig.suptitle(title, fontsize=11)
    return fig


__all__ = [
    "bleu_match_html",
    "bleu_table",
    "brevity_penalty_figure",
    "sentence_bleu_histogram",
    "label_smoothing_chart",
    "smoothing_loss_figure",
    "reliability_figure",
]
