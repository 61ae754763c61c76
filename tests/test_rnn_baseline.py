"""The recurrent baseline (``aiayn.baselines.rnn``): it learns, it goes through the pipeline, it refuses bad input."""

from __future__ import annotations

import json
import time

import pytest
import torch

from aiayn import evaluate as evaluate_cli
from aiayn import train as train_cli
from aiayn.baselines.rnn import RNN, RNNConfig
from aiayn.data.multi30k import encode_pairs, load_multi30k
from aiayn.data.tokenizer import train_tokenizer
from aiayn.decoding.search import beam_search, greedy_decode
from aiayn.loss import LabelSmoothingLoss
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import count_parameters
from aiayn.runs.load import load_run
from aiayn.runs.presets import PRESETS, TrainConfig, build_model, get_preset
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training.batches import copy_task_batches, eval_batches
from aiayn.training.loop import fit

PAD, BOS, EOS = 0, 1, 2
V = 12

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**changes) -> RNN:
    torch.manual_seed(0)
    sizes = dict(d_model=16, d_hidden=16, d_attn=16, dropout=0.0, pad_id=PAD)
    return RNN(RNNConfig(V, V, **sizes | changes))


def test_copy_task_learns_to_exact_match():
    """A small RNN with attention learns to copy on the CPU: greedy decoding then copies held-out sentences.

    With these settings exact match reaches 100 % after about 100 steps (99.5 % after 80).
    """
    torch.manual_seed(0)
    seq_len, d, warmup, peak = 8, 32, 20, 1e-2
    model = RNN(RNNConfig(V, V, d_model=d, d_hidden=d, d_attn=d, dropout=0.0, pad_id=PAD))
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, d, warmup, factor=peak / noam_rate(warmup, d, warmup))
    start = time.perf_counter()
    history = fit(
        model,
        copy_task_batches(120, 64, seq_len, V, seed=0),
        optimizer=optimizer,
        scheduler=scheduler,
        loss_fn=LabelSmoothingLoss(0.1, PAD),
        progress=False,
    )
    seconds = time.perf_counter() - start
    test = copy_task_batches(1, 200, seq_len, V, seed=123)[0]
    out = greedy_decode(model, test.src, test.src_mask, seq_len + 2, BOS, EOS)
    exact = (out[:, 1:] == test.tgt_out).all(dim=1).float().mean().item()
    beam = beam_search(model, test.src, test.src_mask, seq_len + 2, BOS, EOS, beam_size=3).tokens
    beam_exact = (beam[:, 1:] == test.tgt_out).all(dim=1).float().mean().item()
    steps = len(history.loss)
    print(f"RNN copy task: {steps} steps in {seconds:.1f} s, exact {exact:.1%} greedy, {beam_exact:.1%} beam 3")
    assert exact >= 0.9 and beam_exact >= 0.9


def test_it_overfits_two_hundred_multi30k_pairs(root, tmp_path):
    """200 short training pairs, a 300-piece tokenizer trained here: in 80 steps the loss falls under half its start."""
    short = [p for p in load_multi30k("train", root) if max(len(p[0].split()), len(p[1].split())) <= 9]
    pairs = short[:200]
    tokenizer = train_tokenizer(pairs, 300, cache_dir=tmp_path)
    batches = eval_batches(encode_pairs(tokenizer, pairs), 1500)
    torch.manual_seed(0)
    Vt, d = tokenizer.vocab_size, 64
    model = RNN(RNNConfig(Vt, Vt, d_model=d, d_hidden=d, d_attn=d, dropout=0.0, share_embeddings=True, pad_id=PAD))
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, d, 20, factor=2e-2 / noam_rate(20, d, 20))
    history = fit(
        model, batches * 10, optimizer=optimizer, scheduler=scheduler, loss_fn=LabelSmoothingLoss(0.0, PAD),
        progress=False,
    )  # fmt: skip
    first, last = history.loss[0], sum(history.loss[-len(batches) :]) / len(batches)
    print(f"RNN on 200 Multi30k pairs: {len(batches)} batches x 10 epochs, loss {first:.2f} -> {last:.2f}")
    assert last < 0.5 * first


