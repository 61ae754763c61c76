"""Exercises of chapters 5-7: attention, add & norm, the full model.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .truth import Truth


def _score_spread() -> dict[str, Truth]:
    """5.2: the spread of q.k, before and after the scale."""

    d_k = 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 100_000, d_k, generator=g)
    scores = (q * k).sum(
        -1
    )  # q.k of unit-variance entries: a sum of d_k products
    return {
        "std_before": Truth(
            scores.std().item(),
            "a sum of d_k independent products of variance 1 has variance "
            "d_k",
            rel=0.05,
        ),
        "std_after": Truth(
            (scores / math.sqrt(d_k)).std().item(),
            "dividing by sqrt(d_k) divides the standard deviation by it",
            rel=0.05,
        ),
    }


def _mha_shapes() -> dict[str, Truth]:
    """5.3: the shapes and parameters of one multi-head attention layer."""

    from ...attention import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 4, dropout=0.0)
    x = torch.randn(2, 7, 64)
    layer(x, x, x)
    queries = layer.w_q(x).view(2, 7, 4, layer.d_k).transpose(1, 2)
    return {
        "d_k": Truth(layer.d_k, "each head gets an equal share of d_model"),
        "queries": Truth(
            tuple(queries.shape),
            "after view and transpose: (B, h, L, d_k)",
        ),
        "attn": Truth(
            tuple(layer.attn.shape), "one L x L map per sentence and head"
        ),
        "parameters": Truth(
            sum(p.numel() for p in layer.parameters()),
            "four d_model x d_model projections, each with a bias; the "
            "number of heads does not change it",
        ),
    }


def _head_8() -> dict[str, Truth]:
    """5.4: layer 1's head 8 of the published model, from the recorded q and k."""
    from ..stepthrough import load_stepthrough

    record = load_stepthrough()  # the published model on test line 209
    head = record["encoder"]["layers"][0]["attention"]
    q, k = torch.tensor(head["q"][7]), torch.tensor(head["k"][7])  # (S, d_k)
    scores = q @ k.T  # (S, S)
    weights = (scores / math.sqrt(record["sizes"]["d_k"])).softmax(-1)
    return {  # Bauarbeiter is piece 1, Zwei piece 0
        "score": Truth(
            scores[1, 0].item(),
            "the dot product of Bauarbeiter's query (row 1 of q) and "
            "Zwei's key (row 0 of k), before the scale",
            rel=0.02,
        ),
        "weight": Truth(
            weights[1, 0].item(),
            "divide Bauarbeiter's scores with every key by sqrt(d_k), then "
            "take the softmax of that row",
            rel=0.01,
        ),
    }


def _flat_layer_norm() -> dict[str, Truth]:
    """6.2: a fresh ``LayerNorm(512)`` on a vector of 512 threes, with and without eps."""
    from ...layers import LayerNorm

    flat = torch.full((512,), 3.0)  # (d_model,)
    with torch.no_grad():
        out, bare = LayerNorm(512)(flat), LayerNorm(512, eps=0.0)(flat)
    return {
        "nonzero": Truth(
            int(out.count_nonzero()),
            "what is left of a constant vector once its mean is subtracted? "
            "A fresh LayerNorm has gamma = 1 and beta = 0",
        ),
        "nans": Truth(
            int(bare.isnan().sum()),
            "every entry divides x minus its mean by sqrt(variance + eps)",
        ),
    }


def _model_shapes() -> dict[str, Truth]:
    """7.1: the memory, the cross-attention weights and the logits of a narrower model."""
    from ...model import Transformer, TransformerConfig

    B, S, T, V = 32, 10, 15, 1000
    config = TransformerConfig(
        V, V, d_model=256, d_ff=1024, h=8, N=1, dropout=0.0
    )
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, V, (B, S), generator=g)  # (B, S), no padding
    tgt = torch.randint(1, V, (B, T), generator=g)  # (B, T)
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        model = Transformer(config).eval()
        memory, logits = model.encode(src), model(src, tgt)
    cross = model.decoder.layers[0].cross_attn.attn  # (B, h, T, S)
    return {
        "memory": Truth(
            tuple(memory.shape),
            "the encoder keeps one d_model-wide vector per source token",
        ),
        "cross": Truth(
            tuple(cross.shape),
            "one row per target position and one column per source token, "
            "in every head",
        ),
        "logits": Truth(
            tuple(logits.shape),
            "one score per target-vocabulary id at every target position",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "5.2.1": _score_spread,
    "5.3.1": _mha_shapes,
    "5.4.2": _head_8,
    "6.2.1": _flat_layer_norm,
    "7.1.1": _model_shapes,
}
