"""CUDA graphs of the training passes (``cuda_graphs.GraphedShapes``), checked on the CPU.

A CPU cannot capture a CUDA graph, so these tests hand ``GraphedShapes`` a capture that runs the
module eagerly and checks what ``torch.cuda.make_graphed_callables`` requires of its input: one
capture per batch shape, made in training mode, outside autocast's cache, of a module without
hooks whose buffers need no gradient, with tensors only. Everything around the capture (which
shapes, when, the step that calls it) is then the code a GPU runs; ``tools/gpu_check.py`` checks
the captured graphs themselves on a GPU.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_batches import V, random_pairs

from aiayn.data.multi30k import PAD
from aiayn.engine.cuda_graphs import GraphedShapes, check_cuda_graphs
from aiayn.engine.switch import set_fast
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.schedule import make_optimizer, noam_scheduler
from aiayn.training.batches import EpochBatches
from aiayn.training.loop import fit
from aiayn.training.step import train_step

pytestmark = pytest.mark.usefixtures("one_thread")


class EagerCapture:
    """A stand-in for ``make_graphed_callables``: checks its preconditions, runs the module as it is."""

    def __init__(self) -> None:
        self.shapes: list[tuple[tuple[int, ...], ...]] = []

    def __call__(self, module, args):
        autocast = torch.is_autocast_enabled(args[0].device.type)  # CUDA's, on a GPU
        assert not (autocast and torch.is_autocast_cache_enabled()), "make_graphed_callables refuses it"
        assert module.training
        assert not (module._forward_hooks or module._forward_pre_hooks or module._backward_hooks)
        assert all(not b.requires_grad for b in module.buffers())
        assert all(isinstance(a, torch.Tensor) and not a.requires_grad for a in args)
        assert {id(p) for p in module.parameters()} == {id(p) for p in module.model.parameters()}
        self.shapes.append(tuple(tuple(a.shape) for a in args))
        return module


def tiny_model(fast: bool) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.0, share_embeddings=True)
    model = Transformer(cfg)
    if fast:
        set_fast(model)
    return model


@pytest.mark.parametrize(("fast", "amp_dtype"), [(False, None), (True, None), (True, torch.bfloat16)])
def test_graphed_shapes_train_as_the_model_does(fast, amp_dtype):
    """``train_step`` through ``GraphedShapes`` logs the same losses and leaves the same weights as
    through the model, and captures each batch shape once, the first time it comes."""
    plain = tiny_model(fast)
    twin = copy.deepcopy(plain)
    capture = EagerCapture()
    graphed = GraphedShapes(twin, capture=capture)
    runs = []
    for module, params in ((plain, plain), (graphed, twin)):
        optimizer = make_optimizer(params, implementation="foreach")
        scheduler = noam_scheduler(optimizer, 32, warmup=10)
        loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)
        batches = EpochBatches(random_pairs(n=120, seed=6), 160, pad_to=8, pad_rows=8)
        losses = [
            train_step(module, b, optimizer, loss_fn, scheduler, amp_dtype=amp_dtype).item()
            for epoch in (0, 1)
            for b in batches(epoch)
        ]
        runs.append(losses)
    assert runs[0] == runs[1]
    for a, b in zip(plain.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)
    shapes = [tuple(tuple(t.shape) for t in (b.src, b.tgt_in, b.src_mask, b.tgt_mask)) for b in batches(0)]
    assert capture.shapes == list(dict.fromkeys(shapes))  # once each, in order of first use
    assert 1 < len(capture.shapes) < len(shapes)  # some shapes came more than once


def test_an_eval_mode_model_is_not_captured():
    model = tiny_model(fast=True)
    capture = EagerCapture()
    graphed = GraphedShapes(model, capture=capture)
    batch = next(iter(EpochBatches(random_pairs(n=20), 200, pad_to=8, pad_rows=8)(0)))
    model.eval()
    with torch.no_grad():
        logits = graphed(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        torch.testing.assert_close(logits, model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask))
    assert capture.shapes == []


def test_cuda_graphs_are_refused_where_they_cannot_work():
    from test_runs import TINY

    with pytest.raises(ValueError, match=r"CUDA graphs need a CUDA device, got cpu"):
        check_cuda_graphs(torch.device("cpu"), world=1)
    with pytest.raises(ValueError, match=r"one process only, got a torchrun world of 2"):
        check_cuda_graphs(torch.device("cuda"), world=2)
    with pytest.raises(ValueError, match=r"cuda_graphs: not with compile"):
        TINY.with_changes(cuda_graphs=True, compile=True)
    assert TINY.with_changes(cuda_graphs=True).cuda_graphs  # unpadded: each shape captured
    model = tiny_model(fast=False)
    batches = EpochBatches(random_pairs(n=20), 200, pad_to=8, pad_rows=8)
    with pytest.raises(ValueError, match=r"CUDA graphs need a CUDA device, got cpu"):
        fit(model, batches, device="cpu", progress=False, cuda_graphs=True)


def test_the_train_command_refuses_cuda_graphs_on_a_cpu_before_writing(tmp_path, root):
    from test_runs import TINY

    from aiayn.runs.recipes import train

    cfg = TINY.with_changes(cuda_graphs=True, pad_to=16, pad_rows=32)
    with pytest.raises(ValueError, match=r"CUDA graphs need a CUDA device, got cpu"):
        train(cfg, tmp_path / "run", root=root, device="cpu", progress=False)
    assert not (tmp_path / "run").exists()


def test_the_cuda_graphs_flag_pads_unless_the_config_does(tmp_path, root, capsys):
    import json

    from aiayn import train as train_cli

    args = train_cli._parser().parse_args(["--preset", "multi30k", "--out", "x", "--cuda-graphs"])
    cfg = train_cli._config(args)
    assert (cfg.cuda_graphs, cfg.pad_to, cfg.pad_rows) == (True, train_cli.GRAPHED_PAD_TO, train_cli.GRAPHED_PAD_ROWS)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(cfg.with_changes(cuda_graphs=False, pad_to=4, pad_rows=64).to_dict()))
    args = train_cli._parser().parse_args(["--config", str(config), "--out", "x", "--cuda-graphs"])
    assert (train_cli._config(args).pad_to, train_cli._config(args).pad_rows) == (4, 64)
    with pytest.raises(SystemExit) as stopped:
        train_cli.main(["--preset", "multi30k-smoke", "--out", str(tmp_path / "run"), "--device", "cpu",
                        "--data", str(root), "--cuda-graphs"])  # fmt: skip
    assert stopped.value.code == 2
    assert capsys.readouterr().err == "error: cuda_graphs: CUDA graphs need a CUDA device, got cpu\n"
    assert not (tmp_path / "run").exists()


def test_the_train_command_steps_through_graphed_shapes_and_saves_the_plain_model(tmp_path, root, cache, monkeypatch):
    """With the device check lifted and the eager capture, ``train(cuda_graphs=True)`` logs the losses
    of the same padded run without graphs, captures each shape once, and its run folder holds the
    model's own weights (no wrapper in the names), which ``load_run`` reads."""
    import json

    from test_runs import TINY

    import aiayn.runs.recipes as recipes
    import aiayn.training.loop as training
    from aiayn.runs.load import load_run
    from aiayn.runs.recipes import train

    captures = EagerCapture()
    monkeypatch.setattr(recipes, "check_cuda_graphs", lambda device, world: None)
    monkeypatch.setattr(training, "check_cuda_graphs", lambda device, world: None)
    monkeypatch.setattr(training, "GraphedShapes", lambda model: GraphedShapes(model, capture=captures))
    losses, weights = {}, {}
    for graphs in (False, True):
        cfg = TINY.with_changes(epochs=2, pad_to=8, pad_rows=8, cuda_graphs=graphs)
        out = tmp_path / f"run-{graphs}"
        train(cfg, out, root=root, device="cpu", progress=False)
        lines = (out / "metrics.jsonl").read_text().splitlines()
        losses[graphs] = [r["loss"] for r in map(json.loads, lines) if r["event"] == "step"]
        weights[graphs] = load_run(out, "cpu", average=False)[2].state_dict()
    assert len(losses[True]) > 4 and losses[True] == losses[False]
    assert weights[True].keys() == weights[False].keys()
    assert all(torch.equal(weights[True][k], weights[False][k]) for k in weights[True])
    assert 0 < len(captures.shapes) == len(set(captures.shapes)) < len(losses[True])
