"""The training command reads as one flow: it goes down through its modules and comes back up.

A *re-entry* is a call into an ``aiayn`` module from another one while the first is still further down
the call stack: a callback, the back-and-forth that makes code hard to follow. Each distinct call site
(caller function -> callee function) counts once, so a loop over steps counts once, not per step.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import aiayn
from aiayn import train as train_cli
from aiayn.data.multi30k import SHA256
from aiayn.runs.presets import PRESETS

pytestmark = pytest.mark.usefixtures("one_thread")

SRC = str(Path(aiayn.__file__).resolve().parent)


def _module(code) -> str | None:
    f = code.co_filename
    return f[len(SRC) + 1 :].removesuffix(".py").replace(os.sep, ".") if f.startswith(SRC) else None


def reentries(run) -> dict[tuple[str, str], int]:
    """Run ``run()`` under ``sys.setprofile`` and return its re-entrant call sites with their call counts."""
    sites: dict[tuple[str, str], int] = {}

    def profile(frame, event, arg):
        if event != "call" or (callee := _module(frame.f_code)) is None:
            return
        caller, below, f = None, [], frame.f_back
        while f is not None:
            if (m := _module(f.f_code)) is not None:
                if caller is None:
                    caller = (m, f.f_code.co_qualname)
                else:
                    below.append(m)
            f = f.f_back
        if caller is not None and caller[0] != callee and callee in below:
            key = (f"{caller[0]}.{caller[1]}", f"{callee}.{frame.f_code.co_qualname}")
            sites[key] = sites.get(key, 0) + 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return sites


@pytest.mark.skipif(sys.version_info < (3, 11), reason="co_qualname needs Python 3.11")
def test_the_train_command_reenters_a_module_at_most_three_times(tmp_path, monkeypatch, capsys):
    root = Path(os.environ.get("AIAYN_DATA") or Path(__file__).resolve().parents[2] / "shared/data/multi30k")
    if any(not (root / name).is_file() for name in SHA256):
        pytest.fail(f"the Multi30k files are missing from {root}: set AIAYN_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = PRESETS["multi30k-smoke"].with_changes(
        train_subset=300, val_subset=10, vocab_size=300, epochs=2, max_tokens=1024, checkpoint_every=3
    )  # two epochs, checkpoints inside and at the end of each
    config = tmp_path / "cfg.json"
    config.write_text(json.dumps(cfg.to_dict()))
    argv = ["--config", str(config), "--out", str(tmp_path / "run"), "--device", "cpu", "--data", str(root)]
    sites = reentries(lambda: train_cli.main([*argv, "--no-progress"]))
    capsys.readouterr()
    assert len(sites) <= 3, sites
    # the training loop's hook lives in run_log, which no caller below it is in: no re-entry at all
    assert not any(callee.startswith("run_log.") for _, callee in sites), sites
