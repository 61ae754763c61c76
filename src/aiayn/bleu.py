"""BLEU (Papineni et al. 2002), written out so every step can be read, and equal to sacreBLEU's defaults.

BLEU compares a system's translations (hypotheses) with human translations (references):

1. Tokenize both sides the same way (sacreBLEU's ``13a`` tokenizer, re-implemented in ``tokenize_13a``).
2. For each order n = 1..4 count the hypothesis n-grams (``totals``) and how many of them also occur
   in a reference (``counts``), *clipped*: an n-gram is credited at most as often as it occurs in the
   reference that has it most often, so "the the the" cannot earn three matches from one "the".
3. Sum counts and totals over the whole corpus; the modified precision of order n is counts / totals.
4. Take the geometric mean of the precisions and multiply by the brevity penalty
   BP = exp(1 − r / c) when the hypotheses are shorter (c words) than the references (r words), else 1.
   For each sentence r uses the reference whose length is closest to the hypothesis.

Scores are reported on sacreBLEU's 0–100 scale.

How sure is a score? ``bootstrap_bleu`` draws the test set again, sentence by sentence with
replacement, many times, and reports the spread of BLEU over those resampled sets: a 95 % confidence
interval. ``paired_bootstrap`` does the same for two systems on the same draws, which tells whether
their difference is larger than the test set's noise (Koehn 2004; sacreBLEU's ``--paired-bs``). Both
need each sentence's statistics only once: a resample's BLEU is the score of summed counts.

    n  n-gram order (1..max_order)        c  hypothesis length        r  reference length
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BLEUResult",
    "tokenize_13a",
    "corpus_bleu",
    "sentence_bleu",
    "SMOOTHING_METHODS",
    "BootstrapResult",
    "PairedBootstrapResult",
    "bootstrap_bleu",
    "paired_bootstrap",
]

# The smoothing methods of Chen & Cherry (2014) that sacreBLEU offers, with their default values.
SMOOTHING_METHODS: dict[str, float | None] = {
    "none": None,
    "floor": 0.1,
    "add-k": 1.0,
    "exp": None,
}


# --- Tokenization ---------------------------------------------------------------------------------

# Punctuation that always becomes its own token: every printable ASCII symbol except the
# apostrophe ' and the three handled by the rules below (',' '.' '-'). Space is in the list
# too (as in mteval-v13a), which only adds whitespace that the final split removes.
_ALWAYS_SPLIT = ' !"#$%&()*+/:;<=>?@[\\]^_`{|}~'
_TOKENIZER_RULES = [
    (re.compile("([" + re.escape(_ALWAYS_SPLIT) + "])"), r" \1 "),
    # a period or comma is split off unless it sits between digits
    # ("3.14", "1,000"): when it is not preceded by a digit ...
    (re.compile(r"([^0-9])([.,])"), r"\1 \2 "),
    # ... or not followed by one
    (re.compile(r"([.,])([^0-9])"), r" \1 \2"),
    # a dash after a digit ("5-year" -> "5 - year")
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
]


def tokenize_13a(text: str) -> str:
    """Tokenize one line as mteval-v13a (and sacreBLEU's default ``13a``) does; tokens are joined by spaces.

    Args:
        text: one detokenized sentence.

    Returns:
        The tokenized sentence, single spaces between tokens, no leading or trailing space.
    """
    if not isinstance(text, str):
        raise TypeError(
            f"tokenize_13a expects a str, got {type(text).__name__}"
        )
    text = text.replace("<skipped>", "")
    text = text.replace("-\n", "").replace("\n", " ")
    # undo the four HTML escapes mteval knows, &amp; after &quot; as it does
    if "&" in text:
        text = text.replace("&quot;", '"').replace("&amp;", "&")
        text = text.replace("&lt;", "<").replace("&gt;", ">")
    text = f" {text} "
    for pattern, replacement in _TOKENIZER_RULES:
        text = pattern.sub(replacement, text)
    return " ".join(text.split())


# --- Result ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BLEUResult:
    """A BLEU score together with the statistics it was computed from.

    Args:
        score: BLEU on the 0–100 scale.
        precisions: modified n-gram precision per order, in percent (after smoothing).
        brevity_penalty: BP in [0, 1].
        hyp_len: number of hypothesis tokens, c.
        ref_len: number of reference tokens, r (closest reference length per sentence, summed).
        counts: clipped n-gram matches per order (before any smoothing).
        totals: hypothesis n-grams per order.
    """

    score: float
    precisions: tuple[float, ...]
    brevity_penalty: float
    hyp_len: int
    ref_len: int
    counts: tuple[int, ...]
    totals: tuple[int, ...]

    @property
    def ratio(self) -> float:
        """Hypothesis length over reference length, c / r (0 when there are no reference tokens)."""
        return self.hyp_len / self.ref_len if self.ref_len else 0.0

    def __str__(self) -> str:
        precisions = "/".join(f"{p:.1f}" for p in self.precisions)
        return (
            f"BLEU = {self.score:.2f} {precisions} "
            f"(BP = {self.brevity_penalty:.3f} ratio = {self.ratio:.3f} "
            f"hyp_len = {self.hyp_len} ref_len = {self.ref_len})"
        )


# --- Statistics -----------------------------------------------------------------------------------


def _ngrams(tokens: list[str], max_order: int) -> Counter:
    """Count every n-gram of ``tokens`` for n = 1..max_order (as tuples of words)."""
    return Counter(
        tuple(tokens[i : i + n])
        for n in range(1, max_order + 1)
        for i in range(len(tokens) - n + 1)
    )


def _closest_ref_len(hyp_len: int, ref_lens: list[int]) -> int:
    """The reference length closest to ``hyp_len``; on a tie, the shorter reference."""
    return min(ref_lens, key=lambda r: (abs(r - hyp_len), r))


def _sentence_stats(
    hyp: str, refs: list[str], max_order: int
) -> tuple[int, int, list[int], list[int]]:
    """Return ``(c, r, counts, totals)`` for one tokenized hypothesis and its tokenized references."""
    hyp_tokens = hyp.split()
    # for each n-gram, the most times any single reference has it
    max_ref_counts: Counter = Counter()
    for ref in refs:
        for ngram, count in _ngrams(ref.split(), max_order).items():
            max_ref_counts[ngram] = max(max_ref_counts[ngram], count)
    counts, totals = [0] * max_order, [0] * max_order
    for ngram, count in _ngrams(hyp_tokens, max_order).items():
        n = len(ngram)
        totals[n - 1] += count
        counts[n - 1] += min(count, max_ref_counts[ngram])  # clipping
    r = _closest_ref_len(len(hyp_tokens), [len(ref.split()) for ref in refs])
    return len(hyp_tokens), r, counts, totals


def _brevity_penalty(hyp_len: int, ref_len: int) -> float:
    """BP = exp(1 − r / c) when the hypotheses are shorter than the references (c < r), else 1."""
    if hyp_len >= ref_len:
        return 1.0
    return math.exp(1 - ref_len / hyp_len) if hyp_len > 0 else 0.0


def _smoothed_precisions(
    counts: Sequence[int],
    totals: Sequence[int],
    smooth: str,
    smooth_value: float | None,
) -> tuple[list[float], int]:
    """Each order's precision in percent, smoothed where it has no match; and how many orders have n-grams."""
    k = SMOOTHING_METHODS[smooth] if smooth_value is None else smooth_value
    precisions = [0.0] * len(counts)
    # "exp" smoothing: the i-th order without matches gets precision
    # 1 / (2^i · total)
    exp_denominator = 1.0
    for n in range(1, len(counts) + 1):
        correct, total = counts[n - 1], totals[n - 1]
        # add k to matches and totals of orders 2..max_order
        if smooth == "add-k" and n > 1:
            correct, total = correct + k, total + k
        # the hypotheses are too short for n-grams of this order (or higher)
        if total == 0:
            return precisions, n - 1
        if correct > 0:
            precisions[n - 1] = 100.0 * correct / total
        elif smooth == "exp":
            exp_denominator *= 2
            precisions[n - 1] = 100.0 / (exp_denominator * total)
        elif smooth == "floor":
            precisions[n - 1] = 100.0 * k / total
    return precisions, len(counts)


def _geometric_mean(precisions: Sequence[float]) -> float:
    """exp of the mean log precision; 0 when a precision is 0 (log 0) or there is none."""
    if not precisions or any(p == 0.0 for p in precisions):
        return 0.0
    return math.exp(sum(math.log(p) for p in precisions) / len(precisions))


def _score(
    counts: Sequence[int],
    totals: Sequence[int],
    hyp_len: int,
    ref_len: int,
    max_order: int,
    smooth: str,
    smooth_value: float | None,
    effective_order: bool,
) -> BLEUResult:
    """Combine corpus statistics into a score, following sacreBLEU's ``BLEU.compute_bleu``."""
    bp = _brevity_penalty(hyp_len, ref_len)
    precisions, found = [0.0] * max_order, max_order
    # not a single matching word: 0, whatever the smoothing
    if any(counts):
        options = (smooth, smooth_value)
        precisions, found = _smoothed_precisions(counts, totals, *options)
    # sentence-level BLEU: average only over the orders that have n-grams
    used = precisions[:found] if effective_order else precisions
    score = bp * _geometric_mean(used)
    counts, totals = tuple(counts), tuple(totals)  # as BLEUResult keeps them
    return BLEUResult(
        score, tuple(precisions), bp, hyp_len, ref_len, counts, totals
    )


# --- Public functions -----------------------------------------------------------------------------


def _check_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(
            f"{what}: expected a str, got {type(value).__name__}"
        )
    return value


def _kind(value: object) -> str:
    """What arrived, for an error message: ``None``, ``a single str``, ``dict``, ..."""
    if value is None:
        return "None"
    if isinstance(value, str):
        return "a single str"
    return type(value).__name__


def _unordered(value: object) -> bool:
    """A value whose iteration is no list of sentences: a dict (its keys), a set (no order), bytes."""
    return isinstance(value, (Mapping, Set, str, bytes, bytearray))


def _sentences(value: object, name: str) -> list:
    """``hypotheses`` or ``references`` as a list, one entry per sentence; a ``TypeError`` otherwise."""
    if name != "references":  # hypotheses, or one system of two
        wanted = "a list of str, one per sentence"
    else:
        wanted = (
            "a list with one entry per hypothesis (a reference str or a "
            "list of them)"
        )
    if _unordered(value) or not isinstance(value, Iterable):
        hint = {
            "a single str": " (wrap it in a list)",
            "dict": " (pass list(d.values()) for its values)",
        }.get(_kind(value), "")
        raise TypeError(
            f"{name}: expected {wanted}, got {_kind(value)}{hint}"
        )
    return list(value)


def _references(value: object, name: str) -> list[str]:
    """One sentence's references as a non-empty list of str: a str alone becomes ``[str]``."""
    if isinstance(value, str):
        return [value]
    if _unordered(value) or not isinstance(value, Iterable):
        raise TypeError(
            f"{name}: expected a reference string or a list of them, "
            f"got {_kind(value)}"
        )
    refs = list(value)
    if not refs:
        raise ValueError(
            f"{name}: expected at least one reference string, got none"
        )
    return [_check_text(ref, f"{name}[{j}]") for j, ref in enumerate(refs)]


def _prepare(text: str, lowercase: bool) -> str:
    return tokenize_13a((text.lower() if lowercase else text).rstrip())


def _check_options(
    max_order: int, smooth: str, smooth_value: float | None
) -> None:
    is_int = isinstance(max_order, int) and not isinstance(max_order, bool)
    if not is_int or max_order < 1:
        raise ValueError(
            f"max_order must be a positive integer, got {max_order!r}"
        )
    if not isinstance(smooth, str) or smooth not in SMOOTHING_METHODS:
        raise ValueError(
            f"smooth must be one of {sorted(SMOOTHING_METHODS)}, got {smooth!r}"
        )
    is_number = isinstance(smooth_value, (int, float)) and not isinstance(
        smooth_value, bool
    )
    if smooth_value is not None and not (
        is_number and 0 <= smooth_value < math.inf
    ):
        raise ValueError(
            "smooth_value must be a finite number >= 0 or None, "
            f"got {smooth_value!r}"
        )


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    max_order: int = 4,
    smooth: str = "exp",
    smooth_value: float | None = None,
    lowercase: bool = False,
    effective_order: bool = False,
) -> BLEUResult:
    """Corpus-level BLEU; with the defaults it equals ``sacrebleu.corpus_bleu``.

    Args:
        hypotheses: one detokenized system output per sentence, length N.
        references: length N: for each hypothesis either one reference string or a list of
            reference strings (the number may vary from sentence to sentence). Note that this is
            per hypothesis, unlike sacreBLEU, which takes one list per reference *set*.
        max_order: the highest n-gram order, 4 in the BLEU paper.
        smooth: what to do with an order that has no match: ``"exp"`` (sacreBLEU's default,
            the i-th such order gets precision 1 / (2^i · total)), ``"floor"`` (precision
            smooth_value / total), ``"add-k"`` (add smooth_value to counts and totals of orders ≥ 2)
            or ``"none"`` (the score is 0).
        smooth_value: the value for ``"floor"`` (default 0.1) and ``"add-k"`` (default 1).
        lowercase: compare case-insensitively.
        effective_order: average only over the orders for which the hypotheses have n-grams
            (sacreBLEU's ``use_effective_order``; off for corpus BLEU).

    Returns:
        A ``BLEUResult``.
    """
    _check_options(max_order, smooth, smooth_value)
    stats = _corpus_stats(hypotheses, references, max_order, lowercase)
    totals = [sum(column) for column in zip(*stats, strict=True)]
    options = (max_order, smooth, smooth_value, effective_order)
    return _from_sums(totals, *options)


