"""python -m aiayn.export follows the rules of the other commands, run as a user runs it (a subprocess).

``--out`` is new, empty or an earlier export (replaced whole), checked before the model is loaded;
every refusal is one ``error:`` line with status 2 and leaves the folders as they were; the export
is written beside ``--out`` and renamed at the end, so Ctrl-C or a kill leaves the old folder.
The refusals never load a model: two run as a user runs them (a process of its own), the others call
the command's ``main`` in this process, which is what that process runs; the exports use a run of two
steps.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import numpy as np
import pytest

from aiayn.export import folders
from aiayn.export.command import main as export_main
from aiayn.export.graphs import GRAPHS
from aiayn.files import sha256_file
from aiayn.runs.presets import PRESETS
from aiayn.runs.recipes import train

# Two training steps of a small model: a run folder with config.json, checkpoint.pt and a manifest.
TWO_STEPS = PRESETS["multi30k-smoke"].with_changes(
    name="two-steps", train_subset=100, val_subset=5, test_subset=5, vocab_size=300, epochs=1,
    max_tokens=1024, warmup=10, average_last=1, checkpoint_minutes=None, max_steps=2,
)  # fmt: skip
EXPECTED_OUT = "expected a new or empty folder, or an earlier export (replaced whole)"
EXPECTED_RUN = "expected a run folder written by python -m aiayn.train (config.json, checkpoint.pt)"


@pytest.fixture(scope="module")
def run(tmp_path_factory, root, cache) -> Path:
    folder = tmp_path_factory.mktemp("two-steps") / "run"
    train(TWO_STEPS, folder, root=root, device="cpu", progress=False)
    return folder


def command(argv, root, **popen) -> subprocess.Popen:
    """``python -m aiayn.export ARGV`` in a process of its own, stdout piped, on the test data."""
    env = {**os.environ, "AIAYN_DATA": str(root), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "aiayn.export", *map(str, argv)], env=env, text=True,
                            stdout=subprocess.PIPE, **popen)  # fmt: skip


def export_cli(argv, root) -> tuple[int, str, str]:
    p = command(argv, root, stderr=subprocess.PIPE)
    out, err = p.communicate(timeout=300)
    return p.returncode, out, err


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every entry of a folder with its inode and size: what a refusal must leave as it was."""
    return {p.name: (p.stat().st_ino, p.stat().st_size) for p in sorted(folder.iterdir())}


def earlier_export(exported: Path, where: Path) -> Path:
    """A copy of the published model's export (hard links: no copying of 250 MB)."""
    import shutil

    return Path(shutil.copytree(exported, where, copy_function=os.link))


# --- Refusals, before anything is loaded ----------------------------------------------------------


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


RUN_MANIFEST = json.dumps({"format": "aiayn-run/1", "files": {}, "pending": {}, "results_of": "x"})
EXPORT_MANIFEST = json.dumps({"format": folders.EXPORT_FORMAT, "files": {"encoder.onnx": {}}, "bleu": {}})

