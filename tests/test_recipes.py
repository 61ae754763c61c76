"""The pipeline end to end on the smoke preset: recipes, translation, and the three commands."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from aiayn import bench
from aiayn import evaluate as evaluate_cli
from aiayn import train as train_cli
from aiayn.attention import set_fused
from aiayn.bench.contenders import TorchTransformer
from aiayn.bench.estimate import estimate_minutes
from aiayn.bench.flops import training_flops
from aiayn.bench.run import synthetic_batches
from aiayn.data.multi30k import (
    BOS,
    EOS,
    PAD,
    load_multi30k,
)
from aiayn.decoding.search import beam_search
from aiayn.decoding.translate import translate
from aiayn.engine.fast_attention import FastMultiHeadAttention
from aiayn.engine.switch import set_fast
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.runs import recipes
from aiayn.runs.folder import ResumeError
from aiayn.runs.load import average_checkpoints, load_run
from aiayn.runs.presets import PRESETS, TrainConfig, get_preset
from aiayn.runs.recipes import train, warmup_note
from aiayn.runs.scoring import evaluate
from aiayn.training.checkpoints import save_checkpoint
from aiayn.training.step import amp_dtype_for

SMOKE = PRESETS["multi30k-smoke"]
PUBLISHED = Path(__file__).resolve().parents[1].parent / "shared/runs/multi30k-h100"


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory, root, cache):
    out = tmp_path_factory.mktemp("smoke")
    summary = train("multi30k-smoke", out, root=root, device="cpu", progress=False)
    return out, summary


def read_log(run: Path, event: str) -> list[dict]:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["event"] == event]


# --- The smoke preset end to end -------------------------------------------------------------------


def test_smoke_run_writes_its_files_and_the_loss_falls(smoke_run):
    out, summary = smoke_run
    for name in ("manifest.json", "config.json", "tokenizer.model", "checkpoint.pt", "metrics.jsonl", "summary.json"):
        assert (out / name).is_file(), name
    assert TrainConfig.from_dict(json.loads((out / "config.json").read_text())) == SMOKE
    assert [p.name for p in sorted(out.glob("epoch-*.pt"))] == ["epoch-002.pt", "epoch-003.pt"]  # the last 2 kept

    steps = read_log(out, "step")
    assert [r["step"] for r in steps] == list(range(1, summary["steps"] + 1))
    losses = [r["loss"] for r in steps]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 1.5, f"the loss did not fall enough: {first:.2f} -> {last:.2f}"
    assert all(r["tokens_per_s"] > 0 and r["lr"] > 0 for r in steps)

    evals = read_log(out, "eval")
    assert [r["epoch"] for r in evals] == [0, 1, 2] and all(r["epoch_done"] for r in evals)
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    assert evals[-1]["val_ppl"] == pytest.approx(math.exp(evals[-1]["val_loss"]))

    assert summary["epochs_done"] == SMOKE.epochs and summary["steps_this_run"] == summary["steps"]
    assert summary["tokens_per_s"] > 0 and summary["device"] == "cpu" and summary["torch"] == torch.__version__
    assert summary["val_loss"] == evals[-1]["val_loss"]
    assert json.loads((out / "summary.json").read_text()) == summary.to_dict()


def test_evaluate_scores_the_preset_subset(smoke_run, root):
    out, _ = smoke_run
    result = evaluate(out, root=root)  # the preset's 100 sentences, beam 2, last two epochs averaged
    lines = (out / "test2016.hyp.en").read_text().split("\n")
    assert lines[-1] == "" and len(lines) - 1 == SMOKE.test_subset == result["sentences"]
    assert result["checkpoints"] == ["epoch-002.pt", "epoch-003.pt"]
    assert result["bleu"] == pytest.approx(result["sacrebleu"], abs=1e-9)  # our BLEU is sacreBLEU's
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert result["ppl"] == pytest.approx(math.exp(result["loss"]))
    assert result.setting == "test2016" and result.hypotheses_file == "test2016.hyp.en"
    assert json.loads((out / "results.json").read_text())["test2016"] == result.to_dict()


def test_evaluate_writes_one_line_per_sentence_of_the_whole_split(smoke_run, root, tmp_path):
    # A copy of the run whose generator always says <eos> first: all 1000 sentences decode in one step,
    # to empty strings, each still on its own line.
    out = tmp_path / "run"
    shutil.copytree(smoke_run[0], out)
    (out / "manifest.json").unlink()  # a folder without a manifest is read as it is (the file is changed below)
    checkpoint = torch.load(out / "checkpoint.pt", weights_only=True)
    checkpoint["model"]["generator.bias"][EOS] = 1e4
    torch.save(checkpoint, out / "checkpoint.pt")
    scores = tmp_path / "scores"  # a folder without a manifest is only read: the results go to --out
    result = evaluate(out, beam=1, limit=None, average=False, root=root, out_dir=scores)
    assert result["sentences"] == 1000 and result["checkpoints"] == ["checkpoint.pt"]
    assert result.hypotheses_file == "test2016.beam1.nall.final.hyp.en"
    assert (scores / result.hypotheses_file).read_text() == "\n" * 1000
    assert not (out / "manifest.json").exists() and not (out / result.hypotheses_file).exists()
    assert result["bleu"] == 0.0


def test_translate_returns_outputs_in_input_order(smoke_run):
    _, tokenizer, model, _ = load_run(smoke_run[0])
    sentences = [
        "Ein Mann fährt Fahrrad.",
        "Zwei kleine Kinder spielen im Sand am Strand, während ihre Eltern zuschauen.",
        "Ein Hund.",
        "Eine Frau mit einem roten Hut verkauft Blumen auf einem Markt.",
        "Leute stehen draußen.",
    ]
    batched = translate(model, tokenizer, sentences, beam=2, batch_size=2, max_len_a=1.1, max_len_b=5)
    one_by_one = [translate(model, tokenizer, [s], beam=2, max_len_a=1.1, max_len_b=5)[0] for s in sentences]
    assert batched == one_by_one
    assert translate(model, tokenizer, []) == []
    with pytest.raises(TypeError, match="list of str"):
        translate(model, tokenizer, "Ein Hund.")


def _translate_by_exact_length(model, tokenizer, sentences, beam, max_len_a, max_len_b):
    """The reference: one source length per batch (no padding), no cache, the explicit code."""
    ids = [s[: model.config.max_len - 1] + [EOS] for s in tokenizer.encode_batch(sentences)]
    out = [""] * len(ids)
    with set_fast(model, False):
        for S in sorted({len(s) for s in ids}):
            rows = [i for i, s in enumerate(ids) if len(s) == S]
            src = torch.tensor([ids[i] for i in rows])  # (B, S)
            limit = min(int(max_len_a * S + max_len_b) + 1, model.config.max_len)
            tokens = beam_search(model, src, None, limit, BOS, EOS, beam, 0.6, use_cache=False).tokens
            for i, text in zip(rows, tokenizer.decode_batch(tokens), strict=True):
                out[i] = text
    return out


def test_translate_equals_uncached_exact_length_decoding(smoke_run, root):
    _, tokenizer, model, _ = load_run(smoke_run[0])
    assert model.config.fused_attention  # so translate switches set_fast on
    sentences = [de for de, _ in load_multi30k("val", root)[:16]]
    settings = dict(beam=2, max_len_a=1.1, max_len_b=5)
    reference = _translate_by_exact_length(model, tokenizer, sentences, **settings)
    out = translate(model, tokenizer, sentences, batch_size=6, **settings)  # padded batches of 6
    assert out == reference
    assert len({len(s) for s in tokenizer.encode_batch(sentences)}) > 5  # the batches mix lengths
    # set_fast is switched back off afterwards: no attention is the fast twin any more
    assert not any(isinstance(m, FastMultiHeadAttention) for m in model.modules())
    # each sentence's translation is the same in any company
    assert translate(model, tokenizer, sentences[::-1], batch_size=7, **settings) == out[::-1]
    assert [translate(model, tokenizer, [s], **settings)[0] for s in sentences[:4]] == out[:4]


def test_resume_continues_exactly_where_the_run_stopped(tmp_path, root, cache):
    cfg = replace(SMOKE, val_subset=20)
    straight = train(replace(cfg, max_steps=8), tmp_path / "straight", root=root, device="cpu", progress=False)
    train(replace(cfg, max_steps=4), tmp_path / "resumed", root=root, device="cpu", progress=False)
    assert [r["step"] for r in read_log(tmp_path / "resumed", "step")] == [1, 2, 3, 4]
    resumed = train(replace(cfg, max_steps=8), tmp_path / "resumed", root=root, device="cpu", progress=False)

    assert resumed["resumed_from_step"] == 4 and resumed["steps_this_run"] == 4 and resumed["steps"] == 8
    log_straight, log_resumed = read_log(tmp_path / "straight", "step"), read_log(tmp_path / "resumed", "step")
    assert [r["step"] for r in log_resumed] == list(range(1, 9))
    assert [r["loss"] for r in log_resumed] == pytest.approx([r["loss"] for r in log_straight], rel=1e-6)
    assert resumed["val_loss"] == pytest.approx(straight["val_loss"], rel=1e-6)

    with pytest.raises(ResumeError, match=r"d_model: 64 -> 32"):
        train(cfg.with_changes(d_model=32, max_steps=8), tmp_path / "resumed", root=root, device="cpu", progress=False)


# --- Speed features give the same numbers -----------------------------------------------------------


def tiny_model(dropout: float = 0.0) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(50, 50, d_model=32, d_ff=64, h=4, N=2, dropout=dropout, share_embeddings=True))


def batch_loss(model, batch) -> torch.Tensor:
    logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
    return LabelSmoothingLoss(0.1, ignore_index=PAD)(logits, batch.tgt_out)


def test_fused_attention_gives_the_explicit_loss_and_gradients():
    model = tiny_model()
    batch = synthetic_batches(1, 400, 12, 50, seed=1)[0]  # sentences of 6..12 tokens: padding in every batch
    losses, grads = [], []
    for fused in (False, True):
        set_fused(model, fused)
        model.zero_grad()
        loss = batch_loss(model, batch)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-5, rtol=1e-4)


def test_bf16_autocast_on_cpu_stays_close_to_float32():
    model = tiny_model()
    batch = synthetic_batches(1, 400, 12, 50, seed=2)[0]
    full = batch_loss(model, batch).item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = batch_loss(model, batch).item()
    assert half == pytest.approx(full, rel=2e-2)


def test_nn_transformer_wrapper_matches_our_model():
    model = tiny_model(dropout=0.1).eval()
    theirs = TorchTransformer(model).eval()
    assert sum(p.numel() for p in theirs.parameters()) == sum(p.numel() for p in model.parameters())
    assert theirs.generator.weight is theirs.src_embed[0].weight  # tied and shared, as in ours
    batch = synthetic_batches(1, 400, 12, 50, seed=3)[0]
    with torch.no_grad():
        torch.testing.assert_close(
            theirs(batch.src, batch.tgt_in), model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
        )


def test_training_flops_match_pytorchs_flop_counter():
    model = tiny_model()
    src = torch.randint(4, 50, (3, 7))  # no padding: every position is a real token
    tgt = torch.randint(4, 50, (3, 5))
    with FlopCounterMode(display=False) as counter:
        model(src, tgt).sum().backward()
    assert training_flops(model.config, [7, 7, 7], [5, 5, 5]) == counter.get_total_flops()


# --- Configs, checkpoints, command lines ------------------------------------------------------------


def test_presets_and_their_errors():
    assert {"multi30k", "multi30k-smoke"} <= set(PRESETS)
    assert get_preset("multi30k", max_steps=10).max_steps == 10
    with pytest.raises(ValueError, match=f"unknown preset 'nope'; the presets are: {', '.join(PRESETS)}$"):
        get_preset("nope")
    with pytest.raises(ValueError, match="amp must be 'auto', 'bf16', 'fp16' or None, got 'fp32'"):
        TrainConfig(amp="fp32")
    assert TrainConfig(amp="fp16").amp == "fp16"
    with pytest.raises(ValueError, match="d_model must be divisible by h"):
        TrainConfig().with_changes(d_model=100, h=8)
    assert get_preset("multi30k-smoke", N=1).model.N == 1  # model fields go into cfg.model
    with pytest.raises(ValueError, match=r"max_tokens must be an integer in 1\.\.1048576, got 0"):
        TrainConfig(max_tokens=0)
    with pytest.raises(ValueError, match=r"unknown TrainConfig fields \['colour'\]"):
        TrainConfig.from_dict({**asdict(SMOKE), "colour": "red"})
    assert TrainConfig.from_dict(json.loads(json.dumps(SMOKE.to_dict()))) == SMOKE


def _terms_add_up(e) -> None:
    step_ms = e.ops_per_step * e.per_op_us / 1e3 + 1e3 * e.tflop_per_step / e.achievable_tflops + e.allreduce_ms
    assert e.host_min + e.arithmetic_min + e.allreduce_min == pytest.approx(e.steps * step_ms / 60e3)
    assert e.minutes == pytest.approx(
        e.host_min + e.arithmetic_min + e.allreduce_min + e.first_epoch_min + e.start_min + e.between_min
    )
    assert all(len(line) <= 77 for line in e.lines) and "not measured" in str(e)


@pytest.mark.parametrize(("preset", "amp"), [("multi30k-t4", "fp16"), ("multi30k", None)])
def test_a_step_s_ops_are_counted_on_a_narrow_model_as_on_the_full_one(preset, amp):
    """``_cpu_ops`` counts a step of the model 8 wide a head with 64 ids: the full model's count."""
    from aiayn.bench import estimate

    model = replace(PRESETS[preset].model, d_k=32)  # Table 3's row B sets d_k too
    narrow = estimate._narrow(model)
    assert narrow.N == model.N and narrow.h == model.h and narrow.d_model == 8 * model.h < model.d_model
    assert estimate._cpu_ops(model, amp) == estimate._count_ops(model, amp)


