"""tools/laptop_hour.py: the laptop hour timed, scored and recorded, on a run of a few seconds."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import time
from pathlib import Path

import pytest
import sacrebleu

from aiayn.data.multi30k import load_multi30k
from aiayn.runs.presets import get_preset

TOOL = Path(__file__).resolve().parents[1] / "tools" / "laptop_hour.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("laptop_hour_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_hour(tool, folder: Path, smoke: str, name: str) -> tuple[Path, dict]:
    """The ``smoke`` preset cut to a few seconds, named ``name``, trained through the tool's ``train`` part."""
    config = get_preset(smoke, epochs=1, train_subset=400, val_subset=40, test_subset=30)
    (folder / "tiny.json").write_text(json.dumps(dataclasses.asdict(dataclasses.replace(config, name=name))))
    run = folder / name
    timed = tool.train_hour(run, ("--config", str(folder / "tiny.json")))
    (folder / f"{name}.hour.json").write_text(json.dumps(timed))
    return run, timed


@pytest.fixture(scope="module")
def hour(tool, root, cache, tmp_path_factory):
    """A tiny config named ``laptop`` trained through the tool's ``train`` part, and its record."""
    run, timed = tiny_hour(tool, tmp_path_factory.mktemp("hour"), "multi30k-smoke", "laptop")
    return tool, run, timed


@pytest.fixture(scope="module")
def seed_1(hour):
    """The same tiny config with seed 1, trained beside the first."""
    tool, run, _ = hour
    config = {**json.loads((run / "config.json").read_text()), "seed": 1}
    (run.parent / "laptop-1.config.json").write_text(json.dumps(config))  # where `train --seed 1` writes it
    other = run.parent / "laptop-1"
    (run.parent / "laptop-1.hour.json").write_text(
        json.dumps(tool.train_hour(other, ("--config", str(run.parent / "laptop-1.config.json"))))
    )
    return other


def test_train_times_the_command_and_leaves_the_run_folder_to_it(hour):
    _, run, timed = hour
    assert timed["rc"] == 0 and timed["wall_s"] > 0 and timed["finished_at"] == time.strftime("%Y-%m-%d")
    assert timed["command"].startswith("python -m aiayn.train --config ")
    assert not list(run.glob("*.hour.json")) and (run.parent / "laptop.hour.json").is_file()