# (arguments with {run} and {tmp}, the folders to make in tmp, what the one error line says)
REFUSALS = {
    "out is the run itself": (
        ["{run}", "--out", "{run}"], {},
        "--out {run} is a run folder (it has config.json, checkpoint.pt), which an export never writes "
        "into (its manifest.json would stop python -m aiayn.train resuming a run and python -m "
        "aiayn.evaluate reading it); " + EXPECTED_OUT + ", e.g. --out {run}-onnx"),
    "out is another run": (
        ["{run}", "--out", "{tmp}/other"], {"other": {"config.json": "{}", "checkpoint.pt": ""}},
        "--out {tmp}/other is a run folder (it has config.json, checkpoint.pt)"),
    "out is a published model's folder": (
        ["{run}", "--out", "{tmp}/model"], {"model": {"config.json": "{}", "multi30k-averaged-fp16.pt": ""}},
        "--out {tmp}/model is a model's folder (it has config.json, multi30k-averaged-fp16.pt)"),
    "out holds evaluate's results": (
        ["{run}", "--out", "{tmp}/scores"], {"scores": {"manifest.json": RUN_MANIFEST, "results.json": "{}"}},
        "--out {tmp}/scores is a folder of python -m aiayn.evaluate's results"),
    "out is a folder of the user's": (
        ["{run}", "--out", "{tmp}/mine"], {"mine": {"tokenizer.json": "mine", "manifest.json": "{}"}},
        "--out {tmp}/mine is not empty (manifest.json, tokenizer.json) and is not an export (no "
        "manifest.json of python -m aiayn.export), so its files would be overwritten; " + EXPECTED_OUT),
    "out is an earlier export with a file of the user's": (
        ["{run}", "--out", "{tmp}/export"],
        {"export": {"manifest.json": EXPORT_MANIFEST, "encoder.onnx": "", "notes.txt": "mine"}},
        "--out {tmp}/export is an earlier export, but it also holds notes.txt, which the export did not "
        "write and replacing it would delete; move them out, or choose another --out"),
    "out is a file": (
        ["{run}", "--out", "{tmp}/file.txt"], {"file.txt": None},
        "--out {tmp}/file.txt is a file; " + EXPECTED_OUT),
    "out is inside a file": (
        ["{run}", "--out", "{tmp}/file.txt/export"], {"file.txt": None},
        "--out {tmp}/file.txt/export: {tmp}/file.txt is a file, not a folder"),
    "out is a link": (
        ["{run}", "--out", "{tmp}/link"], {"link": "link"}, "--out {tmp}/link is a symbolic link"),
    "out is empty": (["{run}", "--out", ""], {}, "--out must name a folder, got an empty string"),
    "out is missing": (["{run}"], {}, "the following arguments are required: --out"),
    "limit 0": (["{run}", "--out", "{tmp}/new", "--limit", "0"], {},
                "argument --limit: expected an integer >= 1, got 0 (see python -m aiayn.export --help)"),
    "limit -5": (["{run}", "--out", "{tmp}/new", "--limit", "-5"], {},
                 "argument --limit: expected an integer >= 1, got -5"),
    "limit without scoring": (
        ["{run}", "--out", "{tmp}/new", "--bleu", "none", "--limit", "5"], {},
        "--limit 5 chooses the sentences to score, and --bleu none scores none; drop one of them"),
    "run mistyped": (
        ["{tmp}/rnu", "--out", "{tmp}/new"], {}, "the run folder {tmp}/rnu does not exist; " + EXPECTED_RUN),
    "run is a file": (
        ["{tmp}/file.txt", "--out", "{tmp}/new"], {"file.txt": None},
        "the run folder {tmp}/file.txt is a file; " + EXPECTED_RUN),
    "run is not a run": (
        ["{tmp}/mine", "--out", "{tmp}/new"], {"mine": {"notes.txt": ""}},
        "{tmp}/mine is neither a run folder nor the published model's folder (it holds notes.txt); "),
    "run has no checkpoint yet": (
        ["{tmp}/started", "--out", "{tmp}/new"], {"started": {"config.json": "{}"}},
        "the run folder {tmp}/started has config.json but no checkpoint.pt"),
}  # fmt: skip


# the refusals run as a user runs them, in a process of its own (a second each); the others in this one
AS_A_USER = ("out is the run itself", "limit 0")


def export_in_process(argv, root, capsys, monkeypatch) -> tuple[int, str, str]:
    """What ``export_cli`` returns, from the command's ``main`` called in this process."""
    monkeypatch.setenv("AIAYN_DATA", str(root))
    try:
        code = export_main(list(map(str, argv)))
    except SystemExit as stop:  # argparse's refusals
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refusal_is_one_line_before_anything_is_loaded_and_changes_nothing(
    case, run, root, tmp_path, capsys, monkeypatch
):
    argv, folders, message = REFUSALS[case]
    for name, files in folders.items():
        if files is None:
            (tmp_path / name).write_text("a file\n")
        elif files == "link":
            (tmp_path / name).symlink_to(_folder(tmp_path / "target", {}))
        else:
            _folder(tmp_path / name, files)
    before, run_before = listing(tmp_path), listing(run)
    fill = {"run": run, "tmp": tmp_path}
    argv = [a.format(**fill) for a in argv]
    if case in AS_A_USER:
        code, out, err = export_cli(argv, root)
    else:
        code, out, err = export_in_process(argv, root, capsys, monkeypatch)
    assert code == 2 and out == "", (out, err)  # nothing loaded, nothing said but the error
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert message.format(**fill) in err
    assert listing(tmp_path) == before and listing(run) == run_before


