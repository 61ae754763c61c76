"""Training on several processes: ``torchrun`` starts one per GPU (or per CPU core), each trains a copy.

    torchrun --standalone --nproc_per_node 8 -m aiayn.train --preset multi30k --out runs/base
    torchrun --standalone --nproc_per_node 2 -m aiayn.train --preset multi30k-smoke --out runs/s --device cpu

Every process (a *rank*) builds the same model and the same length-bucketed batches of the epoch
(from ``(seed, epoch)``), keeps every ``world``-th one (``shard``) and computes gradients on it;
``DistributedDataParallel`` averages the gradients over the ranks during the backward pass, so every
rank takes the same Adam step. Each rank's loss is weighted by its share of the step's target
tokens (``token_weight``), so N ranks make the update that one process would make on the N batches
together: the summed loss of all of them over all their target tokens.

Rank 0 alone writes the run folder; the others read it. A plain ``python -m aiayn.train`` (no
``WORLD_SIZE`` in the environment) starts no process group and trains exactly as before.

Here: ``setup`` and ``teardown``, the rank (``rank``, ``world_size``, ``is_main``), the
collectives training needs (``barrier``, ``all_reduce_sum``, ``gather_object``), ``shard``,
``token_weight``, ``wrap`` and ``check_same_world``, and ``launch_cpu`` / ``check_equivalence``,
which run N CPU processes from a notebook (``python -m aiayn.distributed check`` does the same).

A rank never waits forever: every collective times out after ``TIMEOUT_MINUTES``, and torchrun
stops all the ranks when one fails. The loop has no gradient accumulation, so there is no
``no_sync``: every backward pass is one optimizer step and averages the gradients.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn

__all__ = [
    "TIMEOUT_MINUTES",
    "setup",
    "teardown",
    "rank",
    "world_size",
    "is_main",
    "barrier",
    "all_reduce_sum",
    "gather_object",
    "shard",
    "token_weight",
    "check_same_world",
    "wrap",
    "launch_cpu",
    "check_equivalence",
]

T = TypeVar("T")

# A rank waits at most this long for the others at any collective (a crashed or stuck rank makes
# the others fail with a timeout instead of hanging). Learning the tokenizer on rank 0 is the
# longest wait (seconds); a step is far shorter.
TIMEOUT_MINUTES = 10.0


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return None if value is None else int(value)


def setup(
    device: torch.device | str | None = None,
    timeout_minutes: float = TIMEOUT_MINUTES,
) -> torch.device | str | None:
    """Join the process group that ``torchrun`` set up, and return this rank's device.

    Without ``WORLD_SIZE`` in the environment (a plain ``python -m``) nothing happens and the
    device is ``device`` as given. Under ``torchrun`` each rank takes the GPU of its ``LOCAL_RANK``
    with the nccl backend, or, with ``device="cpu"`` (or no GPU at all), the CPU with gloo.

    Raises:
        ValueError: nccl without a GPU, more processes on this machine than it has GPUs, or a
            ``--device`` that names one GPU (each rank picks its own).
    """
    world = _env_int("WORLD_SIZE")
    if world is None:
        return device
    local_rank = _env_int("LOCAL_RANK") or 0
    local_world = _env_int("LOCAL_WORLD_SIZE") or world
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ValueError(
                "torchrun with --device cuda trains with nccl, which needs GPUs, and this "
                "machine has none; pass --device cpu to train on CPU processes (gloo)"
            )
        if device.index is not None:
            raise ValueError(
                f"under torchrun each process takes the GPU of its LOCAL_RANK; pass --device "
                f"cuda, not {device}"
            )
        if local_world > gpus:
            raise ValueError(
                f"torchrun started {local_world} processes on this machine but it has {gpus} "
                f"GPU{'s' if gpus != 1 else ''}: use --nproc_per_node {gpus} or fewer, or "
                "--device cpu"
            )
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    elif device.type != "cpu":
        raise ValueError(
            f"torchrun trains on cuda (nccl) or cpu (gloo), got --device {device}"
        )
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo",
            timeout=datetime.timedelta(minutes=timeout_minutes),
            device_id=device if device.type == "cuda" else None,
        )
    return device


def teardown() -> None:
    """Leave the process group (if one was joined)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    """The number of processes training together (1 without a process group)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    """True on rank 0, the one that writes (and on a single process)."""
    return rank() == 0


def barrier() -> None:
    """Wait until every rank is here (nothing without a process group)."""
    if dist.is_initialized():
        dist.barrier()


def _device() -> torch.device:
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """Each value summed over the ranks, in float64 (itself without a process group)."""
    if not dist.is_initialized():
        return [float(v) for v in values]
    t = torch.tensor(values, dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return t.tolist()


def gather_object(obj: T) -> list[T] | None:
    """``obj`` of every rank, in rank order, on rank 0 (``None`` on the others; ``[obj]`` alone)."""
    if not dist.is_initialized():
        return [obj]
    out = [None] * dist.get_world_size() if is_main() else None
    dist.gather_object(obj, out, dst=0)
    return out


def shard(batches: Sequence[T], rank: int, world: int) -> list[T]:
    """The batches of ``rank`` out of ``world``: every ``world``-th one, the same count on each.

    Rank r gets batches r, r + world, r + 2·world ...; step k of all the ranks together is global
    batches k·world ... k·world + world - 1. The last ``len(batches) % world`` batches are
    **dropped** (at most ``world - 1``; the batches are in a new random order every epoch, so a
    different few each epoch), so that no rank waits at a step the others never reach.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, world={world}), got {rank}")
    usable = len(batches) - len(batches) % world
    if usable == 0:
        raise ValueError(
            f"{len(batches)} batches cannot be shared by {world} processes: use fewer "
            "processes, more data or a smaller max_tokens"
        )
    return list(batches[rank:usable:world])


