"""Tests for aiayn.attention: parity with PyTorch, masks, the fused path and the no-NaN promise."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

from aiayn.attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
    set_fused,
)
from aiayn.masks import padding_mask, subsequent_mask

B, h, L_q, L_k, d_k, d_model = 2, 4, 5, 7, 8, 32


def qkv(seed: int = 0, requires_grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, h, L_q, d_k), (B, h, L_k, d_k), (B, h, L_k, d_k)]
    return [torch.randn(*s, generator=g).requires_grad_(requires_grad) for s in shapes]


def copy_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Load nn.MultiheadAttention's weights (in_proj split into q, k, v) into ours."""
    with torch.no_grad():
        theirs.in_proj_bias.normal_()  # nn initialises biases to zero; make them count
        theirs.out_proj.bias.normal_()
        for lin, w, b in zip(
            (ours.w_q, ours.w_k, ours.w_v),
            theirs.in_proj_weight.chunk(3),
            theirs.in_proj_bias.chunk(3),
            strict=True,
        ):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        ours.w_o.weight.copy_(theirs.out_proj.weight)
        ours.w_o.bias.copy_(theirs.out_proj.bias)


# --- scaled_dot_product_attention ---------------------------------------------------------------


@pytest.mark.parametrize(
    "mask_kind", ["none", "full", "padding (B, 1, 1, L_k)", "causal (L_q, L_k)", "per-batch (B, 1, L_q, L_k)"]
)
def test_sdpa_matches_torch(mask_kind):
    q, k, v = qkv()
    g = torch.Generator().manual_seed(1)
    mask = {
        "none": None,
        "full": torch.rand(B, h, L_q, L_k, generator=g) > 0.5,
        "padding (B, 1, 1, L_k)": padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), pad_id=0),
        "causal (L_q, L_k)": torch.ones(L_q, L_k, dtype=torch.bool).tril(),
        "per-batch (B, 1, L_q, L_k)": torch.rand(B, 1, L_q, L_k, generator=g) > 0.3,
    }[mask_kind]
    if mask is not None:
        mask[..., 0] = True  # F.sdpa gives NaN for rows with nothing to attend to; that case is tested below
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert weights.shape == (B, h, L_q, L_k)
    assert_close(weights.sum(-1), torch.ones(B, h, L_q))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_sdpa_three_dim_inputs_without_heads():
    q, k, v = (x[:, 0] for x in qkv())  # (B, L, d_k)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (B, L_q, d_k) and weights.shape == (B, L_q, L_k)
    assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_sdpa_fully_masked_row_is_zero_and_finite():
    q, k, v = qkv(requires_grad=True)
    mask = torch.ones(B, 1, L_q, L_k, dtype=torch.bool)
    mask[0, :, 2] = False  # query 2 of sequence 0 may attend to nothing
    mask[1] = False  # sequence 1: nothing at all
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert (out[0, :, 2] == 0).all() and (out[1] == 0).all() and (weights[1] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_sdpa_temperature_flattens_and_sharpens():
    q, k, v = qkv()
    _, w1 = scaled_dot_product_attention(q, k, v)
    _, hot = scaled_dot_product_attention(q, k, v, temperature=10.0)
    _, cold = scaled_dot_product_attention(q, k, v, temperature=0.1)
    assert hot.max() < w1.max() < cold.max()
    _, w_scaled = scaled_dot_product_attention(q / 2, k, v)
    assert_close(w_scaled, scaled_dot_product_attention(q, k, v, temperature=2.0)[1])


def test_sdpa_dropout_is_applied_to_weights():
    torch.manual_seed(0)
    q, k, v = qkv()
    _, weights = scaled_dot_product_attention(q, k, v, dropout=nn.Dropout(0.5).train())
    assert (weights == 0).any()


def test_sdpa_mask_that_cannot_broadcast():
    q, k, v = torch.randn(2, 8, 5, d_k), torch.randn(2, 8, 7, d_k), torch.randn(2, 8, 7, d_k)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 7\) cannot broadcast to scores \(2, 8, 5, 7\)"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 1, 7, dtype=torch.bool))


def test_sdpa_non_bool_mask():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"expected dtype torch.bool .* got torch.float32"):
        scaled_dot_product_attention(q, k, v, torch.ones(L_q, L_k))


def test_sdpa_mismatched_widths_and_bad_temperature():
    q, k, v = qkv()
    with pytest.raises(ValueError, match=r"query and key must share d_k"):
        scaled_dot_product_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match=r"key and value must have the same length"):
        scaled_dot_product_attention(q, k, v[:, :, :3])
    with pytest.raises(ValueError, match=r"temperature must be positive, got 0"):
        scaled_dot_product_attention(q, k, v, temperature=0)


# --- MultiHeadAttention -------------------------------------------------------------------------


