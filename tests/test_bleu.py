"""aiayn.bleu against sacreBLEU, on the Multi30k validation references and on hand-made edge cases."""

from __future__ import annotations

import functools
import gzip
import itertools
import math
import os
import random
from pathlib import Path

import pytest
import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from aiayn.bleu import (
    BLEUResult,
    _brevity_penalty,
    _score,
    bootstrap_bleu,
    corpus_bleu,
    paired_bootstrap,
    sentence_bleu,
    tokenize_13a,
)

TOL = 1e-9


def _data_dir() -> Path:
    """``$AIAYN_DATA``, else ``shared/data/multi30k`` next to the repository (where CI clones it)."""
    if os.environ.get("AIAYN_DATA"):
        return Path(os.environ["AIAYN_DATA"])
    return Path(__file__).resolve().parents[2] / "shared/data/multi30k"


@functools.cache
def _read_references() -> tuple[str, ...]:
    path = _data_dir() / "val.en.gz"
    if not path.is_file():
        pytest.fail(
            f"Multi30k validation references not found at {path}. Set AIAYN_DATA to the folder that holds "
            "val.en.gz, or place the shared data next to the repository (../shared/data/multi30k)."
        )
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    assert len(lines) > 1000, f"expected the ~1014 Multi30k validation sentences, got {len(lines)}"
    return tuple(lines)


def load_references() -> list[str]:
    """The English side of Multi30k validation; a missing file fails the calling test (CI must have the data)."""
    return list(_read_references())


# --- corruptions: systematic "system outputs" with known kinds of error --------------------------


def _drop(words: list[str], rng: random.Random) -> list[str]:
    return [w for w in words if rng.random() > 0.2]


def _duplicate(words: list[str], rng: random.Random) -> list[str]:
    return [x for w in words for x in ([w, w] if rng.random() < 0.2 else [w])]


def _swap(words: list[str], rng: random.Random) -> list[str]:
    words = list(words)
    for i in range(len(words) - 1):
        if rng.random() < 0.25:
            words[i], words[i + 1] = words[i + 1], words[i]
    return words


def _truncate(words: list[str], rng: random.Random) -> list[str]:
    return words[: rng.randint(0, len(words))]


def _lowercase(words: list[str], rng: random.Random) -> list[str]:
    return [w.lower() if rng.random() < 0.5 else w for w in words]


CORRUPTIONS = {"drop": _drop, "duplicate": _duplicate, "swap": _swap, "truncate": _truncate, "lowercase": _lowercase}


def corrupt(lines: list[str], kind: str, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(CORRUPTIONS[kind](line.split(), rng)) for line in lines]


def corrupt_all(lines: list[str], seed: int = 0) -> list[str]:
    """Apply every corruption in turn, so the output has all error kinds at once."""
    for i, kind in enumerate(CORRUPTIONS):
        lines = corrupt(lines, kind, seed + i)
    return lines


def assert_same(ours: BLEUResult, theirs: sacrebleu.BLEUScore, check_counts: bool = True) -> None:
    assert ours.score == pytest.approx(theirs.score, abs=TOL, rel=0)
    assert list(ours.precisions) == pytest.approx(theirs.precisions, abs=TOL, rel=0)
    assert ours.brevity_penalty == pytest.approx(theirs.bp, abs=TOL, rel=0)
    assert ours.hyp_len == theirs.sys_len
    assert ours.ref_len == theirs.ref_len
    if check_counts:
        assert list(ours.counts) == list(theirs.counts)
        assert list(ours.totals) == list(theirs.totals)


# --- tokenizer -----------------------------------------------------------------------------------


def test_tokenize_13a_examples():
    assert tokenize_13a("Hello, world!") == "Hello , world !"
    assert tokenize_13a("It costs $3.50, or 1,000 yen.") == "It costs $ 3.50 , or 1,000 yen ."
    assert tokenize_13a("a 5-year-old's toy") == "a 5 - year-old's toy"
    assert tokenize_13a("&quot;Hi&quot; &amp; bye") == '" Hi " & bye'
    assert tokenize_13a("   ") == ""


