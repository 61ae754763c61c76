"""Checkpoints: everything a run needs to continue exactly, written atomically and read safely.

A checkpoint holds the model's weights, the optimizer's and the scheduler's states, the step and
the epoch, the torch random states (CPU and CUDA: dropout continues with the same draws), an
``extra`` dict (``fit`` keeps its position in the epoch and its history there) and, in float16
training, the gradient scaler's state (its loss scale), so a resumed run scales as it would have.
Everything is a tensor or a plain container, so ``torch.load(..., weights_only=True)`` reads it
without running code. ``aiayn.training.loop.fit`` writes and reads them through this module.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..files import WrittenFile, atomic_write, unreadable_weights

__all__ = [
    "checkpoint_bytes",
    "save_checkpoint",
    "read_checkpoint",
    "load_checkpoint",
    "rng_state",
    "set_rng_state",
]


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


def read_checkpoint(
    source: str | os.PathLike | bytes, name: str | None = None
) -> dict[str, Any]:
    """``torch.load(..., weights_only=True)`` of a file (or its bytes), with errors that name the file.

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
    path: str | os.PathLike | bytes,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    name: str | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` and load it into the objects given.

    Loading uses ``torch.load(..., weights_only=True)``, which cannot run code from the file. The
    RNG states are returned, not applied (``fit`` applies them when it resumes).

    Args:
        path: the checkpoint file (or its bytes).
        model, optimizer, scheduler: loaded in place when given.
        name: how the file is called in errors (default: the path).
        scaler: a ``GradScaler``, given the saved loss scale (a checkpoint of a run without
            one, e.g. trained in bfloat16, leaves it at its start).

    Returns:
        The checkpoint dict: ``model``, ``optimizer``, ``scheduler``, ``step``, ``epoch``, ``rng``, ``extra``.
    """
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
