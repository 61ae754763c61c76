"""Decoding strategies by name: a search registers under a name, ``decode_sorted`` looks it up.

A strategy decodes one padded batch: ``decode(model, src, src_mask, limits, bos_id, eos_id,
options)`` gives ``(B, L)`` ids, ``<bos>`` first and padded after ``<eos>``, as ``greedy_decode``
does. ``options`` is one ``SearchOptions``: the search's settings (K, α) and the engine's switches
(cache, pruning, oneDNN); a strategy names the ones it reads when it registers and ignores the rest.

``pick`` is the one place that decides which strategy runs: the name asked for, else ``"beam"``
when the beam size is above 1 and ``"greedy"`` for 1. The two built-ins register in
``aiayn.decoding.search``, beside the functions they call (``greedy_decode``; ``beam_search``, whose
``prune`` runs its engine twin ``pruned_beam``), so they are there whenever ``decode_sorted`` or
``translate`` is. Sampling is not a strategy: a batch's rows take their draws from one stream of
random numbers, so a sentence's output would depend on the sentences batched with it, which
``decode_sorted`` promises it does not; and it takes a generator or a seed, state rather than a
setting. It stays a function of its own, ``aiayn.decoding.search.sample``.

    B  batch        S  source length        L  output length
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..checks import check_int
from .common import MaxLen

__all__ = [
    "SearchOptions",
    "Strategy",
    "register",
    "unregister",
    "get",
    "names",
    "pick",
]


@dataclass(frozen=True)
class SearchOptions:
    """What every strategy receives: the search's settings and the engine's switches.

    Args:
        beam_size: K, hypotheses kept per sentence.
        length_penalty: α of the GNMT length penalty.
        use_cache: keep keys and values between steps (``False``: rerun the whole prefix).
        prune: drop what has finished from the batch (``False``: the reference; same tokens).
        onednn: compute the linear layers with ``onednn_linear``; ``decode_sorted`` turns it on
            once around all its batches and passes ``False`` here.
    """

    beam_size: int = 4
    length_penalty: float = 0.6
    use_cache: bool = True
    prune: bool = True
    onednn: bool = True


# the names of SearchOptions' fields, and those that only switch the engine
OPTIONS = tuple(f.name for f in dataclasses.fields(SearchOptions))
ENGINE = ("use_cache", "prune", "onednn")

# (model, src (B, S), src_mask (B, 1, 1, S) or None, limits, bos_id, eos_id,
# options) -> (B, L) ids
DecodeBatch = Callable[
    [
        nn.Module,
        torch.Tensor,
        torch.Tensor | None,
        MaxLen,
        int,
        int,
        SearchOptions,
    ],
    torch.Tensor,
]


@dataclass(frozen=True)
class Strategy:
    """A search under its name; calling it decodes one padded batch.

    Args:
        name: what ``translate(..., strategy=name)`` asks for.
        decode: ``(model, src, src_mask, limits, bos_id, eos_id, options)`` to ``(B, L)`` ids:
            ``src`` ``(B, S)``, ``src_mask`` ``(B, 1, 1, S)`` or ``None``, ``limits`` the most
            columns per output (one int, or one per sentence), ``options`` a ``SearchOptions``.
        options: the fields of ``SearchOptions`` that ``decode`` reads.
    """

    name: str
    decode: DecodeBatch
    options: tuple[str, ...]

    def __call__(
        self,
        model: nn.Module,
        src: torch.Tensor,
        src_mask: torch.Tensor | None,
        limits: MaxLen,
        bos_id: int,
        eos_id: int,
        options: SearchOptions,
    ) -> torch.Tensor:
        """``decode``'s ``(B, L)`` ids, after checking that it gave one row per sentence."""
        args = (model, src, src_mask, limits, bos_id, eos_id, options)
        tokens = self.decode(*args)
        B = src.size(0)
        ok = isinstance(tokens, torch.Tensor) and tokens.dim() == 2
        if not ok or tokens.size(0) != B or tokens.size(1) == 0:
            got = (
                f"shape {tuple(tokens.shape)}"
                if isinstance(tokens, torch.Tensor)
                else type(tokens).__name__
            )
            raise ValueError(
                f"decoding strategy {self.name!r} returned {got}, expected "
                f"(B, L) token ids with B = {B} and L >= 1"
            )
        return tokens


_REGISTRY: dict[str, Strategy] = {}


def register(
    name: str, options: Sequence[str] = ENGINE
) -> Callable[[DecodeBatch], DecodeBatch]:
    """Register the decorated function as the strategy ``name``: ``@register("greedy")``.

    Args:
        name: a name no other function holds (the same function registered again, as a
            reloaded module does, replaces itself).
        options: the fields of ``SearchOptions`` the function reads (default: the engine's).

    Returns:
        A decorator that registers the function and gives it back unchanged.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: expected a non-empty str, got {name!r}")
    options = tuple(options)
    unknown = [o for o in options if o not in OPTIONS]
    if unknown:
        raise ValueError(
            f"options: {', '.join(map(repr, unknown))} are not fields of "
            f"SearchOptions ({', '.join(OPTIONS)})"
        )

    def add(decode: DecodeBatch) -> DecodeBatch:
        if not callable(decode):
            raise TypeError(
                f"register({name!r}): expected a function, "
                f"got {type(decode).__name__}"
            )
        taken = _REGISTRY[name].decode if name in _REGISTRY else None
        # the same function again (its module reloaded) replaces itself
        if taken is not None and _where(taken) != _where(decode):
            raise ValueError(
                f"a decoding strategy named {name!r} is registered already "
                f"({_where(taken)}): choose another name, or "
                f"unregister({name!r}) first"
            )
        _REGISTRY[name] = Strategy(name, decode, options)
        return decode

    return add


def _where(function: Callable) -> str:
    """Where a function is defined: ``"module.qualified_name"``."""
    name = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{function.__module__}.{name}"


def unregister(name: str) -> Strategy:
    """Remove the strategy ``name`` (a test's own, say) and give it back."""
    get(name)  # an unknown name is refused with the known ones
    return _REGISTRY.pop(name)


def names() -> list[str]:
    """The registered names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> Strategy:
    """The strategy registered as ``name``, or a ``ValueError`` that lists the names there are."""
    if not isinstance(name, str):
        raise TypeError(
            f"strategy: expected a name (str), got {type(name).__name__}"
        )
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(map(repr, names())) or "none"
        raise ValueError(
            f"unknown decoding strategy {name!r}; registered: {known}"
        ) from None


def pick(strategy: str | None, beam_size: int) -> Strategy:
    """The one place that decides which search runs.

    Args:
        strategy: a registered name; ``None``: ``"beam"`` when ``beam_size > 1``, else
            ``"greedy"``.
        beam_size: K, as the caller was given it.
    """
    check_int("beam_size", beam_size, minimum=1)
    if strategy is None:
        strategy = "beam" if beam_size > 1 else "greedy"
    return get(strategy)
