"""Tests for aiayn.model: configuration, weight sharing, causality, no NaN, parameter counts, bad inputs."""

import dataclasses
import math

import pytest
import torch
from torch.testing import assert_close

from aiayn.attention import set_fused
from aiayn.layers import LayerNorm
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import (
    TABLE3_PAPER_PARAMS,
    TABLE3_TRAINING_ONLY,
    TABLE3_VARIANTS,
    Transformer,
    TransformerConfig,
    count_parameters,
)

V_SRC, V_TGT = 23, 19


def small(**overrides) -> TransformerConfig:
    settings = {"d_model": 32, "d_ff": 64, "h": 4, "N": 2, "dropout": 0.0, "max_len": 64} | overrides
    return TransformerConfig(V_SRC, V_TGT, **settings)


def model(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(small(**overrides)).eval()


def batch(seed: int = 0, B: int = 3, S: int = 7, T: int = 6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, V_SRC, (B, S), generator=g)
    tgt = torch.randint(1, V_TGT, (B, T), generator=g)
    src[1, 4:] = 0  # some padding
    tgt[1, 3:] = 0
    return src, tgt


# --- configuration ------------------------------------------------------------------------------


def test_config_defaults_are_the_base_model():
    c = TransformerConfig.base(100)
    assert (c.d_model, c.d_ff, c.h, c.N, c.dropout) == (512, 2048, 8, 6, 0.1)
    assert c.tgt_vocab_size == 100 and not c.norm_first and c.tie_output and not c.share_embeddings
    big = TransformerConfig.big(100, 90, N=2)
    assert (big.d_model, big.d_ff, big.h, big.dropout, big.N, big.tgt_vocab_size) == (1024, 4096, 16, 0.3, 2, 90)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.d_model = 256


def test_table3_rows():
    assert TransformerConfig.table3("A1", 100).h == 1
    b1 = TransformerConfig.table3("B1", 100)
    assert (b1.d_k, b1.d_v, b1.h, b1.d_model) == (16, 64, 8, 512)
    assert TransformerConfig.table3("C4", 100).d_model == 256
    assert TransformerConfig.table3("E", 100).learned_positions
    assert TransformerConfig.table3("C1", 100, dropout=0.0).dropout == 0.0  # overrides win
    with pytest.raises(ValueError, match=r"row D3 changes only \{'label_smoothing': 0.0\}, a training setting"):
        TransformerConfig.table3("D3", 100)
    with pytest.raises(ValueError, match=r"unknown Table 3 row 'Z9'"):
        TransformerConfig.table3("Z9", 100)
    assert set(TABLE3_TRAINING_ONLY) == {"D3", "D4"}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"d_model": 30, "h": 4}, r"d_model must be divisible by h .* got d_model=30, h=4"),
        ({"N": 0}, r"N must be a positive integer, got 0"),
        ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
        ({"share_embeddings": True}, r"share_embeddings=True needs one vocabulary, got src_vocab_size=23"),
        ({"pad_id": 19}, r"pad_id must be in \[0, 19\), got 19"),
        ({"d_k": 0, "d_v": 8}, r"d_k must be a positive integer, got 0"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        small(**kwargs)


# --- structure ----------------------------------------------------------------------------------


def test_shapes():
    m = model()
    src, tgt = batch()
    memory = m.encode(src, padding_mask(src, 0))
    assert memory.shape == (3, 7, 32)
    assert m.decode(memory, padding_mask(src, 0), tgt, decoder_mask(tgt, 0)).shape == (3, 6, 32)
    logits = m(src, tgt, padding_mask(src, 0), decoder_mask(tgt, 0))
    assert logits.shape == (3, 6, V_TGT)
    assert_close(m(src, tgt), logits)  # masks default to the ones built from pad_id


def test_tied_and_shared_weights():
    m = model()
    assert m.generator.weight is m.tgt_embed[0].weight
    assert m.src_embed[0] is not m.tgt_embed[0]
    shared = Transformer(TransformerConfig(V_SRC, V_SRC, d_model=32, d_ff=64, h=4, N=1, share_embeddings=True))
    assert shared.src_embed[0] is shared.tgt_embed[0] and shared.generator.weight is shared.src_embed[0].weight
    untied = model(tie_output=False)
    assert untied.generator.weight is not untied.tgt_embed[0].weight
    # count_parameters counts a tied matrix once: untying adds exactly one V_TGT x d_model matrix
    assert count_parameters(untied) - count_parameters(m) == V_TGT * 32
    unique = {id(p): p.numel() for module in m.modules() for p in module.parameters(recurse=False)}
    assert count_parameters(m) == sum(unique.values())


def test_xavier_uniform_init():
    m = model()
    for name, p in m.named_parameters():
        if p.dim() > 1:
            bound = math.sqrt(6.0 / (p.size(0) + p.size(1)))
            assert p.abs().max() <= bound, name
            assert p.std() > bound / 3, name  # uniform(-a, a) has std a / sqrt(3)


def test_variants_build_and_run():
    src, tgt = batch()
    for overrides in ({"norm_first": True}, {"learned_positions": True}, {"d_k": 4, "d_v": 12}, {"h": 1}):
        m = model(**overrides)
        assert torch.isfinite(m(src, tgt)).all(), overrides
    assert isinstance(model(norm_first=True).encoder.norm, LayerNorm)


# --- behaviour ----------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoding_one_step_at_a_time_equals_teacher_forcing(norm_first):
    m = model(norm_first=norm_first)
    src, tgt = batch()
    tgt[1] = tgt[0]  # no padding in the target, so every prefix is a real prefix
    src_mask = padding_mask(src, 0)
    memory = m.encode(src, src_mask)
    parallel = m.generator(m.decode(memory, src_mask, tgt, decoder_mask(tgt, 0)))  # (B, T, V)
    for t in range(1, tgt.size(1) + 1):
        prefix = tgt[:, :t]
        step = m.generator(m.decode(memory, src_mask, prefix, decoder_mask(prefix, 0)))  # (B, t, V)
        assert_close(step[:, -1], parallel[:, t - 1])


def test_changing_a_later_target_token_leaves_earlier_logits_alone():
    m = model()
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 4] = (changed[:, 4] % (V_TGT - 1)) + 1
    a, b = m(src, tgt), m(src, changed)
    assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[0, 4:], b[0, 4:])


