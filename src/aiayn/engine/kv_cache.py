"""Decoding step by step: the engine twin of ``Transformer.decode`` that keeps keys and values between steps.

    B  batch        h  heads        P  positions decoded so far        T  new positions
    S  source length        R  rows the decoder computes (beam search: the beams still searched)
    d_model  model width        d_k, d_v  widths per head

``Transformer.decode`` (chapter 7) runs the decoder over the whole prefix. Generating token by
token, step t then recomputes the keys and values of the t positions before it, which do not change:
the decoder at position j sees only positions up to j. ``decode_cached(model, memory, src_mask, tgt,
cache)`` runs it over the new positions only, with each layer's earlier keys and values from a
``DecoderCache`` (``new_cache(model)``): a self-attention ``KVCache`` that grows by the new
positions, and a cross-attention one filled from the source at the first step. Chapter 8.3 teaches
it; ``tests/test_decoding.py`` holds it equal to the reference, step by step.

Beam search (``decoding.beam_search``) keeps the cross-attention keys and values once per source
sentence, not once per beam: ``DecoderCache.beams`` ``(rows, K)`` says which beam each row of the
batch is, and ``attend`` places each sentence's live beams as that sentence's K queries.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator

import torch
from torch import nn

from ..attention import MultiHeadAttention, PreparedMask
from ..checks import check_positive
from ..embeddings import LearnedPositionalEmbedding, PositionalEncoding
from ..masks import subsequent_mask
from .fast_attention import project

__all__ = ["KVCache", "DecoderCache", "new_cache", "attend", "decode_cached"]


class KVCache:
    """The keys and values one attention layer has computed so far, for decoding step by step.

    Self-attention (``static=False``): every call appends the keys and values of the new
    positions, and the new queries attend to all positions so far. Cross-attention
    (``static=True``): the keys and values of the encoder output are computed at the first call
    and reused at every later one.

    Copies are what a cache costs. Appending with ``torch.cat`` copies every position held, and
    so does keeping the rows of the surviving beams (``reorder``). So ``reorder`` copies the rows
    into tensors one position longer, and the next ``update`` writes its position into that free
    slot instead of copying everything a second time.

    Beam search keeps cross-attention keys and values once per source sentence, not once per
    beam: ``beams`` ``(rows, K)`` says that query j belongs to beam ``rows[j] % K`` of sentence
    ``rows[j] // K``, so a sentence's live beams are its K queries (``MultiHeadAttention``
    places them so). Finished beams have no row at all.

    Args:
        static: ``True`` for cross-attention.
    """

    def __init__(self, static: bool = False):
        self.static = static
        # cross-attention in beam search: (rows (R,), K), or None (row i reads row i)
        self.beams: tuple[torch.Tensor, int] | None = None
        self.k: torch.Tensor | None = (
            None  # (B, h, L, d_k), maybe one free slot after
        )
        self.v: torch.Tensor | None = None  # (B, h, L, d_v), the same
        self.length = 0  # L, the positions held

    def __len__(self) -> int:
        """Number of positions held."""
        return self.length

    def update(
        self, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (or, when static, store) ``(B, h, n, d_k)`` keys and values; return all held."""
        L, n = self.length, k.size(2)
        if (
            self.static
        ):  # stored contiguous: every later step reads them whole
            self.k, self.v = k.contiguous(), v.contiguous()
            L = 0
        elif self.k is None:
            self.k, self.v = k, v
        elif self.k.size(2) == L + n:  # the free slot ``reorder`` left
            self.k[:, :, L:] = k  # (B, h, L + n, d_k)
            self.v[:, :, L:] = v  # (B, h, L + n, d_v)
        else:
            self.k = torch.cat(
                [self.k[:, :, :L], k], dim=2
            )  # (B, h, L + n, d_k)
            self.v = torch.cat(
                [self.v[:, :, :L], v], dim=2
            )  # (B, h, L + n, d_v)
        self.length = L + n
        return self.k, self.v

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` ``(B',)`` of the batch, in that order (beam search).

        A static cache does not move: beam search only reorders the beams of one sentence, which
        share one source, so their cross-attention rows are equal.
        """
        if not self.static:
            self.keep_rows(index)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` ``(B',)`` of the batch, static or not.

        Decoding calls this to drop the sentences that have finished. A self-attention cache
        is copied with one free position after the L it holds, for the next ``update``.
        """
        if self.k is None:
            return
        if self.static:
            self.k = self.k.index_select(0, index)  # (B', h, S, d_k)
            self.v = self.v.index_select(0, index)  # (B', h, S, d_v)
            return
        self.k = _rows_and_a_free_slot(self.k[:, :, : self.length], index)
        self.v = _rows_and_a_free_slot(self.v[:, :, : self.length], index)


def _rows_and_a_free_slot(
    x: torch.Tensor, index: torch.Tensor
) -> torch.Tensor:
    """``x.index_select(0, index)`` for ``x`` ``(B, h, L, d)``, one position longer.

    Returns:
        ``(B', h, L + 1, d)``; the last position is left unwritten, for the next step.
    """
    _, h, L, d = x.shape
    out = x.new_empty(index.size(0), h, L + 1, d)  # (B', h, L + 1, d)
    torch.index_select(x, 0, index, out=out[:, :, :L])  # one copy
    return out


def _beams_as_queries(
    q: torch.Tensor, rows: torch.Tensor, K: int, B_src: int
) -> torch.Tensor:
    """Place the queries of live beams ``(R, h, 1, d_k)`` as their sentences' ``(B_src, h, K, d_k)``.

    Query j goes to beam ``rows[j] % K`` of sentence ``rows[j] // K``; the slots of finished
    beams hold zeros, and their outputs are dropped again by ``_queries_as_beams``.
    """
    R, h, _, d_k = q.shape
    grid = q.new_zeros(B_src * K, h, d_k)  # (B_src·K, h, d_k)
    grid.index_copy_(0, rows, q.view(R, h, d_k))
    return grid.view(B_src, K, h, d_k).transpose(1, 2)  # (B_src, h, K, d_k)


def _queries_as_beams(
    heads: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """The outputs ``(B_src, h, K, d_v)`` of the live beams ``rows`` ``(R,)``: ``(R, h, 1, d_v)``."""
    B_src, h, K, d_v = heads.shape
    # (B_src·K, h, d_v), beam b of sentence i in row i·K + b
    flat = heads.transpose(1, 2).reshape(B_src * K, h, d_v)
    return flat.index_select(0, rows).unsqueeze(2)  # (R, h, 1, d_v)


class DecoderCache:
    """What the decoder keeps between decoding steps: every layer's keys and values.

    Per layer, a self-attention ``KVCache`` that grows by the new positions at each step and a
    cross-attention one filled at the first step. ``real`` records which positions so far are
    tokens rather than padding (a finished sentence grows padding), for the self-attention mask.

    Args:
        n_layers: N, the number of decoder layers.
    """

    def __init__(self, n_layers: int):
        check_positive(n_layers=n_layers)
        self.layers = [
            (KVCache(), KVCache(static=True)) for _ in range(n_layers)
        ]
        self.real: torch.Tensor | None = None  # (B, P), True = a token

    def __len__(self) -> int:
        """P, the number of positions decoded so far."""
        return 0 if self.real is None else self.real.size(1)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` of the batch, in that order: the beams that survive a step.

        Cross-attention does not move, so only rows of the same sentence may be exchanged (see
        ``KVCache.reorder``), unless it is kept per sentence (``beams``).
        """
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            cross_cache.reorder(index)
        if self.real is not None:
            self.real = self.real.index_select(0, index)  # (B', P)

    def keep_rows(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` of the batch, cross-attention included.

        Decoding calls this to drop the sentences that have finished.
        """
        self.reorder(index)  # self-attention and ``real``
        self.keep_sources(index)

    @property
    def beams(self) -> tuple[torch.Tensor, int] | None:
        """Beam search: ``(rows, K)``, row j of the batch is beam ``rows[j] % K`` of source ``rows[j] // K``.

        The cross-attention keys and values are then kept once per source sentence, and the
        batch holds only the beams still searched (``KVCache.beams``); ``None``: one row per source.
        """
        return self.layers[0][1].beams

    @beams.setter
    def beams(self, value: tuple[torch.Tensor, int] | None) -> None:
        for _, cross_cache in self.layers:
            cross_cache.beams = value

    def keep_sources(self, index: torch.Tensor) -> None:
        """Keep the rows ``index`` of the cross-attention caches only: the sources still decoded."""
        for _, cross_cache in self.layers:
            cross_cache.keep_rows(index)


def new_cache(model: nn.Module) -> DecoderCache:
    """An empty ``DecoderCache`` for ``decode_cached``: one self- and one cross-attention cache per decoder layer."""
    return DecoderCache(len(model.decoder.layers))


def attend(
    attn: MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | PreparedMask | None,
    cache: KVCache,
) -> torch.Tensor:
    """``attn(query, key, value, mask)`` for the new positions, the earlier keys and values from ``cache``.

    Args:
        attn: a layer's ``MultiHeadAttention`` (or its fast twin).
        query: ``(B, T, d_model)``, the new positions.
        key, value: ``(B_k, L_k, d_model)``: the new positions (self-attention) or the source
            (cross-attention; with ``cache.beams``, one row per source sentence).
        mask: boolean ``(B, 1, T, P + T)`` (self-attention) or ``(B_k, 1, 1, S)``.
        cache: the layer's ``KVCache`` for this attention.

    Returns:
        ``(B, T, d_model)``.
    """
    beams = cache.beams
    attn.check_inputs(query, key, value, same_batch=beams is None)
    B, T = query.size(0), query.size(1)
    h, d_k, d_v = attn.h, attn.d_k, attn.d_v
    if cache.static and cache.k is not None:
        # cross-attention after the first step: the source's keys and values are held
        q = attn.w_q(query)  # (B, T, h * d_k)
        k, v = cache.k, cache.v  # (B_k, h, S, d_k), (B_k, h, S, d_v)
    else:
        q, k, v = project(attn, query, key, value)  # (B or B_k, L, h * d)
        B_k, L_k = key.size(0), key.size(1)
        k = k.view(B_k, L_k, h, d_k).transpose(1, 2)  # (B_k, h, L_k, d_k)
        v = v.view(B_k, L_k, h, d_v).transpose(1, 2)  # (B_k, h, L_k, d_v)
        k, v = cache.update(k, v)  # (B_k, h, len(cache), d_k or d_v)
    q = q.view(B, T, h, d_k).transpose(1, 2)  # (B, h, T, d_k)
    if beams is not None:  # (R, h, 1, d_k) -> (B_src, h, K, d_k)
        q = _beams_as_queries(q, *beams, k.size(0))
    # one new query per row: the explicit product is faster there than the
    # fused kernel, which is built for long queries
    heads = attn.attend(q, k, v, mask, fused=attn.use_fused and T > 1)
    if beams is not None:  # (B_src, h, K, d_v) -> (R, h, 1, d_v)
        heads = _queries_as_beams(heads, beams[0])
    concat = heads.transpose(1, 2).contiguous()  # (B, T, h, d_v)
    return attn.w_o(concat.view(B, T, h * d_v))  # (B, T, d_model)


def decode_cached(
    model: nn.Module,
    memory: torch.Tensor,
    src_mask: torch.Tensor | None,
    tgt: torch.Tensor,
    cache: DecoderCache,
    tgt_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """``model.decode`` of the positions ``P .. P + T - 1`` that follow the P in ``cache``; updates it.

    Args:
        model: a ``Transformer``.
        memory: ``(B, S, d_model)`` from ``encode``; with ``cache.beams`` (beam search), one row
            per source sentence, and ``tgt`` one per beam still searched.
        src_mask: boolean ``(B, 1, 1, S)``; ``None`` lets every source position be attended.
        tgt: ``(B, T)`` the new decoder input ids.
        cache: from ``new_cache(model)``, holding the P earlier positions.
        tgt_mask: boolean ``(B, 1, T, P + T)``; ``None`` builds it from the padding seen so far
            and, when T > 1, the look-ahead among the new positions.

    Returns:
        ``(B, T, d_model)``.
    """
    if not isinstance(cache, DecoderCache):
        raise TypeError(
            "cache: expected a DecoderCache from new_cache(model), "
            f"got {type(cache).__name__}"
        )
    model.check_decoder_inputs(
        memory, src_mask, tgt, rows_per_source=cache.beams is not None
    )
    B, T = tgt.shape
    P = len(cache)
    if cache.real is not None and cache.real.size(0) != B:
        raise ValueError(
            f"cache holds {cache.real.size(0)} sequences but tgt has batch size {B}"
        )
    seen = tgt != model.config.pad_id  # (B, T), True = a token
    if cache.real is not None:
        seen = torch.cat([cache.real, seen], 1)  # (B, P + T)
    if tgt_mask is None:
        tgt_mask = seen[:, None, None, :]  # (B, 1, 1, P + T), padding
        if T > 1:  # and look-ahead among the new positions
            causal = subsequent_mask(P + T, device=tgt.device)[P:]
            tgt_mask = tgt_mask & causal  # (B, 1, T, P + T)
    model.check_mask(tgt_mask, "tgt_mask", (B, 1, T, P + T))
    cache.real = seen  # (B, P + T)
    # the embeddings, then the positions P .. P + T - 1
    x = tgt
    for module in model.tgt_embed:
        if isinstance(
            module, (PositionalEncoding, LearnedPositionalEmbedding)
        ):
            x = module(x, start=P)
        else:
            x = module(x)  # (B, T, d_model)
    # the reference decoder stack, each attention reading and filling its cache
    with _attending_with(cache, model.decoder.layers):
        return model.decoder(
            x, memory, src_mask, tgt_mask
        )  # (B, T, d_model)


@contextlib.contextmanager
def _attending_with(
    cache: DecoderCache, layers: Iterable[nn.Module]
) -> Iterator[None]:
    """Inside the block, each decoder layer's attentions run ``attend`` with their own caches.

    Only the attention differs when decoding step by step; the layers, residuals and norms run as
    the reference does (and forward hooks, such as a FLOP counter's, see the same modules).
    """
    attentions = []
    for layer, (self_cache, cross_cache) in zip(
        layers, cache.layers, strict=True
    ):
        for attn, kv in (
            (layer.self_attn, self_cache),
            (layer.cross_attn, cross_cache),
        ):
            attn.forward = functools.partial(attend, attn, cache=kv)
            attentions.append(attn)
    try:
        yield
    finally:
        for attn in attentions:
            del attn.forward  # the class's forward again
