"""Chapter 11, translating Multi30k: lengths, a run's curves, attention maps, published results."""

from __future__ import annotations

import json

import altair as alt

from ._figures import _closed_figure


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
        raise ValueError(
            "panels: expected {panel title: {label: lengths}} with at least one label per panel"
        )
    fig = _closed_figure(4.2 * len(panels), 3.2)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (unit, series) in zip(axes, panels.items(), strict=True):
        arrays = {
            label: np.asarray(list(lengths), dtype=float)
            for label, lengths in series.items()
        }
        empty = [
            label for label, values in arrays.items() if values.size == 0
        ]
        if empty:
            raise ValueError(f"panel {unit!r}: no lengths for {empty[0]!r}")
        bins = np.arange(
            0.5, max(values.max() for values in arrays.values()) + 1.5
        )  # one bin per length
        for label, values in arrays.items():
            ax.hist(
                values,
                bins=bins,
                histtype="step",
                linewidth=1.5,
                label=f"{label} (mean {values.mean():.1f})",
            )
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
        top.plot(
            x,
            [r["val_loss"] for r in evals],
            marker="o",
            color="#1f5fa8",
            label="validation loss",
        )
        bottom.plot(
            x, [r["val_ppl"] for r in evals], marker="o", color="#2e8b57"
        )
        for r in (
            evals if len(evals) <= 8 else [evals[0], evals[-1]]
        ):  # a long run: the first and the last
            bottom.annotate(f"{r['val_ppl']:.1f}", (r["step"], r["val_ppl"]), textcoords="offset points",
                            xytext=(0, 6), ha="center", fontsize=8)  # fmt: skip
    bottom.set_yscale("log")
    ppl = [r["val_ppl"] for r in evals] or [1.0]
    narrow = (
        max(ppl) / min(ppl) < 10
    )  # within a decade every tick gets a number, else only 2s and 5s
    bottom.yaxis.set_major_formatter(
        FuncFormatter(lambda v, _: f"{v:g}")
    )  # 80, not 8 × 10^1
    bottom.yaxis.set_minor_formatter(
        FuncFormatter(
            lambda v, _: f"{v:g}" if narrow or f"{v:g}"[0] in "25" else ""
        )
    )
    top.set_ylabel("loss (nats per token)")
    top.legend(fontsize="small")
    bottom.set(
        xlabel="optimizer step", ylabel="validation perplexity\n(log scale)"
    )
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


def attention_maps_frame(
    maps: dict,
    batch_index: int = 0,
    decimals: int = 3,
    drop_masked: bool = True,
):
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
        raise ValueError(
            f"maps: unknown kinds {unknown}; expected some of {list(ATTENTION_KINDS)}"
        )
    frames = []
    for kind, layers in maps.items():
        for n, weights in enumerate(layers, start=1):
            if weights.dim() != 4:
                raise ValueError(
                    f"{kind} layer {n}: expected (B, h, L_q, L_k) weights, got {tuple(weights.shape)}"
                )
            w = weights[batch_index].detach().float().cpu()  # (h, L_q, L_k)
            h, L_q, L_k = w.shape
            cells = [range(1, h + 1), range(L_q), range(L_k)]
            index = pd.MultiIndex.from_product(
                cells, names=["head", "query", "key"]
            )
            flat = w.reshape(-1).numpy()
            part = pd.DataFrame(
                {"weight": flat.round(decimals)}, index=index
            ).reset_index()
            if drop_masked:
                part = part[flat != 0.0]
            frames.append(part.assign(kind=kind, layer=n))
    if not frames:
        raise ValueError("maps: no attention weights given")
    return pd.concat(frames, ignore_index=True)[
        ["kind", "layer", "head", "query", "key", "weight"]
    ]


