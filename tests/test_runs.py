"""The run folder never loses a file: refusals, the manifest, the lock, Ctrl-C and kill -9 with exact resume."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from aiayn import evaluate as eval_cli
from aiayn import train as train_cli
from aiayn.runs.folder import ResumeError, RunFolder, RunFolderError
from aiayn.runs.load import load_run
from aiayn.runs.presets import PRESETS
from aiayn.runs.recipes import train
from aiayn.runs.scoring import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO.parent / "shared/runs/multi30k-h100"
# Small enough for seconds on a CPU, slow enough (tens of ms a step) to be interrupted mid-epoch.
TINY = PRESETS["multi30k-smoke"].with_changes(
    name="tiny", train_subset=400, val_subset=20, test_subset=5, vocab_size=300, epochs=2,
    max_tokens=1024, warmup=10, average_last=2, checkpoint_minutes=None,
)  # fmt: skip




@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, root, cache):
    out = tmp_path_factory.mktemp("tiny") / "run"
    train(TINY, out, root=root, device="cpu", progress=False)
    return out


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's SHA-256, to show that nothing changed."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file():
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


def run_cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        train_cli.main(argv)
    return exit_info.value.code, capsys.readouterr().err


# --- Folders that are not ours are never touched ----------------------------------------------------


def test_a_folder_of_unrelated_files_is_left_untouched(tmp_path, root, cache, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("config.json", "results.json", "summary.json", "metrics.jsonl", "tokenizer.model",
                 "epoch-001.pt", "test2016.hyp.en", "notes.txt"):  # fmt: skip
        (folder / name).write_text(f"my own {name}\n")
    before = snapshot(folder)
    for extra in ([], ["--no-resume"], ["--no-resume", "--overwrite"]):
        code, err = run_cli(["--preset", "multi30k-smoke", "--out", str(folder), "--device", "cpu", *extra], capsys)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        assert "choose another --out" in err.lower(), err
        assert snapshot(folder) == before and not (folder / ".lock").exists()


def test_a_non_empty_folder_without_a_manifest_is_refused_by_name(tmp_path, root, cache):
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(RunFolderError, match=r"is not empty \(photo.jpg\) and is not a run folder"):
        train(TINY, tmp_path, root=root, device="cpu", progress=False)
    assert [p.name for p in tmp_path.iterdir()] == ["photo.jpg"]


def test_an_empty_out_is_refused(capsys):
    code, err = run_cli(["--preset", "multi30k-smoke", "--out", ""], capsys)
    assert code == 2 and err == "error: --out must name a folder, got an empty string; e.g. --out runs/base\n"


# --- A manifest or a lock never leads out of the folder ------------------------------------------------


def listing(run: Path, name: str, of: Path) -> None:
    """List ``name`` in the run's manifest as one of its files, with the real size and SHA-256 of ``of``."""
    manifest = json.loads((run / "manifest.json").read_text())
    data = of.read_bytes()
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (run / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("entry", ["../../thesis.txt", "absolute"])
def test_a_manifest_entry_outside_the_folder_is_refused_and_the_file_kept(tiny_run, tmp_path, entry, capsys):
    (tmp_path / "a" / "b").mkdir(parents=True)
    run = copy_run(tiny_run, tmp_path / "a" / "b" / "run")
    thesis = tmp_path / "a" / "thesis.txt"
    thesis.write_text("three years of work\n")
    entry = str(thesis) if entry == "absolute" else entry
    listing(run, entry, thesis)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_dict()))
    code, err = run_cli(["--config", str(config), "--out", str(run), "--no-resume", "--overwrite"], capsys)
    assert code == 2 and err == (
        f"error: {run / 'manifest.json'} lists {entry!r}, which is not the name of a file inside the run folder (a "
        "run lists plain names only; '..', absolute paths and sub-folders are refused). The manifest was edited: "
        "no file is deleted or replaced because of it. Restore it, or move the folder aside and train into a new "
        "one\n"
    )
    assert thesis.read_text() == "three years of work\n"


