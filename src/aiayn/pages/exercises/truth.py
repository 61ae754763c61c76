"""One part of an exercise's right answer, and how to say what is wrong with another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Truth"]


@dataclass(frozen=True)
class Truth:
    """The right value of one part of an answer, and how to tell the reader what is wrong.

    Args:
        value: the right value: an int, a float, a tuple of ints (a shape) or a frozenset.
        hint: said when the answer is wrong, without giving the value away.
        rel: for a float, the relative tolerance of a right answer.
    """

    value: Any
    hint: str
    rel: float = 0.0
