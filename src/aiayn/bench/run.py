"""One run of the benchmark: the batches, every contender set up and warmed up, the timed rounds, the rows.

**Batches.** By default the first ``steps`` batches of a shuffled epoch of the Multi30k training
pairs, encoded with the joint BPE tokenizer of ``vocab_size`` pieces (``data.train_tokenizer``,
cached) and grouped by ``data.make_batches`` within ``max_tokens``, as training sees them: every
batch has its own shape. When the data cannot be found (or with ``data="synthetic"``), random
pairs of ``seq_len / 2 .. seq_len`` tokens stand in, and every row says ``data: synthetic``.

**Set-up.** Each contender in turn gets its own copy of the weights (``contenders.make_contender``);
its ops are counted (``op_counts.count_step_ops``, eager contenders only), it is compiled if it is a
compiled one, and it runs its warm-up passes (``timing.warm_up``), its peak memory measured all
along (``memory``). All then stay on the device for the interleaved rounds (``timing.timed_rounds``),
whose passes give each contender's row: its median pass, its speed against the first, FLOPs and MFU
(``flops``), and what ``torch.compile`` warned of (``compile_warnings``).

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..checks import check_int, resolve_device
from ..data.multi30k import (
    BOS,
    EOS,
    PAD,
    DatasetUnavailable,
    collate,
    data_dir,
    encode_pairs,
    load_multi30k,
    make_batches,
    train_tokenizer,
)
from ..model import Transformer, TransformerConfig, count_parameters
from ..runs.presets import PRESETS
from ..training.batches import Batch
from ..training.step import amp_dtype_for
from .compile_warnings import collect_compile_warnings
from .contenders import (
    ALL_CONTENDERS,
    CONTENDERS,
    Trainer,
    make_contender,
)
from .flops import peak_tflops, training_flops
from .memory import allocated_bytes, peak_memory_mib, start_memory
from .op_counts import count_step_ops
from .timing import (
    batch_shape,
    ratio_summary,
    timed_pass,
    timed_rounds,
    warm_up,
)

__all__ = [
    "synthetic_batches",
    "multi30k_batches",
    "run_bench",
    "format_table",
]


def synthetic_batches(
    n: int,
    max_tokens: int,
    seq_len: int,
    vocab_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
) -> list[Batch]:
    """``n`` batches of random sentence pairs, lengths drawn from ``seq_len // 2 .. seq_len`` (``<eos>`` added).

    Each batch holds ``max_tokens // (2 · seq_len)`` pairs, so its padded size stays within ``max_tokens``.
    """
    g = torch.Generator().manual_seed(seed)
    B = max(1, max_tokens // (2 * (seq_len + 1)))
    low = max(1, seq_len // 2)
    batches = []
    for _ in range(n):
        lengths = torch.randint(
            low, seq_len + 1, (2, B), generator=g
        ).tolist()
        src = [
            torch.randint(4, vocab_size, (n_s,), generator=g).tolist()
            + [EOS]
            for n_s in lengths[0]
        ]
        tgt = [
            torch.randint(4, vocab_size, (n_t,), generator=g).tolist()
            + [EOS]
            for n_t in lengths[1]
        ]
        batches.append(Batch.from_pairs(src, tgt, PAD, BOS).to(device))
    return batches


def multi30k_batches(
    n: int,
    max_tokens: int,
    vocab_size: int,
    seed: int = 0,
    device: torch.device | str = "cpu",
    root: str | Path | None = None,
    max_len: int = 256,
) -> tuple[list[Batch], int]:
    """The first ``n`` batches of a shuffled epoch of Multi30k training pairs, as training sees them.

    The joint BPE tokenizer of ``vocab_size`` pieces is learned from the training pairs (or taken
    from the cache), pairs longer than ``max_len`` pieces are left out, as in ``recipes.prepare_data``,
    and ``data.make_batches`` groups the rest within ``max_tokens`` padded positions.

    Returns:
        The batches and the tokenizer's vocabulary size.

    Raises:
        DatasetUnavailable: the Multi30k files are not there (nothing is downloaded).
    """
    pairs = load_multi30k("train", root, download=False)
    tokenizer = train_tokenizer(pairs, vocab_size)
    ids = [
        (s, t)
        for s, t in encode_pairs(tokenizer, pairs)
        if max(len(s), len(t)) + 1 <= max_len
    ]
    groups = make_batches(ids, max_tokens, shuffle=True, seed=seed)[:n]
    batches = [
        Batch.make(*collate([ids[i] for i in g]), PAD, BOS).to(device)
        for g in groups
    ]
    return batches, tokenizer.vocab_size


def run_bench(
    device: torch.device | str | None = None,
    d_model: int | None = None,
    d_ff: int | None = None,
    h: int | None = None,
    N: int | None = None,
    vocab_size: int | None = None,
    max_tokens: int | None = None,
    seq_len: int | None = None,
    steps: int | None = None,
    warmup: int | None = None,
    dropout: float = 0.1,
    amp: bool | str | None = None,
    peak: float | None = None,
    contenders: Sequence[str] = CONTENDERS,
    seed: int = 0,
    data: str = "auto",
    root: str | Path | None = None,
    ops: bool = True,
    compile_backend: str = "inductor",
    rounds: int | None = None,
) -> list[dict[str, Any]]:
    """Train each contender on the same batches: warm-up, then interleaved timed rounds; one dict each.

    Sizes left ``None`` come from the ``multi30k`` preset on CUDA (vocabulary 8000, 8192 tokens a
    batch, 50 batches, one warm-up pass, 5 rounds) and from a tiny model on other devices (d_model
    64, N 2, vocabulary 1000, 1024 tokens a batch, 5 batches, one warm-up pass, 9 rounds), which
    runs in seconds.

    Args:
        device: default CUDA when available.
        d_model, d_ff, h, N, vocab_size: model sizes (shared embeddings, tied generator).
        max_tokens: padded positions per batch; seq_len: longest synthetic sentence (lengths from
            seq_len / 2; the real data has its own).
        steps: batches, each trained on once per pass; warmup: passes before the timed rounds,
            every step timed alone (0: no warm-up is measured and the first round meets every
            shape for the first time).
        dropout: P_drop of every contender.
        amp: autocast: ``None``/``"auto"`` as ``TrainConfig.amp="auto"`` (CUDA: bfloat16 from compute
            capability 8.0, else float16 with a gradient scaler; CPU: none), ``True``/``"bf16"``,
            ``"fp16"``, or ``False``.
        peak: the device's peak TFLOP/s for MFU; default from ``PEAK_BF16_TFLOPS`` on CUDA.
        contenders: a subset of ``ALL_CONTENDERS``.
        seed: seeds the weights, the batches and dropout.
        data: ``"auto"`` (Multi30k when found, else synthetic), ``"multi30k"`` or ``"synthetic"``.
        root: the Multi30k folder (default ``$AIAYN_DATA``).
        ops: count the ATen ops of one step per eager contender (``count_step_ops``).
        compile_backend: ``torch.compile``'s backend for the compiled contenders (``"eager"``
            traces the graphs without generating code: quick, for tests).
        rounds: timed rounds, each one steady pass of every contender in ``pass_order``.

    Returns:
        Per contender: ``name``, ``params``, ``tokens_per_s`` (target tokens) and ``step_ms`` of its
        median pass, ``rounds``, ``round_ms`` (ms per step of each round's pass), ``speed``,
        ``speed_min``, ``speed_max`` (relative to the first contender, ``ratio_summary``),
        ``first_shape_steps``, ``first_shape_ms`` (median), ``warmup_extra_s``,
        ``warmup_s`` (the warm-up passes in all), ``ops_per_step``, ``tflops``, ``mfu``
        (``None`` without a peak), ``peak_mem_mib`` (CUDA: over its warm-up and first timed pass,
        beyond what the other contenders hold; CPU: the process's peak after its warm-up),
        ``loss`` (last step of the last round), ``data``, sizes, device,
        ``compile_warnings`` (compiled contenders: what ``torch.compile`` warned of, one line each,
        see ``collect_compile_warnings``; else ``None``).
    """
    device = resolve_device(device)
    unknown = [c for c in contenders if c not in ALL_CONTENDERS]
    if unknown:
        raise ValueError(
            f"unknown contenders {unknown}; choose from {list(ALL_CONTENDERS)}"
        )
    if any("compiled" in c for c in contenders):
        from torch._dynamo import list_backends

        backends = list_backends(exclude_tags=())
        if compile_backend not in backends:
            raise ValueError(
                f"compile_backend must be one of {backends}, got {compile_backend!r}"
            )
    if data not in ("auto", "multi30k", "synthetic"):
        raise ValueError(
            f"data must be 'auto', 'multi30k' or 'synthetic', got {data!r}"
        )
    cuda = device.type == "cuda"
    preset = PRESETS["multi30k"]
    defaults = (
        dict(d_model=preset.d_model, d_ff=preset.d_ff, h=preset.h, N=preset.N, vocab_size=preset.vocab_size,
             max_tokens=preset.max_tokens, seq_len=32, steps=50, warmup=1)
        if cuda
        else dict(d_model=64, d_ff=256, h=4, N=2, vocab_size=1000, max_tokens=1024, seq_len=16, steps=5, warmup=1)
    )  # fmt: skip
    given = dict(d_model=d_model, d_ff=d_ff, h=h, N=N, vocab_size=vocab_size, max_tokens=max_tokens,
                 seq_len=seq_len, steps=steps, warmup=warmup)  # fmt: skip
    size = {k: defaults[k] if v is None else v for k, v in given.items()}
    for name in ("d_model", "d_ff", "h", "N", "seq_len", "steps"):
        check_int(name, size[name], minimum=1)
    rounds = (5 if cuda else 9) if rounds is None else rounds
    check_int("rounds", rounds, minimum=1)
    check_int("warmup", size["warmup"], minimum=0)
    # ids 0-3 are special, sentences draw 4..V-1
    check_int("vocab_size", size["vocab_size"], minimum=5)
    # one pair of seq_len + <eos>
    check_int(
        "max_tokens", size["max_tokens"], minimum=2 * (size["seq_len"] + 1)
    )
    if peak is not None and not (
        isinstance(peak, (int, float)) and peak > 0
    ):
        raise ValueError(
            f"peak must be a positive number of TFLOP/s, got {peak!r}"
        )
    amp_name = (
        {None: "auto", True: "bf16", False: None}.get(amp, amp)
        if not isinstance(amp, str)
        else amp
    )
    amp_dtype = amp_dtype_for(amp_name, device)
    device_name = (
        torch.cuda.get_device_name(device)
        if cuda
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    if peak is None and cuda:
        peak = peak_tflops(device_name)

    V = size["vocab_size"]
    source = "synthetic"
    batches: list[Batch] = []
    if data != "synthetic":
        try:
            batches, V = multi30k_batches(
                size["steps"], size["max_tokens"], V, seed, device, root
            )
            source = f"Multi30k train, {V}-piece BPE"
        except DatasetUnavailable:
            if data == "multi30k":
                raise
            source = f"synthetic (no Multi30k files in {data_dir(root)})"
    if not batches:
        batches = synthetic_batches(
            size["steps"],
            size["max_tokens"],
            size["seq_len"],
            V,
            seed,
            device,
        )
    config = TransformerConfig(
        V, V, d_model=size["d_model"], d_ff=size["d_ff"], h=size["h"], N=size["N"], dropout=dropout,
        share_embeddings=True, tie_output=True, pad_id=PAD, max_len=max(256, *(b.src.size(1) for b in batches)),
    )  # fmt: skip
    torch.manual_seed(seed)
    # on the CPU; each contender gets its own copy on the device
    base = Transformer(config)
    lengths = (
        [(b.src != PAD).sum(1).tolist() for b in batches],
        [(b.tgt_out != PAD).sum(1).tolist() for b in batches],
    )
    flops = sum(
        training_flops(config, s, t) for s, t in zip(*lengths, strict=True)
    )
    tokens = sum(b.n_tokens for b in batches)
    n_shapes = len({batch_shape(b) for b in batches})

    # per contender, in the order of contenders
    trainers, warm, counts, notes = [], [], [], []
    resident, peak_mib = [], []  # bytes it holds, MiB at its peak
    for name in contenders:  # set up and warm up each contender in turn
        base_bytes = start_memory(device)
        model = make_contender(name, base, compile_backend).to(device)
        compiled = "compiled" in name
        counts.append(
            count_step_ops(model, batches[0], amp_dtype)
            if ops and not compiled
            else None
        )
        if compiled:
            model = torch.compile(
                model, backend=compile_backend, dynamic=True
            )
        trainer = Trainer(name, model, amp_dtype, device)
        torch.manual_seed(seed)  # the same dropout draws for every contender
        with collect_compile_warnings(compiled) as warned:  # compiled here
            warm.append(warm_up(trainer, batches, size["warmup"], device))
        trainers.append(trainer)
        notes.append(warned if compiled else None)
        resident.append(allocated_bytes(device) - base_bytes)
        peak_mib.append(peak_memory_mib(device, base_bytes))

    losses: dict[int, torch.Tensor] = {}

    def run_pass(c: int, r: int) -> float:
        """Contender c's pass of round r; in round 0 on CUDA, its peak memory too."""
        # pass r: the same dropout draws for every contender
        torch.manual_seed(seed + 1 + r)
        before = start_memory(device) if r == 0 else 0
        compiled = notes[c] is not None
        with collect_compile_warnings(compiled) as warned:
            seconds, losses[c] = timed_pass(trainers[c], batches, device)
        if compiled:  # compiled here when there was no warm-up
            notes[c] += [n for n in warned if n not in notes[c]]
        if r == 0 and cuda:  # what this pass allocated beyond what it held
            extra = torch.cuda.max_memory_allocated(device) - before
            peak_mib[c] = max(peak_mib[c], (resident[c] + extra) / 2**20)
        return seconds

    times = timed_rounds(run_pass, len(trainers), rounds)
    speeds = ratio_summary(dict(zip(contenders, times, strict=True)))
    rows = []
    for c, name in enumerate(contenders):
        seconds = statistics.median(times[c])
        step_s = seconds / len(batches)
        first, repeat = warm[c]
        achieved = flops / seconds
        speed, slowest, fastest = speeds[name]
        rows.append({
            "name": name,
            "params": count_parameters(trainers[c].model),
            "tokens_per_s": tokens / seconds,
            "step_ms": 1000 * step_s,
            "rounds": rounds,
            "round_ms": [1000 * t / len(batches) for t in times[c]],
            "speed": speed,
            "speed_min": slowest,
            "speed_max": fastest,
            "first_shape_steps": len(first),
            "first_shape_ms": 1000 * statistics.median(first) if first else None,
            "warmup_extra_s": sum(first) - len(first) * step_s if first else None,
            "warmup_s": sum(first) + sum(repeat),
            "ops_per_step": None if counts[c] is None else counts[c]["total"],
            "compile_warnings": notes[c],
            "tflops": achieved / 1e12,
            "mfu": achieved / (peak * 1e12) if peak else None,
            "peak_mem_mib": peak_mib[c],
            "loss": losses[c].item(),
            "data": source,
            "shapes": n_shapes,
            "device": str(device),
            "device_name": device_name,
            "amp": {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(amp_dtype),
            "peak_tflops": peak,
            **size,
            "vocab_size": V,
        })  # fmt: skip
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table: the timed rounds, then warm-up, ops, MFU.

    ``ms/step`` is the median over the rounds; ``speed vs first`` the median of the per-round
    ratios to the first row, with the slowest and the fastest round's ratio (``ratio_summary``).
    """
    lines = [
        "| contender | params | steady tok/s | ms/step (median) | speed vs first: median (min-max) "
        "| first-shape steps | first-shape ms (median) | warm-up extra s | ops/step | TFLOP/s | MFU "
        "| peak mem (MiB) | last loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    for i, r in enumerate(rows):
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        speed = (
            "1 (baseline)"
            if i == 0
            else f"{r['speed']:.2f}x ({r['speed_min']:.2f}-{r['speed_max']:.2f})"
        )
        lines.append(
            f"| {r['name']} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | {speed} | "
            f"{r.get('first_shape_steps', 'n/a')} | {num(r.get('first_shape_ms'), '.1f')} | "
            f"{num(r.get('warmup_extra_s'), '.2f')} | {num(r.get('ops_per_step'), ',')} | "
            f"{r['tflops']:.3g} | {mfu} | {num(r['peak_mem_mib'], ',.0f')} | {r['loss']:.3f} |"
        )
    return "\n".join(lines)
