"""Turning a trained model into translations: greedy decoding, beam search and sampling.

All three generate one token at a time, and the encoder runs once. Two ways to run a step:

- ``use_cache=False``, the reference: the decoder runs again over the whole prefix generated so
  far, the same call as in training, ``model.decode(memory, src_mask, prefix,
  decoder_mask(prefix))``, and only the last position's prediction is used.
- ``use_cache=True`` (default): a ``DecoderCache`` keeps every layer's keys and values, so a step
  runs the decoder over the one new position; the source's keys and values are projected once.
  Same numbers up to float rounding (the tests compare the logits of every step with the
  teacher-forced forward), several times faster on long outputs.

Outputs start with ``<bos>`` and have at most ``max_len`` columns, ``<bos>`` included. A sentence
that has produced ``<eos>`` is finished: from then on its row is filled with the padding id
(``model.config.pad_id``). Generation stops as soon as every sentence is finished. ``max_len``
may also give one limit per sentence, so that sentences of different lengths can share a batch
(``decode_sorted`` does this).

A finished sentence stops costing anything: with ``prune=True`` (default) its rows leave the
working batch (memory, masks, prefixes, scores and both key/value caches), its output is kept
aside, and the outputs are put back in input order at the end. In beam search a finished beam
stops costing too: the decoder runs over the beams still growing only, while the finished ones
wait, with their scores, for the rest of their sentence. ``prune=False`` computes every row until
the last sentence ends, as a reference; the tokens are the same.

The functions switch the model to eval mode (no dropout) while they run, and back afterwards.

On an x86 CPU the linear layers run on oneDNN's matrix product while they decode (``onednn=True``,
default; see ``onednn_linear``): twice as fast as the MKL product PyTorch calls otherwise, on the
AMD CPU of these measurements. Both are float32; only the order of the sums differs, so a logit
may differ in its last bits, as it does between batch sizes. Measured with the published model,
beam 4: all 1,000 test and 1,014 val translations identical to ``onednn=False``.

    B  batch        K  beam size        S  source length        T  length of the prefix so far
    V  target vocabulary size        d_model  model width
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import check_int, check_token_dtype
from ..engine.onednn import onednn_available, onednn_linear
from ..masks import padding_mask
from .common import (
    BeamSearchOutput,
    MaxLen,
    _best_beams,
    _check_common,
    _eval_mode,
    _Finished,
    _is_number,
    _keep_rows,
    _new_cache,
    _next_logits,
    _products,
    _start,
    check_beam,
    gnmt_length_penalty,
    length_penalty_limit,
)
from .pruned_beam import pruned_beam_search
from .seeded import Mulberry32, draw, typed
from .strategies import ENGINE, SearchOptions, pick, register
from .trace import BeamTrace

__all__ = [
    "greedy_decode",
    "beam_search",
    "BeamSearchOutput",
    "sample",
    "sampling_probs",
    "check_sampling",
    "gnmt_length_penalty",
    "length_penalty_limit",
    "decode_sorted",
    "onednn_linear",
    "onednn_available",
]


# --- Greedy decoding and sampling ------------------------------------------------------------------


def _generate(
    model,
    src,
    src_mask,
    max_len,
    bos_id,
    eos_id,
    choose,
    use_cache,
    prune,
    onednn,
) -> torch.Tensor:
    """The loop shared by greedy decoding and sampling; ``choose`` maps ``(B, V)`` logits to ``(B,)`` ids."""
    pad_id, max_len, limits = _check_common(
        model, src, max_len, bos_id, eos_id
    )
    with _eval_mode(model, onednn):
        memory, src_mask, ys = _start(model, src, src_mask, bos_id)
        cache = _new_cache(model, use_cache)
        B = src.size(0)
        # (B,), True once a sentence has ended or reached its limit
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        if limits is not None:
            finished |= limits <= 1
        # (B,), the sentence of each row (a finished one leaves the batch)
        live = torch.arange(B, device=src.device)
        out = _Finished()
        for _ in range(max_len - 1):
            logits = _next_logits(model, memory, src_mask, ys, cache)
            next_id = choose(logits)  # (B,)
            # a finished row only grows padding
            next_id = next_id.masked_fill(finished, pad_id)
            ys = torch.cat([ys, next_id[:, None]], dim=1)  # (B, T + 1)
            finished |= next_id == eos_id
            if limits is not None:  # a sentence at its own limit stops
                finished |= limits <= ys.size(1)
            if finished.all():
                break
            if prune and finished.any():  # finished rows leave the batch
                out.add(live[finished], ys[finished])
                keep = (~finished).nonzero().squeeze(1)  # (B',)
                memory, src_mask, ys, limits, live, finished = _keep_rows(
                    keep, cache, memory, src_mask, ys, limits, live, finished
                )
        out.add(live, ys)
    return out.in_order(pad_id)[0]  # (B, L)


# --- Greedy ---------------------------------------------------------------------------------------


def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
) -> torch.Tensor:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        model: a ``Transformer`` (``encode``, ``decode``, ``generator``, ``config.pad_id``).
        src: ``(B, S)`` source ids.
        src_mask: ``(B, 1, 1, S)`` boolean; ``None`` builds it from ``model.config.pad_id``.
        max_len: most columns in the output, ``<bos>`` included; or one such limit per sentence.
        bos_id: the id that starts every output.
        eos_id: the id that ends a sentence; later positions hold the padding id.
        use_cache: keep keys and values between steps (``False``: rerun the whole prefix).
        prune: drop a sentence's rows from the batch once it has finished (``False``:
            compute every row until the last sentence ends; same tokens).
        onednn: on an x86 CPU, compute the linear layers with ``onednn_linear`` (``False``:
            PyTorch's own product; the same float32 sums in another order).

    Returns:
        ``(B, L)`` long ids with ``L <= max_len``, ``<bos>`` first.
    """

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)  # (B, V) -> (B,)

    args = (model, src, src_mask, max_len, bos_id, eos_id)
    return _generate(*args, choose, use_cache, prune, onednn)