def test_record_scores_the_run_as_sacrebleu_does(hour, root, tmp_path):
    tool, run, _ = hour
    tool.main(["record", str(run), "--data", str(root), "--out", str(tmp_path)])
    text = json.loads((tmp_path / "laptop.json").read_text())
    hyps = (tmp_path / "laptop.test2016.hyp.en").read_text(encoding="utf-8").splitlines()
    refs = [en for _, en in load_multi30k("test2016", root, download=False)][:30]
    assert len(hyps) == 30 and text["test2016"]["sentences"] == 30
    t = text["test2016"]
    assert t["sacrebleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert t["lowercased"] == round(sacrebleu.corpus_bleu(hyps, [refs], lowercase=True).score, 2)
    assert t["low"] <= t["sacrebleu"] <= t["high"] and t["lowercased"] >= t["sacrebleu"]
    paired = t["against_published"]
    assert abs(paired["difference"] - (t["sacrebleu"] - t["published"]["sacrebleu"])) <= 0.011
    assert paired["low"] <= paired["difference"] <= paired["high"] and 0 < paired["p_value"] <= 1
    published = (tool.REPO / "src/aiayn/results/multi30k.test2016.hyp.en").read_text(encoding="utf-8")
    assert t["published"]["sacrebleu"] == round(sacrebleu.corpus_bleu(published.splitlines()[:30], [refs]).score, 2)
    assert text["config"] == json.loads((run / "config.json").read_text())
    assert text["measured_at"] == json.loads(run.with_name("laptop.hour.json").read_text())["finished_at"]
    assert len(text["val_loss_by_epoch"]) == 1 and text["steps"] > 0 and text["target_tokens_per_epoch"] > 0
    assert [e["line"] for e in text["examples"]] == [4, 6, 8, 14, 20, 26]
    assert all(e["laptop"] == hyps[e["line"]] for e in text["examples"])


def test_record_refuses_a_run_without_its_hour_or_of_another_preset(hour, root, tmp_path, capsys):
    tool, run, _ = hour
    with pytest.raises(SystemExit) as stop:
        tool.main(["record", str(tmp_path / "laptop"), "--out", str(tmp_path)])
    assert stop.value.code == 2 and "laptop.hour.json not found" in capsys.readouterr().err
    config = json.loads((run / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({**config, "name": "multi30k-smoke"}))
    (tmp_path / "other.hour.json").write_text("{}")
    with pytest.raises(SystemExit) as stop:
        tool.main(["record", str(other), "--out", str(tmp_path)])
    assert stop.value.code == 2 and "not a run of the laptop or the rnn-laptop preset" in capsys.readouterr().err
    assert not (tmp_path / "laptop.json").exists()


@pytest.fixture(scope="module")
def rnn_hour(tool, root, cache, tmp_path_factory):
    """A tiny recurrent config named ``rnn-laptop`` trained through the tool's ``train`` part."""
    return tiny_hour(tool, tmp_path_factory.mktemp("rnn-hour"), "rnn-smoke", "rnn-laptop")[0]


def test_the_recurrent_hour_is_recorded_beside_the_transformer_s(tool, rnn_hour, root, tmp_path, capsys):
    speed = tmp_path / "speed.json"
    speed.write_text(json.dumps({"ratio": {"median": 2.0}}))
    tool.main(["record", str(rnn_hour), "--speed", str(speed), "--data", str(root), "--out", str(tmp_path)])
    assert "test2016: sacreBLEU" in capsys.readouterr().out
    assert not (tmp_path / "laptop.json").exists()  # the Transformer's record is not touched
    text = json.loads((tmp_path / "rnn-laptop.json").read_text())
    hyps = (tmp_path / "rnn-laptop.test2016.hyp.en").read_text(encoding="utf-8").splitlines()
    assert text["preset"] == "rnn-laptop" and text["config"]["model"]["kind"] == "rnn"
    assert text["command"].startswith("python -m aiayn.train --config ") and "--out runs/rnn-laptop " in text["command"]
    assert text["speed"] == {"ratio": {"median": 2.0}}
    assert all(e["rnn-laptop"] == hyps[e["line"]] for e in text["examples"])
    refs = [en for _, en in load_multi30k("test2016", root, download=False)][:30]
    laptop = (tool.REPO / "src/aiayn/results/laptop.test2016.hyp.en").read_text(encoding="utf-8").splitlines()[:30]
    paired, t = text["test2016"]["against_laptop"], text["test2016"]
    difference = sacrebleu.corpus_bleu(hyps, [refs]).score - sacrebleu.corpus_bleu(laptop, [refs]).score
    assert t["sacrebleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert abs(paired["difference"] - difference) <= 0.011 and paired["low"] <= paired["difference"] <= paired["high"]


def test_speed_times_both_models_on_the_same_batches_taking_turns(tool, hour, root):
    _, run, _ = hour
    speed = tool.measure_speed(run, str(root), sample=3, rounds=2)
    assert set(speed["parameters"]) == {"laptop", "rnn-laptop"} and speed["threads"] == 2
    lengths = [b["target_len"] for b in speed["batches"]]
    assert len(lengths) == 3 and lengths == sorted(lengths) and speed["epoch_batches"] > 3
    assert all(b["laptop_s"] > 0 and b["rnn-laptop_s"] > 0 and b["target_tokens"] > 0 for b in speed["batches"])
    ratios = [r["ratio"] for r in speed["rounds"]]
    assert len(ratios) == 2 and all(abs(r["ratio"] - r["rnn-laptop_s"] / r["laptop_s"]) < 0.01 for r in speed["rounds"])
    assert speed["ratio"]["min"] == min(ratios) and speed["ratio"]["max"] == max(ratios)
    with pytest.raises(ValueError, match="sample must be 1.."):
        tool.measure_speed(run, str(root), sample=10_000, rounds=1)


def test_sizes_times_each_size_on_one_and_two_threads(tool):
    small = dict(list(tool.SIZES.items())[:1])
    rows = tool.measure_sizes(0.3, 1, small)
    assert [(r["size"], r["threads"]) for r in rows] == [(next(iter(small)), 1), (next(iter(small)), 2)]
    assert all(r["tokens_per_s"] > 0 and r["parameters"] > 0 for r in rows)


def test_a_stopped_hour_resumes_with_the_parts_added_and_a_finished_one_is_refused(tool, tmp_path, capsys):
    first = {"command": "c", "rc": 130, "wall_s": 100.0, "load_average": [[30, 1.5], [60, 2.0]]}
    second = {"command": "c", "rc": 0, "wall_s": 50.5, "load_average": [[30, 1.0]]}
    hour = tool.resumed(first, second)
    assert hour["wall_s"] == 150.5 and hour["rc"] == 0 and hour["parts"] == 2
    assert hour["load_average"] == [[30, 1.5], [60, 2.0], (130, 1.0)]
    assert tool.resumed(None, second)["parts"] == 1
    (tmp_path / "laptop.hour.json").write_text(json.dumps(second))
    with pytest.raises(SystemExit) as stop:
        tool.main(["train", "--out", str(tmp_path / "laptop")])
    assert stop.value.code == 2 and "holds a finished hour" in capsys.readouterr().err
    assert not (tmp_path / "laptop").exists()


def test_another_seed_is_the_preset_with_that_seed_alone(tool, tmp_path):
    config = json.loads(tool.seed_config(tmp_path / "seed2", 2).read_text())
    assert (tmp_path / "seed2.config.json").is_file() and not (tmp_path / "seed2").exists()
    assert config == {**get_preset("laptop").to_dict(), "seed": 2}
    config = json.loads(tool.seed_config(tmp_path / "rnn-1", 1, "rnn-laptop").read_text())
    assert config == {**get_preset("rnn-laptop").to_dict(), "seed": 1}


def test_record_scores_further_seeds_beside_the_first(hour, seed_1, root, tmp_path):
    tool, run, _ = hour
    tool.main(["record", str(run), "--seeds", str(seed_1), "--data", str(root), "--out", str(tmp_path)])
    text = json.loads((tmp_path / "laptop.json").read_text())
    other = text["seeds"]["others"][0]
    hyps = (seed_1 / "test2016.hyp.en").read_text(encoding="utf-8").splitlines()
    assert (tmp_path / "laptop-seed1.test2016.hyp.en").read_text(encoding="utf-8").splitlines() == hyps
    assert other["hypotheses"] == "laptop-seed1.test2016.hyp.en"
    refs = [en for _, en in load_multi30k("test2016", root, download=False)][:30]
    assert other["seed"] == 1 and other["sacrebleu"] == round(sacrebleu.corpus_bleu(hyps, [refs]).score, 2)
    assert other["low"] <= other["sacrebleu"] <= other["high"] and other["command"].endswith("--no-progress")
    assert other["command"].startswith("python -m aiayn.train --config runs/laptop-1.config.json --out runs/laptop-1 ")
    both = [text["test2016"]["sacrebleu"], other["sacrebleu"]]
    assert text["seeds"]["sacrebleu"] == {"0": both[0], "1": both[1]}
    assert text["seeds"]["mean"] == round(sum(both) / 2, 2) and text["seeds"]["max"] == max(both)


def test_record_refuses_a_seed_that_is_not_the_same_recipe(hour, seed_1, root, tmp_path, capsys):
    tool, run, _ = hour
    other = tmp_path / "other"  # seed 1 with another label smoothing
    shutil.copytree(seed_1, other)
    shutil.copy(seed_1.with_name("laptop-1.hour.json"), tmp_path / "other.hour.json")
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "label_smoothing": 0.2}))
    for bad in (run, other):  # the first run again, then another recipe
        with pytest.raises(SystemExit) as stop:
            tool.main(["record", str(run), "--seeds", str(bad), "--data", str(root), "--out", str(tmp_path)])
        assert stop.value.code == 2 and "not another seed of the recorded run" in capsys.readouterr().err
    assert not (tmp_path / "laptop.json").exists()
