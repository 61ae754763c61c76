"""Side by side with PyTorch: our weights in ``nn.Transformer`` modules, its mask conventions, gradients per layer.

    B  batch        S  source length        T  target length        d_model  model width        h  heads

PyTorch's ``nn.TransformerEncoderLayer``, ``nn.TransformerDecoderLayer`` and ``nn.Transformer`` compute the
same layers as ``aiayn.layers`` once they hold the same weights. The ``to_torch_*`` functions build those
modules from ours (dropout 0, ``batch_first=True``), so a chapter or a test can compare outputs with
``torch.testing.assert_close``. Two differences are handled here rather than hidden:

* ``nn.Transformer`` ends both stacks with a LayerNorm even in post-norm mode, where the paper (and
  ``aiayn``) has none; ``to_torch_transformer`` removes them in post-norm mode.
* Its masks say the opposite of ours: ``True`` means "may *not* attend", and padding comes as separate
  ``(B, L)`` key-padding masks. ``torch_masks`` translates.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from .attention import MultiHeadAttention
from .layers import (
    DecoderLayer,
    EncoderLayer,
    LayerNorm,
    PositionwiseFeedForward,
)
from .masks import subsequent_mask
from .model import Transformer

__all__ = [
    "to_torch_encoder_layer",
    "to_torch_decoder_layer",
    "to_torch_transformer",
    "torch_masks",
    "layer_gradient_norms",
]


def _sizes(attn: MultiHeadAttention) -> tuple[int, int]:
    if (
        attn.d_k != attn.d_model // attn.h
        or attn.d_v != attn.d_model // attn.h
        or attn.w_q.bias is None
    ):
        raise ValueError(
            "nn.MultiheadAttention needs d_k = d_v = d_model / h and biases, "
            f"got d_model={attn.d_model}, h={attn.h}, d_k={attn.d_k}, d_v={attn.d_v}, bias={attn.w_q.bias is not None}"
        )
    return attn.d_model, attn.h


@torch.no_grad()
def _copy_attention(
    ours: MultiHeadAttention, theirs: nn.MultiheadAttention
) -> None:
    theirs.in_proj_weight.copy_(
        torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight])
    )
    theirs.in_proj_bias.copy_(
        torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias])
    )
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


@torch.no_grad()
def _copy_feed_forward(
    ours: PositionwiseFeedForward, theirs: nn.Module
) -> None:
    for mine, ref in (
        (ours.w_1, theirs.linear1),
        (ours.w_2, theirs.linear2),
    ):
        ref.weight.copy_(mine.weight)
        ref.bias.copy_(mine.bias)


@torch.no_grad()
def _copy_norm(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


def _factory(module: nn.Module) -> dict:
    p = next(module.parameters())
    return {"device": p.device, "dtype": p.dtype}


def _layer_settings(layer: EncoderLayer | DecoderLayer) -> dict:
    """Keyword arguments for the PyTorch layer that mirrors ``layer``: sizes, eps, norm order, dropout 0."""
    d_model, h = _sizes(layer.self_attn)
    first = layer.sublayers[0]
    return dict(
        d_model=d_model,
        nhead=h,
        dim_feedforward=layer.feed_forward.w_1.out_features,
        dropout=0.0,
        activation="relu",
        layer_norm_eps=first.norm.eps,
        batch_first=True,
        norm_first=first.norm_first,
        **_factory(layer),
    )


def to_torch_encoder_layer(
    layer: EncoderLayer,
) -> nn.TransformerEncoderLayer:
    """An ``nn.TransformerEncoderLayer`` holding a copy of ``layer``'s weights (dropout 0, batch first).

    Args:
        layer: an ``aiayn.layers.EncoderLayer`` with ``d_k = d_v = d_model / h``.

    Returns:
        the PyTorch layer in eval mode; it maps ``(B, S, d_model)`` to ``(B, S, d_model)`` as ``layer`` does.
    """
    if not isinstance(layer, EncoderLayer):
        raise TypeError(
            f"expected an aiayn EncoderLayer, got {type(layer).__name__}"
        )
    theirs = nn.TransformerEncoderLayer(**_layer_settings(layer))
    _copy_attention(layer.self_attn, theirs.self_attn)
    _copy_feed_forward(layer.feed_forward, theirs)
    _copy_norm(layer.sublayers[0].norm, theirs.norm1)
    _copy_norm(layer.sublayers[1].norm, theirs.norm2)
    return theirs.eval()


def to_torch_decoder_layer(
    layer: DecoderLayer,
) -> nn.TransformerDecoderLayer:
    """An ``nn.TransformerDecoderLayer`` holding a copy of ``layer``'s weights (dropout 0, batch first).

    Args:
        layer: an ``aiayn.layers.DecoderLayer`` with ``d_k = d_v = d_model / h``.

    Returns:
        the PyTorch layer in eval mode; ``theirs(x, memory, ...)`` matches ``layer(x, memory, ...)``.
    """
    if not isinstance(layer, DecoderLayer):
        raise TypeError(
            f"expected an aiayn DecoderLayer, got {type(layer).__name__}"
        )
    _sizes(layer.cross_attn)
    theirs = nn.TransformerDecoderLayer(**_layer_settings(layer))
    _copy_attention(layer.self_attn, theirs.self_attn)
    _copy_attention(layer.cross_attn, theirs.multihead_attn)
    _copy_feed_forward(layer.feed_forward, theirs)
    for sublayer, norm in zip(
        layer.sublayers,
        (theirs.norm1, theirs.norm2, theirs.norm3),
        strict=True,
    ):
        _copy_norm(sublayer.norm, norm)
    return theirs.eval()


def to_torch_transformer(
    model: Transformer, keep_final_norms: bool = False
) -> nn.Transformer:
    """An ``nn.Transformer`` whose encoder and decoder stacks hold copies of ``model``'s stacks.

    ``nn.Transformer`` has no embeddings, no positional encoding and no generator: it maps embedded
    sequences ``(B, S, d_model)`` and ``(B, T, d_model)`` to decoder states ``(B, T, d_model)``.

    Args:
        model: an ``aiayn.model.Transformer`` with ``d_k = d_v = d_model / h``.
        keep_final_norms: in post-norm mode, keep the final LayerNorm that ``nn.Transformer`` puts after
            each stack (the paper has none). In pre-norm mode the final norms are ours and always kept.

    Returns:
        the PyTorch model in eval mode, dropout 0, ``batch_first=True``.
    """
    if not isinstance(model, Transformer):
        raise TypeError(
            f"expected an aiayn Transformer, got {type(model).__name__}"
        )
    c = model.config
    _sizes(model.encoder.layers[0].self_attn)
    with warnings.catch_warnings():
        # PyTorch warns that its nested-tensor fast path is off in pre-norm mode; nothing to act on here.
        warnings.filterwarnings(
            "ignore", message="enable_nested_tensor is True"
        )
        theirs = nn.Transformer(
            c.d_model,
            c.h,
            c.N,
            c.N,
            c.d_ff,
            dropout=0.0,
            layer_norm_eps=model.encoder.layers[0].sublayers[0].norm.eps,
            batch_first=True,
            norm_first=c.norm_first,
            **_factory(model),
        )
    for mine, ref in zip(
        model.encoder.layers, theirs.encoder.layers, strict=True
    ):
        ref.load_state_dict(to_torch_encoder_layer(mine).state_dict())
    for mine, ref in zip(
        model.decoder.layers, theirs.decoder.layers, strict=True
    ):
        ref.load_state_dict(to_torch_decoder_layer(mine).state_dict())
    if c.norm_first:
        _copy_norm(model.encoder.norm, theirs.encoder.norm)
        _copy_norm(model.decoder.norm, theirs.decoder.norm)
    elif not keep_final_norms:
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    theirs.encoder.use_nested_tensor = False  # no nested-tensor fast path: same result, no prototype warning
    return theirs.eval()


def torch_masks(
    src: torch.Tensor, tgt: torch.Tensor, pad_id: int
) -> dict[str, torch.Tensor]:
    """The masks ``nn.Transformer.forward`` takes, for the masks ``aiayn`` builds from the same token ids.

    ``aiayn``: one boolean mask per attention, ``True`` = may attend (``padding_mask``, ``decoder_mask``).
    PyTorch: ``True`` = may *not* attend, the look-ahead part as ``tgt_mask`` ``(T, T)`` and padding as
    three ``(B, L)`` key-padding masks.

    Args:
        src: ``(B, S)`` source ids.
        tgt: ``(B, T)`` decoder input ids.
        pad_id: the padding id.

    Returns:
        keyword arguments for ``nn.Transformer.forward``: ``tgt_mask`` ``(T, T)``, ``src_key_padding_mask``
        ``(B, S)``, ``tgt_key_padding_mask`` ``(B, T)`` and ``memory_key_padding_mask`` ``(B, S)``.
    """
    for name, ids in (("src", src), ("tgt", tgt)):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
            shape = (
                tuple(ids.shape)
                if isinstance(ids, torch.Tensor)
                else type(ids).__name__
            )
            raise ValueError(
                f"{name}: expected shape (B, L) of token ids, got {shape}"
            )
    return {
        "tgt_mask": ~subsequent_mask(
            tgt.size(1), device=tgt.device
        ),  # (T, T), True = future, blocked
        "src_key_padding_mask": src
        == pad_id,  # (B, S), True = padding, ignored
        "tgt_key_padding_mask": tgt == pad_id,  # (B, T)
        "memory_key_padding_mask": src == pad_id,  # (B, S)
    }


def layer_gradient_norms(
    model: nn.Module,
    layers: Sequence[nn.Module],
    *inputs: torch.Tensor,
    seed: int = 0,
) -> list[float]:
    """Backpropagate a fixed random direction from ``model``'s output; return each layer's gradient norm.

    The loss is ``(output * r).sum()`` with ``r`` drawn from N(0, 1) with ``seed``: every layer receives
    the same upstream gradient ``r`` at the top, so differences between layers come from the backward
    pass through the stack alone. The norm of a layer is the L2 norm of all its parameters' gradients
    together. Gradients are cleared before and after.

    Args:
        model: the module to run, ``model(*inputs)`` must return one tensor.
        layers: the submodules to measure, bottom first (e.g. ``encoder.layers``).
        inputs: the inputs of ``model``.
        seed: seed of the random direction ``r``. Draw the inputs with another seed: for an output of the
            input's shape, the same seed would make ``r`` equal to the input.

    Returns:
        one float per layer.
    """
    model.zero_grad(set_to_none=True)
    out = model(*inputs)
    r = torch.randn(
        out.shape,
        generator=torch.Generator().manual_seed(seed),
        dtype=out.dtype,
    ).to(out.device)
    (out * r).sum().backward()
    norms = []
    for layer in layers:
        grads = [
            p.grad.detach().flatten()
            for p in layer.parameters()
            if p.grad is not None
        ]
        if not grads:
            raise ValueError(
                f"{type(layer).__name__} received no gradient: is it part of the model's forward pass?"
            )
        norms.append(torch.linalg.vector_norm(torch.cat(grads)).item())
    model.zero_grad(set_to_none=True)
    return norms
