"""What greedy decoding, sampling and both beam searches share: checks, the first and the next step, the outputs.

    B  batch        K  beam size        S  source length        T  length of the prefix so far
    V  target vocabulary size        d_model  model width

``aiayn.decoding.search`` holds the algorithms a reader studies; ``aiayn.decoding.pruned_beam`` the beam search
that drops finished beams and sentences from the batch. Both build on these pieces.
"""

from __future__ import annotations

import contextlib
import math
import numbers
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_int, check_token_dtype
from ..engine.fast_attention import packed_weights_kept
from ..engine.kv_cache import DecoderCache, decode_cached, new_cache
from ..engine.onednn import onednn_available, onednn_linear
from ..masks import decoder_mask, padding_mask

__all__ = [
    "BeamSearchOutput",
    "gnmt_length_penalty",
    "length_penalty_limit",
]

MaxLen = int | Sequence[int] | torch.Tensor


@contextlib.contextmanager
def _eval_mode(model: nn.Module, onednn: bool = False) -> Iterator[None]:
    """Run the block with ``model.eval()`` and gradients off, then restore the previous mode.

    With ``onednn`` (and ``onednn_available()``), the linear layers run under ``onednn_linear``.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _products(onednn), packed_weights_kept(model):
            yield
    finally:
        model.train(was_training)


def _products(onednn: bool) -> contextlib.AbstractContextManager:
    """``onednn_linear()`` when asked for and available here, else a context that does nothing."""
    if onednn and onednn_available():
        return onednn_linear()
    return contextlib.nullcontext()


def _check_token_id(name: str, value: object, model: nn.Module) -> None:
    """Raise a ``ValueError`` unless ``value`` is an id of the output vocabulary, in [0, V)."""
    check_int(name, value)
    V = getattr(model.config, "tgt_vocab_size", None)  # None: a stand-in
    if value < 0 or (V is not None and value >= V):
        where = (
            f"in [0, {V}) (the model's output vocabulary)" if V else ">= 0"
        )
        raise ValueError(f"{name} must be a token id {where}, got {value}")


def _check_device(name: str, tensor: torch.Tensor, model: nn.Module) -> None:
    """Raise a ``ValueError`` when ``tensor`` is not on the device of the model's weights."""
    parameters = getattr(model, "parameters", None)
    weight = next(parameters(), None) if callable(parameters) else None
    if weight is not None and tensor.device != weight.device:
        raise ValueError(
            f"{name} is on {tensor.device} but the model is on "
            f"{weight.device}: move it with {name}.to({str(weight.device)!r})"
        )


def _check_common(
    model: nn.Module,
    src: torch.Tensor,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
) -> tuple[int, int, torch.Tensor | None]:
    """Validate the arguments every decoder takes.

    Returns:
        The padding id, the longest output and, when ``max_len`` gives one limit per
        sentence, those limits ``(B,)`` (else ``None``).
    """
    check_token_dtype(src, "src")
    if src.dim() != 2:
        raise ValueError(
            f"src: expected shape (B, S) of token ids, got {tuple(src.shape)}"
        )
    if src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(
            "src: expected at least one sentence of at least one token, "
            f"got shape {tuple(src.shape)}"
        )
    _check_device("src", src, model)
    limits = None
    if isinstance(max_len, (torch.Tensor, Sequence)) and not isinstance(
        max_len, str
    ):
        if isinstance(max_len, torch.Tensor):
            values = max_len.tolist()
        else:
            values = list(max_len)
        values = values if isinstance(values, list) else [values]
        ok = all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1
            for v in values
        )
        if not ok or len(values) != src.size(0):
            raise ValueError(
                f"max_len: expected one positive integer per sentence ({src.size(0)}), got {values!r}"
            )
        limits = torch.tensor(values, dtype=torch.long, device=src.device)
        max_len = max(values)
    is_int = isinstance(max_len, int) and not isinstance(max_len, bool)
    if not is_int or max_len < 1:
        raise ValueError(
            f"max_len must be a positive integer (the output length, <bos> included), got {max_len!r}"
        )
    _check_token_id("bos_id", bos_id, model)
    _check_token_id("eos_id", eos_id, model)
    pad_id = model.config.pad_id
    if bos_id == pad_id:
        raise ValueError(
            f"bos_id must differ from the padding id, got both {pad_id}"
        )
    if eos_id == bos_id:
        raise ValueError(
            f"eos_id must differ from bos_id, got both {bos_id}"
        )
    return pad_id, max_len, limits


