"""tools/seeds.py: several seeds of a preset trained at once, each scored, their mean and spread."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "seeds.py"


def run_tool(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env, check=False)


def test_two_seeds_are_trained_at_once_and_scored(tmp_path, root, cache):
    out = tmp_path / "seeds"
    done = run_tool("--preset", "multi30k-smoke", "--seeds", "3", "5", "--out", str(out), "--device", "cpu",
                    "--data", str(root), "--set", "epochs=1", "--set", "test_subset=20")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "seeds.json").read_text())
    assert set(report["seeds"]) == {"3", "5"} and report["changes"] == {"epochs": 1, "test_subset": 20}
    bleu = [run["sacrebleu"] for run in report["seeds"].values()]
    assert all(0 <= b <= 100 for b in bleu)
    assert report["sacrebleu_mean"] == pytest.approx(statistics.fmean(bleu))
    assert report["sacrebleu_stdev"] == pytest.approx(statistics.stdev(bleu))
    for seed in (3, 5):
        config = json.loads((out / f"seed-{seed}" / "config.json").read_text())
        assert config["seed"] == seed and config["epochs"] == 1
        assert report["seeds"][str(seed)]["steps"] > 0
    weights = [torch.load(out / f"seed-{s}" / "epoch-001.pt", map_location="cpu")["model"] for s in (3, 5)]
    assert weights[0].keys() == weights[1].keys()
    assert not all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # two models
    assert "sacreBLEU mean" in done.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "1", "1"], "--seeds must be distinct integers >= 0, got [1, 1]"),
        (["--set", "max_steps"], "--set expects NAME=VALUE, e.g. max_steps=20, got 'max_steps'"),
        (["--set", "nope=3"], "unknown TrainConfig fields"),
        (["--preset", "nope"], "unknown preset 'nope'"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(args, message, tmp_path):
    done = run_tool("--out", str(tmp_path / "seeds"), *args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "seeds").exists()