def test_tokenize_13a_equals_sacrebleu_on_random_strings():
    rng = random.Random(0)
    entities = ["&quot;", "&amp;", "&lt;", "&gt;", "<skipped>", "-\n"]
    alphabet = list("aZ09 .,-'\"!?$%&()/:;<=>@[]\\^_`{|}~\n\té") + entities
    theirs = Tokenizer13a()
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert tokenize_13a(text) == theirs(text), repr(text)


def test_tokenize_13a_equals_sacrebleu_on_corpus():
    references = load_references()
    theirs = Tokenizer13a()
    for line in references:
        assert tokenize_13a(line) == theirs(line)


def test_tokenize_13a_rejects_non_string():
    with pytest.raises(TypeError, match="expects a str, got int"):
        tokenize_13a(3)


# --- corpus BLEU on Multi30k ---------------------------------------------------------------------


def test_identical_corpus_scores_100():
    references = load_references()
    result = corpus_bleu(references, references)
    assert result.score == pytest.approx(100.0, abs=TOL)
    assert result.brevity_penalty == 1.0


@pytest.mark.parametrize("kind", [*CORRUPTIONS, "all"])
def test_corpus_bleu_equals_sacrebleu(kind):
    references = load_references()
    hyps = corrupt_all(references, seed=1) if kind == "all" else corrupt(references, kind, seed=1)
    assert_same(corpus_bleu(hyps, references), sacrebleu.corpus_bleu(hyps, [references]))


def test_corpus_bleu_lowercase_equals_sacrebleu():
    references = load_references()
    hyps = corrupt(references, "lowercase", seed=2)
    assert_same(
        corpus_bleu(hyps, references, lowercase=True), sacrebleu.corpus_bleu(hyps, [references], lowercase=True)
    )


@pytest.mark.parametrize("n_refs", [2, 3])
def test_corpus_bleu_multiple_references_equals_sacrebleu(n_refs):
    references = load_references()
    lines = references[:300]
    hyps = corrupt_all(lines, seed=10)
    ref_sets = [lines] + [corrupt_all(lines, seed=20 + k) for k in range(n_refs - 1)]  # variants as extra references
    per_hyp = [list(refs) for refs in zip(*ref_sets, strict=True)]
    assert_same(corpus_bleu(hyps, per_hyp), sacrebleu.corpus_bleu(hyps, ref_sets))


@pytest.mark.parametrize("smooth", ["exp", "floor", "add-k", "none"])
def test_smoothing_methods_equal_sacrebleu(smooth):
    references = load_references()
    # short, heavily damaged hypotheses so that high orders have few or no matches
    hyps = [" ".join(h.split()[:3]) for h in corrupt(references[:40], "swap", seed=3)]
    theirs = sacrebleu.corpus_bleu(hyps, [references[:40]], smooth_method=smooth)
    # sacreBLEU's add-k reports counts and totals with k already added; ours are the raw statistics
    assert_same(corpus_bleu(hyps, references[:40], smooth=smooth), theirs, check_counts=smooth != "add-k")
    for hyp, ref in zip(hyps[:20], references[:20], strict=True):
        theirs = sacrebleu.sentence_bleu(hyp, [ref], smooth_method=smooth)
        assert_same(sentence_bleu(hyp, ref, smooth=smooth), theirs, check_counts=smooth != "add-k")


# (counts, totals): every order matched, an order without a match, orders without n-grams, no match at all
STATS = [([9, 7, 5, 3], [9, 8, 7, 6]), ([5, 2, 0, 1], [6, 5, 4, 3]), ([5, 0, 0, 0], [6, 5, 4, 3]),
         ([3, 1, 0, 0], [3, 2, 1, 0]), ([2, 0, 0, 0], [2, 0, 0, 0]), ([0, 0, 0, 0], [4, 3, 2, 1])]  # fmt: skip


