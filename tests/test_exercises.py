"""Exercises that answer back (aiayn.pages.exercises): each check says right or what is wrong, and every
exercise a chapter asks is one the package can check."""

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from aiayn.pages.exercises import EXERCISES, check, verdicts

BOOK = Path(__file__).resolve().parents[1] / "book"
CALL = re.compile(r"""check\(\s*["'](\d+\.\d+\.\d+)["']""")


def _truths(exercise):
    return {name: truth.value for name, truth in EXERCISES[exercise]().items()}


@pytest.mark.parametrize("exercise", sorted(EXERCISES))
def test_the_right_answer_is_right_and_a_blank_is_not_answered(exercise, capsys):
    check(exercise, **_truths(exercise))
    out = capsys.readouterr().out
    assert out.endswith(f"Exercise {exercise}: all right.\n") and "not" not in out
    check(exercise)
    assert capsys.readouterr().out == f"Not answered yet: replace the ... of {', '.join(_truths(exercise))}.\n"


def test_a_wrong_answer_says_what_was_expected_without_the_value(capsys):
    said = verdicts("5.3.1", d_k="16", queries=(2, 4, 7), attn=(2, 4, 7, 8), parameters=16_640)
    assert said == {
        "d_k": "expected a number, got '16'",
        "queries": "expected 4 axes, got 3",
        "attn": "not this shape",
        "parameters": None,
    }
    check("5.3.1", d_k=16, queries=(2, 4, 7, 16), attn=(2, 4, 7, 8), parameters=16_640)
    out = capsys.readouterr().out
    assert "all right" not in out
    assert "attn: not this shape. Hint: one L x L map per sentence and head" in out
    assert "(2, 4, 7, 7)" not in out  # the hint does not give the answer away


def test_a_number_is_right_within_its_tolerance_only():
    assert verdicts("5.2.1", std_before=8, std_after=1)["std_before"] is None
    assert verdicts("5.2.1", std_before=64, std_after=1)["std_before"] == "not within 5% of the right value"
    assert verdicts("5.2.1", std_before=float("nan"), std_after=1)["std_before"] == "expected a number, got nan"
    assert verdicts("8.4.1", kept=[1, 0], first=0.625)["kept"] is None  # a list is read as a set
    # numpy's scalars are numbers (a pandas cell hands them out); a tensor is told to say .item()
    assert verdicts("8.2.1", tgt_in=(np.int64(96), 7), tokens=np.int64(672)) == {"tgt_in": None, "tokens": None}
    assert verdicts("5.2.1", std_before=torch.tensor(8.0))["std_before"] == (
        "expected a number, got a tensor: write tensor(8.).item()"
    )
    assert verdicts("8.4.1", kept={0, 1, 2}, first=0.625)["kept"] == "not these"


def test_an_unknown_exercise_or_part_is_refused_by_name():
    with pytest.raises(KeyError, match=r"no exercise '9.9.9': expected one of 1\.1\.2, .*5\.2\.1"):
        verdicts("9.9.9")
    with pytest.raises(KeyError, match="exercise 5.2.1 asks for std_before, std_after; it does not ask for std"):
        verdicts("5.2.1", std=8)


def test_every_exercise_a_chapter_checks_is_known_and_every_known_one_is_asked():
    asked = set()
    for path in BOOK.glob("*.ipynb"):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                asked |= set(CALL.findall("".join(cell["source"])))
    assert asked == set(EXERCISES)


@pytest.mark.parametrize(
    ("exercise", "answer", "part", "hint"),
    [
        # the step of the peak, not of half the peak
        ("8.1.1", {"peak_rate": 512**-0.5 * 4000**-0.5, "half_step": 4000}, "half_step", "step^-0.5"),
        # the mean of the two sentences' brevity penalties is not the pooled one
        ("9.2.1", {"bp_short": 0.264, "bp_pooled": (1 + 0.264) / 2}, "bp_pooled", "adds up c and r"),
        # a batch's budget counts the target's positions alone
        ("1.4.2", {"rows_10": 102, "calls_10": 10, "rows_30": 2048 // 30, "calls_30": 30}, "rows_30", "source and"),
        # an unsmoothed model's perplexity on a certain token
        ("10.2.1", {"ppl_eps_01": 1.0, "ppl_eps_02": 1.25}, "ppl_eps_01", "1 / p"),
        # the patches without the class token
        ("12.1.2", {"tokens_16": 196, "tokens_8": 785, "scores_growth": 16.0}, "tokens_16", "class token"),
    ],
)
def test_a_likely_mistake_is_refused_with_a_hint(exercise, answer, part, hint, capsys):
    said = verdicts(exercise, **answer)
    assert [name for name, verdict in said.items() if verdict is not None] == [part]
    check(exercise, **answer)
    out = capsys.readouterr().out
    assert f"{part}: not " in out and hint in out and "all right" not in out


def test_the_published_translations_score_higher_without_their_failures():
    import json

    from aiayn.runs.published import results_dir

    truths = _truths("11.2.3")
    record = json.loads((results_dir() / "multi30k.json").read_text())
    whole = record["test"]["bleu"]  # corpus BLEU of all 1,000, as the run recorded it
    assert truths["bleu_failures"] < whole < truths["bleu_rest"]
def test_the_chapter_5_to_7_answers_a_reader_works_out_by_hand_are_right():
    # from the paper's formulas, not from the truth functions
    assert verdicts("5.1.1", temperature=1 / 64**0.5) == {"temperature": None}
    assert verdicts("5.1.1", temperature=1.0) == {"temperature": "not within 1% of the right value"}
    assert verdicts("6.1.1", parameters=2 * 512 * 1024 + 1024 + 512, share=0.5) == {"parameters": None, "share": None}
    assert verdicts("6.3.1", post=1, pre=3) == {"post": None, "pre": None}
    assert verdicts("6.3.1", post=3, pre=1) == {
        "post": "not within 2% of the right value",
        "pre": "not within 2% of the right value",
    }
    assert verdicts("7.2.1", saved=37000 * 512) == {"saved": None}
    assert verdicts("7.2.1", saved=37000 * 513)["saved"] == "not this number"


def test_the_record_exercises_agree_with_what_the_record_stores():
    from aiayn.pages.stepthrough import load_stepthrough

    record = load_stepthrough()
    layer_1 = record["encoder"]["layers"][0]
    stored_sum = layer_1["add_norm_1"]["add"]["first"][1][0]  # Bauarbeiter, dimension 0
    active = layer_1["feed_forward"]["active"][1]
    assert verdicts("6.1.2", added=stored_sum, share=active / 2048) == {"added": None, "share": None}
    assert verdicts("6.1.2", added=-stored_sum, share=active)["share"] is not None
    # the translation's probability is the product of the top pieces' (greedy) probabilities
    top = [row[0] for row in record["next"]["p"]]
    written = record["tokens"]["decoder_out"]
    assert [row[0] for row in record["next"]["pieces"]] == written
    product, unsure = math.prod(top), sum(p < 0.7 for p in top)
    assert verdicts("7.3.1", probability=product, unsure=unsure) == {"probability": None, "unsure": None}
    assert verdicts("7.3.1", probability=sum(top) / len(top), unsure=unsure)["probability"] is not None
