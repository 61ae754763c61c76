"""The recurrent translator the paper replaced: a GRU encoder-decoder with additive attention.

Bahdanau, Cho and Bengio (2014), "Neural Machine Translation by Jointly Learning to Align and
Translate" (RNNsearch). A bidirectional GRU reads the source; a GRU decoder writes the target one
token at a time, and before each token it attends over every source state with additive (tanh)
attention. The Transformer's section 1 names this family as the one it set out to replace.

    B  batch        S  source length        T  target length        V  vocabulary size
    d_model   embedding width (and the readout's, so the generator can share the table)
    d_hidden  GRU state width (each encoder direction, and the decoder)
    d_attn    width of the additive attention's hidden layer

``RNN`` speaks the ``Transformer``'s interface (``encode``, ``decode``, ``forward``, ``generator``,
``config``), so training, checkpoints, ``evaluate`` and the searches take it unchanged. Its memory
is ``(B, S, 2·d_hidden)``, not ``(B, S, d_model)``. It keeps no key/value cache
(``caches_keys_values = False``): a search reruns the decoder over the whole prefix at each step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ..checks import check_positive, check_token_dtype
from ..masks import padding_mask
from ..model import Transformer, TransformerConfig

__all__ = [
    "RNNConfig",
    "AdditiveAttention",
    "RNNEncoder",
    "RNNDecoder",
    "RNN",
]


@dataclass(frozen=True)
class RNNConfig(TransformerConfig):
    """The recurrent baseline's sizes, in the ``TransformerConfig`` a training run holds.

    It is a ``TransformerConfig`` so that a run's ``TrainConfig`` takes it as it is: the shared
    fields (vocabularies, ``d_model``, ``dropout``, ``max_len``, ``pad_id``, ``share_embeddings``,
    ``tie_output``) mean the same; ``d_ff``, ``h``, ``d_k``, ``d_v``, ``norm_first`` and
    ``learned_positions`` have no use here. ``N`` must be 1 (one GRU layer per stack, as in
    RNNsearch), ``fused_attention`` False (there is no scaled dot product to fuse).

    Args:
        d_hidden: GRU state width (RNNsearch: 1000).
        d_attn: the additive attention's hidden width (RNNsearch: 1000).
        kind: ``"rnn"``; a run's ``config.json`` reads back as an ``RNNConfig`` by it.
    """

    N: int = 1
    h: int = 1
    d_hidden: int = 512
    d_attn: int = 512
    kind: str = "rnn"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(d_hidden=self.d_hidden, d_attn=self.d_attn)
        if self.N != 1:
            raise ValueError(
                f"N: the recurrent baseline has one GRU layer per stack, got N={self.N}"
            )
        if self.fused_attention:
            raise ValueError(
                "fused_attention: the recurrent baseline has no scaled "
                "dot-product attention to fuse; leave it False"
            )
        if self.kind != "rnn":
            raise ValueError(f"kind: expected 'rnn', got {self.kind!r}")


class AdditiveAttention(nn.Module):
    """score(s, h_j) = v · tanh(W s + U h_j), softmax over the source (Bahdanau et al., eq. 6)."""

    def __init__(self, d_hidden: int, d_attn: int):
        super().__init__()
        self.W = nn.Linear(d_hidden, d_attn, bias=False)  # the decoder state
        self.U = nn.Linear(2 * d_hidden, d_attn)  # each source state
        self.v = nn.Linear(d_attn, 1, bias=False)

    def forward(self, s, keys, memory, mask):
        """Weights ``(B, S)`` and context ``(B, 2·d_hidden)``.

        Args:
            s: ``(B, d_hidden)``, the decoder's previous state.
            keys: ``(B, S, d_attn)``, ``U(memory)``, computed once a sentence.
            memory: ``(B, S, 2·d_hidden)``, the encoder's states.
            mask: ``(B, S)`` boolean, True where a source token stands.
        """
        q = self.W(s)[:, None, :]  # (B, 1, d_attn)
        scores = self.v(torch.tanh(q + keys)).squeeze(-1)  # (B, S)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)  # (B, S)
        # (B, 2·d_hidden): the states, weighted by how well each fits s
        context = (weights[:, :, None] * memory).sum(dim=1)
        return weights, context


class RNNEncoder(nn.Module):
    """A bidirectional GRU over the source embeddings: one state per source token."""

    def __init__(self, embed: nn.Embedding, c: RNNConfig):
        super().__init__()
        self.embed, self.dropout = embed, nn.Dropout(c.dropout)
        self.gru = nn.GRU(
            c.d_model, c.d_hidden, batch_first=True, bidirectional=True
        )

    def forward(self, src: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``(B, S)`` ids and ``(B, S)`` mask -> memory ``(B, S, 2·d_hidden)``, zero at padding.

        The GRU is packed, so the backward direction starts at each sentence's own last token, and
        a sentence's states do not depend on how much padding its batch adds.
        """
        x = self.dropout(self.embed(src))  # (B, S, d_model)
        lengths = mask.sum(dim=1).clamp(min=1).cpu()  # (B,)
        packed = pack_padded_sequence(
            x, lengths, batch_first=True, enforce_sorted=False
        )
        out, _ = self.gru(packed)
        S = src.size(1)
        memory, _ = pad_packed_sequence(
            out, batch_first=True, total_length=S
        )
        return memory  # (B, S, 2·d_hidden): [forward; backward]


