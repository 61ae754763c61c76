"""The options of faster decoding on a CPU: int8 weights, bfloat16 autocast, the speed report.

Each option runs, refuses what it cannot do with a message that says what would work, and never
changes the caller's model. Both options change a few translations (``tools/measure_decoding.py``
measures how many), so these tests check that they run and stay close, not that they are equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from aiayn.cli import UsageError
from aiayn.decoding import translate as translation
from aiayn.decoding.search import (
    beam_search,
    decode_sorted,
    greedy_decode,
    onednn_available,
    onednn_linear,
)
from aiayn.decoding.translate import describe_decoding, translate
from aiayn.engine.precision import cpu_has_native_bf16, int8_copy
from aiayn.engine.switch import set_fast
from aiayn.evaluate import _parser
from aiayn.model import Transformer, TransformerConfig
from aiayn.runs import scoring
from aiayn.runs.scoring import evaluate

pytestmark = pytest.mark.usefixtures("one_thread")

PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"

SENTENCES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball."]


def tiny_model() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(12, 12, d_model=32, d_ff=64, h=4, N=2)
    return Transformer(config).eval()


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def assert_unchanged(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    quantized = [m for m in model.modules() if "quantized" in type(m).__module__]
    assert quantized == []  # every layer still float


# --- int8 ---------------------------------------------------------------------------------------


def test_int8_copy_is_close_and_leaves_the_model_alone():
    model = tiny_model()
    before = snapshot(model)
    q = int8_copy(model)
    assert_unchanged(model, before)
    assert type(model.generator) is nn.Linear  # the caller's layers are still float
    assert not isinstance(q.generator, nn.Linear)  # the copy's are int8
    src = torch.randint(3, 12, (3, 6))
    tgt = torch.randint(3, 12, (3, 5))
    with torch.no_grad():
        torch.testing.assert_close(q(src, tgt), model(src, tgt), atol=0.1, rtol=0)


def test_int8_copy_runs_on_the_fast_path():
    # set_fast packs q/k/v from float weights; the int8 layers have none and run one by one
    q = int8_copy(tiny_model())
    src = torch.randint(3, 12, (2, 6))
    explicit = greedy_decode(q, src, None, 8, 1, 2)
    with set_fast(q):
        fast = greedy_decode(q, src, None, 8, 1, 2)
    assert torch.equal(fast, explicit)


def test_int8_copy_refuses_a_model_off_the_cpu():
    model = Transformer(TransformerConfig(12, 12, d_model=8, d_ff=8, h=2, N=1)).to("meta")
    with pytest.raises(ValueError, match="runs on the CPU only, but the model is on meta"):
        int8_copy(model)


def test_translate_int8_runs_and_leaves_the_model_alone(published):
    model, tokenizer = published
    before = snapshot(model)
    lines = translate(model, tokenizer, SENTENCES, beam=2, quantize="int8")
    assert all(lines)
    assert_unchanged(model, before)
    assert type(model.encoder.layers[0].self_attn.w_q) is nn.Linear


@pytest.mark.parametrize("bad", ["int4", "INT8", 8, True])
def test_translate_refuses_an_unknown_quantize(published, bad):
    model, tokenizer = published
    with pytest.raises(ValueError, match=r"quantize must be None \(float32\) or one of \('int8',\)"):
        translate(model, tokenizer, SENTENCES, quantize=bad)


# --- bfloat16 autocast ----------------------------------------------------------------------------


def test_cpu_has_native_bf16_answers_with_a_bool():
    assert isinstance(cpu_has_native_bf16(), bool)


def test_bf16_runs_where_the_cpu_has_it(published):
    if not cpu_has_native_bf16():
        pytest.skip("this CPU has no native bfloat16")
    model, tokenizer = published
    before = snapshot(model)
    lines = translate(model, tokenizer, SENTENCES, beam=2, amp_dtype=torch.bfloat16)
    assert all(lines)
    assert_unchanged(model, before)


def test_bf16_is_refused_where_the_cpu_lacks_it(published, monkeypatch):
    model, tokenizer = published
    monkeypatch.setattr(translation, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(ValueError, match="this CPU has no native bfloat16.*leave amp_dtype=None"):
        translate(model, tokenizer, SENTENCES, amp_dtype=torch.bfloat16)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"amp_dtype": torch.float16}, "amp_dtype=torch.float16 on the CPU"),
        ({"amp_dtype": torch.float32}, "amp_dtype must be torch.bfloat16, torch.float16 or None, got torch.float32"),
        ({"amp_dtype": "bf16"}, "amp_dtype must be torch.bfloat16, torch.float16 or None, got 'bf16'"),
        ({"amp_dtype": torch.bfloat16, "quantize": "int8"}, "do not combine"),
    ],
)
def test_translate_refuses_bad_amp(published, kwargs, message):
    model, tokenizer = published
    with pytest.raises(ValueError, match=message):
        translate(model, tokenizer, SENTENCES, **kwargs)


# --- The speed report, the setting in words ------------------------------------------------------


def test_translate_logs_its_speed_and_setting(published):
    model, tokenizer = published
    lines = []
    translate(model, tokenizer, SENTENCES, beam=2, log=lines.append)
    assert len(lines) == 1
    assert lines[0].startswith("translated 2 sentences in ")
    assert lines[0].endswith(" sentences/s (beam 2, α 0.6, float32)")


def test_describe_decoding():
    assert describe_decoding(4, 0.6) == "beam 4, α 0.6, float32"
    assert describe_decoding(1, 0.6, "int8") == "greedy, int8"
    assert describe_decoding(4, 1.0, amp_dtype=torch.bfloat16) == "beam 4, α 1, bfloat16 autocast"


def test_settings_with_an_option_are_kept_apart():
    from aiayn.runs.presets import TrainConfig

    cfg = TrainConfig()
    args = (cfg, "val", cfg.beam, cfg.length_penalty, cfg.test_subset, True)
    assert scoring.setting_name(*args) == "val"
    assert scoring.setting_name(*args, "int8") == "val.int8"
    assert scoring.setting_name(*args, None, torch.bfloat16) == "val.bf16"
    assert scoring.setting_name(*args, None, None) == "val.fp32"


def test_evaluate_refuses_bad_options_before_decoding(tmp_path):
    with pytest.raises(ValueError, match="quantize must be None"):
        evaluate(PUBLISHED, quantize="int4", out_dir=tmp_path / "scores")
    with pytest.raises(ValueError, match="amp_dtype must be 'config', None"):
        evaluate(PUBLISHED, amp_dtype=torch.float32, out_dir=tmp_path / "scores")


def test_evaluate_cli_takes_the_options():
    args = _parser().parse_args(["run", "--quantize", "int8", "--amp", "bf16"])
    assert (args.quantize, args.amp) == ("int8", "bf16")
    with pytest.raises(UsageError, match="--quantize: invalid choice: 'int4'"):
        _parser().parse_args(["run", "--quantize", "int4"])


# --- oneDNN products ----------------------------------------------------------------------------

needs_onednn = pytest.mark.skipif(
    not onednn_available(), reason="oneDNN products need an x86 CPU with AVX"
)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_equals_f_linear_up_to_rounding(bias):
    torch.manual_seed(0)
    layer = nn.Linear(16, 24, bias=bias)
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        expected = layer(x)
        with onednn_linear() as mode:
            got = layer(x)
            strided = layer(x.transpose(0, 1))  # a non-contiguous input
            assert mode.packed  # the product went through oneDNN
    assert not mode.packed  # and its reordered weight is dropped with the block
    assert got.shape == expected.shape == (3, 5, 24)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(strided, expected.transpose(0, 1))


@needs_onednn
def test_onednn_linear_leaves_gradients_and_other_dtypes_to_pytorch():
    torch.manual_seed(0)
    layer = nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with onednn_linear() as mode:
        y = layer(x)  # gradients on: PyTorch's product, exactly
        y.sum().backward()
        with torch.no_grad():
            double = layer.double()(x.double())
    assert mode.packed == {}
    assert torch.equal(
        y,
        torch.nn.functional.linear(
            x, layer.weight.float(), layer.bias.float()
        ),
    )
    assert double.dtype == torch.float64 and layer.weight.grad is not None


def test_onednn_self_check_answers_alike_inside_bfloat16_autocast():
    """Decoding with ``amp_dtype=torch.bfloat16`` may be the first to ask: the check stays float32."""
    outside = onednn_available()
    onednn_available.cache_clear()
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = onednn_available()
    finally:
        onednn_available.cache_clear()
    assert inside == outside == onednn_available()


@pytest.mark.parametrize("beam_size", [1, 4])
def test_decoding_same_tokens_with_and_without_onednn(beam_size):
    model = tiny_model()
    torch.manual_seed(1)
    sources = [
        torch.randint(3, 12, (n,)).tolist() for n in (3, 7, 5, 9, 1, 6)
    ]
    runs = {
        onednn: decode_sorted(
            model, sources, 1, 2, beam_size, batch_size=4, onednn=onednn
        )
        for onednn in (True, False)
    }
    assert runs[True] == runs[False]


def test_flops_are_counted_alike_with_and_without_onednn():
    model = tiny_model()
    src = torch.randint(
        3, 12, (5, 7), generator=torch.Generator().manual_seed(0)
    )
    flops = {}
    for onednn in (True, False):
        with FlopCounterMode(display=False) as counter:
            beam_search(model, src, None, 10, 1, 2, onednn=onednn)
        flops[onednn] = counter.get_total_flops()
    assert flops[True] == flops[False] > 0
