"""aiayn.bench: every contender on the same batches, warm-up apart, interleaved timed rounds, ops per step."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from aiayn import bench
from aiayn.bench import run
from aiayn.bench.compile_warnings import (
    COMPILE_LOGGERS,
    collect_compile_warnings,
    compile_note,
)
from aiayn.bench.contenders import ALL_CONTENDERS, CONTENDERS
from aiayn.bench.flops import peak_tflops
from aiayn.bench.op_counts import count_step_ops
from aiayn.bench.run import (
    format_table,
    multi30k_batches,
    run_bench,
    synthetic_batches,
)
from aiayn.bench.timing import pass_order, ratio_summary, timed_rounds
from aiayn.data.multi30k import PAD, SHA256, DatasetUnavailable
from aiayn.engine.switch import set_fast
from aiayn.model import Transformer, TransformerConfig

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = dict(d_model=16, d_ff=32, h=2, N=1, vocab_size=60, max_tokens=160, seq_len=8)
DATA = Path(os.environ.get("AIAYN_DATA") or Path(__file__).resolve().parents[1].parent / "shared/data/multi30k")


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(60, 60, d_model=16, d_ff=32, h=2, N=2, dropout=0.1, pad_id=PAD))


def _spy_on_batches(monkeypatch) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The batches of every contender's warm-up and of every timed pass."""
    seen = []
    warm_up, timed_pass = run.warm_up, run.timed_pass

    def spy_warm_up(step, batches, *args):
        seen.append([(b.src, b.tgt_out) for b in batches])
        return warm_up(step, batches, *args)

    def spy_timed_pass(step, batches, *args):
        seen.append([(b.src, b.tgt_out) for b in batches])
        return timed_pass(step, batches, *args)

    monkeypatch.setattr(run, "warm_up", spy_warm_up)
    monkeypatch.setattr(run, "timed_pass", spy_timed_pass)
    return seen


def _same_tensors(seen) -> bool:
    first, *others = seen
    return all(a is x and b is y for batches in others for (a, b), (x, y) in zip(batches, first, strict=True))


def test_every_eager_contender_trains_on_the_same_batches(monkeypatch):
    seen = _spy_on_batches(monkeypatch)
    eager = [c for c in ALL_CONTENDERS if "compiled" not in c]
    rows = run_bench("cpu", **TINY, steps=2, warmup=1, data="synthetic", contenders=eager, rounds=2)
    assert [r["name"] for r in rows] == eager and len(seen) == len(eager) * (1 + 2)  # warm-up, 2 rounds
    assert _same_tensors(seen)  # the very same tensors, not equal copies
    assert len({r["params"] for r in rows}) == 1
    shapes = len({(b.src.shape, b.tgt_in.shape) for b in synthetic_batches(2, 160, 8, 60)})
    assert all(r["data"] == "synthetic" and r["shapes"] == shapes for r in rows)
    explicit, fused, fast = rows[:3]  # same weights, batches and dropout draws
    assert fused["loss"] == pytest.approx(explicit["loss"], abs=1e-4)
    assert fast["loss"] == pytest.approx(explicit["loss"], abs=1e-4)
    assert all(r["ops_per_step"] > 0 for r in rows)


def test_compiled_contenders_train_on_the_same_batches(monkeypatch):
    seen = _spy_on_batches(monkeypatch)
    names = ["ours (set_fast)", "ours (set_fast, compiled)", "nn.Transformer (compiled)"]
    rows = run_bench("cpu", **TINY, steps=2, warmup=1, data="synthetic", contenders=names,
                     compile_backend="eager", rounds=2)  # fmt: skip
    assert [r["name"] for r in rows] == names and _same_tensors(seen)
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], abs=1e-4)  # compiled: the same numbers
    assert rows[0]["ops_per_step"] > 0
    assert rows[1]["ops_per_step"] is None and rows[2]["ops_per_step"] is None  # compiled: not counted
    assert all(r["warmup_extra_s"] is not None for r in rows)  # the compile time is in the warm-up
    assert rows[0]["compile_warnings"] is None and isinstance(rows[1]["compile_warnings"], list)


class _SlowFirstShape(nn.Module):
    """Wraps a model; the first call on each input shape sleeps, as a per-shape kernel plan would."""

    def __init__(self, model: nn.Module, delay: float):
        super().__init__()
        self.model, self.delay, self.shapes = model, delay, set()

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        if self.training and (src.shape, tgt.shape) not in self.shapes:
            self.shapes.add((src.shape, tgt.shape))
            time.sleep(self.delay)
        return self.model(src, tgt, src_mask, tgt_mask)


