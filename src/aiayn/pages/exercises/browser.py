"""Exercises of the pages about the translator in the browser: 11.4 (using it) and 13.2 (how it is built).

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

from .truth import Truth

# 11.4.1: two finished sentences of a beam search, (generated pieces, log P), and its alpha
FINISHED = {"long": (15, -3.4), "short": (13, -3.3)}
ALPHA = 0.6
# 13.2.1: three training pairs of token ids (German, English), a shortlist of 1 + 1, a sentence
PAIRS = [([5, 6], [20, 21]), ([5, 7], [20, 22]), ([6, 7], [21, 23])]
EOS = 2
SENTENCE = [5, 7]


def beam_ranking() -> dict[str, Truth]:
    """11.4.1: the scores log P / lp(|Y|) of two finished sentences, and the length of the one that wins."""
    from ...export.translator import length_penalty

    score = {
        name: log_p / length_penalty(n, ALPHA)
        for name, (n, log_p) in FINISHED.items()
    }
    winner = max(FINISHED, key=score.get)
    return {
        "long_score": Truth(
            score["long"],
            "log P divided by lp(|Y|) = ((5 + |Y|) / 6) ** alpha",
            rel=0.01,
        ),
        "short_score": Truth(
            score["short"],
            "the same rule, with the shorter sentence's length",
            rel=0.01,
        ),
        "winner_pieces": Truth(
            FINISHED[winner][0],
            "the higher (less negative) score wins, not the higher log P",
        ),
    }


def toy_shortlist() -> dict[str, Truth]:
    """13.2.1: the Dice score of German 7 with English 22, and the shortlist of the sentence [5, 7]."""
    from ...export.shortlist import build, targets

    record = build(PAIRS, top=1, frequent=1)
    pairs = [(set(s), set(t)) for s, t in PAIRS]
    both = sum(7 in s and 22 in t for s, t in pairs)
    c_s = sum(7 in s for s, _ in pairs)
    c_t = sum(22 in t for _, t in pairs)
    return {
        "dice_7_22": Truth(
            2 * both / (c_s + c_t),
            "count the pairs that hold 7, those that hold 22, and both",
            rel=0.01,
        ),
        "targets": Truth(
            frozenset(targets(record, SENTENCE, EOS)),
            "each German piece's best English piece (ties: the smaller id), "
            "the most frequent English piece, and <eos>",
        ),
    }


TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {
    "11.4.1": beam_ranking,
    "13.2.1": toy_shortlist,
}
