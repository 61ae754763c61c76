"""Exercises of under the hood: how the book's code runs fast.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _cache_work() -> dict[str, Truth]:
    """13.1: rows × positions the decoder runs, beam 4 over 3 sentences, with and without cache."""
    from ...decoding.search import beam_search
    from ...model import Transformer, TransformerConfig
    from ...training.batches import copy_task_batches

    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Transformer(
            TransformerConfig(
                11, 11, d_model=16, d_ff=32, h=2, N=1, dropout=0.0
            )
        )
    batch = copy_task_batches(1, 3, 6, 11, seed=1)[0]
    work = {}
    for name, options in (
        ("naive", {"use_cache": False, "prune": False}),
        ("cached", {"prune": False}),
    ):
        seen: list[int] = []
        hook = model.decoder.register_forward_pre_hook(
            lambda m, args, seen=seen: seen.append(
                args[0].size(0) * args[0].size(1)
            )
        )
        try:
            beam_search(
                model,
                batch.src,
                batch.src_mask,
                8,
                1,
                2,
                beam_size=4,
                **options,
            )
        finally:
            hook.remove()
        work[name] = seen
    return {
        "naive_step5": Truth(
            work["naive"][4],
            "without the cache, step t runs every row over all t positions so far",
        ),
        "cached_step5": Truth(
            work["cached"][4],
            "with the cache, each step runs every row over its newest position only",
        ),
        "naive_total": Truth(
            sum(work["naive"]),
            "add the naive loop's work over all seven steps: it grows with each step",
        ),
    }


def _graph_shapes() -> dict[str, Truth]:
    """13.3: the shapes of one batch of 37 pairs, padded for CUDA graphs."""
    from ...training.batches import EpochBatches

    # 37 pairs; the longest source has 21 pieces, the longest target 13 (<eos> not counted)
    pairs = [([5] * (10 + i % 12), [6] * (5 + i % 9)) for i in range(37)]
    (batch,) = EpochBatches(pairs, 100_000, pad_to=8, pad_rows=32)(0)
    return {
        "src": Truth(
            tuple(batch.src.shape),
            "rows up to a multiple of 32; positions, <eos> included, up to a multiple of 8",
        ),
        "tgt_out": Truth(
            tuple(batch.tgt_out.shape),
            "the same rows; the target's positions, <eos> included, up to a multiple of 8",
        ),
    }


def _version_counters() -> dict[str, Truth]:
    """13.4: how far two Adam steps move a parameter's version counter, foreach and fused."""
    grown = {}
    for name, options in (
        ("foreach", {"foreach": True}),
        ("fused", {"fused": True}),
    ):
        p = torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.Adam([p], **options)
        p.grad = torch.ones(3)
        before = p._version
        optimizer.step()
        optimizer.step()
        grown[name] = p._version - before
    return {
        "foreach": Truth(
            grown["foreach"],
            "each in-place update through PyTorch's ops bumps the counter once",
        ),
        "fused": Truth(
            grown["fused"],
            "the fused kernel writes the parameters without going through "
            "the ops that count",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "13.1.1": _cache_work,
    "13.3.1": _graph_shapes,
    "13.4.1": _version_counters,
}
