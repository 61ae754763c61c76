"""Decoding as the chapters read it: greedy decoding, beam search and ``translate``.

These are the reader's versions of ``aiayn.decoding.search.greedy_decode``, ``beam_search`` and
``aiayn.decoding.translate.translate``: the same algorithms in plain PyTorch, without the
engine's twins (the key/value cache, pruning finished rows, oneDNN, int8, autocast, batches
sorted by length). Every step runs the decoder over the whole prefix, the same call as in
training (``model.decode`` builds the look-ahead mask), and uses the last position's
prediction. ``tests/test_reference_versions.py`` holds them equal to the production versions:
the same ids on the copy task and the same translations with the published model.

Outputs start with ``<bos>`` and have at most ``max_len`` columns, ``<bos>`` included; once a
sentence has produced ``<eos>`` its row grows padding.

    B  batch        K  beam size        S  source length        T  length of the prefix so far
    V  target vocabulary size        d_model  model width
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..data.multi30k import BOS, EOS, Tokenizer
from ..masks import padding_mask
from .common import gnmt_length_penalty
from .translate import normalise

__all__ = ["greedy_decode", "beam_search", "translate"]


@torch.no_grad()
def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
) -> torch.Tensor:
    """The most probable token at every step; ``src`` ``(B, S)`` to ids ``(B, L)``, L <= max_len.

    Switches the model to eval mode (no dropout).
    """
    model.eval()
    B, pad = src.size(0), model.config.pad_id
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    ys = torch.full((B, 1), bos_id, device=src.device)  # (B, 1): <bos>
    done = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys)  # (B, T, d_model)
        logits = model.generator(out[:, -1])  # the last position's, (B, V)
        next_id = logits.argmax(dim=-1).masked_fill(done, pad)  # (B,)
        ys = torch.cat([ys, next_id[:, None]], dim=1)  # (B, T + 1)
        done |= next_id == eos_id
        if done.all():
            break
    return ys


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    alpha: float = 0.6,
) -> torch.Tensor:
    """The best of ``beam_size`` hypotheses, scored log P(Y) / lp(Y); ids ``(B, L)``.

    lp(Y) = ((5 + |Y|) / 6)^α is ``gnmt_length_penalty``, |Y| the tokens after ``<bos>``. Beam
    b of sentence i is row i·K + b. Switches the model to eval mode.
    """
    model.eval()
    B, K, V = src.size(0), beam_size, model.config.tgt_vocab_size
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    memory = memory.repeat_interleave(K, dim=0)  # (B·K, S, d_model)
    src_mask = src_mask.repeat_interleave(K, dim=0)  # (B·K, 1, 1, S)
    ys = torch.full((B * K, 1), bos_id, device=src.device)  # (B·K, 1)
    log_p = torch.full((B, K), -torch.inf, device=src.device)  # (B, K)
    log_p[:, 0] = 0.0  # log P; the K beams start equal: only one grows
    lengths = torch.zeros(B, K, dtype=torch.long, device=src.device)
    done = torch.zeros(B, K, dtype=torch.bool, device=src.device)
    for _ in range(max_len - 1):
        out = model.decode(memory, src_mask, ys)  # (B·K, T, d_model)
        logits = model.generator(out[:, -1])  # (B·K, V)
        token_log_p = logits.log_softmax(dim=-1).view(B, K, V)
        token_log_p[done] = -torch.inf  # a finished beam grows only
        token_log_p[done, model.config.pad_id] = 0.0  # padding, P = 1
        cand = log_p[..., None] + token_log_p  # each extension's log P
        lp = gnmt_length_penalty(lengths + ~done, alpha)[..., None]
        best = (cand / lp).view(B, K * V).topk(K, dim=-1).indices  # (B, K)
        beam, token = best // V, best % V  # parent beam and new token
        log_p = cand.view(B, K * V).gather(1, best)  # (B, K)
        lengths = (lengths + ~done).gather(1, beam)
        done = done.gather(1, beam) | (token == eos_id)
        rows = (beam + K * torch.arange(B).to(beam)[:, None]).view(-1)
        ys = torch.cat([ys[rows], token.view(-1, 1)], dim=1)  # (B·K, T + 1)
        if done.all():
            break
    best = (log_p / gnmt_length_penalty(lengths, alpha)).argmax(dim=-1)
    return ys.view(B, K, -1)[torch.arange(B), best]  # (B, L)


def translate(
    model: nn.Module,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    beam: int = 4,
    alpha: float = 0.6,
    max_len_b: int = 50,
) -> list[str]:
    """Translate each sentence alone: tokenize, search (beam, or greedy for 1), detokenize.

    A source of S ids (``<eos>`` included) gets at most S + ``max_len_b`` tokens after
    ``<bos>``, capped at the model's ``max_len`` positions.
    """
    device = next(model.parameters()).device
    lines = []
    for sentence in sentences:
        ids = tokenizer.encode(normalise(sentence)) + [EOS]
        src = torch.tensor([ids], device=device)  # (1, S)
        src_mask = padding_mask(src, model.config.pad_id)  # (1, 1, 1, S)
        max_len = min(len(ids) + max_len_b + 1, model.config.max_len)
        args = (model, src, src_mask, max_len, BOS, EOS)
        if beam == 1:
            out = greedy_decode(*args)  # (1, L)
        else:
            out = beam_search(*args, beam_size=beam, alpha=alpha)
        lines.append(tokenizer.decode(out[0]))  # drops <bos>, <eos>, <pad>
    return lines
