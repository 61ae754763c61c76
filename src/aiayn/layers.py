"""The encoder and decoder stacks: feed-forward, layer norm, residual sublayers (sections 3.1 and 3.3).

    B  batch        S  source length        T  target length
    d_model  model width        d_ff  inner width of the feed-forward        h  heads        N  layers

Post-norm is the paper: each sublayer's output is ``LayerNorm(x + Dropout(Sublayer(x)))``.
Pre-norm (``norm_first=True``) is the variant most later code uses, as does the Annotated
Transformer without saying so: ``x + Dropout(Sublayer(LayerNorm(x)))``.

The final LayerNorm. In pre-norm mode the residual stream is never normalised inside the stack,
so ``Encoder`` and ``Decoder`` end with one LayerNorm. In post-norm mode every layer already ends
with a LayerNorm, so a final one is left out (``self.norm`` is ``nn.Identity``). Beware when
comparing with ``nn.Transformer``: it adds a final norm to both stacks even when ``norm_first=False``.
``nn.TransformerEncoder`` and ``nn.TransformerDecoder`` add one only when given ``norm=``.

The fast path. ``LayerNorm(fused=True)`` computes the same formula with ``F.layer_norm`` and a
stack's ``prepare_masks`` prepares its masks once for all its layers. ``aiayn.engine.switch.set_fast``
switches these on together with the engine's attention twin; this module does not know that twin.
Off by default: the chapters explain the explicit code.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, PreparedMask, prepare_mask
from .checks import check_positive

Mask = torch.Tensor | PreparedMask

__all__ = [
    "PositionwiseFeedForward",
    "LayerNorm",
    "SublayerConnection",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
]


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alone (equation 2).

    Args:
        d_model: input and output width.
        d_ff: inner width (2048 in the base model).
        dropout: dropout after the ReLU, as in the reference code.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        check_positive(d_model=d_model, d_ff=d_ff)
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, L, d_model)`` -> ``(B, L, d_model)``."""
        hidden = self.dropout(self.w_1(x).relu())  # (B, L, d_ff)
        return self.w_2(hidden)  # (B, L, d_model)


