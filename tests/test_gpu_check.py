"""tools/gpu_check.py on the CPU: the training loop's promises with every Adam implementation and amp mode.

What a run logs as its validation loss equals what its saved weights give in a fresh process, and
what it translates while training equals what ``load_run`` translates; with fused, foreach and
for-loop Adam, float32, bfloat16 autocast and float16 with ``GradScaler("cpu")``. A GPU run takes
these branches on CUDA (fused Adam, bfloat16 or float16); the CPU runs their twins.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "gpu_check.py"


def run_tool(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, env=env, check=False)


def test_the_quick_check_passes_on_the_cpu_with_every_optimizer_and_amp_mode(tmp_path, root, cache):
    out = tmp_path / "check.json"
    done = run_tool("--device", "cpu", "--quick", "--out", str(out), "--data", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["passed"] and report["device"] == "cpu" and report["quick"]
    modes = {(p["adam"], p["amp"]) for p in report["promises"]}
    assert modes == {("fused", None), ("foreach", None), ("for-loop", None), ("fused", "bf16"), ("fused", "fp16")}
    for promise in report["promises"]:
        assert promise["epochs"] == 3 and promise["identical"] == promise["translations"] == 64
        assert promise["val_loss_logged"] == pytest.approx(promise["val_loss_fresh"], rel=1e-6)
        assert set(promise["phases_s"]) == {"start_up", "batches", "steps", "validation", "checkpoints"}
        assert all(t >= 0 for t in promise["phases_s"].values())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "tpu", "--out", "x.json"], "error: --device must be cuda or cpu, got 'tpu'"),
        (["--device", "cpu"], "error: --out is required"),
    ],
)
def test_bad_arguments_end_in_one_line(args, message, tmp_path):
    done = run_tool(*args)
    assert done.returncode == 2 and done.stderr.strip().startswith(message), done.stderr


def test_a_folder_as_out_is_refused(tmp_path):
    done = run_tool("--device", "cpu", "--out", str(tmp_path))
    assert done.returncode == 2 and f"error: --out {tmp_path} is a folder" in done.stderr


def test_a_timed_run_carries_the_estimate_of_its_gpu():
    """Beside a timed run the check writes what estimate_minutes foretold on that GPU; none on a CPU."""
    import importlib.util
    from dataclasses import replace

    from aiayn.estimate import estimate_minutes
    from aiayn.presets import get_preset

    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    four = replace(get_preset("multi30k"), epochs=4, average_last=1)  # the check's 4-epoch run
    seconds = tool._estimate_s(four, "NVIDIA H100 80GB HBM3")
    assert seconds == pytest.approx(60 * estimate_minutes(four, "H100").minutes)
    assert seconds < tool._estimate_s(replace(four, epochs=8), "NVIDIA H100 80GB HBM3")
    assert tool._estimate_s(four, "AMD EPYC 7B13 64-Core Processor") is None
