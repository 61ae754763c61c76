"""Scaled dot-product attention and multi-head attention (Vaswani et al. 2017, section 3.2).

    B  batch        h  heads        L_q  query length        L_k  key (and value) length
    d_model  model width        d_k  query/key width per head        d_v  value width per head

Masks are boolean and ``True`` means "this query may attend to this key" (see ``aiayn.masks``).

No NaN, ever. A query whose keys are all masked (a row of a sequence that is entirely padding)
would give ``softmax([-inf, ..., -inf]) = 0 / 0 = NaN``. Here masked scores are filled with the
most negative *finite* number of the dtype, ``torch.finfo(dtype).min``, and the weights of a fully
masked row are then set to zero, so that row's output is a zero vector and its gradients are zero.
The fused path (``torch.nn.functional.scaled_dot_product_attention``) is made to agree: fully
masked rows are un-masked before the kernel runs (so it cannot produce NaN) and their outputs are
zeroed afterwards.

The fast path, off by default (``aiayn.model.set_fast`` turns it on), computes the same numbers
with fewer operations: one matrix product for the three projections of self-attention (two for
the keys and values of cross-attention), built from the unchanged ``w_q``/``w_k``/``w_v``
parameters, and masks prepared once per stack (``prepare_mask``) instead of once per layer.

Decoding one token at a time, ``KVCache`` keeps each layer's keys and values, so a step projects
only the new position (self-attention) or nothing at all (cross-attention: the source's keys and
values are computed at the first step).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_positive

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "set_fused",
    "packed_weights_kept",
    "PreparedMask",
    "prepare_mask",
    "KVCache",
]


def _check_bool_mask(mask: torch.Tensor, name: str = "mask") -> None:
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name}: expected a boolean torch.Tensor, got {type(mask).__name__}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name}: expected dtype torch.bool (True = may attend), got {mask.dtype}"
        )


def _fully_masked_rows(
    mask: torch.Tensor, scores_shape: tuple[int, ...]
) -> torch.Tensor:
    """Check that ``mask`` broadcasts to the scores and return which query rows have no key left.

    Args:
        mask: boolean, broadcastable to ``scores_shape`` = ``(..., L_q, L_k)``.

    Returns:
        ``(..., L_q or 1, 1)`` boolean, ``True`` for a query that may attend to nothing.
    """
    _check_mask_shape(mask, scores_shape)
    return ~mask.any(dim=-1, keepdim=True)  # (..., L_q or 1, 1)


def _check_mask_shape(
    mask: torch.Tensor, scores_shape: tuple[int, ...]
) -> None:
    """Raise unless the boolean ``mask`` broadcasts to ``scores_shape``."""
    _check_bool_mask(mask)
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
        ok = shape == torch.Size(scores_shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to scores {tuple(scores_shape)}"
        )


def _with_heads_axis(mask: torch.Tensor) -> torch.Tensor:
    """Give a 2-D ``(L_q, L_k)`` or 3-D ``(B, L_q, L_k)`` mask a heads axis; 4-D masks pass through."""
    _check_bool_mask(mask)
    if mask.dim() == 2:
        return mask[None, None]  # (1, 1, L_q, L_k)
    if mask.dim() == 3:
        return mask[:, None]  # (B, 1, L_q, L_k)
    if mask.dim() == 4:
        return mask  # (B, 1 or h, L_q, L_k)
    raise ValueError(
        f"mask must have 2, 3 or 4 dimensions, got shape {tuple(mask.shape)}"
    )


class PreparedMask(NamedTuple):
    """A mask with what the fused kernel needs, computed once for all the layers that share it.

    Args:
        mask: the boolean mask as given, ``True`` = may attend (used by the explicit path).
        allowed: ``mask`` with fully masked rows un-masked, safe to hand to the fused kernel.
        empty: ``(..., L_q or 1, 1)``, ``True`` for a query that may attend to nothing, whose
            output is then zeroed; ``None`` when it was checked that there is no such query.
    """

    mask: torch.Tensor
    allowed: torch.Tensor
    empty: torch.Tensor | None


def prepare_mask(mask: torch.Tensor) -> PreparedMask:
    """Find the fully masked rows of ``mask`` once, for every layer that uses it.

    On the CPU the check costs one number read back, so a mask without such rows is proven safe
    and the repair is skipped altogether (``empty=None``). On an accelerator that read would
    stall the pipeline, so the repair is kept: un-masked once here, zeroed in each layer.

    Args:
        mask: boolean, ``True`` = may attend: ``(L_q, L_k)``, ``(B, L_q, L_k)`` or 4-D such as
            ``(B, 1, 1, S)`` (padding) and ``(B, 1, T, T)`` (decoder).
    """
    mask = _with_heads_axis(mask)  # (B or 1, 1 or h, L_q, L_k)
    empty = ~mask.any(dim=-1, keepdim=True)  # (B or 1, 1 or h, L_q or 1, 1)
    on_cpu = mask.device.type == "cpu"
    checkable = on_cpu and not torch.compiler.is_compiling()
    if checkable and not bool(empty.any()):
        return PreparedMask(mask, mask, None)
    return PreparedMask(mask, mask | empty, empty)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Dropout | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ / sqrt(d_k)) V over the last two dimensions (equation 1 of the paper).

    Leading dimensions (batch, heads) broadcast. Masked scores are filled with
    ``torch.finfo(dtype).min``, and a query whose keys are all masked gets all-zero weights,
    hence a zero output and finite gradients (see the module docstring).

    Args:
        query: ``(..., L_q, d_k)``.
        key: ``(..., L_k, d_k)``.
        value: ``(..., L_k, d_v)``.
        mask: optional boolean, ``True`` = may attend, broadcastable to the scores ``(..., L_q, L_k)``.
        dropout: optional ``nn.Dropout`` applied to the attention weights.
        temperature: divides the scaled scores; 1.0 is the paper. A teaching knob, not in the paper:
            above 1 flattens the weights, below 1 sharpens them.

    Returns:
        ``output`` ``(..., L_q, d_v)`` and ``weights`` ``(..., L_q, L_k)`` (after dropout).
    """
    if query.size(-1) != key.size(-1):
        raise ValueError(
            "query and key must share d_k, got query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            "key and value must have the same length, got key "
            f"{tuple(key.shape)}, value {tuple(value.shape)}"
        )
    if not temperature > 0:
        raise ValueError(
            f"temperature must be positive, got {temperature!r}"
        )
    d_k = query.size(-1)
    # (..., L_q, L_k)
    scores = query @ key.transpose(-2, -1) / (math.sqrt(d_k) * temperature)
    if mask is not None:
        # (..., L_q or 1, 1), True for a query that may attend to nothing
        empty = _fully_masked_rows(mask, tuple(scores.shape))
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (..., L_q, L_k)
    if mask is not None:
        weights = weights.masked_fill(empty, 0.0)
    if dropout is not None:
        weights = dropout(weights)
    return weights @ value, weights  # (..., L_q, d_v), (..., L_q, L_k)