def make_pair(seed: int = 0, **kw) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, h, dropout=0.0, batch_first=True).eval()
    ours = MultiHeadAttention(d_model, h, dropout=0.0, **kw).eval()
    copy_from_torch(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_mha_matches_nn_multihead_attention(cross):
    ours, theirs = make_pair()
    x = torch.randn(B, L_q, d_model)
    memory = torch.randn(B, L_k, d_model) if cross else x
    tokens = torch.tensor([[1] * memory.size(1), [1] * 3 + [0] * (memory.size(1) - 3)])
    mask = padding_mask(tokens, pad_id=0)  # (B, 1, 1, L_k), True = attend
    out = ours(x, memory, memory, mask)
    ref, ref_avg = theirs(x, memory, memory, key_padding_mask=~mask[:, 0, 0])  # nn: True = ignore
    _, ref_heads = theirs(x, memory, memory, key_padding_mask=~mask[:, 0, 0], average_attn_weights=False)
    assert out.shape == (B, L_q, d_model)
    assert_close(out, ref)
    assert ours.attn.shape == (B, h, L_q, memory.size(1)) and not ours.attn.requires_grad
    assert_close(ours.attn, ref_heads)
    assert_close(ours.attn.mean(1), ref_avg)


def test_mha_matches_nn_with_causal_mask():
    ours, theirs = make_pair()
    x = torch.randn(B, L_q, d_model)
    causal = subsequent_mask(L_q)  # (L_q, L_q)
    assert_close(ours(x, x, x, causal), theirs(x, x, x, attn_mask=~causal)[0])


def test_mha_accepts_2d_3d_and_4d_masks():
    ours, _ = make_pair()
    x = torch.randn(B, L_q, d_model)
    causal = subsequent_mask(L_q)
    out = ours(x, x, x, causal)
    assert_close(ours(x, x, x, causal.expand(B, L_q, L_q)), out)
    assert_close(ours(x, x, x, causal[None, None]), out)
    with pytest.raises(ValueError, match=r"mask must have 2, 3 or 4 dimensions, got shape \(5,\)"):
        ours(x, x, x, causal[0])


@pytest.mark.parametrize("d_k_v", [None, (4, 12)], ids=["d_k=d_model/h", "d_k=4,d_v=12"])
def test_fused_path_matches_explicit_path(d_k_v):
    kw = {} if d_k_v is None else {"d_k": d_k_v[0], "d_v": d_k_v[1]}
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, h, dropout=0.1, temperature=1.5, **kw).eval()
    x = torch.randn(B, L_q, d_model, requires_grad=True)
    memory = torch.randn(B, L_k, d_model)
    mask = torch.rand(B, 1, L_q, L_k) > 0.4
    mask[1, :, 0] = False  # a fully masked row: both paths must give zeros there
    explicit = mha(x, memory, memory, mask)
    (grad_explicit,) = torch.autograd.grad(explicit.square().sum(), x)
    with set_fused(mha, True):
        assert mha.use_fused
        fused = mha(x, memory, memory, mask)
        assert mha.attn is None
    assert not mha.use_fused
    (grad_fused,) = torch.autograd.grad(fused.square().sum(), x)
    assert_close(fused, explicit)
    assert_close(grad_fused, grad_explicit)


def test_set_fused_flips_every_attention_in_a_model():
    model = nn.Sequential(MultiHeadAttention(d_model, h), nn.Linear(2, 2), MultiHeadAttention(d_model, h, fused=True))
    set_fused(model, True)
    assert all(m.use_fused for m in (model[0], model[2]))
    with set_fused(model, False):
        assert not any(m.use_fused for m in (model[0], model[2]))
    assert all(m.use_fused for m in (model[0], model[2]))


@pytest.mark.parametrize("fused", [False, True], ids=["explicit", "fused"])
def test_mha_no_nan_with_heavy_padding(fused):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model, h, dropout=0.1, fused=fused).train()
    tokens = torch.tensor([[5, 6, 7, 0, 0, 0, 0], [0] * 7])  # the second sequence is all padding
    mask = padding_mask(tokens, pad_id=0)  # (B, 1, 1, L_k)
    x = torch.randn(B, L_k, d_model, requires_grad=True)
    out = mha(x, x, x, mask)
    assert torch.isfinite(out).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_mha_temperature_is_a_plain_attribute():
    ours, _ = make_pair()
    x = torch.randn(B, L_q, d_model)
    ours(x, x, x)
    sharp = ours.attn.amax(-1)
    ours.temperature = 5.0
    ours(x, x, x)
    assert (ours.attn.amax(-1) <= sharp + 1e-6).all()


def test_mha_rejects_bad_inputs():
    with pytest.raises(ValueError, match=r"d_model must be divisible by h .* got d_model=30, h=4"):
        MultiHeadAttention(30, 4)
    mha = MultiHeadAttention(d_model, h)
    x = torch.randn(B, L_q, d_model)
    with pytest.raises(ValueError, match=r"key: expected shape \(B, L, 32\), got \(2, 7, 16\)"):
        mha(x, torch.randn(B, 7, 16), torch.randn(B, 7, 16))
    with pytest.raises(ValueError, match=r"must share the batch size, got 2, 3, 3"):
        mha(x, torch.randn(3, 7, d_model), torch.randn(3, 7, d_model))
    with pytest.raises(TypeError, match=r"expected dtype torch.bool .* got torch.int64"):
        mha(x, x, x, torch.ones(L_q, L_q, dtype=torch.long))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 4\) cannot broadcast to scores \(2, 4, 5, 5\)"):
        mha(x, x, x, torch.ones(B, 1, 1, 4, dtype=torch.bool))
