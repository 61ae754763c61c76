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

This module is the reference: what section 3.2 describes, in the order the book teaches it. Its
faster twins live in modules of their own and are proven equal by the tests: ``fast_attention``
(q, k and v from one matrix product, switched on by ``engine.switch.set_fast``) and ``kv_cache`` (decoding
step by step, keys and values kept between steps, beam search's rows).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .checks import check_positive

__all__ = [
    "scaled_dot_product_attention",
    "MultiHeadAttention",
    "set_fused",
    "PreparedMask",
    "prepare_mask",
    "check_head_mask",
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
        self.temperature = temperature
        self.attn: torch.Tensor | None = None
        # (h,) of 0 and 1, each head's output times its number before W^O;
        # None: every head (set by ``model.set_head_mask``)
        self.head_mask: torch.Tensor | None = None

    def check_inputs(
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
    ) -> torch.Tensor:
        """Attend from ``query`` to ``key``/``value``: Figure 2 (right) of the paper.

        Args:
            query: ``(B, L_q, d_model)``.
            key: ``(B, L_k, d_model)``.
            value: ``(B, L_k, d_model)``.
            mask: optional boolean, ``True`` = may attend: ``(L_q, L_k)``, ``(B, L_q, L_k)`` or
                4-D such as ``(B, 1, 1, L_k)`` (padding) and ``(B, 1, L_q, L_k)`` (decoder).

        Returns:
            ``(B, L_q, d_model)``.
        """
        self.check_inputs(query, key, value)
        B, L_q = query.size(0), query.size(1)
        # Linear: project and split into h heads of d_k (d_v) features
        q, k, v = self.projections(
            query, key, value
        )  # (B, h, L, d_k or d_v)
        # Scaled Dot-Product Attention, all heads at once
        heads = self.attend(q, k, v, mask)  # (B, h, L_q, d_v)
        # Concat: the heads side by side again
        concat = heads.transpose(1, 2).contiguous()  # (B, L_q, h, d_v)
        concat = concat.view(B, L_q, self.h * self.d_v)  # (B, L_q, h * d_v)
        return self.w_o(concat)  # Linear: (B, L_q, d_model)

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | PreparedMask | None,
        fused: bool | None = None,
    ) -> torch.Tensor:
        """Equation 1 per head: ``(B, h, L_q, d_v)``; keeps the weights on ``self.attn`` unless fused."""
        if mask is not None and not isinstance(mask, PreparedMask):
            mask = self._mask_for_heads(mask)
        if self.use_fused if fused is None else fused:
            p = self.dropout.p if self.training else 0.0
            self.attn = None
            heads = _fused_attention(q, k, v, mask, p, self.temperature)
            return self.masked_heads(heads)
        if isinstance(mask, PreparedMask):
            mask = mask.mask
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask, self.dropout, self.temperature
        )
        self.attn = weights.detach()  # (B, h, L_q, L_k)
        return self.masked_heads(heads)

    def masked_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """``heads`` ``(B, h, L_q, d_v)`` times ``self.head_mask``: a head at 0 gives nothing to W^O.

        Michel et al. (2019) switch heads off at test time so; a mask of ones changes no bit.
        """
        if self.head_mask is None:
            return heads
        m = self.head_mask.to(dtype=heads.dtype, device=heads.device)
        return heads * m.view(1, self.h, 1, 1)  # (B, h, L_q, d_v)

    def projections(
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

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, h={self.h}, d_k={self.d_k}, "
            f"d_v={self.d_v}, fused={self.use_fused}"
        )


def check_head_mask(mask: object, shape: tuple[int, ...]) -> torch.Tensor:
    """Return ``mask`` if it is a floating-point tensor of ``shape`` holding only 0 and 1.

    Raises a ``TypeError`` (not a tensor, not floating point) or a ``ValueError`` (another
    shape, a value that is not finite or neither 0 nor 1) that says what was expected.
    """
    want = f"a float tensor of shape {tuple(shape)} holding 0 and 1"
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"head_mask: expected {want}, got {type(mask).__name__}"
        )
    if not mask.dtype.is_floating_point:
        raise TypeError(
            f"head_mask: expected {want}, got dtype {mask.dtype} "
            "(use mask.float())"
        )
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(
            f"head_mask: expected {want}, got shape {tuple(mask.shape)}"
        )
    values = mask.detach()
    if not bool(torch.isfinite(values).all()):
        raise ValueError(
            f"head_mask: expected {want}, got a value that is not finite"
        )
    if not bool(((values == 0) | (values == 1)).all()):
        other = values[(values != 0) & (values != 1)][0].item()
        raise ValueError(
            f"head_mask: expected {want}, got the value {other:g}"
        )
    return mask


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