@pytest.mark.parametrize("smooth", ["exp", "floor", "add-k", "none"])
def test_score_from_its_pieces_equals_sacrebleus_compute_bleu(smooth):
    """_brevity_penalty, _smoothed_precisions and _geometric_mean together are sacreBLEU's ``compute_bleu``:
    no hypothesis (c = 0), equal lengths, longer and shorter hypotheses, with and without effective order."""
    lengths = [(0, 5), (7, 7), (9, 7), (6, 9), (1, 12)]
    for (counts, totals), (c, r), effective in itertools.product(STATS, lengths, (False, True)):
        for value in (None, 0.5) if smooth in ("floor", "add-k") else (None,):
            ours = _score(counts, totals, c, r, 4, smooth, value, effective)
            theirs = sacrebleu.metrics.BLEU.compute_bleu(counts, totals, c, r, smooth, value, effective)
            what = (counts, totals, c, r, value, effective)
            assert (ours.score, ours.brevity_penalty) == (theirs.score, theirs.bp), what
            assert list(ours.precisions) == list(theirs.precisions), what
    assert _brevity_penalty(0, 5) == 0 and _brevity_penalty(7, 7) == _brevity_penalty(9, 7) == 1


def test_sentence_bleu_equals_sacrebleu():
    references = load_references()
    hyps = corrupt_all(references[:200], seed=4)
    for hyp, ref in zip(hyps, references[:200], strict=True):
        assert_same(sentence_bleu(hyp, [ref]), sacrebleu.sentence_bleu(hyp, [ref]))


# --- edge cases ----------------------------------------------------------------------------------

EDGE_CASES = [
    # (hypotheses, references per hypothesis)
    ([""], [["A dog runs on the beach ."]]),  # empty hypothesis
    (["", "A dog runs ."], [["A dog runs on the beach ."], ["A dog runs ."]]),  # empty one in a corpus
    (["", ""], [["a b c"], ["d e"]]),  # nothing at all
    (["A dog"], [["A dog runs on the beach .", "A dog runs along the sand ."]]),  # shorter than every ref
    (["dog A runs beach the on"], [["A dog runs on the beach"]]),  # unigrams match, no 3- or 4-gram does
    (["cat sat mat"], [["A dog runs on the beach"]]),  # no match of any order
    (["A dog runs on the beach today and tomorrow"], [["A dog runs .", "A dog runs on the beach , fast ."]]),
    (["the the the the the the the"], [["The cat is on the mat .", "There is a cat on the mat ."]]),
    (["Thank Thank Thank"], [["Thank you ."]]),
    (["A cat"], [["A cat sat", "A cat"]]),  # one reference has exactly the hypothesis length
    (["A b c d"], [["A b", "A b c d e f"]]),  # tie in length difference: the shorter reference wins
]


@pytest.mark.parametrize(("hyps", "refs"), EDGE_CASES)
def test_edge_cases_equal_sacrebleu(hyps, refs):
    n_refs = {len(r) for r in refs}
    if len(n_refs) == 1:
        streams = [list(s) for s in zip(*refs, strict=True)]
    else:  # sacreBLEU marks a missing reference with None
        width = max(n_refs)
        streams = [[r[k] if k < len(r) else None for r in refs] for k in range(width)]
    assert_same(corpus_bleu(hyps, refs), sacrebleu.corpus_bleu(hyps, streams))
    for hyp, r in zip(hyps, refs, strict=True):
        assert_same(sentence_bleu(hyp, r), sacrebleu.sentence_bleu(hyp, r))


def test_clipping_thank_thank_thank():
    result = sentence_bleu("Thank Thank Thank", "Thank you .")
    assert result.counts[0] == 1  # "Thank" is credited once, as often as the reference has it
    assert result.totals[0] == 3
    assert result.precisions[0] == pytest.approx(100 / 3)


def test_papineni_unigram_example():
    # Papineni et al. 2002, section 2.1: modified unigram precision 2/7
    result = corpus_bleu(["the the the the the the the"], [["the cat is on the mat", "there is a cat on the mat"]])
    assert (result.counts[0], result.totals[0]) == (2, 7)


