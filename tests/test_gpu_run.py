"""tools/gpu_run.py: the 15-minute GPU script, run at toy size on the CPU (``--cpu-smoke``).

Every part runs end to end; a SIGTERM in the middle of a part stops the script, and the next run
skips the parts done and does the interrupted one again. The budget's arithmetic is checked on the
dry run; what a part measures on a GPU is not checked here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "gpu_run.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("gpu_run_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def run_main(tool, argv: list[str]) -> int:
    try:
        return tool.main(argv)
    except SystemExit as stop:
        return stop.code


def test_dry_run_fits_the_budget(tool, tmp_path, capsys):
    assert run_main(tool, ["--out", str(tmp_path), "--dry-run", "--budget-minutes", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == [p.name for p in tool.PARTS]
    total = 0.0
    for line, part in zip(lines, tool.PARTS, strict=True):
        total += tool.ESTIMATE_MIN[part.name]
        assert line.endswith("fits" if total <= 10 else "beyond the budget")
    assert not list(tmp_path.iterdir())  # a dry run writes nothing
    assert run_main(tool, ["--out", str(tmp_path), "--dry-run", "--parts", "6,t4_fp16"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["t4_fp16", "seed2", "seed3"]
    assert run_main(tool, ["--out", str(tmp_path), "--dry-run", "--parts", "8"]) == 0
    assert [line.split()[1] for line in capsys.readouterr().out.splitlines()] == ["rnn_seed2", "rnn_seed3"]
    assert run_main(tool, ["--out", str(tmp_path), "--dry-run", "--parts", "10"]) == 2
    assert "unknown ['10']" in capsys.readouterr().err


def test_the_turns_on_a_gpu_differ_only_in_what_they_time(tool):
    """Part 7's contenders on a GPU: the preset as it trains, with the graphs' padding, with the graphs; the RNN."""
    from aiayn.runs.presets import get_preset
    from aiayn.train import GRAPHED_PAD_ROWS, GRAPHED_PAD_TO

    turns = tool.contenders(smoke=False)
    assert list(turns) == ["plain", "padded", "graphs", "rnn"]
    assert all(cfg.max_steps == tool.TURN_STEPS for cfg in turns.values())
    plain = get_preset("multi30k", max_steps=tool.TURN_STEPS)
    assert turns["plain"] == plain and turns["rnn"] == get_preset("rnn", max_steps=tool.TURN_STEPS)
    padding = {"pad_to": GRAPHED_PAD_TO, "pad_rows": GRAPHED_PAD_ROWS}
    assert turns["padded"] == plain.with_changes(**padding)
    assert turns["graphs"] == plain.with_changes(cuda_graphs=True, **padding)
    # a turn is two epochs of multi30k, the first not counted: its epoch as the H200 run counted it
    run = json.loads((REPO / "src/aiayn/results/gpu_run.h200.json").read_text())["parts"]["multi30k"]["result"]
    assert run["steps"] == 40 * tool.TURN_SKIP and run["epochs_done"] == 40 and tool.TURN_STEPS == 2 * tool.TURN_SKIP


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without CUDA")
def test_refuses_without_cuda(tool, tmp_path, capsys):
    assert run_main(tool, ["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "--cpu-smoke" in err
    assert not (tmp_path / "out").exists()


def _wait_for(path: Path, part: str, status: str, child: subprocess.Popen, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert child.poll() is None, "gpu_run.py ended before the part began"
        try:
            if json.loads(path.read_text())["parts"].get(part, {}).get("status") == status:
                return
        except (FileNotFoundError, json.JSONDecodeError):
            pass
        time.sleep(0.2)
    pytest.fail(f"{part} did not become {status} within {timeout} s")


def test_cpu_smoke_runs_every_part_and_resumes_after_a_stop(tool, root, cache, tmp_path):
    out = tmp_path / "out"
    argv = ["--out", str(out), "--cpu-smoke", "--data", str(root)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.Popen([sys.executable, str(TOOL), *argv], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    status = out / "gpu_run.json"
    _wait_for(status, "t4_fp16", "started", child)
    time.sleep(1.0)  # into its command
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=300)
    assert child.returncode == 128 + signal.SIGTERM, err
    stopped = json.loads(status.read_text())["parts"]
    assert [stopped[p]["status"] for p in ("gpu_check", "multi30k", "one_batch", "rnn", "t4_fp16")] == [
        "done", "done", "done", "done", "started"]  # fmt: skip
    assert "seed2" not in stopped

    assert run_main(tool, argv) == 0  # goes on
    parts = json.loads(status.read_text())["parts"]
    assert all(part["status"] == "done" for part in parts.values()) and list(parts) == [p.name for p in tool.PARTS]
    for name in ("gpu_check", "multi30k", "one_batch", "rnn"):  # done before the stop: not run again
        assert parts[name] == stopped[name]
    assert parts["t4_fp16"]["started"] >= stopped["t4_fp16"]["started"]
    assert parts["gpu_check"]["result"]["passed"] is True
    assert json.loads((out / "gpu_check.json").read_text())["passed"] is True
    for name in ("multi30k", "rnn", "t4_fp16", "seed2", "seed3", "rnn_seed2", "rnn_seed3"):
        result = parts[name]["result"]
        assert result["steps"] == tool.SMOKE_STEPS and result["test2016"]["sentences"] == tool.SMOKE_SENTENCES
        assert result["val_ppl"] > 1 and 0 <= result["test2016"]["sacrebleu"] <= 100
    seeds = [json.loads((out / f"{name}.config.json").read_text())["seed"] for name in ("multi30k", "seed2", "seed3")]
    assert seeds == [0, 1, 2]
    assert json.loads((out / "rnn" / "config.json").read_text())["name"] == "rnn-smoke"  # the RNN, at toy size
    rnn_seeds = [json.loads((out / f"{name}.config.json").read_text()) for name in ("rnn", "rnn_seed2", "rnn_seed3")]
    assert [(c["name"], c["seed"]) for c in rnn_seeds] == [("rnn-smoke", 0), ("rnn-smoke", 1), ("rnn-smoke", 2)]
    for last, family in (("seed3", ("multi30k", "seed2", "seed3")), ("rnn_seed3", ("rnn", "rnn_seed2", "rnn_seed3"))):
        three = parts[last]["result"]["three_seeds"]
        assert three["sacrebleu"] == [parts[n]["result"]["test2016"]["sacrebleu"] for n in family]
        assert three["mean"] == pytest.approx(sum(three["sacrebleu"]) / 3)
    three = parts["seed3"]["result"]["three_seeds"]
    # the turns: two rounds of the contenders a CPU has (no CUDA graphs), in the same order, each step timed
    turns = parts["turns"]["result"]
    assert [(r["round"], r["contender"]) for r in turns["rows"]] == [
        (n, c) for n in (1, 2) for c in ("plain", "padded", "rnn")]  # fmt: skip
    for row in turns["rows"]:
        assert row["steps"] == tool.SMOKE_STEPS and row["counted_steps"] == tool.SMOKE_STEPS - 1
        assert row["preset"] == ("rnn-smoke" if row["contender"] == "rnn" else "multi30k-smoke")
        assert 0 < row["median_step_ms"] and row["cuda_graphs"] is False
    assert [r["pad_to"] is None for r in turns["rows"][:3]] == [True, False, True]  # padded: the graphs' padding
    by = {(r["round"], r["contender"]): r["median_step_ms"] for r in turns["rows"]}
    assert turns["ratios"] == {
        "padding_cost": [round(by[n, "padded"] / by[n, "plain"], 3) for n in (1, 2)],
        "rnn_over_plain": [round(by[n, "rnn"] / by[n, "plain"], 3) for n in (1, 2)],
    }  # no graphs_gain without graphs
    assert not (out / "turns" / "round1-plain").exists()  # only the times are kept
    assert parts["one_batch"]["result"]["sentences"] == tool.SMOKE_SENTENCES
    assert parts["table3"]["result"]["runs"] == parts["table3"]["result"]["planned"] == 2
    assert (out / "t4_fp16.log").read_text().count("$ ") == 2  # started twice

    # gpu_record.py makes the run's record: each training part's translations scored again
    record_tool = REPO / "tools" / "gpu_record.py"
    done = subprocess.run([sys.executable, str(record_tool), str(out), "--commit", "abc1234", "--command", "x",
                           "--data", str(root), "--out", str(tmp_path / "results")],
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "results" / "gpu_run.cpu.json").read_text())
    assert set(record["parts"]) == set(parts) and record["commit"] == "abc1234"
    assert all(entry["at_the_same_time_as"] == [] for entry in record["parts"].values())  # one after another
    for name in ("multi30k", "rnn", "t4_fp16", "seed2", "seed3", "rnn_seed2", "rnn_seed3"):
        entry = record["parts"][name]
        hyps = (tmp_path / "results" / entry["hypotheses"]).read_text().splitlines()
        assert len(hyps) == tool.SMOKE_SENTENCES
        assert entry["test2016_interval"]["sacrebleu"] == round(parts[name]["result"]["test2016"]["sacrebleu"], 2)
        assert len(entry["val_loss_by_epoch"]) == parts[name]["result"]["epochs_done"]
    assert record["parts"]["rnn"]["preset"] == "rnn-smoke"
    assert record["three_seeds"]["mean"] == round(three["mean"], 2)
    assert record["rnn_three_seeds"]["mean"] == round(parts["rnn_seed3"]["result"]["three_seeds"]["mean"], 2)
    assert set(record["rnn_against_multi30k"]) == {"difference", "low", "high", "p_value"}
    assert record["parts"]["turns"]["result"]["ratios"] == turns["ratios"]

    # a later machine's parts are added to the record: here the same folder, split in two
    first, later = tmp_path / "first", tmp_path / "later"
    for folder, names in ((first, ("multi30k", "seed2", "rnn", "gpu_check")), (later, ("seed3", "rnn_seed2"))):
        folder.mkdir()
        status_of = {"format": "aiayn-gpu-run/1", "parts": {n: parts[n] for n in names}}
        (folder / "gpu_run.json").write_text(json.dumps(status_of))
        for name in names:
            if (out / name).is_dir():
                (folder / name).symlink_to(out / name)

    def record_tool_on(folder, *more):
        return subprocess.run([sys.executable, str(record_tool), str(folder), "--commit", folder.name, "--command",
                               folder.name, "--data", str(root), "--out", str(tmp_path / "two"), *more],
                              capture_output=True, text=True, env=env)  # fmt: skip

    assert record_tool_on(first).returncode == 0
    path = tmp_path / "two" / "gpu_run.cpu.json"
    alone = json.loads(path.read_text())
    assert "three_seeds" not in alone and "later" not in alone
    done = record_tool_on(later, "--add-to", str(path))
    assert done.returncode == 0, done.stderr
    both = json.loads(path.read_text())
    assert both["commit"] == "first" and both["later"] == [{
        "parts": ["seed3", "rnn_seed2"], "torch": alone["torch"], "commit": "later", "commands": ["later"],
        "measured_at": parts["seed3"]["started"][:10]}]  # fmt: skip
    assert {n: both["parts"][n] for n in alone["parts"]} == alone["parts"]  # the first machine's, as they were
    assert both["three_seeds"] == record["three_seeds"] and "rnn_three_seeds" not in both
    assert both["rnn_against_multi30k"] == record["rnn_against_multi30k"]
    again = record_tool_on(later, "--add-to", str(path))  # the same parts twice: refused, the record unchanged
    assert again.returncode == 2 and "has rnn_seed2, seed3 already" in again.stderr
    assert json.loads(path.read_text()) == both
