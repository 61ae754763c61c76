"""tools/gpu_check.py on the CPU: the training loop's promises with every Adam implementation and amp mode.

What a run logs as its validation loss equals what its saved weights give in a fresh process, and
what it translates while training equals what ``load_run`` translates; with fused, foreach and
for-loop Adam, float32, bfloat16 autocast and float16 with ``GradScaler("cpu")``. A GPU run takes
these branches on CUDA (fused Adam, bfloat16 or float16); the CPU runs their twins.
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

from aiayn.runs.folder import RunFolder

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "gpu_check.py"


# Writes beyond FSIZE bytes fail for real (EFBIG, as ENOSPC on a full disk), as in test_careless_user
FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_tool(*args: str, env: dict | None = None, full_disk: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    limit = [] if full_disk is None else ["-c", FULL_DISK, str(full_disk)]
    return subprocess.run([sys.executable, *limit, str(TOOL), *args], capture_output=True, text=True, env=env,
                          check=False)  # fmt: skip


@pytest.fixture(scope="module")
def tool():
    """tools/gpu_check.py as a module, to run its ``main`` in this process (no second start of torch)."""
    spec = importlib.util.spec_from_file_location("gpu_check_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(tool, argv: list[str], capsys) -> tuple[int, str]:
    """``main(argv)`` in this process: the exit status and what went to stderr."""
    try:
        status = tool.main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    return status, capsys.readouterr().err


def one_line(err: str) -> str:
    """The one ``error:`` line (no traceback), without its newline."""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err.rstrip("\n")


def test_the_quick_check_passes_on_the_cpu_with_every_optimizer_and_amp_mode(tmp_path, root, cache):
    out = tmp_path / "check.json"
    earlier = {"device": "cuda", "device_name": "NVIDIA H100", "torch": "2.5", "quick": False, "promises": []}
    out.write_text(json.dumps(earlier))  # a report of an earlier check, from before reports had a format
    done = run_tool("--device", "cpu", "--quick", "--out", str(out), "--data", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["passed"] and report["device"] == "cpu" and report["quick"]
    assert report["format"] == "aiayn-gpu-check/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["check.json"]  # nothing else, no temporary file
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
        (["--device", "cpu", "--out", "x.json", "--data", str(TOOL)],
         f"error: the Multi30k folder {TOOL} is a file; expected the folder"),
        (["--device", "cpu", "--out", "x.json", "--bogus"], "error: unrecognized arguments: --bogus"),
    ],
)
def test_bad_arguments_end_in_one_line(args, message, tool, capsys):
    status, err = run_main(tool, args, capsys)
    assert status == 2 and one_line(err).startswith(message), err
    assert not Path("x.json").exists()


def test_a_folder_as_out_is_refused(tmp_path):
    done = run_tool("--device", "cpu", "--out", str(tmp_path))
    assert done.returncode == 2 and f"error: --out {tmp_path} is a folder" in done.stderr


def _a_text(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "notes.json").write_text('{"my": "notes"}\n')
    return tmp_path / "notes.json", ('exists and is not a report of gpu_check.py (no "format": '
                                     '"aiayn-gpu-check/1"); it is left alone: give a new file name')


def _a_link(tmp_path: Path) -> tuple[Path, str]:
    (tmp_path / "old.json").write_text('{"format": "aiayn-gpu-check/1"}\n')
    (tmp_path / "link.json").symlink_to(tmp_path / "old.json")
    return tmp_path / "link.json", "is a symbolic link; give the name of a plain file (the link is left alone)"


def _a_runs_config(tmp_path: Path) -> tuple[Path, str]:
    run = RunFolder(tmp_path / "run")
    with run.locked():
        run.start(None)
        run.write_json("config.json", {"seed": 1})
    return run.file("config.json"), (f"is inside the run folder {run.path}, which holds only what its "
                                     "commands write; write the check elsewhere")


def _a_new_file_in_a_run(tmp_path: Path) -> tuple[Path, str]:
    out, message = _a_runs_config(tmp_path)
    return out.parent / "sub" / "check.json", message


@pytest.mark.parametrize("make", [_a_text, _a_link, _a_runs_config, _a_new_file_in_a_run])
def test_a_file_the_check_did_not_write_is_left_alone(make, tmp_path, tool, capsys):
    out, message = make(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    status, err = run_main(tool, ["--device", "cpu", "--quick", "--out", str(out)], capsys)
    assert status == 2 and one_line(err) == f"error: --out {out} {message}"
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_a_full_disk_is_one_error_line_naming_the_file(tmp_path, root):
    out = tmp_path / "check.json"
    done = run_tool("--device", "cpu", "--quick", "--out", str(out), "--data", str(root), full_disk=100)
    assert done.returncode == 1 and one_line(done.stderr) == (
        f"error: {out}: no room to write it (File too large); free some space, then run the check again"
    )
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_a_second_check_fails_at_once_and_ctrl_c_says_only_what_is_true(tmp_path, root, cache):
    """Ctrl-C while a run trains: its checkpoint goes with the temporary folder, and the message says so."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(temporary)}
    first = subprocess.Popen([sys.executable, str(TOOL), "--device", "cpu", "--quick", "--out",
                              str(tmp_path / "a.json"), "--data", str(root)], env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip

    def wait_for(ready) -> None:
        deadline = time.monotonic() + 120
        while not ready():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.05)

    try:
        wait_for((tmp_path / "a.json").exists)  # written under the lock, before the first run
        second = run_tool("--device", "cpu", "--quick", "--out", str(tmp_path / "b.json"), "--data", str(root))
        # a run has logged a step: the train code saves a checkpoint on a signal, into the temporary folder
        wait_for(lambda: [p for p in temporary.glob("gpu-check-*/runs/smoke-*/metrics.jsonl") if p.stat().st_size])
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert second.returncode == 2 and one_line(second.stderr) == (
        f"error: another gpu_check.py is writing into {tmp_path}; wait for it to finish, or write into "
        "another folder"
    )
    done = len(json.loads((tmp_path / "a.json").read_text())["promises"])  # 0 unless the machine is slow
    held = f"the {done} run{'s' * (done > 1)} checked before" if done else "none of its runs yet"
    assert first.returncode == 130 and one_line(err) == (
        "error: interrupted (Ctrl-C); its runs were in a temporary folder, now removed (the check does not "
        f"resume: run it again to start afresh); {tmp_path / 'a.json'} holds {held}"
    )
    assert not list(temporary.glob("gpu-check-*")) and not (tmp_path / "b.json").exists()


def test_a_timed_run_carries_the_estimate_of_its_gpu():
    """Beside a timed run the check writes what estimate_minutes foretold on that GPU; none on a CPU."""
    import importlib.util
    from dataclasses import replace

    from aiayn.bench.estimate import estimate_minutes
    from aiayn.runs.presets import get_preset

    spec = importlib.util.spec_from_file_location("gpu_check", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    four = replace(get_preset("multi30k"), epochs=4, average_last=1)  # the check's 4-epoch run
    seconds = tool._estimate_s(four, "NVIDIA H100 80GB HBM3")
    assert seconds == pytest.approx(60 * estimate_minutes(four, "H100").minutes)
    assert seconds < tool._estimate_s(replace(four, epochs=8), "NVIDIA H100 80GB HBM3")
    assert tool._estimate_s(four, "AMD EPYC 7B13 64-Core Processor") is None
