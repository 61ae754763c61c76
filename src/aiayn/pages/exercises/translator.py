"""Exercises of chapters 11-12: the trained translator and after the paper.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

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


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "11.1.1": _peak_rate,
    "11.3.1": _length_penalty,
    "11.5.1": _three_ranks,
}
