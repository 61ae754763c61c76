"""How much arithmetic is a training step? Its FLOPs, the device's peak, and what the products achieve.

**Model FLOPs.** ``training_flops`` counts the multiply-adds of every matrix product, twice (a multiply
and an add) for the forward pass and three times that for forward plus backward (the backward pass
computes two products per forward one: the gradients of the input and of the weight). Per layer:

* each source token: the encoder's four attention projections and its feed-forward network, and the
  decoder's cross-attention key and value projections;
* each target token: the decoder's self-attention projections, the cross-attention query and output
  projections and the feed-forward network; then the generator, d_model · V;
* each (query, key) pair: h · (d_k + d_v) for QKᵀ and for the weighted sum of V, with the pairs
  ΣS² (encoder), ΣT² (decoder self-attention, counted whole as the kernels compute it) and ΣT·S (cross).

Only real tokens count, not padding, so MFU measures useful work. With P_matmul the weights used in
products this is about 6 · P_matmul per token plus 12 · N · d_model per attended pair and layer (for
d_k = d_v = d_model / h), the usual "6N + attention" estimate. Embedding lookups, softmax, layer norm and
the optimizer are left out, as usual. ``tests/test_recipes.py`` checks the count against
``torch.utils.flop_counter.FlopCounterMode``.

**MFU** = achieved FLOP/s ÷ the device's peak dense bfloat16 FLOP/s, taken from ``PEAK_BF16_TFLOPS``
by device name, or given with ``--peak-tflops``; on a CPU it is reported (n/a) only with ``--peak-tflops``.

``matmul_tflops`` times the same products alone, back to back on the device: the speed the kernels
reach on this model's shapes, with no host time between them.

    S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from ..checks import check_int, resolve_device
from ..model import TransformerConfig
from .timing import synchronize

__all__ = [
    "PEAK_BF16_TFLOPS",
    "peak_tflops",
    "training_flops",
    "matmul_tflops",
]

# Dense bfloat16 peaks (TFLOP/s, without sparsity) from NVIDIA's data sheets, matched in this order
# against torch.cuda.get_device_name(): the H100 SXM reports itself as "NVIDIA H100 80GB HBM3".
PEAK_BF16_TFLOPS: dict[str, float] = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,  # SXM
    "H200": 989.0,
    "A100": 312.0,
}


def peak_tflops(device_name: str) -> float | None:
    """The dense bfloat16 peak of a GPU called ``device_name`` (``None`` if not in ``PEAK_BF16_TFLOPS``)."""
    for key, value in PEAK_BF16_TFLOPS.items():
        if key.lower() in device_name.lower():
            return value
    return None


def training_flops(
    config: TransformerConfig,
    src_lengths: Sequence[int],
    tgt_lengths: Sequence[int],
) -> float:
    """FLOPs of one training step (forward and backward) over sentences of these lengths (see the module docstring).

    Args:
        config: the model's sizes.
        src_lengths: S_i, real source tokens of each sentence (``<eos>`` included).
        tgt_lengths: T_i, real target tokens of each sentence.
    """
    if len(src_lengths) != len(tgt_lengths):
        raise ValueError(
            f"expected one target length per source length, got {len(src_lengths)} and {len(tgt_lengths)}"
        )
    d, h, N, V = config.d_model, config.h, config.N, config.tgt_vocab_size
    d_k = config.d_k or d // h
    d_v = config.d_v or d // h
    # multiply-adds per token of one q or k projection, one v or o projection
    qk, vo = d * h * d_k, d * h * d_v
    ffn = 2 * d * config.d_ff
    src, tgt = sum(src_lengths), sum(tgt_lengths)
    macs = N * src * (2 * qk + 2 * vo + ffn)  # encoder layers
    # decoder: self-attention, cross q and o, FFN
    macs += N * tgt * (2 * qk + 2 * vo + qk + vo + ffn)
    # decoder: cross-attention k and v, on the encoder output
    macs += N * src * (qk + vo)
    macs += tgt * d * V  # generator
    pairs = sum(
        s * s + t * t + t * s
        for s, t in zip(src_lengths, tgt_lengths, strict=True)
    )
    macs += N * pairs * h * (d_k + d_v)  # QKᵀ and weights · V
    return 3 * 2 * macs


def matmul_tflops(
    config: TransformerConfig,
    src_positions: int,
    tgt_positions: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.bfloat16,
    repeats: int = 20,
) -> float:
    """Achieved TFLOP/s of the weight products of one training step, timed without the host.

    Every linear layer of the model (the encoder's on ``src_positions`` rows, the decoder's on
    ``tgt_positions``, the cross-attention's k and v on the source) and the generator, each as its
    three products: the forward X·W and the backward dY·Wᵀ and Xᵀ·dY. They are issued back to
    back, ``repeats`` times, between two synchronisations: the kernels' own speed on this model's
    shapes, with no host time between them. ``estimate.ACHIEVABLE_FRACTION`` is this figure ÷ the
    data-sheet peak.

    Args:
        config: the model's sizes.
        src_positions, tgt_positions: padded positions of one batch, B·S and B·T.
        device: default CUDA when available; dtype: of the products (bfloat16, as autocast).
    """
    device = resolve_device(device)
    check_int("repeats", repeats, minimum=1)
    d, h, N, d_ff = config.d_model, config.h, config.N, config.d_ff
    qk = h * (config.d_k or d // h)
    vo = h * (config.d_v or d // h)
    S, T = src_positions, tgt_positions
    encoder = [
        (S, d, qk),
        (S, d, qk),
        (S, d, vo),
        (S, vo, d),
        (S, d, d_ff),
        (S, d_ff, d),
    ]
    decoder = [(T, d, qk), (T, d, qk), (T, d, vo), (T, vo, d),  # self-attention
               (T, d, qk), (S, d, qk), (S, d, vo), (T, vo, d),  # cross: q, k, v, o
               (T, d, d_ff), (T, d_ff, d)]  # fmt: skip
    shapes = N * (encoder + decoder) + [(T, d, config.tgt_vocab_size)]
    tensors: dict[tuple[int, int, int], tuple[torch.Tensor, ...]] = {}
    for M, K, n in set(shapes):  # X (M, K), W (K, n), dY (M, n)
        tensors[M, K, n] = tuple(
            torch.randn(*shape, device=device, dtype=dtype)
            for shape in ((M, K), (K, n), (M, n))
        )
    products = []
    for shape in shapes:
        x, w, dy = tensors[shape]
        products += [(x, w), (dy, w.T), (x.T, dy)]
    flops = 3 * 2 * sum(M * K * n for M, K, n in shapes)

    def run() -> None:
        for a, b in products:
            torch.mm(a, b)

    run()  # kernels chosen
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    synchronize(device)
    return flops * repeats / (time.perf_counter() - start) / 1e12
