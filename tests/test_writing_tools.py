"""``python -m aiayn.stepthrough write`` and ``python -m aiayn.embedding_map`` write as the other commands do
(issue 47): each writes one known file into ``--out``, never over a file it did not write (unless
``--overwrite``), holds a lock while it writes, and answers a bad ``--out``, a run folder as
``$AIAYN_MODEL``, missing weights or data, or a full disk with one ``error:`` line.

The refusals run the commands' ``main`` in this process (they come before the model is loaded);
the lock is held by another process, the full disk is a child process's file-size limit.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiayn.data.multi30k import BASE_URL
from aiayn.files import read_json_gz
from aiayn.pages import embedding_map, stepthrough
from aiayn.runs.published import results_dir
from conftest import PUBLISHED, assert_same_map, assert_same_record

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
# command: (its main, the words before the options, the file it writes, its name in messages)
COMMANDS = {
    "stepthrough": (stepthrough.main, ["write"], stepthrough.STEPTHROUGH, "python -m aiayn.stepthrough write"),
    "embedding_map": (embedding_map.main, [], embedding_map.FILE, "python -m aiayn.embedding_map"),
}
TRAIN = "train.de.gz, train.en.gz"
TEST = "test_2016_flickr.de.gz, test_2016_flickr.en.gz"
# the embedding map reads any model with one shared table: a run's, once released
RELEASE = "; or at a release of a run (python -m aiayn.published release RUN --out DIR)"


@pytest.fixture
def inputs(root, monkeypatch, tmp_path):
    """The published model and the test data, as the commands find them; the test runs in ``tmp_path``."""
    monkeypatch.setenv("AIAYN_MODEL", str(PUBLISHED))
    monkeypatch.setenv("AIAYN_DATA", str(root))
    monkeypatch.chdir(tmp_path)


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry under a folder with its inode and size: what a refusal must leave as it was."""
    return {p.relative_to(folder).as_posix(): (p.lstat().st_ino, p.lstat().st_size) for p in sorted(folder.rglob("*"))}


def gz_json(path: Path, record) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(record).encode()))
    return path


