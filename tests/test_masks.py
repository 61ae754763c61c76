"""Tests for aiayn.masks and aiayn.checks, on the seeds' example target [A, B, C, D, <pad>]."""

import pytest
import torch

from aiayn.checks import check_positive, check_shape, check_token_dtype
from aiayn.masks import (
    decoder_mask,
    padding_mask,
    shift_right,
    subsequent_mask,
)

PAD, BOS, EOS, A, B, C, D = 0, 1, 2, 3, 4, 5, 6
T, F = True, False

TARGET = torch.tensor([[A, B, C, D, PAD]])  # (1, 5): the seeds' example


# --- padding_mask --------------------------------------------------------------------------------


def test_padding_mask_shape_and_values():
    tokens = torch.tensor([[A, B, C, PAD, PAD], [D, C, PAD, PAD, PAD]])
    mask = padding_mask(tokens, PAD)
    assert mask.shape == (2, 1, 1, 5)
    assert mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == [[T, T, T, F, F], [T, T, F, F, F]]


def test_padding_mask_without_padding_is_all_true():
    mask = padding_mask(torch.tensor([[A, B, C]]), PAD)
    assert mask.all()


def test_padding_mask_uses_the_given_pad_id():
    tokens = torch.tensor([[0, 7, 7]])
    assert padding_mask(tokens, pad_id=7)[0, 0, 0].tolist() == [T, F, F]


# --- subsequent_mask -----------------------------------------------------------------------------


def test_subsequent_mask_is_lower_triangle_with_diagonal():
    expected = [
        [T, F, F, F],
        [T, T, F, F],
        [T, T, T, F],
        [T, T, T, T],
    ]
    mask = subsequent_mask(4)
    assert mask.dtype == torch.bool
    assert mask.tolist() == expected


def test_subsequent_mask_matches_the_triu_recipe_of_the_reference_code():
    n = 6
    assert torch.equal(subsequent_mask(n), torch.triu(torch.ones(n, n), diagonal=1) == 0)


def test_subsequent_mask_of_one_is_a_single_true():
    assert subsequent_mask(1).tolist() == [[T]]


# --- decoder_mask --------------------------------------------------------------------------------


def test_decoder_mask_on_the_seeds_target():
    expected = torch.tensor(
        [
            #  A  B  C  D  <pad>     keys ->
            [T, F, F, F, F],  # query A sees A
            [T, T, F, F, F],  # query B sees A B
            [T, T, T, F, F],  # query C sees A B C
            [T, T, T, T, F],  # query D sees A B C D
            [T, T, T, T, F],  # query <pad> sees A B C D, never itself
        ]
    )
    mask = decoder_mask(TARGET, PAD)
    assert mask.shape == (1, 1, 5, 5)
    assert torch.equal(mask[0, 0], expected)


def test_decoder_mask_is_padding_and_causal():
    tokens = torch.tensor([[A, B, C, D, PAD], [A, B, PAD, PAD, PAD], [A, B, C, D, A]])
    combined = decoder_mask(tokens, PAD)
    assert combined.shape == (3, 1, 5, 5)
    assert torch.equal(combined, padding_mask(tokens, PAD) & subsequent_mask(5))


def test_decoder_mask_never_has_an_empty_row_with_right_padding():
    tokens = torch.tensor([[A, PAD, PAD, PAD]])
    assert decoder_mask(tokens, PAD).any(dim=-1).all()


# --- shift_right ---------------------------------------------------------------------------------


def test_shift_right_prepends_bos_and_drops_the_last_token():
    target = torch.tensor([[A, B, C, EOS]])
    assert shift_right(target, BOS).tolist() == [[BOS, A, B, C]]


def test_shift_right_on_a_padded_batch_keeps_shape_and_dtype():
    target = torch.tensor([[A, B, C, EOS], [A, EOS, PAD, PAD]], dtype=torch.int32)
    shifted = shift_right(target, BOS)
    assert shifted.shape == target.shape
    assert shifted.dtype == torch.int32
    assert shifted.tolist() == [[BOS, A, B, C], [BOS, A, EOS, PAD]]