class LayerNorm(nn.Module):
    """Layer normalisation from the formula: (x - mean) / sqrt(var + eps) * weight + bias over the last axis.

    The variance is the biased one (divide by ``d_model``) and ``eps`` sits under the square root,
    exactly as in ``nn.LayerNorm``.

    Args:
        d_model: width of the normalised axis.
        eps: added to the variance.
        fused: compute it with ``torch.nn.functional.layer_norm`` (one kernel, same result).
    """

    def __init__(self, d_model: int, eps: float = 1e-6, fused: bool = False):
        super().__init__()
        check_positive(d_model=d_model)
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., d_model)`` -> ``(..., d_model)``."""
        if self.fused:
            return F.layer_norm(
                x, self.weight.shape, self.weight, self.bias, self.eps
            )
        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
        # the biased variance: divide by d_model, as nn.LayerNorm does
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
        x_hat = (x - mean) / torch.sqrt(var + self.eps)  # (..., d_model)
        return x_hat * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.numel()}, eps={self.eps}, fused={self.fused}"


class SublayerConnection(nn.Module):
    """A residual connection around one sublayer, with dropout and LayerNorm ("Add & Norm").

    Args:
        d_model: model width.
        dropout: P_drop, applied to the sublayer's output before it is added.
        norm_first: ``False`` (paper): ``LayerNorm(x + Dropout(sublayer(x)))``;
            ``True``: ``x + Dropout(sublayer(LayerNorm(x)))``.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.1, norm_first: bool = False
    ):
        super().__init__()
        self.norm = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self,
        x: torch.Tensor,
        sublayer: Callable[[torch.Tensor], torch.Tensor],
    ) -> torch.Tensor:
        """``(B, L, d_model)`` -> ``(B, L, d_model)``."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward network, each in a ``SublayerConnection``.

    Args:
        d_model, h, d_ff: sizes as in the paper.
        dropout: P_drop (residual, attention weights and feed-forward).
        norm_first: pre-norm instead of the paper's post-norm.
        d_k, d_v: per-head widths, default ``d_model // h``.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        d_k: int | None = None,
        d_v: int | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, h, dropout, d_k=d_k, d_v=d_v
        )
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        sublayers = [
            SublayerConnection(d_model, dropout, norm_first)
            for _ in range(2)
        ]
        self.sublayers = nn.ModuleList(sublayers)

    def forward(
        self, x: torch.Tensor, src_mask: Mask | None = None
    ) -> torch.Tensor:
        """Run the layer (or the stack) over the source.

        Args:
            x: ``(B, S, d_model)``.
            src_mask: boolean ``(B, 1, 1, S)``, ``True`` where the key is a real token.

        Returns:
            ``(B, S, d_model)``.
        """
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, src_mask))
        return self.sublayers[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Masked self-attention, attention over the encoder output, then the feed-forward network.

    Args:
        d_model, h, d_ff: sizes as in the paper.
        dropout: P_drop.
        norm_first: pre-norm instead of the paper's post-norm.
        d_k, d_v: per-head widths, default ``d_model // h``.
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        d_k: int | None = None,
        d_v: int | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, h, dropout, d_k=d_k, d_v=d_v
        )
        self.cross_attn = MultiHeadAttention(
            d_model, h, dropout, d_k=d_k, d_v=d_v
        )
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout)
        sublayers = [
            SublayerConnection(d_model, dropout, norm_first)
            for _ in range(3)
        ]
        self.sublayers = nn.ModuleList(sublayers)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: Mask | None = None,
        tgt_mask: Mask | None = None,
    ) -> torch.Tensor:
        """Run one decoder layer.

        Args:
            x: ``(B, T, d_model)`` decoder states.
            memory: ``(B, S, d_model)`` encoder output.
            src_mask: boolean ``(B, 1, 1, S)``, which source positions are real tokens.
            tgt_mask: boolean ``(B, 1, T, T)``, padding and look-ahead combined.

        Returns:
            ``(B, T, d_model)``.
        """

        def attend_self(y: torch.Tensor) -> torch.Tensor:
            return self.self_attn(y, y, y, tgt_mask)

        def attend_source(y: torch.Tensor) -> torch.Tensor:
            return self.cross_attn(y, memory, memory, src_mask)

        x = self.sublayers[0](x, attend_self)
        x = self.sublayers[1](x, attend_source)
        return self.sublayers[2](x, self.feed_forward)


class _Stack(nn.Module):
    """N copies of one layer type, then a final LayerNorm only when ``norm_first``."""

    layer_type: type[nn.Module]

    def __init__(
        self,
        d_model: int = 512,
        h: int = 8,
        d_ff: int = 2048,
        dropout: float = 0.1,
        N: int = 6,
        norm_first: bool = False,
        d_k: int | None = None,
        d_v: int | None = None,
    ):
        super().__init__()
        check_positive(N=N)
        layers = [
            self.layer_type(d_model, h, d_ff, dropout, norm_first, d_k, d_v)
            for _ in range(N)
        ]
        self.layers = nn.ModuleList(layers)
        self.norm = LayerNorm(d_model) if norm_first else nn.Identity()
        self.prepare_masks = False  # the fast path's masks, see prepare_mask

    def _prepared(self, mask: Mask | None) -> Mask | None:
        if self.prepare_masks and isinstance(mask, torch.Tensor):
            return prepare_mask(mask)
        return mask


class Encoder(_Stack):
    """A stack of N encoder layers; a final LayerNorm only when ``norm_first`` (see the module docstring).

    Args:
        d_model, h, d_ff: sizes as in the paper.
        dropout: P_drop.
        N: number of layers.
        norm_first: pre-norm instead of the paper's post-norm.
        d_k, d_v: per-head widths, default ``d_model // h``.
    """

    layer_type = EncoderLayer

    def forward(
        self, x: torch.Tensor, src_mask: Mask | None = None
    ) -> torch.Tensor:
        """Run the layer (or the stack) over the source.

        Args:
            x: ``(B, S, d_model)``.
            src_mask: boolean ``(B, 1, 1, S)``, ``True`` where the key is a real token.

        Returns:
            ``(B, S, d_model)``.
        """
        src_mask = self._prepared(src_mask)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class Decoder(_Stack):
    """A stack of N decoder layers; a final LayerNorm only when ``norm_first`` (see the module docstring).

    Args:
        d_model, h, d_ff: sizes as in the paper.
        dropout: P_drop.
        N: number of layers.
        norm_first: pre-norm instead of the paper's post-norm.
        d_k, d_v: per-head widths, default ``d_model // h``.
    """

    layer_type = DecoderLayer

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: Mask | None = None,
        tgt_mask: Mask | None = None,
    ) -> torch.Tensor:
        """Args as in ``DecoderLayer.forward``. Returns ``(B, T, d_model)``."""
        src_mask = self._prepared(src_mask)
        tgt_mask = self._prepared(tgt_mask)
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)
