"""The whole encoder-decoder Transformer and its configuration (Vaswani et al. 2017, figure 1).

    B  batch        S  source length        T  target length        V  target vocabulary size
    d_model  model width        d_ff  feed-forward width        h  heads        N  layers per stack

``TransformerConfig`` holds every size, with the paper's base model as defaults and presets for
the big model and the rows of Table 3. ``Transformer(config)`` builds the model; ``forward``
returns logits (the pre-softmax scores), not log-probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .attention import MultiHeadAttention, check_head_mask, set_fused
from .checks import check_positive, check_token_dtype
from .embeddings import (
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
)
from .layers import Decoder, Encoder
from .masks import decoder_mask, padding_mask

__all__ = [
    "TransformerConfig",
    "TABLE3_VARIANTS",
    "TABLE3_TRAINING_ONLY",
    "TABLE3_PAPER_PARAMS",
    "Transformer",
    "count_parameters",
    "HEAD_KINDS",
    "set_head_mask",
]

# the three kinds of attention, in the order of a head mask's first axis
HEAD_KINDS = ("encoder", "decoder_self", "cross")

# Table 3 of the paper as overrides of the base model. Every architectural row can be built:
# (A) and (C) keep d_k = d_v = d_model / h; (B) shrinks only d_k, which MultiHeadAttention supports.
TABLE3_VARIANTS: dict[str, dict[str, Any]] = {
    "A1": {"h": 1},  # d_k = d_v = 512
    "A2": {"h": 4},  # d_k = d_v = 128
    "A3": {"h": 16},  # d_k = d_v = 32
    "A4": {"h": 32},  # d_k = d_v = 16
    "B1": {"d_k": 16, "d_v": 64},
    "B2": {"d_k": 32, "d_v": 64},
    "C1": {"N": 2},
    "C2": {"N": 4},
    "C3": {"N": 8},
    "C4": {"d_model": 256},  # d_k = d_v = 32
    "C5": {"d_model": 1024},  # d_k = d_v = 128
    "C6": {"d_ff": 1024},
    "C7": {"d_ff": 4096},
    "D1": {"dropout": 0.0},
    "D2": {"dropout": 0.2},
    "E": {"learned_positions": True},
}
# Rows that change only a training setting: the architecture is the base model's.
TABLE3_TRAINING_ONLY: dict[str, dict[str, float]] = {
    "D3": {"label_smoothing": 0.0},
    "D4": {"label_smoothing": 0.2},
}
# Parameter counts the paper reports, in millions (rows without a number are left out). With one shared
# vocabulary of 37000 tokens, our counts for base and rows B and C come out 1 to 4 million below these (about
# 4000 embedding rows' worth), while big comes out 1.3 million above; the paper gives its vocabulary size only
# as "about 37000", so no single vocabulary reproduces every row.
TABLE3_PAPER_PARAMS: dict[str, int] = {
    "base": 65, "B1": 58, "B2": 60, "C1": 36, "C2": 50, "C3": 80, "C4": 28, "C5": 168, "C6": 53, "C7": 90, "big": 213,
}  # fmt: skip


@dataclass(frozen=True)
class TransformerConfig:
    """Every size of the model; the defaults are the paper's base model.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes.
        d_model, d_ff, h, N: sizes as in the paper.
        dropout: P_drop, used everywhere dropout appears.
        max_len: longest sequence the positional encoding covers.
        norm_first: pre-norm instead of the paper's post-norm (see ``aiayn.layers``).
        share_embeddings: one embedding table for source and target (the paper, with its joint BPE
            vocabulary of about 37000 tokens); needs ``src_vocab_size == tgt_vocab_size``.
        tie_output: the generator's weight is the target embedding's weight (section 3.4).
        learned_positions: learned position vectors instead of sinusoids (Table 3 row E).
        pad_id: the padding token id, used to build masks when none are given.
        fused_attention: use PyTorch's fused attention kernel (no attention maps are kept).
        d_k, d_v: per-head widths; ``None`` means ``d_model // h`` as in the paper (row B sets d_k).
    """

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    N: int = 6
    dropout: float = 0.1
    max_len: int = 5000
    norm_first: bool = False
    share_embeddings: bool = False
    tie_output: bool = True
    learned_positions: bool = False
    pad_id: int = 0
    fused_attention: bool = False
    d_k: int | None = None
    d_v: int | None = None

    def __post_init__(self) -> None:
        check_positive(
            src_vocab_size=self.src_vocab_size,
            tgt_vocab_size=self.tgt_vocab_size,
            d_model=self.d_model,
            d_ff=self.d_ff,
            h=self.h,
            N=self.N,
            max_len=self.max_len,
        )
        for name in ("d_k", "d_v"):
            if getattr(self, name) is not None:
                check_positive(**{name: getattr(self, name)})
        default_widths = self.d_k is None or self.d_v is None
        if default_widths and self.d_model % self.h != 0:
            raise ValueError(
                f"d_model must be divisible by h to give d_k = d_model / h, got d_model={self.d_model}, h={self.h}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(
                f"dropout must be in [0, 1), got {self.dropout!r}"
            )
        one_vocabulary = self.src_vocab_size == self.tgt_vocab_size
        if self.share_embeddings and not one_vocabulary:
            raise ValueError(
                "share_embeddings=True needs one vocabulary, got "
                f"src_vocab_size={self.src_vocab_size} and tgt_vocab_size={self.tgt_vocab_size}"
            )
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int):
            raise ValueError(
                f"pad_id must be an integer token id, got {self.pad_id!r}"
            )
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        if not 0 <= self.pad_id < smallest:
            raise ValueError(
                f"pad_id must be in [0, {smallest}), got {self.pad_id}"
            )

    @classmethod
    def base(
        cls,
        src_vocab_size: int,
        tgt_vocab_size: int | None = None,
        **overrides: Any,
    ) -> TransformerConfig:
        """The base model: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; ``tgt_vocab_size`` defaults to the source's."""
        tgt = src_vocab_size if tgt_vocab_size is None else tgt_vocab_size
        return cls(src_vocab_size, tgt, **overrides)

    @classmethod
    def big(
        cls,
        src_vocab_size: int,
        tgt_vocab_size: int | None = None,
        **overrides: Any,
    ) -> TransformerConfig:
        """The big model: d_model=1024, d_ff=4096, h=16, P_drop=0.3 (the paper's EN-FR big model used 0.1)."""
        settings = {
            "d_model": 1024,
            "d_ff": 4096,
            "h": 16,
            "dropout": 0.3,
        } | overrides
        return cls.base(src_vocab_size, tgt_vocab_size, **settings)

    @classmethod
    def table3(
        cls,
        row: str,
        src_vocab_size: int,
        tgt_vocab_size: int | None = None,
        **overrides: Any,
    ) -> TransformerConfig:
        """One row of Table 3 (``"A1"`` .. ``"E"``, see ``TABLE3_VARIANTS``) on top of the base model.

        Rows D3 and D4 change only label smoothing, a setting of the loss, not of the model: they raise,
        and ``TABLE3_TRAINING_ONLY`` gives their value.
        """
        if row in TABLE3_TRAINING_ONLY:
            raise ValueError(
                f"Table 3 row {row} changes only {TABLE3_TRAINING_ONLY[row]}, a training setting: "
                "build TransformerConfig.base(...) and pass it to the loss"
            )
        if row not in TABLE3_VARIANTS:
            raise ValueError(
                f"unknown Table 3 row {row!r}, expected one of {sorted(TABLE3_VARIANTS)}"
            )
        settings = TABLE3_VARIANTS[row] | overrides
        return cls.base(src_vocab_size, tgt_vocab_size, **settings)


