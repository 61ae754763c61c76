"""Training as the chapters read it: one step, and the loop of epochs over batches.

These are the reader's versions of ``aiayn.training.step.train_step`` and
``aiayn.training.loop.fit``: the same algorithm in plain PyTorch, without what only the engine
needs (mixed precision, the gradient scaler, loss weights for several processes, checkpoints,
resuming, progress bars). ``tests/test_reference_versions.py`` holds them equal to the production
versions: in float32 on the CPU, from the same seed and on the same batches, the losses and the
weights after every step are the same to the bit.

    B  batch        T  target length        V  vocabulary size
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from .batches import Batch

__all__ = ["train_step", "train"]


def train_step(
    model: nn.Module,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    clip_norm: float = 1.0,
) -> float:
    """One optimizer step: forward, loss, backward, clip, update, schedule; returns the loss.

    Args:
        model: called as ``model(src, tgt_in, src_mask, tgt_mask) -> logits (B, T, V)``.
        batch: a ``Batch`` on the model's device.
        loss_fn: ``(logits (B, T, V), tgt_out (B, T)) -> scalar``.
        scheduler: sets the learning rate of the next step.
        clip_norm: the largest gradient norm the update may use.
    """
    # teacher forcing: the decoder reads the target shifted right
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    loss = loss_fn(logits, batch.tgt_out)  # logits (B, T, V), tgt_out (B, T)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    scheduler.step()
    return loss.item()


def train(
    model: nn.Module,
    batches: Iterable[Batch],
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    epochs: int = 1,
    log: Callable[[int, int, float, float], None] | None = None,
) -> list[float]:
    """Train for ``epochs`` passes over ``batches``; returns the loss of every step.

    Args:
        model, optimizer, loss_fn, scheduler: as in ``train_step``.
        batches: ``Batch`` objects on the model's device, iterated again every epoch.
        epochs: passes over the batches.
        log: called after every step as ``log(epoch, step, loss, lr)``.
    """
    model.train()  # dropout on
    losses = []
    for epoch in range(epochs):
        for batch in batches:
            lr = optimizer.param_groups[0]["lr"]  # the rate this step uses
            loss = train_step(model, batch, optimizer, loss_fn, scheduler)
            losses.append(loss)
            if log is not None:
                log(epoch, len(losses), loss, lr)
    return losses