# --- An export, replacing an earlier one ------------------------------------------------------------


def terminal() -> tuple[int, int]:
    """A pseudo-terminal of 24 lines of 100 columns: ``(our end, the command's end)``."""
    ours, theirs = pty.openpty()
    fcntl.ioctl(theirs, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    return ours, theirs


def read_tty(fd: int, into: io.StringIO) -> threading.Thread:
    """Drain a pseudo-terminal in a thread (a full one would block the writer)."""

    def drain():
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:  # the other side closed
                return
            if not data:
                return
            into.write(data.decode(errors="replace"))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    return thread


def test_an_earlier_export_is_replaced_whole_and_names_no_path(exported, run, root, tmp_path):
    out = earlier_export(exported, tmp_path / "export")
    assert (out / "test2016.int8.beam4.hyp.en").is_file()  # the published model's beam 4
    master, tty = terminal()  # stderr on a terminal: the progress bars show
    p = command([run, "--out", out, "--limit", "5"], root, stderr=tty)
    os.close(tty)
    bars = io.StringIO()
    reader = read_tty(master, bars)
    stdout, _ = p.communicate(timeout=300)
    reader.join(10)
    os.close(master)
    assert p.returncode == 0, (stdout, bars.getvalue())
    steps = ["loading the model from", "learning the shortlist from 29000 pairs", "exporting the float32 graphs",
             "exported the float32 graphs in",
             "quantizing them to int8", "quantized in", "scoring the int8 graphs on 5 sentences of test2016, "
             "beam 1 and 2", "test2016 int8 beam1: BLEU", "test2016 int8 beam2: BLEU",
             f"exported to {out} (the earlier export replaced)"]  # fmt: skip
    lines = stdout.splitlines()
    assert len(lines) == len(steps) and all(line.startswith(s) for line, s in zip(lines, steps, strict=True))
    graphs = f"/{len(GRAPHS)} ["  # the export's and the quantization's bars count graphs
    for bar in ("ONNX export: ", "int8: ", "int8 beam1: ", "int8 beam2: ", "/5 [", graphs):
        assert bar in bars.getvalue(), bars.getvalue()
    assert "WARNING" not in bars.getvalue() and "torchvision" not in bars.getvalue()

    # replaced whole: no translation of the published model is left beside the new graphs
    manifest = json.loads((out / "manifest.json").read_text())
    hypotheses = ["test2016.int8.beam1.hyp.en", "test2016.int8.beam2.hyp.en"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*manifest["files"], "manifest.json", *hypotheses])
    for name, entry in manifest["files"].items():
        assert sha256_file(out / name)[1] == entry["sha256"], name
    assert [len((out / h).read_text().splitlines()) for h in hypotheses] == [5, 5]
    assert manifest["format"] == "aiayn-export/1" and manifest["settings"]["beam"] == 2
    assert "shortlist.json" in manifest["page_files"]  # learned from the training pairs by default
    assert manifest["source"]["run"] == "run" and manifest["source"]["checkpoints"] == ["checkpoint.pt"]
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no folder left beside it
    assert (exported / "test2016.int8.beam4.hyp.en").is_file()  # the fixture is untouched

    # no path of this machine: the command names RUN and DIR
    text = (out / "manifest.json").read_text()
    for path in (tmp_path, run, Path.cwd(), Path.home(), Path(sys.prefix)):
        assert str(path) not in text, path
    assert {e["command"] for e in manifest["bleu"].values()} == {
        "python -m aiayn.export RUN --out DIR --bleu int8 --limit 5"
    }


