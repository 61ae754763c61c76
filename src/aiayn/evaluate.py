"""Translate a test split with a trained run and score it, with our BLEU and with sacreBLEU.

    python -m aiayn.evaluate runs/base --split test2016 --beam 4 --length-penalty 0.6
    python -m aiayn.evaluate ../shared/runs/multi30k-h100 --limit 100 --out scores/h100   # the published model
    python -m aiayn.evaluate ../shared/runs/multi30k-h100 --quantize int8 --device cpu --out scores/h100

Each decoding setting keeps its own entry in ``results.json`` and its own translations file:
``test2016.hyp.en`` for the run's own setting, ``test2016.beam1.hyp.en`` for greedy decoding, and so on
(``aiayn.runs.scoring.setting_name``). ``--out`` writes them elsewhere (the run folder is only read).
``--quantize int8`` (CPU only) and ``--amp bf16`` (a GPU, or a CPU with native bfloat16) decode
faster and change a few translations; each is a setting of its own (``test2016.int8``).
A folder that ``python -m aiayn.train`` did not write (the published model, a release) is never
written into: it needs ``--out``. A held lock or a damaged ``results.json`` is reported before decoding.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from . import cli
from .data.multi30k import SPLITS
from .decoding.translate import QUANTIZE
from .runs.scoring import EvalResult, evaluate

# --amp: the autocast dtype of decoding ("config": the run's amp setting)
AMP = {
    "config": "config",
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": None,
}

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.evaluate",
        "Score a run folder written by python -m aiayn.train.",
    )
    p.add_argument("run_dir", help="the run folder, e.g. runs/base")
    p.add_argument(
        "--split",
        default="test2016",
        choices=sorted(SPLITS),
        help="default test2016",
    )
    p.add_argument(
        "--beam",
        type=cli.positive_int,
        default=None,
        help="beam size (default: the run's; 1 = greedy)",
    )
    p.add_argument(
        "--length-penalty",
        type=cli.length_penalty,
        default=None,
        help="alpha (default: the run's)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--limit",
        type=cli.positive_int,
        default=None,
        help="score only the first N sentences",
    )
    group.add_argument(
        "--all",
        action="store_true",
        help="score every sentence, even if the preset uses a subset",
    )
    p.add_argument(
        "--batch-size",
        type=cli.positive_int,
        default=128,
        help="sentences per decoding batch",
    )
    p.add_argument(
        "--device", default=None, help="default cuda when available"
    )
    p.add_argument(
        "--data", default=None, help="Multi30k folder (default $AIAYN_DATA)"
    )
    p.add_argument(
        "--no-average",
        action="store_true",
        help="use the final weights, not the average",
    )
    p.add_argument(
        "--out",
        default=None,
        help="write results.json and translations here (default: the run folder)",
    )
    p.add_argument(
        "--quantize",
        default=None,
        choices=QUANTIZE,
        help="decode with int8 linear layers (CPU only; a few translations change)",
    )
    p.add_argument(
        "--amp",
        default="config",
        choices=sorted(AMP),
        help="autocast dtype (default: the run's; bf16 on a CPU only where it is native)",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar while translating (shown only on a terminal)",
    )
    return p


def _evaluate(args: argparse.Namespace) -> EvalResult:
    limit = (
        None
        if args.all
        else (args.limit if args.limit is not None else "config")
    )
    result = evaluate(
        args.run_dir,
        split=args.split,
        beam=args.beam,
        length_penalty=args.length_penalty,
        limit=limit,
        batch_size=args.batch_size,
        device=args.device,
        root=args.data,
        average=not args.no_average,
        log=print,
        out_dir=args.out,
        quantize=args.quantize,
        amp_dtype=AMP[args.amp],
        progress=not args.no_progress and sys.stderr.isatty(),
    )
    hyp_file = Path(args.out or args.run_dir) / result.hypotheses_file
    print(f"weights: mean of {', '.join(result.checkpoints)}")
    print(f"translations: {hyp_file}")
    print(f"our BLEU:   {result.bleu:.2f}   {result.bleu_detail}")
    if result.sacrebleu is None:
        print("sacreBLEU:  not installed (pip install sacrebleu)")
    else:
        print(f"sacreBLEU:  {result.sacrebleu:.2f}   {result.signature}")
    print(
        f"loss {result.loss:.3f}, perplexity {result.ppl:.2f}; saved as {result.setting!r} in results.json"
    )
    return result


def main(argv: Sequence[str] | None = None) -> EvalResult:
    """Parse ``argv``, evaluate, print the scores and return the result."""
    return cli.run(_parser(), argv, _evaluate)


if __name__ == "__main__":
    main()
