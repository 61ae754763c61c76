"""Random draws that a web page can repeat: the same seed, the same sentence, in Python and in JavaScript.

``torch.multinomial`` draws with PyTorch's own generator (a Mersenne Twister and a sampling kernel that
JavaScript does not have). ``sample(..., seed=s)`` draws instead with the generator below, which is
twelve lines in any language: mulberry32, a 32-bit counter scrambled by two multiplications
(Tommy Ettinger, 2017; public domain), and the inverse of the cumulative distribution. The page's
``web/sampling.mjs`` is this module line by line, so the translator in the browser, given a seed,
writes the sentence that ``aiayn.decoding.search.sample`` writes.

    B  rows (sentences still being sampled)        V  vocabulary size
"""

from __future__ import annotations

import json
import math
import numbers

import torch

__all__ = ["Mulberry32", "check_seed", "draw", "typed"]

_MASK = 0xFFFFFFFF  # 32 bits: JavaScript's integers in Math.imul and >>> 0


def _imul(a: int, b: int) -> int:
    """``Math.imul``: the low 32 bits of a product."""
    return (a * b) & _MASK


def typed(value: object) -> str:
    """A setting as the reader gave it, for a message: "nothing" for None (an empty field of the
    page), a whole number with thousands separators, any other number as Python prints it;
    web/sampling.mjs's ``typed`` writes the same."""
    if value is None:
        return "nothing"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isnan(value):
            return "not a number"
        if math.isinf(value):
            return "infinity" if value > 0 else "minus infinity"
        if float(value).is_integer():
            return f"{int(value):,}"
        return repr(float(value))
    # a word, or True: "7", true, as JavaScript's JSON.stringify writes them
    return json.dumps(value, default=repr)


def check_seed(seed: object) -> None:
    """Refuse a seed that is not a whole number from 0 to 2^32 - 1, in the reader's words."""
    whole = isinstance(seed, int) and not isinstance(seed, bool)
    if not (whole and 0 <= seed <= _MASK):
        raise ValueError(
            "the seed must be a whole number from 0 to 4,294,967,295 "
            f"(got {typed(seed)})"
        )


class Mulberry32:
    """Uniform numbers in [0, 1) from a 32-bit seed, 2^32 of them before they repeat.

    Args:
        seed: an integer in [0, 2^32).
    """

    def __init__(self, seed: int):
        check_seed(seed)
        self.state = seed

    def next(self) -> float:
        """The next number: a multiple of 2^-32 in [0, 1)."""
        self.state = (self.state + 0x6D2B79F5) & _MASK
        t = self.state
        t = _imul(t ^ (t >> 15), t | 1)
        t = ((t + _imul(t ^ (t >> 7), t | 61)) & _MASK) ^ t
        return (t ^ (t >> 14)) / 2**32


def draw(probs: torch.Tensor, random: Mulberry32) -> torch.Tensor:
    """One token per row: the first whose cumulative probability passes a uniform number.

    The rows take their numbers in order, one each. A token of probability 0 is never drawn: the
    cumulative sum does not pass anything at it that it had not passed before.

    Args:
        probs: ``(B, V)`` probabilities of each row (they need not add up to exactly 1).
        random: the generator, advanced by B numbers.

    Returns:
        ``(B,)`` long ids.
    """
    cumulative = probs.double().cumsum(dim=-1)  # (B, V)
    # (B, 1): each row's number, scaled to its row's total
    u = [random.next() for _ in range(probs.size(0))]
    u = torch.tensor(u, dtype=torch.float64, device=probs.device)[:, None]
    targets = u * cumulative[:, -1:]  # (B, 1)
    ids = torch.searchsorted(cumulative, targets, right=True)  # (B, 1)
    return ids.squeeze(1)  # (B,)