def test_variable_number_of_references():
    references = load_references()
    refs = [[r] if i % 2 else [r, r.upper()] for i, r in enumerate(references[:50])]
    hyps = corrupt(references[:50], "drop", seed=5)
    streams = [references[:50], [r.upper() if i % 2 == 0 else None for i, r in enumerate(references[:50])]]
    assert_same(corpus_bleu(hyps, refs), sacrebleu.corpus_bleu(hyps, streams))


def test_str_is_readable():
    text = str(corpus_bleu(["A dog runs ."], ["A dog runs fast ."]))
    assert text.startswith("BLEU = ")
    assert "BP = " in text and "hyp_len = 4" in text and "ref_len = 5" in text


# --- bad input -----------------------------------------------------------------------------------


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="got 2 hypotheses and 3 references"):
        corpus_bleu(["a", "b"], ["a", "b", "c"])


def test_non_string_hypothesis_raises():
    with pytest.raises(TypeError, match=r"hypotheses\[1\]: expected a str, got int"):
        corpus_bleu(["a", 5], ["a", "b"])


def test_non_string_reference_raises():
    with pytest.raises(TypeError, match=r"references\[0\]\[1\]: expected a str, got NoneType"):
        corpus_bleu(["a"], [["a", None]])


def test_single_string_instead_of_list_raises():
    with pytest.raises(TypeError, match="got a single str"):
        corpus_bleu("a dog", ["a dog"])


def test_empty_corpus_raises():
    with pytest.raises(ValueError, match="empty corpus"):
        corpus_bleu([], [])


def test_empty_reference_list_raises():
    with pytest.raises(ValueError, match=r"references\[0\]: expected at least one reference"):
        corpus_bleu(["a"], [[]])


def test_unknown_smoothing_raises():
    with pytest.raises(ValueError, match="smooth must be one of .* got 'laplace'"):
        corpus_bleu(["a"], ["a"], smooth="laplace")


def test_bad_max_order_raises():
    with pytest.raises(ValueError, match="max_order must be a positive integer, got 0"):
        corpus_bleu(["a"], ["a"], max_order=0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, ["a cat"]), "hypotheses: expected a list of str, one per sentence, got None"),
        ((["a cat"], None), r"references: expected a list with one entry per hypothesis \(a reference str or a list"),
        ((["a cat"], [None]), r"references\[0\]: expected a reference string or a list of them, got None"),
        (([None], ["a cat"]), r"hypotheses\[0\]: expected a str, got NoneType"),
    ],
)
def test_corpus_bleu_names_a_none_input(args, message):
    with pytest.raises(TypeError, match=message):
        corpus_bleu(*args)


def test_sentence_bleu_names_a_none_input():
    with pytest.raises(TypeError, match="hypothesis: expected a str, got NoneType"):
        sentence_bleu(None, "a cat")
    with pytest.raises(TypeError, match="references: expected a reference string or a list of them, got None"):
        sentence_bleu("a cat", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (({"s1": "a cat"}, ["a cat"]),
         r"hypotheses: expected a list of str, one per sentence, got dict \(pass list\(d.values\(\)\) for its"),
        (({0: "a cat"}, ["a cat"]), "hypotheses: expected a list of str, one per sentence, got dict"),
        (({"a cat"}, ["a cat"]), "hypotheses: expected a list of str, one per sentence, got set"),
        ((5, ["a cat"]), "hypotheses: expected a list of str, one per sentence, got int"),
        ((b"a cat", ["a cat"]), "hypotheses: expected a list of str, one per sentence, got bytes"),
        (("a cat", ["a cat"]), r"hypotheses: expected a list of str, .*, got a single str \(wrap it in a list\)"),
        ((["a cat"], {"s1": "a cat"}),
         r"references: expected a list with one entry per hypothesis \(a reference str or a list of them\), got dict"),
        ((["a cat"], 5), r"references: expected a list with one entry per hypothesis .*, got int"),
        ((["a cat"], "a cat"), r"references: expected a list with one entry per hypothesis .*, got a single str"),
        ((["a cat"], [5]), r"references\[0\]: expected a reference string or a list of them, got int"),
        ((["a cat"], [{"r": "a cat"}]), r"references\[0\]: expected a reference string or a list of them, got dict"),
        ((["a cat"], [[5]]), r"references\[0\]\[0\]: expected a str, got int"),
        (([5], ["a cat"]), r"hypotheses\[0\]: expected a str, got int"),
    ],
)  # fmt: skip
def test_corpus_bleu_says_what_it_expected_and_what_arrived(args, message):
    with pytest.raises(TypeError, match=message):
        corpus_bleu(*args)