def _corpus_stats(
    hypotheses: object, references: object, max_order: int, lowercase: bool
) -> list[list[int]]:
    """One row per sentence, ``[c, r, counts..., totals...]`` (sacreBLEU's layout); inputs checked."""
    hypotheses = _sentences(hypotheses, "hypotheses")
    references = _sentences(references, "references")
    if len(hypotheses) != len(references):
        raise ValueError(
            "expected one entry of references per hypothesis, "
            f"got {len(hypotheses)} hypotheses "
            f"and {len(references)} references"
        )
    if not hypotheses:
        raise ValueError(
            "expected at least one hypothesis, got an empty corpus"
        )
    rows = []
    pairs = zip(hypotheses, references, strict=True)
    for i, (hyp, refs) in enumerate(pairs):
        hyp = _check_text(hyp, f"hypotheses[{i}]")
        refs = _references(refs, f"references[{i}]")
        hyp = _prepare(hyp, lowercase)
        refs = [_prepare(ref, lowercase) for ref in refs]
        c, r, matches, ngrams = _sentence_stats(hyp, refs, max_order)
        rows.append([c, r, *matches, *ngrams])
    return rows


def _from_sums(
    sums: Sequence[int],
    max_order: int,
    smooth: str,
    smooth_value: float | None,
    effective_order: bool,
) -> BLEUResult:
    """Score one row of summed statistics ``[c, r, counts..., totals...]``."""
    c, r = int(sums[0]), int(sums[1])
    counts = [int(x) for x in sums[2 : 2 + max_order]]
    totals = [int(x) for x in sums[2 + max_order :]]
    options = (max_order, smooth, smooth_value, effective_order)
    return _score(counts, totals, c, r, *options)


