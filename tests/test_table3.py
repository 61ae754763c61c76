"""tools/table3.py: the Table 3 sweep plans its rows as the paper defines them, records every run,
resumes after a stop without redoing a finished run, and summarises seeds as mean ± spread.

The end-to-end case trains a few steps of the smoke preset: it proves the tool's bookkeeping, not
any BLEU (the summary's arithmetic is checked on a made-up JSON).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path

import pytest

from aiayn.runs.presets import get_preset
from aiayn.runs.recipes import train

REPO = Path(__file__).resolve().parents[1]
TOOL = REPO / "tools" / "table3.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("table3_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def run_main(tool, argv: list[str]) -> int:
    try:
        return tool.main(argv)
    except SystemExit as stop:
        return stop.code


def test_row_a_keeps_d_model_and_computation(tool):
    base = get_preset("multi30k")
    runs = tool.plan(base, tool.variants_of("A"), 1, {"epochs": None, "max_steps": None, "limit": None})
    assert [r.variant for r in runs] == ["base", "A1", "A2", "A3", "A4"]
    for run in runs:
        d_k, d_v = tool.head_widths(run.cfg)
        assert run.cfg.d_model == base.d_model
        assert run.cfg.h * d_k == run.cfg.h * d_v == base.d_model
    # constant computation: the projections keep their sizes, so the parameters do too
    assert len({tool.parameters(r.cfg) for r in runs}) == 1
    assert sorted(r.cfg.h for r in runs[1:]) == [1, 4, 16, 32]


def test_rows_b_to_e_change_what_the_paper_changes(tool):
    base = get_preset("multi30k-smoke")
    budget = {"epochs": 2, "max_steps": None, "limit": None}
    runs = {r.variant: r.cfg for r in tool.plan(base, tool.variants_of("B,C,D,E"), 1, budget)}
    assert tool.head_widths(runs["B1"]) == (16, base.d_model // base.h)
    assert [runs[v].N for v in ("C1", "C2", "C3")] == [2, 4, 8]
    assert tool.head_widths(runs["C5"]) == (1024 // base.h,) * 2
    assert (runs["D2"].dropout, runs["D4"].label_smoothing) == (0.2, 0.2)
    assert runs["E"].model.learned_positions and not runs["base"].model.learned_positions
    assert {cfg.epochs for cfg in runs.values()} == {2}  # one budget for every row
    with pytest.raises(ValueError, match="unknown Table 3 variant 'F1'"):
        tool.plan(base, tool.variants_of("F1"), 1, budget)


def test_sweep_records_each_run_and_resumes(tool, root, cache, tmp_path, one_thread):
    out = tmp_path / "sweep.json"
    where = ["--out", str(out), "--device", "cpu", "--data", str(root)]
    argv = [*where, "--base", "multi30k-smoke", "--rows", "D4,E", "--seeds", "2", "--max-steps", "2",
            "--limit", "4"]  # fmt: skip
    assert run_main(tool, [*argv, "--max-runs", "2"]) == 0  # a sweep stopped after two runs
    first = json.loads(out.read_text())
    assert list(first["runs"]) == ["base/seed0", "D4/seed0"]
    assert run_main(tool, argv) == 2  # an existing sweep goes on only with --resume

    # a run that a kill interrupted: its folder holds a checkpoint at step 1
    plan = tool.plan(get_preset("multi30k-smoke"), ["E"], 1, tool.budget_of(
        tool._parser().parse_args(argv)))  # fmt: skip
    train(plan[0].cfg.with_changes(max_steps=1), tmp_path / "sweep.runs" / "E-seed0", root=root,
          device="cpu", progress=False)  # fmt: skip
    assert run_main(tool, [*argv, "--resume", "--max-runs", "2"]) == 0  # E/seed0, base/seed1
    assert run_main(tool, [*argv, "--resume", "--jobs", "2"]) == 0  # the last two, one process each
    report = json.loads(out.read_text())
    assert sorted(report["runs"]) == sorted(f"{v}/seed{s}" for v in ("base", "D4", "E") for s in (0, 1))
    for key in first["runs"]:  # finished runs are not run again
        assert report["runs"][key] == first["runs"][key]
    assert report["runs"]["E/seed0"]["resumed_from_step"] == 1
    assert report["runs"]["E/seed1"]["resumed_from_step"] is None
    for key, entry in report["runs"].items():
        assert entry["steps"] == 2 and entry["seed"] == int(key[-1])
        assert entry["test2016"]["sentences"] == 4
        assert entry["parameters"] == entry["parameters_trained"]
        assert entry["val_ppl"] > 1 and entry["wall_s"] > 0
        assert 0 <= entry["test2016"]["sacrebleu"] <= 100
    assert report["runs"]["E/seed0"]["changes"] == {"learned_positions": True}
    assert report["runs"]["D4/seed1"]["config"]["label_smoothing"] == 0.2
    # another budget does not mix into the same table
    assert run_main(tool, [*argv, "--resume", "--epochs", "1"]) == 2
    assert json.loads(out.read_text()) == report


def test_summary_arithmetic(tool, capsys):
    def entry(variant, seed, bleu, ppl):
        return {"variant": variant, "seed": seed, "changes": {}, "parameters": 10,
                "val_ppl": ppl, "test2016": {"sacrebleu": bleu}}  # fmt: skip

    base, a1, e = [30.0, 31.0, 32.0], [25.0, 25.5, 26.0], [31.0, 33.0, 32.5]
    ppl = [5.0, 5.2, 5.4]
    runs = [entry("base", s, b, p) for s, (b, p) in enumerate(zip(base, ppl, strict=True))]
    runs += [entry("A1", s, b, p + 1) for s, (b, p) in enumerate(zip(a1, ppl, strict=True))]
    runs += [entry("E", s, b, p) for s, (b, p) in enumerate(zip(e, ppl, strict=True))]
    report = {"base": "x", "budget": {}, "runs": {f"{r['variant']}/seed{r['seed']}": r for r in runs}}
    rows = {row["variant"]: row for row in tool.summarize(report)}
    assert list(rows) == ["base", "A1", "E"]
    assert rows["A1"]["bleu"] == pytest.approx(statistics.fmean(a1))
    assert rows["A1"]["bleu_spread"] == pytest.approx(statistics.stdev(a1))
    assert rows["A1"]["bleu_delta"] == pytest.approx(statistics.fmean(a1) - statistics.fmean(base))
    assert rows["A1"]["bleu_beyond_spread"]  # 5.5 below, spreads 0.5 + 1.0
    assert not rows["E"]["bleu_beyond_spread"]  # 1.17 above, spreads 1.04 + 1.0
    assert rows["A1"]["ppl_delta"] == pytest.approx(1.0) and rows["A1"]["ppl_beyond_spread"]
    one_seed = {**report, "runs": {k: v for k, v in report["runs"].items() if k.endswith("0")}}
    rows = {row["variant"]: row for row in tool.summarize(one_seed)}
    assert rows["A1"]["bleu_spread"] is None and not rows["A1"]["bleu_beyond_spread"]
    tool.print_summary(report)
    printed = capsys.readouterr().out
    assert "-5.50*" in printed and "+1.17 " in printed