def test_rnn_smoke_trains_and_evaluates_end_to_end(root, cache, tmp_path, capsys):
    """``python -m aiayn.train --preset rnn-smoke`` and ``python -m aiayn.evaluate`` take it like any preset."""
    out = tmp_path / "rnn"
    train_cli.main(["--preset", "rnn-smoke", "--out", str(out), "--data", str(root), "--device", "cpu",
                    "--max-steps", "8", "--no-progress"])  # fmt: skip
    cfg = TrainConfig.from_dict(json.loads((out / "config.json").read_text()))
    assert isinstance(cfg.model, RNNConfig) and cfg == get_preset("rnn-smoke", max_steps=8)
    _, _, model, _ = load_run(out, "cpu")
    assert isinstance(model, RNN)
    result = evaluate_cli.main([str(out), "--data", str(root), "--limit", "10", "--no-progress"])
    printed = capsys.readouterr().out
    assert "sacreBLEU" in printed and 0 <= result.sacrebleu <= 100
    (hypotheses,) = out.glob("test2016*.hyp.en")
    assert len(hypotheses.read_text().splitlines()) == 10


def test_rnn_preset_has_the_multi30k_models_parameter_count():
    rnn = count_parameters(build_model(PRESETS["rnn"], 8000))
    transformer = count_parameters(build_model(PRESETS["multi30k"], 8000))
    print(f"parameters: rnn {rnn:,}, multi30k {transformer:,} ({rnn / transformer - 1:+.1%})")
    assert abs(rnn / transformer - 1) < 0.1


def test_a_step_depends_on_earlier_steps_only():
    """Change target token 3: outputs 0..2 stay, output 3 and every later one move (the sequential chain)."""
    model = tiny().eval()
    src = torch.tensor([[5, 6, 7, 8, EOS]])
    tgt = torch.tensor([[BOS, 3, 4, 5, 6, 7]])
    changed = tgt.clone()
    changed[0, 3] = 9
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert all(not torch.allclose(a[:, i], b[:, i]) for i in range(3, 6))


def test_padding_does_not_change_a_sentences_states():
    """The encoder is packed: a sentence padded in a batch of longer ones has the same states and logits."""
    model = tiny().eval()
    short = torch.tensor([[5, 6, EOS]])
    batch = torch.tensor([[5, 6, EOS, PAD, PAD], [7, 8, 9, 10, EOS]])
    tgt = torch.tensor([[BOS, 3, 4]])
    with torch.no_grad():
        alone = model.encode(short)
        padded = model.encode(batch)
        torch.testing.assert_close(padded[:1, :3], alone)
        assert padded[0, 3:].abs().sum() == 0
        logits = model(batch, torch.cat([tgt, tgt]))[:1]
        torch.testing.assert_close(logits, model(short, tgt))


def test_the_training_masks_pass_through():
    model = tiny()
    src, tgt = torch.tensor([[5, 6, EOS, PAD]]), torch.tensor([[BOS, 3, 4]])
    logits = model(src, tgt, padding_mask(src, PAD), decoder_mask(tgt, PAD))
    assert logits.shape == (1, 3, V)


def test_bad_inputs_raise_clear_errors():
    model = tiny()
    src, tgt = torch.tensor([[5, 6, EOS]]), torch.tensor([[BOS, 3]])
    with pytest.raises(TypeError, match="src: expected"):
        model(src.float(), tgt)
    wrong_width = r"memory: expected shape \(B, S, 32\) = \(B, S, 2·d_hidden\), got \(1, 3, 16\)"
    with pytest.raises(ValueError, match=wrong_width):
        model.decode(torch.zeros(1, 3, 16), None, tgt)
    with pytest.raises(ValueError, match=r"tgt: expected shape \(1, T\)"):
        model.decode(model.encode(src), None, torch.tensor([[BOS], [BOS]]))
    with pytest.raises(ValueError, match="src_mask: expected a 4-D mask"):
        model.encode(src, torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="N: the recurrent baseline has one GRU layer per stack, got N=2"):
        RNNConfig(V, V, N=2)
    with pytest.raises(ValueError, match="fused_attention"):
        RNNConfig(V, V, fused_attention=True)
    with pytest.raises(TypeError, match="config: expected an RNNConfig, got TransformerConfig"):
        RNN(PRESETS["multi30k-smoke"].model)
    with pytest.raises(ValueError, match=r"unknown RNNConfig fields \['d_ff_typo'\]"):
        values = PRESETS["rnn-smoke"].to_dict()
        TrainConfig.from_dict(values | {"model": values["model"] | {"d_ff_typo": 1}})
