"""How long will a training run take on a GPU? ``estimate_minutes`` answers from ops, FLOPs and the published run.

A step of these models is mostly the host's work: launching each ATen op costs about the same
whatever the GPU, and the arithmetic is small. ``estimate_minutes(cfg, "Tesla T4", gpus=2)`` adds
the host's time per op, the FLOPs at an achievable share of the data-sheet peak, the all-reduce
between GPUs, the first epoch (every batch shape met for the first time) and the time between steps,
and prints each term. It sits above ``presets`` and ``bench``: it reads a preset's sizes and counts a
step's ops with the benchmark's tools.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .bench import count_step_ops, synthetic_batches, training_flops
from .checks import check_int
from .model import Transformer, TransformerConfig, count_parameters
from .presets import PRESETS, TrainConfig

__all__ = [
    "GPU_SPECS",
    "INTERCONNECT_GBPS",
    "ACHIEVABLE_FRACTION",
    "TimeEstimate",
    "estimate_minutes",
]


# Data-sheet figures: dense tensor-core peak (TFLOP/s, no sparsity) in the dtype ``amp="auto"`` picks
# there, and memory bandwidth (TB/s). Matched in this order against ``torch.cuda.get_device_name()``.
GPU_SPECS: dict[str, tuple[str, float, float]] = {
    "H100": ("bf16", 989.0, 3.35),  # SXM
    "A100": ("bf16", 312.0, 2.04),  # 80 GB SXM
    "L4": ("bf16", 121.0, 0.30),
    "T4": ("fp16", 65.0, 0.32),  # no native bfloat16
}

# Data-sheet GPU-to-GPU bandwidth, GB/s in each direction (half the sheets' two-way figure): NVLink 4
# (H100 SXM, 900 GB/s), NVLink 3 (A100 SXM, 600 GB/s), PCIe 4.0 x16 (L4, 64 GB/s), PCIe 3.0 x16
# (T4, 32 GB/s). A best case: two T4s on Kaggle may exchange through the host, more slowly.
INTERCONNECT_GBPS: dict[str, tuple[float, str]] = {
    "H100": (450.0, "NVLink 4"),
    "A100": (300.0, "NVLink 3"),
    "L4": (32.0, "PCIe 4.0 x16"),
    "T4": (16.0, "PCIe 3.0 x16"),
}

# The share of the data-sheet peak that this model's matrix products reach. Measured on an H100 SXM
# (torch 2.11, bfloat16), the GPU of the published run: bench.matmul_tflops(PRESETS["multi30k"].model,
# 4096, 4096), every weight product of a training step on a batch of 8,192 positions, issued back to
# back: 196 TFLOP/s (five runs, 191-198) of 989. Replace it with your own measurement on your GPU.
# Unmeasured on a T4; the same products of the multi30k-t4 model reached 29 TFLOP/s on the H100,
# too small to fill its 132 multiprocessors (a T4 has 40).
ACHIEVABLE_FRACTION = 196.0 / 989.0

# The published run of the multi30k preset (../shared/runs/multi30k-h100): one H100 SXM, bfloat16
# autocast, torch 2.11. From summary.json: 4,680 steps (40 epochs of 117) in 268.1 s of training
# steps and 388.3 s wall. From metrics.jsonl: the first epoch's steps took 65.2 s (every one about
# 0.5 s: shapes met for the first time), the other 4,563 steps 202.9 s (44.5 ms a step); 443,053
# target tokens an epoch. Source tokens (457,475 an epoch, <eos> included) counted with the run's
# tokenizer.model on the 29,000 training pairs.
_REFERENCE = dict(
    device="H100", epochs=40, steps=4680, train_s=268.1, wall_s=388.3, max_tokens=8192,
    first_epoch_s=65.2, steady_steps=4563, steady_s=202.9, pairs=29_000,
    src_tokens=457_475, tgt_tokens=443_053,
)  # fmt: skip

# ATen ops of one training step as CUDA dispatches them: bench.count_step_ops on the H100 (torch 2.11,
# this model code, fused Adam). The CPU dispatches more for the same step (dropout as four ops,
# attention on the math path: 2,699 for multi30k in bfloat16), so these are counted on the GPU.
_CUDA_OPS_PER_STEP = {
    ("multi30k", "bf16"): 2145,
    ("multi30k-t4", "fp16"): 2157,
}


@dataclass(frozen=True)
class TimeEstimate:
    """``estimate_minutes``'s answer: the terms of the time model, each in minutes, and their arithmetic.

    ``minutes`` = ``host_min`` + ``arithmetic_min`` + ``allreduce_min`` (the steps) +
    ``first_epoch_min`` + ``between_min``. An estimate, not a measurement.
    """

    device: str
    gpus: int
    steps: float  # per GPU
    ops_per_step: int
    per_op_us: float
    tflop_per_step: float
    achievable_tflops: float
    allreduce_ms: float  # per step
    host_min: float
    arithmetic_min: float
    allreduce_min: float
    first_epoch_min: float
    between_min: float
    lines: tuple[str, ...]

    @property
    def minutes(self) -> float:
        return (
            self.host_min
            + self.arithmetic_min
            + self.allreduce_min
            + self.first_epoch_min
            + self.between_min
        )

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _spec(device_name: str) -> tuple[str, tuple[str, float, float]]:
    for key, spec in GPU_SPECS.items():
        if key.lower() in device_name.lower():
            return key, spec
    raise ValueError(
        f"no data-sheet figures for {device_name!r}; known: {', '.join(GPU_SPECS)}"
    )


@functools.lru_cache(maxsize=16)
def _count_ops(model: TransformerConfig, amp: str | None) -> int:
    """``bench.count_step_ops`` of the model on the CPU, on a batch of 8 pairs of 16 tokens."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp or "")
    torch.manual_seed(0)
    batch = synthetic_batches(1, 8 * 34, 16, model.tgt_vocab_size)[0]
    count = count_step_ops(Transformer(model), batch, dtype, fused_adam=True)
    return count["total"]


