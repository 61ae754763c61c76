"""Input checks shared by the package: errors that say what was expected and what arrived."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["check_shape", "check_positive", "check_token_dtype"]


def _fmt(shape: Sequence[int | None]) -> str:
    inner = ", ".join("*" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def check_shape(
    tensor: torch.Tensor,
    expected: Sequence[int | None],
    name: str = "tensor",
) -> torch.Tensor:
    """Raise a ``ValueError`` unless ``tensor.shape`` matches ``expected``.

    Args:
        tensor: the tensor to check.
        expected: the wanted shape; ``None`` in a position accepts any size there.
        name: how the tensor is called in the error message.

    Returns:
        ``tensor`` itself, so a check can wrap an expression.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor, got {type(tensor).__name__}"
        )
    actual = tuple(tensor.shape)
    expected = tuple(expected)
    ok = len(actual) == len(expected) and all(
        e is None or a == e for a, e in zip(actual, expected, strict=True)
    )
    if not ok:
        raise ValueError(
            f"{name}: expected shape {_fmt(expected)}, got {_fmt(actual)}"
        )
    return tensor


def check_positive(**sizes: int) -> None:
    """Raise a ``ValueError`` for any size that is not a positive integer (``check_positive(d_model=512)``)."""
    for key, value in sizes.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value <= 0
        ):
            raise ValueError(
                f"{key} must be a positive integer, got {value!r}"
            )


def check_token_dtype(tokens: torch.Tensor, name: str = "tokens") -> None:
    """Raise a ``TypeError`` unless ``tokens`` is an integer tensor of token ids."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor of token ids, got {type(tokens).__name__}"
        )
    if (
        tokens.dtype.is_floating_point
        or tokens.dtype.is_complex
        or tokens.dtype == torch.bool
    ):
        raise TypeError(
            f"{name}: expected an integer tensor of token ids (torch.long), got dtype {tokens.dtype}"
        )