def test_an_entry_through_a_folder_named_like_an_epoch_file_is_refused_on_resume(tiny_run, tmp_path, capsys):
    (tmp_path / "a" / "b" / "c").mkdir(parents=True)
    run = copy_run(tiny_run, tmp_path / "a" / "b" / "c" / "run")
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    (run / "epoch-").mkdir()
    listing(run, "epoch-/../../../../../notes.txt", notes)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.with_changes(epochs=3).to_dict()))
    code, err = run_cli(["--config", str(config), "--out", str(run)], capsys)
    assert code == 2 and "lists 'epoch-/../../../../../notes.txt', which is not the name of a file inside" in err
    assert notes.read_text() == "mine\n"


def test_a_linked_lock_is_refused_and_its_target_never_created(tiny_run, tmp_path, capsys):
    run = copy_run(tiny_run, tmp_path / "run")
    target = tmp_path / "elsewhere" / "created.txt"
    (tmp_path / "elsewhere").mkdir()
    (run / ".lock").unlink(missing_ok=True)
    (run / ".lock").symlink_to(target)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.with_changes(epochs=3).to_dict()))
    code, err = run_cli(["--config", str(config), "--out", str(run)], capsys)
    assert code == 2 and err == (
        f"error: {run / '.lock'} is a symbolic link; a run folder's lock is a plain file in the folder, never a "
        "link's target: remove the link, then run the command again\n"
    )
    assert not target.exists()


def test_a_run_being_written_is_refused_for_its_lock_before_any_advice_about_its_files(tiny_run, tmp_path, capsys):
    """A run that has not saved its first checkpoint yet, while its command still writes: a second
    command says another one is writing, not which flags would replace the run (the lock refuses them)."""
    run = copy_run(tiny_run, tmp_path / "run")
    folder = RunFolder(run)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_dict()))
    with folder.locked():
        folder.remove("checkpoint.pt")  # as before its first checkpoint
        for extra in ([], ["--no-resume"]):
            code, err = run_cli(["--config", str(config), "--out", str(run), *extra], capsys)
            assert code == 2 and err == (
                f"error: another command is writing into {run} (it holds {run / '.lock'}); wait for it to "
                "finish, or use another folder\n"
            )


# --- A finished run is never lost -------------------------------------------------------------------


def test_a_run_folder_lists_every_file_it_wrote(tiny_run):
    manifest = json.loads((tiny_run / "manifest.json").read_text())
    names = {p.name for p in tiny_run.iterdir()} - {"manifest.json", ".lock"}
    assert set(manifest["files"]) == names
    for name, entry in manifest["files"].items():
        data = (tiny_run / name).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry["size"], entry["sha256"]), name
    assert manifest["pending"] == {} and len(manifest["run_id"]) == 32 and len(manifest["config_sha256"]) == 64


def test_no_resume_checks_the_device_and_the_data_before_touching_a_run(tiny_run, tmp_path, root, capsys):
    run = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(run)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_dict()))
    base = ["--config", str(config), "--out", str(run), "--no-progress", "--no-resume"]
    code, err = run_cli([*base, "--device", "cpu"], capsys)  # no --overwrite
    assert code == 2 and "holds a trained run (checkpoint.pt, epoch-001.pt" in err
    assert "; --no-resume would replace it. Add --overwrite" in err
    code, err = run_cli([*base, "--overwrite", "--device", "cuda:7"], capsys)
    assert code == 2 and err.startswith("error: device 'cuda:7' cannot be used here") and "--device" in err
    empty = tmp_path / "no-data"
    empty.mkdir()
    code, err = run_cli([*base, "--overwrite", "--device", "cpu", "--data", str(empty)], capsys)
    assert code == 2 and "Multi30k files are missing" in err and err.count("\n") == 1
    assert snapshot(run) == before


@pytest.fixture
def evaluated_run(tiny_run, tmp_path, root):
    """A copy of the tiny run, evaluated (results.json and test2016.hyp.en), and its config file."""
    run = copy_run(tiny_run, tmp_path / "run")
    evaluate(run, device="cpu", root=root)
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.to_dict()))
    return run, config