def test_without_a_shortlist_the_export_scores_every_id(run, root, tmp_path):
    """``--shortlist none``: no shortlist.json, none in the manifest (so the page fetches none), and the
    search reads the folder as one whose steps score every id."""
    from aiayn.export import translator as tr

    out = tmp_path / "export"
    code, stdout, err = export_cli([run, "--out", out, "--bleu", "none", "--shortlist", "none"], root)
    assert code == 0, err
    assert "learning the shortlist" not in stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert not (out / "shortlist.json").exists() and tr.load_shortlist(out) is None
    assert "shortlist.json" not in manifest["files"] and "shortlist.json" not in manifest["page_files"]
    assert manifest["page_bytes"] == sum((out / n).stat().st_size for n in manifest["page_files"])
    model, vocab = tr.OnnxModel(out), tr.Vocabulary.load(out)
    settings = json.loads((out / "translator.json").read_text())
    src = tr.source_ids(vocab, "Ein Mann fährt Fahrrad.", settings["max_len"])
    limit = tr.output_limit(len(src), settings)
    cache = model.start(*model.encode(np.array([src]))[:1], np.array([src]), tr.scored(vocab, None))
    log_probs = model.step(cache, np.array([[vocab.bos_id]]))[0]
    assert log_probs.shape == (1, len(vocab.pieces))  # every id scored
    assert len(tr.greedy(model, vocab, src, limit)) >= 2


# --- Ctrl-C and a killed export ---------------------------------------------------------------------


def stop_at(p: subprocess.Popen, line: str, signum: int) -> str:
    """Read the command's lines until one starts with ``line``, then send it ``signum``."""
    seen = []
    for text in p.stdout:
        seen.append(text)
        if text.startswith(line):
            p.send_signal(signum)
            return "".join(seen)
    raise AssertionError(f"the command ended before {line!r}: {''.join(seen)}")


