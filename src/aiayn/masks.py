"""Attention masks and the shifted-right decoder input.

Every mask in this package is boolean and ``True`` means "this query may attend to this key".
Shapes are written so that they broadcast against attention scores of shape ``(B, h, T_q, T_k)``:

    B  batch        S  source length        T  target length        h  heads
"""

from __future__ import annotations

import torch

from .checks import check_positive, check_token_dtype

__all__ = ["padding_mask", "subsequent_mask", "decoder_mask", "shift_right"]


def _check_tokens(
    tokens: torch.Tensor, pad_id: int, name: str = "tokens"
) -> None:
    check_token_dtype(tokens, name)
    if tokens.dim() != 2:
        raise ValueError(
            f"{name}: expected shape (B, L) of token ids, got {tuple(tokens.shape)}"
        )
    if isinstance(pad_id, bool) or not isinstance(pad_id, int) or pad_id < 0:
        raise ValueError(
            f"pad_id must be a non-negative integer token id, got {pad_id!r}"
        )


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Mask out padding keys.

    Args:
        tokens: ``(B, S)`` integer token ids.
        pad_id: the id of the padding token.

    Returns:
        ``(B, 1, 1, S)`` boolean, ``True`` where the key is a real token.
    """
    _check_tokens(tokens, pad_id)
    return (tokens != pad_id)[:, None, None, :]  # (B, 1, 1, S)


def subsequent_mask(
    n: int, device: torch.device | str | None = None
) -> torch.Tensor:
    """The look-ahead mask: position ``i`` may attend to positions ``0..i``.

    Args:
        n: sequence length.

    Returns:
        ``(n, n)`` boolean, lower triangle including the diagonal ``True``.
    """
    check_positive(n=n)
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def decoder_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Padding mask and look-ahead mask combined, for decoder self-attention.

    Args:
        tokens: ``(B, T)`` decoder input ids.
        pad_id: the id of the padding token.

    Returns:
        ``(B, 1, T, T)`` boolean: query ``i`` may attend to key ``j`` when ``j <= i`` and ``j`` is not padding.
    """
    pad = padding_mask(tokens, pad_id)  # (B, 1, 1, T)
    causal = subsequent_mask(tokens.size(1), device=tokens.device)  # (T, T)
    return pad & causal  # (B, 1, T, T)


def shift_right(tokens: torch.Tensor, bos_id: int) -> torch.Tensor:
    """The decoder input for teacher forcing: prepend ``<bos>`` and drop the last token.

    ``[A, B, C, <eos>]`` becomes ``[<bos>, A, B, C]``, so position ``i`` sees the targets before ``i``
    and must predict target ``i``.

    Args:
        tokens: ``(B, T)`` target ids.
        bos_id: the id of the beginning-of-sequence token.

    Returns:
        ``(B, T)`` ids, same dtype and device.
    """
    check_token_dtype(tokens)
    if tokens.dim() != 2:
        raise ValueError(
            "tokens: expected shape (B, T) of token ids, "
            f"got {tuple(tokens.shape)}"
        )
    if isinstance(bos_id, bool) or not isinstance(bos_id, int) or bos_id < 0:
        raise ValueError(
            f"bos_id must be a non-negative integer token id, got {bos_id!r}"
        )
    bos = torch.full_like(tokens[:, :1], bos_id)  # (B, 1)
    return torch.cat([bos, tokens[:, :-1]], dim=1)  # (B, T)