def _new_cache(model: nn.Module, use_cache: bool) -> DecoderCache | None:
    """A ``DecoderCache`` when ``use_cache`` and the model keeps keys and values, else ``None``.

    A model whose class says ``caches_keys_values = False`` (the recurrent baseline,
    ``aiayn.baselines.rnn``) has no keys and values to keep: its steps rerun the whole prefix.
    """
    if not use_cache or not getattr(model, "caches_keys_values", True):
        return None
    return new_cache(model)


def _next_logits(
    model: nn.Module,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    prefix: torch.Tensor,
    cache: DecoderCache | None = None,
) -> torch.Tensor:
    """The logits for the token after ``prefix`` ``(B, T)``, ``(B, V)`` float32.

    Without a cache the decoder runs over the whole prefix; with one, over the positions the
    cache does not hold yet (the last one).
    """
    if cache is None:  # the decoder runs over the whole prefix
        tgt_mask = decoder_mask(prefix, model.config.pad_id)  # (B, 1, T, T)
        out = model.decode(memory, src_mask, prefix, tgt_mask)
    else:  # only over the position the cache does not hold yet
        new = prefix[:, len(cache) :]  # (B, 1)
        out = decode_cached(model, memory, src_mask, new, cache)
    # out: (B, T or 1, d_model); the next token's logits come from the last
    return model.generator(out[:, -1]).float()  # (B, V)


def _start(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    bos_id: int,
):
    """Encode the source once and build the ``(B, 1)`` prefix of ``<bos>``."""
    if isinstance(src_mask, torch.Tensor):
        _check_device("src_mask", src_mask, model)
    elif src_mask is not None:
        raise TypeError(
            "src_mask: expected a boolean (B, 1, 1, S) torch.Tensor or None, "
            f"got {type(src_mask).__name__}"
        )
    if src_mask is None:
        src_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    B = src.size(0)
    # (B, 1): every output starts with <bos>
    prefix = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    return memory, src_mask, prefix


def _keep_rows(
    index: torch.Tensor,
    cache: DecoderCache | None,
    *tensors: torch.Tensor | None,
) -> list[torch.Tensor | None]:
    """Keep the rows ``index`` ``(B',)`` of the cache and of each tensor.

    This is how a finished sentence leaves the working batch. ``None`` stays
    ``None`` (no limits per sentence, no cache).

    Returns:
        The tensors in the order given, each with ``B'`` rows.
    """
    if cache is not None:
        cache.keep_rows(index)  # self- and cross-attention, every layer
    return [None if t is None else t.index_select(0, index) for t in tensors]


class _Finished:
    """The outputs of the sentences that have left the batch."""

    def __init__(self) -> None:
        self.parts: list[tuple[torch.Tensor, ...]] = []

    def add(self, sentences: torch.Tensor, tokens: torch.Tensor, *values):
        """Keep ``tokens`` ``(n, T)`` and ``values`` ``(n,)`` of ``sentences`` ``(n,)``."""
        self.parts.append((sentences, tokens, *values))

    def in_order(self, pad_id: int) -> list[torch.Tensor]:
        """Row i is sentence i: tokens ``(B, L)``, padded, and values ``(B,)``."""
        sentences, tokens, *values = zip(*self.parts, strict=True)
        L = max(t.size(1) for t in tokens)
        tokens = [F.pad(t, (0, L - t.size(1)), value=pad_id) for t in tokens]
        order = torch.cat(sentences).argsort()  # (B,)
        return [torch.cat(field)[order] for field in (tokens, *values)]