def test_t4_estimate_prints_its_terms_and_two_t4s_take_fewer_minutes(monkeypatch):
    from aiayn.bench import estimate

    t4 = PRESETS["multi30k-t4"]
    one, two = (estimate_minutes(t4, "Tesla T4", gpus=n) for n in (1, 2))
    # widths apart, multi30k-t4 steps through multi30k's ops, and float16 adds the gradient scaler's
    scaler = estimate._cpu_ops(t4.model, "fp16") - estimate._cpu_ops(PRESETS["multi30k"].model, "bf16")
    assert scaler == 12 and estimate._same_path(t4.model)
    for e in (one, two):
        _terms_add_up(e)
        assert e.device == "T4" and e.ops_per_step == estimate._measured()["ops"] + scaler
        assert "the H100's count for multi30k (bf16), +12 for fp16 (CPU)" in str(e)
    assert one.gpus == 1 and one.allreduce_ms == one.allreduce_min == 0 and "all-reduce" not in str(one)
    # two GPUs: half the steps each (the epoch's batches are sharded), the same host cost and FLOPs a
    # step, and an all-reduce of the float32 gradients over PCIe 3.0 (16 GB/s each way) every step
    assert two.steps == pytest.approx(one.steps / 2)
    for term in ("ops_per_step", "per_op_us", "tflop_per_step"):
        assert getattr(two, term) == getattr(one, term)
    params = sum(p.numel() for p in Transformer(t4.model).parameters())
    assert two.allreduce_ms == pytest.approx(4 * params / 16e9 * 1e3)  # ring of 2: 2 · (1/2) · bytes
    assert "all-reduce" in str(two) and "2 x T4" in str(two)
    minutes = [estimate_minutes(t4, "Tesla T4", gpus=n).minutes for n in (1, 2, 4, 64)]
    assert minutes == sorted(minutes, reverse=True)  # more GPUs, fewer minutes ...
    many = estimate_minutes(t4, "Tesla T4", gpus=64)
    # ... never below what they cannot share
    assert many.minutes > many.start_min + many.between_min + many.allreduce_min
    assert many.allreduce_ms > two.allreduce_ms  # a longer ring: 2 (N - 1) / N of the bytes
    # a host measured slower than the H100's: the host term grows in proportion
    slow = estimate_minutes(t4, "Tesla T4", per_op_us=2 * one.per_op_us)
    assert slow.host_min == pytest.approx(2 * one.host_min) and "as you measured" in str(slow)
    # on a T4 (compute capability 7.5) the preset trains in float16 with a gradient scaler
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert t4.amp == "auto" and amp_dtype_for(t4.amp, "cuda") is torch.float16


