"""Exercises that answer back: the reader writes an answer, ``check`` says "right" or what is wrong.

A chapter's exercise cell holds the reader's answer as keywords, ``...`` where nothing is written
yet::

    check("5.3.1", d_k=..., queries=..., attn=..., parameters=...)

``check`` compares each value with the truth, which it computes from the package itself (the
layer, the schedule, the sampler), never from a stored answer, and prints one line per value:
right, or what was expected of it (a type, a shape, a number within a tolerance) and a hint that
does not give the answer away. The folded solution runs the same check with the solution's values,
so that nbval proves every solution right on every machine.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import torch

from . import (
    baseline,
    browser,
    engine,
    foundations,
    learning,
    model,
    translator,
)
from .truth import Truth

__all__ = ["Truth", "EXERCISES", "check", "verdicts"]


def _gather() -> dict[str, Callable[[], dict[str, Truth]]]:
    """Every part's ``TRUTHS`` in one table; an id two parts define is refused by name."""
    gathered: dict[str, Callable[[], dict[str, Truth]]] = {}
    for part in (
        foundations,
        baseline,
        model,
        learning,
        translator,
        browser,
        engine,
    ):
        twice = gathered.keys() & part.TRUTHS.keys()
        if twice:
            raise ValueError(f"exercises {sorted(twice)} are defined twice")
        gathered.update(part.TRUTHS)
    return gathered


EXERCISES = _gather()
"""Exercise id (section.number) -> the function that computes its truths from the package."""


def _same(answer: Any, truth: Truth) -> str | None:
    """``None`` when ``answer`` is right, else what was expected of it."""
    want = truth.value
    if isinstance(want, tuple):
        ok = isinstance(answer, (tuple, list, torch.Size)) and all(
            isinstance(a, numbers.Integral) for a in answer
        )
        if not ok:
            return f"expected a shape, a tuple of {len(want)} ints, got {answer!r}"
        if len(answer) != len(want):
            return f"expected {len(want)} axes, got {len(answer)}"
        return (
            None
            if tuple(int(a) for a in answer) == want
            else "not this shape"
        )
    if isinstance(want, frozenset):
        try:
            given = frozenset(answer)
        except TypeError:
            return f"expected a set, got {answer!r}"
        return None if given == want else "not these"
    # numpy's and torch's scalars count too (a pandas cell hands out numpy.int64)
    number = isinstance(answer, numbers.Real) and not isinstance(
        answer, bool
    )
    if isinstance(answer, torch.Tensor) and answer.numel() == 1:
        return f"expected a number, got a tensor: write {answer!r}.item()"
    if not number or not math.isfinite(answer):
        return f"expected a number, got {answer!r}"
    if isinstance(want, int) and not truth.rel:
        return None if answer == want else "not this number"
    ok = math.isclose(answer, want, rel_tol=truth.rel)
    return None if ok else f"not within {truth.rel:.0%} of the right value"


def verdicts(exercise: str, **answer: Any) -> dict[str, str | None]:
    """Each part of ``answer`` -> ``None`` when right, ``"..."`` when not answered, else what is wrong.

    Raises:
        KeyError: an unknown exercise, or a part the exercise does not ask for (the message lists
            what it asks for).
    """
    if exercise not in EXERCISES:
        raise KeyError(
            f"no exercise {exercise!r}: expected one of {', '.join(EXERCISES)}"
        )
    truths = EXERCISES[exercise]()
    unknown = sorted(set(answer) - set(truths))
    if unknown:
        raise KeyError(
            f"exercise {exercise} asks for {', '.join(truths)}; "
            f"it does not ask for {', '.join(unknown)}"
        )
    said: dict[str, str | None] = {}
    for name, truth in truths.items():
        given = answer.get(name, ...)
        said[name] = "..." if given is ... else _same(given, truth)
    return said


def check(exercise: str, **answer: Any) -> None:
    """Print, for each part of the reader's ``answer``, "right" or what is wrong (``verdicts`` returns it).

    Args:
        exercise: the exercise's id, as the chapter names it (``"5.3.1"``).
        **answer: the parts of the answer, ``...`` for a part not written yet.
    """
    truths = EXERCISES.get(exercise)
    said = verdicts(exercise, **answer)
    hints = truths() if truths else {}
    if all(v == "..." for v in said.values()):
        print(f"Not answered yet: replace the ... of {', '.join(said)}.")
        return
    for name, verdict in said.items():
        if verdict is None:
            print(f"{name}: right")
        elif verdict == "...":
            print(f"{name}: not answered yet (replace the ...)")
        else:
            print(f"{name}: {verdict}. Hint: {hints[name].hint}")
    if all(v is None for v in said.values()):
        print(f"Exercise {exercise}: all right.")