def test_warm_up_is_reported_apart_from_the_steady_state(monkeypatch):
    make = run.make_contender
    monkeypatch.setattr(run, "make_contender", lambda *args: _SlowFirstShape(make(*args), 0.1))
    (row,) = run_bench("cpu", **TINY, steps=4, warmup=2, data="synthetic", contenders=["ours (fused)"], ops=False,
                       rounds=2)  # fmt: skip
    shapes = len({(b.src.shape, b.tgt_in.shape) for b in synthetic_batches(4, 160, 8, 60)})
    assert row["first_shape_steps"] == row["shapes"] == shapes > 1  # one per new shape, none in pass two
    assert row["first_shape_ms"] >= 100  # the delay is in the warm-up ...
    assert row["warmup_extra_s"] >= shapes * 0.1 * 0.9
    assert row["step_ms"] < 100  # ... and not in the steady state
    assert row["warmup_s"] >= shapes * 0.1
    assert row["tokens_per_s"] == pytest.approx(
        sum(b.n_tokens for b in synthetic_batches(4, 160, 8, 60)) / (row["step_ms"] * 4 / 1000)
    )

    (cold,) = run_bench("cpu", **TINY, steps=2, warmup=0, data="synthetic", contenders=["ours (fused)"], ops=False,
                        rounds=2)  # fmt: skip
    assert cold["first_shape_steps"] == 0 and cold["first_shape_ms"] is None and cold["warmup_extra_s"] is None
    assert cold["round_ms"][0] * 2 >= 100  # no warm-up pass: the first round pays for the new shape


def test_rounds_rotate_so_every_contender_takes_every_place():
    assert [pass_order(3, r) for r in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    for place in range(3):  # over 3 rounds, each contender is once first, once second, once last
        assert sorted(pass_order(3, r)[place] for r in range(3)) == [0, 1, 2]


def test_timed_rounds_finish_one_round_before_the_next_begins():
    calls = []

    def fake_pass(c: int, r: int) -> float:  # a probe: records the order, returns known times
        calls.append((c, r))
        return 10.0 * c + r

    times = timed_rounds(fake_pass, 3, 2)
    assert calls == [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1), (0, 1)]
    assert times == [[0.0, 1.0], [10.0, 11.0], [20.0, 21.0]]
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        timed_rounds(fake_pass, 3, 0)


def test_the_speed_is_the_median_of_per_round_ratios_not_the_ratio_of_medians():
    times = {"base": [1.0, 3.0, 10.0], "other": [2.0, 1.0, 20.0], "same": [1.0, 3.0, 10.0]}
    summary = ratio_summary(times)
    assert summary["base"] == (1.0, 1.0, 1.0)
    assert summary["other"] == (0.5, 0.5, 3.0)  # per round 0.5, 3, 0.5; the medians' ratio would be 1.5
    assert summary["same"] == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="expected 3 round times .* for 'short', as for 'base', got 2"):
        ratio_summary({"base": [1.0, 2.0, 3.0], "short": [1.0, 2.0]})


def test_run_bench_interleaves_the_passes_and_each_contender_keeps_its_own_state(monkeypatch):
    order, trainers = [], {}
    timed_pass = run.timed_pass

    def probe(step, batches, device):
        order.append(step.name)
        trainers[step.name] = step
        return timed_pass(step, batches, device)

    monkeypatch.setattr(run, "timed_pass", probe)
    names = ["ours (explicit)", "ours (fused)", "ours (set_fast)"]
    rows = run_bench("cpu", **TINY, steps=2, warmup=1, data="synthetic", contenders=names, ops=False, rounds=3)
    assert order == [names[c] for r in range(3) for c in pass_order(3, r)]  # round by round, rotating
    assert len({id(t.model) for t in trainers.values()}) == len({id(t.optimizer) for t in trainers.values()}) == 3
    for t in trainers.values():  # every contender: its own Adam, one step per batch of each pass
        assert all(int(state["step"]) == (1 + 3) * 2 for state in t.optimizer.state.values())
    assert rows[1]["loss"] == pytest.approx(rows[0]["loss"], abs=1e-4)  # pass r: the same dropout draws for all
    for r in rows:  # the speed is the median of the per-round ratios of the passes just timed
        ratios = [b / t for b, t in zip(rows[0]["round_ms"], r["round_ms"], strict=True)]
        assert r["rounds"] == 3 and len(r["round_ms"]) == 3
        assert r["speed"] == pytest.approx(sorted(ratios)[1])
        assert (r["speed_min"], r["speed_max"]) == pytest.approx((min(ratios), max(ratios)))
        assert r["step_ms"] == pytest.approx(sorted(r["round_ms"])[1])
    assert rows[0]["speed"] == 1.0


