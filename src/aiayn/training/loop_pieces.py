"""The named pieces of ``aiayn.training.loop.training_loop``, in the order it uses them.

``Position``: where training stands (step, epoch, batches done, the random state as the epoch
began); it loads a checkpoint and skips the batches a resumed run has seen. ``TrainStep``:
``train_step`` with the run's settings. ``Stopping``: ``max_steps``, the ``stop`` event, the
other ranks. ``Report``: the hook and the progress bar. ``Evaluation``: the mean loss on held-out
batches and ``eval_fn``. ``Checkpoints``: when to save, and the save.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..files import AtomicWriter
from . import distributed
from .batches import Batch
from .checkpoints import (
    checkpoint_bytes,
    fit_extra,
    fit_position,
    load_checkpoint,
    rng_state,
    set_rng_state,
)
from .history import FitState, History
from .step import mean_loss, train_step

__all__ = [
    "Position",
    "TrainStep",
    "Stopping",
    "Report",
    "Evaluation",
    "Checkpoints",
]


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
        checkpoint: str | os.PathLike | bytes | dict[str, Any],
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None,
        scaler: torch.amp.GradScaler | None,
    ) -> Position:
        """Load a checkpoint written by ``fit`` (a path, its bytes, or the dict already read)
        into the model and optimizer; where it stood."""
        saved = load_checkpoint(
            checkpoint, model, optimizer, scheduler, scaler=scaler
        )
        at = fit_position(saved, distributed.rank())
        distributed.check_same_world(at.world_size, "this checkpoint")
        # the RNG as the epoch began, then (mid-epoch) as at the save
        set_rng_state(at.epoch_rng)
        return cls(
            step=at.step,
            epoch=at.epoch,
            batches_done=at.batches_done,
            history=History.from_state_dict(at.history),
            skip=at.batches_done,
            resume_rng=at.rng if at.batches_done else None,
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
    """Saves the run into ``path`` (each save replaces the last): after the first step (unless
    ``resumed`` from one), every ``every`` steps, every ``minutes``, and whenever ``fit`` asks.
    Under torchrun rank 0 writes, with every rank's RNG."""

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
        resumed: bool = False,
    ) -> None:
        self.path, self.every, self.minutes = path, every, minutes
        self.extra = extra or {}
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler = scheduler, scaler
        self.report = report
        self.last_save = time.monotonic()
        self.saved = resumed  # a run holds a checkpoint to go back to

    def due(self, step: int) -> bool:
        """Is a save due after this step: the run's first (so that a run always holds one it can
        resume from, and a disk too small for it says so at once), or by the step count or the clock?"""
        if not self.saved:
            return True
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
        rank_rng = None
        if distributed.world_size() > 1:  # every rank's random state
            rank_rng = distributed.gather_object((rng_state(), epoch_rng))
            if not distributed.is_main():  # rank 0 writes
                return
        extra = fit_extra(
            self.extra,
            batches_done,
            epoch_rng,
            position.history.state_dict(),
            rank_rng,
        )
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
        self.last_save, self.saved = time.monotonic(), True
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
