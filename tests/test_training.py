"""aiayn.training.loop: Noam schedule, label smoothing, batches, the training loop, checkpoints and exact resume."""

from __future__ import annotations

import ast
import dataclasses
import math
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import aiayn
from aiayn.decoding.search import greedy_decode
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training.batches import Batch, copy_task_batches
from aiayn.training.checkpoints import load_checkpoint, save_checkpoint
from aiayn.training.history import History
from aiayn.training.loop import FitConfig, fit
from aiayn.training.step import amp_dtype_for, make_grad_scaler, train_step

PAD, BOS, EOS = 0, 1, 2
V = 12


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_model(dropout: float = 0.1, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(V, V, d_model=16, d_ff=32, h=2, N=1, dropout=dropout))


# --- Noam schedule -------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000])
def test_noam_rate_matches_formula(step):
    d_model, warmup = 512, 4000
    expected = d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
    assert noam_rate(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    assert noam_rate(step, d_model, warmup, factor=2.0) == pytest.approx(2 * expected, rel=1e-12)


def test_noam_rate_peaks_at_warmup():
    d_model, warmup = 512, 4000
    rates = [noam_rate(s, d_model, warmup) for s in range(1, 3 * warmup + 1)]
    peak = max(range(len(rates)), key=rates.__getitem__) + 1
    assert peak == warmup
    assert rates[peak - 1] == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-12)


@pytest.mark.parametrize("step", [0, -1, 1.5, True])
def test_noam_rate_rejects_bad_step(step):
    with pytest.raises(ValueError, match=r"step counts from 1, got .*noam_scheduler"):
        noam_rate(step, 512)


def test_noam_scheduler_sets_noam_rate_each_step():
    model = nn.Linear(3, 3)
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, d_model=64, warmup=10, factor=1.5)
    for step in range(1, 31):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(noam_rate(step, 64, 10, 1.5), rel=1e-12)
        optimizer.step()
        scheduler.step()


def test_make_optimizer_uses_paper_settings():
    optimizer = make_optimizer(nn.Linear(3, 3))
    group = optimizer.param_groups[0]
    assert isinstance(optimizer, torch.optim.Adam)
    assert (group["lr"], group["betas"], group["eps"]) == (1.0, (0.9, 0.98), 1e-9)
    assert not group["fused"]  # parameters on the CPU: auto picks the plain implementation


def test_make_optimizer_skips_frozen_parameters_and_rejects_none():
    model = nn.Linear(3, 3)
    model.bias.requires_grad_(False)
    assert len(make_optimizer(model).param_groups[0]["params"]) == 1
    model.weight.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        make_optimizer(model)


# --- Label smoothing -----------------------------------------------------------------------------


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_equals_cross_entropy_3d(smoothing):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7, requires_grad=True)
    target = torch.randint(1, 7, (3, 5))
    target[0, 3:] = PAD
    target[2, 1:] = PAD
    ours = LabelSmoothingLoss(smoothing, ignore_index=PAD)(logits, target)
    theirs = F.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=PAD, label_smoothing=smoothing)
    torch.testing.assert_close(ours, theirs)
    (g_ours,) = torch.autograd.grad(ours, logits)
    (g_theirs,) = torch.autograd.grad(theirs, logits)
    torch.testing.assert_close(g_ours, g_theirs)


def test_label_smoothing_equals_cross_entropy_2d_and_reductions():
    torch.manual_seed(1)
    logits, target = torch.randn(10, 6), torch.randint(0, 6, (10,))
    for reduction in ("mean", "sum", "none"):
        ours = LabelSmoothingLoss(0.2, ignore_index=0, reduction=reduction)(logits, target)
        theirs = F.cross_entropy(logits, target, ignore_index=0, label_smoothing=0.2, reduction=reduction)
        torch.testing.assert_close(ours, theirs)


def test_label_smoothing_zero_is_plain_cross_entropy():
    torch.manual_seed(2)
    logits, target = torch.randn(4, 9, 11), torch.randint(0, 11, (4, 9))
    ours = LabelSmoothingLoss(0.0)(logits, target)
    torch.testing.assert_close(ours, F.cross_entropy(logits.transpose(1, 2), target))