@pytest.mark.parametrize(
    ("references", "message"),
    [
        (5, "references: expected a reference string or a list of them, got int"),
        ({"r": "a cat"}, "references: expected a reference string or a list of them, got dict"),
        ([5], r"references\[0\]: expected a str, got int"),
    ],
)
def test_sentence_bleu_says_what_it_expected_and_what_arrived(references, message):
    with pytest.raises(TypeError, match=message):
        sentence_bleu("a cat", references)


def test_a_generator_of_hypotheses_is_read_like_a_list():
    lines = ["the cat sat on the mat", "a dog"]
    assert corpus_bleu((h for h in lines), lines) == corpus_bleu(lines, lines)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"smooth": ["exp"]}, r"smooth must be one of .* got \['exp'\]"),
        ({"smooth": "floor", "smooth_value": "0.1"}, "smooth_value must be a finite number >= 0 or None, got '0.1'"),
        ({"smooth": "floor", "smooth_value": math.nan}, "smooth_value must be a finite number >= 0 or None, got nan"),
        ({"smooth": "add-k", "smooth_value": -1}, "smooth_value must be a finite number >= 0 or None, got -1"),
    ],
)
def test_bad_smoothing_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        corpus_bleu(["a cat"], ["a cat"], **kwargs)


# --- confidence intervals and paired tests, against sacreBLEU's bootstrap ------------------------

# sacreBLEU sums the resampled statistics in float32 and scores them in float32 arithmetic
# (numpy 2 keeps float32 when a Python float meets it): its means and intervals differ from ours
# in the 7th significant digit. Same seed, same draws, so nothing else differs.
BOOT_TOL = 1e-4


def test_bootstrap_interval_equals_sacrebleus_confidence():
    refs = load_references()
    hyps = corrupt(refs, "drop", seed=1)
    ours = bootstrap_bleu(hyps, refs)  # seed 12345: sacreBLEU's default
    theirs = sacrebleu.metrics.BLEU().corpus_score(hyps, [refs], n_bootstrap=1000)
    assert ours.score == pytest.approx(theirs.score, abs=TOL, rel=0)
    assert ours.mean == pytest.approx(theirs._mean, abs=BOOT_TOL, rel=0)
    assert ours.half_width == pytest.approx(theirs._ci, abs=BOOT_TOL, rel=0)
    assert ours.low < ours.score < ours.high
    assert (ours.n_resamples, ours.seed, ours.confidence) == (1000, 12345, 0.95)


def test_paired_bootstrap_equals_sacrebleus_paired_bs():
    from sacrebleu.significance import PairedTest

    refs = load_references()
    baseline, system = corrupt(refs, "drop", seed=1), corrupt(refs, "drop", seed=2)
    ours = paired_bootstrap(baseline, system, refs)
    metric = sacrebleu.metrics.BLEU(references=[refs])
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": metric}, None, test_type="bs",
                      n_samples=1000)  # fmt: skip
    _, scores = test()
    theirs_baseline, theirs = scores["BLEU"]
    assert 0.01 < ours.p_value < 0.9  # two close systems: an interesting p
    assert ours.p_value == pytest.approx(theirs.p_value, abs=2 / 1001)
    assert ours.system.mean == pytest.approx(theirs.mean, abs=BOOT_TOL, rel=0)
    assert ours.system.half_width == pytest.approx(theirs.ci, abs=BOOT_TOL, rel=0)
    assert ours.baseline.half_width == pytest.approx(theirs_baseline.ci, abs=BOOT_TOL, rel=0)
    assert ours.difference == pytest.approx(theirs.score - theirs_baseline.score, abs=TOL)
    assert ours.low < ours.difference < ours.high


