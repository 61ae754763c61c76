"""aiayn.decoding.trace: the tree a beam search records is what the search did, on a copy-task-sized
model and on the published one, and the committed record (src/aiayn/results) is the published model's."""

from __future__ import annotations

import importlib.util
import json
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from aiayn.decoding.search import beam_search, gnmt_length_penalty
from aiayn.decoding.trace import BeamTrace, path
from aiayn.engine.onednn import onednn_available, onednn_linear
from aiayn.model import Transformer, TransformerConfig
from aiayn.runs.published import results_dir
from conftest import PUBLISHED

PAD, BOS, EOS = 0, 1, 2
V = 12
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


def tool():
    spec = importlib.util.spec_from_file_location("beam_trace_tool", ROOT / "tools/beam_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def copy_sized_model(seed: int) -> Transformer:
    """The copy task's model size (tests/test_decoding.py), untrained: a bushy tree."""
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.0)).eval()


def teacher_forced(model, src: torch.Tensor, pieces: list[int]) -> torch.Tensor:
    """``(T, V)`` log-probabilities of every next piece after each prefix of ``pieces``, in one forward pass."""
    with torch.no_grad(), onednn_linear() if onednn_available() else nullcontext():
        logits = model(src, torch.tensor([pieces]))  # (1, T, V)
    return logits[0].float().log_softmax(dim=-1)


def check_trace(model, src, trace: BeamTrace, out, alpha: float, limits: list[int]) -> None:
    """Every claim of the module docstring, sentence by sentence (``limits``: the output limits)."""
    assert len(trace.trees) == src.size(0)
    for s, tree in enumerate(trace.trees):
        nodes = tree["nodes"]
        root = nodes[0]
        assert (root["parent"], root["step"], root["piece"], root["log_p"]) == (None, 0, BOS, 0.0)
        for i, node in enumerate(nodes[1:], start=1):  # a tree rooted at <bos>
            assert node["id"] == i and node["parent"] < i
            assert nodes[node["parent"]]["step"] == node["step"] - 1
            assert not nodes[node["parent"]]["finished"]  # nothing grows after <eos>
            assert node["finished"] == (node["piece"] == EOS)
        # the winner is the output, its score the output's score, bit for bit
        winner = path(tree, tree["winner"])
        tokens = out.tokens[s].tolist()  # padded after <eos>
        assert winner + [PAD] * (len(tokens) - len(winner)) == tokens
        assert nodes[tree["winner"]]["score"] == out.scores[s].item()
        assert nodes[tree["winner"]]["log_p"] == out.log_probs[s].item()
        # each node's log P is the sum of its pieces' log P by teacher forcing
        leaves = [n for n in nodes if not any(m["parent"] == n["id"] for m in nodes)]
        for leaf in leaves:
            pieces = path(tree, leaf["id"])
            log_probs = teacher_forced(model, src[s : s + 1], pieces)  # (T, V)
            chosen = log_probs[torch.arange(len(pieces) - 1), pieces[1:]]  # (T - 1,)
            node, sums = leaf, chosen.cumsum(0).tolist()
            while node["parent"] is not None:
                # float32 in another order (cache, oneDNN): 1e-5 a piece, summed
                step = node["step"]
                assert node["log_p"] == pytest.approx(sums[step - 1], abs=1e-5 * step)
                piece = node["log_p"] - nodes[node["parent"]]["log_p"]
                assert piece == pytest.approx(chosen[step - 1].item(), abs=1e-5)
                if node["top"]:  # its five next pieces, as teacher forcing gives them
                    p, i = log_probs[node["step"]].exp().topk(5)
                    assert [t[0] for t in node["top"]] == i.tolist()
                    assert [t[1] for t in node["top"]] == pytest.approx(p.tolist(), abs=1e-5)
                node = nodes[node["parent"]]
        # the score is the log P over the length penalty, in float32: to the last bit or
        # two, as torch's pow rounds a penalty in a vector and alone differently
        log_p = torch.tensor([n["log_p"] for n in nodes])
        lp = gnmt_length_penalty(torch.tensor([n["step"] for n in nodes]), alpha)
        assert [n["score"] for n in nodes] == pytest.approx((log_p / lp).tolist(), rel=2.5e-7, abs=0)
        for step, record in enumerate(tree["steps"], start=1):
            kept = [nodes[i] for i in record["kept"] if i is not None]
            # a beam keeps its hypothesis once it has ended, or reached the limit
            ended = [n for n in kept if n["step"] < step]
            assert all(n["finished"] or n["step"] == limits[s] - 1 for n in ended)
            worst = min(n["score"] for n in kept)
            for c in record["pruned"]:  # pruned: not better than any kept
                assert c["score"] <= worst and nodes[c["parent"]]["step"] == step - 1
                tail = torch.tensor([c["log_p"]]) / gnmt_length_penalty(torch.tensor([step]), alpha)
                assert c["score"] == pytest.approx(tail.item(), rel=2.5e-7, abs=0)


