"""The choices of book/differences.ipynb, one test per row of its table: where aiayn follows the paper,
and where it differs from tensor2tensor, the authors' code."""

from __future__ import annotations

import inspect
import math
from dataclasses import fields, replace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from aiayn.attention import MultiHeadAttention
from aiayn.embeddings import (
    Embeddings,
    PositionalEncoding,
    sinusoidal_encoding,
)
from aiayn.layers import (
    LayerNorm,
    PositionwiseFeedForward,
    SublayerConnection,
)
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.runs.presets import PRESETS, TrainConfig
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training.loop import FitConfig, fit

pytestmark = pytest.mark.usefixtures("one_thread")

V, d_model = 30, 16
TINY = TransformerConfig(V, V, d_model=d_model, d_ff=32, h=2, N=2)
SRC = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]])  # (B, S), 0 = padding


def tiny_model(**changes) -> Transformer:
    torch.manual_seed(0)
    return Transformer(replace(TINY, **changes)).eval()


# 1. Where LayerNorm sits ------------------------------------------------------------------------------------


def test_layer_norm_comes_after_the_residual_sum_by_default():
    torch.manual_seed(0)
    x = torch.randn(2, 5, d_model)
    ffn = PositionwiseFeedForward(d_model, 32, dropout=0.0)
    post = SublayerConnection(d_model, dropout=0.0)
    pre = SublayerConnection(d_model, dropout=0.0, norm_first=True)
    assert_close(post(x, ffn), post.norm(x + ffn(x)))  # the paper
    assert_close(pre(x, ffn), x + ffn(pre.norm(x)))  # today's tensor2tensor
    assert not TINY.norm_first
    sublayers = [m for m in tiny_model().modules() if isinstance(m, SublayerConnection)]
    assert len(sublayers) == 2 * 2 + 3 * 2 and not any(m.norm_first for m in sublayers)


# 2. LayerNorm after the last layer --------------------------------------------------------------------------


def test_final_layer_norm_only_with_pre_norm():
    post, pre = tiny_model(), tiny_model(norm_first=True)
    for stack in (post.encoder, post.decoder):
        assert isinstance(stack.norm, nn.Identity)
    for stack in (pre.encoder, pre.decoder):
        assert isinstance(stack.norm, LayerNorm)
    with torch.no_grad():
        memory = post.encode(SRC)  # (B, S, d_model): normalised by the last sublayer
    assert_close(memory.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)
    assert_close(memory.var(-1, unbiased=False), torch.ones(2, 4), atol=1e-4, rtol=0)


# 3. LayerNorm formula ---------------------------------------------------------------------------------------


def test_layer_norm_has_eps_1e6_under_the_square_root_and_biased_variance():
    torch.manual_seed(0)
    norm = LayerNorm(d_model)
    assert norm.eps == 1e-6
    x = torch.randn(3, d_model) * 1e-3  # variance near eps, where the forms part ways
    assert_close(norm(x), nn.LayerNorm(d_model, eps=1e-6)(x))
    centred = x - x.mean(-1, keepdim=True)
    by_formula = centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + 1e-6)
    assert_close(norm(x), by_formula)
    std_plus_eps = centred / (x.std(-1, keepdim=True) + 1e-6)  # the Annotated Transformer's form
    assert (norm(x) - std_plus_eps).abs().max() > 0.5
    for m in tiny_model().modules():  # every LayerNorm of the model uses the same eps
        if isinstance(m, LayerNorm):
            assert m.eps == 1e-6


# 4. Positional encoding layout ------------------------------------------------------------------------------


def test_positional_encoding_interleaves_sines_and_cosines():
    d, L = 8, 20
    pe = sinusoidal_encoding(L, d)
    angle = torch.arange(L).double()[:, None] / 10000 ** (torch.arange(0, d, 2).double() / d)
    assert_close(pe[:, 0::2], angle.sin().float())
    assert_close(pe[:, 1::2], angle.cos().float())
    concatenated = torch.cat([angle.sin(), angle.cos()], 1).float()  # tensor2tensor's layout
    assert not torch.allclose(pe, concatenated)
    buffer = PositionalEncoding(d, dropout=0.0, max_len=L).pe  # what the model adds
    assert_close(buffer, pe)


