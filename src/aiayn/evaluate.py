"""Translate a test split with a trained run and score it, with our BLEU and with sacreBLEU.

    python -m aiayn.evaluate runs/base --split test2016 --beam 4 --length-penalty 0.6

Writes ``runs/base/test2016.hyp.en`` (one detokenized translation per line) and ``runs/base/results.json``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from .data import SPLITS
from .recipes import evaluate

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m aiayn.evaluate",
        description="Score a run folder written by python -m aiayn.train.",
    )
    parser.add_argument("run_dir", help="the run folder, e.g. runs/base")
    parser.add_argument(
        "--split",
        default="test2016",
        choices=sorted(SPLITS),
        help="default test2016",
    )
    parser.add_argument(
        "--beam",
        type=int,
        default=None,
        help="beam size (default: the run's config; 1 = greedy)",
    )
    parser.add_argument(
        "--length-penalty",
        type=float,
        default=None,
        help="alpha (default: the run's config)",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--limit",
        type=int,
        default=None,
        help="score only the first N sentences",
    )
    group.add_argument(
        "--all",
        action="store_true",
        help="score every sentence, even if the preset uses a subset",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help="sentences per decoding batch",
    )
    parser.add_argument(
        "--device", default=None, help="default cuda when available"
    )
    parser.add_argument(
        "--data", default=None, help="Multi30k folder (default $AIAYN_DATA)"
    )
    parser.add_argument(
        "--no-average",
        action="store_true",
        help="use the final weights, not the average",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> dict:
    """Parse ``argv``, evaluate, print the scores and return the results."""
    args = _parser().parse_args(argv)
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
    )
    print(f"weights: mean of {', '.join(result['checkpoints'])}")
    hyp_file = f"{args.run_dir}/{args.split}.hyp.en"
    print(
        f"translated {result['sentences']} sentences in {result['decode_s']:.1f} s -> {hyp_file}"
    )
    print(f"our BLEU:   {result['bleu']:.2f}   {result['bleu_detail']}")
    if result["sacrebleu"] is None:
        print("sacreBLEU:  not installed (pip install sacrebleu)")
    else:
        print(
            f"sacreBLEU:  {result['sacrebleu']:.2f}   {result['signature']}"
        )
    print(f"loss {result['loss']:.3f}, perplexity {result['ppl']:.2f}")
    return result


if __name__ == "__main__":
    main()
