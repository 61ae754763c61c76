"""The BLEU calculator of chapter 9's page, aiayn/web/bleu.mjs, is aiayn.bleu: Node runs it on Python's cases.

Python writes, for each case (odd text, the traps chapter 9 names, and 120 of the published model's own
translations scored against each other), what ``tokenize_13a``, ``_ngrams``, ``_closest_ref_len``,
``_sentence_stats``, the pieces of ``_score`` (``_brevity_penalty``, ``_smoothed_precisions``, ``_geometric_mean``),
``_score`` and ``sentence_bleu`` give. The cases are committed, tests/js/bleu.cases.json
(``python tests/test_web_bleu.py`` writes them again), and tests/js/bleu.test.mjs holds each JavaScript
function to them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from aiayn.bleu import (
    SMOOTHING_METHODS,
    _brevity_penalty,
    _closest_ref_len,
    _geometric_mean,
    _ngrams,
    _score,
    _sentence_stats,
    _smoothed_precisions,
    sentence_bleu,
    tokenize_13a,
)

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests/js/bleu.cases.json"
RESULTS = REPO / "src/aiayn/results"
COUCH = "A man sleeping in a green room on a couch."
THANKS = "Thank you so much, my brother"
# (hypothesis, references, options): the page's traps and odd text
ODD = [
    ("", [COUCH], {}),  # empty hypothesis
    ("   ", [COUCH], {}),
    ("A man is sleeping on a green couch.", [COUCH], {}),  # the page's example
    ("A man on a couch sleeping in a green room.", [COUCH], {}),  # no 4-gram
    ("green room", [COUCH], {}),  # short: BP, and no 3- or 4-grams at all
    ("couch", [COUCH], {}),
    ("Thank Thank Thank", [THANKS], {}),  # repeated words, clipped
    ("the the the the the the the",
     ["the cat is on the mat", "there is a cat on the mat"], {}),
    ("Thank you", [THANKS], {}),
    ("a man sleeping in a green room on a couch.", [COUCH], {}),
    ("a man sleeping in a green room on a couch.", [COUCH], {"lowercase": True}),
    ("Hello, world! (Really?) \"Yes\": 3.14, 1,000 and 5-year-old.",
     ["Hello world, really? Yes: 3.14 1,000 and 5 - year - old"], {}),
    ("Tom &amp; Jerry &quot;ran&quot; &lt;fast&gt; <skipped> a-\nway",
     ["Tom & Jerry \"ran\" <fast> away"], {}),
    ("Straße über Öl, 日本語 \U0001f600.", ["Strasse über Öl, 日本語 \U0001f600 ."], {}),
    ("İSTANBUL STRASSE ΣΟΦΟΣ", ["istanbul straße σοφος"], {"lowercase": True}),
    ("Ein\u00a0Mann\u2009fährt\x1cFahrrad.\x85 ", ["Ein Mann fährt Fahrrad ."], {}),
    ("x", ["x"], {}),
    ("dog dog dog cat", ["dog cat dog", "dog dog cat cat cat"], {}),
    ("one two three", ["one two", "one two three four"], {}),  # tie: shorter
    ("one two three", ["four five six"], {}),  # not one match
    ("a b c d e f", ["a b x d e f"], {"smooth": "none"}),
    ("a b c d e f", ["a b x d e f"], {"smooth": "floor"}),
    ("a b c d e f", ["a b x d e f"], {"smooth": "floor", "smooth_value": 0.5}),
    ("a b c d e f", ["a x c x e f"], {"smooth": "add-k"}),
    ("a b c d e f", ["a b c d e f"], {"max_order": 2}),
    ("a b c d e f g", ["a b c d e f g"], {"max_order": 6}),
]  # fmt: skip


def _model_cases() -> list[tuple[str, list[str], dict]]:
    """The published model's English where two length penalties give different sentences, one against the other."""
    short, long = (
        (RESULTS / f"multi30k.val.lp{lp}.hyp.en").read_text("utf-8").splitlines()
        for lp in ("0.6", "2.2")
    )
    differ = [i for i, (a, b) in enumerate(zip(short, long, strict=True)) if a != b]
    cases = []
    for k, i in enumerate(differ[:120]):
        # every third one with a second reference: the next sentence's
        refs = [long[i], short[i + 1]] if k % 3 == 0 else [long[i]]
        cases.append((short[i], refs, {}))
    return cases