def sentence_bleu(
    hypothesis: str,
    references: str | Sequence[str],
    max_order: int = 4,
    smooth: str = "exp",
    smooth_value: float | None = None,
    lowercase: bool = False,
) -> BLEUResult:
    """BLEU of a single sentence, with sacreBLEU's sentence defaults (``exp`` smoothing, effective order).

    BLEU is a corpus metric; on one sentence it is noisy, and without smoothing one order with no
    match makes it 0. Use it to inspect examples, not to compare systems.

    Args:
        hypothesis: one detokenized system output.
        references: one reference string or a list of them.
        max_order: the highest n-gram order.
        smooth: the smoothing method, see ``corpus_bleu``.
        smooth_value: the value for ``"floor"`` and ``"add-k"``.
        lowercase: compare case-insensitively.

    Returns:
        A ``BLEUResult``.
    """
    _check_text(hypothesis, "hypothesis")
    refs = _references(references, "references")
    options = (max_order, smooth, smooth_value, lowercase)
    return corpus_bleu([hypothesis], [refs], *options, effective_order=True)


# --- Confidence: bootstrap resampling of sentences ------------------------------------------------

# sacreBLEU's default seed (its $SACREBLEU_SEED): the same seed draws the same resamples.
BOOTSTRAP_SEED = 12345