def unwritable(tmp_path: Path) -> Path:
    """A folder this user cannot write into (root writes into any mode bits, but not into /proc/1)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder if not os.access(folder, os.W_OK) else Path("/proc/1")


# (the options after --out's folder, what to make in tmp_path, the one error line without "error: ")
REFUSALS = {
    "out is a file": (
        ["--out", "{tmp}/file.txt"], "file",
        "--out {tmp}/file.txt is a file; expected a folder to write {name} into"),
    "out is inside a file": (
        ["--out", "{tmp}/file.txt/out"], "file",
        "--out {tmp}/file.txt/out: {tmp}/file.txt is a file, not a folder; expected a folder to write {name} into"),
    "out is a link": (
        ["--out", "{tmp}/link"], "link", "--out {tmp}/link is a symbolic link; name the folder by its own path"),
    "out is empty": (
        ["--out", ""], None, "--out must name a folder, got an empty string; expected a folder to write {name} into"),
    "out cannot be written": (
        ["--out", "{ro}"], None, "--out {ro}: {ro} is not a folder you can write into; choose another --out"),
    "the file there is someone else's": (
        ["--out", "{tmp}/mine"], "foreign",
        "{tmp}/mine/{name} is not a file {what} wrote (not its gzipped JSON record), and writing would replace "
        "it; move it away, choose another --out, or add --overwrite to replace it"),
    "the file there is another gzipped JSON": (
        ["--out", "{tmp}/mine"], "other json",
        "{tmp}/mine/{name} is not a file {what} wrote (not its gzipped JSON record)"),
    "the file there is a link": (
        ["--out", "{tmp}/mine"], "file link",
        "{tmp}/mine/{name} is a symbolic link, which {what} would replace; move it away, or choose another --out"),
    "AIAYN_MODEL is a training run": (
        ["--out", "{tmp}/new"], "run",
        "AIAYN_MODEL={tmp}/run is a training run's folder (it has checkpoint.pt, manifest.json), and nothing is "
        "downloaded into it; {what} reads the published model: point AIAYN_MODEL at the folder that holds "
        "config.json, tokenizer.model, multi30k-averaged-fp16.pt (or unset it to use the user cache){release}"),
    "the weights are missing": (
        ["--out", "{tmp}/new"], "no weights",
        "AIAYN_MODEL={tmp}/model lacks multi30k-averaged-fp16.pt of the published model, which {what} reads: "
        "python -m aiayn.published check downloads them into it (or point AIAYN_MODEL at a folder that holds "
        "them)"),
    "the data are missing": (
        ["--out", "{tmp}/new", "--data", "{tmp}/empty"], "empty",
        "the Multi30k folder {tmp}/empty (from --data) lacks {data}, which {what} reads: point --data or "
        f"AIAYN_DATA at the folder that holds them, or download them from {BASE_URL}"),
}  # fmt: skip


def _make(kind: str | None, tmp: Path, name: str, monkeypatch) -> None:
    if kind == "file":
        (tmp / "file.txt").write_text("a file\n")
    elif kind == "link":
        (tmp / "target").mkdir()
        (tmp / "link").symlink_to(tmp / "target")
    elif kind == "foreign":
        (tmp / "mine").mkdir()
        (tmp / "mine" / name).write_text("my notes\n")
    elif kind == "other json":
        gz_json(tmp / "mine" / name, {"what": "my own table", "pieces": []})
    elif kind == "file link":
        (tmp / "mine").mkdir()
        (tmp / "notes.txt").write_text("my notes\n")
        (tmp / "mine" / name).symlink_to(tmp / "notes.txt")
    elif kind == "run":  # what python -m aiayn.train writes first
        (tmp / "run").mkdir()
        for file in ("config.json", "checkpoint.pt", "manifest.json", "tokenizer.model"):
            (tmp / "run" / file).write_text("{}")
        monkeypatch.setenv("AIAYN_MODEL", str(tmp / "run"))
    elif kind == "no weights":
        (tmp / "model").mkdir()
        for file in ("config.json", "tokenizer.model"):
            shutil.copy(PUBLISHED / file, tmp / "model" / file)
        monkeypatch.setenv("AIAYN_MODEL", str(tmp / "model"))
    elif kind == "empty":
        (tmp / "empty").mkdir()


@pytest.mark.parametrize("case", REFUSALS)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_refusal_is_one_line_before_the_model_is_loaded_and_changes_nothing(
    command, case, inputs, tmp_path, monkeypatch, capsys
):
    main, words, name, what = COMMANDS[command]
    argv, kind, message = REFUSALS[case]
    _make(kind, tmp_path, name, monkeypatch)
    fill = {"tmp": tmp_path, "name": name, "what": what, "ro": unwritable(tmp_path),
            "data": TEST if command == "stepthrough" else TRAIN,
            "release": "" if command == "stepthrough" else RELEASE}  # fmt: skip
    before = listing(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main([*words, *(a.format(**fill) for a in argv)])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "", err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert message.format(**fill) in err
    if not case.endswith("gzipped JSON"):
        assert err == f"error: {message.format(**fill)}\n"
    assert listing(tmp_path) == before  # nothing made, nothing replaced, nothing downloaded


def test_a_line_outside_test2016_is_refused_before_the_model_is_loaded(inputs, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        stepthrough.main(["write", "--out", str(tmp_path / "new"), "--line", "1000"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == "error: --line must be in [0, 1000) for test2016, got 1000\n"
    assert list(tmp_path.iterdir()) == []


# another process holds the folder's flock, as either command does while it writes
HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_a_second_command_writing_the_folder_fails_at_once(command, inputs, tmp_path, capsys):
    """Another process holds ``--out``'s lock: the command fails before it loads anything."""
    main, words, name, _ = COMMANDS[command]
    out = tmp_path / "out"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit) as stop:
            main([*words, "--out", str(out)])
    finally:
        holder.communicate("", timeout=60)
    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        f"error: another command is writing into {out}; wait for it to finish, or choose another --out\n"
    )
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_its_own_file_is_written_again_and_another_replaced_only_when_asked(command, inputs, tmp_path, capsys):
    """The committed record is the command's own: written again, the same numbers (to the rounding that
    another CPU's float32 sums allow: the step-through's score near zero beside one of 77 moves in its
    fourth digit); a file of another kind is replaced with ``--overwrite``. The folder's other files are
    left alone."""
    main, words, name, _ = COMMANDS[command]
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    if command == "stepthrough":
        shutil.copy(results_dir() / name, out / name)
        flags = []
    else:
        (out / name).write_text("my notes\n")
        flags = ["--overwrite"]
    assert main([*words, "--out", str(out), *flags]) == 0
    same = assert_same_record if command == "stepthrough" else assert_same_map
    same(read_json_gz(results_dir() / name), read_json_gz(out / name))
    assert sorted(p.name for p in out.iterdir()) == sorted([name, "notes.txt"])
    assert str(out / name) in capsys.readouterr().out


FULL_DISK = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
size = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
sys.argv = sys.argv[2:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_one_line_naming_the_file_and_the_old_file_stays(command, root, cache, tmp_path):
    """A file-size limit of half the record: the write fails, the file there before is as it was."""
    _, words, name, _ = COMMANDS[command]
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(results_dir() / name, out / name)
    before = listing(tmp_path)
    limit = (results_dir() / name).stat().st_size // 2
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1", "XDG_CACHE_HOME": str(cache),
           "AIAYN_MODEL": str(PUBLISHED), "AIAYN_DATA": str(root)}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(limit), f"aiayn.{command}", *words, "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    err = done.stderr
    assert done.returncode == 1, err
    assert err.startswith(f"error: {out / name}: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "File too large" in err and "free some space" in err, err
    assert listing(tmp_path) == before  # the old file, and no temporary file beside it
