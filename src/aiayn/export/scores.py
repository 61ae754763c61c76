"""The BLEU the page's files earn: ``score_files`` is what ``python -m aiayn.export`` records in
the manifest, ``masked_bleu`` what the page's head grid prints (``maskedBleu`` in translator.mjs).
Both translate with the page's search in Python (``aiayn.export.translator``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .translator import (
    OnnxModel,
    Vocabulary,
    detokenize,
    load_settings,
    load_shortlist,
    source_ids,
    translate,
    translate_ids,
)


def score_files(
    folder: str | os.PathLike,
    pairs: Sequence[tuple[str, str]],
    int8: bool = True,
    beams: Sequence[int] = (1, 4),
    workers: int = 2,
    progress: bool = False,
    shortlisted: bool = True,
    head_mask: Any = None,
) -> dict[str, Any]:
    """sacreBLEU of the graphs in ``folder`` on ``pairs``, for each beam size; and the outputs.

    With the folder's shortlist when it has one, the search the page runs when the reader switches
    the shortlist on (``shortlisted=False``: every id scored, the page's default; the two differ
    by at most 0.2 BLEU on test2016, ``results/multi30k.translator.json``). ``progress``: a bar over
    the sentences of each beam size. ``head_mask``: as ``greedy``'s.
    """
    from sacrebleu.metrics import BLEU

    folder = Path(folder)
    settings = load_settings(folder)
    model, vocab = OnnxModel(folder, int8), Vocabulary.load(folder)
    shortlist = load_shortlist(folder, vocab) if shortlisted else None
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    scores = {}
    for beam in beams:
        started = time.perf_counter()
        name = f"{'int8' if int8 else 'fp32'} beam{beam}"
        hypotheses = translate(
            model, vocab, sources, settings, beam, workers, progress, name,
            shortlist, head_mask,
        )  # fmt: skip
        bleu = BLEU()
        scores[f"beam{beam}"] = {
            "bleu": round(
                bleu.corpus_score(hypotheses, [references]).score, 2
            ),
            "signature": str(bleu.get_signature()),
            "sentences": len(pairs),
            "length_penalty": settings["length_penalty"]
            if beam > 1
            else None,
            "decode_s": round(time.perf_counter() - started, 1),
            "hypotheses": hypotheses,
        }
    return scores


def masked_bleu(
    model: OnnxModel,
    vocab: Vocabulary,
    settings: dict[str, Any],
    pairs: Sequence[tuple[str, str]],
    head_mask: Any = None,
    on_sentence: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """What the page's head grid prints: ``pairs`` translated greedily with ``head_mask`` (every id
    scored) and their cased sacreBLEU (13a, the package's sacrebleu; the page's bleu.mjs).

    Args:
        pairs: ``(German, English)`` sentences; the page's are the first 100 of test2016
            (``heads.json``, written by tools/site_assets.py).
        head_mask: ``(3, N, h)`` of 0 and 1; ``None``: every head.
        on_sentence: told ``k`` after the k-th translation (the page's progress).

    Returns:
        ``{"bleu": float, "hypotheses": [str]}``, BLEU unrounded.
    """
    from sacrebleu.metrics import BLEU

    mask = model.heads(head_mask)  # refused before any sentence
    hypotheses = []
    for k, (text, _) in enumerate(pairs, 1):
        ids = source_ids(vocab, text, settings["max_len"])
        ys = [] if ids is None else translate_ids(
            model, vocab, ids, settings, 1, head_mask=mask
        )  # fmt: skip
        hypotheses.append(detokenize(vocab, ys))
        if on_sentence is not None:
            on_sentence(k)
    references = [english for _, english in pairs]
    bleu = BLEU().corpus_score(hypotheses, [references]).score
    return {"bleu": bleu, "hypotheses": hypotheses}
