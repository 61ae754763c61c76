"""Training: ``fit``, a resumable loop over epochs of steps, each one ``train_step``.

Read top to bottom: ``FitConfig``, a run's settings (checked once); ``fit``, which fills in the
defaults (Adam, the schedule, the loss), loads a checkpoint to resume from and builds the loop's
pieces; and ``training_loop``, the whole of training on one screen: epochs of steps that
evaluate, save checkpoints and tell the ``hook`` what happened. The pieces live in
``aiayn.training.loop_pieces``, the ``History`` and ``FitState`` in ``aiayn.training.history``,
the checkpoints' files in ``aiayn.training.checkpoints``, the step itself (autocast, clipping,
Adam) in ``aiayn.training.step``, the schedule in ``aiayn.schedule``, the loss in
``aiayn.loss``, the batches in ``aiayn.training.batches``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
from torch import nn

from ..checks import check_positive
from ..engine.cuda_graphs import GraphedShapes, check_cuda_graphs
from ..loss import LabelSmoothingLoss
from ..schedule import make_optimizer, noam_scheduler
from . import distributed
from .batches import Batch
from .history import FitState, History
from .loop_pieces import (
    Checkpoints,
    Evaluation,
    Position,
    Report,
    Stopping,
    TrainStep,
)
from .step import (
    amp_dtype_for,
    make_grad_scaler,
    mean_loss,
    train_step,
)

__all__ = [
    "History",
    "FitState",
    "FitConfig",
    "fit",
    "training_loop",
    # the loop's pieces, from aiayn.training.loop_pieces
    "Position",
    "TrainStep",
    "Stopping",
    "Report",
    "Evaluation",
    "Checkpoints",
    # the step, from aiayn.training.step
    "mean_loss",
    "amp_dtype_for",
    "make_grad_scaler",
    "train_step",
]


BatchSource = Iterable[Batch] | Callable[[int], Iterable[Batch]]


def _epoch_batches(batches: BatchSource, epoch: int) -> Iterable[Batch]:
    return batches(epoch) if callable(batches) else batches


def _as_batch(
    item: Batch | tuple[torch.Tensor, torch.Tensor],
    pad_id: int,
    bos_id: int | None,
) -> Batch:
    if isinstance(item, Batch):
        return item
    if isinstance(item, (tuple, list)) and len(item) == 2:
        if bos_id is None:
            raise ValueError(
                "fit got (src, tgt) pairs instead of Batch objects: pass bos_id so it can build them"
            )
        return Batch.make(item[0], item[1], pad_id, bos_id)
    raise TypeError(
        f"fit expects Batch objects or (src, tgt) tensor pairs, got {type(item).__name__}"
    )


@dataclass(frozen=True)
class FitConfig:
    """How ``fit`` trains: its settings, apart from the objects it trains with and its hooks.

    Args:
        epochs: passes over the data.
        clip_norm: clip the gradient norm to this value; ``None`` turns clipping off.
        amp_dtype: ``torch.bfloat16`` or ``torch.float16`` runs the forward pass under
            ``torch.autocast``; ``None`` trains in full precision.
        device: where to train; default: where the model's parameters are.
        bos_id: needed only when ``batches`` yields ``(src, tgt)`` pairs.
        max_steps: stop after this many optimizer steps in total (counting steps before a resume).
        eval_every: evaluate every this many steps; ``None``: at the end of every epoch.
        checkpoint_every: also save every this many steps.
        checkpoint_minutes: also save when this many minutes passed since the last save.
        checkpoint_extra: more plain values stored in every checkpoint (``extra``).
        progress: show a tqdm progress bar with loss, tokens/s and learning rate.
        cuda_graphs: replay the model's forward and backward passes as CUDA graphs, one pair per
            batch shape (``cuda_graphs.GraphedShapes``; CUDA and one process only). Each new shape
            is captured, so fewer shapes (``EpochBatches(pad_to=..., pad_rows=...)``) capture less.
    """

    epochs: int = 1
    clip_norm: float | None = 1.0
    amp_dtype: torch.dtype | None = None
    device: torch.device | str | None = None
    bos_id: int | None = None
    max_steps: int | None = None
    eval_every: int | None = None
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = None
    checkpoint_extra: dict[str, Any] | None = None
    progress: bool = True
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        check_positive(epochs=self.epochs)
        for name in ("max_steps", "eval_every", "checkpoint_every"):
            if getattr(self, name) is not None:
                check_positive(**{name: getattr(self, name)})
        if self.amp_dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(
                "amp_dtype must be None, torch.bfloat16 or torch.float16, "
                f"got {self.amp_dtype}"
            )
        for name in ("clip_norm", "checkpoint_minutes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(
                    f"{name} must be positive or None, got {value!r}"
                )


def fit(
    model: nn.Module,
    batches: BatchSource,
    config: FitConfig | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    | None = None,
    scaler: torch.amp.GradScaler | None = None,
    val_batches: Sequence[Batch] | None = None,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    hook: Callable[[FitState], None] | None = None,
    stop: threading.Event | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    resume_from: str | os.PathLike | bytes | dict[str, Any] | None = None,
    **settings: Any,
) -> History:
    """Train ``model`` on ``batches`` as ``config`` says and return the ``History``.

    Every step is one ``train_step``. After each epoch (or every ``eval_every`` steps) ``fit``
    evaluates: the mean loss on ``val_batches`` and whatever ``eval_fn`` returns. Checkpoints are
    saved after the first step (a run always holds one to resume from, and a disk too small for
    it fails at once), when the run ends (its last epoch done, ``max_steps`` reached, ``stop`` set,
    at any moment of an epoch, its validation included), every ``checkpoint_every`` steps and
    every ``checkpoint_minutes``; not at every epoch's end, so that
    the bytes written do not grow with the epochs (with Adam's two moments a checkpoint is three
    times the weights: 314 MB for the ``multi30k`` preset).

    Resuming is exact: the checkpoint holds the weights, the optimizer and scheduler states, the
    torch RNG states (for dropout), the epoch, how many batches of that epoch were consumed, the
    RNG state at the start of that epoch (so a shuffling loader reshuffles the same way) and the
    history. ``fit(..., resume_from=path)`` restores all of it and skips the batches already seen,
    so an interrupted run continues with exactly the losses the uninterrupted run would have had.
    This needs ``batches`` to yield the same batches when iterated again for the same epoch.

    Under ``torchrun`` (``distributed.setup`` was called) every rank runs ``fit`` on its own
    shard of the batches (``distributed.shard``): the model is wrapped in DDP, each rank's loss
    is weighted by its share of the step's target tokens, and the ranks agree after every step
    on the step's loss and on stopping and saving. Rank 0 alone writes the checkpoint, which
    holds every rank's random state; give the ``hook`` and the progress bar to rank 0 only.

    The settings are a ``FitConfig``, or its fields as keywords (``fit(model, batches,
    epochs=2, progress=False)``); keywords given with a ``config`` replace its fields.

    Args:
        model: a ``Transformer`` (anything called as ``model(src, tgt_in, src_mask, tgt_mask)``;
            the defaults below read ``model.config.d_model`` and ``model.config.pad_id``).
        batches: ``Batch`` objects (or ``(src, tgt)`` tensor pairs with ``bos_id`` given), re-iterated
            every epoch: a list, a ``DataLoader``, or a function ``epoch -> iterable``.
        config: the settings (default ``FitConfig()``: one epoch, clipping at 1.0).
        optimizer: default ``make_optimizer(model)`` (Adam, lr 1.0) with, when ``scheduler`` is also
            ``None``, ``noam_scheduler(optimizer, model.config.d_model)`` (warmup 4000).
        scheduler: stepped after every optimizer step; ``None`` keeps the rate constant (unless the
            default optimizer is used).
        loss_fn: ``(logits (B, T, V), tgt_out (B, T)) -> scalar``; default
            ``LabelSmoothingLoss(0.1, ignore_index=model.config.pad_id)``.
        scaler: the ``GradScaler`` of float16 training; default ``make_grad_scaler(amp_dtype, device)``
            (one for float16, none otherwise). Its state is saved in checkpoints and restored.
        val_batches: validation batches; each evaluation adds ``val_loss`` and ``val_ppl``.
        eval_fn: called as ``eval_fn(model)`` with the model in eval mode and gradients off;
            returns a dict of metrics.
        hook: called with a frozen ``FitState`` after every step, epoch end, evaluation and save.
        stop: when this event is set (e.g. by a Ctrl-C handler), ``fit`` finishes the step under
            way, saves a checkpoint and returns.
        checkpoint_path: where checkpoints go; each save replaces the last.
        resume_from: a checkpoint written by ``fit`` to continue from: a path, its bytes, or the
            dict ``checkpoints.read_checkpoint`` gave (then it is not read again).
        **settings: fields of ``FitConfig``.

    Returns:
        The ``History`` of the whole run (including steps before a resume).
    """
    config = _fit_config(config, settings)
    _check_batches(batches)
    device = (
        torch.device(config.device)
        if config.device is not None
        else next(model.parameters()).device
    )
    model.to(device)
    pad_id = getattr(getattr(model, "config", None), "pad_id", 0)
    if optimizer is None:
        optimizer = make_optimizer(model)
        if scheduler is None:
            scheduler = noam_scheduler(optimizer, model.config.d_model)
    if loss_fn is None:
        loss_fn = LabelSmoothingLoss(0.1, ignore_index=pad_id)
    if scaler is None:
        scaler = make_grad_scaler(config.amp_dtype, device)

    position = Position()
    if resume_from is not None:
        position = Position.resume(
            resume_from, model, optimizer, scheduler, scaler
        )
    if config.cuda_graphs:
        check_cuda_graphs(device, distributed.world_size())
        module = GraphedShapes(model)
    else:  # under torchrun: DDP averages gradients
        module = distributed.wrap(model)
    step = TrainStep(
        module, optimizer, loss_fn, scheduler,
        config.clip_norm, config.amp_dtype, scaler,
    )  # fmt: skip
    bar = _progress_bar(batches, position.step, config)
    report = Report(model, hook, bar)
    saver = Checkpoints(
        checkpoint_path, config.checkpoint_every, config.checkpoint_minutes,
        config.checkpoint_extra, model, optimizer, scheduler, scaler, report,
        resumed=resume_from is not None,
    )  # fmt: skip
    evaluation = Evaluation(
        model, val_batches, eval_fn, config.eval_every, config.amp_dtype,
        device, report,
    )  # fmt: skip
    with report:
        return training_loop(
            _on_device(batches, device, pad_id, config.bos_id),
            config.epochs,
            position,
            step,
            saver,
            evaluation,
            report,
            Stopping(config.max_steps, stop),
        )


def training_loop(
    batches: Callable[[int], Iterable[Batch]],
    epochs: int,
    position: Position,
    step: TrainStep,
    saver: Checkpoints,
    evaluation: Evaluation,
    report: Report,
    stopping: Stopping,
) -> History:
    """The loop of ``fit``: epochs of steps, each one ``train_step``, with its named pieces around.

    ``position`` says where training stands (and, resumed, skips the batches already seen);
    ``saver`` writes checkpoints, ``evaluation`` evaluates, ``report`` tells the hook and the
    progress bar, ``stopping`` knows when to stop (``max_steps``, Ctrl-C, the other ranks).
    """
    step.module.train()
    for epoch in range(position.epoch, epochs):
        if stopping.done(position.step):
            break
        for batch in position.batches_of(epoch, batches):
            start = time.perf_counter()
            lr = step.optimizer.param_groups[0]["lr"]
            # forward, loss, backward, clip, update, schedule
            loss, tokens = step(batch, position)
            position.step += 1
            position.batches_done += 1
            # under torchrun: the global batch's loss, and all ranks
            # stop and save, or none
            loss, save_now = stopping.agree(loss, saver.due(position.step))
            seconds = time.perf_counter() - start
            position.history.record(
                position.step, epoch, loss, lr, tokens, seconds
            )
            report.step(position, loss, lr, tokens, seconds)
            evaluation.every_steps(position)
            if stopping.done(position.step):
                break
            if save_now:
                saver.save(position)

        if stopping.done(position.step):
            # save first, so that the evaluation's use of the RNG is not in it
            saver.save(position)
            if not stopping.interrupted:
                evaluation.at_epoch_end(position, epoch_done=False)
            break
        report.tell("epoch_end", position)
        evaluation.at_epoch_end(position, epoch_done=True)
        # the run's end, or a stop asked for as the epoch ended (its
        # weights, its validation): saved as the start of the next epoch,
        # where a longer run resumes. Between epochs only checkpoint_every
        # and checkpoint_minutes save
        if epoch == epochs - 1 or stopping.done(position.step):
            saver.save(position, epoch_end=True)
            if stopping.done(position.step):
                break
    return position.history


# --- What fit checks and builds before the loop ---------------------------------------------------


def _fit_config(
    config: FitConfig | None, settings: dict[str, Any]
) -> FitConfig:
    """``config`` (default ``FitConfig()``) with the keywords given to ``fit`` in its fields."""
    if config is not None and not isinstance(config, FitConfig):
        raise TypeError(
            "fit: config must be a FitConfig (or None), got "
            f"{type(config).__name__}"
        )
    known = {f.name for f in fields(FitConfig)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise TypeError(
            f"fit() got an unexpected keyword argument {unknown[0]!r}; "
            f"its settings are FitConfig's fields: {', '.join(sorted(known))}"
        )
    return replace(config or FitConfig(), **settings)


def _check_batches(batches: BatchSource) -> None:
    if (
        isinstance(batches, Sized)
        and not callable(batches)
        and len(batches) == 0
    ):
        raise ValueError(
            "fit: batches is empty; expected at least one Batch per epoch"
        )


def _on_device(
    batches: BatchSource,
    device: torch.device,
    pad_id: int,
    bos_id: int | None,
) -> Callable[[int], Iterator[Batch]]:
    """``epoch -> the epoch's batches``, as ``Batch`` objects on ``device``."""

    def epoch_batches(epoch: int) -> Iterator[Batch]:
        for item in _epoch_batches(batches, epoch):
            yield _as_batch(item, pad_id, bos_id).to(
                device, non_blocking=True
            )

    return epoch_batches


def _progress_bar(batches: BatchSource, initial: int, config: FitConfig):
    epochs, max_steps = config.epochs, config.max_steps
    if not config.progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError as error:  # tqdm comes with the book's extras
        raise ImportError(
            "fit(progress=True) needs tqdm: pip install tqdm, or pass progress=False"
        ) from error
    try:
        total = epochs * len(batches)  # type: ignore[arg-type]
    except TypeError:
        total = max_steps
    else:
        total = total if max_steps is None else min(total, max_steps)
    return tqdm(
        total=total, initial=initial, unit="step", dynamic_ncols=True
    )