def attention_maps_chart(
    frame,
    src_tokens,
    tgt_tokens,
    cell: int = 13,
    max_rows: int = 5000,
    title: str = "",
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
    src_tokens, tgt_tokens = (
        [str(t) for t in src_tokens],
        [str(t) for t in tgt_tokens],
    )
    tokens = {"encoder": (src_tokens, src_tokens), "decoder_self": (tgt_tokens, tgt_tokens),
              "cross": (tgt_tokens, src_tokens)}  # fmt: skip
    kinds = [k for k in ATTENTION_KINDS if k in set(frame["kind"])]
    if not kinds:
        raise ValueError(
            f"frame: no rows of the kinds {list(ATTENTION_KINDS)}"
        )
    N, h = int(frame["layer"].max()), int(frame["head"].max())
    layer = alt.param(
        name="layer",
        value=N,
        bind=alt.binding_range(min=1, max=N, step=1, name="layer "),
    )
    head = alt.param(
        name="head",
        value=1,
        bind=alt.binding_range(min=1, max=h, step=1, name="head "),
    )
    scale = alt.Scale(type="sqrt", domain=[0, 1], scheme="blues")
    legend = alt.Legend(
        orient="bottom", direction="horizontal", gradientLength=160
    )
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
            .transform_calculate(
                query_token=f"{q_json}[datum.query]",
                key_token=f"{k_json}[datum.key]",
            )
            .mark_rect()
            .encode(
                x=alt.X("key:O", title="key (attended to)", axis=x_axis),
                y=alt.Y("query:O", title=None, axis=y_axis),
                color=alt.Color(
                    "weight:Q",
                    title="weight (√ scale)",
                    scale=scale,
                    legend=legend,
                ),
                tooltip=[
                    alt.Tooltip("query_token:N", title="query"),
                    alt.Tooltip("key_token:N", title="key"),
                    alt.Tooltip("weight:Q", title="weight", format=".3f"),
                ],
            )
            .properties(
                title=ATTENTION_KINDS[kind],
                width=cell * len(keys),
                height=cell * len(queries),
            )
        )
    chart = (
        alt.hconcat(*panels)
        .add_params(layer, head)
        .resolve_scale(color="shared")
    )
    return chart.properties(title=title) if title else chart


# The published full run: book/results/<name>.json and <name>.<split>.hyp.en, written on a GPU machine by
# write_published_results from a run folder of aiayn.recipes (config.json, summary.json, results.json).

PUBLISHED_KEYS = (
    "name",
    "measured_at",
    "device_name",
    "torch",
    "config",
    "train",
    "split",
    "test",
    "hypotheses",
)


