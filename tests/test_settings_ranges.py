"""Every numeric setting has a range, checked before any work, with a message that names it (issue 47).

A run's ``TrainConfig`` (and its model's sizes) is checked when it is built: from a preset, from a
``--config`` file (``from_dict``) or with ``with_changes``. ``pad_rows: 100000`` in a ``--config``
once grew the train command to 23 GB until the kernel killed it; ``cpu_threads: 1000`` and
``length_penalty: Infinity`` were accepted (the second then refused by evaluate). ``python -m
aiayn.training.equivalence check 1000000000`` started a billion processes' worth of torchrun.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from aiayn import train as train_cli
from aiayn.runs.presets import PRESETS, TrainConfig, get_preset
from aiayn.training import distributed, equivalence

SMOKE = PRESETS["multi30k-smoke"]
PUBLISHED = Path(os.environ.get("AIAYN_MODEL") or Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100")
CPUS = os.cpu_count() or 1
THREADS = max(CPUS, 64)
BIG = "; eight times the paper's big model (d_model 1024, d_ff 4096, h 16, N 6, d_k 64) at most"
LP = (
    "; as evaluate's --length-penalty: beyond 13, the penalty ((5 + L) / 6)^alpha of a 5000-token "
    "output overflows float32 (the paper uses 0.6)"
)


def smoke_config(**changes) -> dict:
    """The smoke preset as a config.json holds it, with fields replaced (``model`` ones inside it)."""
    values = SMOKE.to_dict()
    values["model"].update(changes.pop("model", {}))
    return values | changes


CASES = [
    ({"pad_rows": 100000}, "pad_rows must be an integer in 1..1024 (or null), got 100000; a batch of "
     "max_tokens=2048 positions holds at most 1024 pairs, so a larger multiple only adds empty rows"),
    ({"pad_rows": 0}, "pad_rows must be an integer in 1..1024 (or null), got 0"),
    ({"pad_to": 129}, "pad_to must be an integer in 1..128 (or null), got 129; no sentence is longer than "
     "model.max_len=128, so a larger multiple only adds padding"),
    ({"cpu_threads": 1000}, f"cpu_threads must be an integer in 1..{THREADS} (or null), got 1000; this "
     f"machine has {CPUS} CPUs, and threads beyond them only wait on each other"),
    ({"cpu_threads": 0}, f"cpu_threads must be an integer in 1..{THREADS} (or null), got 0"),
    ({"length_penalty": math.inf}, "length_penalty must be a number in [0, 13], got inf" + LP),
    ({"length_penalty": math.nan}, "length_penalty must be a number in [0, 13], got nan" + LP),
    ({"length_penalty": 13.5}, "length_penalty must be a number in [0, 13], got 13.5" + LP),
    ({"length_penalty": -0.1}, "length_penalty must be a number in [0, 13], got -0.1" + LP),
    ({"max_tokens": 10**9}, "max_tokens must be an integer in 1..1048576, got 1000000000; about twenty times "
     "the paper's batches of 25,000 source and 25,000 target tokens"),
    ({"max_tokens": True}, "max_tokens must be an integer in 1..1048576, got True"),
    ({"beam": 1000}, "beam must be an integer in 1..64, got 1000; the paper uses 4"),
    ({"beam": 0}, "beam must be an integer in 1..64, got 0"),
    ({"seed": -1}, "seed must be an integer in 0..18446744073709551615, got -1; what torch.manual_seed takes"),
    ({"seed": 2**64}, "seed must be an integer in 0..18446744073709551615, got 18446744073709551616"),
    ({"average_last": 10**6}, "average_last must be an integer in 0..100, got 1000000; each epoch averaged is "
     "kept on disk"),
    ({"lr_factor": math.inf}, "lr_factor must be a finite number > 0, got inf"),
    ({"lr_factor": 0}, "lr_factor must be a finite number > 0, got 0"),
    ({"label_smoothing": 1.0}, "label_smoothing must be a number in [0, 1), got 1.0"),
    ({"clip_norm": math.nan}, "clip_norm must be a finite number > 0 (or null), got nan"),
    ({"checkpoint_minutes": math.inf}, "checkpoint_minutes must be a finite number > 0 (or null), got inf"),
    ({"max_len_a": math.inf}, "max_len_a must be a number in [0, 128], got inf; outputs stop at "
     "model.max_len=128 positions anyway"),
    ({"max_len_b": 10**6}, "max_len_b must be an integer in 0..128, got 1000000; outputs stop at "
     "model.max_len=128 positions anyway"),
    ({"epochs": 0}, "epochs must be an integer >= 1, got 0"),
    ({"warmup": 2.5}, "warmup must be an integer >= 1, got 2.5"),
    ({"max_steps": -3}, "max_steps must be an integer >= 1 (or null), got -3"),
    ({"train_subset": "all"}, "train_subset must be an integer >= 1 (or null), got 'all'"),
    ({"model": {"N": 10**6}}, "model.N must be an integer in 1..48, got 1000000" + BIG),
    ({"model": {"d_model": 2**20, "h": 1}}, "model.d_model must be an integer in 1..8192, got 1048576" + BIG),
    ({"model": {"d_ff": 10**7}}, "model.d_ff must be an integer in 1..32768, got 10000000" + BIG),
    ({"model": {"h": 256, "d_model": 512}}, "model.h must be an integer in 1..128, got 256" + BIG),
    ({"model": {"d_k": 10**5}}, "model.d_k must be an integer in 1..512 (or null), got 100000" + BIG),
    ({"model": {"max_len": 10**6}}, "model.max_len must be an integer in 1..5000, got 1000000; length_penalty's "
     "bound, 13, keeps the penalty finite for outputs up to 5000 positions"),
    ({"model": {"src_vocab_size": 10**7, "tgt_vocab_size": 10**7}}, "model.src_vocab_size must be an integer in "
     "8..65536, got 10000000; the paper's joint vocabulary had about 37,000 pieces"),
]  # fmt: skip


def _case_id(changes: dict) -> str:
    name, value = next(iter(changes.items()))
    return f"model.{next(iter(value))}" if name == "model" else f"{name}={value!r}"


@pytest.mark.parametrize(("changes", "message"), CASES, ids=[_case_id(c) for c, _ in CASES])
def test_a_config_file_with_a_setting_out_of_range_is_refused_with_the_range(changes, message):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        TrainConfig.from_dict(smoke_config(**changes))


def test_with_changes_and_presets_check_the_same_ranges():
    with pytest.raises(ValueError, match=r"^pad_rows must be an integer in 1\.\.4096 \(or null\), got 100000;"):
        get_preset("multi30k", pad_rows=100000)
    with pytest.raises(ValueError, match=r"^cpu_threads must be an integer in 1\.\."):
        SMOKE.with_changes(cpu_threads=1000)
    with pytest.raises(ValueError, match=r"^length_penalty must be a number in \[0, 13\], got inf"):
        TrainConfig(length_penalty=math.inf)
    with pytest.raises(ValueError, match=r"^model\.N must be an integer in 1\.\.48, got 49"):
        SMOKE.with_changes(N=49)


def test_the_presets_the_published_config_and_the_bounds_themselves_are_accepted():
    for cfg in PRESETS.values():
        assert train_cli.with_cuda_graphs(cfg).pad_rows == 32
    flat = json.loads((PUBLISHED / "config.json").read_text())
    assert TrainConfig.from_dict(flat).model.N == 3
    edges = dict(pad_rows=1024, pad_to=128, cpu_threads=THREADS, length_penalty=13, max_len_a=128.0,
                 max_len_b=128, beam=64, seed=2**64 - 1, average_last=100, max_tokens=2048)  # fmt: skip
    assert SMOKE.with_changes(**edges).pad_rows == 1024
    assert TrainConfig.from_dict(smoke_config(length_penalty=0, cpu_threads=None, pad_rows=None))


def _refused_before_training(argv, monkeypatch, capsys) -> str:
    """Run the train command in this process; training must never start. Its one ``error:`` line."""

    def started(*args, **kwargs):
        raise AssertionError("the run started")

    monkeypatch.setattr(train_cli, "train", started)
    with pytest.raises(SystemExit) as stop:
        train_cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"pad_rows": 100000', "pad_rows must be an integer in 1..1024 (or null), got 100000; a batch of"),
        ('"cpu_threads": 1000', f"cpu_threads must be an integer in 1..{THREADS} (or null), got 1000;"),
        ('"length_penalty": Infinity', "length_penalty must be a number in [0, 13], got inf; as evaluate's"),
    ],
)
def test_the_train_command_refuses_a_config_out_of_range_before_any_work(
    text, message, tmp_path, monkeypatch, capsys
):
    config = json.dumps(SMOKE.to_dict(), indent=1)
    key = text.split(":")[0]
    config = re.sub(rf"{key}: [^,\n]+", text, config)
    assert text in config
    path = tmp_path / "config.json"
    path.write_text(config)
    err = _refused_before_training(["--config", str(path), "--out", str(tmp_path / "run")], monkeypatch, capsys)
    assert err.startswith(f"error: {message}"), err
    assert not (tmp_path / "run").exists()


def test_the_equivalence_check_refuses_more_ranks_than_it_can_run_before_starting_any(monkeypatch, capsys):
    started = []
    monkeypatch.setattr(distributed, "launch_cpu", lambda *args, **kwargs: started.append(args) or 1 / 0)
    bound = max(CPUS, 4)
    with pytest.raises(SystemExit) as stop:
        equivalence.main(["check", "1000000000"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and not started, err
    assert err == (
        f"error: argument n: expected an integer in 1..{bound}, got 1000000000; each rank is a process of its "
        f"own and this machine has {CPUS} CPUs (the bound is never below 4) (see python -m aiayn.equivalence "
        "check --help)\n"
    )
    with pytest.raises(ValueError, match=rf"^n must be an integer in 1\.\.{bound}, got 1000000000; each rank"):
        equivalence.check_equivalence(10**9)
    assert not started
