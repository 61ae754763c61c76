"""Fixtures shared by the unit tests."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

# the Multi30k files beside the repository (CI sets $AIAYN_DATA to them)
DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k"
# the published model, read only (tests that change a run work on a copy in a temporary folder)
PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"
REPO = Path(__file__).resolve().parents[1]


def assert_same_record(a, b, where: str = "", scale: float = 0.0) -> None:
    """Two records of the step-through (``aiayn.pages.stepthrough``) hold the same numbers.

    Each side rounds its numbers to 3 significant digits (the scores to 4), so each may be a unit of that
    digit off; and float32 sums added in another order (another CPU's matrix kernels) move a number by up
    to about a millionth of the largest in its row (ten times that is allowed): a score near zero beside
    one of 77 reads -0.00557 on one machine and -0.005573 on another. Dicts and lists must match in keys
    and lengths, other values exactly.
    """
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), where
        for key in a:
            assert_same_record(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        row = [abs(x) for x in (*a, *b) if isinstance(x, float) and math.isfinite(x)]
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_record(x, y, f"{where}[{i}]", max(row, default=0.0))
    elif isinstance(a, float) and isinstance(b, float):
        digits = 4 if ".scores[" in where else 3
        size = max(abs(a), abs(b), 1e-30)
        unit = 10 ** (math.floor(math.log10(size)) - digits + 1)
        assert abs(a - b) <= 1.01 * unit + 1e-5 * scale, f"{where}: {a} != {b}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_map(saved, again, where: str = "record") -> None:
    """Two records of the embedding map (``aiayn.pages.embedding_map``): equal, numbers to within the 3
    decimals the file keeps (and float noise)."""
    if isinstance(saved, float) or isinstance(again, float):
        assert abs(saved - again) <= 1.5e-3, f"{where}: {saved} != {again}"
    elif isinstance(saved, (list, dict)):
        assert type(saved) is type(again) and len(saved) == len(again), f"{where}: {saved} != {again}"
        keys = saved.keys() if isinstance(saved, dict) else range(len(saved))
        if isinstance(saved, dict):
            assert saved.keys() == again.keys(), where
        for key in keys:
            assert_same_map(saved[key], again[key], f"{where}[{key!r}]")
    else:
        assert saved == again, f"{where}: {saved!r} != {again!r}"


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
def exported():
    """The published model exported as the site build exports it: ``python -m aiayn.export --bleu int8
    --limit 100 --shortlist train`` (its int8 files scored on the first 100 sentences of test 2016,
    greedy and beam 4), by ``tools/site_assets.py``'s ``export``.

    One export for the tests and the build: it lands in _build/translator-export/<key>, the key naming
    the weights and the exporter's source, so that whoever comes second (a pytest-xdist worker, the
    site build, the next run) reads it instead of exporting again, and a change to the exporter
    exports again. The workers take turns under a lock. The tests read it and never change it.
    """
    import importlib.util

    from filelock import FileLock

    from aiayn.runs.published import weights_file

    if not PUBLISHED.is_dir():
        pytest.fail(f"the published model is missing from {PUBLISHED}")
    spec = importlib.util.spec_from_file_location("site_assets", REPO / "tools" / "site_assets.py")
    site_assets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(site_assets)
    data = Path(os.environ.get("AIAYN_DATA") or DATA)
    site_assets.EXPORTS.mkdir(parents=True, exist_ok=True)
    with FileLock(site_assets.EXPORTS / "export.lock"), pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIAYN_DATA", str(data))  # the command scores test 2016 and learns the shortlist from it
        out, _ = site_assets.export(weights_file(PUBLISHED), data)
    return out
