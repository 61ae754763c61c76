"""How fast does it train? Our model on its explicit and fused attention paths against ``nn.Transformer``.

    python -m aiayn.bench                       # sizes of the multi30k preset on CUDA, a tiny model on CPU
    python -m aiayn.bench --json bench.json --steps 100

Three contenders run the same training loop (bfloat16 autocast on CUDA, Adam, clipping) on the same
batches, starting from the same weights:

* ``ours (explicit)``: ``aiayn.model.Transformer`` computing softmax(QKᵀ/√d_k)V step by step;
* ``ours (fused)``: the same model on ``F.scaled_dot_product_attention`` (``set_fused``);
* ``nn.Transformer``: PyTorch's stacks between the same embeddings, positional encoding and tied
  generator (``TorchTransformer``), so that the parameter counts are equal.

Reported per contender: target tokens per second, milliseconds per step, achieved TFLOP/s, model-FLOPs
utilisation (MFU) and peak memory. The first ``warmup`` steps are not timed; CUDA is synchronised
before the clock starts and before it stops.

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
by device name, or given with ``--peak-tflops``; on a CPU it is reported only with ``--peak-tflops``.

**Peak memory.** On CUDA, ``torch.cuda.max_memory_allocated`` after a reset before each contender:
weights, Adam's states, activations and gradients. On a CPU there is no per-phase counter: the column
shows the process's peak resident memory so far (``resource.getrusage().ru_maxrss``), which never
decreases, so it compares contenders only when a later one needs more than every earlier one.

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import cli
from .attention import set_fused
from .checks import atomic_write, check_int, resolve_device
from .compare import to_torch_transformer, torch_masks
from .data import BOS, EOS, PAD
from .model import Transformer, TransformerConfig, count_parameters
from .presets import PRESETS
from .training import Batch, LabelSmoothingLoss, make_optimizer, train_step

__all__ = [
    "PEAK_BF16_TFLOPS",
    "peak_tflops",
    "training_flops",
    "TorchTransformer",
    "synthetic_batches",
    "CONTENDERS",
    "run_bench",
    "format_table",
    "main",
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

CONTENDERS = ("ours (explicit)", "ours (fused)", "nn.Transformer")


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
    qk, vo = (
        d * h * d_k,
        d * h * d_v,
    )  # multiply-adds per token of one q or k projection, one v or o projection
    ffn = 2 * d * config.d_ff
    src, tgt = sum(src_lengths), sum(tgt_lengths)
    macs = N * src * (2 * qk + 2 * vo + ffn)  # encoder layers
    macs += (
        N * tgt * (2 * qk + 2 * vo + qk + vo + ffn)
    )  # decoder: self-attention, cross q and o, FFN
    macs += (
        N * src * (qk + vo)
    )  # decoder: cross-attention k and v, on the encoder output
    macs += tgt * d * V  # generator
    pairs = sum(
        s * s + t * t + t * s
        for s, t in zip(src_lengths, tgt_lengths, strict=True)
    )
    macs += N * pairs * h * (d_k + d_v)  # QKᵀ and weights · V
    return 3 * 2 * macs


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between copies of ``model``'s embeddings, positional encoding and generator.

    It starts from a copy of all of ``model``'s weights (``compare.to_torch_transformer``, without the final
    LayerNorms that ``nn.Transformer`` adds in post-norm mode), so both have the same parameter count and,
    without dropout, the same outputs. Called like ``Transformer``; the masks are rebuilt from the ids
    in PyTorch's convention (``compare.torch_masks``), so the ``src_mask``/``tgt_mask`` given are ignored.

    Args:
        model: an ``aiayn`` ``Transformer`` with ``d_k = d_v = d_model / h``.
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.config = model.config
        ours = copy.deepcopy(
            model
        )  # deepcopy keeps shared (tied) parameters shared
        self.src_embed, self.tgt_embed, self.generator = (
            ours.src_embed,
            ours.tgt_embed,
            ours.generator,
        )
        self.transformer = to_torch_transformer(model).train()
        for m in (
            self.transformer.modules()
        ):  # to_torch_transformer builds with dropout 0
            if isinstance(m, nn.Dropout):
                m.p = self.config.dropout
            elif isinstance(m, nn.MultiheadAttention):
                m.dropout = self.config.dropout

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, S)`` source and ``(B, T)`` decoder input ids to ``(B, T, V)`` logits."""
        masks = torch_masks(src, tgt, self.config.pad_id)
        out = self.transformer(
            self.src_embed(src), self.tgt_embed(tgt), **masks
        )  # (B, T, d_model)
        return self.generator(out)  # (B, T, V)


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