class Transformer(nn.Module):
    """Embeddings, an encoder stack, a decoder stack and the pre-softmax linear ``generator``.

    Every parameter with more than one dimension is initialised Xavier-uniform, as in the
    Annotated Transformer. That includes the embedding tables (and so, when tied, the generator).

    Args:
        config: all the sizes and switches.
    """

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = config
        src_tokens = Embeddings(c.src_vocab_size, c.d_model)
        if c.share_embeddings:
            tgt_tokens = src_tokens
        else:
            tgt_tokens = Embeddings(c.tgt_vocab_size, c.d_model)
        self.src_embed = nn.Sequential(src_tokens, *self._positions(c))
        self.tgt_embed = nn.Sequential(tgt_tokens, *self._positions(c))
        args = (c.d_model, c.h, c.d_ff, c.dropout, c.N, c.norm_first)
        self.encoder = Encoder(*args, d_k=c.d_k, d_v=c.d_v)
        self.decoder = Decoder(*args, d_k=c.d_k, d_v=c.d_v)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.tie_output:
            self.generator.weight = tgt_tokens.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        set_fused(self, c.fused_attention)

    @staticmethod
    def _positions(c: TransformerConfig) -> list[nn.Module]:
        if c.learned_positions:
            return [
                LearnedPositionalEmbedding(c.max_len, c.d_model),
                nn.Dropout(c.dropout),
            ]
        return [PositionalEncoding(c.d_model, c.dropout, c.max_len)]

    @staticmethod
    def _check_tokens(tokens: torch.Tensor, name: str) -> None:
        check_token_dtype(tokens, name)
        if tokens.dim() != 2:
            raise ValueError(
                f"{name}: expected shape (B, L) of token ids, got {tuple(tokens.shape)}"
            )

    @staticmethod
    def check_mask(
        mask: torch.Tensor, name: str, full: tuple[int, int, int, int]
    ) -> None:
        """Accept a boolean 4-D mask whose every axis is the full size or 1, except the last (keys)."""
        is_tensor = isinstance(mask, torch.Tensor)
        if not is_tensor or mask.dtype != torch.bool:
            kind = mask.dtype if is_tensor else type(mask).__name__
            raise TypeError(
                f"{name}: expected a boolean mask (True = may attend), got {kind}"
            )
        shape = tuple(mask.shape)
        fits = len(shape) == 4 and shape[3] == full[3]
        if fits:  # every other axis is the full size or 1
            pairs = zip(shape[:3], full[:3], strict=True)
            fits = all(s in (1, f) for s, f in pairs)
        if not fits:
            raise ValueError(
                f"{name}: expected a 4-D mask broadcastable to (B, 1, L_q, L_k) = {full}, got {shape}"
            )

    def encode(
        self, src: torch.Tensor, src_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Run the encoder.

        Args:
            src: ``(B, S)`` source token ids.
            src_mask: boolean ``(B, 1, 1, S)``; ``None`` builds ``padding_mask(src, config.pad_id)``.

        Returns:
            memory ``(B, S, d_model)``.
        """
        self._check_tokens(src, "src")
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        B, S = src.shape
        self.check_mask(src_mask, "src_mask", (B, 1, S, S))
        return self.encoder(self.src_embed(src), src_mask)  # (B, S, d_model)

    def decode(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the decoder over the (shifted-right) target, attending to the encoder output.

        Args:
            memory: ``(B, S, d_model)`` from ``encode``.
            src_mask: boolean ``(B, 1, 1, S)``; ``None`` lets every source position be attended.
            tgt: ``(B, T)`` decoder input ids.
            tgt_mask: boolean ``(B, 1, T, T)``; ``None`` builds ``decoder_mask(tgt, config.pad_id)``.

        Returns:
            ``(B, T, d_model)``.
        """
        self.check_decoder_inputs(memory, src_mask, tgt)
        if tgt_mask is None:
            tgt_mask = decoder_mask(tgt, self.config.pad_id)
        B, T = tgt.shape
        self.check_mask(tgt_mask, "tgt_mask", (B, 1, T, T))
        x = self.tgt_embed(tgt)  # (B, T, d_model)
        return self.decoder(x, memory, src_mask, tgt_mask)  # (B, T, d_model)

    def check_decoder_inputs(
        self,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None,
        tgt: torch.Tensor,
        rows_per_source: bool = False,
    ) -> None:
        """Raise unless ``memory`` is ``(B, S, d_model)`` floats, ``tgt`` ids and ``src_mask`` fits.

        ``rows_per_source``: ``memory`` holds one row per source, ``tgt`` one per beam (beam search).
        """
        is_tensor = isinstance(memory, torch.Tensor)
        if not is_tensor or not memory.dtype.is_floating_point:
            kind = memory.dtype if is_tensor else type(memory).__name__
            raise TypeError(
                "memory: expected a floating-point tensor from encode(), "
                f"got {kind}"
            )
        if memory.dim() != 3 or memory.size(-1) != self.config.d_model:
            raise ValueError(
                f"memory: expected shape (B, S, {self.config.d_model}), "
                f"got {tuple(memory.shape)}"
            )
        self._check_tokens(tgt, "tgt")
        if memory.size(0) != tgt.size(0) and not rows_per_source:
            raise ValueError(
                f"memory has batch size {memory.size(0)} "
                f"but tgt has batch size {tgt.size(0)}"
            )
        if src_mask is not None:
            shape = (memory.size(0), 1, tgt.size(1), memory.size(1))
            self.check_mask(src_mask, "src_mask", shape)

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Encode ``src``, decode ``tgt`` and project to the vocabulary.

        Args:
            src: ``(B, S)`` source ids.
            tgt: ``(B, T)`` decoder input ids (the target shifted right).
            src_mask: boolean ``(B, 1, 1, S)``; ``None`` builds it from ``config.pad_id``.
            tgt_mask: boolean ``(B, 1, T, T)``; ``None`` builds it from ``config.pad_id``.

        Returns:
            logits ``(B, T, V)`` (apply ``log_softmax`` for log-probabilities).
        """
        if src_mask is None:
            self._check_tokens(src, "src")
            src_mask = padding_mask(src, self.config.pad_id)
        memory = self.encode(src, src_mask)  # (B, S, d_model)
        x = self.decode(memory, src_mask, tgt, tgt_mask)  # (B, T, d_model)
        return self.generator(x)  # (B, T, V)

    @property
    def head_mask_shape(self) -> tuple[int, int, int]:
        """``(3, N, h)``: the shape of a head mask (``set_head_mask``)."""
        return len(HEAD_KINDS), self.config.N, self.config.h

    def attention_grid(self) -> list[list[MultiHeadAttention]]:
        """The attention modules as a head mask lays them out: ``[kind][layer]``, kinds ``HEAD_KINDS``."""
        enc, dec = self.encoder.layers, self.decoder.layers
        return [
            [layer.self_attn for layer in enc],
            [layer.self_attn for layer in dec],
            [layer.cross_attn for layer in dec],
        ]

    def attention_maps(self) -> dict[str, list[torch.Tensor]]:
        """The attention weights of the last forward pass (explicit path), one tensor per layer.

        Returns:
            ``{"encoder": [(B, h, S, S)] * N, "decoder_self": [(B, h, T, T)] * N, "cross": [(B, h, T, S)] * N}``.
        """
        enc, dec = self.encoder.layers, self.decoder.layers
        maps = {
            "encoder": [layer.self_attn.attn for layer in enc],
            "decoder_self": [layer.self_attn.attn for layer in dec],
            "cross": [layer.cross_attn.attn for layer in dec],
        }
        if any(a is None for layers in maps.values() for a in layers):
            raise RuntimeError(
                "no attention weights stored: run forward on the explicit path first "
                "(fused attention keeps none; use `with set_fused(model, False): model(src, tgt)`)"
            )
        return maps


class set_head_mask:  # lower case like set_fused, which it follows
    """Switch attention heads off: each head's output times its 0 or 1, before W^O.

    ``mask`` is a float tensor ``(3, N, h)``: kind (``HEAD_KINDS``: encoder self-attention,
    decoder self-attention, cross-attention) × layer × head; ``None`` switches every head on. It
    is set on the attention modules themselves, so every decoder and engine path that runs them
    honours it (the key/value cache, fast twins, an int8 copy made inside the block). A mask that
    requires grad keeps its graph (Michel et al.'s importance is its gradient). Takes effect at
    once; used as a context manager, it restores each module's previous mask on exit::

        with set_head_mask(model, mask):
            lines = translate(model, tokenizer, sentences)

    Args:
        model: a ``Transformer``.
        mask: float ``(3, N, h)`` holding 0 and 1, or ``None``.
    """

    def __init__(self, model: Transformer, mask: torch.Tensor | None):
        grid = model.attention_grid()  # (3, N) modules
        if mask is not None:
            check_head_mask(mask, model.head_mask_shape)
        self.previous = [(m, m.head_mask) for row in grid for m in row]
        for k, row in enumerate(grid):
            for n, m in enumerate(row):
                m.head_mask = None if mask is None else mask[k, n]  # (h,)

    def __enter__(self) -> set_head_mask:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for m, was in self.previous:
            m.head_mask = was


def count_parameters(model: nn.Module) -> int:
    """Number of parameters in ``model``, counting a shared (tied) parameter once."""
    return sum(p.numel() for p in model.parameters())
