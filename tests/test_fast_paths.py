"""The fast path equals the explicit one: F.layer_norm, packed projections, prepared masks, set_fast."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from aiayn.attention import (
    MultiHeadAttention,
    PreparedMask,
    prepare_mask,
    set_fused,
)
from aiayn.engine.fast_attention import (
    FastMultiHeadAttention,
    packed_weights_kept,
)
from aiayn.engine.switch import set_fast
from aiayn.layers import LayerNorm
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import Transformer, TransformerConfig

PAD, BOS = 0, 1
PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100/multi30k-averaged-fp16.pt"

pytestmark = pytest.mark.usefixtures("one_thread")


def grads(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


def forward_and_grads(module: nn.Module, run) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Output of ``run(module)`` and the gradients of a fixed random projection of it."""
    module.zero_grad(set_to_none=True)
    out = run(module)
    g = torch.Generator().manual_seed(1)
    (out * torch.randn(out.shape, generator=g)).sum().backward()
    return out.detach(), grads(module)


def assert_close_float32(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal up to float32 rounding: a reordered sum differs by a few ulps of its largest terms."""
    scale = max(1.0, expected.abs().max().item())
    assert_close(actual, expected, rtol=1e-5, atol=2e-6 * scale, msg=lambda m: f"{what}: {m}")


def assert_same_run(explicit: nn.Module, fast: nn.Module, run) -> None:
    out_a, grads_a = forward_and_grads(explicit, run)
    out_b, grads_b = forward_and_grads(fast, run)
    assert_close_float32(out_b, out_a, "output")
    assert grads_a.keys() == grads_b.keys() and grads_a
    for name in grads_a:
        assert_close_float32(grads_b[name], grads_a[name], f"gradient of {name}")


# --- LayerNorm -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [4.0, 1e-3], ids=["wide", "narrow: eps matters"])
def test_fused_layer_norm_equals_formula_forward_and_backward(scale):
    """Biased variance and eps under the root on both sides; at scale 1e-3 a different eps would show."""
    torch.manual_seed(0)
    explicit = LayerNorm(16, eps=1e-6)
    with torch.no_grad():
        explicit.weight.normal_()
        explicit.bias.normal_()
    fast = copy.deepcopy(explicit)
    fast.fused = True
    x = ((torch.randn(3, 5, 16) + 0.5) * scale).requires_grad_()
    assert_same_run(explicit, fast, lambda m: m(x))
    x_grad = torch.autograd.grad((explicit(x) ** 2).sum(), x)[0]
    assert_close_float32(torch.autograd.grad((fast(x) ** 2).sum(), x)[0], x_grad, "gradient of x")


def test_fused_layer_norm_keeps_the_parameter_names():
    norm = LayerNorm(8)
    keys = list(norm.state_dict())
    norm.fused = True
    assert list(norm.state_dict()) == keys == ["weight", "bias"]


# --- Packed projections ----------------------------------------------------------------------------


def packed(attn: MultiHeadAttention) -> FastMultiHeadAttention:
    """The module as ``set_fast`` makes it, the fused kernel left as it was: packed q/k/v only."""
    attn.__class__ = FastMultiHeadAttention
    return attn


@pytest.mark.parametrize(
    "sizes",
    [dict(d_model=32, h=4), dict(d_model=32, h=4, d_k=4, d_v=12), dict(d_model=32, h=4, bias=False)],
    ids=["base", "d_k != d_v", "no bias"],
)
def test_packed_self_attention_equals_separate_projections(sizes):
    torch.manual_seed(0)
    explicit = MultiHeadAttention(dropout=0.0, **sizes)
    fast = packed(copy.deepcopy(explicit))
    x = torch.randn(2, 6, 32)
    mask = decoder_mask(torch.tensor([[1, 5, 6, 7, 0, 0], [1, 4, 4, 4, 4, 4]]), PAD)
    assert_same_run(explicit, fast, lambda m: m(x, x, x, mask))


def test_packed_cross_attention_equals_separate_projections():
    torch.manual_seed(0)
    explicit = MultiHeadAttention(32, 4, dropout=0.0)
    fast = packed(copy.deepcopy(explicit))
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    mask = padding_mask(torch.tensor([[3, 4, 5, 0, 0, 0, 0], [3, 4, 5, 6, 7, 8, 9]]), PAD)
    assert_same_run(explicit, fast, lambda m: m(x, memory, memory, mask))


def test_packed_projections_leave_parameters_and_state_dict_unchanged():
    attn = MultiHeadAttention(32, 4)
    before = {k: v.shape for k, v in attn.state_dict().items()}
    packed(attn)
    x = torch.randn(1, 3, 32)
    with torch.no_grad():
        attn(x, x, x)
    assert {k: v.shape for k, v in attn.state_dict().items()} == before
    assert set(before) == {f"w_{n}.{p}" for n in "qkvo" for p in ("weight", "bias")}


def test_packed_weights_are_stacked_once_inside_a_decoding_block_and_dropped_after_it():
    """``packed_weights_kept`` keeps one stacked copy for its block; after it, each forward stacks anew."""
    torch.manual_seed(0)
    reference = MultiHeadAttention(16, 2, dropout=0.0).eval()
    attn = packed(copy.deepcopy(reference))
    x = torch.randn(2, 4, 16)

    def check() -> None:
        with torch.no_grad():
            assert_close(attn(x, x, x), reference(x, x, x))

    with torch.no_grad(), packed_weights_kept(attn):
        check()
        kept = attn._packed_kept[("w_q", "w_k", "w_v")][0]
        check()  # a second call reuses the copy
        assert attn._packed_kept[("w_q", "w_k", "w_v")][0] is kept
    assert not hasattr(attn, "_packed_kept")
    optimizer = torch.optim.SGD(attn.parameters(), lr=0.5)
    (attn(x, x, x) ** 2).sum().backward()
    optimizer.step()
    reference.load_state_dict(attn.state_dict())
    check()
    state = {k: torch.randn_like(v) for k, v in attn.state_dict().items()}
    attn.load_state_dict(state)
    reference.load_state_dict(state)
    check()
    attn.double()
    reference.double()
    x = x.double()
    check()


# --- Prepared masks (the NaN-safety work done once) ------------------------------------------------


def test_prepare_mask_skips_the_repair_only_when_no_row_is_empty():
    full = padding_mask(torch.tensor([[3, 4, 0], [5, 0, 0]]), PAD)  # every row keeps a key
    prepared = prepare_mask(full)
    assert isinstance(prepared, PreparedMask) and prepared.empty is None
    assert prepared.allowed is full
    holes = padding_mask(torch.tensor([[3, 4, 0], [0, 0, 0]]), PAD)  # the second sentence is all padding
    prepared = prepare_mask(holes)
    assert prepared.empty is not None and prepared.empty.tolist() == [[[[False]]], [[[True]]]]
    assert prepared.allowed.any(dim=-1).all()  # safe for the fused kernel


@pytest.mark.parametrize("empty_row", [False, True], ids=["no empty row", "an all-padding sentence"])
def test_prepared_mask_on_fused_path_equals_explicit_attention(empty_row):
    torch.manual_seed(0)
    explicit = MultiHeadAttention(16, 2, dropout=0.0)
    fast = copy.deepcopy(explicit)
    fast.use_fused = True
    tokens = torch.tensor([[3, 4, 5, 0], [6, 0, 0, 0] if not empty_row else [0, 0, 0, 0]])
    mask = padding_mask(tokens, PAD)  # (2, 1, 1, 4)
    x = torch.randn(2, 4, 16)
    assert_same_run(explicit, fast, lambda m: m(x, x, x, mask if m is explicit else prepare_mask(mask)))
    with torch.no_grad():
        out = fast(x, x, x, prepare_mask(mask))
    assert torch.isfinite(out).all()
    if empty_row:  # the row that may attend to nothing gives w_o's bias, as on the explicit path
        assert_close(out[1], fast.w_o.bias.expand(4, 16))


def test_prepared_mask_on_explicit_path_keeps_the_attention_weights():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, dropout=0.0)
    mask = padding_mask(torch.tensor([[3, 4, 0]]), PAD)
    x = torch.randn(1, 3, 16)
    out = attn(x, x, x, mask)
    weights = attn.attn
    assert_close(attn(x, x, x, prepare_mask(mask)), out)
    assert_close(attn.attn, weights)


def test_prepared_mask_of_the_wrong_shape_is_rejected():
    attn = MultiHeadAttention(16, 2)
    attn.use_fused = True
    x = torch.randn(2, 3, 16)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 1, 5\) cannot broadcast to scores \(2, 2, 3, 3\)"):
        attn(x, x, x, prepare_mask(torch.ones(2, 1, 1, 5, dtype=torch.bool)))


# --- The whole model -------------------------------------------------------------------------------


def small_model(**overrides) -> Transformer:
    torch.manual_seed(0)
    settings = dict(d_model=32, d_ff=64, h=4, N=2, dropout=0.0) | overrides
    return Transformer(TransformerConfig(20, 20, **settings))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, 20, (4, 9), generator=g)
    tgt = torch.randint(3, 20, (4, 7), generator=g)
    tgt[:, 0] = BOS
    src[1, 6:], src[3, 3:] = PAD, PAD
    tgt[2, 5:], tgt[3, 2:] = PAD, PAD
    return src, tgt


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_set_fast_model_equals_explicit_model_forward_and_gradients(norm_first):
    explicit = small_model(norm_first=norm_first)
    fast = copy.deepcopy(explicit)
    set_fast(fast)
    src, tgt = batch()
    assert_same_run(explicit, fast, lambda m: m(src, tgt))


def test_set_fast_model_equals_explicit_on_an_all_padding_sentence():
    explicit = small_model()
    fast = copy.deepcopy(explicit)
    set_fast(fast)
    src, tgt = batch()
    src[2] = PAD  # no source token: its queries and the decoder's cross-attention attend to nothing
    assert_same_run(explicit, fast, lambda m: m(src, tgt))
    with torch.no_grad():
        assert torch.isfinite(fast(src, tgt)).all()


def test_set_fast_switches_everything_and_restores_as_a_context_manager():
    model = small_model()
    switches = lambda: sorted(  # noqa: E731
        (type(m).__name__, name, getattr(m, name))
        for m in model.modules()
        for name in ("use_fused", "packed", "fused", "prepare_masks")
        if hasattr(m, name)
    )
    before = switches()
    assert all(value is False for *_, value in before)
    with set_fast(model):
        assert all(value is True for *_, value in switches())
        with set_fused(model, False):  # the sibling switch still works inside
            assert not any(m.use_fused for m in model.modules() if isinstance(m, MultiHeadAttention))
        assert all(value is True for *_, value in switches())
    assert switches() == before


def test_set_fast_keeps_the_state_dict_keys_and_shapes():
    model = small_model()
    before = {k: v.shape for k, v in model.state_dict().items()}
    set_fast(model)
    src, tgt = batch()
    model(src, tgt).sum().backward()
    assert {k: v.shape for k, v in model.state_dict().items()} == before


@pytest.mark.skipif(not PUBLISHED.is_file(), reason=f"published weights not found at {PUBLISHED}")
def test_published_weights_load_strictly_into_the_fast_model_and_give_the_same_logits():
    state = torch.load(PUBLISHED, map_location="cpu", weights_only=True)["model"]
    config = TransformerConfig(
        8000, 8000, d_model=512, d_ff=2048, h=8, N=3, dropout=0.3, max_len=256, share_embeddings=True
    )
    model = Transformer(config).eval()
    set_fast(model)
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    src = torch.tensor([[120, 45, 900, 7, 2], [33, 2, 0, 0, 0]])
    tgt = torch.tensor([[1, 50, 60, 70], [1, 80, 0, 0]])
    with torch.no_grad():
        fast_logits = model(src, tgt)
        with set_fast(model, False):
            explicit_logits = model(src, tgt)
    assert_close(fast_logits, explicit_logits, atol=1e-4, rtol=1e-4)
