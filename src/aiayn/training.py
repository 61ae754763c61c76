"""Training: ``fit``, a resumable loop over epochs of steps, each one ``train_step``.

Read top to bottom: the ``History`` a run records and the ``FitState`` its ``hook`` hears, ``fit``,
which fills in the defaults and loads a checkpoint to resume from, and ``training_loop``, the whole
of training on one screen: epochs of steps that evaluate, save checkpoints (``aiayn.checkpoints``)
and tell the ``hook`` what happened. The step itself (autocast, clipping, Adam) lives in
``aiayn.step``, the schedule in ``aiayn.schedule``, the loss in ``aiayn.loss``, the batches in
``aiayn.batches``.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import nn

from . import distributed
from .batches import Batch
from .checkpoints import (
    checkpoint_bytes,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from .checks import AtomicWriter, WrittenFile, check_positive
from .loss import LabelSmoothingLoss
from .schedule import make_optimizer, noam_scheduler
from .step import amp_dtype_for, make_grad_scaler, mean_loss, train_step

__all__ = [
    "History",
    "FitState",
    "fit",
    "training_loop",
    "Position",
    "TrainStep",
    "Stopping",
    "Report",
    "Evaluation",
    "Checkpoints",
    # the step, from aiayn.step
    "mean_loss",
    "amp_dtype_for",
    "make_grad_scaler",
    "train_step",
]


# --- The training loop ----------------------------------------------------------------------------


@dataclass
class History:
    """What happened during ``fit``: one entry per optimizer step, and one dict per evaluation.

    Args:
        step: the step number (1-based, counting across epochs).
        epoch: the epoch of each step (0-based).
        loss: the training loss of each step.
        lr: the learning rate used by each step.
        tokens: target tokens in each step's batch.
        seconds: wall-clock time of each step.
        evals: ``{"step": ..., "epoch": ..., **metrics}`` for each evaluation.
    """

    step: list[int] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)

    def state_dict(self) -> dict[str, list]:
        """The history as plain lists (stored in checkpoints)."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    def record(
        self,
        step: int,
        epoch: int,
        loss: float,
        lr: float,
        tokens: int,
        seconds: float,
    ) -> None:
        """Append one step."""
        self.step.append(step)
        self.epoch.append(epoch)
        self.loss.append(loss)
        self.lr.append(lr)
        self.tokens.append(tokens)
        self.seconds.append(seconds)

    @classmethod
    def from_state_dict(cls, state: dict[str, list]) -> History:
        return cls(
            **{f.name: list(state.get(f.name, [])) for f in fields(cls)}
        )

    @property
    def tokens_per_second(self) -> float:
        """Mean training throughput over all recorded steps."""
        total = sum(self.seconds)
        return sum(self.tokens) / total if total > 0 else 0.0


@dataclass(frozen=True)
class FitState:
    """What ``fit`` tells its ``hook``: one event and where training stands.

    Args:
        event: ``"step"`` (after an optimizer step), ``"epoch_end"`` (an epoch's batches are done,
            before its evaluation), ``"eval"`` (after an evaluation; ``metrics`` holds it) or
            ``"saving"`` (a checkpoint is written but not yet renamed into place: ``saved`` holds
            its hash) and ``"checkpoint"`` (``saved`` is the file now in place).
        step: optimizer steps done (counting steps before a resume).
        epoch: the current epoch (0-based).
        batches_done: batches of this epoch done.
        loss, lr, tokens, seconds: of the last step (``"step"`` events).
        metrics: the evaluation's numbers (``"eval"`` events): ``val_loss``, ``val_ppl``,
            ``epoch_done`` and whatever ``eval_fn`` returned.
        saved: the checkpoint written (``"checkpoint"`` events).
        model: the model being trained.
    """

    event: str
    step: int
    epoch: int
    batches_done: int
    loss: float | None = None
    lr: float | None = None
    tokens: int | None = None
    seconds: float | None = None
    metrics: dict[str, Any] | None = None
    saved: WrittenFile | None = None
    model: nn.Module | None = None


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


