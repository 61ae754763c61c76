"""One optimizer step under autocast: ``train_step``, and ``mean_loss``, the loss it is judged by.

Read top to bottom: the mean loss on held-out batches (teacher forced, in eval mode), the autocast
dtype that ``TrainConfig.amp`` asks for and the gradient scaler float16 needs, and ``train_step``
(forward, loss, backward, clip, Adam, schedule). ``aiayn.training.loop.fit`` runs it over epochs; the
schedule lives in ``aiayn.schedule``, the loss in ``aiayn.loss``, the batches in ``aiayn.training.batches``.

    B  batch        T  target length        V  vocabulary size
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..data.multi30k import PAD
from ..loss import LabelSmoothingLoss
from .batches import Batch

__all__ = ["mean_loss", "amp_dtype_for", "make_grad_scaler", "train_step"]


@torch.no_grad()
def mean_loss(
    model: nn.Module,
    batches: Iterable[Batch],
    amp_dtype: torch.dtype | None = None,
) -> float:
    """Per-token cross-entropy (no smoothing) of ``model`` on ``batches``, teacher forced, in eval mode.

    The model's training mode is restored afterwards.
    """
    device = next(model.parameters()).device
    pad_id = getattr(getattr(model, "config", None), "pad_id", PAD)
    loss_fn = LabelSmoothingLoss(0.0, ignore_index=pad_id, reduction="sum")
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for batch in batches:
        batch = batch.to(device, non_blocking=True)
        with _autocast(device, amp_dtype):
            logits = model(
                batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask
            )  # (B, T, V)
        total += float(loss_fn(logits.float(), batch.tgt_out))
        tokens += batch.n_tokens
    model.train(was_training)
    if tokens == 0:
        raise ValueError("mean_loss: the batches hold no target tokens")
    return total / tokens


# --- One training step ----------------------------------------------------------------------------


def _autocast(device: torch.device, amp_dtype: torch.dtype | None):
    # no cache of cast weights: a pass casts each weight once anyway, and
    # CUDA graphs cannot be captured with it (cuda_graphs.GraphedShapes)
    return torch.autocast(
        device.type,
        dtype=amp_dtype or torch.bfloat16,
        enabled=amp_dtype is not None,
        cache_enabled=False,
    )


def amp_dtype_for(
    amp: str | None, device: torch.device | str
) -> torch.dtype | None:
    """The autocast dtype that ``TrainConfig.amp`` asks for on ``device`` (``None``: float32).

    ``"auto"``: on CUDA, bfloat16 where the GPU computes it natively (compute capability 8.0
    and up: A100, L4, H100 ...), float16 below it (Colab's T4 is 7.5), which needs a gradient
    scaler (``make_grad_scaler``); on other devices none. ``"bf16"`` and ``"fp16"`` ask for that
    dtype on any device (the CPU's autocast runs both); ``None`` for full precision.

    The capability is read, not ``torch.cuda.is_bf16_supported()``: that also answers yes for
    GPUs that only emulate bfloat16, slowly.
    """
    device = torch.device(device)
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        return torch.float16
    if amp == "auto" and device.type == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return torch.bfloat16 if major >= 8 else torch.float16
    if amp in ("auto", None):
        return None
    raise ValueError(
        f"amp must be 'auto', 'bf16', 'fp16' or None, got {amp!r}"
    )


def make_grad_scaler(
    amp_dtype: torch.dtype | None, device: torch.device | str
) -> torch.amp.GradScaler | None:
    """A ``torch.amp.GradScaler`` for float16 training on ``device``, else ``None``.

    float16 has 5 exponent bits: gradients below about 6e-8 become 0. The scaler multiplies the
    loss by a large factor (65,536 at first) before the backward pass and divides the gradients by
    it before the update; a step whose gradients overflowed is skipped and the factor halved, and
    after 2,000 good steps it doubles. bfloat16 has float32's range and needs none.
    """
    if amp_dtype != torch.float16:
        return None
    return torch.amp.GradScaler(torch.device(device).type)


def train_step(
    model: nn.Module,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    clip_norm: float | None = 1.0,
    amp_dtype: torch.dtype | None = None,
    check_finite: bool = True,
    scaler: torch.amp.GradScaler | None = None,
    loss_weight: float = 1.0,
) -> torch.Tensor:
    """One optimizer step: forward (under autocast), loss, backward, clipping, update, schedule.

    Args:
        model: called as ``model(src, tgt_in, src_mask, tgt_mask) -> logits (B, T, V)``.
        batch: a ``Batch`` on the model's device.
        optimizer, scheduler: the scheduler (if any) is stepped after the optimizer.
        loss_fn: ``(logits (B, T, V), tgt_out (B, T)) -> scalar``.
        clip_norm: clip the gradient norm to this value (``None``: no clipping).
        amp_dtype: ``torch.bfloat16`` or ``torch.float16`` for autocast, ``None`` for full precision.
        check_finite: read the loss before the update and raise ``FloatingPointError`` when it is
            NaN or infinite (one device synchronisation per step; the benchmark turns it off).
        scaler: a ``GradScaler`` (float16): the loss is scaled before the backward pass, the
            gradients unscaled before clipping, and a step with overflowed gradients is skipped.
        loss_weight: multiplies the loss before the backward pass; under torchrun, this rank's
            share of the step's target tokens (``distributed.token_weight``).

    Returns:
        The loss (times ``loss_weight``), detached (a 0-dim tensor on the model's device).
    """
    device = batch.tgt_out.device
    with _autocast(device, amp_dtype):
        logits = model(
            batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask
        )  # (B, T, V)
        loss = loss_fn(logits, batch.tgt_out)
        if loss_weight != 1.0:
            loss = loss * loss_weight
    if check_finite and not math.isfinite(loss.item()):
        raise FloatingPointError(f"loss is {loss.item()}")
    optimizer.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        if clip_norm is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        if clip_norm is not None:
            scaler.unscale_(optimizer)  # clip the true gradients
            nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
        scaler.step(optimizer)  # skipped when a gradient is inf or NaN
        scaler.update()
    if scheduler is not None:
        scheduler.step()
    return loss.detach()