def token_weight(n_tokens: int) -> tuple[float, int]:
    """What this rank's mean loss is multiplied by so that the ranks make one global step, and
    the step's target tokens on all the ranks together, ``N_global``.

    DDP averages the ranks' gradients; the weight ``world · n_tokens / N_global`` turns that
    average into the gradient of (sum of every rank's summed loss) / N_global, the mean over all
    the step's target tokens. ``(1.0, n_tokens)`` on a single process.
    """
    if not dist.is_initialized():
        return 1.0, n_tokens
    (n_global,) = all_reduce_sum([n_tokens])
    return world_size() * n_tokens / n_global, int(n_global)


def check_same_world(saved: int, where: str) -> None:
    """Refuse to resume a checkpoint written by ``saved`` processes with another number of them.

    Each rank's place in the epoch and its random state are in the checkpoint: a run resumes
    exactly only on as many processes as it was trained on.
    """
    now = world_size()
    if saved != now:
        how = (
            "python -m aiayn.train"
            if saved == 1
            else f"torchrun --nproc_per_node {saved}"
        )
        raise ValueError(
            f"cannot resume {where}: it was trained on {saved} process{'es' if saved != 1 else ''} "
            f"and this is {now}; resume it with {how}"
        )


def wrap(model: nn.Module) -> nn.Module:
    """``model`` in ``DistributedDataParallel`` under a process group, else itself.

    The wrapper only runs the forward and backward passes; save and evaluate ``model`` itself
    (its ``state_dict`` keys have no ``module.`` prefix).
    """
    if not dist.is_initialized():
        return model
    device = next(model.parameters()).device
    return nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )


# --- Running N CPU processes from a notebook ------------------------------------------------------


def launch_cpu(
    n: int, argv: Sequence[str], timeout: float = 600
) -> subprocess.CompletedProcess:
    """Run ``python -m torch.distributed.run --standalone --nproc_per_node n -m *argv`` and wait.

    A subprocess, so a notebook needs no ``mp.spawn`` (whose workers cannot see functions defined
    in the notebook). Each process gets one CPU thread (``OMP_NUM_THREADS=1``). The output is
    captured (``.stdout``, ``.stderr``); a failure raises ``CalledProcessError``.
    """
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(n), "-m", *argv]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    src = str(
        Path(__file__).resolve().parents[1]
    )  # the package, also when not installed
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [src, env.get("PYTHONPATH")])
    )
    return subprocess.run(
        command,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )


def _check_setup(steps: int, world: int):
    """The equivalence check's model, batches and SGD: the same on every rank and in the reference."""
    from .batches import copy_task_batches
    from .model import Transformer, TransformerConfig

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
    from .loss import LabelSmoothingLoss
    from .training import fit

    torch.set_num_threads(1)
    setup("cpu")
    try:
        model, batches, optimizer = _check_setup(steps, world_size())
        fit(model, shard(batches, rank(), world_size()), optimizer=optimizer,
            loss_fn=LabelSmoothingLoss(0.1, ignore_index=0), clip_norm=1.0, progress=False)  # fmt: skip
        if is_main():
            torch.save(model.state_dict(), out)
    finally:
        teardown()


def _reference(steps: int, world: int) -> dict[str, torch.Tensor]:
    """One process, one SGD step per ``world`` batches: their summed loss over all their tokens."""
    from .loss import LabelSmoothingLoss

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
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ranks.pt"
        launch_cpu(n, ["aiayn.distributed", "worker", str(out), str(steps)])
        ranks = torch.load(out, weights_only=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks ran
    try:
        one = _reference(steps, n)
    finally:
        torch.set_num_threads(threads)
    return max(float((ranks[k] - one[k]).abs().max()) for k in one)


def _parser():
    from . import cli

    p = cli.parser(
        "python -m aiayn.distributed",
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
        type=cli.positive_int,
        default=2,
        help="CPU ranks (default 2)",
    )
    check.add_argument("--debug", action="store_true")
    return p


def _check(args) -> None:
    diff = check_equivalence(args.n)
    print(
        f"{args.n} CPU ranks vs one process, 5 SGD steps: max |weight difference| = {diff:.2e}"
    )


def _main(argv: Sequence[str]) -> None:
    """``python -m aiayn.distributed check [N]``: a wrong argument prints one ``error:`` line."""
    from . import cli

    if argv[:1] == [
        "worker"
    ]:  # one rank of the check, started by launch_cpu
        _check_worker(argv[1], int(argv[2]))
    else:
        cli.run(_parser(), argv, _check)


if __name__ == "__main__":
    _main(sys.argv[1:])
