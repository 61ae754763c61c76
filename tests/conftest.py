"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

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
    from aiayn.translation import load_run

    if not PUBLISHED.is_dir():
        pytest.fail(f"the published model is missing from {PUBLISHED}")
    _, tokenizer, model, _ = load_run(PUBLISHED, "cpu")
    return model, tokenizer
