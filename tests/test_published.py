"""The published model: files found, checked and downloaded like Multi30k's, loaded strictly, released.

Reads the published run from ``$AIAYN_MODEL`` (CI: ``shared/runs/multi30k-h100``), else from
``shared/runs/multi30k-h100`` next to the repository; nothing goes to the network.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from aiayn import published as published_cli
from aiayn.pages import book_results
from aiayn.runs import published as P
from aiayn.runs import release as R

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


def _model_dir() -> Path:
    if os.environ.get("AIAYN_MODEL"):
        return Path(os.environ["AIAYN_MODEL"])
    return ROOT.parent / "shared/runs/multi30k-h100"


@pytest.fixture(scope="module")
def shared() -> Path:
    path = _model_dir()
    missing = [n for n in P.SHA256 if not (path / n).is_file()]
    if missing:
        pytest.fail(
            f"published files {missing} are missing from {path}. Set "
            f"AIAYN_MODEL to a folder holding them ({P.RELEASE_URL}<file>)."
        )
    return path


@pytest.fixture(scope="module")
def published(shared):
    return P.load_published(shared, download=False)


def offline(url, deadline):
    raise urllib.error.URLError("no network in tests")


def serve(folder: Path, corrupt: str | None = None):
    """A fake downloader serving ``folder``'s files by name, one file's bytes altered."""
    calls = []

    def download(url, deadline):
        name = url.rsplit("/", 1)[1]
        calls.append(name)
        data = (folder / name).read_bytes()
        if name == corrupt:
            data = data[:-1] + bytes([data[-1] ^ 1])
        yield data[: len(data) // 2]
        yield data[len(data) // 2 :]

    download.calls = calls
    return download


def test_the_release_url_comes_from_the_one_repository_url():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert P.REPOSITORY_URL == config["repository"]["url"].rstrip("/")
    assert P.RELEASE_URL.startswith(P.REPOSITORY_URL + "/releases/download/")


def test_the_package_sums_are_the_runs(shared):
    sums = dict(
        reversed(line.split())
        for line in (shared / "SHA256SUMS").read_text().splitlines()
    )
    assert {name: sums[name] for name in P.SHA256} == P.SHA256


def test_model_dir_argument_then_env_then_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("AIAYN_MODEL", str(tmp_path / "env"))
    assert P.model_dir(tmp_path / "arg") == tmp_path / "arg"
    assert P.model_dir() == tmp_path / "env"
    monkeypatch.delenv("AIAYN_MODEL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert P.model_dir() == tmp_path / "cache/aiayn/models/multi30k-h100"


def test_offline_without_a_copy_names_the_files_and_where_to_put_them(
    tmp_path,
):
    where = tmp_path / "empty"
    for kwargs in ({"downloader": offline}, {"download": False}):
        with pytest.raises(P.ModelUnavailable) as err:
            P.load_published(where, **kwargs)
        msg = str(err.value)
        for name in P.SHA256:
            assert f"{name}  <-  {P.RELEASE_URL}{name}" in msg
        assert str(where) in msg and "AIAYN_MODEL" in msg
    assert not any(where.glob("*")) if where.exists() else True


@pytest.mark.parametrize("name", ["tokenizer.model", P.WEIGHTS])
def test_a_corrupted_file_on_disk_is_refused_by_name(tmp_path, shared, name):
    for other in P.SHA256:
        if other != name:
            (tmp_path / other).symlink_to(shared / other)
    data = bytearray((shared / name).read_bytes()[:4096])
    data[100] ^= 0xFF
    (tmp_path / name).write_bytes(bytes(data))
    with pytest.raises(
        P.ChecksumError, match=f"{tmp_path / name} has SHA-256"
    ):
        P.load_published(tmp_path, downloader=offline)


def test_missing_files_are_downloaded_checked_and_renamed_into_place(
    tmp_path, shared
):
    (tmp_path / "config.json").symlink_to(shared / "config.json")
    download = serve(shared)
    assert P.fetch_published(tmp_path, downloader=download) == tmp_path
    assert sorted(download.calls) == sorted(set(P.SHA256) - {"config.json"})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(P.SHA256)


def test_a_corrupted_download_is_refused_and_nothing_is_left(
    tmp_path, shared
):
    with pytest.raises(
        P.ChecksumError, match=f"{P.RELEASE_URL}tokenizer.model"
    ):
        P.fetch_published(
            tmp_path, downloader=serve(shared, corrupt="tokenizer.model")
        )
    assert not (tmp_path / "tokenizer.model").exists()
    assert not list(tmp_path.glob(".*"))  # no temporary file left


def test_the_download_has_one_deadline(tmp_path, shared):
    with pytest.raises(P.ModelUnavailable, match="deadline"):
        P.fetch_published(
            tmp_path, downloader=serve(shared), deadline_s=-1.0
        )
    assert not list(tmp_path.glob("*")) and not list(tmp_path.glob(".*"))


def test_the_published_weights_load_strictly_as_float32(shared, published):
    saved = torch.load(
        shared / P.WEIGHTS, map_location="cpu", weights_only=True
    )
    assert {
        v.dtype for v in saved["model"].values() if v.is_floating_point()
    } == {torch.float16}
    cfg, tokenizer, model, averaged = published
    state = model.state_dict()
    assert {v.dtype for v in state.values() if v.is_floating_point()} == {
        torch.float32
    }
    assert (
        not model.training and next(model.parameters()).device.type == "cpu"
    )
    assert averaged == [f"epoch-0{e}.pt" for e in range(36, 41)]
    assert tokenizer.vocab_size == cfg.vocab_size == 8000
    # strict: every parameter comes from the file (the same numbers, widened exactly)
    fresh = P.upgrade_state_dict(
        {k: v.float() for k, v in saved["model"].items()}, model
    )
    result = model.load_state_dict(fresh, strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    key = "generator.weight"
    torch.testing.assert_close(
        state[key], saved["model"][key].float(), rtol=0, atol=0
    )


def test_the_published_model_decodes_as_the_run_did(shared, published):
    """On the shortest test sentences, beam search here gives the run's own translations."""
    from aiayn.data.multi30k import load_multi30k
    from aiayn.runs.recipes import translate

    data = (
        os.environ.get("AIAYN_DATA") or ROOT.parent / "shared/data/multi30k"
    )
    test = load_multi30k("test2016", data, download=False)
    hyp = (shared / "test2016.hyp.en").read_text().splitlines()
    cfg, tokenizer, model, _ = published
    short = sorted(range(len(test)), key=lambda i: len(test[i][0]))[:3]
    out = translate(
        model, tokenizer, [test[i][0] for i in short], beam=cfg.beam,
        length_penalty=cfg.length_penalty, max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b,
    )  # fmt: skip
    assert out == [hyp[i] for i in short]


