"""The one switch: ``set_fast(model)`` swaps every fast twin of a model in, or back out.

A twin has the reference's parameters (the ``state_dict`` does not change) and is proven equal to it
by the tests: ``FastMultiHeadAttention`` (q, k and v from one product, PyTorch's fused kernel) for
``MultiHeadAttention``, ``F.layer_norm`` for ``LayerNorm``'s formula, masks prepared once per stack.
The paper's modules do not know the twins: the switch sets their public attributes (``use_fused``,
``fused``, ``prepare_masks``) and the attention modules' class.
"""

from __future__ import annotations

from torch import nn

from ..attention import MultiHeadAttention
from ..layers import Decoder, Encoder, LayerNorm
from .fast_attention import FastMultiHeadAttention

__all__ = ["set_fast"]


class set_fast:  # lower case like torch.set_grad_enabled and aiayn.attention.set_fused
    """Switch every fast path in ``model`` on (or off): proven equal, faster, same parameters.

    Fused attention kernel, packed q/k/v products, ``F.layer_norm`` and masks prepared once per
    stack. Takes effect at once; used as a context manager, it restores the previous settings::

        set_fast(model)                 # from now on
        with set_fast(model, False):    # the explicit code, e.g. to collect attention maps
            model(src, tgt)

    Args:
        model: any module; its ``MultiHeadAttention``, ``LayerNorm`` and stacks are switched.
        enabled: ``True`` for the fast path, ``False`` for the explicit one the chapters explain.
    """

    def __init__(self, model: nn.Module, enabled: bool = True):
        enabled = bool(enabled)
        attention = FastMultiHeadAttention if enabled else MultiHeadAttention
        switches = {
            # the fast twin's class, the same module and parameters
            MultiHeadAttention: {
                "use_fused": enabled,
                "__class__": attention,
            },
            LayerNorm: {"fused": enabled},
            (Encoder, Decoder): {"prepare_masks": enabled},
        }
        self.previous = [
            (m, name, getattr(m, name))
            for m in model.modules()
            for kind, values in switches.items()
            if isinstance(m, kind)
            for name in values
        ]
        for m, name, _ in self.previous:
            kind = next(k for k in switches if isinstance(m, k))
            setattr(m, name, switches[kind][name])

    def __enter__(self) -> set_fast:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for m, name, was in reversed(self.previous):
            setattr(m, name, was)
