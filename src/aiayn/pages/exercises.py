"""Exercises that answer back: the reader writes an answer, ``check`` says "right" or what is wrong.

A chapter's exercise cell holds the reader's answer as keywords, ``...`` where nothing is written
yet::

    check("5.3.1", d_k=..., queries=..., attn=..., parameters=...)

``check`` compares each value with the truth, which it computes from the package itself (the
layer, the schedule, the sampler), never from a stored answer, and prints one line per value:
right, or what was expected of it (a type, a shape, a number within a tolerance) and a hint that
does not give the answer away. The folded solution runs the same check with the solution's values,
so that nbval proves every solution right on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["Truth", "EXERCISES", "check", "verdicts"]


@dataclass(frozen=True)
class Truth:
    """The right value of one part of an answer, and how to tell the reader what is wrong.

    Args:
        value: the right value: an int, a float, a tuple of ints (a shape) or a frozenset.
        hint: said when the answer is wrong, without giving the value away.
        rel: for a float, the relative tolerance of a right answer.
    """

    value: Any
    hint: str
    rel: float = 0.0


def _bank_inputs() -> dict[str, Truth]:
    """1.1: which inputs have a path to the output at "bank", in each kind of layer."""
    from torch import nn

    from ..attention import MultiHeadAttention

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
    from ..embeddings import Embeddings
    from ..model import count_parameters

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
    from ..embeddings import sinusoidal_encoding

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
    from ..attention import scaled_dot_product_attention
    from ..masks import padding_mask

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


def _mha_shapes() -> dict[str, Truth]:
    """5.3: the shapes and parameters of one multi-head attention layer."""

    from ..attention import MultiHeadAttention

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


def _head_8() -> dict[str, Truth]:
    """5.4: layer 1's head 8 of the published model, from the recorded q and k."""
    from .stepthrough import load_stepthrough

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
    from ..layers import LayerNorm

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
    from ..model import Transformer, TransformerConfig

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


def _copy_tokens() -> dict[str, Truth]:
    """8.2: what one batch of the copy task holds."""

    from ..training.batches import copy_task_batches

    batch = copy_task_batches(1, 96, 6, 12, seed=0)[0]
    return {
        "tgt_in": Truth(
            tuple(batch.tgt_in.shape),
            "the decoder reads <bos> and the six letters, one row per sentence",
        ),
        "tokens": Truth(
            int(batch.n_tokens),
            "the loss counts every target piece the decoder must write: the "
            "six letters and <eos>, in every sentence",
        ),
    }


def _top_p() -> dict[str, Truth]:
    """8.4: which pieces does top-p = 0.7 keep?"""

    from ..decoding.search import sampling_probs

    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = sampling_probs(probs.log(), 1.0, None, 0.7)[0]
    return {
        "kept": Truth(
            frozenset(int(i) for i in kept.nonzero().flatten()),
            "top-p keeps the most probable pieces until their probabilities "
            "add up to p",
        ),
        "first": Truth(
            kept[0].item(),
            "the kept probabilities are divided by their sum",
            rel=1e-6,
        ),
    }


def _clipped_precisions() -> dict[str, Truth]:
    """9.1: p1 and p2 of "the the cat" against "the cat sat on the mat"."""
    from ..bleu import corpus_bleu

    r = corpus_bleu(["the the cat"], ["the cat sat on the mat"])
    return {
        "p1": Truth(
            r.counts[0] / r.totals[0],
            "count each hypothesis word at most as often as the reference "
            "has it, and divide by the hypothesis's number of words",
            rel=1e-6,
        ),
        "p2": Truth(
            r.counts[1] / r.totals[1],
            "the same with the pairs of neighbouring words: how many of "
            "the hypothesis's pairs does the reference have?",
            rel=1e-6,
        ),
    }


