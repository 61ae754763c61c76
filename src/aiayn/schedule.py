"""The optimizer and learning-rate schedule of section 5.3: Adam and the "Noam" warmup schedule, Eq. 3.

Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9, and a learning rate that rises linearly for ``warmup`` steps
and then decays with the inverse square root of the step.
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_positive

__all__ = ["noam_rate", "noam_scheduler", "make_optimizer"]


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


# Adam's implementations in PyTorch, one update computed three ways: ``fused`` (one kernel for
# every parameter; CUDA and, since PyTorch 2.4, the CPU), ``foreach`` (one operation per tensor
# list) and ``for-loop`` (one per parameter). "auto" takes fused on CUDA, PyTorch's default elsewhere.
ADAM_IMPLEMENTATIONS = ("auto", "fused", "foreach", "for-loop")


def make_optimizer(
    model: nn.Module,
    lr: float = 1.0,
    betas: tuple[float, float] = (0.9, 0.98),
    eps: float = 1e-9,
    fused: bool | None = None,
    implementation: str = "auto",
) -> torch.optim.Adam:
    """Adam with the paper's settings, over the trainable parameters of ``model``.

    Args:
        model: the model to train.
        lr: base learning rate; keep 1.0 when ``noam_scheduler`` sets the rate.
        betas: (β1, β2), (0.9, 0.98) in the paper.
        eps: ε, 1e-9 in the paper.
        fused: use the fused single-kernel implementation; ``None`` chooses it when every
            parameter is on a CUDA device.
        implementation: one of ``ADAM_IMPLEMENTATIONS``; anything but ``"auto"`` overrides ``fused``.
    """
    if implementation not in ADAM_IMPLEMENTATIONS:
        raise ValueError(
            f"implementation must be one of {', '.join(ADAM_IMPLEMENTATIONS)}, got {implementation!r}"
        )
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError(
            "make_optimizer: the model has no trainable parameters"
        )
    foreach = None
    if implementation != "auto":
        fused = implementation == "fused"
        foreach = False if fused else implementation == "foreach"
    if fused is None:
        fused = all(p.is_cuda for p in params)
    return torch.optim.Adam(
        params, lr=lr, betas=betas, eps=eps, fused=fused, foreach=foreach
    )
