"""Train a preset from the command line; running the same command again continues the run.

    python -m aiayn.train --preset multi30k --out runs/base
    python -m aiayn.train --preset multi30k-smoke --out runs/smoke --device cpu
    python -m aiayn.train --preset multi30k --out runs/base --max-steps 500   # stop early, resume later

The run folder gets ``config.json``, ``metrics.jsonl``, ``checkpoint.pt``, the last epochs' weights and
``tokenizer.model`` (see ``aiayn.recipes``). Score it with ``python -m aiayn.evaluate runs/base``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .recipes import PRESETS, ResumeError, get_preset, train

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiayn.train",
        description="Train a Transformer on Multi30k de->en from a preset. Running it again resumes the run.",
    )
    parser.add_argument(
        "--preset",
        default="multi30k",
        help=f"one of: {', '.join(PRESETS)} (default multi30k)",
    )
    parser.add_argument(
        "--out", required=True, help="run folder, e.g. runs/base"
    )
    parser.add_argument(
        "--data",
        default=None,
        help="Multi30k folder (default $AIAYN_DATA or ~/.cache/aiayn/multi30k)",
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cuda, cpu, cuda:1 ... (default cuda when available)",
    )
    parser.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="stop after this many optimizer steps in total",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="override the preset's number of epochs",
    )
    parser.add_argument(
        "--compile", action="store_true", help="torch.compile the model"
    )
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="start afresh, replacing the run's files",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bar"
    )
    return parser


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def main(argv: Sequence[str] | None = None) -> dict:
    """Parse ``argv`` (default ``sys.argv[1:]``), train, print a summary and return it."""
    parser = _parser()
    args = parser.parse_args(argv)
    overrides = {}
    if args.max_steps is not None:
        overrides["max_steps"] = args.max_steps
    if args.epochs is not None:
        overrides["epochs"] = args.epochs
    if args.compile:
        overrides["compile"] = True
    try:
        cfg = get_preset(args.preset, **overrides)
    except ValueError as err:
        parser.error(str(err))
    try:
        summary = train(
            cfg,
            args.out,
            root=args.data,
            device=args.device,
            progress=not args.no_progress,
            resume=not args.no_resume,
        )
    except (
        ResumeError
    ) as err:  # the run folder was trained with other settings
        parser.error(str(err))
    val = (
        "n/a"
        if summary["val_loss"] is None
        else f"{summary['val_loss']:.3f} (ppl {summary['val_ppl']:.2f})"
    )
    print(
        f"{cfg.name}: {summary['steps']} steps ({summary['steps_this_run']} now) in {summary['wall_s']:.1f} s "
        f"on {summary['device_name']}, torch {summary['torch']}\n"
        f"  {summary['tokens_per_s']:,.0f} target tokens/s, {summary['parameters']:,} parameters\n"
        f"  train loss {_num(summary['loss_first'])} -> {_num(summary['loss_last'])}; val loss {val}\n"
        f"  run folder: {summary['out_dir']}   next: python -m aiayn.evaluate {summary['out_dir']}",
        file=sys.stdout,
    )
    return summary


if __name__ == "__main__":
    main()
