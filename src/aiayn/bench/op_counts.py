"""How many ops does a training step launch? ``count_step_ops`` counts them, phase by phase.

``count_step_ops`` counts the ATen operator calls of one training step (after one uncounted step,
which creates Adam's state) with a ``TorchDispatchMode`` (``CountOps``): every call that reaches a
kernel, on a copy of the model; the benchmark counts each eager contender on its first batch. A
measure of launch overhead that does not depend on the machine's speed, nor on the model's widths
or the batch's shape, but on the kind of device: a CPU dispatches more ops for the same step
(dropout as four ops, attention on its math path; 2,699 against 2,145 on an H100 for the
``multi30k`` model in bfloat16). Compiled contenders are not counted: their kernels are no ATen
calls.

    B  batch        T  target length        V  vocabulary size
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from ..data.multi30k import PAD
from ..loss import LabelSmoothingLoss
from ..schedule import make_optimizer
from ..training.batches import Batch
from ..training.step import make_grad_scaler

__all__ = ["CountOps", "count_step_ops"]


class CountOps(TorchDispatchMode):
    """Count every ATen operator call dispatched while the mode is active (``ops``, ``total``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.ops.values())


def count_step_ops(
    model: nn.Module,
    batch: Batch,
    amp_dtype: torch.dtype | None = None,
    fused_adam: bool | None = None,
    top: int = 0,
) -> dict[str, Any]:
    """ATen ops dispatched by one training step, per phase, on a copy of ``model`` (left unchanged).

    One uncounted step comes first (it creates Adam's state), then the counted one: forward and
    loss, backward (with ``zero_grad``), gradient clipping and the Adam step, as ``train_step``
    (with float16, the gradient scaler's scaling, unscaling, step and update too). The count
    depends on the model's code path, not on its widths or the batch's shape.

    Args:
        model: called as ``model(src, tgt_in, src_mask, tgt_mask)``.
        batch: a ``Batch`` on the model's device.
        amp_dtype: autocast dtype of the forward pass (``None``: full precision).
        fused_adam: Adam's single-kernel implementation (``None``: on CUDA, as ``make_optimizer``).
        top: also return the ``top`` most frequent forward ops under ``"top"``.

    Returns:
        ``{"forward + loss": n, "backward": n, "clip + Adam": n, "total": n}`` (and ``"top"``).
    """
    model = copy.deepcopy(model).train()
    pad_id = getattr(getattr(model, "config", None), "pad_id", PAD)
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=pad_id)
    optimizer = make_optimizer(model, lr=1e-4, fused=fused_adam)
    device = batch.tgt_out.device
    scaler = make_grad_scaler(amp_dtype, device)  # float16 only
    counts: dict[str, Any] = {}
    # the first step creates Adam's state: count the second
    for _ in range(2):
        with CountOps() as forward:
            with torch.autocast(
                device.type,
                dtype=amp_dtype or torch.bfloat16,
                enabled=amp_dtype is not None,
            ):
                logits = model(
                    batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask
                )  # (B, T, V)
                loss = loss_fn(logits, batch.tgt_out)
        with CountOps() as backward:
            optimizer.zero_grad(set_to_none=True)
            (loss if scaler is None else scaler.scale(loss)).backward()
        with CountOps() as update:
            if scaler is not None:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
        counts = {
            "forward + loss": forward.total,
            "backward": backward.total,
            "clip + Adam": update.total,
        }
        counts["total"] = sum(counts.values())
        if top:
            counts["top"] = forward.ops.most_common(top)
    return counts
