"""``python -m aiayn.bench``: the benchmark's command line, its table and its JSON.

    python -m aiayn.bench                       # multi30k sizes on CUDA, a tiny model on CPU
    python -m aiayn.bench --steps 40 --max-tokens 8192 --json bench.json
    python -m aiayn.bench --contenders "ours (explicit)" "ours (set_fast)" --rounds 9

``main`` parses the options into ``run.run_bench``'s arguments, prints a line on the device, the
sizes and the batches, then ``run.format_table``'s table and ``compile_warnings.compile_note``, and
with ``--json`` writes the rows (its path checked before the benchmark, not after it).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .. import cli
from ..files import atomic_write
from .compile_warnings import compile_note
from .contenders import ALL_CONTENDERS
from .run import format_table, run_bench

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.bench",
        "Training speed of our Transformer (explicit, fused, set_fast, compiled) and nn.Transformer "
        "on the same batches: warm-up (first step of each batch shape) apart, then interleaved "
        "timed rounds, one pass of every contender a round.",
    )
    p.add_argument(
        "--device", default=None, help="default cuda when available"
    )
    for flag, name in (("--d-model", "d_model"), ("--d-ff", "d_ff"), ("--heads", "h"), ("--layers", "N"),
                       ("--max-tokens", "max_tokens"), ("--seq-len", "seq_len"), ("--steps", "steps")):  # fmt: skip
        p.add_argument(flag, dest=name, type=cli.positive_int, default=None)
    p.add_argument("--vocab", dest="vocab_size", type=cli.positive_int, default=None,
                   help="vocabulary size, at least 5 (4 special ids)")  # fmt: skip
    p.add_argument("--warmup", type=cli.natural_int, default=None,
                   help="passes before the timed rounds, each step timed alone (default 1)")  # fmt: skip
    p.add_argument("--rounds", type=cli.positive_int, default=None,
                   help="timed rounds, one pass of every contender each, in rotating order "
                        "(default 9 on a CPU, 5 on CUDA)")  # fmt: skip
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--data", dest="data", choices=("auto", "multi30k", "synthetic"), default="auto",
                   help="batches from Multi30k (auto: when found) or synthetic")  # fmt: skip
    p.add_argument(
        "--root", default=None, help="Multi30k folder (default $AIAYN_DATA)"
    )
    p.add_argument("--contenders", nargs="+", default=list(ALL_CONTENDERS), metavar="NAME",
                   help=f"a subset of: {', '.join(ALL_CONTENDERS)} (default all)")  # fmt: skip
    p.add_argument(
        "--no-ops",
        action="store_true",
        help="do not count the ops of a step",
    )
    p.add_argument("--amp", choices=("auto", "bf16", "fp16", "none"), default="auto",
                   help="autocast; auto: CUDA bf16, or fp16 with a scaler below compute capability 8.0")  # fmt: skip
    p.add_argument(
        "--no-amp", action="store_true", help="no autocast (as --amp none)"
    )
    p.add_argument(
        "--peak-tflops",
        type=cli.positive_float,
        default=None,
        help="the device's peak, for MFU",
    )
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile's backend for the compiled contenders (eager: trace only)")  # fmt: skip
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


def _check_json_path(path: Path) -> None:
    """Refuse a ``--json`` path the results cannot be written to: a folder, or in no writable folder."""
    folder = path.parent
    if path.is_dir():
        raise ValueError(
            f"--json {path} is a folder; give a file name, e.g. "
            f"--json {path / 'bench.json'}"
        )
    if not folder.is_dir():
        what = "is a file" if folder.exists() else "does not exist"
        raise ValueError(f"--json {path}: the folder {folder} {what}")
    if not os.access(folder, os.W_OK):
        raise ValueError(
            f"--json {path}: the folder {folder} is not writable; choose "
            "another"
        )


def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.json is not None:
        _check_json_path(args.json)  # before the benchmark, not after it
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
    amp = None if args.no_amp or args.amp == "none" else args.amp
    rows = run_bench(
        args.device, **sizes, steps=args.steps, warmup=args.warmup, dropout=args.dropout,
        amp=False if amp is None else amp, peak=args.peak_tflops, contenders=args.contenders,
        data=args.data, root=args.root, ops=not args.no_ops, compile_backend=args.compile_backend,
        rounds=args.rounds,
    )  # fmt: skip
    r = rows[0]
    print(
        f"{r['device_name']}, torch {torch.__version__}, amp {r['amp']}: d_model {r['d_model']}, d_ff {r['d_ff']}, "
        f"h {r['h']}, N {r['N']}, vocab {r['vocab_size']}, {r['max_tokens']} tokens/batch\n"
        f"batches: {r['data']}; {r['steps']} batches of {r['shapes']} shapes, {r['warmup']} warm-up pass(es) "
        f"timed step by step, then {r['rounds']} rounds of one pass per contender, interleaved in rotating "
        f"order; peak {r['peak_tflops'] or 'unknown'} TFLOP/s\n"
    )
    print(format_table(rows))
    note = compile_note(rows)
    if note:
        print(note)
    if args.json is not None:
        atomic_write(args.json, json.dumps(rows, indent=2) + "\n")
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Parse ``argv``, run the benchmark, print the table (and write JSON with ``--json``)."""
    return cli.run(_parser(), argv, _bench)
