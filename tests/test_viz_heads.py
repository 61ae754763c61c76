"""Chapter 11.2's heads figure (``aiayn.viz.heads``) and the tool that measures it (``tools/head_ablation.py``).

The frames read a record as the tool writes it; the chart is one heat map per kind of attention, coloured
symmetrically about no change; the tool's plan, masks and choice of the head kept are checked without a model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from aiayn import viz
from aiayn.model import HEAD_KINDS

TOOL = Path(__file__).resolve().parents[1] / "tools" / "head_ablation.py"
# the published model, read only (as tests/conftest.py finds it)
PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"
RESULTS = Path(viz.__file__).resolve().parents[1] / "results" / "multi30k.head_ablation.json"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("head_ablation_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def a_record(N: int = 2, h: int = 3) -> dict:
    """A record as the tool writes it: every head's BLEU is 30 minus a cost that grows with its place."""
    results = {"full": {"bleu": 30.0, "changed": 0, "seconds": 1.0}}
    for k, kind in enumerate(HEAD_KINDS):
        for n in range(N):
            for i in range(h):
                cost = k + 0.5 * n + 0.1 * i
                results[f"head:{kind}:{n}:{i}"] = {"bleu": 30.0 - cost, "changed": 7 * i, "seconds": 1.0,
                                                   "low": -cost - 0.5, "high": -cost + 0.5}
            results[f"layer:{kind}:{n}"] = {"bleu": 20.0 - k, "changed": 500, "seconds": 1.0}
    results["keep_one:cross:1"] = {"bleu": 25.0, "changed": 300, "seconds": 1.0, "kept": 2}
    return {"N": N, "h": h, "kinds": list(HEAD_KINDS), "results": results}


def test_the_head_frame_has_a_row_per_head_counted_from_one():
    frame = viz.head_ablation_frame(a_record())
    assert len(frame) == 3 * 2 * 3
    row = frame[(frame["kind"] == "cross-attention") & (frame["layer"] == 2) & (frame["head"] == 3)].iloc[0]
    assert math.isclose(row["change"], -(2 + 0.5 + 0.2))
    assert math.isclose(row["bleu"], 30.0 - 2.7) and row["changed"] == 14
    assert math.isclose(row["low"], -3.2) and math.isclose(row["high"], -2.2)
    assert set(frame["kind"]) == set(viz.KIND_NAMES.values())


def test_the_layer_frame_leaves_missing_figures_empty():
    frame = viz.layer_ablation_frame(a_record())
    assert len(frame) == 3 * 2
    assert list(frame["kind"]) == [k for k in viz.KIND_NAMES.values() for _ in range(2)]
    assert list(frame["layer"]) == [1, 2] * 3
    cross = frame[frame["kind"] == "cross-attention"].set_index("layer")
    assert cross.loc[1, "without_layer"] == -12.0
    assert cross.loc[2, "one_head"] == -5.0 and cross.loc[2, "kept"] == 3
    assert math.isnan(cross.loc[1, "one_head"])


def test_a_record_without_the_full_model_is_refused():
    record = a_record()
    del record["results"]["full"]
    with pytest.raises(ValueError, match="with a 'full' result"):
        viz.head_ablation_frame(record)


def test_the_chart_is_a_heat_map_per_kind_symmetric_about_no_change():
    frame = viz.head_ablation_frame(a_record())
    spec = viz.head_ablation_chart(frame, title="t").to_dict()
    assert spec["facet"]["column"]["field"] == "kind"
    assert spec["facet"]["column"]["sort"] == list(viz.KIND_NAMES.values())
    rect, text = spec["spec"]["layer"]
    assert rect["mark"]["type"] == "rect" and text["mark"]["type"] == "text"
    assert rect["encoding"]["x"]["field"] == "head" and rect["encoding"]["y"]["field"] == "layer"
    low, high = rect["encoding"]["color"]["scale"]["domain"]
    assert low == -high and math.isclose(high, 2.7)
    assert len(spec["datasets"][spec["data"]["name"]]) == 18
    with pytest.raises(ValueError, match="got none"):
        viz.head_ablation_chart(frame.iloc[:0])