@pytest.mark.parametrize("extra", [[], ["--no-resume"]], ids=["plain", "no-resume"])
def test_a_trained_run_whose_checkpoint_was_moved_away_is_never_replaced(evaluated_run, root, extra, capsys):
    run, config = evaluated_run
    (run / "checkpoint.pt").rename(run / "checkpoint.pt.damaged")  # as a user sets a bad file aside
    before = snapshot(run)
    argv = ["--config", str(config), "--out", str(run), "--device", "cpu", "--data", str(root),
            "--no-progress", "--max-steps", "10", *extra]  # fmt: skip
    code, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    if extra:
        assert "holds a trained run (" in err and "Add --overwrite to replace it" in err
    else:
        assert f"{run / 'checkpoint.pt'} is missing, and manifest.json lists it" in err
        assert "put it back to resume the run" in err
    assert snapshot(run) == before  # results.json, test2016.hyp.en, config and metrics all kept


def test_a_missing_epoch_file_of_a_trained_run_is_refused_by_name(evaluated_run, root):
    run, _ = evaluated_run
    (run / "epoch-001.pt").unlink()
    before = snapshot(run)
    with pytest.raises(RunFolderError, match=r"epoch-001.pt is missing, and manifest.json lists it"):
        train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)
    assert snapshot(run) == before


def test_a_folder_of_results_is_not_a_run_to_train_into(tiny_run, tmp_path, root):
    scores = tmp_path / "scores"
    evaluate(tiny_run, device="cpu", root=root, out_dir=scores)
    before = snapshot(scores)
    with pytest.raises(RunFolderError, match=r"holds the files of an earlier command \(results.json, "):
        train(TINY, scores, root=root, device="cpu", progress=False)
    assert snapshot(scores) == before


def test_a_finished_run_that_was_moved_reports_where_it_is_now(tiny_run, tmp_path, root):
    moved = copy_run(tiny_run, tmp_path / "moved")
    summary = train(TINY, moved, root=root, device="cpu", progress=False)
    assert summary.steps_this_run == 0 and summary.out_dir == str(moved)


def test_overwrite_replaces_only_the_runs_own_files(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    (run / "notes.txt").write_text("keep me\n")
    old_id = json.loads((run / "manifest.json").read_text())["run_id"]
    train(TINY.with_changes(epochs=1), run, root=root, device="cpu", progress=False, resume=False, overwrite=True)
    assert (run / "notes.txt").read_text() == "keep me\n"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["run_id"] != old_id and not (run / "epoch-002.pt").exists()


def test_fewer_epochs_on_a_finished_run_is_refused_and_config_kept(tiny_run, root, capsys):
    before = snapshot(tiny_run)
    with pytest.raises(ResumeError, match=r"has already trained 2 epochs; 1 epochs is fewer.*config.json is left"):
        train(TINY.with_changes(epochs=1), tiny_run, root=root, device="cpu", progress=False)
    summary = train(TINY, tiny_run, root=root, device="cpu", progress=False)  # the same: nothing to do
    assert summary.steps_this_run == 0
    assert snapshot(tiny_run) == before


def test_a_second_training_into_a_locked_folder_fails_clearly(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    with RunFolder(run).locked():  # as another training holds it
        with pytest.raises(RunFolderError, match=r"another command is writing into .* \(it holds .*\.lock\)"):
            train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)


# --- Damaged and foreign files are refused by name ----------------------------------------------------


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:  # flip one byte in the middle
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncate", "flip"])
@pytest.mark.parametrize("name", ["checkpoint.pt", "config.json", "tokenizer.model"])
def test_a_damaged_file_is_refused_by_name_with_the_fix(tiny_run, tmp_path, root, name, how):
    run = copy_run(tiny_run, tmp_path / "run")
    damage(run / name, how)
    with pytest.raises(RunFolderError, match=rf"{name} does not match manifest.json.*restore it, or start afresh"):
        train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)
    with pytest.raises(RunFolderError, match=rf"{name} does not match manifest.json"):
        load_run(run, "cpu")


