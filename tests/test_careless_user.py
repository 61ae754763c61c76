"""What a careless user finds (issue 34), each on real processes: commands run as subprocesses.

Two evaluations racing into one folder, files that are not what their name says, sentences of
invisible characters, a disk that fills while a file is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_runs import PUBLISHED, TINY, copy_run

from aiayn.bleu import corpus_bleu
from aiayn.data.multi30k import load_multi30k
from aiayn.decoding.translate import is_blank, source_ids, translate
from aiayn.runs.folder import RunFolder
from aiayn.runs.load import average_checkpoints
from aiayn.runs.published import load_published
from aiayn.runs.recipes import train
from aiayn.runs.scoring import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]


def env(cache: Path) -> dict[str, str]:
    """A child's environment: this package, one thread, the test's tokenizer cache."""
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1",
            "XDG_CACHE_HOME": str(cache)}  # fmt: skip


def one_error(done: subprocess.CompletedProcess, *words: str) -> str:
    """One ``error:`` line, no traceback, status 2, saying ``words``; returns the line."""
    err = done.stderr
    assert done.returncode == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, root, cache) -> tuple[Path, Path]:
    """Two tiny runs of one epoch, of other seeds: their translations differ."""
    folder = tmp_path_factory.mktemp("two")
    runs = folder / "a", folder / "b"
    for seed, run in enumerate(runs):
        train(TINY.with_changes(epochs=1, seed=seed), run, root=root, device="cpu", progress=False)
    return runs


# --- A. Two evaluations into one folder at once ----------------------------------------------------

LIMIT = 60  # sentences: decoding them takes far longer than the two processes' start differs
# The child imports everything, says it is ready, and waits for the word to go: the two start
# decoding within milliseconds, so both pass the checks made before decoding.
AT_ONCE = """
import sys, time
from pathlib import Path
import aiayn.evaluate
ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.002)
aiayn.evaluate.main(sys.argv[3:])
"""


def at_once(commands: list[list[str]], folder: Path, environ: dict) -> list[subprocess.CompletedProcess]:
    """Run ``python -m aiayn.evaluate`` with each list of arguments, all starting at once."""
    go = folder / "go"
    processes = []
    for i, argv in enumerate(commands):
        ready = folder / f"ready-{i}"
        processes.append((ready, subprocess.Popen(
            [sys.executable, "-c", AT_ONCE, str(ready), str(go), *argv],
            env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )))  # fmt: skip
    for ready, p in processes:
        while not ready.exists():
            assert p.poll() is None, p.communicate()
    go.touch()
    done = []
    for _, p in processes:
        out, err = p.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


def scored(stdout: str) -> float:
    """Our BLEU as the command printed it."""
    line = next(line for line in stdout.splitlines() if line.startswith("our BLEU:"))
    return float(line.split()[2])


def check_listed(folder: Path) -> dict:
    """Every file the manifest lists is there, as written; returns the manifest."""
    run = RunFolder(folder)
    for name in run.manifest()["files"]:
        run.read_verified(name)
    assert run.manifest()["pending"] == {}
    return run.manifest()


def test_two_runs_evaluated_into_one_new_folder_at_once_never_mix(two_runs, tmp_path, root, cache):
    out = tmp_path / "scores"
    commands = [[str(run), "--out", str(out), "--device", "cpu", "--data", str(root), "--limit", str(LIMIT)]
                for run in two_runs]  # the same setting: one entry, one translations file  # fmt: skip
    done = at_once(commands, tmp_path, env(cache))
    won = [i for i, d in enumerate(done) if d.returncode == 0]
    assert len(won) == 1, [d.stderr for d in done]
    winner, loser = done[won[0]], done[1 - won[0]]
    winner_run = two_runs[won[0]]
    # found under the lock when saving: "(another command wrote there while this one decoded; nothing
    # was saved)"; or, if the winner saved before the loser even started, before decoding
    one_error(loser, f"--out {out} holds the results of another run (")
    assert "saved as" in winner.stdout and "saved as" not in loser.stdout
    # the folder holds the winner's results alone, labelled as the winner's
    manifest = check_listed(out)
    assert manifest["results_of"] == RunFolder(winner_run).run_id()
    results = json.loads((out / "results.json").read_text())
    (setting,) = results
    assert f"saved as {setting!r}" in winner.stdout
    assert results[setting]["bleu"] == pytest.approx(scored(winner.stdout), abs=0.005)
    hypotheses = (out / results[setting]["hypotheses_file"]).read_text().splitlines()
    references = [en for _, en in load_multi30k("test2016", root)[:LIMIT]]
    assert corpus_bleu(hypotheses, references).score == pytest.approx(scored(winner.stdout), abs=0.005)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [".lock", "manifest.json", "results.json", results[setting]["hypotheses_file"]]
    )


def test_one_run_evaluated_twice_at_once_keeps_both_settings(two_runs, tmp_path, root, cache):
    run = copy_run(two_runs[0], tmp_path / "run")
    evaluate(run, device="cpu", root=root)  # results.json holds the run's own setting
    commands = [[str(run), "--device", "cpu", "--data", str(root), "--limit", str(LIMIT), "--beam", beam]
                for beam in ("1", "2")]  # fmt: skip
    done = at_once(commands, tmp_path, env(cache))
    assert [d.returncode for d in done] == [0, 0], [d.stderr for d in done]
    manifest = check_listed(run)
    results = json.loads((run / "results.json").read_text())
    assert len(results) == 3 and "test2016" in results
    for d in done:
        (setting,) = (s for s in results if f"saved as {s!r}" in d.stdout)
        assert results[setting]["bleu"] == pytest.approx(scored(d.stdout), abs=0.005)
        assert results[setting]["hypotheses_file"] in manifest["files"]


# --- C. Sentences of invisible characters are blank ------------------------------------------------

# whitespace to str.isspace (non-breaking, ideographic, narrow no-break space, line separator) and
# the zero-width characters: none of them is anything to translate
INVISIBLE = ["", " ", "\t\n", "\u00a0", "\u00a0 \u00a0", "\u3000", "\u202f", "\u2028", "\u200b", "\u200c\u200d",
             "\u2060", "\ufeff", " \u200b\u00a0\t"]  # fmt: skip


def test_whitespace_and_zero_width_characters_alone_are_blank():
    assert all(is_blank(s) for s in INVISIBLE)
    assert not any(is_blank(s) for s in ["a", "\u00a0a\u00a0", "\u200bx", ".", "\U0001f600", "\u2047"])


def test_a_sentence_of_invisible_characters_translates_to_nothing(published):
    model, tokenizer = published  # for "\u00a0" it invented "There are a three people on a mill."
    got = translate(model, tokenizer, ["Ein Hund.", *INVISIBLE, "Zwei Männer."], beam=1)
    assert got[1:-1] == [""] * len(INVISIBLE)
    assert got[0] and got[-1]
    assert source_ids(tokenizer, INVISIBLE, model.config.max_len) == [None] * len(INVISIBLE)


# --- D. A full disk -----------------------------------------------------------------------------------

# Writes beyond FSIZE bytes fail for real (EFBIG, as ENOSPC on a full disk): the child ignores the
# signal that would kill it, as a process on a full disk gets an error and goes on.
FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
sys.argv = sys.argv[2:]
if sys.argv[0].endswith(".py"):
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""

# each way aiayn writes a file: a file of the run (finish() inside the block, then the manifest),
# atomic_write, a large write
WRITES = """
import sys
from pathlib import Path
from aiayn.files import AtomicWriter, atomic_write
from aiayn.runs.folder import RunFolder
folder = Path(sys.argv[1])
run = RunFolder(folder / "run")
with run.locked():
    run.start(None)
    try:
        run.write("results.json", "x" * 5000)
    except OSError as err:
        print(err)
