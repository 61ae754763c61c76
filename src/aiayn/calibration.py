"""Calibration: does a model's confidence match how often it is right?

A classifier is *calibrated* when, among all predictions made with confidence about 0.8, about 80 %
are correct. The usual summary is the expected calibration error (Guo et al. 2017): sort the
predictions into equal-width confidence bins, and average the gap between each bin's accuracy and
its mean confidence, weighted by the share of predictions in the bin:

    ECE = Σ_b (n_b / n) · |accuracy_b − confidence_b|

Chapter 10 uses it to compare models trained with and without label smoothing.

    N  number of predictions (tokens)        C  number of classes        M  number of bins
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = [
    "ReliabilityBins",
    "confidence_and_correct",
    "reliability_bins",
    "expected_calibration_error",
]


@dataclass(frozen=True)
class ReliabilityBins:
    """Predictions sorted into M equal-width confidence bins over [0, 1].

    Args:
        edges: ``(M + 1,)`` bin edges, ``0, 1/M, ..., 1``.
        count: ``(M,)`` number of predictions per bin.
        confidence: ``(M,)`` mean confidence per bin (0 for an empty bin).
        accuracy: ``(M,)`` share of correct predictions per bin (0 for an empty bin).
    """

    edges: torch.Tensor
    count: torch.Tensor
    confidence: torch.Tensor
    accuracy: torch.Tensor

    @property
    def weight(self) -> torch.Tensor:
        """``(M,)`` share of all predictions that fall in each bin."""
        return self.count / self.count.sum()

    @property
    def ece(self) -> float:
        """The expected calibration error, Σ_b weight_b · |accuracy_b − confidence_b|."""
        gap = (self.accuracy - self.confidence).abs()  # (M,)
        return float((self.weight * gap).sum())


def confidence_and_correct(
    logits: torch.Tensor,
    target: torch.Tensor,
    ignore_index: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The confidence of each prediction (its largest probability) and whether the prediction is right.

    Args:
        logits: ``(N, C)`` or ``(B, T, C)`` unnormalised scores.
        target: ``(N,)`` or ``(B, T)`` class ids.
        ignore_index: a target id to leave out (padding); ``None`` keeps every position.

    Returns:
        ``confidence`` ``(N',)`` float and ``correct`` ``(N',)`` bool, flattened, ignored positions removed.
    """
    leading = tuple(logits.shape[:-1])
    if logits.dim() not in (2, 3) or leading != tuple(target.shape):
        raise ValueError(
            f"expected logits (N, C) with target (N,) or logits (B, T, C) with target (B, T), "
            f"got logits {tuple(logits.shape)} and target {tuple(target.shape)}"
        )
    probs = logits.detach().float().softmax(dim=-1)  # (N, C) or (B, T, C)
    probs = probs.reshape(-1, logits.size(-1))  # (N, C)
    target = target.reshape(-1)  # (N,)
    confidence, prediction = probs.max(dim=-1)  # (N,), (N,)
    correct = prediction == target
    if ignore_index is not None:
        keep = target != ignore_index
        confidence, correct = confidence[keep], correct[keep]
    return confidence, correct


def _check(
    confidence: torch.Tensor, correct: torch.Tensor, n_bins: int
) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int) or n_bins < 1:
        raise ValueError(
            f"n_bins must be a positive integer, got {n_bins!r}"
        )
    if confidence.dim() != 1 or correct.shape != confidence.shape:
        raise ValueError(
            f"expected confidence and correct as two 1-D tensors of the same length, "
            f"got shapes {tuple(confidence.shape)} and {tuple(correct.shape)}"
        )
    if confidence.numel() == 0:
        raise ValueError("expected at least one prediction, got none")
    if bool((confidence < 0).any()) or bool((confidence > 1).any()):
        low, high = float(confidence.min()), float(confidence.max())
        raise ValueError(
            f"confidence must lie in [0, 1] (probabilities), got values in [{low:.3g}, {high:.3g}]"
        )


def reliability_bins(
    confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = 10
) -> ReliabilityBins:
    """Sort predictions into ``n_bins`` equal-width confidence bins: count, mean confidence, accuracy.

    Bin b holds the confidences in [b/M, (b+1)/M); the last bin also holds a confidence of exactly 1.

    Args:
        confidence: ``(N,)`` confidence of each prediction, in [0, 1].
        correct: ``(N,)`` bool (or 0/1), whether each prediction was right.
        n_bins: M, the number of bins.

    Returns:
        A ``ReliabilityBins``; its ``ece`` property is the expected calibration error.
    """
    _check(confidence, correct, n_bins)
    confidence = confidence.detach().double()
    correct = correct.detach().double()
    M = n_bins
    # (N,) the bin of each prediction; a confidence of 1 joins the last bin
    index = (confidence * M).long().clamp(max=M - 1)
    count = torch.bincount(index, minlength=M).double()  # (M,)
    # (M,) each: the sum of the confidences, and of the correct, per bin
    total_confidence = torch.bincount(index, weights=confidence, minlength=M)
    total_correct = torch.bincount(index, weights=correct, minlength=M)
    safe = count.clamp(min=1)  # an empty bin reports 0 and weighs 0
    return ReliabilityBins(
        edges=torch.linspace(0, 1, M + 1, dtype=torch.float64),
        count=count,
        confidence=total_confidence / safe,
        accuracy=total_correct / safe,
    )


def expected_calibration_error(
    confidence: torch.Tensor, correct: torch.Tensor, n_bins: int = 10
) -> float:
    """ECE = Σ_b (n_b / N) · |accuracy_b − confidence_b| over ``n_bins`` equal-width bins.

    Args:
        confidence: ``(N,)`` confidence of each prediction, in [0, 1].
        correct: ``(N,)`` bool (or 0/1), whether each prediction was right.
        n_bins: the number of bins (10 is the usual choice).

    Returns:
        The ECE as a float in [0, 1]: 0 for a perfectly calibrated model.
    """
    return reliability_bins(confidence, correct, n_bins).ece
