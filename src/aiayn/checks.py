"""Checks of arguments and tensors shared by the package: errors that say what was expected and what arrived.

Files (the atomic write, SHA-256, a full disk) are ``aiayn.files``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields

import torch

__all__ = [
    "check_shape",
    "check_positive",
    "check_token_dtype",
    "check_int",
    "UnusableInput",
    "resolve_device",
    "Record",
]


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


def check_int(
    name: str,
    value: object,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Raise a ``ValueError`` unless ``value`` is an integer (not a bool) within ``[minimum, maximum]``.

    Args:
        name: how the value is called in the error message (``"--limit"``, ``"beam"``).
        value: the value to check.
        minimum, maximum: inclusive bounds; ``None`` leaves that side open.

    Returns:
        ``value`` itself.
    """
    ok = not isinstance(value, bool) and isinstance(value, int)
    ok = (
        ok
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        if minimum is not None and maximum is not None:
            wanted = f"an integer in [{minimum}, {maximum}]"
        elif minimum is not None:
            wanted = f"an integer >= {minimum}"
        elif maximum is not None:
            wanted = f"an integer <= {maximum}"
        else:
            wanted = "an integer"
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return value  # type: ignore[return-value]


class UnusableInput(RuntimeError):
    """An input the user supplies (a data folder, a downloaded file) cannot be used: a usage error."""


def resolve_device(device: torch.device | str | None) -> torch.device:
    """``device``, checked to exist here; ``None`` gives CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:
        cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        raise ValueError(
            f"device {str(device)!r} cannot be used here ({str(err).splitlines()[0]}); "
            f"available: {', '.join(['cpu', *cuda])}. Pass one of them with --device"
        ) from None
    return device


class Record:
    """A dataclass that also answers ``record["name"]`` and ``to_dict()``: results written as JSON.

    ``RunSummary`` and ``EvalResult`` were dicts once; code written then keeps working.
    """

    def __getitem__(self, key: str):
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def to_dict(self) -> dict:
        return asdict(self)
