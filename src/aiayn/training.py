"""Training: the paper's optimizer and learning-rate schedule, label smoothing, batches, and a resumable loop.

Section 5.3 trains with Adam (β1 = 0.9, β2 = 0.98, ε = 1e-9) and a learning rate that rises linearly
for ``warmup`` steps and then decays with the inverse square root of the step ("Noam" schedule).
Section 5.4 smooths the labels with ε_ls = 0.1.

Read top to bottom: the schedule, the loss, batches, one ``train_step``, and ``fit``, which runs
epochs of steps, evaluates, saves checkpoints (``aiayn.checkpoints``) and resumes from them, telling
a ``hook`` what happened.

    B  batch        S  source length        T  target length        V, C  vocabulary size (classes)
    N  number of target tokens in a flattened batch
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .checkpoints import (
    checkpoint_bytes,
    load_checkpoint,
    read_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .checks import (
    AtomicWriter,
    WrittenFile,
    check_positive,
    check_token_dtype,
)
from .data import BOS, PAD, collate, make_batches
from .masks import decoder_mask, padding_mask, shift_right

__all__ = [
    "noam_rate",
    "noam_scheduler",
    "make_optimizer",
    "LabelSmoothingLoss",
    "Batch",
    "copy_task_batches",
    "EpochBatches",
    "eval_batches",
    "mean_loss",
    "checkpoint_bytes",
    "save_checkpoint",
    "read_checkpoint",
    "load_checkpoint",
    "amp_dtype_for",
    "make_grad_scaler",
    "train_step",
    "History",
    "FitState",
    "fit",
]


# --- Optimizer and learning-rate schedule ---------------------------------------------------------


def noam_rate(
    step: int, d_model: int, warmup: int = 4000, factor: float = 1.0
) -> float:
    """The learning rate of section 5.3: factor · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5).

    It grows linearly for the first ``warmup`` steps, peaks at step ``warmup`` with the value
    factor · (d_model · warmup)^-0.5, then decays as step^-0.5.

    Args:
        step: the optimizer step, counting from 1 (step 0 would divide by zero).
        d_model: model width.
        warmup: number of warm-up steps (4000 in the paper).
        factor: a multiplier on the whole curve (1 in the paper).
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(
            f"step counts from 1, got {step!r} (LambdaLR calls its lambda "
            "with 0 first: use noam_scheduler, which passes step + 1)"
        )
    check_positive(d_model=d_model, warmup=warmup)
    _check_factor(factor)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def _check_factor(factor: float) -> None:
    if (
        isinstance(factor, bool)
        or not isinstance(factor, (int, float))
        or not factor > 0
    ):
        raise ValueError(
            f"factor must be a positive number (it scales the whole rate), got {factor!r}"
        )


