"""Exercises of chapters 11-12: the trained translator and after the paper.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _peak_rate() -> dict[str, Truth]:
    """11.1: where the multi30k preset's learning rate peaks, and how high."""
    from ...runs.presets import PRESETS
    from ...schedule import noam_rate

    cfg = PRESETS["multi30k"]
    return {
        "peak_step": Truth(
            cfg.warmup,
            "the rate rises linearly until the warm-up ends, then falls",
        ),
        "peak_rate": Truth(
            noam_rate(
                cfg.warmup, cfg.model.d_model, cfg.warmup, cfg.lr_factor
            ),
            "factor x d_model^-0.5 x warmup^-0.5, with the preset's factor",
            rel=0.01,
        ),
    }


def _length_penalty() -> dict[str, Truth]:
    """11.3: which of two finished hypotheses beam search keeps, at alpha 0.6 and 1.4."""
    from ...decoding.common import gnmt_length_penalty

    hyps = {5: -4.0, 9: -5.5}  # length (pieces, <eos> included) -> log P

    def winner(alpha: float) -> int:
        return max(
            hyps, key=lambda n: hyps[n] / gnmt_length_penalty(n, alpha)
        )

    return {
        "lp_9": Truth(
            float(gnmt_length_penalty(9, 0.6)),
            "lp(Y) = ((5 + |Y|) / 6)^alpha",
            rel=0.01,
        ),
        "winner_06": Truth(
            winner(0.6),
            "compare log P / lp(Y) of both: the larger (less negative) wins",
        ),
        "winner_14": Truth(
            winner(1.4),
            "a larger alpha divides the longer hypothesis by a larger number",
        ),
    }


def _three_ranks() -> dict[str, Truth]:
    """11.5: three processes sharing an epoch of 11 batches, and one's loss weight."""
    from ...training.distributed import shard

    batches = list(range(11))
    kept = [b for r in range(3) for b in shard(batches, r, 3)]
    n_r, n, world = 300, 400, 2
    return {
        "rank1": Truth(
            frozenset(shard(batches, 1, 3)),
            "rank r takes batches r, r + N, r + 2N, ...",
        ),
        "dropped": Truth(
            frozenset(set(batches) - set(kept)),
            "every rank takes the same number of steps: what does not divide "
            "by 3 waits",
        ),
        "weight": Truth(
            world * n_r / n,
            "each process multiplies its loss by N n_r / n",
            rel=1e-6,
        ),
    }


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


def _heads_needed() -> dict[str, Truth]:
    """11.2: of the published model's 72 heads, how many cost little alone, and how many cost for sure."""
    import json

    from ...runs.published import results_dir
    from ...viz.heads import head_ablation_frame

    path = results_dir() / "multi30k.head_ablation.json"
    heads = head_ablation_frame(json.loads(path.read_text()))
    return {
        "harmless": Truth(
            int((heads["change"].abs() < 0.5).sum()),
            "count the heads whose change lies between -0.5 and +0.5 "
            "BLEU: a gain counts as little as a loss",
        ),
        "real_losses": Truth(
            int((heads["high"] < 0).sum()),
            "count the heads whose whole 95 % interval lies below 0: "
            "its upper end, high, is negative",
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
    "11.1.1": _peak_rate,
    "11.2.3": _without_failures,
    "11.2.4": _heads_needed,
    "11.3.1": _length_penalty,
    "11.5.1": _three_ranks,
    "12.1.2": _patch_tokens,
}