def test_a_damaged_epoch_file_is_refused_when_averaging(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    damage(run / "epoch-001.pt", "flip")
    with pytest.raises(RunFolderError, match=r"epoch-001.pt does not match manifest.json"):
        load_run(run, "cpu")


def test_a_checkpoint_from_another_run_is_refused(tiny_run, tmp_path, root):
    other = tmp_path / "other"
    train(TINY.with_changes(seed=1, epochs=1), other, root=root, device="cpu", progress=False)
    run = copy_run(tiny_run, tmp_path / "run")
    (run / "checkpoint.pt").write_bytes((other / "checkpoint.pt").read_bytes())  # same shapes, other weights
    with pytest.raises(RunFolderError, match=r"checkpoint.pt does not match manifest.json.*another run"):
        train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)


def test_a_damaged_metrics_log_is_refused_by_name(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    damage(run / "metrics.jsonl", "truncate")
    with pytest.raises(RunFolderError, match=r"metrics.jsonl does not hold the .* bytes the run had logged"):
        train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)


def test_a_damaged_manifest_is_refused_by_name(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    damage(run / "manifest.json", "truncate")
    with pytest.raises(RunFolderError, match=r"manifest.json is damaged \(not valid JSON"):
        train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)


def test_a_truncated_checkpoint_of_an_older_folder_names_the_file(tiny_run, tmp_path):
    run = copy_run(tiny_run, tmp_path / "run")
    (run / "manifest.json").unlink()  # an older run folder: nothing to compare with
    damage(run / "checkpoint.pt", "truncate")
    with pytest.raises(ValueError, match=r"checkpoint.pt cannot be read as a checkpoint .* truncated or damaged"):
        load_run(run, "cpu", average=False)


def test_stale_temporary_files_of_a_killed_save_are_removed(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    (run / ".checkpoint.pt.k1ll3d_x.tmp").write_bytes(b"half a checkpoint")  # mkstemp's 8 characters
    (run / ".epoch-002.pt.x0x0x0x0.tmp").write_bytes(b"half")
    (run / ".my-editor.swp.tmp").write_bytes(b"not ours")
    (run / ".checkpoint.pt.my-copy.tmp").write_bytes(b"not ours either")
    train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)
    left = sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp"))
    assert left == [".checkpoint.pt.my-copy.tmp", ".my-editor.swp.tmp"]


# --- The published run: an older folder, read-only ----------------------------------------------------


def bytes_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def published_copy(tmp_path_factory) -> Path:
    """A writable copy of the published model: read-only by what it is, not by how it is mounted."""
    if not PUBLISHED.is_dir():
        pytest.fail(f"the published model is missing from {PUBLISHED}")
    copy = copy_run(PUBLISHED, tmp_path_factory.mktemp("published") / "multi30k-h100")
    for p in [copy, *copy.iterdir()]:
        p.chmod(p.stat().st_mode | 0o200)
    return copy