class RNNDecoder(nn.Module):
    """A GRU that writes one token a step, attending over the source before each."""

    def __init__(self, embed: nn.Embedding, c: RNNConfig):
        super().__init__()
        H = c.d_hidden
        self.embed, self.dropout = embed, nn.Dropout(c.dropout)
        self.init = nn.Linear(H, H)  # s_0 from the backward state at token 1
        self.attention = AdditiveAttention(H, c.d_attn)
        self.cell = nn.GRUCell(c.d_model + 2 * H, H)
        self.readout = nn.Linear(H + 2 * H + c.d_model, c.d_model)

    def forward(self, tgt, memory, mask):
        """``(B, T)`` ids, memory ``(B, S, 2·d_hidden)``, mask ``(B, S)`` -> ``(B, T, d_model)``."""
        H = self.init.in_features
        # s_0 = tanh(W_init ←h_1): the backward GRU's state after reading it all
        s = torch.tanh(self.init(memory[:, 0, H:]))  # (B, d_hidden)
        keys = self.attention.U(memory)  # (B, S, d_attn), once
        y = self.dropout(self.embed(tgt))  # (B, T, d_model)
        outputs = []
        # the sequential chain: step i needs the state of step i - 1
        for i in range(tgt.size(1)):
            _, c = self.attention(s, keys, memory, mask)  # (B, 2·d_hidden)
            x = torch.cat([y[:, i], c], dim=-1)  # (B, d_model + 2·d_hidden)
            s = self.cell(x, s)  # (B, d_hidden)
            out = self.readout(torch.cat([s, c, y[:, i]], dim=-1))
            outputs.append(out)  # (B, d_model)
        return self.dropout(torch.stack(outputs, dim=1))  # (B, T, d_model)


class RNN(nn.Module):
    """RNNsearch: embeddings, ``RNNEncoder``, ``RNNDecoder`` and the linear ``generator``.

    Args:
        config: an ``RNNConfig``.
    """

    caches_keys_values = False  # the searches rerun the whole prefix

    def __init__(self, config: RNNConfig):
        super().__init__()
        if not isinstance(config, RNNConfig):
            raise TypeError(
                f"config: expected an RNNConfig, got {type(config).__name__}"
            )
        self.config = c = config
        src_embed = nn.Embedding(c.src_vocab_size, c.d_model)
        tgt_embed = src_embed
        if not c.share_embeddings:
            tgt_embed = nn.Embedding(c.tgt_vocab_size, c.d_model)
        self.encoder = RNNEncoder(src_embed, c)
        self.decoder = RNNDecoder(tgt_embed, c)
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        for p in [src_embed.weight, tgt_embed.weight, self.generator.weight]:
            nn.init.xavier_uniform_(p)
        if c.tie_output:
            self.generator.weight = tgt_embed.weight

    def _source_mask(self, src, src_mask) -> torch.Tensor:
        """The ``(B, S)`` mask of source tokens from ``src_mask`` ``(B, 1, 1, S)`` or ``src``."""
        Transformer._check_tokens(src, "src")
        if src_mask is None:
            src_mask = padding_mask(src, self.config.pad_id)
        B, S = src.shape
        Transformer.check_mask(src_mask, "src_mask", (B, 1, 1, S))
        return src_mask.expand(B, 1, 1, S)[:, 0, 0]  # (B, S)

    def encode(self, src, src_mask=None) -> torch.Tensor:
        """Run the encoder: ``(B, S)`` ids -> memory ``(B, S, 2·d_hidden)``.

        Args:
            src: ``(B, S)`` source ids.
            src_mask: boolean ``(B, 1, 1, S)``; ``None`` builds it from ``config.pad_id``.
        """
        return self.encoder(src, self._source_mask(src, src_mask))

    def decode(self, memory, src_mask, tgt, tgt_mask=None) -> torch.Tensor:
        """Run the decoder over the (shifted-right) target: ``(B, T, d_model)``.

        Args:
            memory: ``(B, S, 2·d_hidden)`` from ``encode``.
            src_mask: boolean ``(B, 1, 1, S)``; ``None``: every source position is a token.
            tgt: ``(B, T)`` decoder input ids.
            tgt_mask: checked and not needed: a step sees only the steps before it.
        """
        self._check_memory(memory)
        check_token_dtype(tgt, "tgt")
        B, S, _ = memory.shape
        if tgt.dim() != 2 or tgt.size(0) != B:
            raise ValueError(
                f"tgt: expected shape ({B}, T) of token ids for a memory of "
                f"batch {B}, got {tuple(tgt.shape)}"
            )
        if tgt_mask is not None:
            T = tgt.size(1)
            Transformer.check_mask(tgt_mask, "tgt_mask", (B, 1, T, T))
        if src_mask is None:
            mask = memory.new_ones(B, S, dtype=torch.bool)
        else:
            Transformer.check_mask(src_mask, "src_mask", (B, 1, 1, S))
            mask = src_mask.expand(B, 1, 1, S)[:, 0, 0]  # (B, S)
        return self.decoder(tgt, memory, mask)

    def _check_memory(self, memory: object) -> None:
        width = 2 * self.config.d_hidden
        if not isinstance(memory, torch.Tensor) or not (
            memory.dtype.is_floating_point
        ):
            kind = getattr(memory, "dtype", type(memory).__name__)
            raise TypeError(
                f"memory: expected a floating-point tensor from encode(), got {kind}"
            )
        if memory.dim() != 3 or memory.size(-1) != width:
            raise ValueError(
                f"memory: expected shape (B, S, {width}) = (B, S, 2·d_hidden), "
                f"got {tuple(memory.shape)}"
            )

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        """Encode ``src``, decode ``tgt`` and project: logits ``(B, T, V)``."""
        if src_mask is None:
            Transformer._check_tokens(src, "src")
            src_mask = padding_mask(src, self.config.pad_id)
        memory = self.encode(src, src_mask)  # (B, S, 2·d_hidden)
        return self.generator(self.decode(memory, src_mask, tgt, tgt_mask))