def _ops_per_step(
    model: TransformerConfig, amp: str | None
) -> tuple[int, str]:
    """ATen ops of one training step and where the figure comes from."""
    for (name, counted), n in _CUDA_OPS_PER_STEP.items():
        if PRESETS[name].model == model and amp == counted:
            return n, f"count_step_ops of {name} on the H100"
    n = _count_ops(model, amp)
    return n, "count_step_ops on the CPU: more than CUDA dispatches"


def estimate_minutes(
    cfg: TrainConfig,
    device_name: str,
    *,
    gpus: int = 1,
    per_op_us: float | None = None,
) -> TimeEstimate:
    """Estimate the training time of ``cfg`` on ``gpus`` GPUs called ``device_name`` (an estimate only).

    A step is mostly the host's work: launching each ATen op of the step costs the host about the
    same whatever the GPU, and this model's arithmetic is small. So per step

        time = ops a step × per-op cost + FLOPs a step ÷ achievable FLOP/s (+ an all-reduce)

    and in all: steps × that + the first epoch's warm-up + the time between steps. Where each figure
    comes from:

    - **ops a step**: ``bench.count_step_ops``, as CUDA dispatches them (``_CUDA_OPS_PER_STEP``,
      counted on the H100 for the presets: 2,145 for ``multi30k``); other models are counted on the
      CPU, which dispatches more ops for the same step (the line says so).
    - **per-op cost**: from the published H100 run: (its steady step, 44.5 ms, − its FLOPs a step ÷
      the H100's achievable FLOP/s) ÷ its ops a step, about 19 µs. That is the cost on the H100
      machine's host CPU; Colab's and Kaggle's hosts are likely slower, so on a T4 the step is
      likely longer. Pass ``per_op_us`` if you measured your own.
    - **FLOPs a step**: ``bench.training_flops`` of an epoch of Multi30k (29,000 pairs of 15.8 source
      and 15.3 target tokens on average, the run's 8k BPE) ÷ steps an epoch.
    - **achievable FLOP/s**: the data sheet's peak (``GPU_SPECS``) × ``ACHIEVABLE_FRACTION``, 0.198,
      measured on the H100 for this model's products (``bench.matmul_tflops``).
    - **steps**: 117 an epoch at 8,192 tokens a batch, scaled by 8,192 ÷ ``max_tokens`` (228 at
      4,096 when the batches are made; the estimate says 234). With ``gpus`` > 1 (``torchrun``, see
      ``distributed``) each GPU takes every ``gpus``-th batch of an epoch with the same
      ``max_tokens``: ``gpus`` times fewer steps each, at the same host cost and FLOPs a step, plus
      an **all-reduce** of the float32 gradients a step: a ring moves 2 (N − 1) / N × their bytes
      through each GPU's link (``INTERCONNECT_GBPS``, data sheet), added as if it did not overlap
      the backward pass.
    - **first epoch**: in the H100 run every step of the first epoch took 0.51 s more than a steady
      one (65.2 s for 117 steps; its batches' shapes were new), counted here per step of a GPU's
      first epoch.
    - **between steps**: validation, checkpoints and data preparation, 120.2 s over 40 epochs in the
      H100 run (3.0 s an epoch), per epoch.

    The H100 ran in bfloat16 and no float16 run was measured.

    Args:
        cfg: the run's config (``epochs``, ``max_steps``, ``max_tokens``, ``train_subset``, ``amp``
            and the model are used).
        device_name: a GPU name containing a key of ``GPU_SPECS`` (``torch.cuda.get_device_name()``).
        gpus: processes of ``torchrun``, one per GPU.
        per_op_us: the host's cost per op in µs, if measured (default: the H100 run's).
    """
    check_int("gpus", gpus, minimum=1)
    if per_op_us is not None and not per_op_us > 0:
        raise ValueError(f"per_op_us must be positive, got {per_op_us!r}")
    ref = _REFERENCE
    key, (dtype, peak, _) = _spec(device_name)
    amp = dtype if cfg.amp == "auto" else cfg.amp
    if amp != dtype:
        raise ValueError(
            f"GPU_SPECS holds the {key}'s {dtype} peak, but cfg.amp={cfg.amp!r} trains in "
            f"{amp or 'float32'}: estimate with amp='auto' or {dtype!r}"
        )
    published = PRESETS["multi30k"].model
    ref_epochs, ref_steps = ref["epochs"], ref["steps"]
    ref_per_epoch = ref_steps / ref_epochs  # 117

    def tflop_per_epoch(model: TransformerConfig) -> float:
        s = ref["src_tokens"] / ref["pairs"]  # mean lengths, <eos> included
        t = ref["tgt_tokens"] / ref["pairs"]
        return ref["pairs"] * training_flops(model, [s], [t]) / 1e12

    # the per-op cost of the H100 run's host
    _, (_, ref_peak, _) = _spec(ref["device"])
    ref_achievable = ref_peak * ACHIEVABLE_FRACTION  # TFLOP/s
    ref_step_s = ref["steady_s"] / ref["steady_steps"]  # 44.5 ms
    ref_tflop = tflop_per_epoch(published) / ref_per_epoch
    ref_ops, _ = _ops_per_step(published, "bf16")
    host_us = 1e6 * (ref_step_s - ref_tflop / ref_achievable) / ref_ops
    first_s = (
        ref["first_epoch_s"] - ref_per_epoch * ref_step_s
    ) / ref_per_epoch
    between_s = (ref["wall_s"] - ref["train_s"]) / ref_epochs  # 3.0 s
    per_op = host_us if per_op_us is None else per_op_us

    # this run
    data = (
        1.0
        if cfg.train_subset is None
        else min(cfg.train_subset, ref["pairs"]) / ref["pairs"]
    )
    per_epoch = (
        ref_per_epoch * ref["max_tokens"] / cfg.max_tokens * data
    )  # one GPU
    epochs = float(cfg.epochs)
    if cfg.max_steps is not None:
        epochs = min(epochs, cfg.max_steps * gpus / per_epoch)
    steps = epochs * per_epoch / gpus  # per GPU
    first_steps = min(epochs, 1.0) * per_epoch / gpus
    ops, ops_source = _ops_per_step(cfg.model, amp)
    tflop = tflop_per_epoch(cfg.model) * data / per_epoch
    achievable = peak * ACHIEVABLE_FRACTION
    with torch.device("meta"):  # sizes only, no memory
        grad_mb = 4 * count_parameters(Transformer(cfg.model)) / 1e6
    link, link_name = INTERCONNECT_GBPS[key]
    ring = 2 * (gpus - 1) / gpus
    allreduce_ms = ring * grad_mb / link  # MB / (GB/s) = ms
    host_ms, arith_ms = ops * per_op / 1e3, 1e3 * tflop / achievable
    step_ms = host_ms + arith_ms + allreduce_ms
    host_min = steps * host_ms / 60e3
    arith_min = steps * arith_ms / 60e3
    allreduce_min = steps * allreduce_ms / 60e3
    first_min = first_steps * first_s / 60
    between_min = epochs * between_s / 60
    total = host_min + arith_min + allreduce_min + first_min + between_min
    where = f"{gpus} x {key}" if gpus > 1 else key

    def row(label: str, arithmetic: str, value: str) -> str:
        return f"  {label:<13}{arithmetic:<44}{value:>12}"

    per_op_note = (
        ["    us an op: as you measured"]
        if per_op_us is not None
        else [
            f"    us an op: the H100 run's host, ({1e3 * ref_step_s:.1f} ms a steady step",
            f"    - {1e3 * ref_tflop / ref_achievable:.1f} ms of FLOPs) / {ref_ops:,} ops; "
            "a slower host costs more",
        ]
    )
    lines = [
        f"estimate for {cfg.name} on {where} ({amp or 'fp32'}), not measured:",
        row("steps a GPU", f"{epochs:g} epochs x {per_epoch:.0f}"
            + (f" / {gpus} GPUs" if gpus > 1 else ""), f"{steps:,.0f}"),
        row("host", f"{ops:,} ops x {per_op:.1f} us", f"{host_ms:.1f} ms"),
        f"    ops: {ops_source}",
        *per_op_note,
        row("arithmetic", f"{tflop:.3f} TFLOP / ({peak:g} x {ACHIEVABLE_FRACTION:.3f}) TFLOP/s",
            f"{arith_ms:.1f} ms"),
    ]  # fmt: skip
    if gpus > 1:
        lines.append(row("all-reduce", f"{ring:g} x {grad_mb:.1f} MB / {link:g} GB/s ({link_name})",
                         f"{allreduce_ms:.1f} ms"))  # fmt: skip
    lines += [
        row("a step", "", f"{step_ms:.1f} ms"),
        row("all steps", f"{steps:,.0f} x {step_ms:.1f} ms", f"{host_min + arith_min + allreduce_min:.1f} min"),
        row("first epoch", f"{first_steps:.0f} steps x {first_s:.2f} s more (H100)", f"{first_min:.1f} min"),
        row("between", f"{epochs:g} epochs x {between_s:.1f} s (H100)", f"{between_min:.1f} min"),
        row("estimate", "", f"{total:.1f} min"),
    ]  # fmt: skip
    return TimeEstimate(
        key, gpus, steps, ops, per_op, tflop, achievable, allreduce_ms,
        host_min, arith_min, allreduce_min, first_min, between_min, tuple(lines),
    )  # fmt: skip