@dataclass(frozen=True)
class BootstrapResult:
    """Corpus BLEU with a bootstrap confidence interval.

    Args:
        score: BLEU of the corpus as it is (``corpus_bleu``).
        low, high: the interval: the resampled BLEU scores, sorted, cut at the
            (1 − confidence) / 2 share at each end (sacreBLEU's cut: index n // 40 for 95 %).
        mean: the mean of the resampled scores.
        confidence: the interval's confidence, 0.95 for 95 %.
        n_resamples: how many resampled corpora were scored.
        seed: the seed of the resampling.
    """

    score: float
    low: float
    high: float
    mean: float
    confidence: float
    n_resamples: int
    seed: int

    @property
    def half_width(self) -> float:
        """(high − low) / 2: the "± ci" that sacreBLEU prints after the mean."""
        return (self.high - self.low) / 2

    def __str__(self) -> str:
        return (
            f"BLEU = {self.score:.2f}, {self.confidence:.0%} interval "
            f"[{self.low:.2f}, {self.high:.2f}] "
            f"({self.n_resamples} resamples, seed {self.seed})"
        )


@dataclass(frozen=True)
class PairedBootstrapResult:
    """Two systems resampled together: is their BLEU difference more than noise?

    Args:
        baseline, system: each system's ``BootstrapResult`` (from the same resamples).
        difference: system BLEU − baseline BLEU on the corpus as it is.
        low, high: the confidence interval of the difference over the resamples.
        p_value: sacreBLEU's paired bootstrap p-value: the share (+1 in numerator and
            denominator) of resamples whose absolute difference, centred on the resamples'
            mean absolute difference, reaches the observed one; small means "not noise".
            Ties count, so a system against itself gets p = 1 (sacreBLEU: 0.001).
        sign_flips: the share of resamples where the difference is zero or has the other sign
            (1 when the observed difference is 0); Koehn (2004) calls the system better with
            95 % confidence when this is at most 0.05.
    """

    baseline: BootstrapResult
    system: BootstrapResult
    difference: float
    low: float
    high: float
    p_value: float
    sign_flips: float

    def significant(self, level: float = 0.05) -> bool:
        """True when the p-value is below ``level``: the difference is unlikely to be noise."""
        return self.p_value < level

    def __str__(self) -> str:
        return (
            f"difference {self.difference:+.2f} BLEU, "
            f"{self.system.confidence:.0%} interval "
            f"[{self.low:+.2f}, {self.high:+.2f}], p = {self.p_value:.3f}, "
            f"other sign in {self.sign_flips:.1%} of resamples"
        )