def test_label_smoothing_matches_smoothed_target_formula():
    # y' = (1 - eps) * one_hot + eps / C, loss = -sum y' log p
    torch.manual_seed(3)
    eps, C = 0.1, 5
    logits, target = torch.randn(6, C), torch.randint(0, C, (6,))
    y = (1 - eps) * F.one_hot(target, C) + eps / C
    expected = -(y * logits.log_softmax(-1)).sum(-1).mean()
    torch.testing.assert_close(LabelSmoothingLoss(eps)(logits, target), expected)


@pytest.mark.parametrize("smoothing", [-0.1, 1.0, 1.5])
def test_label_smoothing_rejects_bad_epsilon(smoothing):
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\)"):
        LabelSmoothingLoss(smoothing)


def test_label_smoothing_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"got logits \(2, 3, 5\) and target \(2, 4\)"):
        LabelSmoothingLoss()(torch.randn(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


# --- Batches -------------------------------------------------------------------------------------


def test_batch_make_tiny_example():
    src = torch.tensor([[5, 6, 7], [8, 9, PAD]])
    tgt = torch.tensor([[5, 6, 7, EOS], [8, 9, EOS, PAD]])
    batch = Batch.make(src, tgt, PAD, BOS)
    assert torch.equal(batch.tgt_in, torch.tensor([[BOS, 5, 6, 7], [BOS, 8, 9, EOS]]))
    assert torch.equal(batch.tgt_out, tgt)
    assert batch.n_tokens == 7
    assert torch.equal(batch.src_mask, torch.tensor([[[[True, True, True]]], [[[True, True, False]]]]))
    assert batch.tgt_mask.shape == (2, 1, 4, 4)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    assert torch.equal(batch.tgt_mask[0, 0], causal)  # no padding in tgt_in
    assert torch.equal(batch.tgt_mask[1, 0], causal)  # the moved <eos> is a real key: its output is ignored


def test_batch_masks_padding_of_decoder_input():
    tgt = torch.tensor([[5, EOS, PAD, PAD]])
    batch = Batch.make(torch.tensor([[5, PAD]]), tgt, PAD, BOS)
    assert torch.equal(batch.tgt_in, torch.tensor([[BOS, 5, EOS, PAD]]))
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.bool
    )  # last key is padding: nobody attends to it
    assert torch.equal(batch.tgt_mask[0, 0], expected)
    assert batch.n_tokens == 2


def test_batch_from_pairs_pads_and_to_moves():
    batch = Batch.from_pairs([[5, 6], [7]], [[5, 6, EOS], [7, EOS]], PAD, BOS)
    assert torch.equal(batch.src, torch.tensor([[5, 6], [7, PAD]]))
    assert torch.equal(batch.tgt_out, torch.tensor([[5, 6, EOS], [7, EOS, PAD]]))
    moved = batch.to("cpu")
    assert moved is not batch and torch.equal(moved.tgt_mask, batch.tgt_mask) and moved.n_tokens == 5


def test_batch_rejects_bad_input():
    with pytest.raises(ValueError, match=r"same B, got src \(2, 3\) and tgt \(1, 3\)"):
        Batch.make(torch.ones(2, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long), PAD, BOS)
    with pytest.raises(ValueError, match="bos_id and pad_id must differ"):
        Batch.make(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long), PAD, PAD)
    with pytest.raises(ValueError, match="got 2 and 1"):
        Batch.from_pairs([[5], [6]], [[5]], PAD, BOS)


def test_copy_task_batches():
    before = torch.get_rng_state()
    batches = copy_task_batches(3, 4, 6, V, seed=5)
    assert torch.equal(before, torch.get_rng_state())  # a private generator: the global RNG is untouched
    assert len(batches) == 3
    b = batches[0]
    assert b.src.shape == (4, 6) and b.tgt_out.shape == (4, 7)
    assert torch.equal(b.tgt_out[:, :-1], b.src) and (b.tgt_out[:, -1] == EOS).all()
    assert b.src.min() > EOS and b.src.max() < V
    again = copy_task_batches(3, 4, 6, V, seed=5)
    assert all(torch.equal(x.src, y.src) for x, y in zip(batches, again, strict=True))

    rev = copy_task_batches(1, 4, 6, V, seed=5, reverse=True)[0]
    assert torch.equal(rev.tgt_out[:, :-1], rev.src.flip(1))

    ragged = copy_task_batches(1, 16, 6, V, seed=0, min_len=2)[0]
    lengths = (ragged.src != PAD).sum(1)
    assert lengths.min() >= 2 and lengths.max() <= 6 and (lengths < 6).any()
    for row, n in zip(ragged.tgt_out, lengths.tolist(), strict=True):
        assert row[n] == EOS and (row[n + 1 :] == PAD).all()