# --- Sampling -------------------------------------------------------------------------------------


def _filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row, set the others to -inf."""
    k = min(top_k, logits.size(-1))
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (B, 1), the k-th largest
    return logits.masked_fill(logits < kth, -math.inf)


def _filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most probable tokens whose probability adds up to at least ``top_p``."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
    probs = sorted_logits.softmax(dim=-1)  # (B, V)
    cumulative = probs.cumsum(dim=-1)  # (B, V)
    # drop a token when the tokens before it already reach top_p
    # (the most probable one always stays)
    drop_sorted = (cumulative - probs) >= top_p  # (B, V)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # vocabulary order
    return logits.masked_fill(drop, -math.inf)


def check_sampling(
    temperature: float, top_k: int | None, top_p: float | None
) -> None:
    """Refuse settings ``sample`` cannot use, in the words of the page's fields (``None`` is
    an empty field: every piece kept)."""
    if not (_is_number(temperature) and 0 < temperature < math.inf):
        raise ValueError(
            "the temperature must be a number above 0, such as 0.7 or 1.5 "
            f"(got {typed(temperature)})"
        )
    is_int = isinstance(top_k, int) and not isinstance(top_k, bool)
    if top_k is not None and not (is_int and top_k >= 1):
        raise ValueError(
            "top-k must be a whole number from 1 up, or nothing to keep "
            f"every piece (got {typed(top_k)})"
        )
    if top_p is not None and not (_is_number(top_p) and 0 < top_p <= 1):
        raise ValueError(
            "top-p must be a number above 0 and at most 1, or nothing to keep "
            f"every piece (got {typed(top_p)})"
        )


def sampling_probs(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> torch.Tensor:
    """What ``sample`` draws from: ``(B, V)`` logits to ``(B, V)`` probabilities."""
    logits = logits / temperature  # (B, V)
    if top_k is not None:
        logits = _filter_top_k(logits, top_k)
    if top_p is not None:
        logits = _filter_top_p(logits, top_p)
    return logits.softmax(dim=-1)  # (B, V)


def sample(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
    seed: int | None = None,
) -> torch.Tensor:
    """Draw each token at random from the model's distribution, optionally sharpened and truncated.

    The logits are divided by ``temperature`` (below 1 sharpens, above 1 flattens), then only the
    ``top_k`` most probable tokens are kept, then only the smallest set whose probability adds up to
    ``top_p`` (nucleus sampling); the next token is drawn from what is left.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id: as in ``greedy_decode``.
        temperature: positive divisor of the logits.
        top_k: keep this many tokens (``None``: all).
        top_p: keep tokens up to this cumulative probability, in (0, 1] (``None``: all).
        generator: a ``torch.Generator`` on ``src``'s device, for reproducible draws.
        use_cache, prune, onednn: as in ``greedy_decode`` (the draws depend on ``prune``: a
            finished sentence no longer takes random numbers).
        seed: draw with ``aiayn.decoding.seeded`` instead of ``torch.multinomial``: the generator
            and the draws that the translator's page repeats in JavaScript, so that a
            seed gives the same sentence here and in the browser (one sentence at a
            time; the rows of a batch share one stream of numbers).

    Returns:
        ``(B, L)`` long ids with ``L <= max_len``, ``<bos>`` first.
    """
    check_sampling(temperature, top_k, top_p)
    if seed is not None and generator is not None:
        raise ValueError("give a generator or a seed, not both")
    random = None if seed is None else Mulberry32(seed)
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                "generator: expected a torch.Generator or None, "
                f"got {type(generator).__name__}"
            )
        device = src.device if isinstance(src, torch.Tensor) else None
        if device is not None and generator.device.type != device.type:
            raise ValueError(
                f"generator is on {generator.device} but src is on {device}: "
                f"make it with torch.Generator(device={str(device)!r})"
            )

    def choose(logits: torch.Tensor) -> torch.Tensor:
        probs = sampling_probs(logits, temperature, top_k, top_p)  # (B, V)
        if random is not None:  # the page's generator
            return draw(probs, random)  # (B,)
        next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        return next_id.squeeze(-1)  # (B,)

    args = (model, src, src_mask, max_len, bos_id, eos_id)
    return _generate(*args, choose, use_cache, prune, onednn)


# --- Beam search ----------------------------------------------------------------------------------


def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
    trace: BeamTrace | None = None,
) -> BeamSearchOutput:
    """Keep the ``beam_size`` best prefixes per sentence at every step; the paper uses 4 and α = 0.6.

    Hypotheses are ranked by log P(Y) / lp(Y) with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α,
    |Y| counting the generated tokens (``<eos>`` included, ``<bos>`` not). Without it the search
    prefers short outputs, since every extra token lowers log P. A beam that produced ``<eos>``
    stays in the beam with a fixed score (its only continuation is padding, at log P 0) and
    competes with the live ones; the search ends when every beam of every sentence has finished or
    ``max_len`` is reached, and the best-scoring beam of each sentence is returned. All sentences
    are searched together: their beams are the B·K rows of one batch, beam b of sentence i in row
    i·K + b. With ``beam_size=1`` this is greedy decoding.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id: as in ``greedy_decode``; a sentence that
            reaches its own ``max_len`` keeps its beams as they are.
        beam_size: K, hypotheses kept per sentence.
        length_penalty: α of the length penalty; 0 ranks by log P alone.
        use_cache: keep keys and values between steps (``False``: rerun the whole prefix).
        prune: ``aiayn.decoding.pruned_beam``, the same search without the rows that have finished
            (``False``: this reference, every row until the end).
        onednn: as in ``greedy_decode``.
        trace: a ``decoding.trace.BeamTrace`` to fill with the tree of each sentence: every
            hypothesis kept, the best ones pruned, each node's next pieces (``None``: no
            record, and nothing else changes).

    Returns:
        A ``BeamSearchOutput`` (``tokens`` ``(B, L)`` with ``L <= max_len``, ``scores``, ``log_probs``).
    """
    K, alpha = check_beam(beam_size, length_penalty)
    # the engine twin: finished beams and sentences leave the batch
    if prune:
        rest = max_len, bos_id, eos_id, K, alpha, use_cache, onednn, trace
        out = pruned_beam_search(model, src, src_mask, *rest)
        if trace is not None and trace.attention:
            _trace_attention(model, src, src_mask, trace)
        return out
    given_mask = src_mask  # for the trace's attention
    pad_id, max_len, limits = _check_common(
        model, src, max_len, bos_id, eos_id
    )
    B, device = src.size(0), src.device
    with _eval_mode(model, onednn):
        memory, src_mask, ys = _start(model, src, src_mask, bos_id)
        # K rows a sentence: beam b of sentence i in row i·K + b
        memory = memory.repeat_interleave(K, dim=0)  # (B·K, S, d_model)
        src_mask = src_mask.repeat_interleave(K, dim=0)  # (B·K, 1, 1, S)
        ys = ys.repeat_interleave(K, dim=0)  # (B·K, 1)
        cache = _new_cache(model, use_cache)
        # (B, K) each: log P, generated tokens, finished or not
        log_p, lengths, finished = _first_beams(B, K, limits, device)
        if trace is not None:
            trace.start(B, K, alpha, bos_id, eos_id)
        for _ in range(max_len - 1):
            logits = _next_logits(model, memory, src_mask, ys, cache)
            # (B, K, V); a finished beam's one continuation is padding
            token_log_p = F.log_softmax(logits, dim=-1).view(B, K, -1)
            V = token_log_p.size(-1)
            token_log_p[finished] = _padding_only(V, pad_id, device)
            cand_len = lengths + (~finished).long()  # (B, K)
            lp = gnmt_length_penalty(cand_len, alpha)[..., None]  # (B, K, 1)
            cand_score = (log_p[..., None] + token_log_p) / lp  # (B, K, V)
            # the K best of each sentence's K·V: which beam, which token
            kept, best = cand_score.view(B, K * V).topk(K, dim=-1)  # (B, K)
            beam, token = best // V, best % V  # (B, K) each
            chosen = token_log_p.view(B, K * V).gather(1, best)  # (B, K)
            old_log_p, log_p = log_p, log_p.gather(1, beam) + chosen
            if trace is not None:
                everyone = torch.arange(B, device=device)
                trace.step(
                    everyone, finished, old_log_p, token_log_p, cand_score,
                    kept, best, log_p,
                )  # fmt: skip
            lengths = cand_len.gather(1, beam)
            finished = finished.gather(1, beam) | (token == eos_id)
            first_row = torch.arange(B, device=device)[:, None] * K
            parents = (beam + first_row).view(-1)  # (B·K,)
            ys = torch.cat([ys[parents], token.view(-1, 1)], dim=1)
            if cache is not None:  # keys and values follow their beams
                cache.reorder(parents)
            if limits is not None:  # a sentence at its limit stops
                finished |= (limits <= ys.size(1))[:, None]
            if finished.all():
                break
        if trace is not None:
            trace.end(torch.arange(B, device=device), log_p, lengths)
            if trace.attention:
                _trace_attention(model, src, given_mask, trace)
        return BeamSearchOutput(*_best_beams(ys, log_p, lengths, alpha))


def _trace_attention(model, src, src_mask, trace: BeamTrace) -> None:
    """Fill ``trace``'s nodes with their cross-attention (``BeamTrace.add_attention``)."""
    with _eval_mode(model):
        if src_mask is None:
            src_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
        trace.add_attention(model, src, src_mask)