try:
    atomic_write(folder / "a.json", "x" * 5000)
except OSError as err:
    print(err)
try:
    with AtomicWriter(folder / "b.pt") as w:
        w.write(b"x" * 100_000)
except OSError as err:
    print(err)
"""


def full_disk(size: int, argv: list[str], cache: Path) -> subprocess.CompletedProcess:
    """``python -m argv...`` (or ``python argv...``) on a disk that takes at most ``size`` bytes a file."""
    command = [sys.executable, "-c", FULL_DISK, str(size), *argv]
    return subprocess.run(command, env=env(cache), capture_output=True, text=True, timeout=300)


def test_a_full_disk_leaves_no_temporary_file_and_the_error_names_the_file(tmp_path, cache):
    script = tmp_path / "writes.py"
    script.write_text(WRITES)
    done = full_disk(2000, [str(script), str(tmp_path)], cache)
    assert done.returncode == 0, done.stderr
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    assert left == ["run", "run/.lock", "run/manifest.json", "writes.py"]
    assert RunFolder(tmp_path / "run").manifest()["files"] == {}
    assert done.stdout.splitlines() == [
        f"[Errno 27] File too large: '{tmp_path / name}'" for name in ("run/results.json", "a.json", "b.pt")
    ]


@pytest.fixture(scope="module")
def filled(tmp_path_factory, root, cache) -> tuple[Path, list[str]]:
    """A training whose disk had no room for its first checkpoint (after its first step), and its command."""
    folder = tmp_path_factory.mktemp("full")
    config = folder / "tiny.json"
    config.write_text(json.dumps(TINY.with_changes(epochs=1).to_dict()))
    argv = ["aiayn.train", "--config", str(config), "--out", str(folder / "run"), "--device", "cpu",
            "--data", str(root), "--no-progress"]  # fmt: skip
    done = full_disk(1_000_000, argv, cache)  # epoch-001.pt: 0.8 MB, checkpoint.pt: 2.4 MB
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"error: {folder / 'run/checkpoint.pt'}: no room to write it (File too large); free some space, then run "
        "the same command again: the run had no checkpoint yet, so it starts again\n"
    )
    assert not [p.name for p in (folder / "run").iterdir() if p.name.endswith(".tmp")]
    assert not (folder / "run/checkpoint.pt").exists()
    steps = [json.loads(line)["step"] for line in (folder / "run/metrics.jsonl").read_text().splitlines()]
    assert steps == [1]  # it stopped at once: one step is all it loses
    return folder / "run", [sys.executable, "-m", *argv]


def test_after_a_full_disk_no_resume_overwrite_starts_the_run_again(filled, tmp_path, cache):
    run, command = filled
    copy = copy_run(run, tmp_path / "run")
    command = [copy if a == str(run) else a for a in command]
    done = subprocess.run([*command, "--no-resume", "--overwrite"], env=env(cache), capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (copy / "checkpoint.pt").is_file() and (copy / "summary.json").is_file()


def test_after_a_full_disk_before_the_first_checkpoint_the_same_command_starts_again(filled, tmp_path, cache):
    run, command = filled
    copy = copy_run(run, tmp_path / "run")
    command = [copy if a == str(run) else a for a in command]
    done = subprocess.run(command, env=env(cache), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = f"{copy} stopped before its first checkpoint (saved after the first step), so it starts again"
    assert done.stdout.startswith(said), done.stdout
    assert (copy / "checkpoint.pt").is_file() and (copy / "summary.json").is_file()


# --- B. Messages that name the file and say what to do ------------------------------------------------


class Calls:
    """Pickled, it asks the loader to call ``os.system(command)``: no weights file does."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def published_copy(dest: Path) -> Path:
    """A copy of the published run folder (read and written only by the test)."""
    copy = copy_run(PUBLISHED, dest)
    for p in [copy, *copy.iterdir()]:
        p.chmod(p.stat().st_mode | 0o200)
    return copy


