"""Exercises of chapters 8-10: training, decoding, BLEU, label smoothing.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .truth import Truth


def _copy_tokens() -> dict[str, Truth]:
    """8.2: what one batch of the copy task holds."""

    from ...training.batches import copy_task_batches

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


def _length_penalty() -> dict[str, Truth]:
    """8.3: which of two finished hypotheses beam search prefers, at α = 0.6 and α = 1."""

    from ...decoding.common import gnmt_length_penalty

    # (log P, tokens) of the two hypotheses
    long_, short = (-3.0, 7), (-2.5, 4)

    def score(hypothesis, alpha):
        log_p, n = hypothesis
        return log_p / gnmt_length_penalty(n, alpha)

    def winner(alpha):  # the winner's number of tokens
        return max((long_, short), key=lambda h: score(h, alpha))[1]

    return {
        "score_7": Truth(
            score(long_, 0.6),
            "divide log P by ((5 + |Y|) / 6) ** alpha, |Y| the tokens",
            rel=1e-3,
        ),
        "score_4": Truth(
            score(short, 0.6),
            "the same formula with |Y| = 4",
            rel=1e-3,
        ),
        "winner_06": Truth(
            winner(0.6),
            "the higher score (the one nearer zero) wins; answer its tokens",
        ),
        "winner_1": Truth(
            winner(1.0),
            "with alpha = 1 the penalty is (5 + |Y|) / 6",
        ),
    }


def _top_p() -> dict[str, Truth]:
    """8.4: which pieces does top-p = 0.7 keep?"""

    from ...decoding.search import sampling_probs

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
    from ...bleu import corpus_bleu

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
    from ...loss import LabelSmoothingLoss

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


def _half_peak() -> dict[str, Truth]:
    """8.1: the peak of the paper's schedule, and the step where the rate is half of it."""
    from ...schedule import noam_rate

    d_model, warmup = 512, 4000
    steps = range(1, 10 * warmup)
    peak = max(noam_rate(s, d_model, warmup) for s in steps)
    half = next(
        s
        for s in steps
        if s > warmup and noam_rate(s, d_model, warmup) <= peak / 2
    )
    return {
        "peak_rate": Truth(
            peak,
            "the peak is where the rising and the falling term of the "
            "minimum are equal",
            rel=0.01,
        ),
        "half_step": Truth(
            half,
            "after the peak the rate falls as step^-0.5: how much larger "
            "must the step be for the rate to halve?",
        ),
    }


def _pooled_brevity() -> dict[str, Truth]:
    """9.2: the brevity penalty of a short sentence alone, and pooled with a long perfect one."""
    from ...bleu import corpus_bleu, sentence_bleu

    refs = [
        "A woman in a blue shirt and a black hat is selling fruit at a busy "
        "street market.",
        "A dog runs on the beach.",
    ]
    hyps = [refs[0], "A dog."]
    return {
        "bp_short": Truth(
            sentence_bleu(hyps[1], refs[1]).brevity_penalty,
            "BP = exp(1 - r/c) with c and r the 13a tokens of this one "
            "sentence; the full stop is a token",
            rel=0.01,
        ),
        "bp_pooled": Truth(
            corpus_bleu(hyps, refs).brevity_penalty,
            "corpus BLEU adds up c and r over both sentences before it "
            "computes BP once",
            rel=0.01,
        ),
    }


def _best_perplexity() -> dict[str, Truth]:
    """10.2: the lowest perplexity a smoothed model reaches on a token it is certain of (C = 37,000)."""
    import torch.nn.functional as F

    from ...loss import LabelSmoothingLoss

    C, true = 37_000, 5
    target = torch.tensor([true])  # (N,) with N = 1
    floors = {}
    for eps in (0.1, 0.2):
        logits = torch.zeros(1, C, requires_grad=True)  # (N, C)
        loss = LabelSmoothingLoss(eps)(logits, target)
        (grad,) = torch.autograd.grad(loss, logits)
        # the gradient is p - y', so the smoothed optimum y' is p - grad
        best = (logits.softmax(-1) - grad).detach()  # (N, C)
        # perplexity against the real token: exp of its cross-entropy
        floors[eps] = F.nll_loss(best.log(), target).exp().item()
    hint = (
        "perplexity on one token is 1 / p: how much does the smoothed "
        "target y' give the true class?"
    )
    return {
        "ppl_eps_01": Truth(floors[0.1], hint, rel=0.01),
        "ppl_eps_02": Truth(floors[0.2], hint, rel=0.01),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "8.2.1": _copy_tokens,
    "8.3.1": _length_penalty,
    "8.4.1": _top_p,
    "9.1.1": _clipped_precisions,
    "10.1.2": _smoothing_floor,
    "8.1.1": _half_peak,
    "9.2.1": _pooled_brevity,
    "10.2.1": _best_perplexity,
}