@pytest.mark.parametrize("fused", [False, True], ids=["explicit", "fused"])
def test_no_nan_with_sequences_that_are_all_padding(fused):
    m = model(dropout=0.1, fused_attention=fused).train()
    src, tgt = batch()
    src[2] = 0  # a source made only of padding
    tgt[2] = 0  # and a target made only of padding
    logits = m(src, tgt)
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_fused_model_equals_explicit_model():
    m = model()
    src, tgt = batch()
    src[2, 1:] = 0
    explicit = m(src, tgt)
    with set_fused(m, True):
        fused = m(src, tgt)
    assert_close(fused, explicit)
    assert_close(model(fused_attention=True)(src, tgt), explicit)


def test_attention_maps():
    m = model()
    src, tgt = batch(B=2, S=7, T=6)
    m(src, tgt)
    maps = m.attention_maps()
    assert [len(maps[k]) for k in ("encoder", "decoder_self", "cross")] == [2, 2, 2]
    assert maps["encoder"][0].shape == (2, 4, 7, 7)
    assert maps["decoder_self"][1].shape == (2, 4, 6, 6)
    assert maps["cross"][0].shape == (2, 4, 6, 7)
    assert (maps["decoder_self"][0][0, :, 0, 1:] == 0).all()  # causal: position 0 sees only itself
    with set_fused(m, True):
        m(src, tgt)
        with pytest.raises(RuntimeError, match=r"no attention weights stored"):
            m.attention_maps()


# --- faithfulness: parameter counts of Table 3 --------------------------------------------------


def meta_count(config: TransformerConfig) -> int:
    with torch.device("meta"):
        return count_parameters(Transformer(config))


@pytest.mark.parametrize("preset, paper", [("base", 65e6), ("big", 213e6)])
def test_parameter_counts_match_the_paper(preset, paper):
    config = getattr(TransformerConfig, preset)(37000, share_embeddings=True, tie_output=True)
    assert abs(meta_count(config) - paper) / paper < 0.03


def test_table3_rows_change_the_count_as_the_paper_says():
    """The paper's counts sit a little above ours (vocabulary size); the change from base is what must match."""
    base = meta_count(TransformerConfig.base(37000, share_embeddings=True))
    for row in ("B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7"):
        ours = meta_count(TransformerConfig.table3(row, 37000, share_embeddings=True)) - base
        paper = (TABLE3_PAPER_PARAMS[row] - TABLE3_PAPER_PARAMS["base"]) * 1e6
        assert abs(ours - paper) < 2.5e6, (row, ours, paper)
    for row in TABLE3_VARIANTS:
        assert meta_count(TransformerConfig.table3(row, 100)) > 0


# --- bad inputs ---------------------------------------------------------------------------------


def test_mismatched_batch_sizes():
    m = model()
    src, tgt = batch()
    memory = m.encode(src)
    with pytest.raises(ValueError, match=r"memory has batch size 3 but tgt has batch size 2"):
        m.decode(memory, None, tgt[:2])


def test_float_token_ids():
    m = model()
    src, tgt = batch()
    with pytest.raises(TypeError, match=r"src: expected an integer tensor of token ids .* got dtype torch.float32"):
        m.encode(src.float())
    with pytest.raises(TypeError, match=r"tgt: expected an integer tensor of token ids"):
        m(src, tgt.float())
    with pytest.raises(TypeError, match=r"memory: expected a floating-point tensor .* got torch.int64"):
        m.decode(src[..., None].expand(-1, -1, 32), None, tgt)


def test_masks_of_the_wrong_shape_or_dtype():
    m = model()
    src, tgt = batch()
    with pytest.raises(
        ValueError, match=r"src_mask: expected a 4-D mask broadcastable to .* = \(3, 1, 7, 7\), got \(3, 7\)"
    ):
        m.encode(src, src != 0)
    with pytest.raises(ValueError, match=r"tgt_mask: expected .* = \(3, 1, 6, 6\), got \(3, 1, 6, 5\)"):
        m(src, tgt, tgt_mask=decoder_mask(tgt, 0)[..., :5])
    with pytest.raises(TypeError, match=r"src_mask: expected a boolean mask \(True = may attend\), got torch.float32"):
        m(src, tgt, src_mask=padding_mask(src, 0).float())


def test_token_ids_outside_the_vocabulary():
    m = model()
    src, tgt = batch()
    src[0, 0] = V_SRC
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 23\), got values from 0 to 23"):
        m(src, tgt)


def test_memory_of_the_wrong_width_and_no_maps_before_forward():
    m = model()
    _, tgt = batch()
    with pytest.raises(ValueError, match=r"memory: expected shape \(B, S, 32\), got \(3, 7, 16\)"):
        m.decode(torch.randn(3, 7, 16), None, tgt)
    with pytest.raises(RuntimeError, match=r"no attention weights stored"):
        m.attention_maps()
