"""Timing the contenders: a warm-up, then interleaved rounds, and each one's speed against the first.

**Warm-up.** Each contender is set up in turn (its own copy of the weights, its own Adam and
gradient scaler) and runs ``warmup`` passes over the batches, every step timed alone (the device
synchronised around it; ``warm_up``). The first step of each new batch shape is the warm-up:
kernels chosen and plans built for that shape, and for the compiled contenders the compilation
itself. Their number, median time and the time they took beyond a steady step (``warmup_extra_s``;
the compile time for compiled contenders) are reported apart.

**Interleaved rounds.** Then the timed passes, in ``rounds`` rounds: round r runs one steady pass of
every contender (each pass over the same batches, synchronised only at its start and end;
``timed_pass``), one contender after another, before round r + 1 begins (``timed_rounds``). The
order rotates by one place a round (``pass_order``: A B C, then B C A, then C A B): each
contender's pass is then as often first, second or last in its round, so whatever one pass leaves
behind for the next (caches, the allocator, a core's clock) does not always favour the same
contender. On a shared machine the speed drifts over minutes; contenders timed one after another
each meet another part of that drift (ratios 10-20 % off on two shared cores), contenders timed in
the same round meet the same. Every contender's pass r starts from the same random seed, so all
draw the same dropout masks.

**Speed.** Per contender, the median pass over the rounds gives milliseconds per step. Its speed
relative to the first contender (the baseline) is the median over rounds of the ratio of the two
passes of one round, first ÷ this one (above 1: faster), with the smallest and the largest of those
ratios as its spread (``ratio_summary``).

    B  batch        S  source length        T  target length
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

import torch

from ..checks import check_int
from ..training.batches import Batch

__all__ = [
    "synchronize",
    "batch_shape",
    "warm_up",
    "timed_pass",
    "pass_order",
    "timed_rounds",
    "ratio_summary",
]

# One training step of a contender: a batch in, its loss out.
Step = Callable[[Batch], torch.Tensor]


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); nothing on a CPU, whose work is done on return."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batch_shape(batch: Batch) -> tuple[int, int, int]:
    """``(B, S, T)``: the shape that kernels are chosen and plans built for."""
    B, S = batch.src.shape
    return B, S, batch.tgt_in.size(1)  # (B, S, T)


def warm_up(
    step: Step,
    batches: Sequence[Batch],
    warmup: int,
    device: torch.device,
) -> tuple[list[float], list[float]]:
    """``warmup`` passes, every step timed alone: (first steps of a shape, the other steps), in s."""
    seen: set[tuple[int, int, int]] = set()
    first, repeat = [], []
    for _ in range(warmup):
        for batch in batches:
            synchronize(device)
            start = time.perf_counter()
            step(batch)
            synchronize(device)
            (repeat if batch_shape(batch) in seen else first).append(
                time.perf_counter() - start
            )
            seen.add(batch_shape(batch))
    return first, repeat


def timed_pass(
    step: Step, batches: Sequence[Batch], device: torch.device
) -> tuple[float, torch.Tensor]:
    """One steady pass over ``batches``, timed as a whole: (seconds, the last step's loss)."""
    synchronize(device)
    start = time.perf_counter()
    for batch in batches:
        loss = step(batch)
    synchronize(device)
    return time.perf_counter() - start, loss


def pass_order(n: int, round_: int) -> list[int]:
    """The order of the ``n`` contenders' passes in round ``round_``: 0 … n-1 rotated by the round.

    Round 0 runs 0, 1, …, n-1; round 1 runs 1, …, n-1, 0; and so on: over n rounds every contender
    takes every place once.
    """
    return [(round_ + i) % n for i in range(n)]


def timed_rounds(
    run_pass: Callable[[int, int], float], n: int, rounds: int
) -> list[list[float]]:
    """Time ``n`` contenders in interleaved rounds; ``times[c][r]`` is ``run_pass(c, r)``.

    Round r calls ``run_pass(c, r)`` once for every contender c, in ``pass_order(n, r)``, and ends
    before round r + 1 begins. ``run_pass`` runs and times one pass of contender c and returns its
    seconds.
    """
    check_int("rounds", rounds, minimum=1)
    times = [[math.nan] * rounds for _ in range(n)]
    for r in range(rounds):
        for c in pass_order(n, r):
            times[c][r] = run_pass(c, r)
    return times


def ratio_summary(
    times_by_contender: Mapping[str, Sequence[float]],
) -> dict[str, tuple[float, float, float]]:
    """Each contender's speed relative to the first: (median, min, max) of its per-round ratios.

    The ratio of contender c in round r is ``t_first[r] / t_c[r]``: above 1, c was faster than the
    first contender in that round. The median of these ratios, not the ratio of the median times:
    each ratio compares two passes that ran side by side.

    Args:
        times_by_contender: per contender (the first is the baseline), the seconds of its pass in
            each round, all of the same length.
    """
    names = list(times_by_contender)
    if not names:
        raise ValueError(
            "ratio_summary: expected at least one contender, got none"
        )
    base = times_by_contender[names[0]]
    out = {}
    for name in names:
        times = times_by_contender[name]
        if len(times) != len(base) or not times:
            raise ValueError(
                f"ratio_summary: expected {len(base)} round times (> 0) for {name!r}, as for "
                f"{names[0]!r}, got {len(times)}"
            )
        ratios = [b / t for b, t in zip(base, times, strict=True)]
        out[name] = (statistics.median(ratios), min(ratios), max(ratios))
    return out
