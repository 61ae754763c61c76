"""Decoding in lower precision on a CPU: an int8 copy of a model, and whether bfloat16 is native.

Both change a few translations, so ``aiayn.decoding.translate.translate`` uses them only when asked
(``quantize="int8"``, ``amp_dtype=torch.bfloat16``); ``tools/measure_decoding.py`` measures them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from ..model import Transformer

__all__ = ["int8_copy", "cpu_has_native_bf16"]


def int8_copy(model: Transformer) -> Transformer:
    """A copy of ``model`` whose ``nn.Linear`` layers compute in int8; ``model`` itself is unchanged.

    PyTorch's dynamic quantization (``torch.ao.quantization.quantize_dynamic``): each weight
    matrix is stored as int8 with one scale per output row, and each product quantizes its input
    on the fly, row by row. Embeddings, LayerNorms and the attention weights stay float32. CPU
    only. ``torch.ao.quantization`` is deprecated in favour of torchao (not a dependency of this
    package) and still works in the PyTorch we test with; its deprecation warnings are silenced.

    Args:
        model: a ``Transformer`` on the CPU.

    Returns:
        The int8 copy, in eval mode, for decoding only (it cannot be trained).
    """
    from torch.ao.quantization import (
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    device = next(model.parameters()).device
    if device.type != "cpu":
        raise ValueError(
            f"quantize='int8' runs on the CPU only, but the model is on {device}: "
            "leave quantize=None there (or move the model with model.to('cpu'))"
        )
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"torch\.ao\.quantization is deprecated"
        )
        warnings.filterwarnings(
            "ignore", message=r"torch\.quantize_per_\w+, "
        )
        return quantize_dynamic(  # a deep copy: the caller's model is not touched
            model,
            {nn.Linear: per_channel_dynamic_qconfig},
            dtype=torch.qint8,
        )


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (x86 AVX512-BF16 or AMX, ARM BF16).

    Read from the flags of ``/proc/cpuinfo``; where there is none (macOS, Windows) the answer is
    ``False``. Without native support bfloat16 is emulated, and slower than float32.
    """
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):  # x86, ARM
            flags.update(value.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