def test_bootstrap_repeats_with_its_seed_and_changes_without():
    refs = load_references()[:200]
    hyps = corrupt(refs, "swap", seed=3)
    first, again = bootstrap_bleu(hyps, refs, seed=7), bootstrap_bleu(hyps, refs, seed=7)
    assert first == again
    other = bootstrap_bleu(hyps, refs, seed=8)
    assert other.score == first.score and (other.low, other.high) != (first.low, first.high)
    assert "95% interval [" in str(first) and "seed 7" in str(first)


def test_a_wider_confidence_gives_a_wider_interval():
    refs = load_references()[:300]
    hyps = corrupt(refs, "truncate", seed=4)
    narrow = bootstrap_bleu(hyps, refs, confidence=0.8)
    wide = bootstrap_bleu(hyps, refs, confidence=0.99)
    assert wide.low <= narrow.low < narrow.high <= wide.high


def test_a_clear_gain_is_significant_and_a_system_against_itself_is_not():
    refs = load_references()[:300]
    good, bad = corrupt(refs, "drop", seed=5), corrupt_all(refs, seed=6)
    clear = paired_bootstrap(bad, good, refs)
    assert clear.difference > 20 and clear.significant() and clear.sign_flips == 0
    assert "difference +" in str(clear) and "p = 0.001" in str(clear)
    same = paired_bootstrap(good, good, refs)
    assert same.difference == 0 and same.low == same.high == 0
    assert not same.significant() and same.p_value == 1 and same.sign_flips == 1


def test_the_paired_intervals_are_each_systems_own():
    refs = load_references()[:250]
    a, b = corrupt(refs, "drop", seed=1), corrupt(refs, "swap", seed=2)
    paired = paired_bootstrap(a, b, refs, seed=11)
    assert paired.baseline == bootstrap_bleu(a, refs, seed=11)
    assert paired.system == bootstrap_bleu(b, refs, seed=11)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_resamples": 1}, "n_resamples must be an integer >= 2, got 1"),
        ({"n_resamples": 100.0}, "n_resamples must be an integer >= 2, got 100.0"),
        ({"seed": None}, r"seed must be a non-negative integer \(the resamples are drawn from it.*got None"),
        ({"seed": -1}, "seed must be a non-negative integer .*got -1"),
        ({"confidence": 95}, r"confidence must be a number between 0 and 1 \(0.95 for 95 %\), got 95"),
        ({"confidence": 1.0}, "confidence must be a number between 0 and 1 .*got 1.0"),
    ],
)
def test_bad_bootstrap_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bootstrap_bleu(["a cat"], ["a cat"], **kwargs)
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(["a cat"], ["a cat"], ["a cat"], **kwargs)


def test_paired_bootstrap_refuses_systems_of_different_lengths():
    with pytest.raises(ValueError, match="baseline and system must translate the same sentences, got 2 and 1 lines"):
        paired_bootstrap(["a", "b"], ["a"], ["a", "b"])
    with pytest.raises(ValueError, match="got 2 hypotheses and 3 references"):
        paired_bootstrap(["a", "b"], ["a", "b"], ["a", "b", "c"])
    with pytest.raises(TypeError, match=r"system: expected a list of str, .*got a single str"):
        paired_bootstrap(["a"], "a", ["a"])


def test_bootstrap_refuses_what_corpus_bleu_refuses():
    with pytest.raises(ValueError, match="empty corpus"):
        bootstrap_bleu([], [])
    with pytest.raises(TypeError, match=r"hypotheses\[0\]: expected a str, got int"):
        bootstrap_bleu([5], ["a cat"])