@pytest.mark.parametrize(("prune", "alpha", "seed"), [(True, 0.6, 0), (False, 0.6, 1), (True, 0.0, 1), (False, 0.0, 0)])
def test_the_trace_is_what_the_copy_sized_search_did(prune, alpha, seed):
    model = copy_sized_model(seed)
    src = torch.randint(3, V, (3, 7), generator=torch.Generator().manual_seed(seed))
    src[1, 5:] = PAD  # a shorter sentence
    limits = [10, 6, 9]  # one limit per sentence, as decode_sorted gives them
    plain = beam_search(model, src, None, limits, BOS, EOS, 4, alpha, prune=prune)
    trace = BeamTrace(attention=True)
    out = beam_search(model, src, None, limits, BOS, EOS, 4, alpha, prune=prune, trace=trace)
    for a, b in zip(out, plain, strict=True):  # trace on or off: the same output
        assert torch.equal(a, b)
    check_trace(model, src, trace, out, alpha, limits)
    for s, tree in enumerate(trace.trees):  # attention: one weight per source piece
        S = int((src[s] != PAD).sum())
        for node in tree["nodes"]:
            if node["finished"]:
                assert node["attention"] is None
            else:
                assert len(node["attention"]) == S
                assert sum(node["attention"]) == pytest.approx(1, abs=S * 5e-4)


def test_the_trace_of_the_published_model_is_what_its_search_did(published, root):
    from aiayn.data.multi30k import load_multi30k

    model, tokenizer = published
    lines = [7, 42]
    pairs = load_multi30k("test2016", root, download=False)
    ids = [tokenizer.encode(pairs[i][0]) + [EOS] for i in lines]
    S = max(len(x) for x in ids)
    src = torch.full((len(ids), S), PAD)
    for row, x in enumerate(ids):
        src[row, : len(x)] = torch.tensor(x)
    limits = [len(x) + 51 for x in ids]
    trace = BeamTrace()
    out = beam_search(model, src, None, limits, BOS, EOS, 4, 0.6, trace=trace)
    assert torch.equal(out.tokens, beam_search(model, src, None, limits, BOS, EOS, 4, 0.6).tokens)
    check_trace(model, src, trace, out, 0.6, limits)
    assert all(tree["nodes"][tree["winner"]]["finished"] for tree in trace.trees)


def test_the_committed_record_is_the_published_models(published, root):
    from aiayn.data.multi30k import load_multi30k

    model, tokenizer = published
    committed = json.loads((results_dir() / "multi30k.beam_trace.json").read_text())
    line = committed["line"]
    source = load_multi30k("test2016", root, download=False)[line][0]
    fresh = tool().record(model, tokenizer, line, source)
    assert committed["source"] == source
    assert committed["greedy"] != committed["beam"]  # the reason this line was chosen
    for key in ("source_pieces", "greedy", "beam", "sizes"):
        assert committed[key] == fresh[key]
    old, new = committed["tree"], fresh["tree"]
    assert old["winner"] == new["winner"]
    assert [s["kept"] for s in old["steps"]] == [s["kept"] for s in new["steps"]]
    for a, b in zip(old["steps"], new["steps"], strict=True):
        assert [(c["parent"], c["piece"]) for c in a["pruned"]] == [(c["parent"], c["piece"]) for c in b["pruned"]]
    for a, b in zip(old["nodes"], new["nodes"], strict=True):
        assert (a["parent"], a["piece"], a["finished"]) == (b["parent"], b["piece"], b["finished"])
        assert a["score"] == pytest.approx(b["score"], abs=2e-4)
        assert [t[0] for t in a["top"]] == [t[0] for t in b["top"]]
        if a["attention"] is not None:
            assert a["attention"] == pytest.approx(b["attention"], abs=2e-3)
    sums = dict(reversed(x.split()) for x in (PUBLISHED / "SHA256SUMS").read_text().splitlines())
    assert sums[committed["model"]["weights"]] == committed["model"]["sha256"]


