"""Linear layers on oneDNN's float32 matrix product while decoding on an x86 CPU (an engine twin of ``F.linear``).

On an x86 CPU the linear layers run on oneDNN's matrix product while they decode (``onednn=True``,
default in ``aiayn.decoding.search``): twice as fast as the MKL product PyTorch calls otherwise, on the
AMD CPU of these measurements. Both are float32; only the order of the sums differs, so a logit
may differ in its last bits, as it does between batch sizes. Measured with the published model,
beam 4: all 1,000 test and 1,014 val translations identical to ``onednn=False``.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import register_flop_formula

__all__ = ["onednn_linear", "onednn_available"]


@functools.cache
def onednn_available() -> bool:
    """Whether ``onednn_linear`` can run here: an x86 CPU with AVX, PyTorch built with oneDNN, and
    its product agreeing with ``F.linear`` on a small example (the op is PyTorch's own, not a
    public API: another PyTorch version may change it, and then decoding uses ``F.linear``)."""
    capability = torch.backends.cpu.get_cpu_capability()  # "AVX512", ...
    if not (
        capability.startswith("AVX")
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    ):
        return False
    g = torch.Generator().manual_seed(0)
    x, w, b = (
        torch.randn(*shape, generator=g) for shape in ((3, 8), (5, 8), (5,))
    )
    # float32 throughout, even when first asked inside an autocast block
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        try:
            with onednn_linear():
                y = F.linear(x, w, b)
        except (RuntimeError, TypeError):
            return False
        return torch.allclose(y, F.linear(x, w, b), atol=1e-5)


class onednn_linear(
    TorchFunctionMode
):  # lower case: used as ``with onednn_linear():``
    """Inside the block, compute ``F.linear`` on float32 CPU tensors with oneDNN's matrix product.

    PyTorch's CPU ``F.linear`` calls its BLAS, Intel MKL in the wheels from pypi.org, which on
    some CPUs runs far below their peak: on the AMD EPYC these chapters were measured on, oneDNN
    (the library PyTorch also ships for its CPU kernels) multiplies twice as fast. Same float32
    arithmetic, summed in another order, so the results differ by rounding, as they do between
    batch sizes. Everything else (gradients, autocast, other dtypes and devices) goes to
    ``F.linear`` unchanged. Each weight is reordered once inside the block, which must therefore
    not change the weights (decoding does not); the copies are dropped on exit.
    """

    def __init__(self) -> None:
        super().__init__()
        # (address, shape) -> (the weight, held so that its address is not
        # reused while the entry exists; the weight in oneDNN's layout)
        self.packed: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def __exit__(self, *exc_info: object) -> None:
        # no reordered weight outlives the block: parameters may change after it, and a version
        # counter would not say so (fused optimizers update in place without bumping it)
        self.packed.clear()
        return super().__exit__(*exc_info)

    def _packed(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` in oneDNN's blocked layout, made once per weight inside the block."""
        stamp = (weight.data_ptr(), tuple(weight.shape))
        if stamp not in self.packed:
            blocked = torch.ops.mkldnn._reorder_linear_weight(
                weight.detach(), None
            )
            self.packed[stamp] = (weight, blocked)
        return self.packed[stamp][1]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.linear:
            return func(*args, **kwargs)
        x, weight, bias = _linear_arguments(*args, **kwargs)
        plain = (
            x.device.type == "cpu"
            and x.dtype == weight.dtype == torch.float32
            and x.numel() > 0
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
        )
        if not plain:
            return func(*args, **kwargs)
        rows = x.reshape(-1, x.size(-1))  # (rows, in_features)
        # (rows, out_features): x Wᵀ + b, with no activation fused after it
        packed = self._packed(weight)
        y = torch.ops.mkldnn._linear_pointwise(
            rows, packed, bias, "none", [], ""
        )
        return y.view(*x.shape[:-1], weight.size(0))  # (..., out_features)


def _linear_arguments(input, weight, bias=None):
    """``F.linear``'s arguments, by position or by name."""
    return input, weight, bias


if hasattr(torch.ops.mkldnn, "_linear_pointwise"):

    @register_flop_formula(torch.ops.mkldnn._linear_pointwise)
    def _onednn_linear_flops(x_shape, *args, **kwargs) -> int:
        """``FlopCounterMode`` counts oneDNN's product as it counts ``F.linear``'s: 2 · rows · in · out.

        ``args``: the shapes of (weight, bias, attr, scalars, algorithm), or of the ``binary``
        overload's (other, weight, bias, attr).
        """
        w_shape = args[0] if len(args) == 5 else args[1]  # (out, in)
        return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]