def test_the_published_model_is_read_only_by_what_it_is(published_copy, tmp_path, root, capsys):
    before = bytes_of(published_copy)
    assert os.access(published_copy, os.W_OK)
    cfg, tokenizer, model, sources = load_run(published_copy, "cpu")
    assert (cfg.model.N, tokenizer.vocab_size, sources[0], sources[-1]) == (3, 8000, "epoch-036.pt", "epoch-040.pt")
    assert next(model.parameters()).dtype == torch.float32 and not model.training
    with pytest.raises(RunFolderError, match=r"was not written by python -m aiayn.train .*pass --out DIR"):
        evaluate(published_copy, beam=1, limit=2, device="cpu", root=root)
    code, err = run_eval_cli([str(published_copy), "--beam", "1", "--limit", "2", "--device", "cpu"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"its results would go to {published_copy / 'results.json'}: pass --out DIR" in err
    result = evaluate(published_copy, beam=1, limit=2, device="cpu", root=root, out_dir=tmp_path / "scores")
    assert result.sentences == 2 and result.setting == "test2016.beam1.n2"
    saved = json.loads((tmp_path / "scores" / "results.json").read_text())
    assert saved["test2016.beam1.n2"]["bleu"] == result.bleu
    assert bytes_of(published_copy) == before  # every file, byte for byte, and no new one


def run_eval_cli(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        eval_cli.main(argv)
    return exit_info.value.code, capsys.readouterr().err


def test_evaluate_refuses_a_held_lock_and_damaged_results_before_decoding(evaluated_run, root, monkeypatch):
    import aiayn.runs.scoring as scoring

    run, _ = evaluated_run
    with monkeypatch.context() as mp:
        mp.setattr(scoring, "load_run", lambda *a, **k: pytest.fail("evaluate decoded before refusing"))
        with RunFolder(run).locked(), pytest.raises(RunFolderError, match=r"another command is writing into"):
            evaluate(run, beam=1, device="cpu", root=root)
        (run / "results.json").write_text("{ cut off")
        before = snapshot(run)
        with pytest.raises(RunFolderError, match=r"results.json does not match manifest.json .*; remove that file"):
            evaluate(run, beam=1, device="cpu", root=root)
        assert snapshot(run) == before
    (run / "results.json").unlink()  # as the message says: the next evaluation writes it again
    assert evaluate(run, beam=1, device="cpu", root=root).setting == "test2016.beam1"


def test_evaluate_of_a_file_names_it_as_the_run_folder(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("not a run\n")
    code, err = run_eval_cli([str(afile), "--device", "cpu"], capsys)
    assert code == 2 and f"error: {afile} is not a folder: expected a run folder written by" in err
    assert "--out" not in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = run_eval_cli([str(empty), "--device", "cpu"], capsys)
    assert code == 2 and f"error: {empty} holds no run (no config.json)" in err


def test_evaluate_never_mixes_the_results_of_two_runs(
    tiny_run, evaluated_run, published_copy, tmp_path, root, capsys
):
    other, _ = evaluated_run  # another trained and evaluated run
    before = snapshot(other)
    with pytest.raises(RunFolderError, match=r"is another run's folder; its results.json would mix"):
        evaluate(tiny_run, device="cpu", root=root, out_dir=other)
    assert snapshot(other) == before
    scores = tmp_path / "scores"
    evaluate(other, beam=1, device="cpu", root=root, out_dir=scores)
    evaluate(other, beam=2, device="cpu", root=root, out_dir=scores)  # the same run: kept side by side
    kept = snapshot(scores)
    with pytest.raises(RunFolderError, match=r"holds the results of another run"):
        evaluate(published_copy, beam=1, limit=2, device="cpu", root=root, out_dir=scores)
    assert snapshot(scores) == kept
    afile = tmp_path / "afile"
    afile.write_text("")
    code, err = run_eval_cli([str(other), "--out", str(afile / "x"), "--device", "cpu"], capsys)
    assert code == 2 and f"error: --out {afile / 'x'}: {afile} is a file, not a folder" in err


# --- Ctrl-C and kill -9 of a real training process, then an exact resume --------------------------------


def start(config: Path, out: Path, root: Path, env: dict) -> subprocess.Popen:
    argv = [sys.executable, "-m", "aiayn.train", "--config", str(config), "--out", str(out),
            "--device", "cpu", "--data", str(root), "--no-progress"]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_steps(out: Path, n: int, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and metrics.read_text().count('"event": "step"') >= n:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    raise AssertionError(f"no {n} steps within {timeout} s")


def outcome(out: Path) -> tuple[list, list, dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [(r["step"], r["loss"]) for r in records if r["event"] == "step"]
    evals = [(r["step"], r["val_loss"]) for r in records if r["event"] == "eval"]
    weights = torch.load(out / "checkpoint.pt", weights_only=True)["model"]
    return steps, evals, weights


@pytest.fixture(scope="module")
def straight(tmp_path_factory, root, cache):
    """The uninterrupted run, in a subprocess like the interrupted ones."""
    folder = tmp_path_factory.mktemp("straight")
    config = folder / "tiny.json"
    config.write_text(json.dumps(TINY.with_changes(checkpoint_every=3).to_dict()))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(REPO / "src")}
    process = start(config, folder / "run", root, env)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return config, env, outcome(folder / "run")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_interrupted_training_resumes_exactly(straight, tmp_path, root, sig, capsys):
    config, env, (steps, evals, weights) = straight
    out = tmp_path / "run"
    process = start(config, out, root, env)
    wait_for_steps(out, 7, process)  # mid-epoch, after the checkpoint at step 6
    if sig == signal.SIGINT:  # meanwhile a second training into the same folder fails at once
        argv = ["--config", str(config), "--out", str(out), "--device", "cpu", "--data", str(root)]
        code, err = run_cli(argv, capsys)
        assert code == 2 and "another command is writing into" in err
    process.send_signal(sig)
    _, err = process.communicate(timeout=120)
    if sig != signal.SIGKILL:  # Ctrl-C, pre-emption, a closed terminal: saved, one line, the command
        assert process.returncode == 128 + sig, err
        how = "Ctrl-C" if sig == signal.SIGINT else sig.name
        assert err.count("\n") == 1 and f"interrupted ({how}) at step" in err, err
        assert f"Run the same command again to resume: python -m aiayn.train --config {config}" in err
        assert "Traceback" not in err
    else:
        assert process.returncode == -signal.SIGKILL
    assert steps[-1][0] > json.loads((out / "manifest.json").read_text())["files"]["checkpoint.pt"]["step"]

    resumed = start(config, out, root, env)
    printed, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "resuming" in printed
    got_steps, got_evals, got_weights = outcome(out)
    assert got_steps == steps  # every loss, bit for bit, each step once
    assert got_evals == evals
    assert got_weights.keys() == weights.keys()
    assert all(torch.equal(got_weights[k], weights[k]) for k in weights)
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


# A signal at a chosen moment of a real run: rank 0 wraps the function that moment calls so that it
# sends the signal once (under torchrun, to torchrun, which passes it to every rank, as a terminal's
# Ctrl-C or a pre-emption does), then goes on.
AT_PHASE = """
import os, runpy, signal, sys, time
phase, signum = sys.argv[1], getattr(signal, sys.argv[2])
sys.argv = [sys.argv[0], *sys.argv[3:]]
torchrun = "LOCAL_RANK" in os.environ
import aiayn.training.loop_pieces as pieces, aiayn.runs.run_log as run_log
module, name, nth = {
    "step": (pieces, "train_step", 5),           # the 5th step, mid-epoch
    "validation": (pieces, "mean_loss", 1),      # the first epoch's validation
    "epoch-end": (run_log, "epoch_file", 1),     # writing the first epoch's weights
    "checkpoint": (pieces, "checkpoint_bytes", 1),  # serializing the first checkpoint
}[phase]
original, calls = getattr(module, name), []
def signalled(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth:
        os.kill(os.getppid() if torchrun else os.getpid(), signum)
        if torchrun:
            time.sleep(1.0)  # torchrun passes it on meanwhile
    return original(*args, **kwargs)
if os.environ.get("RANK", "0") == "0":
    setattr(module, name, signalled)
runpy.run_module("aiayn.train", run_name="__main__", alter_sys=True)
"""


def resumes_exactly(out: Path, resumed: subprocess.Popen, straight_outcome: tuple) -> None:
    """The same command, run again, resumes ``out`` and ends as the uninterrupted run did, bit for bit."""
    steps, evals, weights = straight_outcome
    printed, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert "resuming" in printed, printed
    got_steps, got_evals, got_weights = outcome(out)
    assert got_steps == steps  # every loss, bit for bit, each step once
    assert got_evals == evals
    assert all(torch.equal(got_weights[k], weights[k]) for k in weights)
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


# one handler serves the three signals (recipes._stop_on_signals) and each one's exit status and message is
# checked mid-epoch above: each phase meets one signal, validation (where a run was once lost) two
@pytest.mark.parametrize(("phase", "sig"), [("validation", signal.SIGINT), ("validation", signal.SIGHUP),
                                          ("epoch-end", signal.SIGTERM), ("checkpoint", signal.SIGHUP)],
                         ids=lambda v: getattr(v, "name", v))  # fmt: skip
def test_a_signal_at_any_moment_of_a_run_leaves_a_checkpoint_it_resumes_from(straight, tmp_path, root, phase, sig):
    config, env, straight_outcome = straight
    script = tmp_path / "at_phase.py"
    script.write_text(AT_PHASE)
    out = tmp_path / "run"
    argv = ["--config", str(config), "--out", str(out), "--device", "cpu", "--data", str(root), "--no-progress"]
    stopped = subprocess.run([sys.executable, str(script), phase, sig.name, *argv], env=env, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert stopped.returncode == 128 + sig, stopped.stderr
    step = json.loads((out / "summary.json").read_text())["steps"]
    saved = json.loads((out / "manifest.json").read_text())["files"]["checkpoint.pt"]["step"]
    assert saved == step  # what it says is true: the checkpoint is where it stopped
    how = "Ctrl-C" if sig == signal.SIGINT else sig.name
    assert stopped.stderr == (
        f"interrupted ({how}) at step {step}; the checkpoint is saved in {out / 'checkpoint.pt'}. Run the same "
        f"command again to resume: python -m aiayn.train {' '.join(argv)}\n"
    )
    resumes_exactly(out, start(config, out, root, env), straight_outcome)


# The disk fills once the first checkpoint is written: later writes beyond 1 MB fail for real (EFBIG,
# as ENOSPC on a full disk); the epoch weights (0.8 MB) still fit, the next checkpoint (2.4 MB) does not.
FILLS_AFTER_THE_FIRST_CHECKPOINT = """
import resource, runpy, signal, sys
from aiayn.runs.folder import RunFolder
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
record = RunFolder.record
def filling(self, name, written, **more):
    record(self, name, written, **more)
    if name == "checkpoint.pt":
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))
RunFolder.record = filling
runpy.run_module("aiayn.train", run_name="__main__", alter_sys=True)
"""


def test_a_full_disk_costs_only_the_steps_since_the_last_checkpoint_that_fitted(straight, tmp_path, root):
    config, env, straight_outcome = straight
    out = tmp_path / "run"
    argv = ["--config", str(config), "--out", str(out), "--device", "cpu", "--data", str(root), "--no-progress"]
    full = subprocess.run([sys.executable, "-c", FILLS_AFTER_THE_FIRST_CHECKPOINT, *argv], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert full.returncode == 1 and full.stderr == (
        f"error: {out / 'checkpoint.pt'}: no room to write it (File too large); free some space, then run the "
        f"same command again: it resumes from the checkpoint at step 1 ({out / 'checkpoint.pt'}), which the run "
        "keeps\n"
    ), full.stderr
    resumes_exactly(out, start(config, out, root, env), straight_outcome)


def test_an_older_run_folder_is_upgraded_when_training_resumes_in_it(tiny_run, tmp_path, root):
    run = copy_run(tiny_run, tmp_path / "run")
    (run / "manifest.json").unlink()  # as written before manifests existed
    summary = train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)
    assert summary.resumed_from_step is not None and summary.epochs_done == 3
    manifest = json.loads((run / "manifest.json").read_text())
    assert {"config.json", "checkpoint.pt", "metrics.jsonl", "epoch-003.pt"} <= set(manifest["files"])


def test_a_resume_reads_its_checkpoint_once(tiny_run, tmp_path, root, monkeypatch):
    """``plan_run`` reads and checks ``checkpoint.pt``; ``fit`` loads what it read, never the file again."""
    run = copy_run(tiny_run, tmp_path / "run")
    reads, loads = [], []
    read_bytes, load = Path.read_bytes, torch.load

    def counted_read(path):
        if path.name == "checkpoint.pt":
            reads.append(path)
        return read_bytes(path)

    def counted_load(*args, **kwargs):
        loads.append(1)
        return load(*args, **kwargs)

    monkeypatch.setattr(Path, "read_bytes", counted_read)
    monkeypatch.setattr(torch, "load", counted_load)
    summary = train(TINY.with_changes(epochs=3), run, root=root, device="cpu", progress=False)
    assert summary.resumed_from_step is not None and summary.epochs_done == 3
    assert len(reads) == 1 and len(loads) == 1, (reads, loads)
