"""Beam search that stops computing what has finished: the engine twin of ``decoding.beam_search``.

    B  batch        K  beam size        R  rows the decoder computes        T  length of the prefix
    V  target vocabulary size        S  source length        d_model  model width

The reference (``decoding.beam_search`` with ``prune=False``) runs the decoder over all B·K rows
until the last sentence ends. Here a beam that said ``<eos>`` waits outside the batch with its score
for the rest of its sentence, at the first step only beam 0 of each sentence runs (the others are
its copies), a sentence whose beams have all finished leaves the batch with its best beam, and the
source's keys and values are kept once per sentence, its live beams attending as its K queries
(``kv_cache.DecoderCache.beams``). Chapter 8.3 counts the rows and FLOPs this saves;
``tests/test_decoding.py`` holds the outputs equal to the reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..engine.kv_cache import DecoderCache
from .common import (
    BeamSearchOutput,
    MaxLen,
    _best_beams,
    _check_common,
    _eval_mode,
    _Finished,
    _keep_rows,
    _new_cache,
    _next_logits,
    _start,
    check_beam,
    gnmt_length_penalty,
)
from .trace import BeamTrace

__all__ = ["pruned_beam_search"]


def _searched(finished: torch.Tensor, log_p: torch.Tensor) -> torch.Tensor:
    """The beams ``(B, K)`` whose next token the decoder computes: those that may still grow.

    Not finished, and with a finite log P (at the first step only beam 0 is, the others are its
    copies). A beam left out extends with padding alone, which is all a finished beam does and
    cannot lift a log P of -inf.
    """
    return ~finished & (log_p > -math.inf)


def _beam_logits(
    model: nn.Module,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    ys: torch.Tensor,
    cache: DecoderCache | None,
    rows: torch.Tensor,
    K: int,
) -> torch.Tensor:
    """The next token's logits ``(R, V)`` of the beams ``rows`` ``(R,)`` of ``ys`` ``(B·K, T)``.

    ``memory`` ``(B, S, d_model)`` and ``src_mask`` ``(B, 1, 1, S)`` hold one row per sentence.
    The cache holds the R rows (``DecoderCache.beams``); without one, each beam's memory and mask
    are copied to its row and the decoder runs over the whole prefix.
    """
    prefix = ys.index_select(0, rows)  # (R, T)
    if cache is None:
        sentence = rows // K  # (R,)
        memory = memory.index_select(0, sentence)  # (R, S, d_model)
        src_mask = src_mask.index_select(0, sentence)  # (R, 1, 1, S)
        return _next_logits(model, memory, src_mask, prefix)
    cache.beams = (rows, K)
    return _next_logits(model, memory, src_mask, prefix, cache)


def _token_log_probs(
    logits: torch.Tensor,
    rows: torch.Tensor,
    pad_only: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """log P of every next token ``(B, K, V)`` from the logits ``(R, V)`` of the beams ``rows``.

    Args:
        logits: ``(R, V)``, row j for beam ``rows[j]`` (beam b of sentence i is i·K + b).
        rows: ``(R,)``.
        pad_only: ``(B, K)``, True for the beams whose one continuation is padding, at
            log P 0 (every beam not in ``rows`` must be one).
    """
    B, K = pad_only.shape
    V = logits.size(-1)
    log_probs = F.log_softmax(logits, dim=-1)  # (R, V)
    if log_probs.size(0) < B * K:  # rows for the beams not computed
        full = log_probs.new_empty(B * K, V)
        log_probs = full.index_copy_(0, rows, log_probs)  # (B·K, V)
    log_probs = log_probs.view(B, K, V)
    padding = torch.full((V,), -math.inf, device=logits.device)
    padding[pad_id] = 0.0
    log_probs[pad_only] = padding  # (B, K, V), only those rows
    return log_probs


def _cache_rows(
    rows: torch.Tensor, parents: torch.Tensor, searched: torch.Tensor
) -> torch.Tensor:
    """The rows of the cache ``(R',)`` the next step's beams continue.

    Args:
        rows: ``(R,)``, the beams this step computed, as the cache holds them.
        parents: ``(B·K,)``, the beam each new beam extends.
        searched: ``(B, K)``, the new beams the next step computes (each extends a searched one).
    """
    # (B·K,): the cache row of each beam computed this step
    position = torch.zeros_like(parents)
    position[rows] = torch.arange(rows.size(0), device=rows.device)
    return position[parents[searched.view(-1)]]  # (R',)


def pruned_beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    use_cache: bool = True,
    onednn: bool = True,
    trace: BeamTrace | None = None,
) -> BeamSearchOutput:
    """``decoding.beam_search``, computing only the rows that can still grow (see the module docstring).

    Each step runs the decoder over the beams not finished (at the first step only beam 0 of each
    sentence); a sentence whose beams have all finished leaves the batch with its best beam. The
    source's memory, mask and cross-attention keys and values are kept once per sentence
    (``DecoderCache.beams``); the rows of the self-attention keys and values follow the surviving
    beams (``DecoderCache.reorder``). Arguments and output as in ``decoding.beam_search``; ``trace``
    records the tree of each sentence (``decoding.trace.BeamTrace``).
    """
    K, alpha = check_beam(beam_size, length_penalty)
    pad_id, max_len, limits = _check_common(
        model, src, max_len, bos_id, eos_id
    )
    B, device = src.size(0), src.device

    with _eval_mode(model, onednn):
        # one memory and mask per sentence: its beams share them
        memory, src_mask, ys = _start(model, src, src_mask, bos_id)
        ys = ys.repeat_interleave(K, dim=0)  # (B·K, 1)
        cache = _new_cache(model, use_cache)

        # Per beam, (B, K): log P, generated tokens, finished or not. Every
        # beam starts as the same "<bos>"; only the first may expand, or the
        # K beams would be copies.
        log_p = torch.full((B, K), -math.inf, device=device)
        log_p[:, 0] = 0.0
        lengths = torch.zeros(B, K, dtype=torch.long, device=device)
        finished = torch.zeros(B, K, dtype=torch.bool, device=device)
        if limits is not None:
            finished |= (limits <= 1)[:, None]
        live = torch.arange(B, device=device)  # (B,), the sentences searched
        out = _Finished()
        # (B, K): the beams the next step runs the decoder for
        searched = _searched(finished, log_p)
        if trace is not None:
            trace.start(B, K, alpha, bos_id, eos_id)

        for _ in range(max_len - 1):
            B = live.size(0)  # the sentences still in the batch
            # (R,): beam b of sentence i is row i·K + b of ys
            rows = searched.view(-1).nonzero().squeeze(1)
            logits = _beam_logits(
                model, memory, src_mask, ys, cache, rows, K
            )
            # (B, K, V); padding is the only continuation of a beam not searched
            token_log_p = _token_log_probs(
                logits, rows, ~searched | finished, pad_id
            )
            V = token_log_p.size(-1)

            cand_len = lengths + (~finished).long()  # (B, K)
            lp = gnmt_length_penalty(cand_len, alpha)  # (B, K)
            # (B, K, V): each candidate's log P, divided (in place) by its penalty
            cand_score = (log_p[..., None] + token_log_p).div_(lp[..., None])
            # the K best of each sentence's K·V candidates, as indices
            kept, best = cand_score.view(B, K * V).topk(K, dim=-1)  # (B, K)
            # which beam each extends, with which token
            beam, token = best // V, best % V  # (B, K) each

            # (B, K): log P of the kept candidates, the same sum as in cand_score
            chosen = token_log_p.view(B, K * V).gather(1, best)  # (B, K)
            old_log_p, log_p = log_p, log_p.gather(1, beam) + chosen
            if trace is not None:
                trace.step(
                    live, finished, old_log_p, token_log_p, cand_score,
                    kept, best, log_p,
                )  # fmt: skip
            lengths = cand_len.gather(1, beam)  # (B, K)
            was_finished = finished.gather(1, beam)  # (B, K)
            finished = was_finished | (token == eos_id)  # (B, K)
            # the rows of ys to keep: beam b of sentence i is row i·K + b
            offset = torch.arange(B, device=device)[:, None] * K  # (B, 1)
            parents = (beam + offset).view(-1)  # (B·K,)
            # (B·K, T + 1): each kept prefix and its new token
            ys = torch.cat([ys[parents], token.view(-1, 1)], dim=1)
            if limits is not None:  # a sentence at its own limit stops
                finished |= (limits <= ys.size(1))[:, None]
            if finished.all():
                break
            searched = _searched(finished, log_p)
            if cache is not None:  # the keys and values follow their beams
                cache.reorder(_cache_rows(rows, parents, searched))
            ended = finished.all(dim=1)  # (B,), all its beams have finished
            if ended.any():  # those sentences leave the batch
                picked = _best_beams(ys, log_p, lengths, alpha)
                if trace is not None:
                    trace.end(live[ended], log_p[ended], lengths[ended])
                out.add(live[ended], *(x[ended] for x in picked))
                keep = (~ended).nonzero().squeeze(1)  # (B',)
                per_beam = log_p, lengths, finished, searched
                log_p, lengths, finished, searched = _keep_rows(
                    keep, None, *per_beam
                )
                # their beams have left the self-attention cache already
                memory, src_mask, limits, live = _keep_rows(
                    keep, None, memory, src_mask, limits, live
                )
                if cache is not None:
                    cache.keep_sources(keep)
                beams = torch.arange(K, device=device)  # (K,)
                rows = (keep[:, None] * K + beams).view(-1)  # (B'·K,)
                (ys,) = _keep_rows(rows, None, ys)

        if trace is not None:
            trace.end(live, log_p, lengths)
        out.add(live, *_best_beams(ys, log_p, lengths, alpha))
        return BeamSearchOutput(*out.in_order(pad_id))
