"""Exercises of chapters 5-7: attention, add & norm, the full model.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .truth import Truth


def _forgotten_scale() -> dict[str, Truth]:
    """5.1: the temperature at which the package's weights are softmax(q k^T), d_k = 64."""
    from ...attention import scaled_dot_product_attention

    d_k = 64
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 5, d_k, generator=g, dtype=torch.float64)
    _, weights = scaled_dot_product_attention(q, k, k)  # (1, 5, 5), T = 1
    scores = q @ k.transpose(-2, -1)  # (1, 5, 5), unscaled
    # log w_0 - log w_1 = (s_0 - s_1) / divisor: the package's own divisor
    divisor = (scores[..., 0] - scores[..., 1]) / (
        weights[..., 0].log() - weights[..., 1].log()
    )
    return {
        "temperature": Truth(
            1 / divisor.mean().item(),
            "the package divides the scores by sqrt(d_k) times the "
            "temperature; the unscaled softmax divides them by 1",
            rel=0.01,
        )
    }


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


def _narrow_ffn() -> dict[str, Truth]:
    """6.1: the parameters of a feed-forward network with d_ff = 1024, and its share of a layer."""
    from ...layers import EncoderLayer, PositionwiseFeedForward
    from ...model import count_parameters

    ffn = count_parameters(PositionwiseFeedForward(512, 1024))
    layer = count_parameters(EncoderLayer(512, h=8, d_ff=1024))
    return {
        "parameters": Truth(
            ffn,
            "two weight matrices, 512 x 1024 and 1024 x 512, and a bias "
            "after each",
        ),
        "share": Truth(
            ffn / layer,
            "the attention sublayer has four 512 x 512 projections with "
            "biases, each LayerNorm a gain and a bias of 512",
            rel=0.01,
        ),
    }


def _trained_layer() -> dict[str, Truth]:
    """6.1: Bauarbeiter in the published model's encoder layer 1, from the record."""
    from ..stepthrough import load_stepthrough

    record = load_stepthrough()  # the published model on test line 209
    layer = record["encoder"]["layers"][0]
    piece = 1  # Bauarbeiter
    x = layer["input"]["first"][piece][0]  # dimension 0
    a = layer["attention"]["output"]["first"][piece][0]
    active = layer["feed_forward"]["active"][piece]
    return {
        "added": Truth(
            x + a,
            "the residual sum adds two vectors dimension by dimension: "
            "the layer's input and the attention's output, row 1, column 0",
            rel=0.02,
        ),
        "share": Truth(
            active / record["sizes"]["d_ff"],
            "count the units above zero (the record's feed_forward "
            "'active') and divide by d_ff",
            rel=0.01,
        ),
    }


def _nothing_sublayer() -> dict[str, Truth]:
    """6.3: what post-norm and pre-norm return around a sublayer that returns zeros."""
    from ...layers import LayerNorm, SublayerConnection

    g = torch.Generator().manual_seed(0)
    z = LayerNorm(64, eps=0.0)(torch.randn(2, 7, 64, generator=g))
    x = 1 + 3 * z.detach()  # (2, 7, 64): mean 1, std 3 at every position
    nothing = torch.zeros_like
    with torch.no_grad():
        post = SublayerConnection(64, dropout=0.0, norm_first=False)
        pre = SublayerConnection(64, dropout=0.0, norm_first=True)
        post_std, pre_std = post(x, nothing).std(), pre(x, nothing).std()
    return {
        "post": Truth(
            post_std.item(),
            "post-norm normalises x + 0; a fresh LayerNorm has gain 1 "
            "and bias 0",
            rel=0.02,
        ),
        "pre": Truth(
            pre_std.item(),
            "pre-norm adds the sublayer's output to x itself",
            rel=0.02,
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


def _tie_saves() -> dict[str, Truth]:
    """7.2: what ``tie_output=True`` saves in the base model with 37,000 target tokens."""
    from ...model import Transformer, TransformerConfig, count_parameters

    with torch.device("meta"):  # every shape, no memory
        tied = Transformer(TransformerConfig.base(37000))
        untied = Transformer(TransformerConfig.base(37000, tie_output=False))
    return {
        "saved": Truth(
            count_parameters(untied) - count_parameters(tied),
            "untied, the generator has a weight matrix of its own, one row "
            "of d_model per target token; its bias stays either way",
        )
    }


def _translation_probability() -> dict[str, Truth]:
    """7.3: the published model's probability of its own translation, from the record."""
    from ..stepthrough import load_stepthrough

    record = load_stepthrough()  # the published model on test line 209
    written = record["tokens"]["decoder_out"]  # (T,)
    top = record["next"]  # the five likeliest pieces at each position
    p = [
        row_p[row.index(piece)]
        for piece, row, row_p in zip(
            written, top["pieces"], top["p"], strict=True
        )
    ]  # (T,): the probability of the piece it wrote
    return {
        "probability": Truth(
            math.prod(p),
            "the chain rule: multiply, over all positions, the probability "
            "of the piece written there given the pieces before it",
            rel=0.01,
        ),
        "unsure": Truth(
            sum(v < 0.7 for v in p),
            "count the positions whose written piece got less than 0.7",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "5.1.1": _forgotten_scale,
    "5.2.1": _score_spread,
    "5.3.1": _mha_shapes,
    "5.4.2": _head_8,
    "6.1.1": _narrow_ffn,
    "6.1.2": _trained_layer,
    "6.2.1": _flat_layer_norm,
    "6.3.1": _nothing_sublayer,
    "7.1.1": _model_shapes,
    "7.2.1": _tie_saves,
    "7.3.1": _translation_probability,
}
