"""Chapter 8.3, decoding: the tree a beam search grew (``aiayn.decoding.trace``), drawn step by step."""

from __future__ import annotations

import altair as alt

__all__ = ["beam_tree_frames", "beam_tree_figure"]

# what each node of the figure is, and how it is drawn
STATUS = {
    "winner": ("#c0392b", 1.0),  # on the path of the translation returned
    "finished": ("#2874a6", 1.0),  # ended in </s>, lost
    "kept": ("#566573", 0.9),  # in the beam at its step
    "pruned": ("#a6acaf", 0.45),  # a candidate that did not make the beam
}


def _label(piece) -> str:
    """A piece as the figure writes it: SentencePiece's word mark dropped."""
    text = str(piece).replace("\u2581", "")
    return text or "\u2423"  # a lone word mark: an open box


def beam_tree_frames(trace: dict) -> tuple[list[dict], list[dict]]:
    """The figure's points and lines: one point per kept node and pruned candidate, one line to each parent.

    Args:
        trace: one tree of ``BeamTrace.trees`` (``readable`` or not), or a record of
            ``tools/beam_trace.py`` (its ``"tree"``).

    Returns:
        ``(points, lines)``: points with ``step``, ``row`` (from 0, top to bottom), ``piece``,
        ``log_p``, ``score``, ``status`` (``winner``, ``finished``, ``kept`` or ``pruned``) and
        ``top`` (the next pieces, as text); lines with ``step``, ``row``, ``parent_step``,
        ``parent_row`` and ``status``.
    """
    tree = trace.get("tree", trace)
    if not isinstance(tree, dict) or not {"nodes", "steps", "winner"} <= set(
        tree
    ):
        got = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
        raise ValueError(
            "trace: expected a BeamTrace tree (nodes, steps, winner) or a record "
            f"holding one under 'tree', got keys {got}"
        )
    nodes = tree["nodes"]
    on_path, node = set(), tree["winner"]
    while node is not None:
        on_path.add(node)
        node = nodes[node]["parent"]

    def status(node: dict) -> str:
        if node["id"] in on_path:
            return "winner"
        return "finished" if node["finished"] else "kept"

    row = {0: 0}  # the row of each node drawn
    root = nodes[0]
    points = [_point(root, 0, status(root))]
    lines = []
    for step, record in enumerate(tree["steps"], start=1):
        new = [n for n in nodes if n["step"] == step]
        items = [(n, status(n)) for n in new]
        items += [(c, "pruned") for c in record["pruned"]]
        # under their parents, best first: few lines cross
        items.sort(key=lambda x: (row[x[0]["parent"]], -x[0]["score"]))
        for r, (item, what) in enumerate(items):
            if what != "pruned":
                row[item["id"]] = r
            points.append(_point(item, step, what, r))
            parent = item["parent"]
            lines.append({
                "step": step, "row": r, "parent_step": step - 1,
                "parent_row": row[parent], "status": what,
            })  # fmt: skip
    return points, lines


def _point(item: dict, step: int, status: str, row: int = 0) -> dict:
    top = " · ".join(f"{_label(p)} {q:.2f}" for p, q in item.get("top", []))
    return {
        "step": step, "row": row, "piece": _label(item["piece"]),
        "log_p": item["log_p"], "score": item["score"], "status": status,
        "top": top or "(not extended)",
    }  # fmt: skip


def beam_tree_figure(
    trace: dict,
    step_width: int = 56,
    row_height: int = 26,
    width: int = 390,
    title: str = "",
) -> alt.LayerChart:
    """Every hypothesis a beam search kept, step by step, with the candidates it pruned faded.

    x is the step (pieces generated), each point a hypothesis labelled by its last piece, a line
    runs to the hypothesis it extends. Red: the path of the translation returned; blue: finished
    (ended in ``</s>``) but beaten; grey: kept at its step; light grey: pruned. The tooltip gives
    log P, the length-penalised score the search ranked by and the five most probable next pieces.
    The figure is ``width`` pixels wide and shows ``width / step_width`` steps: drag it sideways
    (or scroll) to see the others, as on a phone.

    Args:
        trace: as ``beam_tree_frames``.
        step_width, row_height: pixels between steps and between rows.
        width: the figure's width in pixels.
        title: a title above the figure.
    """
    points, lines = beam_tree_frames(trace)
    steps = max(p["step"] for p in points)
    rows = max(p["row"] for p in points) + 1
    shown = min(steps + 0.5, (width - 20) / step_width)
    x_scale = alt.Scale(domain=[-0.5, shown], nice=False, zero=False)
    y_scale = alt.Scale(domain=[-0.7, rows - 0.3], reverse=True, nice=False)
    colors = alt.Scale(
        domain=list(STATUS), range=[c for c, _ in STATUS.values()]
    )
    opacity = alt.Scale(
        domain=list(STATUS), range=[o for _, o in STATUS.values()]
    )
    x = alt.X(
        "step:Q",
        scale=x_scale,
        title="step (pieces generated)",
        axis=alt.Axis(tickMinStep=1, format="d", grid=False),
    )
    y = alt.Y(
        "row:Q",
        scale=y_scale,
        title="hypotheses of the step",
        axis=alt.Axis(labels=False, ticks=False, grid=False),
    )
    # one legend for both channels of the status (Vega-Lite merges the two; a legend on one and
    # none on the other is a conflict it warns about on the reader's console)
    legend = alt.Legend(orient="top", direction="horizontal")
    color = alt.Color(
        "status:N",
        scale=colors,
        title=None,
        sort=list(STATUS),
        legend=legend,
    )
    fade = alt.Opacity(
        "status:N",
        scale=opacity,
        title=None,
        sort=list(STATUS),
        legend=legend,
    )
    edges = (
        alt.Chart(alt.Data(values=lines))
        .mark_rule(clip=True, strokeWidth=1.2)
        .encode(
            x=alt.X("parent_step:Q", scale=x_scale),
            x2="step:Q",
            y=alt.Y("parent_row:Q", scale=y_scale),
            y2="row:Q",
            color=color,
            opacity=fade,
        )
    )
    tooltip = [
        alt.Tooltip("piece:N", title="piece"),
        alt.Tooltip("step:Q", title="step"),
        alt.Tooltip("log_p:Q", title="log P", format=".3f"),
        alt.Tooltip("score:Q", title="log P / lp", format=".3f"),
        alt.Tooltip("status:N", title="hypothesis"),
        alt.Tooltip("top:N", title="next pieces"),
    ]
    base = alt.Chart(alt.Data(values=points)).encode(
        x=x,
        y=y,
        opacity=fade,
        tooltip=tooltip,
    )
    dots = base.mark_circle(size=40, clip=True).encode(color=color)
    labels = base.mark_text(
        clip=True, dy=-9, fontSize=10, baseline="bottom"
    ).encode(text="piece:N", color=color)
    pan = alt.selection_interval(
        bind="scales", encodings=["x"], name="pan_steps"
    )
    chart = (
        alt.layer(edges, dots, labels)
        .add_params(pan)
        .properties(
            width=width - 60,
            height=rows * row_height,
            description=(
                "A beam search as a tree: one column per step, each kept "
                "hypothesis a point labelled by its last piece and joined to "
                "the one it extends; the translation's path in red, finished "
                "hypotheses in blue, pruned candidates faded."
            ),
        )
    )
    return chart.properties(title=title) if title else chart
