"""Exercises of chapters 11-12: the trained translator and after the paper.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _without_failures() -> dict[str, Truth]:
    """11.2: corpus BLEU of the published translations below 10 sentence BLEU, and of the rest."""
    import json

    from ...bleu import corpus_bleu, sentence_bleu
    from ...data.multi30k import load_multi30k
    from ...runs.published import results_dir

    results = results_dir()  # the published run's record and translations
    record = json.loads((results / "multi30k.json").read_text())
    hyp_file = results / record["hypotheses"]
    hyps = hyp_file.read_text(encoding="utf-8").splitlines()
    refs = [en for _, en in load_multi30k("test2016")]
    failed = [
        sentence_bleu(h, r).score < 10
        for h, r in zip(hyps, refs, strict=True)
    ]

    def bleu(keep: bool) -> float:
        pairs = [
            (h, r)
            for h, r, f in zip(hyps, refs, failed, strict=True)
            if f == keep
        ]
        return corpus_bleu(
            [h for h, _ in pairs], [r for _, r in pairs]
        ).score

    return {
        "bleu_failures": Truth(
            bleu(True),
            "corpus BLEU of only the translations whose sentence BLEU is "
            "below 10: pool their counts, as the length bands do",
            rel=0.01,
        ),
        "bleu_rest": Truth(
            bleu(False),
            "corpus BLEU of the other translations, those at 10 or above",
            rel=0.005,
        ),
    }


def _patch_tokens() -> dict[str, Truth]:
    """12.1: ViT-Base's tokens with 16x16 and 8x8 patches, and how much larger a head's scores get."""
    from ...attention import MultiHeadAttention

    image = torch.zeros(1, 3, 224, 224)  # (1, C, H, W)
    sizes = {}
    for P in (16, 8):
        grid = image.unfold(2, P, P).unfold(
            3, P, P
        )  # (1, C, H/P, W/P, P, P)
        L = (
            grid.shape[2] * grid.shape[3] + 1
        )  # the patches and the class token
        attention = MultiHeadAttention(4, 1, dropout=0.0)
        x = torch.zeros(1, L, 4)  # (1, L, d_model)
        with torch.no_grad():
            attention(x, x, x)
        sizes[P] = attention.attn.shape  # (1, h, L, L)
    return {
        "tokens_16": Truth(
            sizes[16][-1],
            "count the patches along each side of the image, square it, "
            "and remember the class token",
        ),
        "tokens_8": Truth(
            sizes[8][-1],
            "the same with a patch side half as long",
        ),
        "scores_growth": Truth(
            sizes[8][-1] * sizes[8][-2] / (sizes[16][-1] * sizes[16][-2]),
            "a head's matrix of attention scores is L x L: divide its "
            "entries with 8x8 patches by those with 16x16",
            rel=0.01,
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "11.2.3": _without_failures,
    "12.1.2": _patch_tokens,
}