# --- The figure (aiayn.viz.beam), as tests/test_viz_stepthrough.py tests its charts ----------------


def test_the_figure_draws_every_kept_node_and_pruned_candidate_of_the_record():
    from vega_runner import vega_data

    from aiayn import viz

    record = json.loads((results_dir() / "multi30k.beam_trace.json").read_text())
    tree = record["tree"]
    chart = viz.beam_tree_figure(record)
    spec = chart.to_dict()
    assert spec["width"] + 60 == 390  # a phone's width, the steps beyond it panned to
    layers = spec["layer"]
    assert [layer["mark"]["type"] for layer in layers] == ["rule", "circle", "text"]
    assert layers[1]["encoding"]["x"]["title"] == "step (pieces generated)"
    assert layers[1]["encoding"]["y"]["title"] == "hypotheses of the step"
    fields = {t["field"] for t in layers[1]["encoding"]["tooltip"]}
    assert fields == {"piece", "step", "log_p", "score", "status", "top"}
    data = [rows for rows in vega_data(chart).values() if rows]
    points = next(rows for rows in data if "piece" in rows[0])
    lines = next(rows for rows in data if "parent_row" in rows[0])
    pruned = sum(len(step["pruned"]) for step in tree["steps"])
    assert len(points) == len(tree["nodes"]) + pruned and len(lines) == len(points) - 1
    by_status = {s: [p for p in points if p["status"] == s] for s in ("winner", "finished", "kept", "pruned")}
    winner = path(tree, tree["winner"])
    # the red path spells the translation the search returned, one piece a step
    red = sorted(by_status["winner"], key=lambda p: p["step"])
    assert [p["step"] for p in red] == list(range(len(winner)))
    assert [p["piece"] for p in red] == [viz.beam._label(p) for p in winner]
    assert red[-1]["score"] == tree["nodes"][tree["winner"]]["score"]
    assert len(by_status["finished"]) == sum(n["finished"] for n in tree["nodes"]) - 1
    assert len(by_status["pruned"]) == pruned
    # every line ends at a point and starts at one a step earlier
    at = {(p["step"], p["row"]) for p in points}
    assert all((x["step"], x["row"]) in at and (x["parent_step"], x["parent_row"]) in at for x in lines)
    assert all(x["parent_step"] == x["step"] - 1 for x in lines)
    # a node's tooltip lists its five next pieces
    node = tree["nodes"][1]
    assert next(p["top"] for p in points if p["step"] == 1 and p["piece"] == viz.beam._label(node["piece"])) == (
        " · ".join(f"{viz.beam._label(t)} {q:.2f}" for t, q in node["top"])
    )


def test_the_figure_gives_the_status_one_legend():
    """Colour and opacity both show a node's status: the same legend on both, which Vega-Lite draws as one (a
    legend on one channel and none on the other is a conflict it warns about on the reader's console, 8.3's)."""
    from aiayn import viz

    record = json.loads((results_dir() / "multi30k.beam_trace.json").read_text())
    for layer in viz.beam_tree_figure(record).to_dict()["layer"]:
        color, opacity = layer["encoding"]["color"], layer["encoding"]["opacity"]
        assert color["field"] == opacity["field"] == "status"
        assert color["legend"] == opacity["legend"] and color["legend"], (color, opacity)
        assert color.get("title", "") == opacity.get("title", "")


def test_the_figure_refuses_what_is_no_tree():
    from aiayn import viz

    with pytest.raises(ValueError, match="expected a BeamTrace tree"):
        viz.beam_tree_figure({"nodes": []})