# 5. Positional encoding frequencies -------------------------------------------------------------------------


def t2t_timing_signal(length: int, channels: int) -> torch.Tensor:
    """tensor2tensor's get_timing_signal_1d: timescales from 1 to exactly 10^4, [sin | cos]."""
    n = channels // 2
    inv_timescales = torch.exp(-math.log(1e4) / (n - 1) * torch.arange(n).double())
    scaled_time = torch.arange(length).double()[:, None] * inv_timescales
    return torch.cat([scaled_time.sin(), scaled_time.cos()], 1).float()


def test_positional_encoding_frequencies_are_the_papers():
    d, L = 8, 20
    pe = sinusoidal_encoding(L, d)
    position = torch.arange(L).double()
    for i in range(d // 2):  # pair i turns at 1 / 10000^(2i / d)
        assert_close(pe[:, 2 * i], (position / 10000 ** (2 * i / d)).sin().float())
    order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    # not tensor2tensor's table reordered: only the pair of frequency 1 is common
    theirs = t2t_timing_signal(L, d)
    same = [(i, j) for i in range(d) for j in range(d) if torch.allclose(theirs[:, i], pe[:, j])]
    assert same == [(0, 0), (4, 1)]
    assert not torch.allclose(theirs, pe[:, order])


# 6. Input of the first layer --------------------------------------------------------------------------------


def test_first_layer_gets_scaled_embeddings_plus_positions_only():
    model = tiny_model()
    assert [type(m) for m in model.src_embed] == [Embeddings, PositionalEncoding]
    with torch.no_grad():
        x = model.src_embed(SRC)  # (B, S, d_model)
    table = model.src_embed[0].weight
    assert_close(x, table[SRC] * math.sqrt(d_model) + sinusoidal_encoding(4, d_model))
    assert x[1, 3].abs().sum() > 0  # the padding position keeps its vector


# 7. Shared embedding matrix ---------------------------------------------------------------------------------


def test_output_tied_to_target_embedding_and_source_shared_on_request():
    assert TINY.tie_output and not TINY.share_embeddings
    model = tiny_model()
    assert model.generator.weight is model.tgt_embed[0].weight
    assert model.src_embed[0].weight is not model.tgt_embed[0].weight
    assert model.generator.bias is not None and model.generator.bias.shape == (V,)
    shared = tiny_model(share_embeddings=True)
    assert shared.src_embed[0].weight is shared.tgt_embed[0].weight is shared.generator.weight
    assert all(preset.model.share_embeddings for preset in PRESETS.values())


# 8. Initialisation ------------------------------------------------------------------------------------------


def test_every_matrix_is_xavier_uniform_embeddings_included():
    model = tiny_model()
    names = []
    for name, p in model.named_parameters():
        if p.dim() > 1:
            fan_out, fan_in = p.shape
            bound = math.sqrt(6 / (fan_in + fan_out))
            assert 0.9 * bound < p.abs().max() <= bound, name
            names.append(name)
    assert "src_embed.0.lut.weight" in names and "tgt_embed.0.lut.weight" in names


# 9. Dropout on the attention weights ------------------------------------------------------------------------


def test_attention_weights_are_dropped_out_at_p_drop():
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, 2, dropout=0.5).train()
    x = torch.randn(1, 6, d_model)
    mha(x, x, x)
    assert (mha.attn == 0).any()
    assert not torch.allclose(mha.attn.sum(-1), torch.ones(1, 2, 6))
    mha.eval()(x, x, x)
    assert_close(mha.attn.sum(-1), torch.ones(1, 2, 6))
    model = tiny_model(dropout=0.3)
    rates = {m.dropout.p for m in model.modules() if isinstance(m, MultiHeadAttention)}
    assert rates == {0.3}


