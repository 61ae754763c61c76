"""Checkpoints: the one module that writes and reads the weights files of a run.

Two kinds of file, both serialized and parsed here only (a run folder places them,
``aiayn.runs.folder``; ``fit`` and the run's log decide when):

    checkpoint.pt   everything a run needs to continue exactly: the model's weights, the
                    optimizer's and the scheduler's states, the step and the epoch, the torch
                    random states (CPU and CUDA: dropout continues with the same draws), an
                    ``extra`` dict (``fit`` keeps its place in the epoch and its history there:
                    ``fit_extra``, read back by ``fit_position``) and, in float16 training, the
                    gradient scaler's state (its loss scale), so a resumed run scales as it
                    would have.
    epoch-NNN.pt    the weights after epoch NNN (1-based) and their step, for averaging.

Everything is a tensor or a plain container, so ``torch.load(..., weights_only=True)`` reads it
without running code; ``read_checkpoint`` reads both kinds, with errors that name the file.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn

from ..files import WrittenFile, atomic_write, unreadable_weights

__all__ = [
    "CHECKPOINT",
    "epoch_file",
    "is_epoch_file",
    "checkpoint_bytes",
    "save_checkpoint",
    "epoch_bytes",
    "fit_extra",
    "FitPosition",
    "fit_position",
    "read_checkpoint",
    "load_checkpoint",
    "rng_state",
    "set_rng_state",
]

CHECKPOINT = "checkpoint.pt"
_EPOCH_FILE = re.compile(r"epoch-\d{3,}\.pt")


def epoch_file(epoch: int) -> str:
    """The name of the weights after ``epoch`` (1-based): ``epoch-007.pt``."""
    return f"epoch-{epoch:03d}.pt"


def is_epoch_file(name: str) -> bool:
    """Is ``name`` the name of an epoch's weights (``epoch-NNN.pt``)?"""
    return _EPOCH_FILE.fullmatch(name) is not None


