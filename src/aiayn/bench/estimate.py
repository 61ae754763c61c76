"""How long will a training run take on a GPU? ``estimate_minutes`` answers from ops, FLOPs and measured runs.

A step of these models is mostly the host's work: launching each ATen op costs about the same
whatever the GPU, and the arithmetic is small. ``estimate_minutes(cfg, "Tesla T4", gpus=2)`` adds
the host's time per op, the FLOPs at an achievable share of the data-sheet peak, the all-reduce
between GPUs, the first epoch (every batch shape met for the first time), the start-up and the time
between steps, and prints each term. The times it starts from are measurements of the train
command as it is now, read from the package's ``results`` folder: a step on an H100
(``torchrun.h100.json``) and a whole 4-epoch run on an H200 (``gpu_check.h200.json``). It sits above
``presets`` and ``bench``: it reads a preset's sizes and counts a step's ops with the benchmark's
tools.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.resources
import json
from dataclasses import dataclass
from typing import Any

import torch

from ..checks import check_int
from ..engine.switch import set_fast
from ..model import Transformer, TransformerConfig, count_parameters
from ..runs.presets import PRESETS, TrainConfig
from . import count_step_ops, synthetic_batches, training_flops

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
    "H200": (
        "bf16",
        989.0,
        4.8,
    ),  # SXM: the H100's tensor cores, more memory
    "A100": ("bf16", 312.0, 2.04),  # 80 GB SXM
    "L4": ("bf16", 121.0, 0.30),
    "T4": ("fp16", 65.0, 0.32),  # no native bfloat16
}

# Data-sheet GPU-to-GPU bandwidth, GB/s in each direction (half the sheets' two-way figure): NVLink 4
# (H100 and H200 SXM, 900 GB/s), NVLink 3 (A100 SXM, 600 GB/s), PCIe 4.0 x16 (L4, 64 GB/s), PCIe
# 3.0 x16 (T4, 32 GB/s). A best case: two T4s on Kaggle may exchange through the host, more slowly.
INTERCONNECT_GBPS: dict[str, tuple[float, str]] = {
    "H100": (450.0, "NVLink 4"),
    "H200": (450.0, "NVLink 4"),
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

# An epoch of Multi30k as the published run (../shared/runs/multi30k-h100) made it: 117 batches of
# at most 8,192 tokens a batch, 443,053 target tokens (from its summary.json and metrics.jsonl; 40
# epochs, 4,680 steps), 457,475 source tokens (<eos> included, counted with its tokenizer.model on
# the 29,000 training pairs). Sizes of the data, not times: those come from _measured().
_EPOCH = dict(
    epochs=40, steps=4680, max_tokens=8192, pairs=29_000,
    src_tokens=457_475, tgt_tokens=443_053,
)  # fmt: skip

# The preset whose step the H100 timed and counted (bfloat16, the train command's set_fast path).
_TIMED = "multi30k"


def _results(name: str) -> dict[str, Any]:
    folder = importlib.resources.files("aiayn") / "results"
    return json.loads((folder / name).read_text())


def _row(rows: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(row for row in rows if row["name"] == name)


@functools.lru_cache(maxsize=1)
def _measured() -> dict[str, Any]:
    """The times the estimate starts from, read from the measured results the package ships.

    - A step (``torchrun.h100.json``, one H100 SXM, torch 2.11): ``python -m aiayn.bench --device
      cuda``'s ``ours (set_fast)``, the path the train command trains on, on Multi30k batches of
      8,192 tokens in bfloat16 with fused Adam. With cuDNN's attention off, as the train command
      runs (``recipes._attention_kernels``): the median step and the first step of each of the 50
      batch shapes; the ops a step, counted by the same command.
    - A whole run (``gpu_check.h200.json``, one H200, torch 2.11): ``tools/gpu_check.py``'s 4
      epochs of ``multi30k`` by the train command, timed by phase: the start-up before the first
      step; and between steps the host's batches, validation and checkpoint writes.
    """
    h100 = _results("torchrun.h100.json")
    step = _row(h100["cudnn_attention"]["off"], "ours (set_fast)")
    ops = _row(h100["bench"]["rows"], "ours (set_fast)")["ops_per_step"]
    h200 = _results("gpu_check.h200.json")
    run = next(r for r in h200["promises"] if r["run"] == "multi30k-4")
    phases = run["phases_s"]
    between = (
        phases["batches"] + phases["validation"] + phases["checkpoints"]
    )
    return dict(
        step_device=h100["device_name"], step_ms=step["step_ms"],
        first_shape_ms=step["first_shape_ms"], ops=ops,
        run_device=h200["device_name"], run_epochs=run["epochs"],
        run_wall_s=run["wall_s"], run_steps_s=phases["steps"],
        start_up_s=phases["start_up"], between_s=between / run["epochs"],
    )  # fmt: skip


@dataclass(frozen=True)
class TimeEstimate:
    """``estimate_minutes``'s answer: the terms of the time model, each in minutes, and their arithmetic.

    ``minutes`` = ``host_min`` + ``arithmetic_min`` + ``allreduce_min`` (the steps) +
    ``first_epoch_min`` + ``start_min`` + ``between_min``. An estimate, not a measurement.
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
    start_min: float
    between_min: float
    lines: tuple[str, ...]

    @property
    def minutes(self) -> float:
        return (
            self.host_min
            + self.arithmetic_min
            + self.allreduce_min
            + self.first_epoch_min
            + self.start_min
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


_WIDTHS = (
    "src_vocab_size", "tgt_vocab_size", "d_model", "d_ff", "h", "max_len",
    "d_k", "d_v",
)  # fmt: skip


def _same_path(model: TransformerConfig) -> bool:
    """Whether ``model`` steps through the same ops as the timed preset's: it differs in widths only."""
    timed = PRESETS[_TIMED].model
    widths = {name: getattr(timed, name) for name in _WIDTHS}
    dropout = timed.dropout if model.dropout > 0 else 0.0
    return dataclasses.replace(model, **widths, dropout=dropout) == timed


def _narrow(model: TransformerConfig) -> TransformerConfig:
    """``model`` with its layers and heads, 8 wide a head, ``d_ff`` 16 and 64 ids: the same ops."""
    return dataclasses.replace(
        model, d_model=8 * model.h, d_ff=16, d_k=None, d_v=None,
        src_vocab_size=64, tgt_vocab_size=64,
    )  # fmt: skip


@functools.lru_cache(maxsize=16)
def _cpu_ops(model: TransformerConfig, amp: str | None) -> int:
    """``bench.count_step_ops`` on the CPU, on the train command's path, a batch of 8 pairs of 16.

    The count depends on the path, not the widths, so it is made on ``_narrow(model)``: a step of
    the full model in float16 takes the CPU seconds (tests/test_recipes.py checks the two agree).
    """
    return _count_ops(_narrow(model), amp)


def _count_ops(model: TransformerConfig, amp: str | None) -> int:
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp or "")
    torch.manual_seed(0)
    batch = synthetic_batches(1, 8 * 34, 16, model.tgt_vocab_size)[0]
    network = Transformer(model)
    if model.fused_attention:  # as the train command trains it
        set_fast(network)
    count = count_step_ops(network, batch, dtype, fused_adam=True)
    return count["total"]