def _smoothing_floor() -> dict[str, Truth]:
    """10.1: the lowest ``LabelSmoothingLoss(0.1)`` of one token among 9 classes, and where."""
    from ..loss import LabelSmoothingLoss

    C, true = 9, 3
    loss_fn = LabelSmoothingLoss(0.1)
    target = torch.tensor([true])  # (N,) with N = 1
    logits = torch.zeros(1, C, requires_grad=True)  # (N, C)
    (grad,) = torch.autograd.grad(loss_fn(logits, target), logits)
    # the gradient of the loss is p - y', so the loss's own target is p - grad
    best = (logits.softmax(-1) - grad).detach()  # (N, C): y'
    return {
        "floor": Truth(
            loss_fn(best.log(), target).item(),
            "cross-entropy against y' is smallest where p = y', and there "
            "it is the entropy of y'",
            rel=0.01,
        ),
        "p_true": Truth(
            best[0, true].item(),
            "the true class keeps 1 - eps, plus its share of the eps spread "
            "over all C classes",
            rel=0.01,
        ),
        "p_other": Truth(
            best[0, 0].item(),
            "eps is spread evenly over all C classes, the true one included",
            rel=0.02,
        ),
    }


EXERCISES: dict[str, Callable[[], dict[str, Truth]]] = {
    "1.1.2": _bank_inputs,
    "2.1.1": _embedding_sizes,
    "3.1.1": _encoding_row,
    "4.1.2": _encoder_mask,
    "5.2.1": _score_spread,
    "5.3.1": _mha_shapes,
    "5.4.2": _head_8,
    "6.2.1": _flat_layer_norm,
    "7.1.1": _model_shapes,
    "8.2.1": _copy_tokens,
    "8.4.1": _top_p,
    "9.1.1": _clipped_precisions,
    "10.1.2": _smoothing_floor,
}
"""Exercise id (section.number) -> the function that computes its truths from the package."""


def _same(answer: Any, truth: Truth) -> str | None:
    """``None`` when ``answer`` is right, else what was expected of it."""
    want = truth.value
    if isinstance(want, tuple):
        ok = isinstance(answer, (tuple, list, torch.Size)) and all(
            isinstance(a, int) for a in answer
        )
        if not ok:
            return f"expected a shape, a tuple of {len(want)} ints, got {answer!r}"
        if len(answer) != len(want):
            return f"expected {len(want)} axes, got {len(answer)}"
        return None if tuple(answer) == want else "not this shape"
    if isinstance(want, frozenset):
        try:
            given = frozenset(answer)
        except TypeError:
            return f"expected a set, got {answer!r}"
        return None if given == want else "not these"
    number = isinstance(answer, (int, float)) and not isinstance(
        answer, bool
    )
    if not number or not math.isfinite(answer):
        return f"expected a number, got {answer!r}"
    if isinstance(want, int) and not truth.rel:
        return None if answer == want else "not this number"
    ok = math.isclose(answer, want, rel_tol=truth.rel)
    return None if ok else f"not within {truth.rel:.0%} of the right value"


def verdicts(exercise: str, **answer: Any) -> dict[str, str | None]:
    """Each part of ``answer`` -> ``None`` when right, ``"..."`` when not answered, else what is wrong.

    Raises:
        KeyError: an unknown exercise, or a part the exercise does not ask for (the message lists
            what it asks for).
    """
    if exercise not in EXERCISES:
        raise KeyError(
            f"no exercise {exercise!r}: expected one of {', '.join(EXERCISES)}"
        )
    truths = EXERCISES[exercise]()
    unknown = sorted(set(answer) - set(truths))
    if unknown:
        raise KeyError(
            f"exercise {exercise} asks for {', '.join(truths)}; "
            f"it does not ask for {', '.join(unknown)}"
        )
    said: dict[str, str | None] = {}
    for name, truth in truths.items():
        given = answer.get(name, ...)
        said[name] = "..." if given is ... else _same(given, truth)
    return said


def check(exercise: str, **answer: Any) -> None:
    """Print, for each part of the reader's ``answer``, "right" or what is wrong (``verdicts`` returns it).

    Args:
        exercise: the exercise's id, as the chapter names it (``"5.3.1"``).
        **answer: the parts of the answer, ``...`` for a part not written yet.
    """
    truths = EXERCISES.get(exercise)
    said = verdicts(exercise, **answer)
    hints = truths() if truths else {}
    if all(v == "..." for v in said.values()):
        print(f"Not answered yet: replace the ... of {', '.join(said)}.")
        return
    for name, verdict in said.items():
        if verdict is None:
            print(f"{name}: right")
        elif verdict == "...":
            print(f"{name}: not answered yet (replace the ...)")
        else:
            print(f"{name}: {verdict}. Hint: {hints[name].hint}")
    if all(v is None for v in said.values()):
        print(f"Exercise {exercise}: all right.")