def test_the_plan_runs_the_full_model_then_heads_layers_and_keep_one(tool):
    plan = tool.plan(2, 3)
    keys = [key for key, _ in plan]
    assert keys[0] == "full" and len(keys) == len(set(keys)) == 1 + 18 + 6 + 6
    assert keys[1] == "head:encoder:0:0" and keys[19] == "layer:encoder:0" and keys[25] == "keep_one:encoder:0"


def test_each_entry_masks_what_it_says(tool):
    record = a_record()
    shape = (3, 2, 3)
    mask, kept = tool.mask_for(("head", 1, 0, 2), shape, record["results"])
    assert kept is None and mask.sum() == 17 and mask[1, 0, 2] == 0
    mask, _ = tool.mask_for(("layer", 2, 1), shape, record["results"])
    assert mask.sum() == 15 and not mask[2, 1].any()
    mask, kept = tool.mask_for(("keep_one", 0, 1), shape, record["results"])
    assert kept == 2  # the head whose removal alone cost most
    assert torch.equal(mask[0, 1], torch.tensor([0.0, 0.0, 1.0])) and mask.sum() == 16


def test_a_tie_keeps_the_lower_head(tool):
    results = a_record()["results"]
    for i in range(3):
        results[f"head:decoder_self:1:{i}"]["bleu"] = 12.0
    assert tool.most_costly_head(results, 1, 1, 3) == 0


@pytest.mark.skipif(not RESULTS.is_file(), reason="the published model's head ablation is not measured yet")
def test_the_shipped_record_is_whole_and_of_the_published_model():
    record = json.loads(RESULTS.read_text())
    assert record["format"] == "aiayn-head-ablation/1" and record["sentences"] == 1000
    assert (record["N"], record["h"]) == (3, 8)
    frame = viz.head_ablation_frame(record)
    assert len(frame) == 72
    assert len(record["full_lines"]) == 1000
    assert {"machine", "torch", "decoding", "wall_s", "signature"} <= set(record)


@pytest.mark.skipif(not RESULTS.is_file(), reason="the published model's head ablation is not measured yet")
def test_the_shipped_full_score_is_the_sacrebleu_of_its_translations():
    from sacrebleu.metrics import BLEU

    from aiayn.data.multi30k import load_multi30k

    record = json.loads(RESULTS.read_text())
    references = [en for _, en in load_multi30k("test2016")]
    score = BLEU().corpus_score(record["full_lines"], [references]).score
    assert math.isclose(score, record["results"]["full"]["bleu"], abs_tol=1e-9)
    heads = [e for k, e in record["results"].items() if k.startswith("head:")]
    assert heads and all(e["low"] <= e["high"] and 0 < e["p_value"] <= 1 for e in heads)


def test_the_tool_writes_each_figure_resumes_and_refuses_another_setting(tool, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AIAYN_MODEL", str(PUBLISHED))
    out = tmp_path / "heads.json"
    assert tool.main(["--out", str(out), "--limit", "3", "--parts", "full,layers"]) == 0
    record = json.loads(out.read_text())
    assert sorted(record["results"]) == ["full"] + sorted(f"layer:{k}:{n}" for k in HEAD_KINDS for n in range(3))
    assert record["sentences"] == 3 and len(record["full_lines"]) == 3
    assert record["results"]["layer:cross:2"]["changed"] >= 1  # the decoder no longer reads the source there
    capsys.readouterr()
    assert tool.main(["--out", str(out), "--limit", "3", "--parts", "full,layers"]) == 0
    assert "10 figures held, 0 to measure" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="measure the heads first"):
        tool.main(["--out", str(out), "--limit", "3", "--parts", "keep_one"])
    with pytest.raises(SystemExit, match="another sentences"):
        tool.main(["--out", str(out), "--limit", "4", "--dry-run"])
    out.write_text("not json")
    with pytest.raises(SystemExit, match="is not a record of this tool"):
        tool.main(["--out", str(out), "--dry-run"])
