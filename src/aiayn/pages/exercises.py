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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Truth", "EXERCISES", "check", "verdicts"]


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


def _mha_shapes() -> dict[str, Truth]:
    """5.3: the shapes and parameters of one multi-head attention layer."""

    from ..attention import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 4, dropout=0.0)
    x = torch.randn(2, 7, 64)
    layer(x, x, x)
    queries = layer.w_q(x).view(2, 7, 4, layer.d_k).transpose(1, 2)
    return {
        "d_k": Truth(layer.d_k, "each head gets an equal share of d_model"),
        "queries": Truth(
            tuple(queries.shape),
            "after view and transpose: (B, h, L, d_k)",
        ),
        "attn": Truth(
            tuple(layer.attn.shape), "one L x L map per sentence and head"
        ),
        "parameters": Truth(
            sum(p.numel() for p in layer.parameters()),
            "four d_model x d_model projections, each with a bias; the "
            "number of heads does not change it",
        ),
    }


def _score_spread() -> dict[str, Truth]:
    """5.2: the spread of q.k, before and after the scale."""

    d_k = 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 100_000, d_k, generator=g)
    scores = (q * k).sum(
        -1
    )  # q.k of unit-variance entries: a sum of d_k products
    return {
        "std_before": Truth(
            scores.std().item(),
            "a sum of d_k independent products of variance 1 has variance "
            "d_k",
            rel=0.05,
        ),
        "std_after": Truth(
            (scores / math.sqrt(d_k)).std().item(),
            "dividing by sqrt(d_k) divides the standard deviation by it",
            rel=0.05,
        ),
    }


def _head_8() -> dict[str, Truth]:
    """5.4: layer 1's head 8 of the published model, from the recorded q and k."""
    from .stepthrough import load_stepthrough

    record = load_stepthrough()  # the published model on test line 209
    head = record["encoder"]["layers"][0]["attention"]
    q, k = torch.tensor(head["q"][7]), torch.tensor(head["k"][7])  # (S, d_k)
    scores = q @ k.T  # (S, S)
    weights = (scores / math.sqrt(record["sizes"]["d_k"])).softmax(-1)
    return {  # Bauarbeiter is piece 1, Zwei piece 0
        "score": Truth(
            scores[1, 0].item(),
            "the dot product of Bauarbeiter's query (row 1 of q) and "
            "Zwei's key (row 0 of k), before the scale",
            rel=0.02,
        ),
        "weight": Truth(
            weights[1, 0].item(),
            "divide Bauarbeiter's scores with every key by sqrt(d_k), then "
            "take the softmax of that row",
            rel=0.01,
        ),
    }


def _copy_tokens() -> dict[str, Truth]:
    """8.2: what one batch of the copy task holds."""

    from ..training.batches import copy_task_batches

    batch = copy_task_batches(1, 96, 6, 12, seed=0)[0]
    return {
        "tgt_in": Truth(
            tuple(batch.tgt_in.shape),
            "the decoder reads <bos> and the six letters, one row per sentence",
        ),
        "tokens": Truth(
            int(batch.n_tokens),
            "the loss counts every target piece the decoder must write: the "
            "six letters and <eos>, in every sentence",
        ),
    }


def _top_p() -> dict[str, Truth]:
    """8.4: which pieces does top-p = 0.7 keep?"""

    from ..decoding.search import sampling_probs

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = sampling_probs(probs.log(), 1.0, None, 0.7)[0]
    return {
        "kept": Truth(
            frozenset(int(i) for i in kept.nonzero().flatten()),
            "top-p keeps the most probable pieces until their probabilities "
            "add up to p",
        ),
        "first": Truth(
            kept[0].item(),
            "the kept probabilities are divided by their sum",
            rel=1e-6,
        ),
    }


EXERCISES: dict[str, Callable[[], dict[str, Truth]]] = {
    "5.2.1": _score_spread,
    "5.3.1": _mha_shapes,
    "5.4.2": _head_8,
    "8.2.1": _copy_tokens,
    "8.4.1": _top_p,
}
"""Exercise id (section.number) -> the function that computes its truths from the package."""


def _same(answer: Any, truth: Truth) -> str | None:
    """``None`` when ``answer`` is right, else what was expected of it."""
    want = truth.value
    if isinstance(want, tuple):
        ok = isinstance(answer, (tuple, list, torch.Size)) and all(
            isinstance(a, int) for a in answer
        )
        if not ok:
            return f"expected a shape, a tuple of {len(want)} ints, got {answer!r}"
        if len(answer) != len(want):
            return f"expected {len(want)} axes, got {len(answer)}"
        return None if tuple(answer) == want else "not this shape"
    if isinstance(want, frozenset):
        try:
            given = frozenset(answer)
        except TypeError:
            return f"expected a set, got {answer!r}"
        return None if given == want else "not these"
    number = isinstance(answer, (int, float)) and not isinstance(
        answer, bool
    )
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
    for name, verdict in said.items():
        if verdict is None:
            print(f"{name}: right")
        elif verdict == "...":
            print(f"{name}: not answered yet (replace the ...)")
        else:
            print(f"{name}: {verdict}. Hint: {hints[name].hint}")
    if all(v is None for v in said.values()):
        print(f"Exercise {exercise}: all right.")