def test_copy_task_batches_rejects_small_vocab():
    with pytest.raises(ValueError, match="vocab_size must leave ids"):
        copy_task_batches(1, 2, 3, 3)


# --- The loop ------------------------------------------------------------------------------------


def test_copy_task_learns_to_exact_match():
    """A small Transformer learns to copy on the CPU; greedy decoding then copies every test sentence.

    With these settings exact match reaches 100 % after about 300 steps and stays there. Label
    smoothing (the paper's 0.1) matters: without it the accuracy keeps flickering around 99 %.
    """
    torch.manual_seed(0)
    seq_len, d_model, warmup, peak = 8, 32, 20, 5e-3
    model = Transformer(TransformerConfig(V, V, d_model=d_model, d_ff=64, h=4, N=2, dropout=0.0))
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, d_model, warmup, factor=peak / noam_rate(warmup, d_model, warmup))
    train = copy_task_batches(500, 64, seq_len, V, seed=0)
    start = time.perf_counter()
    history = fit(
        model, train, optimizer=optimizer, scheduler=scheduler, loss_fn=LabelSmoothingLoss(0.1, PAD), progress=False
    )
    seconds = time.perf_counter() - start

    test = copy_task_batches(1, 200, seq_len, V, seed=123)[0]
    out = greedy_decode(model, test.src, test.src_mask, seq_len + 2, BOS, EOS)
    exact = (out[:, 1:] == test.tgt_out).all(dim=1).float().mean().item()
    print(f"copy task: {len(history.loss)} steps in {seconds:.1f} s, loss {history.loss[-1]:.3f}, exact {exact:.1%}")
    assert exact == 1.0
    assert seconds <= 30, f"training took {seconds:.1f} s, expected at most 30 s"


