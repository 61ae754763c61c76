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


def _rnn_against_attention() -> dict[str, Truth]:
    """1.2.1: multiply-adds of ``nn.RNN`` and of attention, d = 128, at n = 32 and 512."""
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    from ...attention import scaled_dot_product_attention

    d = 128
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        rnn = nn.RNN(d, d, batch_first=True)
        inputs = {n: torch.randn(1, n, d) for n in (32, 512)}  # (1, n, d)
    madds = {}
    with torch.no_grad():
        for n, x in inputs.items():
            with FlopCounterMode(display=False) as rnn_flops:
                rnn(x)
            with FlopCounterMode(display=False) as attn_flops:
                scaled_dot_product_attention(x, x, x)
            # 2 FLOPs per multiply-add
            madds[n] = (
                rnn_flops.get_total_flops() // 2,
                attn_flops.get_total_flops() // 2,
            )
    return {
        "rnn": Truth(
            madds[32][0],
            "each of the n steps multiplies two d-wide vectors (the input "
            "and the state) by a d x d matrix",
        ),
        "attention": Truth(
            madds[32][1],
            "n x n scores, each a dot product of length d, then n weighted "
            "sums of n vectors of length d",
        ),
        "ratio": Truth(
            madds[512][1] / madds[512][0],
            "divide the attention's count by the recurrent layer's: the "
            "factors 2, n and d that they share cancel",
            rel=0.01,
        ),
    }


