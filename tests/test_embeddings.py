"""Tests for aiayn.embeddings: the sinusoidal table against the formula, the modules and their errors."""

import math

import pytest
import torch
from torch.testing import assert_close

from aiayn.embeddings import (
    Embeddings,
    LearnedPositionalEmbedding,
    PositionalEncoding,
    sinusoidal_encoding,
)


def formula(max_len: int, d_model: int) -> list[list[float]]:
    """Section 3.5 in plain Python floats: column 2i is sin, column 2i + 1 is cos, both at pos / 10000^(2i/d)."""
    table = []
    for pos in range(max_len):
        row = []
        for col in range(d_model):
            two_i = col - col % 2  # the even column of the pair this column belongs to
            angle = pos / 10000 ** (two_i / d_model)
            row.append(math.sin(angle) if col % 2 == 0 else math.cos(angle))
        table.append(row)
    return table


# --- sinusoidal_encoding -------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [2, 4, 7, 16, 33, 64])
def test_table_matches_formula(d_model):
    pe = sinusoidal_encoding(50, d_model)
    expected = torch.tensor(formula(50, d_model), dtype=torch.float64)
    assert pe.shape == (50, d_model)
    assert pe.dtype == torch.float32
    assert_close(pe.double(), expected, atol=1e-6, rtol=0)


def test_even_columns_sin_odd_columns_cos():
    d_model = 8
    pe = sinusoidal_encoding(20, d_model).double()
    pos = torch.arange(20, dtype=torch.float64)
    for i in range(d_model // 2):
        omega = 1 / 10000 ** (2 * i / d_model)
        assert_close(pe[:, 2 * i], torch.sin(pos * omega), atol=1e-6, rtol=0)
        assert_close(pe[:, 2 * i + 1], torch.cos(pos * omega), atol=1e-6, rtol=0)


def test_position_zero_is_sin0_cos0():
    pe = sinusoidal_encoding(3, 6)
    assert pe[0].tolist() == [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]


def test_odd_d_model_last_column_is_a_sine():
    d_model = 5
    pe = sinusoidal_encoding(30, d_model).double()
    pos = torch.arange(30, dtype=torch.float64)
    omega = 1 / 10000 ** (4 / d_model)  # the last column is 2i = 4
    assert pe.shape == (30, 5)
    assert_close(pe[:, 4], torch.sin(pos * omega), atol=1e-6, rtol=0)


def test_values_bounded_and_rows_have_fixed_norm():
    d_model = 32
    pe = sinusoidal_encoding(200, d_model)
    assert pe.abs().max() <= 1.0
    # each (sin, cos) pair has norm 1, so every row has norm sqrt(d_model / 2)
    assert_close(pe.norm(dim=1), torch.full((200,), math.sqrt(d_model / 2)))


def test_rows_are_distinct():
    pe = sinusoidal_encoding(500, 16)
    distances = torch.cdist(pe, pe) + torch.eye(500) * 1e3
    assert distances.min() > 1e-3


@pytest.mark.parametrize(
    ("max_len", "d_model", "message"),
    [
        (0, 8, "max_len must be a positive integer, got 0"),
        (-3, 8, "max_len must be a positive integer, got -3"),
        (10, 0, "d_model must be a positive integer, got 0"),
        (10, -4, "d_model must be a positive integer, got -4"),
        (10, 8.0, "d_model must be a positive integer, got 8.0"),
    ],
)
def test_sinusoidal_encoding_rejects_bad_sizes(max_len, d_model, message):
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding(max_len, d_model)


# --- PositionalEncoding --------------------------------------------------------------------------


def test_positional_encoding_adds_table_in_eval_mode():
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=16, dropout=0.5, max_len=30).eval()
    x = torch.randn(2, 10, 16)
    out = module(x)
    assert out.shape == (2, 10, 16)
    assert_close(out, x + sinusoidal_encoding(30, 16)[:10])


def test_positional_encoding_applies_dropout_in_train_mode():
    module = PositionalEncoding(d_model=16, dropout=1.0, max_len=30).train()
    out = module(torch.randn(2, 10, 16))
    assert torch.equal(out, torch.zeros(2, 10, 16))


def test_positional_encoding_dropout_scales_kept_values():
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=16, dropout=0.5, max_len=30).train()
    x = torch.randn(4, 10, 16)
    out = module(x)
    kept = out != 0
    assert 0 < kept.float().mean() < 1
    assert_close(out[kept], ((x + module.pe[:10]) * 2)[kept])


def test_positional_encoding_table_is_a_buffer_not_a_parameter():
    module = PositionalEncoding(d_model=8, max_len=12)
    assert list(module.parameters()) == []
    assert "pe" not in module.state_dict()  # recomputed on construction, not saved
    assert module.pe.shape == (12, 8)


def test_positional_encoding_keeps_dtype():
    module = PositionalEncoding(d_model=8, dropout=0.0, max_len=12).eval()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    assert module(x).dtype == torch.float64


def test_positional_encoding_rejects_too_long_sequence():
    module = PositionalEncoding(d_model=8, max_len=12)
    with pytest.raises(ValueError, match=r"sequence of length 13 is longer than max_len=12"):
        module(torch.zeros(1, 13, 8))


def test_positional_encoding_rejects_wrong_width():
    module = PositionalEncoding(d_model=8, max_len=12)
    with pytest.raises(ValueError, match=r"expected input of shape \(B, L, 8\), got \(1, 5, 6\)"):
        module(torch.zeros(1, 5, 6))


