"""The training loss of section 5.4: cross-entropy against label-smoothed targets (ε_ls = 0.1).

N  number of target tokens in a flattened batch        C  number of classes (the vocabulary)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_token_dtype

__all__ = ["LabelSmoothingLoss"]


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
