"""Releasing a run: ``python -m aiayn.published release RUN --out DIR`` on a run trained by today's code.

A tiny run is trained and evaluated on the CPU (seconds), released by the command in a subprocess,
and loaded back with ``load_published(root=DIR)``; the refusals leave every folder as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aiayn import published as published_cli
from aiayn.data.multi30k import load_multi30k
from aiayn.decoding.translate import translate
from aiayn.runs import published as P
from aiayn.runs import release as R
from aiayn.runs.load import load_run
from aiayn.runs.presets import PRESETS
from aiayn.runs.recipes import train
from aiayn.runs.scoring import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]
TINY = PRESETS["multi30k-smoke"].with_changes(
    train_subset=400, val_subset=20, test_subset=5, vocab_size=300, epochs=2,
    max_tokens=1024, warmup=10, average_last=2, checkpoint_minutes=None,
)  # fmt: skip
WEIGHTS = "multi30k-smoke-averaged-fp32.pt"  # float32 by default: exactly the run




@pytest.fixture(scope="module")
def run(tmp_path_factory, root, cache) -> Path:
    """A run of today's code (config.json nests the model's sizes), trained and scored on test2016."""
    out = tmp_path_factory.mktemp("tiny") / "run"
    train(TINY, out, root=root, device="cpu", progress=False)
    evaluate(out, device="cpu", root=root)
    return out


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's SHA-256 (hidden ones too), to show that nothing changed."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def release(run: Path, out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(cache)}
    argv = [sys.executable, "-m", "aiayn.published", "release", str(run), "--out", str(out), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess, *words: str) -> None:
    """One ``error:`` line, exit status 2, saying ``words``."""
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    for w in words:
        assert w in done.stderr, done.stderr


@pytest.fixture(scope="module")
def released(run, cache, tmp_path_factory) -> Path:
    before = snapshot(run)
    out = tmp_path_factory.mktemp("release") / "multi30k-smoke"
    done = release(run, out, cache)
    assert done.returncode == 0, done.stderr
    assert snapshot(run) == before  # the run is only read
    return out


def test_the_run_nests_the_model_config(run):
    config = json.loads((run / "config.json").read_text())
    assert "N" not in config and config["model"]["N"] == TINY.model.N


def test_a_release_holds_its_files_and_their_sums(released):
    names = sorted(p.name for p in released.iterdir())
    assert names == sorted([WEIGHTS, *R.RUN_FILES, "MODEL_CARD.md", "SHA256SUMS"])
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=released, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK\n") == len(names) - 1, check.stdout
    sums = R.read_sums(released / "SHA256SUMS")
    for name, digest in sums.items():
        assert hashlib.sha256((released / name).read_bytes()).hexdigest() == digest
    assert {p.stat().st_mode & 0o777 for p in released.iterdir()} == {0o666 & ~_umask()}


def test_the_check_command_checks_a_release(released, capsys):
    assert published_cli.main(["check", str(released)]) == 0
    listed = sorted(p.name for p in released.iterdir() if p.name != "SHA256SUMS")
    assert capsys.readouterr().out == f"{released}: {', '.join(listed)} present and intact\n"


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def test_the_model_card_reads_todays_config(released, run):
    card = (released / "MODEL_CARD.md").read_text()
    m = TINY.model
    assert card.startswith("# multi30k-smoke: a German-to-English Transformer")
    assert f"N = {m.N} layers per stack, d_model = {m.d_model}, d_ff = {m.d_ff}, h = {m.h}" in card
    assert f"`{WEIGHTS}` holds the mean of the weights of the last 2 epochs" in card
    assert "Training: the first 400 of the 29,000 pairs of the Multi30k task 1 training split" in card
    assert "validation: the first 20 of the 1,014 pairs" in card and "test: the first 5 of the 1,000 pairs" in card
    results = json.loads((run / "results.json").read_text())["test2016"]
    assert f"our BLEU {results['bleu']:.2f}" in card


def test_a_release_loads_and_translates_as_its_run(released, run, root):
    cfg, tokenizer, model, averaged = P.load_published(released, download=False)
    assert cfg == TINY and averaged == ["epoch-001.pt", "epoch-002.pt"]
    _, run_tokenizer, run_model, _ = load_run(run, "cpu")
    sentences = [de for de, _ in load_multi30k("test2016", root, download=False)[:200]]
    settings = dict(beam=cfg.beam, length_penalty=cfg.length_penalty, max_len_a=cfg.max_len_a,
                    max_len_b=cfg.max_len_b)  # fmt: skip
    ours = translate(model, tokenizer, sentences, **settings)
    assert ours == translate(run_model, run_tokenizer, sentences, **settings)  # all 200, exactly
    assert ours[: TINY.test_subset] == (run / "test2016.hyp.en").read_text().splitlines()
    assert all(torch.equal(v, run_model.state_dict()[k]) for k, v in model.state_dict().items())


def test_a_half_release_is_float16_and_half_the_size(run, released, cache, tmp_path):
    out = tmp_path / "half"
    done = release(run, out, cache, "--half")
    assert done.returncode == 0, done.stderr
    half = out / "multi30k-smoke-averaged-fp16.pt"
    assert 0.45 < half.stat().st_size / (released / WEIGHTS).stat().st_size < 0.7  # + the pickle
    saved = torch.load(half, weights_only=True)["model"]
    assert {v.dtype for v in saved.values() if v.is_floating_point()} == {torch.float16}
    assert "in float16" in (out / "MODEL_CARD.md").read_text()
    cfg, _, model, _ = P.load_published(out, download=False)
    assert next(model.parameters()).dtype == torch.float32  # run as float32


def copy_of(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for p in folder.iterdir():
        (dest / p.name).write_bytes(p.read_bytes())
    return dest


def test_a_damaged_release_is_refused_by_name(released, tmp_path):
    copy = copy_of(released, tmp_path / "copy")
    data = bytearray((copy / "tokenizer.model").read_bytes())
    data[100] ^= 0xFF
    (copy / "tokenizer.model").write_bytes(bytes(data))
    damaged = rf"{copy / 'tokenizer.model'} has SHA-256 .*not the one .*SHA256SUMS lists"
    with pytest.raises(P.ChecksumError, match=damaged):
        P.load_published(copy)
    (copy / "tokenizer.model").unlink()
    with pytest.raises(P.ModelUnavailable, match=r"lacks tokenizer.model, which its SHA256SUMS lists"):
        P.load_published(copy)
    assert not (copy / "tokenizer.model").exists()  # nothing is downloaded into a release


def test_a_release_holds_one_weights_file(released, tmp_path):
    copy = copy_of(released, tmp_path / "copy")
    (copy / P.WEIGHTS).write_bytes((copy / WEIGHTS).read_bytes())
    with pytest.raises(P.ModelUnavailable, match=rf"holds 2 weights files \({P.WEIGHTS}, {WEIGHTS}\)"):
        P.load_published(copy)


def test_a_folder_holding_another_run_is_left_untouched(run, released, cache, tmp_path):
    other = copy_of(run, tmp_path / "other")
    before = snapshot(other)
    refused(release(run, other, cache), f"the release folder {other} already holds a run folder",
            "remove it, or choose another with --out")  # fmt: skip
    assert snapshot(other) == before
    refused(release(run, released, cache), "already holds a release (it has SHA256SUMS)")


def test_a_run_without_results_is_refused(run, cache, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for p in run.iterdir():
        if p.name not in ("results.json", "test2016.hyp.en", ".lock"):
            (bare / p.name).write_bytes(p.read_bytes())
    before = snapshot(bare)
    out = tmp_path / "out"
    refused(release(bare, out, cache), "lacks results.json, test2016.hyp.en", "python -m aiayn.evaluate")
    assert snapshot(bare) == before and not out.exists()


def test_results_of_other_weights_are_refused(run, tmp_path):
    bare = copy_of(run, tmp_path / "run")
    (bare / "manifest.json").unlink()  # a run of older code: no manifest to check the files against
    results = json.loads((bare / "results.json").read_text())
    results["test2016"]["checkpoints"] = ["epoch-001.pt"]
    (bare / "results.json").write_text(json.dumps(results))
    with pytest.raises(R.ReleaseError, match=r"come from the mean of epoch-001.pt, but .* evaluate it again"):
        R.prepare_release(bare, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_interrupted_release_is_named_as_such(run, released, cache, tmp_path):
    half = tmp_path / "half"
    half.mkdir()
    for name in (WEIGHTS, "tokenizer.model", "config.json"):  # what a release had written when it stopped
        (half / name).write_bytes((released / name).read_bytes())
    before = snapshot(half)
    refused(release(run, half, cache), "an unfinished release (no SHA256SUMS, which a release writes last")
    assert snapshot(half) == before
    with pytest.raises(P.ModelUnavailable, match=r"no SHA256SUMS: an unfinished release"):
        P.load_published(half)
    assert snapshot(half) == before  # and nothing was downloaded into it


def test_a_release_never_writes_into_its_run(run, cache):
    before = snapshot(run)
    refused(release(run, run / "release", cache), "is inside the run", "choose a folder outside it")
    refused(release(run, run, cache), "is inside the run")
    assert snapshot(run) == before and not (run / "release").exists()


def test_a_run_stopped_by_max_steps_can_be_released(cache, root, tmp_path):
    """max_steps stops inside an epoch: the checkpoint, then a last validation line; the manifest holds both."""
    run = tmp_path / "stopped"
    train(TINY.with_changes(max_steps=7), run, root=root, device="cpu", progress=False)
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "eval" and last["step"] == 7
    evaluate(run, device="cpu", root=root)
    done = release(run, tmp_path / "release", cache)
    assert done.returncode == 0, done.stderr
