"""How fast does it train? Our model, explicit to compiled, against ``nn.Transformer``, on the same batches.

    python -m aiayn.bench                       # multi30k sizes on CUDA, a tiny model on CPU
    python -m aiayn.bench --steps 40 --max-tokens 8192 --json bench.json
    python -m aiayn.bench --contenders "ours (explicit)" "ours (set_fast)" --rounds 9

Every contender (``contenders``) runs the same training loop on the same batches, from the same
weights, with the same dropout draws: our ``Transformer`` explicit (as the chapters explain it),
fused, on every fast path (``set_fast``) and compiled, and ``nn.Transformer`` eager and compiled.
``CONTENDERS`` (the default of ``run_bench``) are the first two, ``nn.Transformer``'s eager run and
none other; ``ALL_CONTENDERS`` (the command's default) has them all.

**The run** (``run``). ``run_bench`` makes the batches (Multi30k's, as training sees them, or
synthetic ones), sets up, counts and warms up every contender in turn, times them in rounds and
returns one row each; ``format_table`` prints the rows.

**Warm-up, then interleaved rounds** (``timing``). Each contender runs ``warmup`` passes, every
step timed alone (the first step of each batch shape, and the compilation, reported apart); then
``rounds`` rounds, each one steady pass of every contender, in an order that rotates by one place a
round. Its speed against the first contender is the median of the per-round ratios, with their range.
Per contender: milliseconds per step, target tokens per second, achieved TFLOP/s and MFU. What
``torch.compile`` warns of (graph breaks: parts of the step it runs eagerly) comes in one line under
the table.

**Ops per step** (``op_counts``). ``count_step_ops`` counts the ATen operator calls of one training
step, a measure of launch overhead that does not depend on the machine's speed. Compiled contenders
are not counted: their kernels are no ATen calls.

**Model FLOPs and MFU** (``flops``). ``training_flops`` counts the multiply-adds of every matrix
product of a step, forward and backward, over the real tokens only; MFU is the achieved FLOP/s ÷ the
device's peak dense bfloat16 FLOP/s (``PEAK_BF16_TFLOPS``, or ``--peak-tflops``).

**Peak memory** (``memory``). On CUDA, what a contender's set-up, warm-up and first timed pass
allocated at the most, less what the other contenders hold; on a CPU, the process's peak.

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

from .command import main
from .compile_warnings import collect_compile_warnings, compile_note
from .contenders import ALL_CONTENDERS, CONTENDERS, TorchTransformer
from .flops import (
    PEAK_BF16_TFLOPS,
    matmul_tflops,
    peak_tflops,
    training_flops,
)
from .op_counts import CountOps, count_step_ops
from .run import (
    format_table,
    multi30k_batches,
    run_bench,
    synthetic_batches,
)
from .timing import pass_order, ratio_summary, timed_rounds

__all__ = [
    "PEAK_BF16_TFLOPS",
    "peak_tflops",
    "training_flops",
    "matmul_tflops",
    "TorchTransformer",
    "CountOps",
    "count_step_ops",
    "synthetic_batches",
    "multi30k_batches",
    "CONTENDERS",
    "ALL_CONTENDERS",
    "pass_order",
    "timed_rounds",
    "ratio_summary",
    "run_bench",
    "format_table",
    "collect_compile_warnings",
    "compile_note",
    "main",
]
