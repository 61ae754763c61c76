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
``token_weight``, ``wrap`` and ``check_same_world``, and ``launch_cpu``, which runs N CPU processes
from a notebook (``aiayn.training.equivalence`` checks with it that N ranks train as one process would).

A rank never waits forever: every collective times out after ``TIMEOUT_MINUTES``, and torchrun
stops all the ranks when one fails. The loop has no gradient accumulation, so there is no
``no_sync``: every backward pass is one optimizer step and averages the gradients.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
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
    "main_first",
    "shard",
    "token_weight",
    "check_same_world",
    "wrap",
    "launch_cpu",
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


def main_first(check: Callable[[], None]) -> None:
    """Run ``check`` on rank 0; if it raises, every rank raises that error, in the same words.

    A refusal of rank 0 alone (a locked run folder, say) would otherwise leave the other ranks
    waiting at their next collective until rank 0's exit broke it ("Connection closed by peer"),
    and torchrun would name one of them as the cause. Every rank must call it.
    """
    error: BaseException | None = None
    if is_main():
        try:
            check()
        except Exception as err:  # handed to every rank, raised there
            error = err
    if dist.is_initialized():
        box = [error]
        dist.broadcast_object_list(box, src=0)
        error = box[0]
    if error is not None:
        raise error


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
        Path(__file__).resolve().parents[2]
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
