"""No copy derived from the weights outlives them: whatever changes the parameters, the next forward uses the new ones.

The fast path stacks the q/k/v weights into one product (``fast_attention``) and, on an
x86 CPU, decoding reorders each weight for oneDNN (``decoding.onednn_linear``). A stacked copy that
was kept across forwards, keyed on the parameters' version counters, went stale after every step of
fused Adam, which updates in place without bumping them: every GPU run's validation loss was that of
its first weights. Each change below must reach the next forward and the next decoding.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from aiayn.decoding.search import (
    beam_search,
    greedy_decode,
    onednn_available,
    onednn_linear,
)
from aiayn.engine import fast_attention
from aiayn.engine.fast_attention import FastMultiHeadAttention
from aiayn.engine.switch import set_fast
from aiayn.runs.load import average_checkpoints
from aiayn.runs.presets import build_model, get_preset
from aiayn.schedule import make_optimizer

REPO = Path(__file__).resolve().parents[1]
BOS, EOS = 1, 2

pytestmark = pytest.mark.usefixtures("one_thread")


def smoke_model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = build_model(get_preset("multi30k-smoke"), 1000)
    set_fast(model)  # packed q/k/v, as the train command trains
    return model


def fresh_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A new model holding ``model``'s weights: no copy of anything earlier."""
    twin = smoke_model(seed=1)
    twin.load_state_dict(model.state_dict())
    return twin


g = torch.Generator().manual_seed(0)
SRC = torch.randint(4, 1000, (3, 9), generator=g)
TGT = torch.randint(4, 1000, (3, 7), generator=g)


def logits(model: torch.nn.Module) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(SRC, TGT)  # (3, 7, 1000)


def decoded(model: torch.nn.Module) -> tuple[torch.Tensor, ...]:
    greedy = greedy_decode(model, SRC, None, 8, BOS, EOS)
    beams = beam_search(model, SRC[:2], None, 8, BOS, EOS, beam_size=3)
    return greedy, beams.tokens


def train_steps(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int = 3) -> None:
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        model(SRC, TGT).float().pow(2).mean().backward()
        optimizer.step()


def adam(implementation: str):
    def change(model: torch.nn.Module) -> None:
        train_steps(model, make_optimizer(model, lr=1e-2, implementation=implementation))

    return change


def load_state_dict(model: torch.nn.Module) -> None:
    model.load_state_dict({k: torch.randn_like(v) for k, v in model.state_dict().items()})


def data_copy(model: torch.nn.Module) -> None:
    for p in model.parameters():
        p.data.copy_(torch.randn_like(p))  # .data: autograd's version counter is not bumped


def no_grad_update(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5).add_(0.01)


def foreach_copy(model: torch.nn.Module) -> None:
    params = [p.detach() for p in model.parameters()]
    torch._foreach_copy_(params, [torch.randn_like(p) for p in params])


def averaged(model: torch.nn.Module, tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        paths.append(tmp_path / f"epoch-{i}.pt")
        state = {k: v + i for k, v in model.state_dict().items()}
        torch.save({"model": state, "step": i}, paths[-1])
    model.load_state_dict(average_checkpoints(paths))


CHANGES = {
    "fused Adam": adam("fused"),
    "foreach Adam": adam("foreach"),
    "for-loop Adam": adam("for-loop"),
    "load_state_dict": load_state_dict,
    "p.data.copy_": data_copy,
    "in place under no_grad": no_grad_update,
    "torch._foreach_copy_": foreach_copy,
    "checkpoint averaging": averaged,
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_every_change_of_the_parameters_reaches_the_next_forward_and_decoding(change, tmp_path):
    model = smoke_model()
    before = logits(model)
    decoded(model)  # decoding keeps copies while it runs
    if change == "checkpoint averaging":
        averaged(model, tmp_path)
    else:
        CHANGES[change](model)
    twin = fresh_copy(model)
    after = logits(model)
    assert (after - before).abs().max() > 1e-3, "the change did not change the model"
    assert_close(after, logits(twin), rtol=0, atol=0)
    for ours, theirs in zip(decoded(model), decoded(twin), strict=True):
        assert torch.equal(ours, theirs)


def test_no_stacked_copy_outlives_a_decoding_call(monkeypatch):
    model = smoke_model()
    attention = [m for m in model.modules() if isinstance(m, FastMultiHeadAttention)]
    assert attention, "set_fast makes every attention the fast twin"
    seen = []
    original = fast_attention._packed_parameters

    def spy(attn, names):
        seen.append(getattr(attn, "_packed_kept", None) is not None)
        return original(attn, names)

    monkeypatch.setattr(fast_attention, "_packed_parameters", spy)
    decoded(model)
    logits(model)
    assert any(seen), "decoding should keep its stacked weights while it runs"
    assert not seen[-1], "a plain forward must stack the weights anew"
    assert not any(hasattr(m, "_packed_kept") for m in attention)


@pytest.mark.skipif(not onednn_available(), reason="oneDNN's float32 product needs an x86 CPU with AVX")
def test_onednn_reordered_weights_do_not_outlive_their_block():
    linear = torch.nn.Linear(8, 5)
    x = torch.randn(3, 8)
    mode = onednn_linear()
    with torch.no_grad():
        with mode:
            torch.nn.functional.linear(x, linear.weight, linear.bias)
        assert not mode.packed, "the reordered copies are dropped at the block's end"
        linear.weight.data.copy_(torch.randn(5, 8))  # no version bump
        with mode:
            y = torch.nn.functional.linear(x, linear.weight, linear.bias)
    assert_close(y, torch.nn.functional.linear(x, linear.weight, linear.bias), rtol=1e-5, atol=1e-5)


def test_ddp_broadcast_reaches_the_next_forward(tmp_path):
    """DDP copies rank 0's weights into every rank in place at construction (gloo, two processes)."""
    script = textwrap.dedent(
        f"""
        import os, sys, torch, torch.distributed as dist
        sys.path.insert(0, {str(REPO / "tests")!r})
        from test_stale_weights import smoke_model, logits, decoded
        rank = int(sys.argv[1])
        dist.init_process_group("gloo", init_method="file://{tmp_path / "rendezvous"}", rank=rank, world_size=2)
        torch.set_num_threads(1)
        model = smoke_model(seed=rank)  # different weights on each rank
        logits(model); decoded(model)
        ddp = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
        out = logits(model)
        everything = [torch.empty_like(out) for _ in range(2)]
        dist.all_gather(everything, out)
        assert torch.equal(everything[0], everything[1]), "rank 1 computes with its old weights"
        dist.destroy_process_group()
        """
    )
    (tmp_path / "ddp.py").write_text(script)
    procs = [
        subprocess.Popen([sys.executable, str(tmp_path / "ddp.py"), str(rank)], stderr=subprocess.PIPE, text=True)
        for rank in range(2)
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(errors)