def _peak_memory_mib(device: torch.device) -> float | None:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    return (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    )  # KiB on Linux


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_training(
    model: nn.Module,
    batches: Sequence[Batch],
    warmup: int,
    amp: torch.dtype | None,
    device: torch.device,
) -> tuple[float, float]:
    """The loop every contender runs; returns (seconds of the timed steps, last loss).

    Each step is ``training.train_step``, the step ``fit`` takes, without its per-step
    finiteness check (a device synchronisation that ``fit`` pays and a benchmark should not).
    """
    optimizer = make_optimizer(
        model, lr=1e-4
    )  # fused Adam on CUDA; a constant rate is enough
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)
    model.train()
    start = 0.0
    for i, batch in enumerate(batches):
        if i == warmup:
            _synchronize(device)
            start = time.perf_counter()
        loss = train_step(
            model,
            batch,
            optimizer,
            loss_fn,
            clip_norm=1.0,
            amp_dtype=amp,
            check_finite=False,
        )
    _synchronize(device)
    return time.perf_counter() - start, loss.item()


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
    amp: bool | None = None,
    peak: float | None = None,
    contenders: Sequence[str] = CONTENDERS,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Time a few training steps of each contender on the same batches; one result dict per contender.

    Sizes left ``None`` come from the ``multi30k`` preset on CUDA (vocabulary 8000, 32-token sentences,
    50 timed steps after 10 untimed ones) and from a tiny model on other devices (d_model 64, N 2,
    vocabulary 1000, 16-token sentences, 5 timed steps after 2), which runs in seconds.

    Args:
        device: default CUDA when available.
        d_model, d_ff, h, N, vocab_size: model sizes (shared embeddings, tied generator).
        max_tokens: padded positions per batch; seq_len: longest sentence (lengths from seq_len / 2).
        steps: timed steps; warmup: untimed steps before them.
        dropout: P_drop of every contender.
        amp: bfloat16 autocast; default on for CUDA only.
        peak: the device's peak TFLOP/s for MFU; default from ``PEAK_BF16_TFLOPS`` on CUDA.
        contenders: a subset of ``CONTENDERS``.
        seed: seeds the weights and the batches.

    Returns:
        Per contender: ``name``, ``params``, ``tokens_per_s`` (target tokens), ``step_ms``, ``tflops``
        (achieved), ``mfu`` (``None`` without a peak), ``peak_mem_mib``, ``loss`` (last step), sizes, device.
    """
    device = resolve_device(device)
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        raise ValueError(
            f"unknown contenders {unknown}; choose from {list(CONTENDERS)}"
        )
    cuda = device.type == "cuda"
    preset = PRESETS["multi30k"]
    defaults = (
        dict(d_model=preset.d_model, d_ff=preset.d_ff, h=preset.h, N=preset.N, vocab_size=preset.vocab_size,
             max_tokens=preset.max_tokens, seq_len=32, steps=50, warmup=10)
        if cuda
        else dict(d_model=64, d_ff=256, h=4, N=2, vocab_size=1000, max_tokens=1024, seq_len=16, steps=5, warmup=2)
    )  # fmt: skip
    given = dict(d_model=d_model, d_ff=d_ff, h=h, N=N, vocab_size=vocab_size, max_tokens=max_tokens,
                 seq_len=seq_len, steps=steps, warmup=warmup)  # fmt: skip
    size = {k: defaults[k] if v is None else v for k, v in given.items()}
    for name in ("d_model", "d_ff", "h", "N", "seq_len", "steps"):
        check_int(name, size[name], minimum=1)
    check_int("warmup", size["warmup"], minimum=0)
    check_int(
        "vocab_size", size["vocab_size"], minimum=5
    )  # ids 0-3 are special, sentences draw 4..V-1
    check_int(
        "max_tokens", size["max_tokens"], minimum=2 * (size["seq_len"] + 1)
    )  # one pair of seq_len + <eos>
    if peak is not None and not (
        isinstance(peak, (int, float)) and peak > 0
    ):
        raise ValueError(
            f"peak must be a positive number of TFLOP/s, got {peak!r}"
        )
    amp_dtype = torch.bfloat16 if (cuda if amp is None else amp) else None
    device_name = (
        torch.cuda.get_device_name(device)
        if cuda
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    if peak is None and cuda:
        peak = peak_tflops(device_name)

    V = size["vocab_size"]
    config = TransformerConfig(
        V, V, d_model=size["d_model"], d_ff=size["d_ff"], h=size["h"], N=size["N"], dropout=dropout,
        share_embeddings=True, tie_output=True, pad_id=PAD,
    )  # fmt: skip
    torch.manual_seed(seed)
    base = Transformer(
        config
    )  # on the CPU; each contender gets its own copy on the device
    batches = synthetic_batches(
        size["warmup"] + size["steps"],
        size["max_tokens"],
        size["seq_len"],
        V,
        seed,
        device,
    )
    timed = batches[size["warmup"] :]
    lengths = (
        [(b.src != PAD).sum(1).tolist() for b in timed],
        [(b.tgt_out != PAD).sum(1).tolist() for b in timed],
    )
    flops = sum(
        training_flops(config, s, t) for s, t in zip(*lengths, strict=True)
    )
    tokens = sum(b.n_tokens for b in timed)

    rows = []
    for name in contenders:
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        if name == "nn.Transformer":
            model = TorchTransformer(base)
        else:
            model = copy.deepcopy(base)
            set_fused(model, name == "ours (fused)")
        model.to(device)
        torch.manual_seed(seed)  # the same dropout draws for every contender
        seconds, loss = _time_training(
            model, batches, size["warmup"], amp_dtype, device
        )
        achieved = flops / seconds
        rows.append({
            "name": name,
            "params": count_parameters(model),
            "tokens_per_s": tokens / seconds,
            "step_ms": 1000 * seconds / size["steps"],
            "tflops": achieved / 1e12,
            "mfu": achieved / (peak * 1e12) if peak else None,
            "peak_mem_mib": _peak_memory_mib(device),
            "loss": loss,
            "device": str(device),
            "device_name": device_name,
            "amp": "bf16" if amp_dtype else None,
            "peak_tflops": peak,
            **size,
        })  # fmt: skip
        del model
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| contender | params | target tok/s | ms/step | TFLOP/s | MFU | peak mem (MiB) | last loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        mem = (
            "n/a"
            if r["peak_mem_mib"] is None
            else f"{r['peak_mem_mib']:,.0f}"
        )
        lines.append(
            f"| {r['name']} | {r['params']:,} | {r['tokens_per_s']:,.0f} | {r['step_ms']:.1f} | "
            f"{r['tflops']:.3g} | {mfu} | {mem} | {r['loss']:.3f} |"
        )
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.bench",
        "Training speed of our Transformer (explicit and fused attention) and nn.Transformer.",
    )
    p.add_argument(
        "--device", default=None, help="default cuda when available"
    )
    for flag, name in (("--d-model", "d_model"), ("--d-ff", "d_ff"), ("--heads", "h"), ("--layers", "N"),
                       ("--max-tokens", "max_tokens"), ("--seq-len", "seq_len"), ("--steps", "steps")):  # fmt: skip
        p.add_argument(flag, dest=name, type=cli.positive_int, default=None)
    p.add_argument("--vocab", dest="vocab_size", type=cli.positive_int, default=None,
                   help="vocabulary size, at least 5 (4 special ids)")  # fmt: skip
    p.add_argument(
        "--warmup",
        type=cli.natural_int,
        default=None,
        help="untimed steps first",
    )
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument(
        "--no-amp", action="store_true", help="no bfloat16 autocast on CUDA"
    )
    p.add_argument(
        "--peak-tflops",
        type=cli.positive_float,
        default=None,
        help="the device's peak, for MFU",
    )
    p.add_argument(
        "--threads",
        type=cli.positive_int,
        default=None,
        help="CPU threads (torch.set_num_threads)",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write the results to this file",
    )
    return p


def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.json is not None and not args.json.parent.is_dir():
        raise ValueError(
            f"--json {args.json}: the folder {args.json.parent} does not exist"
        )
    sizes = {
        k: getattr(args, k)
        for k in (
            "d_model",
            "d_ff",
            "h",
            "N",
            "vocab_size",
            "max_tokens",
            "seq_len",
        )
    }
    rows = run_bench(
        args.device, **sizes, steps=args.steps, warmup=args.warmup, dropout=args.dropout,
        amp=False if args.no_amp else None, peak=args.peak_tflops,
    )  # fmt: skip
    r = rows[0]
    print(
        f"{r['device_name']}, torch {torch.__version__}, amp {r['amp']}: d_model {r['d_model']}, d_ff {r['d_ff']}, "
        f"h {r['h']}, N {r['N']}, vocab {r['vocab_size']}, {r['max_tokens']} tokens/batch, "
        f"{r['steps']} timed steps after {r['warmup']}; peak {r['peak_tflops'] or 'unknown'} TFLOP/s\n"
    )
    print(format_table(rows))
    if args.json is not None:
        atomic_write(args.json, json.dumps(rows, indent=2) + "\n")
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Parse ``argv``, run the benchmark, print the table (and write JSON with ``--json``)."""
    return cli.run(_parser(), argv, _bench)


if __name__ == "__main__":
    main()