def noam_scheduler(
    optimizer: torch.optim.Optimizer,
    d_model: int,
    warmup: int = 4000,
    factor: float = 1.0,
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` that sets the learning rate to ``noam_rate`` at every step.

    ``LambdaLR`` multiplies the optimizer's base learning rate by the lambda, so the optimizer must be
    created with ``lr=1.0`` (``make_optimizer`` does) for the lambda to *be* the rate. ``LambdaLR``
    also evaluates the lambda once at construction with step 0, and after the k-th
    ``scheduler.step()`` with step k; we pass ``step + 1``, so the first optimizer step uses
    ``noam_rate(1)`` and the k-th uses ``noam_rate(k)``.

    Args:
        optimizer: an optimizer whose base learning rate is 1.0.
        d_model: model width.
        warmup: number of warm-up steps.
        factor: multiplier on the schedule.
    """
    check_positive(d_model=d_model, warmup=warmup)
    _check_factor(factor)

    def rate(step: int) -> float:
        return noam_rate(step + 1, d_model, warmup, factor)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


def make_optimizer(
    model: nn.Module,
    lr: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    fused: bool | None = None,
) -> torch.optim.Adam:
    """Adam with the paper's settings, over the trainable parameters of ``model``.

    Args:
        model: the model to train.
        lr: base learning rate; keep 1.0 when ``noam_scheduler`` sets the rate.
        betas: (β1, β2), (0.9, 0.98) in the paper.
        eps: ε, 1e-9 in the paper.
        fused: use the fused single-kernel implementation; ``None`` chooses it when every
            parameter is on a CUDA device.
    """
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "make_optimizer: the model has no trainable parameters"
        )
    if fused is None:
        fused = all(p.is_cuda for p in params)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, fused=fused)


# --- Loss -----------------------------------------------------------------------------------------


class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against smoothed targets y' = (1 − ε) · y + ε / C, averaged over non-ignored tokens.

    With y the one-hot target over C classes, the loss of one token is

        −Σ_c y'_c log p_c = (1 − ε) · (−log p_target) + ε · mean_c(−log p_c),

    which is exactly what ``F.cross_entropy(..., label_smoothing=ε)`` computes: ε is spread evenly
    over all C classes, the true one included, so the true class keeps 1 − ε + ε / C.

    The Annotated Transformer spreads ε over C − 2 classes instead, leaving out the true class and
    the padding token (whose probability it sets to 0), and measures a KL divergence. Both teach the
    model not to be over-confident; they differ by a constant and a slightly different target.
    We follow PyTorch so the loss can be checked against ``F.cross_entropy`` and the numbers agree
    with what readers get from the standard library; the padding column of ``p`` is still pushed
    down by the ε / C share, which is harmless because padding is never a target here.

    Args:
        smoothing: ε in [0, 1); 0 gives plain cross-entropy. The paper uses 0.1.
        ignore_index: target id that contributes nothing (the padding id).
        reduction: ``"mean"`` over non-ignored tokens, ``"sum"``, or ``"none"`` (per token, 0 where ignored).
    """

    def __init__(
        self,
        smoothing: float = 0.1,
        ignore_index: int = -100,
        reduction: str = "mean",
    ):
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(
                f"smoothing must be in [0, 1), got {smoothing!r}"
            )
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(
                f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
            )
        self.smoothing = smoothing
        self.ignore_index = ignore_index
        self.reduction = reduction

    def forward(
        self, logits: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        """Compute the loss.

        Args:
            logits: ``(N, C)`` or ``(B, T, C)`` unnormalised scores.
            target: ``(N,)`` or ``(B, T)`` class ids.

        Returns:
            A scalar (``"mean"``, ``"sum"``) or the per-token losses shaped like ``target`` (``"none"``).
        """
        check_token_dtype(target, "target")
        shapes_match = tuple(logits.shape[:-1]) == tuple(target.shape)
        if logits.dim() not in (2, 3) or not shapes_match:
            raise ValueError(
                "expected logits (N, C) with target (N,) or logits "
                "(B, T, C) with target (B, T), got logits "
                f"{tuple(logits.shape)} and target {tuple(target.shape)}"
            )
        C = logits.size(-1)
        log_p = F.log_softmax(
            logits.float().reshape(-1, C), dim=-1
        )  # (N, C)
        target = target.reshape(-1)  # (N,)
        keep = target != self.ignore_index  # (N,)
        outside = keep & ((target < 0) | (target >= C))  # (N,)
        if bool(outside.any()):
            bad = target[outside][:5].tolist()
            raise ValueError(
                f"target: expected class ids in [0, {C}) "
                f"(or ignore_index={self.ignore_index}), got {bad}"
            )
        # any valid id where the target is ignored (zeroed by `keep` below)
        safe_target = torch.where(keep, target, torch.zeros_like(target))
        nll = -log_p.gather(-1, safe_target[:, None])[:, 0]  # (N,) −log p_y
        uniform = -log_p.mean(dim=-1)  # (N,) mean over classes of −log p_c
        eps = self.smoothing
        loss = ((1.0 - eps) * nll + eps * uniform) * keep  # (N,)
        if self.reduction == "none":
            return loss.view(logits.shape[:-1])  # (N,) or (B, T)
        if self.reduction == "sum":
            return loss.sum()
        # NaN when every token is ignored, as F.cross_entropy gives
        return loss.sum() / keep.sum()

    def extra_repr(self) -> str:
        return f"smoothing={self.smoothing}, ignore_index={self.ignore_index}, reduction={self.reduction!r}"


# --- Batches --------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One training batch: the source, the decoder input and output, and their masks.

    ``tgt`` ``[A, B, <eos>, <pad>]`` becomes ``tgt_in`` ``[<bos>, A, B, <eos>]`` (the decoder input, shifted
    right) and ``tgt_out`` ``[A, B, <eos>, <pad>]`` (what each position must predict). The ``<eos>`` that
    moves into ``tgt_in`` sits where ``tgt_out`` is padding, so it is never used for the loss.

    Args:
        src: ``(B, S)`` source ids.
        src_mask: ``(B, 1, 1, S)`` boolean padding mask.
        tgt_in: ``(B, T)`` decoder input ids, ``<bos>`` first.
        tgt_out: ``(B, T)`` target ids, ending in ``<eos>`` then padding.
        tgt_mask: ``(B, 1, T, T)`` boolean: look-ahead and padding of ``tgt_in``.
        n_tokens: number of non-padding target tokens (those that count in the loss).
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor
    n_tokens: int

    @classmethod
    def make(
        cls, src: torch.Tensor, tgt: torch.Tensor, pad_id: int, bos_id: int
    ) -> Batch:
        """Build a batch from padded tensors.

        Args:
            src: ``(B, S)`` source ids, padded with ``pad_id``.
            tgt: ``(B, T)`` target ids, each ending in ``<eos>``, padded with ``pad_id``.
            pad_id: the padding id.
            bos_id: the beginning-of-sequence id, put first in ``tgt_in``; must differ from ``pad_id``.
        """
        check_token_dtype(src, "src")
        check_token_dtype(tgt, "tgt")
        if src.dim() != 2 or tgt.dim() != 2 or src.size(0) != tgt.size(0):
            raise ValueError(
                "expected src (B, S) and tgt (B, T) with the same B, "
                f"got src {tuple(src.shape)} and tgt {tuple(tgt.shape)}"
            )
        if bos_id == pad_id:
            raise ValueError(
                f"bos_id and pad_id must differ (the <bos> column would be masked), got both {pad_id}"
            )
        tgt_in = shift_right(tgt, bos_id)  # (B, T)
        return cls(
            src=src,
            src_mask=padding_mask(src, pad_id),  # (B, 1, 1, S)
            tgt_in=tgt_in,
            tgt_out=tgt,
            tgt_mask=decoder_mask(tgt_in, pad_id),  # (B, 1, T, T)
            n_tokens=int((tgt != pad_id).sum()),
        )

    @classmethod
    def from_pairs(
        cls,
        src: Sequence[Sequence[int]],
        tgt: Sequence[Sequence[int]],
        pad_id: int,
        bos_id: int,
    ) -> Batch:
        """Pad lists of id sequences and build a batch.

        Args:
            src: B source sequences of any lengths.
            tgt: B target sequences, each already ending in ``<eos>``.
            pad_id: the padding id.
            bos_id: the beginning-of-sequence id.
        """
        if len(src) != len(tgt) or len(src) == 0:
            raise ValueError(
                f"expected the same, non-zero number of sources and targets, got {len(src)} and {len(tgt)}"
            )
        return cls.make(_pad(src, pad_id), _pad(tgt, pad_id), pad_id, bos_id)

    def to(
        self, device: torch.device | str, non_blocking: bool = False
    ) -> Batch:
        """A copy of the batch with every tensor on ``device``."""
        moved = {
            f.name: getattr(self, f.name).to(
                device, non_blocking=non_blocking
            )
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)


def _pad(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    out = torch.full(
        (len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long
    )  # (B, L)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    return out


def copy_task_batches(
    n_batches: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    seed: int = 0,
    reverse: bool = False,
    min_len: int | None = None,
) -> list[Batch]:
    """Synthetic batches for the copy task: the target is the source (or the source reversed), then ``<eos>``.

    Tokens are drawn uniformly from the ids above the special ones, ``max(pad, bos, eos) + 1 .. vocab_size - 1``.

    Args:
        n_batches: number of batches.
        batch_size: sentences per batch.
        seq_len: longest source length.
        vocab_size: number of ids, special ones included.
        pad_id, bos_id, eos_id: the special ids.
        seed: seed of the private generator (the global RNG is not touched).
        reverse: ask for the source reversed instead of copied.
        min_len: shortest source length; lengths are drawn from ``min_len..seq_len`` and shorter
            sentences are padded. ``None`` makes every sentence ``seq_len`` long.

    Returns:
        A list of ``n_batches`` ``Batch`` objects with ``src`` ``(batch_size, ≤ seq_len)`` and
        ``tgt_out`` ``(batch_size, ≤ seq_len + 1)``.
    """
    check_positive(
        n_batches=n_batches,
        batch_size=batch_size,
        seq_len=seq_len,
        vocab_size=vocab_size,
    )
    for name, value in (
        ("pad_id", pad_id),
        ("bos_id", bos_id),
        ("eos_id", eos_id),
    ):
        if not 0 <= value < vocab_size:
            raise ValueError(
                f"{name} must be an id in [0, vocab_size={vocab_size}), got {value}"
            )
    first = max(pad_id, bos_id, eos_id) + 1
    if vocab_size <= first:
        raise ValueError(
            f"vocab_size must leave ids for ordinary tokens above {first - 1}, got {vocab_size}"
        )
    min_len = seq_len if min_len is None else min_len
    if not 1 <= min_len <= seq_len:
        raise ValueError(
            f"min_len must be in [1, seq_len={seq_len}], got {min_len}"
        )
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        tokens = torch.randint(
            first, vocab_size, (batch_size, seq_len), generator=g
        )  # (B, S)
        lengths = torch.randint(
            min_len, seq_len + 1, (batch_size,), generator=g
        ).tolist()
        src = [
            row[:n].tolist() for row, n in zip(tokens, lengths, strict=True)
        ]
        tgt = [(s[::-1] if reverse else s) + [eos_id] for s in src]
        batches.append(Batch.from_pairs(src, tgt, pad_id, bos_id))
    return batches


# --- Batches of a corpus ---------------------------------------------------------------------------


def _pinned(batch: Batch) -> Batch:
    tensors = {
        f.name: getattr(batch, f.name).pin_memory()
        for f in fields(batch)
        if f.name != "n_tokens"
    }
    return replace(batch, **tensors)


IdPairs = Sequence[tuple[Sequence[int], Sequence[int]]]


class EpochBatches:
    """The training batches of each epoch, for ``fit``: called with an epoch, it yields its ``Batch``es.

    ``make_batches`` draws the order from ``(seed, epoch)``, so iterating an epoch again gives the
    same batches, which ``fit`` needs to resume in the middle of one. ``len()`` (epoch 0's count)
    sizes the progress bar.

    Args:
        pairs: ``(source ids, target ids)`` per pair, without ``<eos>``.
        max_tokens: padded positions per batch.
        seed: the batch-order seed.
        pin_memory: pin each batch's tensors (only when CUDA is available).
    """

    def __init__(
        self,
        pairs: IdPairs,
        max_tokens: int,
        seed: int = 0,
        pin_memory: bool = False,
    ):
        self.pairs, self.max_tokens, self.seed = pairs, max_tokens, seed
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self._indices: dict[int, list[list[int]]] = {}

    def indices(self, epoch: int) -> list[list[int]]:
        """Pair indices of each batch of ``epoch``."""
        if epoch not in self._indices:
            self._indices[epoch] = make_batches(
                self.pairs, self.max_tokens, seed=self.seed, epoch=epoch
            )
        return self._indices[epoch]

    def __len__(self) -> int:
        return len(self.indices(0))

    def __call__(self, epoch: int) -> Iterator[Batch]:
        for batch in self.indices(epoch):
            src, tgt = collate(
                [self.pairs[i] for i in batch]
            )  # (B, S), (B, T)
            out = Batch.make(src, tgt, PAD, BOS)
            yield _pinned(out) if self.pin_memory else out


def eval_batches(pairs: IdPairs, max_tokens: int) -> list[Batch]:
    """The pairs in batches of at most ``max_tokens`` padded positions, in a fixed order."""
    return [
        Batch.make(*collate([pairs[i] for i in batch]), PAD, BOS)
        for batch in make_batches(pairs, max_tokens, shuffle=False)
    ]


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
    return torch.autocast(
        device.type,
        dtype=amp_dtype or torch.bfloat16,
        enabled=amp_dtype is not None,
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

    Returns:
        The loss, detached (a 0-dim tensor on the model's device).
    """
    device = batch.tgt_out.device
    with _autocast(device, amp_dtype):
        logits = model(
            batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask
        )  # (B, T, V)
        loss = loss_fn(logits, batch.tgt_out)
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
    saved at every epoch's end, when ``max_steps`` or ``stop`` ends the run, every
    ``checkpoint_every`` steps and every ``checkpoint_minutes``.

    Resuming is exact: the checkpoint holds the weights, the optimizer and scheduler states, the
    torch RNG states (for dropout), the epoch, how many batches of that epoch were consumed, the
    RNG state at the start of that epoch (so a shuffling loader reshuffles the same way) and the
    history. ``fit(..., resume_from=path)`` restores all of it and skips the batches already seen,
    so an interrupted run continues with exactly the losses the uninterrupted run would have had.
    This needs ``batches`` to yield the same batches when iterated again for the same epoch.

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
    val_batches = (
        None if val_batches is None else [b.to(device) for b in val_batches]
    )
    evaluating = eval_fn is not None or val_batches is not None

    history = History()
    step, start_epoch, skip = 0, 0, 0
    resume_rng = None
    if resume_from is not None:
        checkpoint = load_checkpoint(
            resume_from, model, optimizer, scheduler, scaler=scaler
        )
        step, start_epoch = checkpoint["step"], checkpoint["epoch"]
        extra = checkpoint["extra"]
        skip = extra.get("batches_done", 0)
        history = History.from_state_dict(extra.get("history", {}))
        # the RNG as the epoch began, then (mid-epoch) as at the save
        set_rng_state(extra.get("epoch_rng", checkpoint["rng"]))
        resume_rng = checkpoint["rng"] if skip else None

    def tell(event: str, **values: Any) -> None:
        if hook is not None:
            hook(
                FitState(
                    event, step, epoch, batches_done, model=model, **values
                )
            )

    last_save = time.monotonic()

    def save(
        epoch: int, batches_done: int, epoch_rng: dict[str, Any]
    ) -> None:
        nonlocal last_save
        if checkpoint_path is not None:
            extra = {
                **(checkpoint_extra or {}),
                "batches_done": batches_done,
                "epoch_rng": epoch_rng,
                "history": history.state_dict(),
            }
            data = checkpoint_bytes(
                model, optimizer, scheduler, step, epoch, extra, scaler
            )
            with AtomicWriter(checkpoint_path) as writer:
                writer.write(data)
                tell("saving", saved=writer.finish())  # not yet renamed
            last_save = time.monotonic()
            tell("checkpoint", saved=writer.written)

    def evaluate(epoch: int, epoch_done: bool) -> None:
        metrics: dict[str, Any] = {}
        if val_batches is not None:
            val_loss = mean_loss(model, val_batches, amp_dtype)
            metrics |= {
                "val_loss": val_loss,
                "val_ppl": math.exp(min(val_loss, 50.0)),
                "epoch_done": epoch_done,
            }
        if eval_fn is not None:
            was_training = model.training
            model.eval()
            with torch.no_grad():
                metrics |= dict(eval_fn(model))
            model.train(was_training)
        history.evals.append({"step": step, "epoch": epoch, **metrics})
        tell("eval", metrics=metrics)

    def stopping() -> bool:
        reached = max_steps is not None and step >= max_steps
        return reached or (stop is not None and stop.is_set())

    bar = _progress_bar(batches, epochs, step, max_steps, enabled=progress)
    model.train()
    epoch, batches_done = start_epoch, skip
    try:
        for epoch in range(start_epoch, epochs):
            if stopping():
                break
            # the RNG that any shuffling inside iter() draws from
            epoch_rng = rng_state()
            iterator: Iterator = iter(_epoch_batches(batches, epoch))
            batches_done = 0
            for _ in range(skip):  # resuming mid-epoch: the batches consumed
                if next(iterator, None) is None:
                    raise ValueError(
                        f"cannot resume: the checkpoint had done {skip} "
                        f"batches of epoch {epoch}, but it has fewer; "
                        "the batches differ from the run's"
                    )
            batches_done, skip = skip, 0
            if resume_rng is not None:  # ... then the RNG state at the save
                set_rng_state(resume_rng)
                resume_rng = None

            for item in iterator:
                batch = _as_batch(item, pad_id, bos_id).to(
                    device, non_blocking=True
                )
                start = time.perf_counter()
                lr = optimizer.param_groups[0]["lr"]
                try:
                    loss = train_step(
                        model,
                        batch,
                        optimizer,
                        loss_fn,
                        scheduler,
                        clip_norm,
                        amp_dtype,
                        scaler=scaler,
                    )
                except FloatingPointError as err:
                    raise FloatingPointError(
                        f"{err} at step {step + 1} (epoch {epoch}, "
                        f"batch {batches_done + 1}); stopping. Try a lower "
                        "learning rate, a longer warmup, or check the batch "
                        "for bad targets"
                    ) from None
                loss_value = loss.item()
                seconds = time.perf_counter() - start
                step, batches_done = step + 1, batches_done + 1

                history.record(
                    step, epoch, loss_value, lr, batch.n_tokens, seconds
                )
                tell(
                    "step",
                    loss=loss_value,
                    lr=lr,
                    tokens=batch.n_tokens,
                    seconds=seconds,
                )
                if bar is not None:
                    tok_s = batch.n_tokens / seconds if seconds > 0 else 0.0
                    bar.set_postfix(
                        loss=f"{loss_value:.3f}",
                        tok_s=f"{tok_s:,.0f}",
                        lr=f"{lr:.2e}",
                        refresh=False,
                    )
                    bar.update(1)
                if (
                    evaluating
                    and eval_every is not None
                    and step % eval_every == 0
                ):
                    evaluate(epoch, epoch_done=False)
                timed_out = (
                    checkpoint_minutes is not None
                    and time.monotonic() - last_save
                    >= 60 * checkpoint_minutes
                )
                if stopping():
                    break
                if timed_out or (
                    checkpoint_every is not None
                    and step % checkpoint_every == 0
                ):
                    save(epoch, batches_done, epoch_rng)

            if batches_done == 0:
                raise ValueError(
                    f"fit: epoch {epoch} yielded no batches; "
                    "expected at least one Batch per epoch"
                )
            if (
                stopping()
            ):  # stopped inside the epoch: save first, so that the
                save(
                    epoch, batches_done, epoch_rng
                )  # evaluation's RNG use is not in it
                interrupted = stop is not None and stop.is_set()
                if evaluating and eval_every is None and not interrupted:
                    evaluate(epoch, epoch_done=False)
                break
            tell("epoch_end")
            if evaluating and eval_every is None:
                evaluate(epoch, epoch_done=True)
            save(epoch + 1, 0, rng_state())  # a resume starts the next epoch
    finally:
        if bar is not None:
            bar.close()
    return history


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
