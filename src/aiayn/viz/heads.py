"""Chapter 11.2's figure of the heads the model needs: BLEU with each head switched off.

Reads the record ``tools/head_ablation.py`` writes (``results/multi30k.head_ablation.json``):
``results`` holds ``"full"``, ``"head:<kind>:<layer>:<head>"``, ``"layer:<kind>:<layer>"`` and
``"keep_one:<kind>:<layer>"``, layers and heads counted from 0 there and from 1 here.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

__all__ = [
    "KIND_NAMES",
    "head_ablation_frame",
    "layer_ablation_frame",
    "head_ablation_chart",
]

KIND_NAMES = {
    "encoder": "encoder self-attention",
    "decoder_self": "decoder self-attention",
    "cross": "cross-attention",
}


def _entries(record: dict, part: str) -> list[tuple[list[str], dict]]:
    """``[(the key's fields after the part, entry)]`` of one part of the record."""
    if "full" not in record.get("results", {}):
        raise ValueError(
            "record: expected tools/head_ablation.py's JSON with a 'full' "
            "result, got none"
        )
    found = []
    for key, entry in record["results"].items():
        name, *fields = key.split(":")
        if name == part:
            found.append((fields, entry))
    return found


def head_ablation_frame(record: dict) -> pd.DataFrame:
    """One row per head removed alone: ``kind``, ``layer``, ``head`` (from 1), ``bleu``,
    ``change`` (its BLEU minus the full model's), ``changed`` (translations that differ) and
    ``low``, ``high`` (the change's 95 % paired bootstrap interval; ``NaN`` if not measured)."""
    heads = _entries(record, "head")
    full = record["results"]["full"]["bleu"]
    rows = [
        {
            "kind": KIND_NAMES[kind],
            "layer": int(n) + 1,
            "head": int(i) + 1,
            "bleu": entry["bleu"],
            "change": entry["bleu"] - full,
            "changed": entry["changed"],
            "low": entry.get("low", math.nan),
            "high": entry.get("high", math.nan),
        }
        for (kind, n, i), entry in heads
    ]
    columns = [
        "kind",
        "layer",
        "head",
        "bleu",
        "change",
        "changed",
        "low",
        "high",
    ]
    return pd.DataFrame(rows, columns=columns)


def layer_ablation_frame(record: dict) -> pd.DataFrame:
    """One row per kind and layer: the BLEU change with the whole layer removed
    (``without_layer``) and with all heads but one (``one_head``, the head ``kept`` from 1);
    ``NaN`` where the record has no figure yet."""
    parts = {
        column: _entries(record, part)
        for part, column in (
            ("layer", "without_layer"),
            ("keep_one", "one_head"),
        )
    }
    full = record["results"]["full"]["bleu"]
    rows = {}
    for column, entries in parts.items():
        for (kind, n), entry in entries:
            row = rows.setdefault(
                (kind, int(n)),
                {"kind": KIND_NAMES[kind], "layer": int(n) + 1},
            )
            row[column] = entry["bleu"] - full
            if "kept" in entry:
                row["kept"] = entry["kept"] + 1
    columns = ["kind", "layer", "without_layer", "one_head", "kept"]
    order = list(KIND_NAMES)  # encoder, decoder self, cross
    keys = sorted(rows, key=lambda key: (order.index(key[0]), key[1]))
    return pd.DataFrame([rows[key] for key in keys], columns=columns)


def head_ablation_chart(
    frame: pd.DataFrame, title: str = ""
) -> alt.FacetChart:
    """A heat map per kind of attention: layer × head, coloured by the BLEU change.

    Red is a loss, blue a gain, white none; the colour scale is symmetric about 0, and each cell
    is labelled with its change to 0.1 BLEU.

    Args:
        frame: ``head_ablation_frame``'s rows.
        title: the chart's title.
    """
    if frame.empty:
        raise ValueError(
            "frame: expected head_ablation_frame's rows, got none"
        )
    reach = max(float(frame["change"].abs().max()), 0.1)
    order = [k for k in KIND_NAMES.values() if k in set(frame["kind"])]
    base = alt.Chart().encode(
        x=alt.X("head:O", title="head", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("layer:O", title="layer"),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "change:Q",
            title="BLEU change (red: a loss, blue: a gain)",
            scale=alt.Scale(scheme="redblue", domain=[-reach, reach]),
            legend=alt.Legend(
                orient="bottom", gradientLength=300, titleLimit=400
            ),
        ),
        tooltip=[
            "kind:N",
            "layer:O",
            "head:O",
            alt.Tooltip("bleu:Q", format=".2f", title="BLEU without it"),
            alt.Tooltip("change:Q", format="+.2f"),
            alt.Tooltip("low:Q", format="+.2f", title="95 % interval from"),
            alt.Tooltip("high:Q", format="+.2f", title="to"),
            alt.Tooltip("changed:Q", title="translations changed"),
        ],
    )
    labels = base.mark_text(fontSize=10).encode(
        text=alt.Text("change:Q", format="+.1f")
    )
    return (
        alt.layer(cells, labels, data=frame)
        .properties(width=200, height=90)
        .facet(
            column=alt.Column("kind:N", title=None, sort=order),
        )
        .properties(
            title=title,
            description="Heat maps of the BLEU change when one attention "
            "head is switched off, by kind, layer and head.",
        )
    )