# 10. Dropout after the ReLU ---------------------------------------------------------------------------------


def test_feed_forward_drops_out_its_hidden_layer_at_p_drop():
    ffn = PositionwiseFeedForward(d_model, 32, dropout=0.5).train()
    x = torch.randn(2, 5, d_model, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    out = ffn(x)
    torch.manual_seed(1)
    assert_close(out, ffn.w_2(F.dropout(ffn.w_1(x).relu(), p=0.5)))
    model = tiny_model(dropout=0.3)
    rates = {m.dropout.p for m in model.modules() if isinstance(m, PositionwiseFeedForward)}
    assert rates == {0.3}


# 11. Learning-rate schedule ---------------------------------------------------------------------------------


def t2t_rate(step: int, d: int, warmup: int, constant: float) -> float:
    """tensor2tensor's "constant*linear_warmup*rsqrt_decay*rsqrt_hidden_size"."""
    return constant * min(1.0, step / warmup) * max(step, warmup) ** -0.5 * d**-0.5


def test_schedule_is_equation_3_with_warmup_4000_and_factor_1():
    signature = inspect.signature(noam_rate).parameters
    assert signature["warmup"].default == 4000 and signature["factor"].default == 1.0
    for step in (1, 100, 3999, 4000, 4001, 8000, 100_000):
        paper = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert math.isclose(noam_rate(step, 512), paper)
        assert math.isclose(noam_rate(step, 512), t2t_rate(step, 512, 4000, 1.0))
        # today's transformer_base is the same function with other arguments
        assert math.isclose(noam_rate(step, 512, 8000, 2.0), t2t_rate(step, 512, 8000, 2.0))
    # the scheduler counts from 1, as the first release's (step + 1): the first update gets noam_rate(1)
    optimizer = make_optimizer(nn.Linear(2, 2))
    scheduler = noam_scheduler(optimizer, 512)
    for first_release_step in range(3):
        s = first_release_step + 1
        first_release = 0.1 * 5000.0 * 512**-0.5 * min(s * 4000**-1.5, s**-0.5) / 500.0
        assert math.isclose(optimizer.param_groups[0]["lr"], first_release)
        optimizer.step()
        scheduler.step()


# 12. Adam ---------------------------------------------------------------------------------------------------


def test_adam_has_the_papers_constants():
    group = make_optimizer(nn.Linear(2, 2)).param_groups[0]
    assert group["betas"] == (0.9, 0.98)  # tensor2tensor's transformer_base today: 0.997
    assert group["eps"] == 1e-9
    assert group["lr"] == 1.0  # the schedule sets the rate


# 13. Label smoothing ----------------------------------------------------------------------------------------


def test_label_smoothing_is_f_cross_entropys():
    torch.manual_seed(0)
    C, eps = 6, 0.1
    logits = torch.randn(4, C)
    target = torch.tensor([2, 5, 1, 0])  # the last one is padding
    ours = LabelSmoothingLoss(eps, ignore_index=0)(logits, target)
    assert_close(ours, F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=0))
    # the target it uses, read from the gradient p - y' at uniform p
    z = torch.zeros(1, C, requires_grad=True)
    LabelSmoothingLoss(eps)(z, torch.tensor([2])).backward()
    target_used = 1 / C - z.grad[0]
    expected = torch.full((C,), eps / C)
    expected[2] += 1 - eps
    assert_close(target_used, expected)  # not tensor2tensor's 1 - eps and eps / (C - 1)


# 14. Gradient clipping --------------------------------------------------------------------------------------


def test_gradient_norm_is_clipped_to_1_by_default():
    assert FitConfig().clip_norm == 1.0  # what fit trains with when given no config
    assert inspect.signature(fit).parameters["config"].default is None
    assert {f.name: f.default for f in fields(TrainConfig)}["clip_norm"] == 1.0
    assert all(preset.clip_norm == 1.0 for preset in PRESETS.values())