def rng_state() -> dict[str, Any]:
    """The torch random states (CPU and every CUDA device), as ``weights_only`` loading accepts."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_bytes(
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    step: int = 0,
    epoch: int = 0,
    extra: dict[str, Any] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> memoryview:
    """The checkpoint ``save_checkpoint`` writes, serialized in memory (``torch.save``)."""
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "step": int(step),
        "epoch": int(epoch),
        "rng": rng_state(),
        "extra": {} if extra is None else extra,
    }
    if (
        scaler is not None
    ):  # float16 training: the loss scale and its growth counter
        checkpoint["scaler"] = scaler.state_dict()
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    return buffer.getbuffer()


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    step: int = 0,
    epoch: int = 0,
    extra: dict[str, Any] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> WrittenFile:
    """Write model, optimizer and scheduler states, the position and the RNG states, atomically.

    ``files.atomic_write`` writes a temporary file in the same folder, hashing the bytes on the
    way, and renames it over ``path``: an interrupted save never leaves a half-written checkpoint.
    Everything stored is a tensor or a plain container of numbers and strings, which is what
    ``torch.load(..., weights_only=True)`` accepts.

    Args:
        path: destination file.
        model: its ``state_dict`` is saved.
        optimizer, scheduler: saved when given.
        step: optimizer steps done so far.
        epoch: the current epoch (0-based).
        extra: more tensors, numbers, strings, lists or dicts to keep.
        scaler: the ``GradScaler`` of float16 training, saved when given.

    Returns:
        The ``WrittenFile`` (``.path``, ``.size``, ``.sha256``); it also works as a path.
    """
    data = checkpoint_bytes(
        model, optimizer, scheduler, step, epoch, extra, scaler
    )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, data)


def epoch_bytes(model: nn.Module, step: int, epoch: int) -> memoryview:
    """The weights after ``epoch`` (1-based), reached at ``step``: an ``epoch-NNN.pt`` file."""
    buffer = io.BytesIO()
    torch.save(
        {
            "model": model.state_dict(),
            "step": int(step),
            "epoch": int(epoch),
        },
        buffer,
    )
    return buffer.getbuffer()


# --- What fit keeps in a checkpoint's extra -------------------------------------------------------


def fit_extra(
    extra: dict[str, Any],
    batches_done: int,
    epoch_rng: dict[str, Any] | None,
    history: dict[str, Any],
    rank_rng: list[tuple[dict[str, Any], Any]] | None = None,
) -> dict[str, Any]:
    """``extra`` and where ``fit`` stands: what ``fit_position`` reads back.

    Args:
        extra: the caller's own plain values (``fit``'s ``checkpoint_extra``).
        batches_done: batches of the epoch done (0: the epoch starts).
        epoch_rng: the random state as the epoch began (a shuffling loader draws from it).
        history: ``History.state_dict()``.
        rank_rng: under torchrun, every rank's ``(random state, epoch_rng)``.
    """
    saved = {
        **extra,
        "batches_done": batches_done,
        "epoch_rng": epoch_rng,
        "history": history,
    }
    if rank_rng is not None:
        saved["world_size"] = len(rank_rng)
        saved["rank_rng"] = rank_rng
    return saved


class FitPosition(NamedTuple):
    """Where a checkpoint of ``fit`` stands, as one rank needs it to go on.

    ``rng``: the random state at the save; ``epoch_rng``: as the epoch began; ``history``:
    ``History.state_dict()``; ``world_size``: the processes that trained it.
    """

    step: int
    epoch: int
    batches_done: int
    world_size: int
    rng: dict[str, Any]
    epoch_rng: dict[str, Any]
    history: dict[str, Any]


def fit_position(checkpoint: dict[str, Any], rank: int = 0) -> FitPosition:
    """Where the checkpoint (``read_checkpoint``'s dict) stands, for the process of ``rank``.

    A checkpoint not written by ``fit`` (``save_checkpoint``'s own) stands at the start of its
    epoch, with its random state and an empty history.
    """
    extra = checkpoint["extra"]
    rng = checkpoint["rng"]
    epoch_rng = extra.get("epoch_rng") or rng
    if "rank_rng" in extra and rank < len(extra["rank_rng"]):
        rng, epoch_rng = extra["rank_rng"][rank]  # this rank's own
    return FitPosition(
        step=checkpoint["step"],
        epoch=checkpoint["epoch"],
        batches_done=extra.get("batches_done", 0),
        world_size=extra.get("world_size", 1),
        rng=rng,
        epoch_rng=epoch_rng,
        history=extra.get("history", {}),
    )


def read_checkpoint(
    source: str | os.PathLike | bytes, name: str | None = None
) -> dict[str, Any]:
    """A checkpoint or an epoch's weights, read safely, with errors that name the file.

    ``torch.load(..., weights_only=True)``, which cannot run code from the file; a file that
    holds no ``model`` state is refused.

    Args:
        source: the file, or its bytes already read (and checked) by the caller.
        name: how the file is called in errors (default: the path).
    """
    label = name or str(source)
    try:
        data = (
            source
            if isinstance(source, bytes)
            else Path(source).read_bytes()
        )
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{label}: no such checkpoint file"
        ) from None
    try:
        checkpoint = torch.load(
            io.BytesIO(data), map_location="cpu", weights_only=True
        )
    except Exception as err:  # zipfile, pickle and torch errors alike
        # never torch's text: it advises weights_only=False, which runs the file
        raise ValueError(
            f"{unreadable_weights(label, err, 'checkpoint')}: restore it, or "
            "start the run afresh"
        ) from None
    if not isinstance(checkpoint, dict) or "model" not in checkpoint:
        raise ValueError(
            f"{label} is not a checkpoint of aiayn.training.checkpoints.save_checkpoint "
            "(expected a dict with a 'model' state)"
        )
    return checkpoint


def load_checkpoint(
    path: str | os.PathLike | bytes | dict[str, Any],
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    name: str | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` and load it into the objects given.

    Loading uses ``torch.load(..., weights_only=True)``, which cannot run code from the file. The
    RNG states are returned, not applied (``fit`` applies them when it resumes, ``fit_position``).

    Args:
        path: the checkpoint file, its bytes, or the dict ``read_checkpoint`` gave (not read
            again).
        model, optimizer, scheduler: loaded in place when given.
        name: how the file is called in errors (default: the path).
        scaler: a ``GradScaler``, given the saved loss scale (a checkpoint of a run without
            one, e.g. trained in bfloat16, leaves it at its start).

    Returns:
        The checkpoint dict: ``model``, ``optimizer``, ``scheduler``, ``step``, ``epoch``, ``rng``, ``extra``.
    """
    if isinstance(path, dict):
        label = name or "the checkpoint"
        checkpoint = path
    else:
        label = name or str(path)
        checkpoint = read_checkpoint(path, label)
    try:
        if model is not None:
            model.load_state_dict(checkpoint["model"])
        for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler")):
            if obj is not None:
                if checkpoint.get(key) is None:
                    raise ValueError(
                        f"{label}: the checkpoint holds no {key} state, "
                        f"but a {key} was given to load into"
                    )
                obj.load_state_dict(checkpoint[key])
        if scaler is not None and checkpoint.get("scaler"):
            scaler.load_state_dict(checkpoint["scaler"])
    except (RuntimeError, KeyError) as err:
        raise ValueError(
            f"{label} does not fit this model ({type(err).__name__}: "
            f"{str(err).splitlines()[0]}); was it written by another run?"
        ) from None
    return checkpoint