def test_fit_records_history_and_uses_default_noam():
    model = tiny_model()
    batches = copy_task_batches(5, 4, 5, V, seed=0)
    states = []
    history = fit(model, batches, epochs=2, progress=False, hook=states.append)
    assert history.step == list(range(1, 11))
    assert history.epoch == [0] * 5 + [1] * 5
    assert history.tokens == [b.n_tokens for b in batches] * 2
    assert history.lr == pytest.approx([noam_rate(s, 16) for s in range(1, 11)])  # default: Adam + Noam
    assert all(math.isfinite(x) for x in history.loss)
    assert history.tokens_per_second > 0
    assert [s.step for s in states if s.event == "step"] == history.step
    assert [s.loss for s in states if s.event == "step"] == history.loss
    assert [(s.epoch, s.step) for s in states if s.event == "epoch_end"] == [(0, 5), (1, 10)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        states[0].step = 99  # hooks get a frozen state
    assert model.training


def test_fit_takes_a_config_or_its_fields_as_keywords():
    batches = copy_task_batches(4, 2, 4, V, seed=0)
    config = FitConfig(epochs=2, clip_norm=0.5, progress=False)
    by_config = fit(tiny_model(), batches, config)
    by_keywords = fit(tiny_model(), batches, epochs=2, clip_norm=0.5, progress=False)
    assert by_config.loss == by_keywords.loss and len(by_config.loss) == 8
    overridden = fit(tiny_model(), batches, config, epochs=1)  # a keyword replaces the config's field
    assert overridden.loss == by_config.loss[:4]
    with pytest.raises(TypeError, match="fit\\(\\) got an unexpected keyword argument 'epoch'; its settings are"):
        fit(tiny_model(), batches, epoch=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.epochs = 3  # type: ignore[misc]


def test_fit_eval_fn_runs_in_eval_mode_without_grad():
    model = tiny_model()
    seen = []

    def eval_fn(m):
        seen.append((m.training, torch.is_grad_enabled()))
        return {"answer": 42.0}

    batches = copy_task_batches(4, 2, 4, V, seed=0)
    history = fit(model, batches, epochs=2, eval_fn=eval_fn, eval_every=3, progress=False)
    assert [e["step"] for e in history.evals] == [3, 6]
    assert seen == [(False, False)] * 2 and history.evals[0]["answer"] == 42.0
    history = fit(tiny_model(), batches, epochs=2, eval_fn=eval_fn, progress=False)  # default: every epoch
    assert [(e["epoch"], e["step"]) for e in history.evals] == [(0, 4), (1, 8)]


def test_fit_accepts_src_tgt_pairs_with_bos_id():
    pairs = [(b.src, b.tgt_out) for b in copy_task_batches(3, 2, 4, V, seed=0)]
    history = fit(tiny_model(), pairs, bos_id=BOS, progress=False)
    assert len(history.loss) == 3
    with pytest.raises(ValueError, match="pass bos_id"):
        fit(tiny_model(), pairs, progress=False)


def test_fit_with_bf16_autocast_on_cpu():
    history = fit(tiny_model(), copy_task_batches(3, 2, 4, V), amp_dtype=torch.bfloat16, progress=False)
    assert all(math.isfinite(x) for x in history.loss)


# --- float16 with a gradient scaler (Colab's T4) --------------------------------------------------


@pytest.mark.parametrize(
    ("amp", "capability", "expected"),
    [("auto", (7, 5), torch.float16), ("auto", (7, 0), torch.float16), ("auto", (8, 0), torch.bfloat16),
     ("auto", (9, 0), torch.bfloat16), ("bf16", (7, 5), torch.bfloat16), ("fp16", (9, 0), torch.float16),
     (None, (9, 0), None)],
)  # fmt: skip
def test_auto_amp_picks_float16_below_compute_capability_8(monkeypatch, amp, capability, expected):
    asked = []

    def capability_of(device=None):
        asked.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability_of)
    # a T4 "supports" bfloat16 by emulation: the choice must not rest on this answer
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert amp_dtype_for(amp, "cuda") is expected
    assert asked == ([torch.device("cuda")] if amp == "auto" else [])
    scaler = make_grad_scaler(expected, "cpu")  # the scaler comes with float16 only
    assert (scaler is not None) == (expected is torch.float16)


def test_auto_amp_is_full_precision_on_cpu_unless_asked():
    assert amp_dtype_for("auto", "cpu") is None and amp_dtype_for(None, "cpu") is None
    assert amp_dtype_for("fp16", "cpu") is torch.float16 and amp_dtype_for("bf16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="amp must be 'auto', 'bf16', 'fp16' or None, got 'fp8'"):
        amp_dtype_for("fp8", "cpu")


def test_float16_training_step_on_cpu_is_finite_and_close_to_float32():
    batch = copy_task_batches(1, 8, 6, V, seed=3)[0]
    losses, grads = {}, {}
    start = torch.cat([p.detach().flatten() for p in tiny_model(dropout=0.0).parameters()])
    for dtype in (None, torch.float16):
        model = tiny_model(dropout=0.0)
        optimizer = make_optimizer(model, lr=1e-3)
        scaler = make_grad_scaler(dtype, "cpu")
        with torch.autocast("cpu", dtype=torch.float16, enabled=dtype is not None):
            logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        assert logits.dtype == (torch.float16 if dtype else torch.float32)  # autocast really ran in float16
        loss = train_step(model, batch, optimizer, LabelSmoothingLoss(0.1, PAD), amp_dtype=dtype, scaler=scaler)
        losses[dtype] = loss.item()
        grads[dtype] = torch.cat([p.grad.flatten() for p in model.parameters()])  # unscaled before clipping
        moved = torch.cat([p.detach().flatten() for p in model.parameters()]) - start
        assert moved.abs().max() > 5e-4  # the step was taken, not skipped for an overflow
        if scaler is not None:
            assert scaler.get_scale() == 65536.0
    assert math.isfinite(losses[torch.float16])
    assert losses[torch.float16] == pytest.approx(losses[None], rel=1e-2)
    error = (grads[torch.float16] - grads[None]).norm() / grads[None].norm()
    assert error < 1e-2, f"float16 gradients differ from float32 by {error:.2%}"


def test_scaler_state_round_trips_through_a_checkpoint(tmp_path):
    model, optimizer, scheduler = _setup(0)
    scaler = make_grad_scaler(torch.float16, "cpu")
    history = fit(model, copy_task_batches(3, 2, 4, V), optimizer=optimizer, scheduler=scheduler, scaler=scaler,
                  amp_dtype=torch.float16, progress=False)  # fmt: skip
    assert all(math.isfinite(x) for x in history.loss)
    scaler.update(1234.0)  # a scale no fresh scaler has
    path = save_checkpoint(tmp_path / "ckpt.pt", model, optimizer, scheduler, step=3, scaler=scaler)
    restored = make_grad_scaler(torch.float16, "cpu")
    load_checkpoint(path, *_setup(1), scaler=restored)
    assert restored.state_dict() == scaler.state_dict() and restored.get_scale() == 1234.0
    torch.load(path, weights_only=True)  # still only tensors and plain containers


def test_float16_resume_is_exact(tmp_path):
    """fit saves the scaler with the run and restores it: a resumed float16 run gives the same losses."""
    data = copy_task_batches(6, 4, 5, V, seed=1)
    kwargs = dict(epochs=2, progress=False, amp_dtype=torch.float16)
    torch.manual_seed(0)
    model, optimizer, scheduler = _setup(0)
    full = fit(model, data, optimizer=optimizer, scheduler=scheduler, **kwargs)
    path = tmp_path / "run.pt"
    torch.manual_seed(0)
    model, optimizer, scheduler = _setup(0)
    fit(model, data, optimizer=optimizer, scheduler=scheduler, max_steps=5, checkpoint_path=path, **kwargs)
    assert load_checkpoint(path)["scaler"]["scale"] == 65536.0
    model2, optimizer2, scheduler2 = _setup(99)
    resumed = fit(model2, data, optimizer=optimizer2, scheduler=scheduler2, resume_from=path, **kwargs)
    assert resumed.loss == full.loss


def test_fit_with_progress_bar(capsys):
    history = fit(tiny_model(), copy_task_batches(3, 2, 4, V), progress=True)
    assert len(history.loss) == 3
    assert "loss=" in capsys.readouterr().err


def test_fit_batches_as_function_of_epoch():
    data = {e: copy_task_batches(2, 2, 4, V, seed=e) for e in range(3)}
    history = fit(tiny_model(), lambda epoch: data[epoch], epochs=3, progress=False)
    assert history.tokens == [b.n_tokens for e in range(3) for b in data[e]]


def test_non_finite_loss_names_the_step():
    calls = []

    def loss_fn(logits, target):
        calls.append(1)
        loss = F.cross_entropy(logits.transpose(1, 2), target, ignore_index=PAD)
        return loss * float("nan") if len(calls) == 3 else loss

    with pytest.raises(FloatingPointError, match=r"loss is nan at step 3 \(epoch 0, batch 3\)"):
        fit(tiny_model(), copy_task_batches(5, 2, 4, V), loss_fn=loss_fn, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epochs": 0}, "epochs must be a positive integer"),
        ({"max_steps": 0}, "max_steps must be a positive integer"),
        ({"amp_dtype": torch.float64}, "amp_dtype must be None, torch.bfloat16 or torch.float16, got torch.float64"),
        ({"clip_norm": 0.0}, "clip_norm must be positive or None"),
    ],
)
def test_fit_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fit(tiny_model(), copy_task_batches(1, 2, 4, V), progress=False, **kwargs)


# --- Checkpoints ---------------------------------------------------------------------------------


# Every torch.save and torch.load of the package, and what each file is: a run's checkpoint.pt and
# epoch-NNN.pt are named, serialized and parsed in aiayn.training.checkpoints alone.
PICKLED = {
    "training/checkpoints.py": "checkpoint.pt and epoch-NNN.pt",
    "training/equivalence.py": "the check's own weights of rank 0, in a temporary folder",
    "runs/release.py": "the released weights (<name>-averaged-fp16.pt)",
    "runs/weights_files.py": "the released weights, read",
}


def test_one_module_writes_and_reads_a_runs_checkpoints():
    src = Path(aiayn.__file__).parent
    pickling, naming = set(), set()
    for path in src.rglob("*.py"):
        name = path.relative_to(src).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "torch"
                and node.attr in ("save", "load")
            ):
                pickling.add(name)
            if isinstance(node, ast.Constant) and node.value == "checkpoint.pt":
                naming.add(name)
    assert pickling == set(PICKLED)
    assert naming == {"training/checkpoints.py"}