def _first_beams(
    B: int, K: int, limits: torch.Tensor | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """log P, lengths and finished, ``(B, K)`` each, before the first step.

    All K beams of a sentence start as the same ``<bos>``: only beam 0 may expand (log P 0, the
    others -inf), or the K beams would be copies. A sentence whose limit is 1 is finished.
    """
    log_p = torch.full((B, K), -math.inf, device=device)
    log_p[:, 0] = 0.0
    lengths = torch.zeros(B, K, dtype=torch.long, device=device)
    finished = torch.zeros(B, K, dtype=torch.bool, device=device)
    if limits is not None:
        finished |= (limits <= 1)[:, None]
    return log_p, lengths, finished


def _padding_only(V: int, pad_id: int, device: torch.device) -> torch.Tensor:
    """log P of the next token ``(V,)`` for a finished beam: padding, at log P 0 (probability 1)."""
    padding = torch.full((V,), -math.inf, device=device)
    padding[pad_id] = 0.0
    return padding


# --- The built-in strategies (aiayn.decoding.strategies) ------------------------------------------


@register("greedy")
def _greedy_strategy(
    model, src, src_mask, limits, bos_id, eos_id, options: SearchOptions
) -> torch.Tensor:
    """``greedy_decode`` as the strategy ``"greedy"``: ``(B, L)`` ids."""
    o = options
    args = (model, src, src_mask, limits, bos_id, eos_id)
    return greedy_decode(*args, o.use_cache, o.prune, o.onednn)


@register("beam", ("beam_size", "length_penalty", *ENGINE))
def _beam_strategy(
    model, src, src_mask, limits, bos_id, eos_id, options: SearchOptions
) -> torch.Tensor:
    """``beam_search`` as the strategy ``"beam"``: the best beam's ``(B, L)`` ids."""
    o = options
    args = (model, src, src_mask, limits, bos_id, eos_id)
    rest = o.beam_size, o.length_penalty, o.use_cache, o.prune, o.onednn
    return beam_search(*args, *rest).tokens


# --- Many sentences, batched by length ------------------------------------------------------------


def _check_sources(sources: object) -> list[list[int]]:
    """``sources`` as lists of ids; a ``TypeError`` for anything but sequences of integer ids."""
    if isinstance(sources, (str, bytes, torch.Tensor)) or not isinstance(
        sources, Sequence
    ):
        raise TypeError(
            "sources: expected a list of id sequences (one list of ints per "
            f"sentence), got {type(sources).__name__}"
        )
    out = []
    for i, ids in enumerate(sources):
        if isinstance(ids, torch.Tensor):
            check_token_dtype(ids, f"sources[{i}]")
            ids = ids.tolist() if ids.dim() == 1 else ids
        if not isinstance(ids, Sequence) or isinstance(ids, (str, bytes)):
            raise TypeError(
                f"sources[{i}]: expected a list of integer token ids, "
                f"got {type(ids).__name__}"
            )
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise TypeError(
                    f"sources[{i}]: expected integer token ids, got {t!r}"
                )
        out.append([int(t) for t in ids])
    return out


def decode_sorted(
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    batch_size: int = 128,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
    progress: Callable[[int], None] | None = None,
    strategy: str | None = None,
) -> list[list[int]]:
    """Decode many sources in padded batches of similar length; outputs come back in input order.

    The sources are sorted by length and cut into batches of up to ``batch_size``, each padded
    to its longest source. Every sentence keeps its own output limit,
    ``min(int(max_len_a · S + max_len_b) + 1, model.config.max_len)`` columns for a source of S
    ids (``+ 1`` for ``<bos>``), so its translation does not depend on the sentences it is
    batched with: padded keys get a weight of exactly zero. Only float rounding can differ
    (the matrix products change shape with the batch), which the tests show leaves the tokens
    unchanged. Each batch is decoded by ``strategy``, a name registered in
    ``aiayn.decoding.strategies``; ``None``: beam search with ``beam_size > 1``, greedy decoding
    with 1 (``strategies.pick``).

    Args:
        model: a ``Transformer``; its device is used.
        sources: id sequences (each usually ending in ``<eos>``), at most ``max_len`` long.
        bos_id, eos_id: as in ``greedy_decode``.
        beam_size: K (1: greedy).
        length_penalty: α of the GNMT length penalty.
        batch_size: most sentences per batch (each becomes K rows in beam search).
        max_len_a, max_len_b: the output limit, as above.
        use_cache, prune, onednn: as in ``greedy_decode``.
        progress: called after each batch with the number of sources it decoded (a progress bar's
            ``update``).
        strategy: the search, by its registered name (``strategies.names()``); ``None``: as above.

    Returns:
        One list of ids per source: ``<bos>`` first, up to ``<eos>`` included, no padding.
    """
    sources = _check_sources(sources)
    check_int("beam_size", beam_size, minimum=1)
    search = pick(strategy, beam_size)  # which search decodes the batches
    check_int("batch_size", batch_size, minimum=1)
    if not (_is_number(max_len_a) and 0 <= max_len_a < math.inf):
        raise ValueError(
            f"max_len_a must be a finite number >= 0, got {max_len_a!r}"
        )
    check_int("max_len_b", max_len_b, minimum=0)
    lengths = [len(s) for s in sources]
    limit = model.config.max_len
    if any(n < 1 or n > limit for n in lengths):
        raise ValueError(
            f"sources must hold 1 to max_len={limit} ids each, got lengths from {min(lengths)} to {max(lengths)}"
        )
    # alpha is checked as beam search will use it, on the longest output it
    # allows (greedy decoding too: a bad alpha never passes unnoticed)
    S = max(lengths, default=1)
    longest = min(int(max_len_a * S + max_len_b), limit - 1)
    gnmt_length_penalty(torch.tensor([longest]), length_penalty)
    pad_id = model.config.pad_id
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: lengths[i])
    out: list[list[int]] = [[] for _ in sources]
    # one oneDNN mode for all the batches, so that each weight is packed once
    # (the search gets onednn=False: the mode is on already, or unwanted)
    options = SearchOptions(
        beam_size, length_penalty, use_cache, prune, False
    )
    with _products(onednn):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            S = max(lengths[i] for i in chunk)
            # (B, S), padded to the longest source of the batch
            src = torch.full((len(chunk), S), pad_id, dtype=torch.long)
            for row, i in enumerate(chunk):
                src[row, : lengths[i]] = torch.as_tensor(sources[i])
            src = src.to(device)
            limits = [
                min(int(max_len_a * lengths[i] + max_len_b) + 1, limit)
                for i in chunk
            ]
            args = (model, src, None, limits, bos_id, eos_id)
            tokens = search(*args, options)  # (B, L)
            for row, i in enumerate(chunk):
                ids = tokens[row].tolist()
                while ids and ids[-1] == pad_id:  # trailing padding only
                    ids.pop()
                out[i] = ids
            if progress is not None:
                progress(len(chunk))
    return out
