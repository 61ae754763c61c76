"""Do N processes train as one? ``check_equivalence`` runs N CPU ranks under ``torchrun`` and one process.

Each rank trains on its shard of the batches (``distributed.shard``) with its loss weighted by its
share of the step's target tokens (``distributed.token_weight``); one process takes one SGD step per
N batches on their summed loss over all their tokens. The two sets of weights agree to float noise:

    python -m aiayn.equivalence check 2      # prints the largest weight difference

N is at most ``max_ranks()``: this machine's CPUs, or 4 where it has fewer. Each rank is a process
of its own (PyTorch and all), so a larger N only waits on the CPUs and fills the memory.

It sits above ``training`` (the ranks call ``fit``), which ``distributed`` itself lies below.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from .. import cli
from ..checks import check_int
from ..loss import LabelSmoothingLoss
from ..model import Transformer, TransformerConfig
from . import distributed
from .batches import copy_task_batches
from .loop import fit

__all__ = ["check_equivalence", "max_ranks"]

# the fewest ranks any machine may run: two ranks and more check the sharding
# even on one or two CPUs, each rank on one thread
MIN_RANK_BOUND = 4
MAX_STEPS = 10_000


def max_ranks() -> int:
    """The most CPU ranks the check starts: this machine's CPUs, or ``MIN_RANK_BOUND`` if more."""
    return max(os.cpu_count() or 1, MIN_RANK_BOUND)


def _ranks(text: str) -> int:
    """An argparse type: a rank count in 1..``max_ranks()``."""
    n = cli.positive_int(text)
    if n > max_ranks():
        raise argparse.ArgumentTypeError(
            f"expected an integer in 1..{max_ranks()}, got {n}; {_why_ranks()}"
        )
    return n


def _why_ranks() -> str:
    return (
        f"each rank is a process of its own and this machine has "
        f"{os.cpu_count() or 1} CPUs (the bound is never below {MIN_RANK_BOUND})"
    )


def _check_setup(steps: int, world: int):
    """The equivalence check's model, batches and SGD: the same on every rank and in the reference."""
    torch.manual_seed(0)
    config = TransformerConfig(
        12, 12, d_model=16, d_ff=32, h=2, N=1, dropout=0.0
    )
    model = Transformer(config)
    # batches of different lengths, so that the ranks' token counts differ
    batches = copy_task_batches(steps * world, 4, 7, 12, seed=1, min_len=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, batches, optimizer


def _check_worker(out: str, steps: int) -> None:
    """One rank of the check: ``fit`` on its shard with SGD; rank 0 saves the weights to ``out``."""
    torch.set_num_threads(1)
    distributed.setup("cpu")
    try:
        model, batches, optimizer = _check_setup(
            steps, distributed.world_size()
        )
        fit(model, distributed.shard(batches, distributed.rank(), distributed.world_size()), optimizer=optimizer,
            loss_fn=LabelSmoothingLoss(0.1, ignore_index=0), clip_norm=1.0, progress=False)  # fmt: skip
        if distributed.is_main():
            torch.save(model.state_dict(), out)
    finally:
        distributed.teardown()


def _reference(steps: int, world: int) -> dict[str, torch.Tensor]:
    """One process, one SGD step per ``world`` batches: their summed loss over all their tokens."""
    model, batches, optimizer = _check_setup(steps, world)
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=0, reduction="sum")
    for k in range(steps):
        group = batches[k * world : (k + 1) * world]
        n_global = sum(b.n_tokens for b in group)
        optimizer.zero_grad(set_to_none=True)
        for b in group:
            logits = model(
                b.src, b.tgt_in, b.src_mask, b.tgt_mask
            )  # (B, T, V)
            (loss_fn(logits, b.tgt_out) / n_global).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return model.state_dict()


def check_equivalence(n: int = 2, steps: int = 5) -> float:
    """Train ``steps`` SGD steps on ``n`` CPU ranks and on one process over the same global batches.

    Returns the largest absolute difference between the two models' weights (float noise,
    about 1e-8): the ranks together make exactly the updates of one process that sees all
    their batches.

    Args:
        n: CPU ranks, 1 to ``max_ranks()``; a larger count is refused before any process starts.
        steps: SGD steps, 1 to ``MAX_STEPS`` (the batches are made before the ranks start).
    """
    is_int = isinstance(n, int) and not isinstance(n, bool)
    if not (is_int and 1 <= n <= max_ranks()):
        raise ValueError(
            f"n must be an integer in 1..{max_ranks()}, got {n!r}; {_why_ranks()}"
        )
    check_int("steps", steps, minimum=1, maximum=MAX_STEPS)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ranks.pt"
        distributed.launch_cpu(
            n, ["aiayn.equivalence", "worker", str(out), str(steps)]
        )
        ranks = torch.load(out, weights_only=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks ran
    try:
        one = _reference(steps, n)
    finally:
        torch.set_num_threads(threads)
    return max(float((ranks[k] - one[k]).abs().max()) for k in one)


def _parser():
    p = cli.parser(
        "python -m aiayn.equivalence",
        "Check that N CPU ranks train as one process would.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "check",
        help="5 SGD steps on N CPU ranks and on one process: the largest "
        "difference of their weights",
    )
    check.add_argument(
        "n",
        nargs="?",
        type=_ranks,
        default=2,
        help=f"CPU ranks, 1 to {max_ranks()} here (default 2)",
    )
    check.add_argument("--debug", action="store_true")
    return p


def _check(args) -> None:
    diff = check_equivalence(args.n)
    print(
        f"{args.n} CPU ranks vs one process, 5 SGD steps: max |weight difference| = {diff:.2e}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m aiayn.equivalence check [N]``: a wrong argument prints one ``error:`` line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [
        "worker"
    ]:  # one rank of the check, started by launch_cpu
        _check_worker(argv[1], int(argv[2]))
    else:
        cli.run(_parser(), argv, _check)


if __name__ == "__main__":
    main()