def test_shift_right_does_not_modify_its_input():
    target = torch.tensor([[A, B, C, EOS]])
    shift_right(target, BOS)
    assert target.tolist() == [[A, B, C, EOS]]


# --- bad inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [padding_mask, decoder_mask])
def test_float_tokens_are_rejected(fn):
    with pytest.raises(TypeError, match=r"tokens: expected an integer tensor of token ids \(torch.long\)"):
        fn(torch.tensor([[1.0, 2.0]]), PAD)


@pytest.mark.parametrize("fn", [padding_mask, decoder_mask])
def test_1d_tokens_are_rejected(fn):
    with pytest.raises(ValueError, match=r"tokens: expected shape \(B, L\) of token ids, got \(4,\)"):
        fn(torch.tensor([A, B, C, PAD]), PAD)


@pytest.mark.parametrize("pad_id", [-1, 1.0, True, None])
def test_bad_pad_id_is_rejected(pad_id):
    with pytest.raises(ValueError, match=rf"pad_id must be a non-negative integer token id, got {pad_id!r}"):
        padding_mask(TARGET, pad_id)


@pytest.mark.parametrize("n", [0, -2, 3.0])
def test_subsequent_mask_rejects_bad_sizes(n):
    with pytest.raises(ValueError, match=rf"n must be a positive integer, got {n!r}"):
        subsequent_mask(n)


def test_shift_right_rejects_float_tokens():
    with pytest.raises(TypeError, match="expected an integer tensor of token ids"):
        shift_right(torch.tensor([[1.0, 2.0]]), BOS)


def test_shift_right_rejects_1d_tokens():
    with pytest.raises(ValueError, match=r"tokens: expected shape \(B, T\) of token ids, got \(3,\)"):
        shift_right(torch.tensor([A, B, C]), BOS)


@pytest.mark.parametrize("bos_id", [-1, 1.5, False])
def test_shift_right_rejects_bad_bos_id(bos_id):
    with pytest.raises(ValueError, match=rf"bos_id must be a non-negative integer token id, got {bos_id!r}"):
        shift_right(TARGET, bos_id)


# --- checks --------------------------------------------------------------------------------------


def test_check_shape_returns_the_tensor():
    x = torch.zeros(2, 3)
    assert check_shape(x, (2, 3)) is x
    assert check_shape(x, (None, 3)) is x


def test_check_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 5, 8\), got \(2, 5, 6\)"):
        check_shape(torch.zeros(2, 5, 6), (2, 5, 8), name="out")


def test_check_shape_wildcard_and_rank_mismatch():
    with pytest.raises(ValueError, match=r"tensor: expected shape \(\*, 3\), got \(2, 3, 1\)"):
        check_shape(torch.zeros(2, 3, 1), (None, 3))


def test_check_shape_one_dimensional_shapes_have_a_trailing_comma():
    with pytest.raises(ValueError, match=r"expected shape \(4,\), got \(3,\)"):
        check_shape(torch.zeros(3), (4,))


def test_check_shape_rejects_a_non_tensor():
    with pytest.raises(TypeError, match="x: expected a torch.Tensor, got list"):
        check_shape([1, 2], (2,), name="x")


@pytest.mark.parametrize("value", [0, -1, 2.0, True, "8"])
def test_check_positive_rejects(value):
    with pytest.raises(ValueError, match=rf"d_model must be a positive integer, got {value!r}"):
        check_positive(d_model=value)


def test_check_positive_accepts_positive_ints():
    check_positive(d_model=512, h=8)


@pytest.mark.parametrize("dtype", [torch.long, torch.int32, torch.int16, torch.uint8])
def test_check_token_dtype_accepts_integer_dtypes(dtype):
    check_token_dtype(torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bool, torch.complex64])
def test_check_token_dtype_rejects_other_dtypes(dtype):
    message = rf"ids: expected an integer tensor of token ids \(torch.long\), got dtype {dtype}"
    with pytest.raises(TypeError, match=message):
        check_token_dtype(torch.zeros(2, dtype=dtype), name="ids")