def test_a_killed_export_leaves_the_old_folder_and_ctrl_c_removes_what_it_left(exported, run, root, tmp_path):
    out = earlier_export(exported, tmp_path / "export")
    before = listing(out)
    # killed while it exports (stderr on a terminal, but --no-progress: no bar)
    master, tty = terminal()
    p = command([run, "--out", out, "--bleu", "none", "--no-progress"], root, stderr=tty)
    os.close(tty)
    stop_at(p, "exporting the float32 graphs", signal.SIGKILL)
    p.communicate(timeout=60)
    os.set_blocking(master, False)
    try:
        on_terminal = os.read(master, 65536)
    except OSError:
        on_terminal = b""
    os.close(master)
    assert on_terminal == b""
    left = sorted(p.name for p in tmp_path.iterdir())  # its lock too, which the next export takes over
    assert len(left) == 3 and left[:2] == ["export", "export.export-lock"], left
    assert left[2].startswith("export.unfinished-export-") and folders.is_leftover(tmp_path / left[2])
    assert listing(out) == before
    left.remove("export.export-lock")

    # Ctrl-C: the leftover of the killed export is removed, and so is this one's
    p = command([run, "--out", out, "--bleu", "none"], root, stderr=subprocess.PIPE)
    said = stop_at(p, "exporting the float32 graphs", signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert f"removed {tmp_path / left[1]}, left by an export that was killed" in said
    assert err == f"error: interrupted (Ctrl-C) before the export was finished: {out} is as it was\n"
    assert [p.name for p in tmp_path.iterdir()] == ["export"] and listing(out) == before

    # Ctrl-C into a new folder: no folder at all
    p = command([run, "--out", tmp_path / "new"], root, stderr=subprocess.PIPE)
    stop_at(p, "loading the model from", signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and err.endswith(f"{tmp_path / 'new'} was not created\n"), err
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_a_running_export_s_folder_is_not_taken_for_a_leftover(tmp_path):
    out = tmp_path / "export"
    busy, dead = (tmp_path / f"export{folders.UNFINISHED}{k}" for k in ("busy", "dead"))
    for folder in (busy, dead):
        _folder(folder, {"encoder.onnx": ""})
        folders._mark(folder, folder.name)  # as staged() marks the folders it makes
    other = _folder(tmp_path / "export.unfinished-other", {})  # not a name the export gives
    fd = folders.hold_folder(busy)
    try:
        assert folders.remove_leftovers(out) == [dead]
    finally:
        os.close(fd)
    assert busy.is_dir() and other.is_dir() and not dead.exists()


# --- Issue 47: folders the export did not make, two exports at once, AIAYN_MODEL at a run --------------


def test_folders_named_like_leftovers_are_left_alone_and_a_second_export_into_the_folder_fails(run, root, tmp_path):
    """``mkdir export.replaced-export-keep`` (a file in it) survives an export; so do a folder whose mark
    names another folder (a copy of a leftover) and a link, while a killed export's leftover is removed.
    A second export into the same ``--out`` while the first writes fails at once, in one line."""
    out = tmp_path / "export"
    keep = _folder(tmp_path / f"export{folders.REPLACED}keep", {"thesis.txt": "mine"})
    mine = _folder(tmp_path / f"export{folders.UNFINISHED}mine", {"notes.txt": "mine"})
    (tmp_path / f"export{folders.REPLACED}link").symlink_to(keep)
    killed = _folder(tmp_path / f"export{folders.UNFINISHED}0a1b2c3d", {"encoder.onnx": ""})  # a killed export's
    (killed / ".aiayn-export-temporary").write_text(f"{killed.name}\n")  # marked as the export marks it
    copied = _folder(tmp_path / f"export{folders.UNFINISHED}copied", {".aiayn-export-temporary": f"{killed.name}\n"})
    theirs = {p: listing(p) for p in (keep, mine, copied)}
    first = command([run, "--out", out, "--bleu", "none"], root, stderr=subprocess.PIPE)
    try:
        said = stop_at(first, "loading the model from", 0)  # signal 0: none; the first holds the lock
        code, stdout, err = export_cli([run, "--out", out, "--bleu", "none"], root)
    finally:  # then Ctrl-C stops the first
        first.send_signal(signal.SIGINT)
        _, first_err = first.communicate(timeout=60)
    lock = tmp_path / "export.export-lock"
    assert code == 2 and stdout == "", err
    assert err == (
        f"error: another command is writing {out} (it holds {lock}); wait for it to finish, or choose another --out\n"
    )
    assert first.returncode == 130 and first_err.endswith(f"{out} was not created\n"), first_err
    assert said.count("removed") == 1 and f"removed {killed}, left by an export that was killed" in said
    assert {p: listing(p) for p in theirs} == theirs and (keep / "thesis.txt").read_text() == "mine"
    assert {p.name for p in tmp_path.iterdir()} == {keep.name, mine.name, copied.name, f"export{folders.REPLACED}link"}


def test_a_linked_lock_is_refused_and_its_target_never_made(run, root, tmp_path):
    target = tmp_path / "elsewhere" / "victim.txt"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "export.export-lock").symlink_to(target)
    code, stdout, err = export_cli([run, "--out", tmp_path / "export"], root)
    assert code == 2 and stdout == "", err
    assert err == (f"error: {tmp_path / 'export.export-lock'} is a symbolic link; the export takes its lock there and "
                   "never follows a link: remove the link, or choose another --out\n")  # fmt: skip
    assert not target.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "export.export-lock"]


def test_without_run_aiayn_model_naming_a_run_is_refused_before_any_download(run, root, tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_MODEL", str(run))
    before = listing(run)
    code, stdout, err = export_cli(["--out", tmp_path / "export"], root)
    assert code == 2 and stdout == "", err
    assert err == (
        f"error: AIAYN_MODEL={run} is a training run's folder (it has checkpoint.pt, manifest.json), and nothing "
        "is downloaded into it; python -m aiayn.export without RUN reads the published model: point AIAYN_MODEL "
        "at the folder that holds config.json, tokenizer.model, multi30k-averaged-fp16.pt (or unset it to use "
        f"the user cache); to export a run, name it: python -m aiayn.export {run} --out DIR\n"
    )
    assert listing(run) == before and list(tmp_path.iterdir()) == []
