"""A lexical shortlist: the English pieces worth scoring for one German sentence.

At every step the decoder's last product, ``generator``, scores all V = 8,000 pieces, though a
caption's translation uses a few dozen, and about half of the shared vocabulary is German that
the decoder never learned to write. Firefox's translator (Bergamot, after Marian) scores only a
shortlist: the pieces most often seen in translations of the sentence's own pieces, and the most
frequent ones. Here both come from the training pairs:

- for each source piece s, the ``top`` target pieces t with the largest Dice coefficient
  ``2·c(s, t) / (c(s) + c(t))``, counting the pairs whose source holds s and target holds t;
- the ``frequent`` target pieces found in the most training targets;
- ``<eos>``.

``targets`` joins them for a sentence, sorted by id, so that the first of equal maxima is the
same piece as over the whole vocabulary. The step graph's ``targets`` input then scores those
rows of ``generator`` only, and the log-softmax runs over them. The search changes: a piece off
the list cannot be written. ``onnx_translator`` and the page (``translator.mjs``'s
``shortlistTargets``) do the same; ``aiayn.export.command`` writes the record as ``shortlist.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..checks import check_int

FORMAT = "aiayn-shortlist/1"
FILE = "shortlist.json"


def build(
    pairs: Iterable[tuple[Sequence[int], Sequence[int]]],
    top: int = 30,
    frequent: int = 300,
) -> dict[str, Any]:
    """The shortlist record of token-id pairs ``(source ids, target ids)``.

    Returns ``{"format", "top", "frequent": [ids], "pieces": {source id: [ids]}}``, each list
    best first (ties by smaller id); ``pieces`` holds only source pieces that occur.

    The counts are taken with NumPy: every (source piece, target piece) of a pair becomes one
    number, ``s · n + t``, and ``np.unique`` counts them (Multi30k's 29,000 pairs make about
    5 million: 2 s where a ``Counter`` took 10 to 18 s).
    """
    check_int("top", top, minimum=1)
    check_int("frequent", frequent, minimum=0)
    sources, targets_ = [], []
    for src, tgt in pairs:  # each pair's pieces, once each
        sources.append(np.unique(np.asarray(src, dtype=np.int64)))
        targets_.append(np.unique(np.asarray(tgt, dtype=np.int64)))
    if not any(len(s) for s in sources):
        raise ValueError("a shortlist needs at least one pair of token ids")
    # ids 0 .. n-1; c(s) and c(t): the pairs whose source (target) holds the piece
    n = 1 + max(int(ids[-1]) for ids in sources + targets_ if len(ids))
    in_source = np.bincount(np.concatenate(sources), minlength=n)
    in_target = np.bincount(np.concatenate(targets_), minlength=n)
    # c(s, t) of every (s, t) seen in a pair, each counted as the number s·n + t
    keys = [
        (s[:, None] * n + t).ravel()
        for s, t in zip(sources, targets_, strict=True)
    ]
    key, both = np.unique(np.concatenate(keys), return_counts=True)
    a, b = np.divmod(key, n)
    dice = 2 * both / (in_source[a] + in_target[b])
    # by source piece, then best first, ties by smaller id
    order = np.lexsort((b, -dice, a))
    a, b = a[order], b[order]
    starts = np.flatnonzero(
        np.diff(a, prepend=-1)
    )  # where a source piece begins
    bounds = np.r_[starts, len(a)]  # and where the last one ends
    seen = np.flatnonzero(in_target)
    # in the most targets first
    best = seen[np.lexsort((seen, -in_target[seen]))]
    return {
        "format": FORMAT,
        "top": top,
        "frequent": best[:frequent].tolist(),
        "pieces": {
            str(a[i]): b[i : min(i + top, end)].tolist()
            for i, end in zip(bounds[:-1], bounds[1:], strict=True)
        },
    }


def targets(
    record: dict[str, Any], src_ids: Sequence[int], eos_id: int
) -> list[int]:
    """The ids the decoder scores for a sentence: its pieces' lists, the frequent ids and
    ``<eos>``, sorted."""
    chosen = {eos_id, *record["frequent"]}
    for i in src_ids:
        chosen.update(record["pieces"].get(str(i), ()))
    return sorted(chosen)


def load(folder: str | os.PathLike) -> dict[str, Any] | None:
    """``folder``'s ``shortlist.json`` read back, or ``None`` when it has none."""
    path = Path(folder) / FILE
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a shortlist of aiayn.export.shortlist: expected format "
            f"{FORMAT!r}, got {record.get('format')!r}"
        )
    return record
