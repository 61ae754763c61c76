"""Tests for aiayn.compare: weights copied into PyTorch's modules, mask translation, gradient norms per layer."""

import warnings

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from aiayn.compare import (
    layer_gradient_norms,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
    to_torch_transformer,
    torch_masks,
)
from aiayn.layers import DecoderLayer, Encoder, EncoderLayer
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import Transformer, TransformerConfig

B, S, T, d_model, h, d_ff = 2, 7, 5, 32, 4, 64
SRC = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [3, 4, 5, 0, 0, 0, 0]])
TGT = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 0, 0, 0]])


def randomise(module: nn.Module) -> nn.Module:
    """Random values everywhere, LayerNorm weights and biases included, so that every copy is exercised."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_copy(norm_first):
    ours = randomise(EncoderLayer(d_model, h, d_ff, dropout=0.0, norm_first=norm_first))
    theirs = to_torch_encoder_layer(ours)
    assert theirs.norm_first is norm_first and not theirs.training
    x = torch.randn(B, S, d_model)
    src_mask = padding_mask(SRC, 0)
    assert_close(theirs(x, src_key_padding_mask=SRC == 0), ours(x, src_mask))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_copy(norm_first):
    ours = randomise(DecoderLayer(d_model, h, d_ff, dropout=0.0, norm_first=norm_first))
    theirs = to_torch_decoder_layer(ours)
    x, memory = torch.randn(B, T, d_model), torch.randn(B, S, d_model)
    masks = torch_masks(SRC, TGT, 0)
    expected = ours(x, memory, padding_mask(SRC, 0), decoder_mask(TGT, 0))
    got = theirs(
        x,
        memory,
        tgt_mask=masks["tgt_mask"],
        tgt_key_padding_mask=masks["tgt_key_padding_mask"],
        memory_key_padding_mask=masks["memory_key_padding_mask"],
    )
    assert_close(got, expected)


def small_model(norm_first: bool) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(11, 13, d_model=d_model, d_ff=d_ff, h=h, N=2, dropout=0.0, norm_first=norm_first)
    return randomise(Transformer(config))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_transformer_copy(norm_first):
    model = small_model(norm_first)
    theirs = to_torch_transformer(model)
    assert (theirs.encoder.norm is None) is (not norm_first)
    src_mask = padding_mask(SRC, 0)
    states = model.decode(model.encode(SRC, src_mask), src_mask, TGT, decoder_mask(TGT, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no nested-tensor prototype warning from PyTorch's fast path
        got = theirs(model.src_embed(SRC), model.tgt_embed(TGT), **torch_masks(SRC, TGT, 0))
    assert_close(got, states)
    assert_close(model.generator(got), model(SRC, TGT))


def test_kept_final_norms_change_the_output_and_the_count():
    model = small_model(norm_first=False)
    theirs = to_torch_transformer(model, keep_final_norms=True)
    with torch.no_grad():
        theirs.decoder.norm.weight.fill_(2.0)  # any learned scale other than 1 shows the extra norm
    got = theirs(model.src_embed(SRC), model.tgt_embed(TGT), **torch_masks(SRC, TGT, 0))
    src_mask = padding_mask(SRC, 0)
    states = model.decode(model.encode(SRC, src_mask), src_mask, TGT, decoder_mask(TGT, 0))
    assert not torch.allclose(got, states)
    stacks = sum(p.numel() for p in (*model.encoder.parameters(), *model.decoder.parameters()))
    assert sum(p.numel() for p in theirs.parameters()) - stacks == 4 * d_model


def test_torch_masks_are_the_complement_of_ours():
    masks = torch_masks(SRC, TGT, 0)
    assert_close(masks["tgt_mask"], ~torch.ones(T, T, dtype=torch.bool).tril())
    assert_close(masks["src_key_padding_mask"], ~padding_mask(SRC, 0)[:, 0, 0])
    assert_close(masks["tgt_key_padding_mask"], TGT == 0)
    assert_close(masks["memory_key_padding_mask"], SRC == 0)
    combined = ~(masks["tgt_mask"][None] | masks["tgt_key_padding_mask"][:, None, :])  # (B, T, T), True = attend
    assert_close(combined, decoder_mask(TGT, 0)[:, 0])


def test_layer_gradient_norms():
    torch.manual_seed(0)
    stack = Encoder(16, 2, 32, dropout=0.0, N=3)
    x = torch.randn(2, 5, 16)
    norms = layer_gradient_norms(stack, stack.layers, x, seed=3)
    assert len(norms) == 3 and all(n > 0 for n in norms)
    assert norms == layer_gradient_norms(stack, stack.layers, x, seed=3)  # reproducible
    assert norms != layer_gradient_norms(stack, stack.layers, x, seed=4)
    assert all(p.grad is None for p in stack.parameters())  # cleared afterwards
    # by hand for the top layer
    out = stack(x)
    r = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (out * r).sum().backward()
    top = torch.cat([p.grad.flatten() for p in stack.layers[-1].parameters()]).norm()
    assert_close(torch.tensor(norms[-1]), top)


def test_bad_inputs():
    with pytest.raises(TypeError, match=r"expected an aiayn EncoderLayer, got Linear"):
        to_torch_encoder_layer(nn.Linear(2, 2))
    with pytest.raises(TypeError, match=r"expected an aiayn DecoderLayer, got EncoderLayer"):
        to_torch_decoder_layer(EncoderLayer(d_model, h, d_ff))
    with pytest.raises(ValueError, match=r"needs d_k = d_v = d_model / h .* d_k=4, d_v=8"):
        to_torch_encoder_layer(EncoderLayer(d_model, h, d_ff, d_k=4))
    with pytest.raises(ValueError, match=r"src: expected shape \(B, L\) of token ids, got \(7,\)"):
        torch_masks(SRC[0], TGT, 0)
    unused = nn.Linear(3, 3)
    with pytest.raises(ValueError, match=r"Linear received no gradient"):
        layer_gradient_norms(nn.Linear(3, 3), [unused], torch.randn(2, 3))