def _check_bootstrap(n_resamples: int, seed: int, confidence: float) -> None:
    def is_int(value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    if not is_int(n_resamples) or n_resamples < 2:
        raise ValueError(
            f"n_resamples must be an integer >= 2, got {n_resamples!r}"
        )
    if not is_int(seed) or seed < 0:
        raise ValueError(
            "seed must be a non-negative integer (the resamples are drawn "
            f"from it, so that they repeat), got {seed!r}"
        )
    is_number = isinstance(confidence, (int, float)) and not isinstance(
        confidence, bool
    )
    if not (is_number and 0 < confidence < 1):
        raise ValueError(
            "confidence must be a number between 0 and 1 (0.95 for 95 %), "
            f"got {confidence!r}"
        )


def _resamples(n_sentences: int, n_resamples: int, seed: int) -> np.ndarray:
    """``(n_resamples, n_sentences)`` sentence indices drawn with replacement, as sacreBLEU draws them."""
    rng = np.random.default_rng(seed)
    return rng.choice(
        n_sentences, size=(n_resamples, n_sentences), replace=True
    )


def _resampled_scores(
    stats: np.ndarray, draws: np.ndarray, options: tuple
) -> np.ndarray:
    """BLEU of every resample: sum its sentences' statistics, then score the sums; ``(n_resamples,)``."""
    return np.array(
        [_from_sums(stats[d].sum(0), *options).score for d in draws]
    )


def _interval(
    score: float, scores: np.ndarray, confidence: float, seed: int
) -> BootstrapResult:
    n = len(scores)
    ordered = np.sort(scores)
    # the index sacreBLEU cuts at (n // 40 for 95 %); a tiny epsilon keeps
    # 1000 · 0.05 / 2 from rounding down to 24.999...
    cut = int(n * (1 - confidence) / 2 + 1e-9)
    low, high = float(ordered[cut]), float(ordered[n - cut - 1])
    mean = float(scores.mean())
    return BootstrapResult(score, low, high, mean, confidence, n, seed)


def bootstrap_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    n_resamples: int = 1000,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = 0.95,
    lowercase: bool = False,
) -> BootstrapResult:
    """Corpus BLEU with a confidence interval, by bootstrap resampling of sentences.

    Each resample draws N sentences from the N of the corpus with replacement and scores them;
    the spread of those scores says how much the BLEU of another test set of the same kind could
    differ. With the default seed the resamples are sacreBLEU's (``--confidence``), so the mean
    and the half width equal its ``μ ± ci`` (up to its float32 sums).

    Args:
        hypotheses, references: as in ``corpus_bleu`` (length N each).
        n_resamples: resampled corpora to score (at least 2; sacreBLEU uses 1,000).
        seed: seed of the draws; the same seed gives the same interval.
        confidence: the interval's confidence, 0.95 for 95 %.
        lowercase: compare case-insensitively.

    Returns:
        A ``BootstrapResult``.
    """
    _check_bootstrap(n_resamples, seed, confidence)
    stats = np.array(_corpus_stats(hypotheses, references, 4, lowercase))
    options = (4, "exp", None, False)  # corpus_bleu's defaults
    score = _from_sums(stats.sum(0), *options).score
    draws = _resamples(len(stats), n_resamples, seed)
    scores = _resampled_scores(stats, draws, options)
    return _interval(score, scores, confidence, seed)