def _ops_per_step(
    model: TransformerConfig, amp: str | None
) -> tuple[int, str]:
    """ATen ops of one training step on CUDA and where the figure comes from.

    The count depends on the code path, not on the widths or the batch. For a model that differs
    from the timed preset in widths only: the H100's count, plus the ops the CPU counts more for
    its ``amp`` than for bfloat16 (float16's gradient scaler: 12). Others are counted on the CPU,
    which dispatches more for the same step (dropout as four ops, attention on the math path).
    """
    cuda = _measured()["ops"]
    if not _same_path(model):
        return _cpu_ops(
            model, amp
        ), "count_step_ops on the CPU: more than CUDA"
    extra = _cpu_ops(model, amp) - _cpu_ops(PRESETS[_TIMED].model, "bf16")
    source = f"the H100's count for {_TIMED} (bf16)"
    if extra:
        source += f", {extra:+d} for {amp or 'fp32'} (CPU)"
    return cuda + extra, source


def _time(minutes: float) -> str:
    return f"{minutes:.1f} min" if minutes >= 1 else f"{60 * minutes:.1f} s"


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

    and in all: steps × that + the first epoch's extra + the start-up + the time between steps.
    Where each figure comes from (``_measured`` reads the measured ones from ``results``):

    - **ops a step**: ``bench.count_step_ops`` on the train command's path (``set_fast``), as CUDA
      dispatches it: 1,326 for ``multi30k`` in bfloat16, counted on the H100; a model that differs
      in widths only adds what the CPU counts more for its dtype; other models are counted on the
      CPU, which dispatches more for the same step (the line says so).
    - **per-op cost**: the H100's step of the train command's path (``python -m aiayn.bench``, 26.9
      ms with cuDNN's attention off, as the train command runs) less its FLOPs at the achievable
      rate, ÷ its ops: about 18 µs. That is the cost on the H100 machine's host CPU; Colab's and
      Kaggle's hosts are likely slower, so on a T4 the step is likely longer. Pass ``per_op_us`` if
      you measured your own.
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
    - **first epoch**: the first step of each batch shape took 3.3 ms more than a steady one on the
      H100 (the bench's 50 shapes), counted for each step of a GPU's first epoch.
    - **start-up** and **between steps**: the H200's 4-epoch run of ``multi30k`` by the train
      command (``tools/gpu_check.py``): 1.2 s before its first step; the host's batches, validation
      and checkpoint writes, 0.45 s an epoch. Host and disk work, taken as the same on other GPUs.

    Not in it: ``--cuda-graphs`` (never timed on a GPU), and runs sharing a GPU. The published H100
    run (388 s wall) trained before the train command's fast paths: 2,145 ops a step, cuDNN's
    attention (0.5 s for each first shape), and 3.0 s an epoch between steps. The H100 ran in
    bfloat16 and no float16 run was measured.

    Args:
        cfg: the run's config (``epochs``, ``max_steps``, ``max_tokens``, ``train_subset``, ``amp``
            and the model are used).
        device_name: a GPU name containing a key of ``GPU_SPECS`` (``torch.cuda.get_device_name()``).
        gpus: processes of ``torchrun``, one per GPU.
        per_op_us: the host's cost per op in µs, if measured (default: the H100's).
    """
    check_int("gpus", gpus, minimum=1)
    if per_op_us is not None and not per_op_us > 0:
        raise ValueError(f"per_op_us must be positive, got {per_op_us!r}")
    key, (dtype, peak, _) = _spec(device_name)
    amp = dtype if cfg.amp == "auto" else cfg.amp
    if amp != dtype:
        raise ValueError(
            f"GPU_SPECS holds the {key}'s {dtype} peak, but cfg.amp={cfg.amp!r} trains in "
            f"{amp or 'float32'}: estimate with amp='auto' or {dtype!r}"
        )
    m, ref = _measured(), _EPOCH
    ref_per_epoch = ref["steps"] / ref["epochs"]  # 117

    def tflop_per_epoch(model: TransformerConfig) -> float:
        s = ref["src_tokens"] / ref["pairs"]  # mean lengths, <eos> included
        t = ref["tgt_tokens"] / ref["pairs"]
        return ref["pairs"] * training_flops(model, [s], [t]) / 1e12

    # the per-op cost of the H100's host: its step less its arithmetic
    step_key, (_, step_peak, _) = _spec(m["step_device"])
    timed_ms = (
        1e3
        * tflop_per_epoch(PRESETS[_TIMED].model)
        / ref_per_epoch
        / (step_peak * ACHIEVABLE_FRACTION)
    )
    host_us = 1e3 * (m["step_ms"] - timed_ms) / m["ops"]
    first_s = (m["first_shape_ms"] - m["step_ms"]) / 1e3
    run_key, _ = _spec(m["run_device"])
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
    start_min = m["start_up_s"] / 60
    between_min = epochs * m["between_s"] / 60
    steps_min = host_min + arith_min + allreduce_min
    total = steps_min + first_min + start_min + between_min
    where = f"{gpus} x {key}" if gpus > 1 else key

    def row(label: str, arithmetic: str, value: str) -> str:
        return f"  {label:<13}{arithmetic:<44}{value:>12}"

    per_op_note = (
        ["    us an op: as you measured"]
        if per_op_us is not None
        else [
            f"    us an op: the {step_key}'s host, ({m['step_ms']:.1f} ms a step",
            f"    - {timed_ms:.1f} ms of FLOPs) / {m['ops']:,} ops; "
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
        row("all steps", f"{steps:,.0f} x {step_ms:.1f} ms", _time(steps_min)),
        row("first epoch", f"{first_steps:.0f} steps x {1e3 * first_s:.1f} ms more ({step_key})",
            _time(first_min)),
        row("start-up", f"once ({run_key})", _time(start_min)),
        row("between", f"{epochs:g} epochs x {m['between_s']:.2f} s ({run_key})", _time(between_min)),
        row("estimate", "", _time(total)),
    ]  # fmt: skip
    return TimeEstimate(
        key, gpus, steps, ops, per_op, tflop, achievable, allreduce_ms, host_min,
        arith_min, allreduce_min, first_min, start_min, between_min, tuple(lines),
    )  # fmt: skip