def fit(
    model: nn.Module,
    batches: BatchSource,
    *,
    epochs: int = 1,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    | None = None,
    clip_norm: float | None = 1.0,
    amp_dtype: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
    device: torch.device | str | None = None,
    bos_id: int | None = None,
    max_steps: int | None = None,
    val_batches: Sequence[Batch] | None = None,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    checkpoint_minutes: float | None = None,
    checkpoint_extra: dict[str, Any] | None = None,
    resume_from: str | os.PathLike | bytes | None = None,
    stop: threading.Event | None = None,
    progress: bool = True,
    hook: Callable[[FitState], None] | None = None,
) -> History:
    """Train ``model`` on ``batches`` for ``epochs`` epochs and return the ``History``.

    Every step is one ``train_step``. After each epoch (or every ``eval_every`` steps) ``fit``
    evaluates: the mean loss on ``val_batches`` and whatever ``eval_fn`` returns. Checkpoints are
    saved when the run ends (its last epoch done, ``max_steps`` reached, ``stop`` set), every
    ``checkpoint_every`` steps and every ``checkpoint_minutes``; not at every epoch's end, so that
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

    Args:
        model: a ``Transformer`` (anything called as ``model(src, tgt_in, src_mask, tgt_mask)``;
            the defaults below read ``model.config.d_model`` and ``model.config.pad_id``).
        batches: ``Batch`` objects (or ``(src, tgt)`` tensor pairs with ``bos_id`` given), re-iterated
            every epoch: a list, a ``DataLoader``, or a function ``epoch -> iterable``.
        epochs: passes over the data.
        optimizer: default ``make_optimizer(model)`` (Adam, lr 1.0) with, when ``scheduler`` is also
            ``None``, ``noam_scheduler(optimizer, model.config.d_model)`` (warmup 4000).
        scheduler: stepped after every optimizer step; ``None`` keeps the rate constant (unless the
            default optimizer is used).
        loss_fn: ``(logits (B, T, V), tgt_out (B, T)) -> scalar``; default
            ``LabelSmoothingLoss(0.1, ignore_index=model.config.pad_id)``.
        clip_norm: clip the gradient norm to this value; ``None`` turns clipping off.
        amp_dtype: ``torch.bfloat16`` or ``torch.float16`` runs the forward pass under
            ``torch.autocast``; ``None`` trains in full precision.
        scaler: the ``GradScaler`` of float16 training; default ``make_grad_scaler(amp_dtype, device)``
            (one for float16, none otherwise). Its state is saved in checkpoints and restored.
        device: where to train; default: where the model's parameters are.
        bos_id: needed only when ``batches`` yields ``(src, tgt)`` pairs.
        max_steps: stop after this many optimizer steps in total (counting steps before a resume).
        val_batches: validation batches; each evaluation adds ``val_loss`` and ``val_ppl``.
        eval_fn: called as ``eval_fn(model)`` with the model in eval mode and gradients off;
            returns a dict of metrics.
        eval_every: evaluate every this many steps; ``None``: at the end of every epoch.
        checkpoint_path: where checkpoints go; each save replaces the last.
        checkpoint_every: also save every this many steps.
        checkpoint_minutes: also save when this many minutes passed since the last save.
        checkpoint_extra: more plain values stored in every checkpoint (``extra``).
        resume_from: a checkpoint written by ``fit`` (a path, or its bytes) to continue from.
        stop: when this event is set (e.g. by a Ctrl-C handler), ``fit`` finishes the step under
            way, saves a checkpoint and returns.
        progress: show a tqdm progress bar with loss, tokens/s and learning rate.
        hook: called with a frozen ``FitState`` after every step, epoch end, evaluation and save.

    Returns:
        The ``History`` of the whole run (including steps before a resume).
    """
    _check_fit_arguments(
        batches, epochs, max_steps, eval_every, checkpoint_every,
        amp_dtype, clip_norm, checkpoint_minutes,
    )  # fmt: skip
    device = (
        torch.device(device)
        if device is not None
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
        scaler = make_grad_scaler(amp_dtype, device)

    position = Position()
    if resume_from is not None:
        position = Position.resume(
            resume_from, model, optimizer, scheduler, scaler
        )
    step = TrainStep(
        distributed.wrap(model),  # under torchrun: DDP averages gradients
        optimizer, loss_fn, scheduler, clip_norm, amp_dtype, scaler,
    )  # fmt: skip
    bar = _progress_bar(
        batches, epochs, position.step, max_steps, enabled=progress
    )
    report = Report(model, hook, bar)
    saver = Checkpoints(
        checkpoint_path, checkpoint_every, checkpoint_minutes,
        checkpoint_extra, model, optimizer, scheduler, scaler, report,
    )  # fmt: skip
    evaluation = Evaluation(
        model, val_batches, eval_fn, eval_every, amp_dtype, device, report
    )
    with report:
        return training_loop(
            _on_device(batches, device, pad_id, bos_id),
            epochs,
            position,
            step,
            saver,
            evaluation,
            report,
            Stopping(max_steps, stop),
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
        # the run's end, saved as the start of the next epoch (where a longer run resumes);
        # between epochs only checkpoint_every and checkpoint_minutes save
        if epoch == epochs - 1:
            saver.save(position, epoch_end=True)
    return position.history


# --- The loop's pieces, in the order it uses them ---------------------------------------------------


def _check_fit_arguments(
    batches: BatchSource,
    epochs: int,
    max_steps: int | None,
    eval_every: int | None,
    checkpoint_every: int | None,
    amp_dtype: torch.dtype | None,
    clip_norm: float | None,
    checkpoint_minutes: float | None,
) -> None:
    check_positive(epochs=epochs)
    for name, value in (
        ("max_steps", max_steps),
        ("eval_every", eval_every),
        ("checkpoint_every", checkpoint_every),
    ):
        if value is not None:
            check_positive(**{name: value})
    if amp_dtype not in (None, torch.bfloat16, torch.float16):
        raise ValueError(
            "amp_dtype must be None, torch.bfloat16 or torch.float16, "
            f"got {amp_dtype}"
        )
    for name, value in (
        ("clip_norm", clip_norm),
        ("checkpoint_minutes", checkpoint_minutes),
    ):
        if value is not None and not value > 0:
            raise ValueError(
                f"{name} must be positive or None, got {value!r}"
            )
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


@dataclass
class Position:
    """Where training stands: what a checkpoint holds besides the weights and optimizer states.

    Args:
        step: optimizer steps done (counting steps before a resume).
        epoch: the current epoch (0-based).
        batches_done: batches of this epoch done.
        epoch_rng: the RNG state as this epoch began (a shuffling loader draws from it).
        history: every step and evaluation so far.
        skip: resumed mid-epoch: batches of ``epoch`` already seen, skipped once.
        resume_rng: resumed mid-epoch: the RNG state at the save, set once they are skipped.
    """

    step: int = 0
    epoch: int = 0
    batches_done: int = 0
    epoch_rng: dict[str, Any] | None = None
    history: History = field(default_factory=History)
    skip: int = 0
    resume_rng: dict[str, Any] | None = None

    @classmethod
    def resume(
        cls,
        checkpoint: str | os.PathLike | bytes,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        scaler: torch.amp.GradScaler | None,
    ) -> Position:
        """Load a checkpoint written by ``fit`` into the model and optimizer; where it stood."""
        saved = load_checkpoint(
            checkpoint, model, optimizer, scheduler, scaler=scaler
        )
        extra = saved["extra"]
        distributed.check_same_world(
            extra.get("world_size", 1), "this checkpoint"
        )
        if distributed.world_size() > 1:  # this rank's own random state
            rank = distributed.rank()
            saved["rng"], extra["epoch_rng"] = extra["rank_rng"][rank]
        skip = extra.get("batches_done", 0)
        # the RNG as the epoch began, then (mid-epoch) as at the save
        set_rng_state(extra.get("epoch_rng", saved["rng"]))
        return cls(
            step=saved["step"],
            epoch=saved["epoch"],
            batches_done=skip,
            history=History.from_state_dict(extra.get("history", {})),
            skip=skip,
            resume_rng=saved["rng"] if skip else None,
        )

    def batches_of(
        self, epoch: int, batches: Callable[[int], Iterable[Batch]]
    ) -> Iterator[Batch]:
        """The batches of ``epoch`` not yet trained on; counts them in ``batches_done``."""
        self.epoch, self.batches_done = epoch, 0
        self.epoch_rng = rng_state()  # what shuffling inside iter() draws
        iterator = iter(batches(epoch))
        for _ in range(self.skip):  # resumed mid-epoch: the batches seen
            if next(iterator, None) is None:
                raise ValueError(
                    f"cannot resume: the checkpoint had done {self.skip} "
                    f"batches of epoch {epoch}, but it has fewer; "
                    "the batches differ from the run's"
                )
        self.batches_done, self.skip = self.skip, 0
        if self.resume_rng is not None:  # ... then the RNG as at the save
            set_rng_state(self.resume_rng)
            self.resume_rng = None
        yield from iterator
        if self.batches_done == 0:
            raise ValueError(
                f"fit: epoch {epoch} yielded no batches; "
                "expected at least one Batch per epoch"
            )


@dataclass
class TrainStep:
    """``train_step`` with the run's settings: called with a batch, returns (loss, tokens).

    Under torchrun, each rank's loss is weighted by its share of the step's target tokens
    (``distributed.token_weight``), and ``tokens`` counts the global batch.
    """

    module: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    clip_norm: float | None
    amp_dtype: torch.dtype | None
    scaler: torch.amp.GradScaler | None

    def __call__(
        self, batch: Batch, position: Position
    ) -> tuple[float, int]:
        weight, tokens = distributed.token_weight(batch.n_tokens)
        try:
            loss = train_step(
                self.module,
                batch,
                self.optimizer,
                self.loss_fn,
                self.scheduler,
                self.clip_norm,
                self.amp_dtype,
                scaler=self.scaler,
                loss_weight=weight,
            )
        except FloatingPointError as err:
            raise FloatingPointError(
                f"{err} at step {position.step + 1} (epoch "
                f"{position.epoch}, batch {position.batches_done + 1}); "
                "stopping. Try a lower learning rate, a longer warmup, or "
                "check the batch for bad targets"
            ) from None
        return loss.item(), tokens


class Stopping:
    """When ``fit`` stops: after ``max_steps`` steps, or when ``stop`` is set (e.g. by Ctrl-C).

    Under torchrun the ranks agree after every step (``agree``): one rank asked to stop, or due
    to save, makes all of them stop or save.
    """

    def __init__(
        self, max_steps: int | None, stop: threading.Event | None
    ) -> None:
        self.max_steps, self.stop = max_steps, stop
        self.agreed = (
            False  # under torchrun: stop, as agreed after the last step
        )

    @property
    def interrupted(self) -> bool:
        """Asked to stop (rather than out of steps)."""
        return self.stop is not None and self.stop.is_set()

    def done(self, step: int) -> bool:
        if self.max_steps is not None and step >= self.max_steps:
            return True
        return (
            self.agreed if distributed.world_size() > 1 else self.interrupted
        )

    def agree(self, loss: float, save_now: bool) -> tuple[float, bool]:
        """One process: as given. Under torchrun: the mean loss over the ranks' tokens, and
        whether any rank is due to save; any rank asked to stop sets ``stop`` on all."""
        if distributed.world_size() == 1:
            return loss, save_now
        loss, self.agreed, save_now = _agree(loss, self.stop, save_now)
        return loss, save_now


class Report:
    """Tells the ``hook`` (a ``FitState`` per event) and the progress bar what happened."""

    def __init__(
        self,
        model: nn.Module,
        hook: Callable[[FitState], None] | None,
        bar: Any,
    ) -> None:
        self.model, self.hook, self.bar = model, hook, bar

    def tell(self, event: str, position: Position, **values: Any) -> None:
        if self.hook is not None:
            self.hook(
                FitState(
                    event,
                    position.step,
                    position.epoch,
                    position.batches_done,
                    model=self.model,
                    **values,
                )
            )

    def step(
        self,
        position: Position,
        loss: float,
        lr: float,
        tokens: int,
        seconds: float,
    ) -> None:
        self.tell(
            "step",
            position,
            loss=loss,
            lr=lr,
            tokens=tokens,
            seconds=seconds,
        )
        if self.bar is not None:
            tok_s = tokens / seconds if seconds > 0 else 0.0
            self.bar.set_postfix(
                loss=f"{loss:.3f}",
                tok_s=f"{tok_s:,.0f}",
                lr=f"{lr:.2e}",
                refresh=False,
            )
            self.bar.update(1)

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.bar is not None:
            self.bar.close()


class Evaluation:
    """The mean loss on ``val_batches`` and ``eval_fn(model)``, every ``eval_every`` steps or
    at every epoch's end; each evaluation goes into the history and to the hook."""

    def __init__(
        self,
        model: nn.Module,
        val_batches: Sequence[Batch] | None,
        eval_fn: Callable[[nn.Module], dict[str, float]] | None,
        eval_every: int | None,
        amp_dtype: torch.dtype | None,
        device: torch.device,
        report: Report,
    ) -> None:
        self.model, self.eval_fn, self.eval_every = (
            model,
            eval_fn,
            eval_every,
        )
        self.val_batches = (
            None
            if val_batches is None
            else [b.to(device) for b in val_batches]
        )
        self.amp_dtype, self.report = amp_dtype, report
        self.enabled = eval_fn is not None or val_batches is not None

    def every_steps(self, position: Position) -> None:
        every = self.eval_every
        if self.enabled and every is not None and position.step % every == 0:
            self(position, epoch_done=False)

    def at_epoch_end(self, position: Position, epoch_done: bool) -> None:
        if self.enabled and self.eval_every is None:
            self(position, epoch_done)

    def __call__(self, position: Position, epoch_done: bool) -> None:
        metrics: dict[str, Any] = {}
        if self.val_batches is not None:
            val_loss = mean_loss(
                self.model, self.val_batches, self.amp_dtype
            )
            metrics |= {
                "val_loss": val_loss,
                "val_ppl": math.exp(min(val_loss, 50.0)),
                "epoch_done": epoch_done,
            }
        if self.eval_fn is not None:
            was_training = self.model.training
            self.model.eval()
            with torch.no_grad():
                metrics |= dict(self.eval_fn(self.model))
            self.model.train(was_training)
        position.history.evals.append(
            {"step": position.step, "epoch": position.epoch, **metrics}
        )
        self.report.tell("eval", position, metrics=metrics)


class Checkpoints:
    """Saves the run into ``path`` (each save replaces the last): every ``every`` steps, every
    ``minutes``, and whenever ``fit`` asks. Under torchrun rank 0 writes, with every rank's RNG."""

    def __init__(
        self,
        path: str | os.PathLike | None,
        every: int | None,
        minutes: float | None,
        extra: dict[str, Any] | None,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        scaler: torch.amp.GradScaler | None,
        report: Report,
    ) -> None:
        self.path, self.every, self.minutes = path, every, minutes
        self.extra = extra or {}
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler = scheduler, scaler
        self.report = report
        self.last_save = time.monotonic()

    def due(self, step: int) -> bool:
        """Is a save due after this step (by the step count or the clock)?"""
        if self.every is not None and step % self.every == 0:
            return True
        return (
            self.minutes is not None
            and time.monotonic() - self.last_save >= 60 * self.minutes
        )

    def save(self, position: Position, epoch_end: bool = False) -> None:
        """Save where training stands; at an epoch's end, as the start of the next epoch."""
        if self.path is None:
            return
        epoch, batches_done, epoch_rng = (
            (position.epoch + 1, 0, rng_state())
            if epoch_end
            else (position.epoch, position.batches_done, position.epoch_rng)
        )
        extra = {
            **self.extra,
            "batches_done": batches_done,
            "epoch_rng": epoch_rng,
            "history": position.history.state_dict(),
        }
        world = distributed.world_size()
        if world > 1:  # every rank's random state; rank 0 writes
            extra["world_size"] = world
            extra["rank_rng"] = distributed.gather_object(
                (rng_state(), epoch_rng)
            )
            if not distributed.is_main():
                return
        data = checkpoint_bytes(
            self.model,
            self.optimizer,
            self.scheduler,
            position.step,
            epoch,
            extra,
            self.scaler,
        )
        with AtomicWriter(self.path) as writer:
            writer.write(data)
            # written, not yet renamed into place
            self.report.tell("saving", position, saved=writer.finish())
        self.last_save = time.monotonic()
        self.report.tell("checkpoint", position, saved=writer.written)


def _agree(
    loss: float, stop: threading.Event | None, timed_out: bool
) -> tuple[float, bool, bool]:
    """Under torchrun, after a step: the mean loss over the ranks' tokens, and whether any rank
    was asked to stop or is due to save (then all do; ``stop`` is set on every rank)."""
    asked = stop is not None and stop.is_set()
    total, asked_any, due_any = distributed.all_reduce_sum(
        [loss, asked, timed_out]
    )
    if asked_any and stop is not None:
        stop.set()
    return total / distributed.world_size(), asked_any > 0, due_any > 0


def _progress_bar(
    batches: BatchSource,
    epochs: int,
    initial: int,
    max_steps: int | None,
    enabled: bool,
):
    if not enabled:
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