def paired_bootstrap(
    baseline: Sequence[str],
    system: Sequence[str],
    references: Sequence[str] | Sequence[Sequence[str]],
    n_resamples: int = 1000,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = 0.95,
    lowercase: bool = False,
) -> PairedBootstrapResult:
    """Compare two systems' BLEU on the same sentences: paired bootstrap resampling (Koehn 2004).

    Both systems are scored on the same resamples, so what varies is only which sentences are
    drawn; a difference that keeps its sign in (nearly) every resample is not the luck of the test
    set. The p-value is sacreBLEU's ``--paired-bs`` one, and with the default seed equal to it.

    Args:
        baseline, system: one output per sentence each, in the same order (length N).
        references: as in ``corpus_bleu`` (length N).
        n_resamples, seed, confidence, lowercase: as in ``bootstrap_bleu``.

    Returns:
        A ``PairedBootstrapResult``.
    """
    _check_bootstrap(n_resamples, seed, confidence)
    baseline = _sentences(baseline, "baseline")
    system = _sentences(system, "system")
    if len(baseline) != len(system):
        raise ValueError(
            "baseline and system must translate the same sentences, "
            f"got {len(baseline)} and {len(system)} lines"
        )
    a = np.array(_corpus_stats(baseline, references, 4, lowercase))
    b = np.array(_corpus_stats(system, references, 4, lowercase))
    options = (4, "exp", None, False)
    score_a = _from_sums(a.sum(0), *options).score
    score_b = _from_sums(b.sum(0), *options).score
    draws = _resamples(len(a), n_resamples, seed)
    scores_a = _resampled_scores(a, draws, options)
    scores_b = _resampled_scores(b, draws, options)
    observed = score_b - score_a
    diffs = scores_b - scores_a  # (n_resamples,)
    # sacreBLEU: centre the absolute differences on their mean (the null
    # hypothesis) and count how often they reach the observed one; ties
    # count (sacreBLEU's strict > gives a system against itself p = 0.001)
    centred = np.abs(diffs) - np.abs(diffs).mean()
    exceed = int((centred >= abs(observed)).sum())
    p_value = (exceed + 1) / (n_resamples + 1)
    if observed == 0:
        flips = 1.0
    else:
        flips = float((np.sign(diffs) != np.sign(observed)).mean())
    spread = _interval(observed, diffs, confidence, seed)
    return PairedBootstrapResult(
        _interval(score_a, scores_a, confidence, seed),
        _interval(score_b, scores_b, confidence, seed),
        observed,
        spread.low,
        spread.high,
        p_value,
        flips,
    )