def bleu_cases() -> dict:
    """What tests/js/bleu.cases.json holds: each function's answer, case by case."""
    cases = []
    for hyp, refs, options in ODD + _model_cases():
        max_order = options.get("max_order", 4)
        lower = options.get("lowercase", False)
        prepared = [tokenize_13a((t.lower() if lower else t).rstrip()) for t in (hyp, *refs)]
        c, r, counts, totals = _sentence_stats(prepared[0], prepared[1:], max_order)
        result = sentence_bleu(hyp, refs, **options)
        cases.append(
            {
                "hypothesis": hyp,
                "references": refs,
                "options": options,
                "tokenized": prepared,
                "ngrams": [[" ".join(g), k] for g, k in _ngrams(prepared[0].split(), max_order).items()],
                "closest_ref_len": _closest_ref_len(c, [len(t.split()) for t in prepared[1:]]),
                "stats": {"c": c, "r": r, "counts": counts, "totals": totals},
                "result": {
                    "score": result.score,
                    "precisions": list(result.precisions),
                    "brevity_penalty": result.brevity_penalty,
                    "hyp_len": result.hyp_len,
                    "ref_len": result.ref_len,
                    "counts": list(result.counts),
                    "totals": list(result.totals),
                },
            }
        )
    # _score alone, on statistics no sentence gives: zero totals, k past the counts
    scores = []
    for counts, totals, c, r in [([0, 0, 0, 0], [0, 0, 0, 0], 0, 5), ([3, 0, 0, 0], [3, 0, 0, 0], 3, 3),
                                 ([5, 2, 0, 1], [6, 5, 4, 3], 6, 9), ([9, 7, 5, 3], [9, 8, 7, 6], 9, 7)]:
        for smooth in ("exp", "none", "floor", "add-k"):
            for effective in (False, True):
                s = _score(counts, totals, c, r, 4, smooth, None, effective)
                args = [counts, totals, c, r, 4, smooth, None, effective]
                scores.append({"args": args, "score": s.score, "precisions": list(s.precisions),
                               "brevity_penalty": s.brevity_penalty})
    return {
        **_pieces(),
        "what": "aiayn.bleu on odd text and the model's own translations (tests/test_web_bleu.py writes this file)",
        "whitespace": [c for c in range(0x110000) if chr(c).isspace()],
        "cases": cases,
        "scores": scores,
    }


# (counts, totals): a match in every order, orders without a match, orders without n-grams, nothing at all
PIECE_STATS = [([9, 7, 5, 3], [9, 8, 7, 6]), ([5, 2, 0, 1], [6, 5, 4, 3]), ([5, 0, 0, 0], [6, 5, 4, 3]),
               ([3, 1, 0, 0], [3, 2, 1, 0]), ([2, 0, 0, 0], [2, 0, 0, 0]), ([0, 0, 0, 0], [0, 0, 0, 0]),
               ([4, 2], [5, 3]), ([6, 4, 0, 2, 0, 1], [7, 6, 5, 4, 3, 2])]  # fmt: skip


def _pieces() -> dict:
    """``_score``'s pieces alone: BP at its edges, every smoothing with its default and other values."""
    lengths = [(0, 0), (0, 5), (5, 5), (6, 5), (1, 9), (2, 7), (9, 2), (13, 14)]
    penalties = [{"args": [c, r], "bp": _brevity_penalty(c, r)} for c, r in lengths]
    precisions = []
    for counts, totals in PIECE_STATS:
        for smooth in SMOOTHING_METHODS:
            for value in (None, 0.0, 0.5, 2.0) if SMOOTHING_METHODS[smooth] is not None else (None,):
                got, found = _smoothed_precisions(counts, totals, smooth, value)
                precisions.append({"args": [counts, totals, smooth, value], "precisions": got, "found": found})
    means = [[], [100.0], [0.0, 50.0], [90.0, 50.0, 0.1], [100.0, 87.5, 71.4, 50.0], [33.3, 12.5, 6.25, 3.125]]
    return {
        "brevity_penalties": penalties,
        "smoothed_precisions": precisions,
        "geometric_means": [{"args": [m], "mean": _geometric_mean(m)} for m in means],
    }


def test_the_pieces_cover_the_edges():
    """BP with no hypothesis, equal and longer lengths; each smoothing gives an order without a match a value."""
    pieces = _pieces()
    bp = {tuple(p["args"]): p["bp"] for p in pieces["brevity_penalties"]}
    assert bp[0, 5] == 0 and bp[5, 5] == bp[6, 5] == bp[0, 0] == 1 and 0 < bp[2, 7] < bp[13, 14] < 1
    for smooth in SMOOTHING_METHODS:
        cases = [p for p in pieces["smoothed_precisions"] if p["args"][2] == smooth and p["args"][0] == [5, 2, 0, 1]]
        assert cases, smooth
        # an order without a match: 0 unless smoothed
        assert all((p["precisions"][2] > 0) == (smooth != "none") for p in cases if p["args"][3] != 0.0)
    found = [p["found"] for p in pieces["smoothed_precisions"] if p["args"][2] == "exp"]
    assert set(found) == {0, 1, 2, 3, 4, 6}
    empty, one, with_zero = (m["mean"] for m in pieces["geometric_means"][:3])
    assert empty == with_zero == 0 and one == pytest.approx(100)


def test_the_committed_bleu_cases_are_python_s():
    committed = json.loads(CASES.read_text("utf-8"))
    assert committed == bleu_cases(), f"{CASES} is out of date: `python tests/test_web_bleu.py`"


def test_the_cases_hold_the_traps_the_page_names():
    """Empty hypothesis, no 4-gram match, short hypothesis (BP < 1), clipped repeats, smoothing."""
    results = [c["result"] for c in bleu_cases()["cases"]]
    assert any(r["hyp_len"] == 0 and r["score"] == 0 for r in results)
    assert any(r["counts"][3] == 0 and r["totals"][3] > 0 and r["score"] > 0 for r in results)
    assert any(r["brevity_penalty"] < 0.5 for r in results)
    assert any(r["counts"][0] < r["totals"][0] for r in results)
    assert sum(0 < r["score"] < 100 for r in results) > 100


def test_bleu_in_javascript_is_python_s():
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: these tests need Node 20.10+")
    run = subprocess.run([node, "--test", str(REPO / "tests/js/bleu.test.mjs")], capture_output=True, text=True)
    assert run.returncode == 0, f"node failed:\n{run.stdout}\n{run.stderr}"


if __name__ == "__main__":
    CASES.write_text(json.dumps(bleu_cases(), ensure_ascii=False, indent=None) + "\n", "utf-8")
    print(f"wrote {CASES}")
