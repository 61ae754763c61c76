"""Measure what dropping finished sentences from the batch saves when translating (issue 22).

Translates the first N sentences of Multi30k test 2016 with the published model (float32, beam 4,
one CPU thread) with ``prune=True``, the default (a sentence leaves its batch once it has finished),
or ``prune=False`` (every row is computed until its batch's last sentence ends), and prints the
sentences per second of the translation alone. ``--compare`` translates both ways in one process
and counts the identical outputs.

Run from the repository root (the data and the published run are read, never written)::

    .venv/bin/python tools/measure_decoding.py --sentences 150              # pruned
    .venv/bin/python tools/measure_decoding.py --sentences 150 --no-prune   # the reference
    .venv/bin/python tools/measure_decoding.py --sentences 150 --compare

To compare the first two, time whole runs of each in turn (A B A B ...), so that a machine whose
speed drifts slows both alike; loading the model is in both, so the ratio understates the gain.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from aiayn.data import load_multi30k
from aiayn.published import load_published
from aiayn.translation import translate

SHARED = Path(__file__).resolve().parents[2] / "shared"


def timed_translate(model, tokenizer, sentences, beam: int, prune: bool):
    """The translations and the sentences per second."""
    start = time.perf_counter()
    lines = translate(model, tokenizer, sentences, beam=beam, prune=prune)
    return lines, len(sentences) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sentences", type=int, default=150, help="the first N of test 2016"
    )
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument(
        "--prune",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="drop finished sentences from the batch (--no-prune: the reference)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="both ways; count identical outputs",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run", default=str(SHARED / "runs/multi30k-h100"))
    parser.add_argument("--data", default=str(SHARED / "data/multi30k"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    published = load_published(args.run, download=False)
    model, tokenizer = published.model, published.tokenizer
    sentences = [
        src
        for src, _ in load_multi30k("test2016", args.data)[: args.sentences]
    ]
    modes = [True, False] if args.compare else [args.prune]
    outputs = {}
    for prune in modes:
        outputs[prune], rate = timed_translate(
            model, tokenizer, sentences, args.beam, prune
        )
        print(
            f"prune={prune}: {len(sentences)} sentences, beam {args.beam}, "
            f"{args.threads} thread(s): {rate:.2f} sentences/s"
        )
    if args.compare:
        same = sum(
            a == b
            for a, b in zip(outputs[True], outputs[False], strict=True)
        )
        print(f"identical outputs: {same}/{len(sentences)}")


if __name__ == "__main__":
    main()