def _is_number(value: object) -> bool:
    """A real number that is not a bool (``True`` is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def length_penalty_limit(
    length: int, dtype: torch.dtype = torch.float32
) -> float:
    """The largest α for which ((5 + L) / 6)^α stays finite in ``dtype`` for every L <= ``length``.

    Beam search divides by the penalty in float32: a larger α makes the penalty of a long output
    infinite and its score 0, the best there is, so long outputs would win whatever their words.
    """
    check_int("length", length, minimum=0)
    if length == 0:
        return math.inf
    return math.log(torch.finfo(dtype).max) / math.log((5 + length) / 6)


def gnmt_length_penalty(
    length: torch.Tensor | int, alpha: float
) -> torch.Tensor | float:
    """The length penalty of Wu et al. (2016), lp(Y) = ((5 + |Y|) / 6)^α; α = 0 turns it off.

    Raises a ``ValueError`` when α is not a finite number >= 0, and when the penalty overflows
    (see ``length_penalty_limit``) rather than return infinity.
    """
    if not (_is_number(alpha) and 0 <= alpha < math.inf):
        raise ValueError(
            "length_penalty (alpha) must be a finite number >= 0, "
            f"got {alpha!r}"
        )
    if not isinstance(length, torch.Tensor):
        check_int("length", length, minimum=0)
        try:
            return ((5 + length) / 6) ** alpha
        except OverflowError:
            raise ValueError(
                _overflow(alpha, length, torch.float64)
            ) from None
    lp = ((5 + length) / 6) ** alpha
    # below this α even the longest int64 length cannot overflow: no check,
    # so no device synchronisation, for the α anyone uses
    safe = math.log(torch.finfo(lp.dtype).max) / math.log((5 + 2**63) / 6)
    if alpha > safe and not torch.isfinite(lp).all():
        raise ValueError(_overflow(alpha, int(length.max()), lp.dtype))
    return lp


def _overflow(alpha: float, length: int, dtype: torch.dtype) -> str:
    limit = length_penalty_limit(length, dtype)
    return (
        f"length_penalty (alpha) {alpha!r} makes the penalty "
        f"((5 + L) / 6)^alpha overflow {dtype} for an output of L = "
        f"{length} tokens; use an alpha of at most {limit:.2f}"
    )


class BeamSearchOutput(NamedTuple):
    """The best hypothesis per sentence; unpack as ``tokens, scores, log_probs = beam_search(...)``.

    Args:
        tokens: ``(B, L)`` long ids, ``<bos>`` first, padded after ``<eos>``.
        scores: ``(B,)`` log P(Y) / lp(Y), the number the search maximised.
        log_probs: ``(B,)`` log P(Y), the sum of the chosen tokens' log-probabilities.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    log_probs: torch.Tensor


def _best_beams(
    ys: torch.Tensor, log_p: torch.Tensor, lengths: torch.Tensor, alpha
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best-scoring beam of each sentence: tokens ``(B, T)``, score and log P ``(B,)``.

    Args:
        ys: ``(B·K, T)``, beam b of sentence i in row i·K + b.
        log_p, lengths: ``(B, K)``, each beam's log P and generated tokens.
        alpha: α of the length penalty.
    """
    B, K = log_p.shape
    scores = log_p / gnmt_length_penalty(lengths, alpha)  # (B, K)
    best_beam = scores.argmax(dim=-1)  # (B,)
    arange = torch.arange(B, device=log_p.device)
    pick = arange * K + best_beam  # (B,)
    return ys[pick], scores[arange, best_beam], log_p[arange, best_beam]


def check_beam(
    beam_size: object, length_penalty: object
) -> tuple[int, float]:
    """``(K, α)``, or a ``ValueError`` that says what was expected."""
    is_int = isinstance(beam_size, int) and not isinstance(beam_size, bool)
    if not is_int or beam_size < 1:
        raise ValueError(
            f"beam_size must be a positive integer, got {beam_size!r}"
        )
    alpha = length_penalty  # α in lp(Y) = ((5 + |Y|) / 6)^α
    is_number = isinstance(alpha, (int, float))
    if not (is_number and alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(
            f"length_penalty (alpha) must be a non-negative number, got {length_penalty!r}"
        )
    return beam_size, alpha
