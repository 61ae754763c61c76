"""Training: the paper's optimizer and learning-rate schedule, label smoothing, batches, and a resumable loop.

Section 5.3 trains with Adam (β1 = 0.9, β2 = 0.98, ε = 1e-9) and a learning rate that rises linearly
for ``warmup`` steps and then decays with the inverse square root of the step ("Noam" schedule).
Section 5.4 smooths the labels with ε_ls = 0.1.

    B  batch        S  source length        T  target length        V, C  vocabulary size (classes)
    N  number of target tokens in a flattened batch
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_positive, check_token_dtype
from .masks import decoder_mask, padding_mask, shift_right

__all__ = [
    "noam_rate",
    "noam_scheduler",
    "make_optimizer",
    "LabelSmoothingLoss",
    "Batch",
    "copy_task_batches",
    "History",
    "fit",
    "save_checkpoint",
    "load_checkpoint",
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
            f"step counts from 1, got {step!r} (LambdaLR calls its lambda with 0 first: use noam_scheduler, "
            "which passes step + 1)"
        )
    check_positive(d_model=d_model, warmup=warmup)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


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
        if logits.dim() not in (2, 3) or tuple(logits.shape[:-1]) != tuple(
            target.shape
        ):
            raise ValueError(
                f"expected logits (N, C) with target (N,) or logits (B, T, C) with target (B, T), "
                f"got logits {tuple(logits.shape)} and target {tuple(target.shape)}"
            )
        C = logits.size(-1)
        log_p = F.log_softmax(
            logits.float().reshape(-1, C), dim=-1
        )  # (N, C)
        target = target.reshape(-1)  # (N,)
        keep = target != self.ignore_index  # (N,)
        safe_target = torch.where(
            keep, target, torch.zeros_like(target)
        )  # any valid id where ignored
        nll = -log_p.gather(-1, safe_target[:, None]).squeeze(
            -1
        )  # (N,)  −log p_target
        uniform = -log_p.mean(dim=-1)  # (N,)  mean over classes of −log p_c
        loss = (
            (1.0 - self.smoothing) * nll + self.smoothing * uniform
        ) * keep  # (N,)
        if self.reduction == "none":
            return loss.view(logits.shape[:-1])  # (N,) or (B, T)
        if self.reduction == "sum":
            return loss.sum()
        return (
            loss.sum() / keep.sum()
        )  # NaN when every token is ignored, as F.cross_entropy

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


# --- Checkpoints ----------------------------------------------------------------------------------


def _rng_state() -> dict[str, Any]:
    """The torch random states (CPU and every CUDA device) as tensors, so ``weights_only`` loading accepts them."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    step: int = 0,
    epoch: int = 0,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write model, optimizer and scheduler states, the position and the torch RNG states to ``path``, atomically.

    The file is written to a temporary name in the same folder and then renamed over ``path``
    (``os.replace``), so an interrupted save never leaves a half-written checkpoint behind.
    Everything stored is a tensor or a plain container of numbers and strings, which is what
    ``torch.load(..., weights_only=True)`` accepts.

    Args:
        path: destination file.
        model: its ``state_dict`` is saved.
        optimizer, scheduler: saved when given.
        step: optimizer steps done so far.
        epoch: the current epoch (0-based).
        extra: more tensors, numbers, strings, lists or dicts to keep (e.g. the config as a dict).

    Returns:
        ``path`` as a ``Path``.
    """
    path = Path(path)
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "step": int(step),
        "epoch": int(epoch),
        "rng": _rng_state(),
        "extra": {} if extra is None else extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_checkpoint(
    path: str | os.PathLike,
    model: nn.Module | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    map_location: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` and load it into the objects given.

    Loading uses ``torch.load(path, weights_only=True)``, which cannot run code from the file. The
    RNG states are returned, not applied (``fit`` applies them when it resumes).

    Args:
        path: the checkpoint file.
        model, optimizer, scheduler: loaded in place when given.
        map_location: where tensors are first placed; ``load_state_dict`` then copies them to
            each parameter's device.

    Returns:
        The checkpoint dict: ``model``, ``optimizer``, ``scheduler``, ``step``, ``epoch``, ``rng``, ``extra``.
    """
    checkpoint = torch.load(
        path, map_location=map_location, weights_only=True
    )
    if model is not None:
        model.load_state_dict(checkpoint["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler")):
        if obj is not None:
            if checkpoint[key] is None:
                raise ValueError(
                    f"{path}: the checkpoint holds no {key} state, but a {key} was given to load into"
                )
            obj.load_state_dict(checkpoint[key])
    return checkpoint


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
        evals: ``{"step": ..., "epoch": ..., **metrics}`` for each call of ``eval_fn``.
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
    device: torch.device | str | None = None,
    bos_id: int | None = None,
    max_steps: int | None = None,
    eval_fn: Callable[[nn.Module], dict[str, float]] | None = None,
    eval_every: int | None = None,
    checkpoint_path: str | os.PathLike | None = None,
    checkpoint_every: int | None = None,
    resume_from: str | os.PathLike | None = None,
    progress: bool = True,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> History:
    """Train ``model`` on ``batches`` for ``epochs`` epochs and return the ``History``.

    Each step: forward under optional autocast, loss, a check that it is finite, backward,
    gradient clipping, optimizer step, scheduler step.

    Resuming is exact: the checkpoint holds the weights, the optimizer and scheduler states, the
    torch RNG states (for dropout), the epoch, how many batches of that epoch were consumed, the
    RNG state at the start of that epoch (so a shuffling loader reshuffles the same way) and the
    history. ``fit(..., resume_from=path)`` restores all of it and skips the batches already seen,
    so an interrupted run continues with exactly the losses the uninterrupted run would have had.
    This needs ``batches`` to yield the same batches when iterated again for the same epoch.

    Args:
        model: a ``Transformer`` (anything called as ``model(src, tgt_in, src_mask, tgt_mask) -> logits``;
            the defaults below read ``model.config.d_model`` and ``model.config.pad_id``).
        batches: ``Batch`` objects (or ``(src, tgt)`` tensor pairs with ``bos_id`` given), re-iterated
            every epoch: a list, a ``DataLoader``, or a function ``epoch -> iterable`` for data that
            changes from epoch to epoch.
        epochs: passes over the data.
        optimizer: default ``make_optimizer(model)`` (Adam, lr 1.0) with, when ``scheduler`` is also
            ``None``, ``noam_scheduler(optimizer, model.config.d_model)`` (warmup 4000).
        scheduler: stepped after every optimizer step; ``None`` keeps the rate constant (unless the
            default optimizer is used).
        loss_fn: ``(logits (B, T, V), tgt_out (B, T)) -> scalar``; default
            ``LabelSmoothingLoss(0.1, ignore_index=model.config.pad_id)``.
        clip_norm: clip the gradient norm to this value; ``None`` turns clipping off (the paper
            does not mention clipping).
        amp_dtype: ``torch.bfloat16`` runs the forward pass under ``torch.autocast``; ``None`` trains
            in full precision. (float16 would need a gradient scaler and is not supported.)
        device: where to train; default: where the model's parameters are.
        bos_id: needed only when ``batches`` yields ``(src, tgt)`` pairs.
        max_steps: stop after this many optimizer steps in total (counting steps before a resume).
        eval_fn: called as ``eval_fn(model)`` with the model in eval mode and gradients off; returns
            a dict of metrics.
        eval_every: evaluate every this many steps; ``None`` evaluates at the end of every epoch.
        checkpoint_path: where to save checkpoints: at the end of every epoch, when ``max_steps``
            stops the run, and every ``checkpoint_every`` steps. Each save replaces the last.
        checkpoint_every: also save every this many steps; ``None``: only at those other moments.
        resume_from: a checkpoint written by ``fit`` to continue from.
        progress: show a tqdm progress bar with loss, tokens/s and learning rate.
        log: called with a dict after every step and every evaluation (e.g. ``print`` or a file writer).

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
    if amp_dtype not in (None, torch.bfloat16):
        raise ValueError(
            f"amp_dtype must be None or torch.bfloat16, got {amp_dtype} (float16 needs a GradScaler)"
        )
    if clip_norm is not None and not clip_norm > 0:
        raise ValueError(
            f"clip_norm must be positive or None, got {clip_norm!r}"
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

    history = History()
    step, start_epoch, skip = 0, 0, 0
    resume_rng = None
    if resume_from is not None:
        checkpoint = load_checkpoint(
            resume_from, model, optimizer, scheduler
        )
        step, start_epoch = checkpoint["step"], checkpoint["epoch"]
        extra = checkpoint["extra"]
        skip = extra.get("batches_done", 0)
        history = History.from_state_dict(extra.get("history", {}))
        _set_rng_state(
            extra.get("epoch_rng", checkpoint["rng"])
        )  # the RNG as the checkpoint's epoch began
        resume_rng = (
            checkpoint["rng"] if skip else None
        )  # mid-epoch: the RNG after the batches consumed

    def save(
        epoch: int, batches_done: int, epoch_rng: dict[str, Any]
    ) -> None:
        if checkpoint_path is not None:
            extra = {
                "batches_done": batches_done,
                "epoch_rng": epoch_rng,
                "history": history.state_dict(),
            }
            save_checkpoint(
                checkpoint_path,
                model,
                optimizer,
                scheduler,
                step,
                epoch,
                extra,
            )

    def evaluate(epoch: int) -> None:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            metrics = dict(eval_fn(model))
        model.train(was_training)
        record = {"step": step, "epoch": epoch, **metrics}
        history.evals.append(record)
        if log is not None:
            log({"event": "eval", **record})

    bar = _progress_bar(batches, epochs, step, max_steps, enabled=progress)
    model.train()
    try:
        for epoch in range(start_epoch, epochs):
            if max_steps is not None and step >= max_steps:
                break
            epoch_rng = (
                _rng_state()
            )  # the state that any shuffling inside iter() below draws from
            iterator: Iterator = iter(_epoch_batches(batches, epoch))
            batches_done = 0
            if (
                skip
            ):  # resuming mid-epoch: pass over the batches already consumed
                for _ in range(skip):
                    next(iterator, None)
                batches_done, skip = skip, 0
            if (
                resume_rng is not None
            ):  # ... then continue from the RNG state of the checkpoint
                _set_rng_state(resume_rng)
                resume_rng = None

            for item in iterator:
                batch = _as_batch(item, pad_id, bos_id).to(
                    device, non_blocking=True
                )
                start = time.perf_counter()
                lr = optimizer.param_groups[0]["lr"]
                with torch.autocast(
                    device.type,
                    dtype=amp_dtype or torch.bfloat16,
                    enabled=amp_dtype is not None,
                ):
                    logits = model(
                        batch.src,
                        batch.tgt_in,
                        batch.src_mask,
                        batch.tgt_mask,
                    )  # (B, T, V)
                    loss = loss_fn(logits, batch.tgt_out)
                loss_value = loss.item()
                if not math.isfinite(loss_value):
                    raise FloatingPointError(
                        f"loss is {loss_value} at step {step + 1} (epoch {epoch}, batch {batches_done + 1}); "
                        "stopping. Try a lower learning rate, a longer warmup, or check the batch for bad targets"
                    )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if clip_norm is not None:
                    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
                seconds = time.perf_counter() - start
                step, batches_done = step + 1, batches_done + 1

                record = {
                    "step": step,
                    "epoch": epoch,
                    "loss": loss_value,
                    "lr": lr,
                    "tokens": batch.n_tokens,
                }
                history.record(**record, seconds=seconds)
                if log is not None:
                    log({"event": "step", **record, "seconds": seconds})
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
                    eval_fn is not None
                    and eval_every is not None
                    and step % eval_every == 0
                ):
                    evaluate(epoch)
                if (
                    checkpoint_every is not None
                    and step % checkpoint_every == 0
                ):
                    save(epoch, batches_done, epoch_rng)
                if max_steps is not None and step >= max_steps:
                    break

            if (
                max_steps is not None and step >= max_steps
            ):  # stopped early: save first, so the
                save(
                    epoch, batches_done, epoch_rng
                )  # evaluation's RNG use is not in the checkpoint
                if eval_fn is not None and eval_every is None:
                    evaluate(epoch)
                break
            if eval_fn is not None and eval_every is None:
                evaluate(epoch)
            save(
                epoch + 1, 0, _rng_state()
            )  # end of epoch: a resume starts the next one
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