def _fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | PreparedMask | None,
    dropout_p: float,
    temperature: float,
) -> torch.Tensor:
    """The same computation through PyTorch's fused kernel; fully masked rows give zeros, as above."""
    # as the explicit path: 0 would divide by zero, < 0 invert the attention
    if not temperature > 0:
        raise ValueError(
            f"temperature must be positive, got {temperature!r}"
        )
    scale = 1.0 / (math.sqrt(query.size(-1)) * temperature)
    if mask is None:
        return F.scaled_dot_product_attention(
            query, key, value, dropout_p=dropout_p, scale=scale
        )
    batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2])
    scores_shape = (*batch, query.size(-2), key.size(-2))
    if isinstance(mask, PreparedMask):
        # rows already repaired, once for all layers
        _check_mask_shape(mask.mask, scores_shape)
        allowed, empty = mask.allowed, mask.empty
    else:
        empty = _fully_masked_rows(mask, scores_shape)  # (..., L_q or 1, 1)
        allowed = mask | empty
    output = F.scaled_dot_product_attention(
        query, key, value, allowed, dropout_p=dropout_p, scale=scale
    )
    if empty is None:
        return output  # (..., L_q, d_v)
    return output.masked_fill(empty, 0.0)


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


class MultiHeadAttention(nn.Module):
    """h attention heads in parallel, each on its own learned projection, then concatenated (section 3.2.2).

    ``forward`` returns only the output; the last attention weights are kept, detached, on
    ``self.attn`` ``(B, h, L_q, L_k)`` for plots (``None`` after a fused forward, since the fused
    kernel does not return them).

    Args:
        d_model: model width.
        h: number of heads.
        dropout: dropout on the attention weights, as in the reference code (not the paper's P_drop).
        bias: whether the four projections have biases.
        fused: use ``torch.nn.functional.scaled_dot_product_attention`` (faster, no weights kept).
        packed: one matrix product for the projections that share an input (q, k and v in
            self-attention; k and v in cross-attention), from the same parameters.
        temperature: divides the scaled scores; 1.0 is the paper. A teaching knob, not in the paper.
        d_k: query/key width per head; default ``d_model // h`` as in the paper (Table 3 row B changes it).
        d_v: value width per head; default ``d_model // h``.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        dropout: float = 0.1,
        bias: bool = True,
        fused: bool = False,
        temperature: float = 1.0,
        d_k: int | None = None,
        d_v: int | None = None,
        packed: bool = False,
    ):
        super().__init__()
        check_positive(d_model=d_model, h=h)
        if (d_k is None or d_v is None) and d_model % h != 0:
            raise ValueError(
                f"d_model must be divisible by h to give d_k = d_model / h, got d_model={d_model}, h={h}"
            )
        self.d_model, self.h = d_model, h
        self.d_k = d_model // h if d_k is None else d_k
        self.d_v = d_model // h if d_v is None else d_v
        check_positive(d_k=self.d_k, d_v=self.d_v)
        self.w_q = nn.Linear(d_model, h * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, h * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, h * self.d_v, bias=bias)
        self.w_o = nn.Linear(h * self.d_v, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.use_fused = fused
        self.packed = packed
        self.temperature = temperature
        self.attn: torch.Tensor | None = None
        # the stacked q/k/v weights, kept only inside ``packed_weights_kept``
        self._packed_kept: dict[tuple[str, ...], tuple] | None = None

    def _check_inputs(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        same_batch: bool = True,
    ) -> None:
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.dim() != 3 or x.size(-1) != self.d_model:
                raise ValueError(
                    f"{name}: expected shape (B, L, {self.d_model}), got {tuple(x.shape)}"
                )
        if key.size(0) != value.size(0) or (
            same_batch and query.size(0) != key.size(0)
        ):
            raise ValueError(
                f"query, key and value must share the batch size, got {query.size(0)}, {key.size(0)}, {value.size(0)}"
            )
        if key.size(1) != value.size(1):
            raise ValueError(
                f"key and value must have the same length, got {key.size(1)} and {value.size(1)}"
            )

    @staticmethod
    def _mask_for_heads(mask: torch.Tensor) -> torch.Tensor:
        """Give a 2-D ``(L_q, L_k)`` or 3-D ``(B, L_q, L_k)`` mask a heads axis; 4-D masks pass through."""
        return _with_heads_axis(mask)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | PreparedMask | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Attend from ``query`` to ``key``/``value``.

        Args:
            query: ``(B, L_q, d_model)``.
            key: ``(B, L_k, d_model)``.
            value: ``(B, L_k, d_model)``.
            mask: optional boolean, ``True`` = may attend: ``(L_q, L_k)``, ``(B, L_q, L_k)`` or
                4-D such as ``(B, 1, 1, L_k)`` (padding) and ``(B, 1, L_q, L_k)`` (decoder);
                or a ``PreparedMask``. With a self-attention ``cache`` the keys are all
                positions so far: ``(B, 1, L_q, len(cache) + L_k)``.
            cache: keys and values of earlier decoding steps (see ``KVCache``).

        Returns:
            ``(B, L_q, d_model)``.
        """
        beams = None if cache is None else cache.beams
        self._check_inputs(query, key, value, same_batch=beams is None)
        if mask is not None and not isinstance(mask, PreparedMask):
            mask = self._mask_for_heads(mask)
        B, L_q = query.size(0), query.size(1)
        if self.packed or cache is not None:
            q, k, v = self._fast_projections(query, key, value, cache)
        else:
            q, k, v = self._projections(query, key, value)
        if beams is not None:  # (R, h, 1, d_k) -> (B_src, h, K, d_k)
            q = _beams_as_queries(q, *beams, k.size(0))
        # one new query per row, decoding step by step: the explicit product is
        # faster there than the fused kernel, which is built for long queries
        one_step = cache is not None and L_q == 1
        if self.use_fused and not one_step:
            p = self.dropout.p if self.training else 0.0
            heads = _fused_attention(q, k, v, mask, p, self.temperature)
            self.attn = None
        else:
            if isinstance(mask, PreparedMask):
                mask = mask.mask
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask, self.dropout, self.temperature
            )
            self.attn = weights.detach()  # (B, h, L_q, L_k)
        if beams is not None:  # (B_src, h, K, d_v) -> (R, h, 1, d_v)
            heads = _queries_as_beams(heads, beams[0])
        # heads: (B, h, L_q, d_v); put the heads side by side again
        concat = heads.transpose(1, 2).contiguous()  # (B, L_q, h, d_v)
        concat = concat.view(B, L_q, self.h * self.d_v)  # (B, L_q, h * d_v)
        return self.w_o(concat)  # (B, L_q, d_model)

    def _projections(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Project and split into heads: q ``(B, h, L_q, d_k)``, k ``(B, h, L_k, d_k)``, v ``(B, h, L_k, d_v)``."""
        B, L_q, L_k = query.size(0), query.size(1), key.size(1)
        h, d_k, d_v = self.h, self.d_k, self.d_v
        q = self.w_q(query)  # (B, L_q, h * d_k)
        k = self.w_k(key)  # (B, L_k, h * d_k)
        v = self.w_v(value)  # (B, L_k, h * d_v)
        q = q.view(B, L_q, h, d_k).transpose(1, 2)  # (B, h, L_q, d_k)
        k = k.view(B, L_k, h, d_k).transpose(1, 2)  # (B, h, L_k, d_k)
        v = v.view(B, L_k, h, d_v).transpose(1, 2)  # (B, h, L_k, d_v)
        return q, k, v

    def _fast_projections(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        cache: KVCache | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_projections`` with packed products (when ``packed``) and the decoding cache.

        Queries and keys may have different batch sizes (the cache's ``beams``).
        """
        B, L_q, L_k = query.size(0), query.size(1), key.size(1)
        B_k = key.size(0)
        h, d_k, d_v = self.h, self.d_k, self.d_v
        if cache is not None and cache.static and cache.k is not None:
            # cross-attention after the first step: k and v are the cache's,
            # (B, h, S, d_k) and (B, h, S, d_v), computed from the source
            q = self.w_q(query)  # (B, L_q, h * d_k)
            q = q.view(B, L_q, h, d_k).transpose(1, 2)  # (B, h, L_q, d_k)
            return q, cache.k, cache.v
        # int8 projections (``translation.int8_copy``) hold no float weight to stack
        packed = self.packed and isinstance(self.w_k, nn.Linear)
        if packed and query is key and key is value:
            q, k, v = self._packed_linear(("w_q", "w_k", "w_v"), query)
        elif packed and key is value:
            q = self.w_q(query)
            k, v = self._packed_linear(("w_k", "w_v"), key)
        else:
            q, k, v = self.w_q(query), self.w_k(key), self.w_v(value)
        q = q.view(B, L_q, h, d_k).transpose(1, 2)  # (B, h, L_q, d_k)
        k = k.view(B_k, L_k, h, d_k).transpose(1, 2)  # (B_k, h, L_k, d_k)
        v = v.view(B_k, L_k, h, d_v).transpose(1, 2)  # (B_k, h, L_k, d_v)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, h, len(cache), d_k/d_v)
        return q, k, v

    def _packed_linear(
        self, names: tuple[str, ...], x: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Apply the projections ``names`` to ``x`` as one product; one ``(B, L, width)`` per name."""
        linears = [getattr(self, name) for name in names]
        weight, bias = self._packed_parameters(names)
        out = F.linear(x, weight, bias)  # (B, L, sum of widths)
        return out.split([lin.out_features for lin in linears], dim=-1)

    def _packed_parameters(
        self, names: tuple[str, ...]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The weights (and biases) of ``names`` stacked along the output axis.

        Stacked anew at every forward, except inside ``packed_weights_kept`` (one decoding call),
        where the parameters cannot change and the stack is made once. No copy outlives that
        block: a version counter does not say when a parameter changed, since the fused and
        foreach optimizers update parameters in place without bumping it.
        """
        linears = [getattr(self, name) for name in names]
        weights = [lin.weight for lin in linears]
        biases = [lin.bias for lin in linears if lin.bias is not None]
        kept = self._packed_kept
        if (
            kept is None
            or torch.is_grad_enabled()
            or torch.compiler.is_compiling()
        ):
            return torch.cat(weights), torch.cat(biases) if biases else None
        if names not in kept:
            weight = torch.cat(weights)  # (sum of widths, d_model)
            bias = torch.cat(biases) if biases else None  # (sum of widths,)
            kept[names] = (weight, bias)
        return kept[names]

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, h={self.h}, d_k={self.d_k}, "
            f"d_v={self.d_v}, fused={self.use_fused}, packed={self.packed}"
        )


@contextlib.contextmanager
def packed_weights_kept(model: nn.Module) -> Iterator[None]:
    """Inside the block, stack each packed attention's q/k/v weights once, without gradients.

    Decoding enters it for one call, in which the parameters do not change; on exit the stacked
    copies are dropped, so no later forward (after an optimizer step, a load, any in-place
    update) can read weights that are no longer the parameters'. Nested blocks keep the outer one's.
    """
    modules = [
        m
        for m in model.modules()
        if isinstance(m, MultiHeadAttention) and m._packed_kept is None
    ]
    for m in modules:
        m._packed_kept = {}
    try:
        yield
    finally:
        for m in modules:
            m._packed_kept = None


class set_fused:  # lower case like torch.set_grad_enabled, which it imitates
    """Switch every ``MultiHeadAttention`` in ``model`` to the fused (or explicit) path.

    Takes effect at once; used as a context manager, it restores each module's previous setting on exit::

        set_fused(model, True)            # from now on
        with set_fused(model, False):     # only inside the block, e.g. to collect attention maps
            model(src, tgt)

    Args:
        model: any module; its ``MultiHeadAttention`` submodules are switched.
        enabled: ``True`` for the fused kernel, ``False`` for the explicit path that keeps weights.
    """

    def __init__(self, model: nn.Module, enabled: bool = True):
        self.previous = [
            (m, m.use_fused)
            for m in model.modules()
            if isinstance(m, MultiHeadAttention)
        ]
        for m, _ in self.previous:
            m.use_fused = bool(enabled)

    def __enter__(self) -> set_fused:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for m, was in self.previous:
            m.use_fused = was