def _setup(seed: int):
    model = tiny_model(dropout=0.1, seed=seed)
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, 16, warmup=4)
    return model, optimizer, scheduler


def test_checkpoint_round_trip(tmp_path):
    model, optimizer, scheduler = _setup(0)
    fit(model, copy_task_batches(3, 2, 4, V), optimizer=optimizer, scheduler=scheduler, progress=False)
    path = save_checkpoint(tmp_path / "ckpt.pt", model, optimizer, scheduler, step=3, epoch=1, extra={"note": "hi"})
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temporary file left behind

    model2, optimizer2, scheduler2 = _setup(1)
    checkpoint = load_checkpoint(path, model2, optimizer2, scheduler2)
    assert (checkpoint["step"], checkpoint["epoch"], checkpoint["extra"]) == (3, 1, {"note": "hi"})
    for (name, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    state, state2 = optimizer.state_dict(), optimizer2.state_dict()
    assert state["param_groups"] == state2["param_groups"]
    for k in state["state"]:
        for key in state["state"][k]:
            assert torch.equal(state["state"][k][key], state2["state"][k][key])
    assert scheduler.state_dict() == scheduler2.state_dict()
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    torch.load(path, weights_only=True)  # only tensors and plain containers inside


def test_checkpoint_save_is_atomic(tmp_path, monkeypatch):
    model, optimizer, scheduler = _setup(0)
    path = save_checkpoint(tmp_path / "ckpt.pt", model, optimizer, scheduler, step=1).path
    before = path.read_bytes()

    def broken_save(obj, f):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, optimizer, scheduler, step=2)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_load_checkpoint_without_optimizer_state_raises(tmp_path):
    model, optimizer, _ = _setup(0)
    path = save_checkpoint(tmp_path / "model.pt", model)
    with pytest.raises(ValueError, match="holds no optimizer state"):
        load_checkpoint(path, model, optimizer)


