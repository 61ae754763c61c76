"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

# the Multi30k files beside the repository (CI sets $AIAYN_DATA to them)
DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k"
# the published model, read only (tests that change a run work on a copy in a temporary folder)
PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's tests on one intra-op thread.

    Tiny models gain nothing from threads, and on a machine whose cores are shared with other
    processes, threads make them many times slower.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def published():
    """``(model, tokenizer)`` of the published run, in eval mode on the CPU; nothing is written."""
    from aiayn.runs.load import load_run

    if not PUBLISHED.is_dir():
        pytest.fail(f"the published model is missing from {PUBLISHED}")
    _, tokenizer, model, _ = load_run(PUBLISHED, "cpu")
    return model, tokenizer


@pytest.fixture(scope="module")
def root() -> Path:
    """The Multi30k folder: ``$AIAYN_DATA``, else ``../shared/data/multi30k``; the tests train on it."""
    from aiayn.data.multi30k import SHA256

    folder = Path(os.environ.get("AIAYN_DATA") or DATA)
    missing = [name for name in SHA256 if not (folder / name).is_file()]
    if missing:
        pytest.fail(
            f"Multi30k files {missing} are missing from {folder}: set AIAYN_DATA to the folder "
            "that holds the six *.gz files (see aiayn.data.multi30k.load_multi30k)"
        )
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Tokenizers are cached in a temporary folder (also for subprocesses), not in ~/.cache."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(folder))
        yield folder


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """The published model exported by ``python -m aiayn.export`` into a temporary folder, the int8
    files scored on the first 100 sentences of test 2016 (greedy and beam 4).

    One export a run: the pytest-xdist workers share it (the first exports, under a lock, the others
    wait and read it). The tests read it and never change it.
    """
    from filelock import FileLock

    from aiayn.export.command import main
    from aiayn.export.graphs import MANIFEST

    if not PUBLISHED.is_dir():
        pytest.fail(f"the published model is missing from {PUBLISHED}")
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's folder, above each worker's own
    out = shared / "export"
    with FileLock(shared / "export.lock"):
        if not (out / MANIFEST).is_file():  # none yet, or one cut off
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("AIAYN_DATA", os.environ.get("AIAYN_DATA") or str(DATA))
                main([str(PUBLISHED), "--out", str(out), "--limit", "100"])
    return out