class _Packed(nn.Module):
    """An attention layer whose code packs the projections (a possible later layout)."""

    def __init__(self, d: int = 4):
        super().__init__()
        self.self_attn = nn.Module()
        self.self_attn.w_qkv = nn.Linear(d, 3 * d)
        self.self_attn.w_o = nn.Linear(d, d)
        self.cross_attn = nn.Module()
        self.cross_attn.w_q = nn.Linear(d, d)
        self.cross_attn.w_kv = nn.Linear(d, 2 * d)
        self.cross_attn.w_o = nn.Linear(d, d)


def test_an_older_layout_is_converted_for_a_strict_load():
    torch.manual_seed(0)
    d = 4
    old = {
        f"{a}.{p}.{leaf}": torch.randn(d, d)
        if leaf == "weight"
        else torch.randn(d)
        for a in ("self_attn", "cross_attn")
        for p in ("w_q", "w_k", "w_v", "w_o")
        for leaf in ("weight", "bias")
    }
    model = _Packed(d)
    model.load_state_dict(P.upgrade_state_dict(old, model), strict=True)
    qkv = torch.cat([old[f"self_attn.w_{x}.weight"] for x in "qkv"])
    kv = torch.cat([old[f"cross_attn.w_{x}.bias"] for x in "kv"])
    assert torch.equal(model.self_attn.w_qkv.weight, qkv)
    assert torch.equal(model.cross_attn.w_kv.bias, kv)
    assert torch.equal(
        model.cross_attn.w_q.weight, old["cross_attn.w_q.weight"]
    )


def test_a_layout_without_a_conversion_is_reported_by_key():
    model = _Packed(4)
    odd = {k: v for k, v in model.state_dict().items()} | {
        "extra.weight": torch.ones(1)
    }
    with pytest.raises(RuntimeError, match="extra.weight"):
        model.load_state_dict(P.upgrade_state_dict(odd, model), strict=True)


def test_a_release_from_the_run_folder(tmp_path, shared):
    sums = R.prepare_release(shared, tmp_path)
    run_sums = dict(
        reversed(line.split())
        for line in (shared / "SHA256SUMS").read_text().splitlines()
    )
    for name in (P.WEIGHTS, *R.RUN_FILES):
        assert sums[name] == run_sums[name]
    listed = (tmp_path / "SHA256SUMS").read_text()
    for name, digest in sums.items():
        assert f"{digest}  {name}" in listed
        assert (
            hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
            == digest
        )
    card = (tmp_path / "MODEL_CARD.md").read_text()
    results = json.loads((shared / "results.json").read_text())["test2016"]
    assert f"sacreBLEU {results['sacrebleu']:.2f}" in card
    for words in (
        "Flickr30k",
        "non-commercial research",
        "## Limits",
        "## Recipe",
        P.WEIGHTS,
    ):
        assert words in card