class Shuffled:
    """Batches in a new random order every epoch, drawn from the global torch RNG when iteration starts."""

    def __init__(self, batches: list[Batch]):
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        order = torch.randperm(len(self.batches)).tolist()
        return (self.batches[i] for i in order)


class Crash(Exception):
    pass


@pytest.mark.parametrize(("stop", "crash_at"), [(4, None), (6, None), (9, None), (None, 8)])
def test_resume_reproduces_uninterrupted_run(tmp_path, stop, crash_at):
    """Stop after `stop` steps (or crash during step `crash_at`), resume, and get exactly the same losses."""
    data = Shuffled(copy_task_batches(6, 4, 5, V, seed=1))
    kwargs = dict(epochs=2, progress=False)

    torch.manual_seed(0)
    full_model, optimizer, scheduler = _setup(0)
    full = fit(full_model, data, optimizer=optimizer, scheduler=scheduler, **kwargs)
    assert len(full.loss) == 12

    path = tmp_path / "run.pt"
    torch.manual_seed(0)
    model, optimizer, scheduler = _setup(0)
    if crash_at is None:
        first = fit(
            model, data, optimizer=optimizer, scheduler=scheduler, max_steps=stop, checkpoint_path=path, **kwargs
        )
        assert first.loss == full.loss[:stop]
    else:
        calls = []

        def crashing_loss(logits, target):
            calls.append(1)
            if len(calls) == crash_at:
                raise Crash
            return LabelSmoothingLoss(0.1, PAD)(logits, target)

        with pytest.raises(Crash):
            fit(
                model,
                data,
                optimizer=optimizer,
                scheduler=scheduler,
                loss_fn=crashing_loss,
                checkpoint_path=path,
                checkpoint_every=3,
                **kwargs,
            )
        assert load_checkpoint(path)["step"] == 6

    torch.manual_seed(1234)  # a different RNG state and different weights: all must come from the checkpoint
    model2, optimizer2, scheduler2 = _setup(99)
    resumed = fit(model2, data, optimizer=optimizer2, scheduler=scheduler2, resume_from=path, **kwargs)
    assert resumed.loss == full.loss  # exactly, step for step
    assert resumed.step == list(range(1, 13))
    for a, b in zip(full_model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(a, b)


def test_history_state_dict_round_trip():
    history = History(step=[1, 2], epoch=[0, 0], loss=[2.0, 1.5], lr=[0.1, 0.2], tokens=[3, 4], seconds=[0.1, 0.1])
    history.evals.append({"step": 2, "epoch": 0, "bleu": 12.5})
    assert History.from_state_dict(history.state_dict()) == history


def test_fit_saves_by_wall_time_inside_an_epoch(tmp_path):
    states = []
    fit(
        tiny_model(),
        copy_task_batches(5, 2, 4, V),
        checkpoint_path=tmp_path / "ckpt.pt",
        checkpoint_minutes=1e-9,  # every step is "long ago" enough
        progress=False,
        hook=states.append,
    )
    saved = [s.step for s in states if s.event == "checkpoint"]
    assert saved == [1, 2, 3, 4, 5, 5]  # after each step, and at the epoch's end
    assert [s.saved.sha256 for s in states if s.event == "saving"] == [
        s.saved.sha256 for s in states if s.event == "checkpoint"
    ]
    assert load_checkpoint(tmp_path / "ckpt.pt")["step"] == 5


def test_fit_saves_at_the_end_not_at_every_epochs_end(tmp_path):
    """A checkpoint holds Adam's state (three times the weights): written after the first step (a run
    always holds one to resume from), at the run's end, every checkpoint_every steps and every
    checkpoint_minutes, never just because an epoch ended."""
    states = []
    fit(tiny_model(), copy_task_batches(4, 2, 4, V), epochs=3, checkpoint_path=tmp_path / "ckpt.pt",
        progress=False, hook=states.append)  # fmt: skip
    assert [s.step for s in states if s.event == "checkpoint"] == [1, 12]
    saved = load_checkpoint(tmp_path / "ckpt.pt")
    assert (saved["step"], saved["epoch"], saved["extra"]["batches_done"]) == (12, 3, 0)  # the start of epoch 3
    states.clear()
    fit(tiny_model(), copy_task_batches(4, 2, 4, V), epochs=3, checkpoint_path=tmp_path / "ckpt.pt",
        checkpoint_every=5, progress=False, hook=states.append)  # fmt: skip
    assert [s.step for s in states if s.event == "checkpoint"] == [1, 5, 10, 12]


# --- The fast paths in training ---------------------------------------------------------------------


def test_training_with_set_fast_equals_the_fused_model_step_for_step():
    """What the train command does (``set_fast`` on a fused-attention model) changes no number
    that matters: with dropout on, the same masks are drawn, so the losses of 8 Adam steps and the
    weights after them agree with the fused-only model's to float rounding."""
    from aiayn.engine.switch import set_fast

    def run(fast: bool) -> tuple[list[float], dict[str, torch.Tensor]]:
        torch.manual_seed(0)
        model = Transformer(
            TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.1, fused_attention=True)
        )
        if fast:
            set_fast(model)
        batches = copy_task_batches(8, 6, 7, V, seed=3)
        torch.manual_seed(1)  # dropout's draws
        history = fit(model, batches, progress=False)
        return history.loss, {k: v.clone() for k, v in model.state_dict().items()}

    loss_fused, weights_fused = run(False)
    loss_fast, weights_fast = run(True)
    assert loss_fast == pytest.approx(loss_fused, rel=1e-5)
    assert weights_fast.keys() == weights_fused.keys()
    for name, value in weights_fused.items():
        torch.testing.assert_close(weights_fast[name], value, atol=2e-5, rtol=1e-4, msg=name)

