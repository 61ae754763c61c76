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
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

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
    """
    check_int("top", top, minimum=1)
    check_int("frequent", frequent, minimum=0)
    in_source, in_target, both = Counter(), Counter(), Counter()
    for src, tgt in pairs:
        s, t = set(src), set(tgt)
        in_source.update(s)
        in_target.update(t)
        both.update((a, b) for a in s for b in t)
    if not in_source:
        raise ValueError("a shortlist needs at least one pair of token ids")
    dice: dict[int, list[tuple[float, int]]] = {}
    for (a, b), c in both.items():
        score = 2 * c / (in_source[a] + in_target[b])
        dice.setdefault(a, []).append((-score, b))
    best = sorted(in_target, key=lambda b: (-in_target[b], b))
    return {
        "format": FORMAT,
        "top": top,
        "frequent": best[:frequent],
        "pieces": {
            str(a): [b for _, b in sorted(scored)[:top]]
            for a, scored in sorted(dice.items())
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