def sums(folder: Path, *names: str) -> None:
    """Write the folder's ``SHA256SUMS`` of ``names``, as a release holds them."""
    lines = [f"{hashlib.sha256((folder / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    (folder / "SHA256SUMS").write_text("".join(lines))


def published_cli(*argv: str, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "aiayn.published", *argv], env=env(cache),
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_weights_that_would_run_code_are_refused_by_name(tmp_path, cache):
    run = published_copy(tmp_path / "run")
    weights = run / "multi30k-averaged-fp16.pt"
    ran = tmp_path / "it-ran"
    torch.save({"model": Calls(f"touch {ran}"), "config": {}}, weights)
    done = published_cli("release", str(run), "--out", str(tmp_path / "release"), cache=cache)
    err = one_error(done, f"error: {weights} is not a weights file: loading it would call posix.system,",
                    "restore it from the release it came from")  # fmt: skip
    assert "weights_only" not in err and not ran.exists() and not (tmp_path / "release").exists()
    # a release of it, its sums right: load_published refuses it the same way
    sums(run, "config.json", "tokenizer.model", weights.name)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(weights))} is not a weights file: .*posix.system.*"
                                         r"copy it from the release again$") as refused:  # fmt: skip
        load_published(run, download=False)
    assert "weights_only" not in str(refused.value) and not ran.exists()
    weights.write_bytes(b"\x80\x02}q\x00" + bytes(range(256)))  # damaged
    sums(run, "config.json", "tokenizer.model", weights.name)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(weights))} cannot be read as a weights file "
                                         r"\(UnpicklingError\): it is truncated or damaged, or not a weights file; "
                                         "copy it from the release again$"):  # fmt: skip
        load_published(run, download=False)