def test_op_counts_are_positive_and_the_fast_path_dispatches_fewer():
    model = tiny_model()
    batch = synthetic_batches(1, 200, 8, 60, seed=1)[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    explicit = count_step_ops(model, batch)
    for key, value in model.state_dict().items():  # counted on a copy
        assert torch.equal(value, before[key]), key
    with set_fast(model):
        fast = count_step_ops(model, batch, top=3)
    for counts in (explicit, fast):
        assert all(counts[k] > 0 for k in ("forward + loss", "backward", "clip + Adam"))
        assert counts["total"] == counts["forward + loss"] + counts["backward"] + counts["clip + Adam"]
    assert fast["forward + loss"] < explicit["forward + loss"]
    assert fast["total"] < explicit["total"]
    assert len(fast["top"]) == 3 and all(n > 0 for _, n in fast["top"])


def test_op_counts_do_not_depend_on_the_widths_or_the_batch_and_float16_counts_the_scaler():
    model = tiny_model()
    small = synthetic_batches(1, 200, 8, 60, seed=1)[0]
    large = synthetic_batches(1, 600, 20, 60, seed=2)[0]
    assert small.src.shape != large.src.shape
    assert count_step_ops(model, small) == count_step_ops(model, large)
    torch.manual_seed(0)
    wide = Transformer(TransformerConfig(90, 90, d_model=32, d_ff=64, h=2, N=2, dropout=0.1, pad_id=PAD))
    assert count_step_ops(wide, small)["total"] == count_step_ops(model, small)["total"]
    bf16 = count_step_ops(model, small, torch.bfloat16)
    fp16 = count_step_ops(model, small, torch.float16)  # scale, unscale, skip check, update
    assert fp16["clip + Adam"] > bf16["clip + Adam"] and fp16["forward + loss"] == bf16["forward + loss"]


def test_measure_tool_uses_the_packages_counter():
    source = (Path(__file__).resolve().parents[1] / "tools/measure_fast_paths.py").read_text()
    assert "from aiayn.bench.op_counts import count_step_ops" in source
    assert "class CountOps" not in source


@pytest.mark.skipif(not all((DATA / name).is_file() for name in SHA256), reason="needs the Multi30k files")
def test_real_batches_have_varied_shapes_within_the_budget(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the tokenizer is cached here
    batches, V = multi30k_batches(6, 600, 200, seed=0, root=DATA)
    assert V == 200 and len(batches) == 6
    assert len({tuple(b.src.shape) + tuple(b.tgt_out.shape) for b in batches}) > 3
    for b in batches:
        assert b.src.size(0) * (b.src.size(1) + b.tgt_out.size(1)) <= 600
        assert int(b.src.max()) < V and b.n_tokens > 0
    (row,) = run_bench("cpu", **{**TINY, "vocab_size": 200, "max_tokens": 600}, steps=2, warmup=0, root=DATA,
                       contenders=["ours (explicit)"], ops=False)  # fmt: skip
    assert row["data"] == "Multi30k train, 200-piece BPE"


def test_without_data_the_batches_are_synthetic_and_say_so(tmp_path):
    (row,) = run_bench("cpu", **TINY, steps=1, warmup=0, root=tmp_path, contenders=["ours (fused)"], ops=False)
    assert row["data"] == f"synthetic (no Multi30k files in {tmp_path})"
    with pytest.raises(DatasetUnavailable):
        run_bench("cpu", **TINY, steps=1, root=tmp_path, data="multi30k")


def test_bench_command_prints_the_table_and_writes_json(tmp_path, capsys):
    path = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--d-model", "16", "--d-ff", "32", "--heads", "2", "--layers", "1", "--vocab", "60"]
    rows = bench.main(
        [*argv, "--max-tokens", "160", "--seq-len", "8", "--steps", "2", "--warmup", "1", "--data", "synthetic",
         "--rounds", "2", "--contenders", *CONTENDERS, "--json", str(path)]
    )  # fmt: skip
    assert [r["name"] for r in rows] == list(CONTENDERS)
    assert all(r["tokens_per_s"] > 0 and r["tflops"] > 0 and r["mfu"] is None for r in rows)
    assert all(r["ops_per_step"] > 0 for r in rows)
    assert json.loads(path.read_text()) == rows
    printed = capsys.readouterr().out
    assert "| ours (fused) |" in printed and "batches: synthetic" in printed and "n/a" in printed
    assert "then 2 rounds of one pass per contender" in printed and "| 1 (baseline) |" in printed
    assert all(r["rounds"] == 2 for r in rows)

    (row,) = run_bench("cpu", 32, 64, 4, 1, 100, 256, 8, steps=1, warmup=0, peak=1.0, contenders=["ours (fused)"],
                       data="synthetic", ops=False, rounds=1)  # fmt: skip
    assert row["mfu"] == pytest.approx(row["tflops"] / 1.0)


def test_chapter_11_call_still_works():
    """Chapter 11 runs ``run_bench(steps=3, warmup=1)`` and reads these keys of three rows."""
    rows = run_bench("cpu", steps=1, warmup=1, data="synthetic", d_model=16, d_ff=32, N=1)
    assert [r["name"] for r in rows] == list(CONTENDERS)
    assert {"name", "params", "tokens_per_s", "loss", "device_name", "mfu"} <= set(rows[0])
    assert abs(rows[0]["loss"] - rows[1]["loss"]) < 1e-4
    assert format_table(rows).count("\n") == 2 + len(rows) - 1


def test_bench_rejects_unknown_contenders_and_data():
    with pytest.raises(ValueError, match="unknown contenders"):
        run_bench("cpu", contenders=["mine"])
    with pytest.raises(ValueError, match="data must be 'auto', 'multi30k' or 'synthetic', got 'wiki'"):
        run_bench("cpu", data="wiki")
    with pytest.raises(ValueError, match="rounds must be an integer >= 1, got 0"):
        run_bench("cpu", steps=1, data="synthetic", rounds=0)
    with pytest.raises(ValueError, match=r"compile_backend must be one of \[.*'eager'.*\], got 'nope'"):
        run_bench("cpu", contenders=["nn.Transformer (compiled)"], compile_backend="nope")


def test_peak_table_matches_device_names():
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA H200") == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0
    assert peak_tflops("Some CPU") is None


def test_the_command_prints_its_table_and_one_line_for_a_graph_break_not_dynamos_warnings():
    """The quickest run with compiled contenders: ``eager`` traces the graphs without generating code."""
    argv = ["--device", "cpu", "--d-model", "16", "--d-ff", "32", "--heads", "2", "--layers", "1", "--vocab", "60",
            "--max-tokens", "160", "--seq-len", "8", "--steps", "1", "--warmup", "0", "--data", "synthetic",
            "--threads", "1", "--no-ops", "--compile-backend", "eager",
            "--contenders", "nn.Transformer (compiled)", "ours (set_fast, compiled)"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    done = subprocess.run([sys.executable, "-m", "aiayn.bench", *argv], capture_output=True, text=True,
                          env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # torch._dynamo wrote a block of 21 lines here
    lines = done.stdout.splitlines()
    assert not [line for line in lines if "_dynamo" in line or "Graph break" in line]
    table = [line for line in lines if line.startswith("|")]
    assert len(table) == 2 + 2 and lines[lines.index(table[-1]) + 1 :] == [
        "note: torch.compile ran part of nn.Transformer (compiled) eagerly (graph break from "
        "`Tensor.item()`); TORCH_LOGS=graph_breaks shows where"
    ]


def test_compile_warnings_are_collected_in_one_line_each_and_the_loggers_restored(capsys, monkeypatch):
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    loggers = [logging.getLogger(name) for name in COMPILE_LOGGERS]
    before = [(lg.handlers, lg.propagate) for lg in loggers]
    with collect_compile_warnings() as notes:
        log = logging.getLogger("torch._dynamo.variables.tensor")
        for _ in range(2):  # said twice, kept once
            log.warning("Graph break from `Tensor.item()`, consider setting:\n    torch._dynamo.config...\n")
        logging.getLogger("torch._inductor.utils").warning("not enough SMs to use max_autotune_gemm mode")
        logging.getLogger("torch._dynamo").info("not a warning")
    assert notes == ["Graph break from `Tensor.item()`", "not enough SMs to use max_autotune_gemm mode"]
    assert capsys.readouterr().err == ""
    assert [(lg.handlers, lg.propagate) for lg in loggers] == before


def test_with_torch_logs_set_nothing_is_collected(monkeypatch):
    monkeypatch.setenv("TORCH_LOGS", "graph_breaks")
    handlers = logging.getLogger("torch._dynamo").handlers
    with collect_compile_warnings() as notes:
        assert logging.getLogger("torch._dynamo").handlers is handlers
    assert notes == []


def test_compile_note_is_one_line_or_none():
    rows = [{"name": "ours (fused)", "compile_warnings": None},
            {"name": "a (compiled)", "compile_warnings": []},
            {"name": "b (compiled)", "compile_warnings": ["Graph break from `Tensor.item()`"]}]  # fmt: skip
    assert compile_note(rows[:2]) is None
    assert compile_note(rows) == (
        "note: torch.compile ran part of b (compiled) eagerly (graph break from `Tensor.item()`); "
        "TORCH_LOGS=graph_breaks shows where"
    )
