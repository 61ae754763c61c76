"""The published model stepped through (aiayn.pages.stepthrough): the committed record is what the model
computes, its steps compose, and the model's own forward pass gives the same layer outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from aiayn.data.multi30k import load_multi30k
from aiayn.pages.stepthrough import (
    LINE,
    STEPTHROUGH,
    load_stepthrough,
    softmax_rows,
    step_through,
    write_stepthrough,
)
from aiayn.runs.published import results_dir
from conftest import assert_same_record

ROOT = Path(__file__).resolve().parents[1]
SAVED = load_stepthrough()


def data_dir() -> Path:
    return Path(
        os.environ.get("AIAYN_DATA") or ROOT.parent / "shared/data/multi30k"
    )


@pytest.fixture(scope="module")
def sentence() -> tuple[str, str]:
    """Test line ``LINE`` and the published model's translation of it."""
    sources = [de for de, _ in load_multi30k("test2016", data_dir(), download=False)]
    hypotheses = (results_dir() / "multi30k.test2016.hyp.en").read_text().splitlines()
    return sources[LINE], hypotheses[LINE]


def t(values) -> torch.Tensor:
    """Stored numbers as a tensor, ``None`` (a masked score) as NaN."""
    return torch.tensor(json.loads(json.dumps(values).replace("null", "NaN")), dtype=torch.float64)


def test_the_record_is_the_published_models(published, sentence):
    model, tokenizer = published
    again = step_through(model, tokenizer, *sentence)
    stored = {k: v for k, v in SAVED.items() if k in again}
    assert_same_record(stored, again)
    assert (SAVED["line"], SAVED["source"], SAVED["translation"]) == (LINE, *sentence)


def test_the_stored_layer_outputs_are_the_models_forward_pass(published):
    """Forward hooks on every layer of the ordinary forward pass see the stored outputs."""
    from aiayn.attention import set_fused
    from aiayn.data.multi30k import BOS, EOS

    model, tokenizer = published
    src = torch.tensor([tokenizer.encode(SAVED["source"]) + [EOS]])
    out = tokenizer.encode(SAVED["translation"]) + [EOS]
    tgt = torch.tensor([[BOS] + out[:-1]])
    seen = {}
    layers = [("encoder", i, m) for i, m in enumerate(model.encoder.layers)]
    layers += [("decoder", i, m) for i, m in enumerate(model.decoder.layers)]
    hooks = [
        m.register_forward_hook(lambda _m, _i, o, key=(s, i): seen.__setitem__(key, o[0]))
        for s, i, m in layers
    ]
    try:
        with torch.no_grad(), set_fused(model, False):
            model(src, tgt)
            maps = model.attention_maps()
    finally:
        for h in hooks:
            h.remove()
    shown = SAVED["sizes"]["shown"]
    for stack, i, _ in layers:
        steps = SAVED[stack]["layers"][i]
        last = steps["add_norm_3" if stack == "decoder" else "add_norm_2"]["norm"]
        y = seen[stack, i].double()  # (L, d_model)
        torch.testing.assert_close(t(last["first"]), y[:, :shown], rtol=6e-3, atol=1e-3)
        torch.testing.assert_close(t(last["norm"]), y.norm(dim=-1), rtol=6e-3, atol=0)
    for kind, stack, step in (
        ("encoder", "encoder", "attention"),
        ("decoder_self", "decoder", "self_attention"),
        ("cross", "decoder", "cross_attention"),
    ):
        for i, w in enumerate(maps[kind]):
            stored = t(SAVED[stack]["layers"][i][step]["weights"])
            torch.testing.assert_close(stored, w[0].double(), rtol=6e-3, atol=1e-5)


def attention_steps():
    for stack, step in (
        ("encoder", "attention"),
        ("decoder", "self_attention"),
        ("decoder", "cross_attention"),
    ):
        for i, layer in enumerate(SAVED[stack]["layers"]):
            yield f"{stack} {i + 1} {step}", layer[step]


def test_the_stored_steps_compose():
    """Softmax of the scores over sqrt(d_k) gives the weights; q·k the scores; weights @ V the heads."""
    d_k = SAVED["sizes"]["d_k"]
    for where, a in attention_steps():
        weights = t(a["weights"])
        torch.testing.assert_close(softmax_rows(a["scores"], d_k), weights, rtol=0, atol=5e-3)
        sums = weights.sum(-1)
        torch.testing.assert_close(sums, torch.ones_like(sums), atol=5e-3, rtol=0)
        if "q" not in a:
            continue
        q, k, v = t(a["q"]), t(a["k"]), t(a["v"])
        slack = 1e-2 * (q.abs() @ k.abs().transpose(-2, -1)) + 0.05
        assert ((q @ k.transpose(-2, -1) - t(a["scores"])).abs() <= slack).all(), where
        torch.testing.assert_close(weights @ v, t(a["heads"]), rtol=2e-2, atol=2e-2)
    for stack in ("encoder", "decoder"):
        e = SAVED[stack]["embed"]
        torch.testing.assert_close(
            t(e["token"]["first"]) + t(e["position"]["first"]), t(e["sum"]["first"]), rtol=6e-3, atol=0.02
        )
        previous = e["sum"]
        for layer in SAVED[stack]["layers"]:
            assert layer["input"] == previous  # each layer reads the last one's output
            x = layer["input"]
            subs = ["attention"] if stack == "encoder" else ["self_attention", "cross_attention"]
            for n, sub in enumerate([*subs, "feed_forward"], start=1):
                added = layer[f"add_norm_{n}"]
                torch.testing.assert_close(
                    t(x["first"]) + t(layer[sub]["output"]["first"]), t(added["add"]["first"]), rtol=6e-3, atol=0.02
                )
                x = added["norm"]
            previous = x


def test_the_decoder_masks_the_future_and_the_encoder_nothing():
    for where, a in attention_steps():
        scores = t(a["scores"])  # (h, L_q, L_k), NaN where masked
        masked = scores.isnan()
        if where.endswith("self_attention") and where.startswith("decoder"):
            L = scores.size(-1)
            future = torch.ones(L, L).triu(1).bool()
            assert (masked == future).all(), where
            assert (t(a["weights"])[:, future] == 0).all(), where
        else:
            assert not masked.any(), where


def test_the_feed_forward_units_are_the_top_ones_and_fire():
    d_ff = SAVED["sizes"]["d_ff"]
    for stack in ("encoder", "decoder"):
        for layer in SAVED[stack]["layers"]:
            f = layer["feed_forward"]
            for units, acts, active in zip(f["units"], f["activations"], f["active"], strict=True):
                assert len(set(units)) == len(units) and all(0 <= u < d_ff for u in units)
                assert acts == sorted(acts, reverse=True)
                assert 0 < active < d_ff


def test_bad_lines_and_pre_norm_models_are_refused(published, tmp_path):
    model, tokenizer = published
    with pytest.raises(ValueError, match=r"line must be in \[0, 1000\) for test2016, got 1000"):
        write_stepthrough(model, tokenizer, tmp_path, results=results_dir(), line=1000, root=data_dir())
    assert not (tmp_path / STEPTHROUGH).exists()
    from aiayn.model import Transformer, TransformerConfig

    pre = Transformer(TransformerConfig(10, 10, d_model=8, d_ff=8, h=2, N=1, norm_first=True))
    with pytest.raises(ValueError, match="post-norm layers; got a model with norm_first=True"):
        step_through(pre, tokenizer, "Ein Mann.", "A man.")
