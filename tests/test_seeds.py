"""tools/seeds.py: several seeds of a preset trained at once, each scored, their mean and spread.

Its --out follows a run folder's rules: new, empty or written by seeds.py itself (its manifest lists
what it wrote), held under a lock, no other file replaced; every error is one line naming the file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn.runs.folder import RunFolder
from aiayn.runs.presets import get_preset

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "seeds.py"
# the seeds of the module's run; each test that reruns it uses these arguments
SMOKE = ["--preset", "multi30k-smoke", "--seeds", "3", "5", "--device", "cpu", "--set", "epochs=1",
         "--set", "test_subset=20"]  # fmt: skip

# Writes beyond FSIZE bytes fail for real (EFBIG, as ENOSPC on a full disk), as in test_careless_user
FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_tool(*args: str, full_disk: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    limit = [] if full_disk is None else ["-c", FULL_DISK, str(full_disk)]
    return subprocess.run([sys.executable, *limit, str(TOOL), *args], capture_output=True, text=True, env=env,
                          check=False)  # fmt: skip


@pytest.fixture(scope="module")
def tool():
    """tools/seeds.py as a module, to run its ``main`` in this process (no second start of torch)."""
    spec = importlib.util.spec_from_file_location("seeds_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_main(tool, argv: list[str], capsys) -> subprocess.CompletedProcess:
    """``main(argv)`` in this process, as the command's exit status and output."""
    try:
        status = tool.main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    said = capsys.readouterr()
    return subprocess.CompletedProcess(argv, status, said.out, said.err)


def one_error(done: subprocess.CompletedProcess, status: int = 2) -> str:
    """The one ``error:`` line of a refusal (no traceback), without its newline."""
    assert done.returncode == status, done.stdout + done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr.rstrip("\n")


def contents(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (``None`` for a folder)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}  # fmt: skip


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, root, cache) -> tuple[Path, subprocess.CompletedProcess]:
    """Two seeds of one epoch, trained at once into a new folder by seeds.py, and what it printed."""
    out = tmp_path_factory.mktemp("seeds") / "seeds"
    done = run_tool(*SMOKE, "--out", str(out), "--data", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done


def test_two_seeds_are_trained_at_once_and_scored(seeded):
    out, done = seeded
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
    # every file it wrote is listed as its own; the seeds' runs are the train command's folders
    listed = RunFolder(out).manifest()["files"]
    assert sorted(listed) == ["seed-3.json", "seed-3.log", "seed-5.json", "seed-5.log", "seeds.json"]
    assert RunFolder(out).foreign_files() == ["seed-3", "seed-5"]


def test_the_same_command_again_resumes_the_runs_and_scores_them_again(seeded, root, tmp_path):
    out = shutil.copytree(seeded[0], tmp_path / "seeds")
    before = json.loads((out / "seeds.json").read_text())
    done = run_tool(*SMOKE, "--out", str(out), "--data", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    after = json.loads((out / "seeds.json").read_text())
    assert [r["sacrebleu"] for r in after["seeds"].values()] == [r["sacrebleu"] for r in before["seeds"].values()]
    assert [r["steps"] for r in after["seeds"].values()] == [50, 50]  # no step trained twice


def test_a_second_command_into_the_same_out_fails_at_once(seeded, root):
    out = seeded[0]
    before = contents(out)
    folder = RunFolder(out)
    with folder.locked():  # as the first seeds.py holds it while its runs train
        done = run_tool(*SMOKE, "--out", str(out), "--data", str(root))
    assert one_error(done) == (f"error: another command is writing into {out} (it holds {out / '.lock'}); "
                               "wait for it to finish, or use another folder")  # fmt: skip
    assert contents(out) == before


def _notes(out: Path) -> str:
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    return (f"error: --out {out} holds files seeds.py did not write (notes.txt) and no manifest.json of its "
            "own; give seeds.py a new or empty folder (it writes only into one it made)")  # fmt: skip


def _a_seeds_json(out: Path) -> str:
    out.mkdir()
    (out / "seeds.json").write_text('{"my": "results"}\n')
    return (f"error: --out {out} holds files seeds.py did not write (seeds.json) and no manifest.json of its "
            "own; give seeds.py a new or empty folder (it writes only into one it made)")  # fmt: skip


def _a_training_run(out: Path) -> str:
    cfg = get_preset("multi30k-smoke")
    run = RunFolder(out)
    with run.locked():
        run.start(cfg)
        run.set_config(cfg)
    return (f"error: --out {out} is a folder of another command ({out / 'manifest.json'} lists config.json); "
            "give seeds.py a new or empty folder (it writes only into one it made)")  # fmt: skip


def _a_file(out: Path) -> str:
    out.write_text("mine\n")
    return f"error: --out {out} is a file or a link; expected a folder for the seeds' runs"


@pytest.mark.parametrize("make", [_notes, _a_seeds_json, _a_training_run, _a_file])
def test_an_out_seeds_did_not_write_is_refused_and_left_alone(make, tmp_path, root, tool, capsys):
    out = tmp_path / "s"
    message = make(out)
    before = contents(tmp_path)
    done = run_main(tool, [*SMOKE, "--out", str(out), "--data", str(root)], capsys)
    assert one_error(done) == message
    assert contents(tmp_path) == before  # not even a .lock


@pytest.mark.parametrize("change", ["a file beside", "its seeds.json edited"])
def test_in_its_own_out_a_file_seeds_did_not_write_is_left_alone(change, seeded, root, tmp_path, tool, capsys):
    out = shutil.copytree(seeded[0], tmp_path / "seeds")
    if change == "a file beside":
        (out / "notes.txt").write_text("mine\n")
        message = (f"error: --out {out} holds files seeds.py did not write (notes.txt); they are left alone: "
                   "move them out of the folder, or use another --out")  # fmt: skip
    else:
        (out / "seeds.json").write_text('{"my": "results"}\n')
        message = (f"error: {out / 'seeds.json'} is not the file seeds.py wrote (its size or SHA-256 differs "
                   "from manifest.json); it is left alone: move it out of the folder, or use another --out")
    before = contents(out)
    done = run_main(tool, [*SMOKE, "--out", str(out), "--data", str(root)], capsys)
    assert one_error(done) == message
    assert contents(out) == before


def test_a_full_disk_is_one_error_line_naming_the_file(tmp_path, root):
    out = tmp_path / "seeds"
    done = run_tool(*SMOKE, "--out", str(out), "--data", str(root), full_disk=400)  # the manifest fits
    assert one_error(done, status=1) == (
        f"error: {out / 'seed-3.json'}: no room to write it (File too large); free some space, then run the "
        "same command again (it resumes the seeds' runs)"
    )
    assert sorted(p.name for p in out.iterdir()) == [".lock", "manifest.json"]  # no temporary file left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "1", "1"], "--seeds must be distinct integers >= 0, got [1, 1]"),
        (["--set", "max_steps"], "--set expects NAME=VALUE, e.g. max_steps=20, got 'max_steps'"),
        (["--set", "nope=3"], "unknown TrainConfig fields"),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--data", str(TOOL)], f"error: the Multi30k folder {TOOL} is a file; expected the folder"),
        (["--device", "nope"], "error: device 'nope' cannot be used here"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(args, message, tmp_path, tool, capsys):
    done = run_main(tool, ["--out", str(tmp_path / "seeds"), *args], capsys)
    assert message in one_error(done)
    assert not (tmp_path / "seeds").exists()