def test_epoch_sizes_are_those_of_the_published_run():
    """The sizes of an epoch the estimate starts from, recomputed from the run's summary.json and metrics.jsonl."""
    from aiayn.bench import estimate

    summary = json.loads((PUBLISHED / "summary.json").read_text())
    steps = [json.loads(line) for line in (PUBLISHED / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["event"] == "step"]
    ref = estimate._EPOCH
    assert (ref["steps"], ref["epochs"]) == (summary["steps"], summary["epochs_done"]) == (len(steps), 40)
    assert len([r for r in steps if r["epoch"] == 0]) == 117
    assert ref["tgt_tokens"] * ref["epochs"] == sum(r["tokens"] for r in steps)
    assert ref["max_tokens"] == json.loads((PUBLISHED / "config.json").read_text())["max_tokens"]


def test_time_estimate_starts_from_measured_runs_and_foretells_the_h200_run():
    """The step measured on the H100 comes back out of the model; the H200's 4-epoch run is foretold within 15 %."""
    from aiayn.bench import estimate
    from aiayn.runs.published import results_dir

    m = estimate._measured()
    h100 = json.loads((results_dir() / "torchrun.h100.json").read_text())
    step = next(r for r in h100["cudnn_attention"]["off"] if r["name"] == "ours (set_fast)")
    assert (m["step_ms"], m["first_shape_ms"]) == (step["step_ms"], step["first_shape_ms"])
    assert "H100" in m["step_device"] and "H200" in m["run_device"] and m["ops"] == 1326
    on_h100 = estimate_minutes(PRESETS["multi30k"], m["step_device"])
    _terms_add_up(on_h100)
    assert 60e3 * (on_h100.host_min + on_h100.arithmetic_min) / on_h100.steps == pytest.approx(m["step_ms"])
    assert on_h100.arithmetic_min < 0.2 * on_h100.host_min  # a step is mostly host time
    # the H200's run of 4 epochs: its steps (timed, first epoch included) and its wall time
    four = estimate_minutes(PRESETS["multi30k"].with_changes(epochs=4), m["run_device"])
    assert four.steps == pytest.approx(468)
    steps_s = 60 * (four.host_min + four.arithmetic_min + four.first_epoch_min)
    assert steps_s == pytest.approx(m["run_steps_s"], rel=0.15)
    assert 60 * four.minutes == pytest.approx(m["run_wall_s"], rel=0.07)
    with pytest.raises(ValueError, match="no data-sheet figures for 'Radeon 7900'; known: H100, H200, A100, L4, T4"):
        estimate_minutes(PRESETS["multi30k"], "Radeon 7900")
    with pytest.raises(ValueError, match="gpus must be an integer >= 1, got 0"):
        estimate_minutes(PRESETS["multi30k"], "H100", gpus=0)
    with pytest.raises(ValueError, match=r"GPU_SPECS holds the T4's fp16 peak, but cfg.amp='bf16' trains in bf16"):
        estimate_minutes(PRESETS["multi30k"].with_changes(amp="bf16"), "Tesla T4")


def test_other_models_count_their_ops_on_the_cpu_and_say_so():
    from aiayn.bench import estimate

    smoke = get_preset("multi30k-smoke", amp="bf16")
    assert not estimate._same_path(smoke.model)  # another depth
    estimate = estimate_minutes(smoke, "NVIDIA L4")
    _terms_add_up(estimate)
    assert "count_step_ops on the CPU" in str(estimate) and estimate.ops_per_step > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_op_count_of_the_timed_step_is_what_count_step_ops_gives_there():
    from aiayn.bench import estimate

    torch.manual_seed(0)
    model = Transformer(PRESETS["multi30k"].model).cuda()
    set_fast(model)  # the train command's path
    batch = bench.synthetic_batches(1, 8192, 16, 8000, device="cuda")[0]
    assert bench.count_step_ops(model, batch, torch.bfloat16)["total"] == estimate._measured()["ops"]


def test_flat_config_of_older_run_folders_is_read():
    published = json.loads((PUBLISHED / "config.json").read_text())
    assert "d_model" in published and "model" not in published  # the flat form
    cfg = TrainConfig.from_dict(published)
    assert (cfg.model.d_model, cfg.model.N, cfg.vocab_size, cfg.max_len) == (512, 3, 8000, 256)
    assert cfg.model.share_embeddings and cfg.model.fused_attention


def test_average_checkpoints_is_the_mean(tmp_path):
    a, b = tiny_model(), tiny_model()
    with torch.no_grad():
        for p in b.parameters():
            p.add_(1.0)
    save_checkpoint(tmp_path / "a.pt", a)
    save_checkpoint(tmp_path / "b.pt", b)
    mean = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt"])
    for name, value in a.state_dict().items():
        torch.testing.assert_close(mean[name], value + 0.5)
    with pytest.raises(ValueError, match="at least one checkpoint"):
        average_checkpoints([])


@pytest.mark.parametrize("cli", [train_cli, evaluate_cli, bench])
def test_command_lines_have_help(cli, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    assert "usage: python -m aiayn." in capsys.readouterr().out


def test_train_command_rejects_an_unknown_preset(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_cli.main(["--preset", "nope", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err == f"error: unknown preset 'nope'; the presets are: {', '.join(PRESETS)}\n"


def test_evaluate_command_prints_both_scores(smoke_run, root, capsys):
    argv = [str(smoke_run[0]), "--limit", "5", "--beam", "1", "--data", str(root), "--split", "val"]
    result = evaluate_cli.main(argv)
    printed = capsys.readouterr().out
    assert "our BLEU:" in printed and "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" in printed
    assert result.hypotheses_file == "val.beam1.n5.hyp.en"
    assert len((smoke_run[0] / "val.beam1.n5.hyp.en").read_text().splitlines()) == 5


def test_evaluate_keeps_one_result_per_decoding_setting(smoke_run, root, tmp_path):
    out = tmp_path / "scores"
    greedy = evaluate(smoke_run[0], beam=1, limit=3, root=root, out_dir=out)
    beam = evaluate(smoke_run[0], beam=2, length_penalty=1.0, limit=3, root=root, out_dir=out)
    again = evaluate(smoke_run[0], beam=1, limit=3, root=root, out_dir=out)  # the same setting: replaced
    results = json.loads((out / "results.json").read_text())
    assert sorted(results) == ["test2016.beam1.n3", "test2016.lp1.n3"]
    assert (greedy.setting, beam.setting) == ("test2016.beam1.n3", "test2016.lp1.n3")
    assert results["test2016.beam1.n3"]["bleu"] == again.bleu == greedy.bleu
    assert sorted(p.name for p in out.glob("*.hyp.en")) == ["test2016.beam1.n3.hyp.en", "test2016.lp1.n3.hyp.en"]


def test_the_train_command_trains_with_set_fast_and_compiles_with_dynamic_shapes(
    tmp_path, monkeypatch, capsys, root, cache
):
    """A fused-attention preset trains on every fast path (proven equal in test_training.py), and
    --compile compiles once for all batch shapes; on a CPU it says that compiling is slower."""

    from aiayn.attention import MultiHeadAttention
    from aiayn.layers import LayerNorm
    from aiayn.model import Transformer

    seen, compiled = {}, []

    def fit_spy(model, batches, **kwargs):
        seen["cudnn attention"] = torch.backends.cuda.cudnn_sdp_enabled()
        seen["switches"] = {
            (name, getattr(m, name))
            for m in model.modules()
            if isinstance(m, (MultiHeadAttention, LayerNorm))
            for name in ("use_fused", "fused")
            if hasattr(m, name)
        }
        attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        seen["packed"] = all(isinstance(m, FastMultiHeadAttention) for m in attention)
        raise KeyboardInterrupt  # nothing more is needed from this run

    monkeypatch.setattr(recipes, "fit", fit_spy)
    monkeypatch.setattr(Transformer, "compile", lambda self, **kw: compiled.append(kw))
    cfg = SMOKE.with_changes(train_subset=200, val_subset=10, vocab_size=300, compile=True)
    assert cfg.model.fused_attention
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", root=root, device="cpu", progress=False, log=print)
    assert seen["switches"] == {("use_fused", True), ("fused", True)} and seen["packed"]
    assert compiled == [{"dynamic": True}]
    # cuDNN's attention builds a plan per batch shape (0.4 s each on an H100): off while training
    assert seen["cudnn attention"] is False and torch.backends.cuda.cudnn_sdp_enabled()
    assert "compiled training on a CPU is slower than eager" in capsys.readouterr().out


# --- A warm-up that fits its run ------------------------------------------------------------------


def test_a_warm_up_as_long_as_the_run_is_named_with_what_to_change():
    cfg = get_preset("multi30k")  # warm-up 1,000 steps, 40 epochs
    assert warmup_note(cfg, steps_per_epoch=112, processes=1) is None  # 4,480 steps: it peaks and decays
    assert warmup_note(cfg, steps_per_epoch=14, processes=8) == (
        "note: the warm-up (1,000 steps) is not shorter than this run (560 steps: 40 epochs of 14 steps on 8 "
        "processes), so the learning rate rises all run, never peaks and never decays; train longer (--epochs, "
        '--max-steps) or give "warmup" below 560 in a --config file (e.g. a fifth of the run, 112)'
    )
    capped = warmup_note(cfg.with_changes(max_steps=1000), steps_per_epoch=112, processes=1)
    assert "(1,000 steps: --max-steps 1,000)" in capped  # equal is not shorter
    assert warmup_note(cfg.with_changes(max_steps=1001), steps_per_epoch=112, processes=1) is None


@pytest.mark.parametrize("warmup, said", [(24, True), (23, False)])  # 200 pairs: 3 epochs of 8 steps
def test_the_train_command_says_so_before_step_1(warmup, said, tmp_path, root, monkeypatch):
    lines: list[str] = []

    def fit_spy(*args, **kwargs):
        lines.append("step 1")
        raise KeyboardInterrupt  # nothing more is needed from this run

    monkeypatch.setattr(recipes, "fit", fit_spy)
    cfg = SMOKE.with_changes(train_subset=200, val_subset=10, vocab_size=300, warmup=warmup)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "run", root=root, device="cpu", progress=False, log=lines.append)
    notes = [line for line in lines if "is not shorter than this run" in line]
    assert len(notes) == int(said) and lines[-1] == "step 1", lines
