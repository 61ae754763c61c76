"""The fast twin of multi-head attention: q, k and v from one matrix product, the same parameters.

    B  batch        h  heads        L_q  query length        L_k  key (and value) length
    d_model  model width        d_k  query/key width per head        d_v  value width per head

Self-attention projects one input three times (``w_q``, ``w_k``, ``w_v``); stacking the three
weights into one ``(3·h·d_k, d_model)`` matrix does it in one product, which launches fewer kernels
(cross-attention stacks ``w_k`` and ``w_v``). The parameters stay the reference's, so the
``state_dict`` is unchanged: ``engine.switch.set_fast`` turns every ``MultiHeadAttention`` of a model into
a ``FastMultiHeadAttention`` and back, in place. ``tests/test_fast_paths.py`` holds the two equal,
outputs and gradients.

The stacked weight is derived from the parameters, so it is made anew at every forward. Only inside
``packed_weights_kept`` (one decoding call, in which the parameters cannot change) is it made once;
on leaving the block it is dropped. A cache that outlived the block would have to know when the
parameters change, and nothing says so reliably: the fused and foreach optimizers update them in
place without bumping their version counters (``tests/test_stale_weights.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import MultiHeadAttention

__all__ = ["FastMultiHeadAttention", "project", "packed_weights_kept"]


class FastMultiHeadAttention(MultiHeadAttention):
    """``MultiHeadAttention`` whose projections sharing an input are one product (see the module docstring).

    Made by ``engine.switch.set_fast`` from a ``MultiHeadAttention`` (same parameters); built directly, it
    takes the same arguments.
    """

    def projections(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """As ``MultiHeadAttention.projections``: q, k, v ``(B, h, L, d_k or d_v)``, packed."""
        B, L_q, L_k = query.size(0), query.size(1), key.size(1)
        h, d_k, d_v = self.h, self.d_k, self.d_v
        q, k, v = project(
            self, query, key, value
        )  # (B, L, h * d_k or h * d_v)
        q = q.view(B, L_q, h, d_k).transpose(1, 2)  # (B, h, L_q, d_k)
        k = k.view(B, L_k, h, d_k).transpose(1, 2)  # (B, h, L_k, d_k)
        v = v.view(B, L_k, h, d_v).transpose(1, 2)  # (B, h, L_k, d_v)
        return q, k, v

    def extra_repr(self) -> str:
        return super().extra_repr() + ", packed=True"


def project(
    attn: MultiHeadAttention,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``w_q(query)``, ``w_k(key)``, ``w_v(value)``, as one product where they share an input.

    Packed only for a ``FastMultiHeadAttention`` with float weights (``engine.precision.int8_copy``'s
    int8 projections hold none to stack). Queries and keys may have different batch sizes.

    Returns:
        ``(B, L_q, h·d_k)``, ``(B_k, L_k, h·d_k)``, ``(B_k, L_k, h·d_v)``.
    """
    packed = isinstance(attn, FastMultiHeadAttention) and isinstance(
        attn.w_k, nn.Linear
    )
    if packed and query is key and key is value:
        return _packed_linear(attn, ("w_q", "w_k", "w_v"), query)
    if packed and key is value:
        k, v = _packed_linear(attn, ("w_k", "w_v"), key)
        return attn.w_q(query), k, v
    return attn.w_q(query), attn.w_k(key), attn.w_v(value)


def _packed_linear(
    attn: MultiHeadAttention, names: tuple[str, ...], x: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Apply the projections ``names`` to ``x`` as one product; one ``(B, L, width)`` per name."""
    linears = [getattr(attn, name) for name in names]
    weight, bias = _packed_parameters(attn, names)
    out = F.linear(x, weight, bias)  # (B, L, sum of widths)
    return out.split([lin.out_features for lin in linears], dim=-1)


def _packed_parameters(
    attn: MultiHeadAttention, names: tuple[str, ...]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights (and biases) of ``names`` stacked along the output axis.

    Stacked anew at every call, except inside ``packed_weights_kept`` without gradients, where
    the stack is made once per block.
    """
    linears = [getattr(attn, name) for name in names]
    weights = [lin.weight for lin in linears]
    biases = [lin.bias for lin in linears if lin.bias is not None]
    kept = getattr(attn, "_packed_kept", None)
    if (
        kept is None
        or torch.is_grad_enabled()
        or torch.compiler.is_compiling()
    ):
        return torch.cat(weights), torch.cat(biases) if biases else None
    if names not in kept:
        weight = torch.cat(weights)  # (sum of widths, d_model)
        bias = torch.cat(biases) if biases else None  # (sum of widths,)
        kept[names] = (weight, bias)
    return kept[names]


@contextlib.contextmanager
def packed_weights_kept(model: nn.Module) -> Iterator[None]:
    """Inside the block, stack each fast attention's q/k/v weights once (without gradients).

    Decoding enters it for one call, in which the parameters do not change; on exit the stacked
    copies are dropped, so no later forward (after an optimizer step, a load, any in-place
    update) can read weights that are no longer the parameters'. Nested blocks keep the outer one's.
    """
    modules = [
        m
        for m in model.modules()
        if isinstance(m, FastMultiHeadAttention)
        and getattr(m, "_packed_kept", None) is None
    ]
    for m in modules:
        m._packed_kept = {}
    try:
        yield
    finally:
        for m in modules:
            del m._packed_kept
