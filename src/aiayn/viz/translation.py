"""Chapter 11, translating Multi30k: lengths, a run's curves, attention maps, published results."""

from __future__ import annotations

import json

import altair as alt

# The published full run: aiayn/results/<name>.json and <name>.<split>.hyp.en, written on a GPU machine by
# write_published_results from a run folder of aiayn.runs.recipes (config.json, summary.json, results.json).


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
    "ATTENTION_KINDS",
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


# the three kinds of attention a Transformer runs, as Transformer.attention_maps() names them
ATTENTION_KINDS = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "cross-attention",
}


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
    frame,
    tokens,
    labels,
    cell: int = 15,
    decimals: int = 2,
    title: str = "",
    columns: int = 2,
):
    """Heat maps of the three kinds of attention, with a sentence menu and layer and head sliders.

    Everything is chosen in the browser, so the chart works on the static page: the ``sentence``
    menu, the ``layer`` and ``head`` sliders filter the rows of ``frame``; each row's weights are
    unpacked (``flatten``) and numbered to give the keys. The colour is a square root of the
    weight, so that the small weights of a spread-out head still show; masked cells stay blank.
    The panels wrap after ``columns`` of them: the two self-attention maps side by side and the
    cross-attention map below them fit the book's text column (690 px in a 1280 px window) for
    sentences of up to about 18 pieces; three in a row do not.

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
        columns: panels per row.
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
        alt.concat(*panels, columns=columns)
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


# --- The attention of a translation, computed or read back from the published results --------------


def model_attention(model, tokenizer, source: str, translation: str):
    """The attention maps of ``model`` reading ``source`` and re-reading its ``translation``.

    The decoder gets the translation shifted right (teacher forcing), on the explicit attention
    path, which keeps its weights (``Transformer.attention_maps``).

    Returns:
        ``(maps, tokens)``: ``{"encoder": [(1, h, S, S)] * N, "decoder_self": [(1, h, T, T)] * N,
        "cross": [(1, h, T, S)] * N}`` and the pieces ``{"source", "decoder_in", "decoder_out"}``.
    """
    import torch

    from ..attention import set_fused
    from ..data.multi30k import BOS, EOS

    src = torch.tensor([tokenizer.encode(source) + [EOS]])  # (1, S)
    out = tokenizer.encode(translation) + [EOS]  # what it wrote
    tgt_in = torch.tensor([[BOS] + out[:-1]])  # (1, T), shifted right
    was_training = model.training
    model.eval()
    with torch.no_grad(), set_fused(model, False):
        model(src, tgt_in)
        maps = {
            kind: [w.clone() for w in layers]
            for kind, layers in model.attention_maps().items()
        }
    model.train(was_training)
    piece = tokenizer.id_to_piece
    tokens = {
        "source": [piece(i) for i in src[0].tolist()],
        "decoder_in": [piece(i) for i in tgt_in[0].tolist()],
        "decoder_out": [piece(i) for i in out],
    }
    return maps, tokens


def save_attention_examples(path, examples: dict, decimals: int = 3) -> None:
    """Write ``{line: (maps, tokens)}`` as gzipped JSON, weights in units of ``10**-decimals``.

    Chapter 11 reads the file back (``load_attention_examples``) where the published model cannot
    be had; ``python -m aiayn.published attention`` writes it.
    """
    from ..files import write_json_gz

    scale = 10**decimals
    record = {"decimals": decimals, "lines": {}}
    for line, (maps, tokens) in examples.items():
        record["lines"][str(line)] = {
            "tokens": tokens,
            "maps": {
                kind: [
                    (w[0].double() * scale).round().long().tolist()
                    for w in layers
                ]
                for kind, layers in maps.items()
            },
        }
    write_json_gz(path, record, sort_keys=True, ensure_ascii=True)


def load_attention_examples(path) -> dict:
    """``{line: (maps, tokens)}`` from ``save_attention_examples``, weights as float32 tensors."""
    import torch

    from ..files import read_json_gz

    record = read_json_gz(path)
    scale = 10 ** record["decimals"]
    return {
        int(line): (
            {
                kind: [
                    torch.tensor([w], dtype=torch.float32) / scale
                    for w in layers
                ]
                for kind, layers in entry["maps"].items()
            },
            entry["tokens"],
        )
        for line, entry in record["lines"].items()
    }


__all__ += [
    "model_attention",
    "save_attention_examples",
    "load_attention_examples",
]
