"""Exercises of chapters 1-4: why attention, embeddings, positions, masks.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _bank_inputs() -> dict[str, Truth]:
    """1.1: which inputs have a path to the output at "bank", in each kind of layer."""
    from torch import nn

    from ...attention import MultiHeadAttention

    words = "I arrived at the bank after crossing the river".split()
    bank, d = words.index("bank"), 16
    # a seed of its own: the reader's random numbers are left alone
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        x = torch.randn(1, len(words), d, requires_grad=True)  # (1, n, d)
        rnn = nn.RNN(d, d, batch_first=True)
        attention = MultiHeadAttention(d, 4, dropout=0.0)
    outputs = {  # each (1, n, d)
        "left_to_right": rnn(x)[0],
        "right_to_left": rnn(x.flip(1))[0].flip(1),
        "attention": attention(x, x, x),
    }
    hints = {
        "left_to_right": "reading left to right, the state at a word is "
        "computed before the reader reaches the words after it",
        "right_to_left": "reading right to left, the reader starts at "
        "'river' and reaches 'bank' on its way to 'I'",
        "attention": "one attention layer compares the query at 'bank' "
        "with the key of every position",
    }
    truths = {}
    for name, out in outputs.items():
        (grad,) = torch.autograd.grad(out[0, bank].sum(), x)  # (1, n, d)
        # the inputs with a path to it: a gradient that is not zero
        moved = grad[0].norm(dim=-1).nonzero().flatten()
        truths[name] = Truth(frozenset(moved.tolist()), hints[name])
    return truths


def _embedding_sizes() -> dict[str, Truth]:
    """2.1: one ``Embeddings(1000, 64)``: its output, its parameters, the norm of a row."""
    from ...embeddings import Embeddings
    from ...model import count_parameters

    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(0)
        layer = Embeddings(1000, 64)
        torch.nn.init.normal_(layer.weight, std=64**-0.5)
        out = layer(torch.randint(1000, (3, 7)))  # (B, L, d_model)
        rows = layer(torch.arange(1000)[None])  # (1, V, d_model): every id
    return {
        "shape": Truth(
            tuple(out.shape), "one d_model-wide vector per token id"
        ),
        "parameters": Truth(
            count_parameters(layer),
            "one table with a row of d_model numbers per token id, and "
            "nothing else",
        ),
        "norm": Truth(
            rows.norm(dim=-1).mean().item(),
            "before the scale, 64 entries of variance 1/64 have a squared "
            "norm near 64 x 1/64; Embeddings then multiplies by "
            "sqrt(d_model)",
            rel=0.05,
        ),
    }


def _encoding_row() -> dict[str, Truth]:
    """3.1: the row of position 2 in ``sinusoidal_encoding(3, 4)``."""
    from ...embeddings import sinusoidal_encoding

    row = sinusoidal_encoding(3, 4)[2].tolist()  # (d_model,)
    hints = (
        "pair 0 turns by 1 radian per position: the sine of its angle",
        "the cosine of pair 0's angle, in radians",
        "pair 1 turns by 1/100 radian per position: the sine of its angle",
        "the cosine of pair 1's angle, in radians",
    )
    return {
        f"col_{i}": Truth(value, hint, rel=0.01)
        for i, (value, hint) in enumerate(zip(row, hints, strict=True))
    }


def _encoder_mask() -> dict[str, Truth]:
    """4.1: the encoder's padding mask, the scores of 8 heads, and how one meets the other."""
    from ...attention import scaled_dot_product_attention
    from ...masks import padding_mask

    tokens = torch.ones(3, 9, dtype=torch.long)  # (B, S)
    tokens[0, 6:] = 0  # the first sentence ends in three <pad>
    mask = padding_mask(tokens, pad_id=0)
    q = torch.zeros(3, 8, 9, 64)  # (B, h, S, d_k)
    _, scores = scaled_dot_product_attention(q, q, q, mask=mask)
    axes = frozenset(
        axis
        for axis, (m, s) in enumerate(
            zip(mask.shape, scores.shape, strict=True)
        )
        if m == 1 < s
    )
    return {
        "mask": Truth(
            tuple(mask.shape),
            "the mask has the scores' four axes, of size 1 where every "
            "entry along it would be the same",
        ),
        "scores": Truth(
            tuple(scores.shape), "one S x S map per sentence and head"
        ),
        "axes": Truth(
            axes,
            "the axes (counting from 0) where the mask has size 1 and the "
            "scores do not",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "1.1.2": _bank_inputs,
    "2.1.1": _embedding_sizes,
    "3.1.1": _encoding_row,
    "4.1.2": _encoder_mask,
}