def _projections_against_attention() -> dict[str, Truth]:
    """1.2.2: ``MultiHeadAttention(512, h=8)`` on 20 tokens: projections and attention, in multiply-adds."""
    from torch.utils.flop_counter import FlopCounterMode

    from ...attention import MultiHeadAttention, scaled_dot_product_attention

    n, d_model, h = 20, 512, 8
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(d_model, h, dropout=0.0)
        x = torch.randn(1, n, d_model)  # (B, n, d_model)
    heads = x.view(1, n, h, d_model // h).transpose(1, 2)  # (B, h, n, d_k)
    with torch.no_grad():
        with FlopCounterMode(display=False) as whole:
            layer(x, x, x)
        with FlopCounterMode(display=False) as core:
            scaled_dot_product_attention(heads, heads, heads)
    attention = core.get_total_flops() // 2  # 2 FLOPs per multiply-add
    return {
        "projections": Truth(
            whole.get_total_flops() // 2 - attention,
            "four d_model x d_model matrices (W^Q, W^K, W^V, W^O), each "
            "applied to the vector of every token",
        ),
        "attention": Truth(
            attention,
            "the heads together do what one head of width d_model would: "
            "n x n scores of length d_model, then n weighted sums",
        ),
    }


def _prefix_agreement() -> dict[str, Truth]:
    """1.3.1: which positions of one call agree with the calls on growing prefixes, with and without the mask."""
    from ...attention import MultiHeadAttention
    from ...masks import subsequent_mask

    T, d = 6, 16
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = MultiHeadAttention(d, 4, dropout=0.0)
        y = torch.randn(1, T, d)  # (B, T, d)
    with torch.no_grad():
        prefixes = torch.cat(
            [
                layer(y[:, : t + 1], y[:, : t + 1], y[:, : t + 1])[:, -1:]
                for t in range(T)
            ],
            dim=1,
        )  # (B, T, d): position t computed from its prefix alone
        calls = {
            "without_mask": layer(y, y, y),
            "with_mask": layer(y, y, y, mask=subsequent_mask(T)),
        }
    hints = {
        "without_mask": "in one call without the mask position t sees all "
        "T positions; on its prefix only positions 0..t",
        "with_mask": "the mask lets position t see positions 0..t, which "
        "is all that its prefix holds",
    }
    truths = {}
    for name, out in calls.items():
        gaps = (out - prefixes).abs().amax(dim=-1)[0]  # (T,)
        agree = (gaps < 1e-5).nonzero().flatten().tolist()
        truths[name] = Truth(frozenset(agree), hints[name])
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


def _scale_balance() -> dict[str, Truth]:
    """2.2.1: a scaled row's norm over the positional encoding's, by width and initialisation."""
    from ...embeddings import Embeddings, sinusoidal_encoding

    def ratio(d_model: int, std: float) -> float:
        """Mean norm of 1000 scaled rows drawn N(0, std^2), over PE's norm."""
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            layer = Embeddings(1000, d_model)
            torch.nn.init.normal_(layer.weight, std=std)
            rows = layer(torch.arange(1000)[None])[0]  # (V, d_model)
        pe_norm = sinusoidal_encoding(1, d_model)[0].norm()
        return (rows.norm(dim=-1).mean() / pe_norm).item()

    balanced = (
        "a row of d_model entries of standard deviation 1/sqrt(d_model) "
        "has norm about 1; the scale multiplies it by sqrt(d_model), and "
        "every row of the encoding has norm sqrt(d_model / 2)"
    )
    return {
        "balanced_64": Truth(ratio(64, 64**-0.5), balanced, rel=0.05),
        "balanced_2048": Truth(ratio(2048, 2048**-0.5), balanced, rel=0.05),
        "default_64": Truth(
            ratio(64, 1.0),
            "a row of d_model entries of standard deviation 1 has norm "
            "about sqrt(d_model), before the scale multiplies it again",
            rel=0.05,
        ),
    }


def _tying_savings() -> dict[str, Truth]:
    """2.3.2: the base model with a vocabulary of 8000: what sharing and tying save, and the tied total."""
    from ...model import Transformer, TransformerConfig, count_parameters

    def total(share: bool, tie: bool) -> int:
        """Parameters of the base model, built on the meta device: no memory, no random numbers."""
        config = TransformerConfig.base(
            8000, share_embeddings=share, tie_output=tie
        )
        with torch.device("meta"):
            return count_parameters(Transformer(config))

    untied = total(False, False)
    return {
        "shared": Truth(
            untied - total(True, False),
            "one table serves the source and the target: one V x d_model "
            "table fewer",
        ),
        "all_three": Truth(
            untied - total(True, True),
            "the output layer reuses the same table as well",
        ),
        "tied_total": Truth(
            total(True, True),
            "what the page counts 'elsewhere' does not depend on V, except "
            "the output layer's bias, one number per token",
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


def _distance_and_angle() -> dict[str, Truth]:
    """3.2.3: for d_model = 4: PE_5 . PE_7, their distance, and the turn of pair 1 over 50 positions."""
    from ...embeddings import sinusoidal_encoding

    pe = sinusoidal_encoding(51, 4).double()  # (positions, d_model)
    # pair 1 is (sin, cos) of one angle: columns 2 and 3
    turn = torch.atan2(pe[50, 2], pe[50, 3]) - torch.atan2(
        pe[0, 2], pe[0, 3]
    )
    return {
        "dot": Truth(
            (pe[5] @ pe[7]).item(),
            "each pair contributes the cosine of its frequency times the "
            "distance p - q",
            rel=0.01,
        ),
        "distance": Truth(
            (pe[5] - pe[7]).norm().item(),
            "every row has squared norm d_model / 2, and "
            "|a - b|^2 = |a|^2 + |b|^2 - 2 a.b",
            rel=0.01,
        ),
        "angle": Truth(
            turn.item(),
            "pair i turns by omega_i = 1 / 10000^(2i / d_model) radians per "
            "position",
            rel=0.01,
        ),
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


def _nan_and_shift() -> dict[str, Truth]:
    """4.2.2: a left-padded target's NaN rows under a -inf fill, and the pads of a shifted target."""
    from ...masks import decoder_mask, shift_right

    PAD, BOS, EOS, A, B, C = range(6)  # the page's ids
    left_padded = torch.tensor([[PAD, PAD, PAD, A, B]])  # (B, T)
    mask = decoder_mask(left_padded, pad_id=PAD)  # (B, 1, T, T)
    scores = torch.zeros(mask.shape)  # any scores give the same NaNs
    naive = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    nan_rows = torch.isnan(naive[0, 0]).any(dim=-1).nonzero().flatten()
    reads = shift_right(torch.tensor([[A, B, C, EOS, PAD, PAD]]), bos_id=BOS)
    return {
        "nan_rows": Truth(
            frozenset(nan_rows.tolist()),
            "under the look-ahead mask query t sees keys 0..t; its row is "
            "NaN when all of those are <pad>",
        ),
        "nans": Truth(
            int(torch.isnan(naive).sum()),
            "a row whose scores are all -inf gives 0 / 0 in every entry",
        ),
        "pads": Truth(
            frozenset((reads[0] == PAD).nonzero().flatten().tolist()),
            "shift_right puts <bos> in front and drops the last token, "
            "keeping the length",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "1.1.2": _bank_inputs,
    "1.2.1": _rnn_against_attention,
    "1.2.2": _projections_against_attention,
    "1.3.1": _prefix_agreement,
    "2.1.1": _embedding_sizes,
    "2.2.1": _scale_balance,
    "2.3.2": _tying_savings,
    "3.1.1": _encoding_row,
    "3.2.3": _distance_and_angle,
    "4.1.2": _encoder_mask,
    "4.2.2": _nan_and_shift,
}