def write_published_results(
    run_dir,
    results_dir,
    name: str | None = None,
    split: str = "test2016",
    measured_at: str | None = None,
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
    needed = [
        "config.json",
        "summary.json",
        "results.json",
        f"{split}.hyp.en",
    ]
    missing = [f for f in needed if not (run / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{run} lacks {missing}: train it (python -m aiayn.train) and evaluate it "
            f"(python -m aiayn.evaluate {run} --split {split}) first"
        )
    config = json.loads((run / "config.json").read_text())
    summary = {
        k: v
        for k, v in json.loads((run / "summary.json").read_text()).items()
        if k != "out_dir"
    }
    results = json.loads((run / "results.json").read_text())
    if split not in results:
        raise ValueError(
            f"{run / 'results.json'} has no scores for {split!r} (it has {sorted(results)})"
        )
    name = name or config["name"]
    hyp_name = f"{name}.{split}.hyp.en"
    when = (
        measured_at
        or datetime.datetime.now(datetime.timezone.utc)
        .replace(microsecond=0)
        .isoformat()
    )
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
        raise ValueError(
            f"{path} lacks {missing}: write it with aiayn.viz.write_published_results"
        )
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
    return pd.DataFrame(
        {"value": list(rows.values())},
        index=pd.Index(list(rows), name="quantity"),
    )


def rescore_hypotheses(hypotheses_path, references) -> dict:
    """Score a file of translations (one per line) against references with our BLEU and with sacreBLEU.

    Args:
        hypotheses_path: a ``.hyp.en`` file as written by ``recipes.evaluate``.
        references: one reference string per line of the file, in order.

    Returns:
        ``{"sentences", "bleu", "bleu_detail", "sacrebleu", "signature"}`` (the last two ``None`` without sacreBLEU).
    """
    from pathlib import Path

    from ..bleu import corpus_bleu

    lines = Path(hypotheses_path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline
    references = list(references)
    if len(lines) != len(references):
        raise ValueError(
            f"{hypotheses_path} has {len(lines)} lines but {len(references)} references were given"
        )
    ours = corpus_bleu(lines, references)
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        sacre, signature = None, None
    else:
        bleu = BLEU()
        sacre, signature = (
            bleu.corpus_score(lines, [references]).score,
            str(bleu.get_signature()),
        )
    return {"sentences": len(lines), "bleu": ours.score, "bleu_detail": str(ours), "sacrebleu": sacre,
            "signature": signature}  # fmt: skip


__all__ = [
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


# --- The published run: curves, every head of the trained model, and where it goes wrong ----------


def published_curves_chart(train, val, title: str = "") -> alt.VConcatChart:
    """Training and validation curves of a published run, each panel zoomable along the steps.

    Three panels share the step axis: the losses (training, label-smoothed, as means over windows
    of steps; validation, plain cross-entropy, after each epoch), the validation perplexity on a
    log scale, and the learning rate. Dragging pans and the mouse wheel zooms a panel's steps.

    Args:
        train: rows with ``step``, ``loss``, ``lr`` (e.g. ``book/results/multi30k.train.csv``).
        val: rows with ``step``, ``val_loss``, ``val_ppl`` (``multi30k.val.csv``).
        title: the chart title.
    """
    import pandas as pd

    train, val = pd.DataFrame(train), pd.DataFrame(val)
    for frame, need in (
        (train, {"step", "loss", "lr"}),
        (val, {"step", "val_loss", "val_ppl"}),
    ):
        if not need <= set(frame.columns):
            raise ValueError(
                f"expected columns {sorted(need)}, got {list(frame.columns)}"
            )
    x = alt.X("step:Q", title="optimizer step")
    losses = pd.concat(
        [
            train.assign(curve="training (label-smoothed)")[
                ["step", "loss", "curve"]
            ],
            val.rename(columns={"val_loss": "loss"}).assign(
                curve="validation"
            )[["step", "loss", "curve"]],
        ]
    )
    width = 560
    colour = alt.Color(
        "curve:N",
        title=None,
        legend=alt.Legend(orient="top-right"),
        scale=alt.Scale(range=["#c0392b", "#1f5fa8"]),
    )
    top = (
        alt.Chart(losses)
        .mark_line(point=alt.OverlayMarkDef(size=12), strokeWidth=1.2)
        .encode(
            x=x,
            y=alt.Y("loss:Q", title="loss (nats per token)"),
            color=colour,
            tooltip=[
                "curve:N",
                "step:Q",
                alt.Tooltip("loss:Q", format=".3f"),
            ],
        )
        .properties(width=width, height=190)
        .add_params(_zoom("zoom_loss"))
    )
    middle = (
        alt.Chart(val)
        .mark_line(point=True, color="#2e8b57")
        .encode(
            x=x,
            y=alt.Y(
                "val_ppl:Q",
                title="validation perplexity",
                scale=alt.Scale(type="log"),
            ),
            tooltip=["step:Q", alt.Tooltip("val_ppl:Q", format=".2f")],
        )
        .properties(width=width, height=130)
        .add_params(_zoom("zoom_ppl"))
    )
    bottom = (
        alt.Chart(train)
        .mark_line(color="#7d3c98")
        .encode(
            x=x,
            y=alt.Y(
                "lr:Q", title="learning rate", axis=alt.Axis(format=".1e")
            ),
            tooltip=["step:Q", alt.Tooltip("lr:Q", format=".2e")],
        )
        .properties(width=width, height=110)
        .add_params(_zoom("zoom_lr"))
    )
    chart = alt.vconcat(top, middle, bottom).properties(
        description=(
            "Three panels over the optimizer steps of the published run: training and validation "
            "loss falling, validation perplexity falling on a log scale, and the learning rate "
            "rising during warmup then decaying."
        )
    )
    return chart.properties(title=title) if title else chart


def _zoom(name: str):
    """Drag to pan and wheel to zoom the steps of one panel."""
    return alt.selection_interval(bind="scales", encodings=["x"], name=name)


def attention_explorer_frame(examples, decimals: int = 2):
    """The attention weights of several sentences as one compact table, one row per query.

    Args:
        examples: a list of ``Transformer.attention_maps()`` results, one sentence each (batch of 1):
            ``{"encoder": [(1, h, S, S)] * N, "decoder_self": [(1, h, T, T)] * N, "cross": [(1, h, T, S)] * N}``.
        decimals: the weights are stored as integers in units of ``10**-decimals`` (2: percent),
            which keeps the page small; masked cells (weight exactly 0) are stored as -1.

    Returns:
        A ``pandas.DataFrame`` with columns ``sentence`` (from 0), ``kind``, ``layer``, ``head`` (from
        1), ``query`` (from 0) and ``w``, the list of the row's weights over the keys.
    """
    import pandas as pd

    if not examples:
        raise ValueError(
            "examples: expected at least one sentence's attention maps"
        )
    scale = 10**decimals
    rows = []
    for s, maps in enumerate(examples):
        unknown = sorted(set(maps) - set(ATTENTION_KINDS))
        if unknown:
            raise ValueError(
                f"sentence {s}: unknown kinds {unknown}; expected {list(ATTENTION_KINDS)}"
            )
        for kind, layers in maps.items():
            for n, weights in enumerate(layers, start=1):
                if weights.dim() != 4 or weights.size(0) != 1:
                    raise ValueError(
                        f"sentence {s}, {kind} layer {n}: expected (1, h, L_q, L_k) weights, "
                        f"got {tuple(weights.shape)}"
                    )
                w = weights[0].detach().double().cpu()  # (h, L_q, L_k)
                stored = (w * scale).round().long().where(w != 0, -1)
                for head in range(w.size(0)):
                    for q in range(w.size(1)):
                        rows.append(
                            (
                                s,
                                kind,
                                n,
                                head + 1,
                                q,
                                stored[head, q].tolist(),
                            )
                        )
    return pd.DataFrame(
        rows, columns=["sentence", "kind", "layer", "head", "query", "w"]
    )


def attention_explorer_chart(
    frame, tokens, labels, cell: int = 15, decimals: int = 2, title: str = ""
):
    """Heat maps of the three kinds of attention, with a sentence menu and layer and head sliders.

    Everything is chosen in the browser, so the chart works on the static page: the ``sentence``
    menu, the ``layer`` and ``head`` sliders filter the rows of ``frame``; each row's weights are
    unpacked (``flatten``) and numbered to give the keys. The colour is a square root of the
    weight, so that the small weights of a spread-out head still show; masked cells stay blank.

    Args:
        frame: from ``attention_explorer_frame``.
        tokens: per sentence, ``{"source": [...S], "decoder_in": [...T], "decoder_out": [...T]}``:
            the source pieces (keys of the encoder and of cross-attention), the decoder's input
            pieces (keys of its self-attention) and the pieces it writes (the rows of both decoder
            panels: row i is where the decoder looked while writing piece i).
        labels: one menu label per sentence.
        cell: side of a cell in pixels.
        decimals: as given to ``attention_explorer_frame``.
        title: the chart title.
    """
    n = int(frame["sentence"].max()) + 1
    if len(tokens) != n or len(labels) != n:
        raise ValueError(
            f"frame holds {n} sentences, but {len(tokens)} token sets and {len(labels)} labels came"
        )
    for s, tok in enumerate(tokens):
        lengths = (
            frame[frame["sentence"] == s].groupby("kind")["query"].max() + 1
        )
        for kind, (q_name, _) in _EXPLORER_AXES.items():
            if kind in lengths and lengths[kind] != len(tok[q_name]):
                raise ValueError(
                    f"sentence {s}: {kind} has {lengths[kind]} queries but {len(tok[q_name])} {q_name} tokens"
                )
    N, h = int(frame["layer"].max()), int(frame["head"].max())
    sentence = alt.param(
        name="sentence",
        value=0,
        bind=alt.binding_select(
            options=list(range(n)), labels=list(labels), name="sentence "
        ),
    )
    layer = alt.param(
        name="layer",
        value=N,
        bind=alt.binding_range(min=1, max=N, step=1, name="layer "),
    )
    head = alt.param(
        name="head",
        value=1,
        bind=alt.binding_range(min=1, max=h, step=1, name="head "),
    )
    scale = alt.Scale(type="sqrt", domain=[0, 1], scheme="blues")
    legend = alt.Legend(
        orient="bottom", direction="horizontal", gradientLength=160
    )
    base = alt.Chart(frame)
    panels = []
    for kind, (q_name, k_name) in _EXPLORER_AXES.items():
        if kind not in set(frame["kind"]):
            continue
        q_json = json.dumps([t[q_name] for t in tokens], ensure_ascii=False)
        k_json = json.dumps([t[k_name] for t in tokens], ensure_ascii=False)
        panels.append(
            base.transform_filter(
                f"datum.kind == '{kind}' && datum.sentence == sentence && datum.layer == layer "
                "&& datum.head == head"
            )
            .transform_flatten(["w"], as_=["stored"])
            .transform_window(position="row_number()", groupby=["query"])
            .transform_filter("datum.stored >= 0")
            .transform_calculate(
                key="datum.position - 1",
                weight=f"datum.stored / {10**decimals}",
                query_token=f"{q_json}[sentence][datum.query]",
                key_token=f"{k_json}[sentence][datum.position - 1]",
            )
            .mark_rect()
            .encode(
                x=alt.X(
                    "key:O",
                    title=_EXPLORER_TITLES[kind][1],
                    axis=alt.Axis(
                        labelExpr=f"{k_json}[sentence][datum.value]",
                        labelAngle=-60,
                    ),
                ),
                y=alt.Y(
                    "query:O",
                    title=_EXPLORER_TITLES[kind][0],
                    axis=alt.Axis(
                        labelExpr=f"{q_json}[sentence][datum.value]"
                    ),
                ),
                color=alt.Color(
                    "weight:Q",
                    title="weight (√ scale)",
                    scale=scale,
                    legend=legend,
                ),
                tooltip=[
                    alt.Tooltip("query_token:N", title="row"),
                    alt.Tooltip("key_token:N", title="key"),
                    alt.Tooltip("weight:Q", format=".2f"),
                ],
            )
            .properties(
                title=ATTENTION_KINDS[kind],
                width=alt.Step(cell),
                height=alt.Step(cell),
            )
        )
    chart = (
        alt.hconcat(*panels)
        .add_params(sentence, layer, head)
        .resolve_scale(color="shared")
    )
    chart = chart.properties(
        description=(
            f"Heat maps of encoder self-attention, decoder self-attention and cross-attention of the "
            f"trained model on {n} test sentences, one layer and head at a time, chosen with a menu "
            "and two sliders; darker cells carry more weight."
        )
    )
    return chart.properties(title=title) if title else chart


# rows and keys of each panel: which token list labels them
_EXPLORER_AXES = {
    "encoder": ("source", "source"),
    "decoder_self": ("decoder_out", "decoder_in"),
    "cross": ("decoder_out", "source"),
}
_EXPLORER_TITLES = {
    "encoder": ("German piece", "German piece (attended to)"),
    "decoder_self": (
        "English piece being written",
        "English piece before it",
    ),
    "cross": ("English piece being written", "German piece (attended to)"),
}


def sentence_bleu_frame(sources, hypotheses, references):
    """Sentence-level BLEU of every translation, with the source length, for an error analysis.

    Args:
        sources, hypotheses, references: one string per sentence, aligned.

    Returns:
        A ``pandas.DataFrame`` indexed by the sentence's line (from 0) with ``German``,
        ``reference``, ``translation``, ``words`` (German words) and ``bleu`` (sacreBLEU's
        sentence BLEU with exponential smoothing, ``aiayn.bleu.sentence_bleu``).
    """
    import pandas as pd

    from ..bleu import sentence_bleu

    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(
            f"expected aligned lists, got {len(sources)} sources, {len(hypotheses)} translations "
            f"and {len(references)} references"
        )
    return pd.DataFrame(
        {
            "German": list(sources),
            "reference": list(references),
            "translation": list(hypotheses),
            "words": [len(s.split()) for s in sources],
            "bleu": [
                sentence_bleu(h, r).score
                for h, r in zip(hypotheses, references, strict=True)
            ],
        }
    ).rename_axis("line")


def bleu_histogram_chart(scores, bin_width: int = 5) -> alt.Chart:
    """How many sentences reach each sentence-BLEU band (bars counted in Python, exact).

    Args:
        scores: sentence BLEU values in [0, 100].
        bin_width: width of a band.
    """
    import pandas as pd

    values = list(scores)
    bands = [min(int(v // bin_width), 100 // bin_width - 1) for v in values]
    counts = (
        pd.Series(bands)
        .value_counts()
        .reindex(range(100 // bin_width), fill_value=0)
    )
    data = pd.DataFrame(
        {"start": counts.index * bin_width, "sentences": counts.to_numpy()}
    )
    data["end"] = data["start"] + bin_width
    return (
        alt.Chart(data)
        .mark_bar(color="#1f5fa8")
        .encode(
            x=alt.X(
                "start:Q",
                bin="binned",
                title="sentence BLEU",
                scale=alt.Scale(domain=[0, 100]),
            ),
            x2="end:Q",
            y=alt.Y("sentences:Q", title="sentences"),
            tooltip=[
                alt.Tooltip("start:Q", title="from"),
                alt.Tooltip("end:Q", title="to"),
                "sentences:Q",
            ],
        )
        .properties(
            width=520,
            height=200,
            description=f"Histogram of the sentence BLEU of {len(values)} test translations in bands of {bin_width}.",
        )
    )


def bleu_by_length_chart(table) -> alt.Chart:
    """Corpus BLEU per band of source length, with the number of sentences in each.

    Args:
        table: rows with ``band`` (a label such as ``"1-8"``), ``bleu`` and ``sentences``.
    """
    import pandas as pd

    data = pd.DataFrame(table)
    order = list(data["band"])
    return (
        alt.Chart(data)
        .mark_bar(color="#2e8b57")
        .encode(
            x=alt.X(
                "band:O",
                title="German words in the source",
                sort=order,
                axis=alt.Axis(labelAngle=0),
            ),
            y=alt.Y("bleu:Q", title="corpus BLEU of the band"),
            tooltip=[
                "band:N",
                alt.Tooltip("bleu:Q", format=".1f"),
                "sentences:Q",
            ],
        )
        .properties(
            width=420,
            height=200,
            description="Bars of corpus BLEU for test sentences grouped by their German length.",
        )
    )


__all__ += [
    "published_curves_chart",
    "attention_explorer_frame",
    "attention_explorer_chart",
    "sentence_bleu_frame",
    "bleu_histogram_chart",
    "bleu_by_length_chart",
]