def test_a_release_of_a_flat_config_names_its_sizes(tmp_path, shared):
    """The published run's config.json is flat (older code): the card reads it as well."""
    assert "N" in json.loads((shared / "config.json").read_text())
    R.prepare_release(shared, tmp_path)
    card = (tmp_path / "MODEL_CARD.md").read_text()
    assert "N = 3 layers per stack, d_model = 512, d_ff = 2048, h = 8, P_drop = 0.3" in card
    assert "one joint BPE vocabulary of 8,000 pieces" in card
    assert "Training: the 29,000 pairs" in card and "test: the 1,000 pairs" in card


def test_a_release_needs_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint.pt"):
        R.prepare_release(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_file_is_not_a_model_folder(tmp_path, monkeypatch):
    afile = tmp_path / "model.pt"
    afile.write_bytes(b"weights?")
    with pytest.raises(NotADirectoryError, match=rf"the model folder {afile} is a file, not a folder: give root="):
        P.load_published(afile, downloader=offline)
    monkeypatch.setenv("AIAYN_MODEL", str(afile))
    with pytest.raises(NotADirectoryError, match=r"is a file, not a folder: give \$AIAYN_MODEL"):
        P.load_published(downloader=offline)
    assert afile.read_bytes() == b"weights?"


def run_main(argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        published_cli.main(argv)
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize("day", ["2026-13-45", "2026-02-30", "20261123", "23.11.2026", ""])
def test_the_results_date_is_a_day(tmp_path, day, capsys):
    argv = ["results", str(tmp_path), "--out", str(tmp_path / "out"), "--commit", "abc",
            "--command", "make", "--date", day]  # fmt: skip
    code, err = run_main(argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: argument --date: expected a day as YYYY-MM-DD (e.g. 2026-11-23), got "), err
    assert not (tmp_path / "out").exists()


def test_command_errors_are_one_line(tmp_path, capsys):
    code, err = run_main(["release", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: the run {tmp_path / 'nowhere'} is not"), err
    code, err = run_main(["publish"], capsys)
    assert code == 2 and err.startswith("error: argument command: invalid choice: 'publish'"), err
    assert not (tmp_path / "out").exists()


def test_the_books_results_are_what_write_results_makes_of_the_run(
    tmp_path, shared
):
    """The package's results hold exactly what ``python -m aiayn.published results`` writes from the run."""
    book = P.results_dir()
    record = json.loads((book / "multi30k.json").read_text())
    files = book_results.write_results(
        shared, tmp_path, commit=record["commit"], date=record["measured_at"],
        commands=record["commands"], bench=record["bench"],
    )  # fmt: skip
    for path in files.values():
        assert path.read_bytes() == (book / path.name).read_bytes(), (
            path.name
        )
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        book_results.write_results(
            tmp_path, tmp_path / "out", commit="x", date="y", commands=[]
        )


def test_weights_without_a_config_entry_are_refused_by_name(tmp_path, shared):
    """A release whose weights file holds a 'model' state but no 'config' (its sums match): one
    ValueError naming the file and what it should hold, not a bare KeyError."""
    for name in ("config.json", "tokenizer.model"):
        (tmp_path / name).write_bytes((shared / name).read_bytes())
    weights = tmp_path / "mine-averaged-fp16.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "averaged": []}, weights)
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.iterdir()}
    (tmp_path / R.SUMS).write_text("".join(f"{digest}  {name}\n" for name, digest in sums.items()))
    with pytest.raises(ValueError) as refused:
        P.load_published(tmp_path, download=False)
    assert str(refused.value) == (
        f"{weights} holds no 'config' entry (it holds 'averaged', 'model'): expected the run's config "
        "beside its 'model' weights, as a release writes them; copy it from the release again"
    )


# --- The reader's loader apart from the maintainer's tools --------------------------------------------

LOADED = """
import sys
from aiayn.runs.published import load_published
load_published(sys.argv[1])
print(" ".join(sorted(m for m in sys.modules if m.startswith("aiayn"))))
"""


def test_loading_the_published_model_imports_no_training_or_release_module():
    """A reader who loads the model gets the model: not the training pipeline, nor the tools that
    make a release or the book's results (before: 37 of the package's modules, these among them)."""
    import subprocess
    import sys

    from conftest import PUBLISHED

    src = str(Path(__file__).resolve().parents[1] / "src")
    done = subprocess.run([sys.executable, "-c", LOADED, str(PUBLISHED)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": src}, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    loaded = set(done.stdout.split())
    assert "aiayn.model" in loaded and "aiayn.runs.weights_files" in loaded
    # the folders a loader has no use for, and the maintainer's tools of runs/
    tools = {m for m in loaded if m.startswith(("aiayn.training", "aiayn.export", "aiayn.pages", "aiayn.bench"))}
    tools |= loaded & {"aiayn.runs.recipes", "aiayn.runs.run_log", "aiayn.runs.scoring", "aiayn.runs.release"}
    assert tools == set(), tools