def test_positional_encoding_rejects_2d_input():
    module = PositionalEncoding(d_model=8, max_len=12)
    with pytest.raises(ValueError, match=r"expected input of shape \(B, L, 8\), got \(5, 8\)"):
        module(torch.zeros(5, 8))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 0}, "d_model must be a positive integer, got 0"),
        ({"d_model": -8}, "d_model must be a positive integer, got -8"),
        ({"d_model": 8, "max_len": 0}, "max_len must be a positive integer, got 0"),
        ({"d_model": 8, "max_len": -1}, "max_len must be a positive integer, got -1"),
    ],
)
def test_positional_encoding_rejects_bad_sizes(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PositionalEncoding(**kwargs)


# --- LearnedPositionalEmbedding ------------------------------------------------------------------


def test_learned_positions_shape_and_values():
    torch.manual_seed(0)
    module = LearnedPositionalEmbedding(max_len=10, d_model=8)
    x = torch.randn(3, 6, 8)
    out = module(x)
    assert out.shape == (3, 6, 8)
    assert_close(out, x + module.table.weight[:6])
    assert sum(p.numel() for p in module.parameters()) == 10 * 8


def test_learned_positions_reject_too_long_sequence():
    module = LearnedPositionalEmbedding(max_len=10, d_model=8)
    with pytest.raises(ValueError, match=r"sequence of length 11 is longer than max_len=10"):
        module(torch.zeros(1, 11, 8))


def test_learned_positions_reject_wrong_width():
    module = LearnedPositionalEmbedding(max_len=10, d_model=8)
    with pytest.raises(ValueError, match=r"expected input of shape \(B, L, 8\), got \(1, 4, 3\)"):
        module(torch.zeros(1, 4, 3))


@pytest.mark.parametrize(
    ("max_len", "d_model", "message"),
    [(0, 8, "max_len must be a positive integer, got 0"), (10, -1, "d_model must be a positive integer, got -1")],
)
def test_learned_positions_reject_bad_sizes(max_len, d_model, message):
    with pytest.raises(ValueError, match=message):
        LearnedPositionalEmbedding(max_len, d_model)


# --- Embeddings ----------------------------------------------------------------------------------


def test_embeddings_scale_by_sqrt_d_model():
    torch.manual_seed(0)
    emb = Embeddings(vocab_size=11, d_model=16)
    tokens = torch.tensor([[1, 2, 3], [4, 5, 10]])
    out = emb(tokens)
    assert out.shape == (2, 3, 16)
    assert_close(out, emb.lut(tokens) * math.sqrt(16))
    assert_close(out, emb.weight[tokens] * 4.0)


def test_embeddings_weight_is_the_lookup_table():
    emb = Embeddings(vocab_size=11, d_model=16)
    assert emb.weight is emb.lut.weight
    assert emb.weight.shape == (11, 16)


def test_embeddings_padding_row_is_zero_and_gets_no_gradient():
    emb = Embeddings(vocab_size=6, d_model=4, padding_idx=0)
    assert torch.equal(emb.weight[0], torch.zeros(4))
    tokens = torch.tensor([[0, 1, 2, 0]])
    out = emb(tokens)
    assert torch.equal(out[0, 0], torch.zeros(4))
    out.sum().backward()
    assert torch.equal(emb.weight.grad[0], torch.zeros(4))
    assert emb.weight.grad[1].abs().sum() > 0


def test_embeddings_accept_int32_ids():
    emb = Embeddings(vocab_size=6, d_model=4)
    tokens = torch.tensor([[1, 2]], dtype=torch.int32)
    assert_close(emb(tokens), emb(tokens.long()))


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (torch.tensor([[1, 6]]), r"token ids must be in \[0, 6\), got values from 1 to 6"),
        (torch.tensor([[-1, 2]]), r"token ids must be in \[0, 6\), got values from -1 to 2"),
    ],
)
def test_embeddings_reject_ids_out_of_range(tokens, message):
    emb = Embeddings(vocab_size=6, d_model=4)
    with pytest.raises(ValueError, match=message):
        emb(tokens)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bool])
def test_embeddings_reject_non_integer_ids(dtype):
    emb = Embeddings(vocab_size=6, d_model=4)
    with pytest.raises(TypeError, match=rf"expected an integer tensor of token ids \(torch.long\), got dtype {dtype}"):
        emb(torch.tensor([[1, 2]]).to(dtype))


def test_embeddings_reject_a_list():
    emb = Embeddings(vocab_size=6, d_model=4)
    with pytest.raises(TypeError, match="expected a torch.Tensor of token ids, got list"):
        emb([[1, 2]])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"vocab_size": 0, "d_model": 4}, ValueError, "vocab_size must be a positive integer, got 0"),
        ({"vocab_size": 6, "d_model": 0}, ValueError, "d_model must be a positive integer, got 0"),
        ({"vocab_size": 6, "d_model": -2}, ValueError, "d_model must be a positive integer, got -2"),
        ({"vocab_size": 6, "d_model": 4, "padding_idx": 6}, ValueError, r"padding_idx must be in \[0, 6\), got 6"),
        ({"vocab_size": 6, "d_model": 4, "padding_idx": -1}, ValueError, r"padding_idx must be in \[0, 6\), got -1"),
    ],
)
def test_embeddings_reject_bad_sizes(kwargs, error, message):
    with pytest.raises(error, match=message):
        Embeddings(**kwargs)
