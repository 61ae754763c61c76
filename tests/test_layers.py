"""Tests for aiayn.layers: parity with nn.LayerNorm, nn.TransformerEncoderLayer/DecoderLayer and nn.Transformer."""

import warnings

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from aiayn.attention import MultiHeadAttention
from aiayn.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LayerNorm,
    PositionwiseFeedForward,
    SublayerConnection,
)
from aiayn.masks import decoder_mask, padding_mask

B, S, T, d_model, h, d_ff, N = 2, 7, 5, 32, 4, 64, 2
EPS = 1e-6

# Source and target ids with padding (0) at the end of the second sequence.
SRC = torch.tensor([[3, 4, 5, 6, 7, 8, 9], [3, 4, 5, 0, 0, 0, 0]])
TGT = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 0, 0, 0]])


def copy_attention(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        for lin, w, b in zip(
            (ours.w_q, ours.w_k, ours.w_v), theirs.in_proj_weight.chunk(3), theirs.in_proj_bias.chunk(3), strict=True
        ):
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        ours.w_o.weight.copy_(theirs.out_proj.weight)
        ours.w_o.bias.copy_(theirs.out_proj.bias)


def copy_norm(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    with torch.no_grad():
        ours.weight.copy_(theirs.weight)
        ours.bias.copy_(theirs.bias)


def copy_feed_forward(ours: PositionwiseFeedForward, theirs: nn.Module) -> None:
    with torch.no_grad():
        for mine, ref in ((ours.w_1, theirs.linear1), (ours.w_2, theirs.linear2)):
            mine.weight.copy_(ref.weight)
            mine.bias.copy_(ref.bias)


def randomise(module: nn.Module) -> nn.Module:
    """Give every parameter of a reference module random values, so biases and norms are tested too."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    copy_norm(ours.sublayers[0].norm, theirs.norm1)
    copy_norm(ours.sublayers[1].norm, theirs.norm2)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_attention(ours.self_attn, theirs.self_attn)
    copy_attention(ours.cross_attn, theirs.multihead_attn)
    copy_feed_forward(ours.feed_forward, theirs)
    for sublayer, norm in zip(ours.sublayers, (theirs.norm1, theirs.norm2, theirs.norm3), strict=True):
        copy_norm(sublayer.norm, norm)


def torch_layer(kind, norm_first: bool):
    return randomise(
        kind(
            d_model,
            h,
            d_ff,
            dropout=0.0,
            activation="relu",
            layer_norm_eps=EPS,
            batch_first=True,
            norm_first=norm_first,
        )
    ).eval()


def test_layer_norm_matches_nn_layer_norm():
    torch.manual_seed(0)
    theirs = randomise(nn.LayerNorm(d_model, eps=EPS))
    ours = LayerNorm(d_model, eps=EPS)
    copy_norm(ours, theirs)
    x = torch.randn(B, S, d_model) * 3 + 1
    assert_close(ours(x), theirs(x))
    assert {n for n, _ in ours.named_parameters()} == {"weight", "bias"}


def test_layer_norm_uses_biased_variance_with_eps_inside_the_root():
    x = torch.tensor([[1.0, 3.0]])  # mean 2, biased variance 1
    assert_close(LayerNorm(2, eps=0.0)(x), torch.tensor([[-1.0, 1.0]]))
    assert_close(LayerNorm(2, eps=3.0)(x), torch.tensor([[-0.5, 0.5]]))  # 1 / sqrt(1 + 3)


def test_feed_forward_is_two_linears_with_relu():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(d_model, d_ff, dropout=0.0)
    x = torch.randn(B, S, d_model)
    assert_close(ffn(x), ffn.w_2(torch.relu(ffn.w_1(x))))
    assert ffn.w_1.out_features == d_ff and ffn.w_2.out_features == d_model


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_sublayer_connection_order(norm_first):
    torch.manual_seed(0)
    block = SublayerConnection(d_model, dropout=0.0, norm_first=norm_first)
    x = torch.randn(B, S, d_model)
    double = lambda y: 2 * y  # noqa: E731
    expected = x + 2 * block.norm(x) if norm_first else block.norm(x + 2 * x)
    assert_close(block(x, double), expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = torch_layer(nn.TransformerEncoderLayer, norm_first)
    ours = EncoderLayer(d_model, h, d_ff, dropout=0.0, norm_first=norm_first).eval()
    copy_encoder_layer(ours, theirs)
    x = torch.randn(B, S, d_model)
    src_mask = padding_mask(SRC, pad_id=0)  # (B, 1, 1, S), True = attend
    expected = theirs(x, src_key_padding_mask=~src_mask[:, 0, 0])  # nn: True = ignore
    assert_close(ours(x, src_mask), expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    theirs = torch_layer(nn.TransformerDecoderLayer, norm_first)
    ours = DecoderLayer(d_model, h, d_ff, dropout=0.0, norm_first=norm_first).eval()
    copy_decoder_layer(ours, theirs)
    x, memory = torch.randn(B, T, d_model), torch.randn(B, S, d_model)
    src_mask, tgt_mask = padding_mask(SRC, 0), decoder_mask(TGT, 0)  # (B, 1, 1, S), (B, 1, T, T)
    expected = theirs(
        x,
        memory,
        tgt_mask=~torch.ones(T, T, dtype=torch.bool).tril(),  # True = not allowed
        tgt_key_padding_mask=TGT == 0,
        memory_key_padding_mask=SRC == 0,
    )
    assert_close(ours(x, memory, src_mask, tgt_mask), expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_stacks_match_nn_transformer(norm_first):
    """Encoder + Decoder equal nn.Transformer, once its extra final norms are removed in post-norm mode."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nn.Transformer warns about nested tensors with norm_first
        theirs = nn.Transformer(
            d_model, h, N, N, d_ff, dropout=0.0, layer_norm_eps=EPS, batch_first=True, norm_first=norm_first
        )
    randomise(theirs).eval()
    encoder = Encoder(d_model, h, d_ff, dropout=0.0, N=N, norm_first=norm_first).eval()
    decoder = Decoder(d_model, h, d_ff, dropout=0.0, N=N, norm_first=norm_first).eval()
    for mine, ref in zip(encoder.layers, theirs.encoder.layers, strict=True):
        copy_encoder_layer(mine, ref)
    for mine, ref in zip(decoder.layers, theirs.decoder.layers, strict=True):
        copy_decoder_layer(mine, ref)
    if norm_first:
        copy_norm(encoder.norm, theirs.encoder.norm)
        copy_norm(decoder.norm, theirs.decoder.norm)
    else:
        assert isinstance(encoder.norm, nn.Identity) and isinstance(decoder.norm, nn.Identity)
        theirs.encoder.norm = theirs.decoder.norm = None  # nn.Transformer adds them even in post-norm mode
    src, tgt = torch.randn(B, S, d_model), torch.randn(B, T, d_model)
    src_mask, tgt_mask = padding_mask(SRC, 0), decoder_mask(TGT, 0)
    expected = theirs(
        src,
        tgt,
        tgt_mask=~torch.ones(T, T, dtype=torch.bool).tril(),
        src_key_padding_mask=SRC == 0,
        tgt_key_padding_mask=TGT == 0,
        memory_key_padding_mask=SRC == 0,
    )
    memory = encoder(src, src_mask)
    assert_close(decoder(tgt, memory, src_mask, tgt_mask), expected)


def test_final_norm_only_in_pre_norm_mode():
    assert isinstance(Encoder(d_model, h, d_ff, N=1).norm, nn.Identity)
    assert isinstance(Decoder(d_model, h, d_ff, N=1).norm, nn.Identity)
    assert isinstance(Encoder(d_model, h, d_ff, N=1, norm_first=True).norm, LayerNorm)
    assert isinstance(Decoder(d_model, h, d_ff, N=1, norm_first=True).norm, LayerNorm)


def test_layer_attributes_and_sizes():
    enc = Encoder(d_model, h, d_ff, N=3)
    dec = Decoder(d_model, h, d_ff, N=3, d_k=4, d_v=16)
    assert len(enc.layers) == 3 and len(dec.layers) == 3
    assert len(enc.layers[0].sublayers) == 2 and len(dec.layers[0].sublayers) == 3
    assert dec.layers[0].cross_attn.w_q.out_features == h * 4
    assert dec.layers[0].cross_attn.w_v.out_features == h * 16
    x = torch.randn(B, T, d_model)
    assert dec(x, enc(torch.randn(B, S, d_model))).shape == (B, T, d_model)


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match=r"d_ff must be a positive integer, got 0"):
        PositionwiseFeedForward(d_model, 0)
    with pytest.raises(ValueError, match=r"N must be a positive integer, got 0"):
        Encoder(d_model, h, d_ff, N=0)
    with pytest.raises(ValueError, match=r"d_model must be divisible by h"):
        EncoderLayer(30, 4, d_ff)
