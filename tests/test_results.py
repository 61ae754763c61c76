"""The published run's figures shipped with the package (aiayn.published.results_dir()): small, complete,
and re-scored to the BLEU the book states."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
from pathlib import Path

import pytest

from aiayn.bleu import corpus_bleu
from aiayn.data import load_multi30k
from aiayn.published import results_dir

ROOT = Path(__file__).resolve().parents[1]
RESULTS = results_dir()
CHAPTER = ROOT / "book" / "11_translate_multi30k.ipynb"
RECORD = json.loads((RESULTS / "multi30k.json").read_text())


def data_dir() -> Path:
    return Path(
        os.environ.get("AIAYN_DATA") or ROOT.parent / "shared/data/multi30k"
    )


def rows(name: str) -> list[dict[str, str]]:
    with open(RESULTS / name, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def rescored():
    hypotheses = (
        (RESULTS / RECORD["hypotheses"])
        .read_text(encoding="utf-8")
        .splitlines()
    )
    references = [
        en
        for _, en in load_multi30k(
            RECORD["split"], data_dir(), download=False
        )
    ]
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    sacre = bleu.corpus_score(hypotheses, [references])
    return (
        corpus_bleu(hypotheses, references),
        sacre,
        str(bleu.get_signature()),
    )


def test_every_file_is_small_and_listed_in_the_readme():
    readme = (RESULTS / "README.md").read_text()
    for path in RESULTS.iterdir():
        assert path.stat().st_size < 200_000, (
            f"{path.name} is {path.stat().st_size:,} bytes"
        )
        if path.name != "README.md":
            assert f"`{path.name}`" in readme, (
                f"README.md does not describe {path.name}"
            )


def test_the_record_says_where_when_and_how():
    r = RECORD
    assert (r["commit"], r["measured_at"]) == ("dffaf16", "2026-11-23")
    assert r["device_name"] == "NVIDIA H100 80GB HBM3" and r[
        "torch"
    ].startswith("2.11")
    assert r["commands"][0].startswith(
        "python -m aiayn.train --preset multi30k"
    )
    assert r["commands"][1].startswith("python -m aiayn.evaluate")
    assert r["config"]["name"] == r["train"]["preset"] == "multi30k"
    assert r["test"]["sentences"] == 1000 and r["test"]["beam"] == 4
    assert "out_dir" not in r["train"]


def test_the_curves_cover_the_run():
    every = RECORD["curves"]["every"]
    train = rows(RECORD["curves"]["train"])
    steps = RECORD["train"]["steps"]
    assert len(train) == math.ceil(steps / every)
    assert [int(r["step"]) for r in train] == [
        min(k * every, steps) for k in range(1, len(train) + 1)
    ]
    val = rows(RECORD["curves"]["val"])
    assert len(val) == RECORD["config"]["epochs"]
    assert float(val[-1]["val_loss"]) == pytest.approx(
        RECORD["train"]["val_loss"], abs=1e-4
    )
    assert float(train[0]["loss"]) > 8 > 3 > float(train[-1]["loss"])


def test_the_translations_are_the_runs(tmp_path):
    shared = Path(
        os.environ.get("AIAYN_MODEL")
        or ROOT.parent / "shared/runs/multi30k-h100"
    )
    sums = dict(
        reversed(line.split())
        for line in (shared / "SHA256SUMS").read_text().splitlines()
    )
    digest = hashlib.sha256(
        (RESULTS / RECORD["hypotheses"]).read_bytes()
    ).hexdigest()
    assert digest == sums["test2016.hyp.en"]


def test_rescoring_gives_the_published_bleu(rescored):
    ours, sacre, signature = rescored
    assert ours.score == pytest.approx(sacre.score, abs=1e-9)
    assert ours.score == pytest.approx(RECORD["test"]["bleu"], abs=1e-6)
    assert signature == RECORD["test"]["signature"]
    assert f"{sacre.score:.2f}" == "39.01"


def test_the_chapter_states_the_rescored_bleu(rescored):
    _, sacre, _ = rescored
    cells = json.loads(CHAPTER.read_text())["cells"]
    prose = "".join(
        "".join(c["source"]) for c in cells if c["cell_type"] == "markdown"
    )
    assert (
        f"{sacre.score:.2f} sacreBLEU" in prose
        or f"sacreBLEU {sacre.score:.2f}" in prose
    )


def test_the_laptop_record_is_the_laptop_preset():
    from dataclasses import asdict

    from aiayn.recipes import PRESETS, TrainConfig

    laptop = json.loads((RESULTS / "laptop.json").read_text())
    assert laptop["command"].startswith(
        "python -m aiayn.train --preset laptop "
    )
    recorded = TrainConfig.from_dict(laptop["config"])
    assert asdict(recorded) == asdict(PRESETS["laptop"])
    assert (
        laptop["wall_s"] <= 300
    )  # the chapter says: about five minutes on 2 cores
    assert (
        laptop["short"]["bleu"] > 20 and laptop["short"]["sentences"] == 280
    )
    assert len(laptop["examples"]) == 6


def test_the_length_penalty_was_chosen_on_validation_and_rescores():
    sweep = json.loads((RESULTS / "length_penalty.json").read_text())
    best = max(sweep["val"], key=lambda row: row["sacrebleu"])
    assert sweep["chosen"] == best["length_penalty"]
    chosen = sweep["test2016"][str(sweep["chosen"])]
    hypotheses = (
        (RESULTS / sweep["hypotheses"])
        .read_text(encoding="utf-8")
        .splitlines()
    )
    references = [
        en for _, en in load_multi30k("test2016", data_dir(), download=False)
    ]
    assert len(hypotheses) == len(references) == 1000
    score = corpus_bleu(hypotheses, references).score
    assert round(score, 2) == chosen["sacrebleu"] == chosen["bleu"]
    baseline = sweep["test2016"]["0.6"]["sacrebleu"]
    assert chosen["sacrebleu"] > baseline  # what choosing on val bought


def test_the_committed_attention_is_the_published_models():
    """Chapter 11's explorer without the weights shows what the model computes, to a thousandth."""
    import torch

    from aiayn.published import load_published
    from aiayn.viz.translation import (
        load_attention_examples,
        model_attention,
    )

    published = ROOT.parent / "shared/runs/multi30k-h100"
    _, tokenizer, model, _ = load_published(os.environ.get("AIAYN_MODEL") or published, download=False)
    hypotheses = (RESULTS / RECORD["hypotheses"]).read_text().splitlines()
    sources = [de for de, _ in load_multi30k("test2016", data_dir(), download=False)]
    saved = load_attention_examples(RESULTS / "multi30k.attention.json.gz")
    assert sorted(saved) == [209, 276, 757]
    for line, (maps, tokens) in saved.items():
        again, again_tokens = model_attention(model, tokenizer, sources[line], hypotheses[line])
        assert tokens == again_tokens
        for kind, layers in again.items():
            for w, stored in zip(layers, maps[kind], strict=True):
                torch.testing.assert_close(stored, w, atol=5e-4 + 1e-6, rtol=0)