def test_a_damaged_results_json_is_removed_and_evaluated_again_not_trained_again(tmp_path, cache):
    run = published_copy(tmp_path / "run")
    (run / "results.json").write_text('{"test2016": {"bleu": 3')  # cut off
    done = published_cli("release", str(run), "--out", str(tmp_path / "release"), cache=cache)
    err = one_error(done, f"error: {run / 'results.json'} is damaged (not valid JSON",
                    "remove that file (it holds only scores, which python -m aiayn.evaluate writes again) and "
                    "evaluate the run again")  # fmt: skip
    assert "afresh" not in err and "train" not in err.replace("aiayn.evaluate", "")


def test_checkpoints_of_other_shapes_are_not_averaged_and_both_are_named(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"model": {"bias": torch.zeros(3), "w": torch.zeros(64, 8)}}, a)
    torch.save({"model": {"bias": torch.zeros(3), "w": torch.zeros(32, 8)}}, b)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(a))} holds w of shape \(64, 8\), {re.escape(str(b))} "
                                         r"of shape \(32, 8\): checkpoints of different models cannot be averaged$"):
        average_checkpoints([a, b])  # fmt: skip
    torch.save({"model": {"w": torch.zeros(32, 8)}}, a)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(a))} holds no 'bias', which {re.escape(str(b))} holds"):
        average_checkpoints([a, b])


def test_a_checkpoint_that_would_run_code_is_refused_without_torchs_advice(tmp_path):
    path = tmp_path / "epoch-001.pt"
    torch.save({"model": Calls(f"touch {tmp_path / 'it-ran'}")}, path)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} is not a checkpoint: loading it would call "
                                         "posix.system") as refused:  # fmt: skip
        average_checkpoints([path])
    assert "weights_only" not in str(refused.value)


def test_distributed_check_with_a_wrong_count_says_so_in_one_line(cache):
    for n, shown in (("abc", "'abc'"), ("0", "0")):
        done = subprocess.run([sys.executable, "-m", "aiayn.equivalence", "check", n], env=env(cache),
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.stderr == (f"error: argument n: expected an integer >= 1, got {shown} "
                               "(see python -m aiayn.equivalence check --help)\n")  # fmt: skip
        assert done.returncode == 2 and done.stdout == ""


def test_bench_checks_its_json_path_before_the_benchmark(tmp_path, cache):
    done = subprocess.run([sys.executable, "-m", "aiayn.bench", "--device", "cpu", "--json", str(tmp_path)],
                          env=env(cache), capture_output=True, text=True, timeout=120)  # fmt: skip
    one_error(done, f"error: --json {tmp_path} is a folder; give a file name, e.g. --json {tmp_path / 'bench.json'}")
    assert done.stdout == ""  # no benchmark ran
