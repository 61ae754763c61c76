"""Token embeddings and positional encodings (Vaswani et al. 2017, sections 3.4 and 3.5).

B  batch        L  sequence length        d_model  model width
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .checks import check_positive, check_token_dtype

__all__ = [
    "Embeddings",
    "sinusoidal_encoding",
    "PositionalEncoding",
    "LearnedPositionalEmbedding",
]


class Embeddings(nn.Module):
    """A token lookup table whose output is scaled by sqrt(d_model), as in section 3.4.

    Args:
        vocab_size: number of token ids.
        d_model: width of each vector.
        padding_idx: optional id whose row stays zero and gets no gradient.
    """

    def __init__(
        self, vocab_size: int, d_model: int, padding_idx: int | None = None
    ):
        super().__init__()
        check_positive(vocab_size=vocab_size, d_model=d_model)
        if padding_idx is not None and not 0 <= padding_idx < vocab_size:
            raise ValueError(
                f"padding_idx must be in [0, {vocab_size}), got {padding_idx}"
            )
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.lut = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)

    @property
    def weight(self) -> nn.Parameter:
        """The ``(vocab_size, d_model)`` table, shared with the generator when weights are tied."""
        return self.lut.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Look up ``(B, L)`` ids and return ``(B, L, d_model)`` vectors times sqrt(d_model)."""
        check_token_dtype(tokens)
        # The range check reads two numbers back from the device: done on CPU
        # tensors (where the chapters and tests run), skipped on accelerators
        # and under torch.compile, where it would stall the pipeline; there the
        # embedding kernel's own index check still fires.
        on_cpu = tokens.device.type == "cpu"
        checkable = on_cpu and not torch.compiler.is_compiling()
        if checkable and tokens.numel():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(
                    f"token ids must be in [0, {self.vocab_size}), "
                    f"got values from {low} to {high}"
                )
        return self.lut(tokens) * math.sqrt(self.d_model)


def sinusoidal_encoding(max_len: int, d_model: int) -> torch.Tensor:
    """The table of section 3.5: PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    Column ``2i`` and column ``2i + 1`` share one frequency. When ``d_model`` is odd, the last
    column is a sine whose cosine partner would fall outside the table; it is kept, so the table
    always has exactly ``d_model`` columns.

    Args:
        max_len: number of positions (rows).
        d_model: width (columns).

    Returns:
        ``(max_len, d_model)`` float32.
    """
    check_positive(max_len=max_len, d_model=d_model)
    f64 = torch.float64  # rounded to float32 once, at the end
    position = torch.arange(max_len, dtype=f64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=f64)  # (ceil(d_model / 2),)
    # (max_len, ceil(d_model / 2))
    angle = position / torch.pow(10000.0, two_i / d_model)
    pe = torch.zeros(max_len, d_model, dtype=f64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe.float()


class PositionalEncoding(nn.Module):
    """Add the sinusoidal table to a batch of embeddings, then apply dropout (P_drop).

    Args:
        d_model: width of the embeddings.
        dropout: dropout probability applied to the sum.
        max_len: longest sequence the table covers.
    """

    def __init__(
        self, d_model: int, dropout: float = 0.1, max_len: int = 5000
    ):
        super().__init__()
        check_positive(d_model=d_model, max_len=max_len)
        self.dropout = nn.Dropout(dropout)
        self.max_len = max_len
        pe = sinusoidal_encoding(max_len, d_model)  # (max_len, d_model)
        self.register_buffer("pe", pe, persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``(B, L, d_model)`` -> ``(B, L, d_model)``, for positions ``start .. start + L - 1``.

        ``start`` > 0 continues a sequence, when decoding step by step with a cache.
        """
        if x.dim() != 3 or x.size(-1) != self.pe.size(1):
            raise ValueError(
                f"expected input of shape (B, L, {self.pe.size(1)}), "
                f"got {tuple(x.shape)}"
            )
        end = start + x.size(1)
        if end > self.max_len:
            raise ValueError(
                f"sequence of length {end} is longer than "
                f"max_len={self.max_len} of the positional encoding"
            )
        pe = self.pe[start:end].to(x.dtype)  # (L, d_model), every sentence
        return self.dropout(x + pe)  # (B, L, d_model)


class LearnedPositionalEmbedding(nn.Module):
    """Table 3 row (E): one trained vector per position instead of the sinusoids (no dropout here).

    Args:
        max_len: number of positions that have a vector; longer inputs raise.
        d_model: width.
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        check_positive(max_len=max_len, d_model=d_model)
        self.max_len = max_len
        self.table = nn.Embedding(max_len, d_model)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Add the vectors of positions ``start .. start + L - 1`` to ``(B, L, d_model)`` embeddings.

        ``start`` > 0 continues a sequence, when decoding step by step with a cache.
        """
        if x.dim() != 3 or x.size(-1) != self.table.embedding_dim:
            raise ValueError(
                f"expected input of shape (B, L, {self.table.embedding_dim}), "
                f"got {tuple(x.shape)}"
            )
        end = start + x.size(1)
        if end > self.max_len:
            raise ValueError(
                f"sequence of length {end} is longer than "
                f"max_len={self.max_len} of the learned table"
            )
        positions = torch.arange(start, end, device=x.device)
        return x + self.table(positions)
