"""Measure the options of decoding on a CPU (issue 22): speed, BLEU, and outputs identical to float32.

Translates the first N sentences of a Multi30k split with the published model (beam 4, one CPU
thread) with today's default (float32, finished sentences dropped from the batch) or with one
option: ``--quantize int8`` (an int8 copy of the model), ``--amp bf16`` (bfloat16 autocast, on a
CPU with native bfloat16), ``--no-prune`` (the old loop, every row computed until its batch's
last sentence ends), ``--no-onednn`` (PyTorch's own MKL products instead of oneDNN's). It
prints the sentences per second of the translation alone.
``--compare`` translates with float32 and with the option in one process and prints sacreBLEU
for both and the share of identical outputs. ``--batch-size N`` decodes N sentences a batch (default
128, as ``translate``); ``--count-ops`` also counts the ATen ops each translation dispatches, a
hardware-free measure of what a GPU launches (about one kernel an op), the host's reads of a tensor
value (each one waits for a GPU) and the beam steps (one ``topk`` each). Counted on the CPU, which
also reads back a few values a GPU run never checks (a mask's empty rows); counting slows the
translation, so its time is then no speed figure::

    .venv/bin/python tools/measure_decoding.py --all --batch-size 1000 --compare --count-ops

Run from the repository root (the data and the published run are read, never written)::

    .venv/bin/python tools/measure_decoding.py --sentences 300                    # the default
    .venv/bin/python tools/measure_decoding.py --sentences 300 --quantize int8
    .venv/bin/python tools/measure_decoding.py --sentences 300 --amp bf16
    .venv/bin/python tools/measure_decoding.py --split val --all --quantize int8 --compare
    .venv/bin/python tools/measure_decoding.py --split val --all --no-onednn --compare

To compare two settings' speed, time whole runs of each in turn (A B A B ...), so that a machine
whose speed drifts slows both alike; loading the model is in both, so the ratio understates the
gain. The sentences per second each run prints leave the loading out. Issue 22 compared today's
default with the tree of commit 32aae51 (before the oneDNN products, the explicit one-query
attention and the cache's free slot), all 1,000 test sentences, one thread, in turn::

    mkdir -p /tmp/old22 && git archive 32aae51 src | tar -x -C /tmp/old22
    OMP_NUM_THREADS=1 .venv/bin/python tools/measure_decoding.py --all                # A
    OMP_NUM_THREADS=1 PYTHONPATH=/tmp/old22/src \
        .venv/bin/python tools/measure_decoding.py --all                              # B
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch

from aiayn.bench.op_counts import CountOps
from aiayn.data.multi30k import load_multi30k
from aiayn.decoding.translate import translate
from aiayn.runs.published import load_published

SHARED = Path(__file__).resolve().parents[2] / "shared"
AMP = {"bf16": torch.bfloat16}
# the ops that read a tensor's value back to the host: on a GPU each waits for it
HOST_READS = ("aten._local_scalar_dense", "aten.nonzero")


def sacrebleu(hypotheses: list[str], references: list[str]) -> float:
    from sacrebleu.metrics import BLEU

    return BLEU().corpus_score(hypotheses, [references]).score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sentences", type=int, default=300, help="the first N of the split"
    )
    parser.add_argument(
        "--all", action="store_true", help="every sentence of the split"
    )
    parser.add_argument(
        "--split", default="test2016", help="default test2016 (val: 1,014)"
    )
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument(
        "--prune",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="drop finished sentences from the batch (--no-prune: the old loop)",
    )
    parser.add_argument(
        "--onednn",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="oneDNN's float32 products (--no-onednn: PyTorch's own, MKL)",
    )
    parser.add_argument(
        "--batch-size", type=int, default=128, help="sentences a batch"
    )
    parser.add_argument(
        "--count-ops",
        action="store_true",
        help="count the ATen ops, host reads and beam steps of each",
    )
    parser.add_argument("--quantize", choices=["int8"], default=None)
    parser.add_argument("--amp", choices=sorted(AMP), default=None)
    parser.add_argument(
        "--compare",
        action="store_true",
        help="float32 too; sacreBLEU of both, identical outputs",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run", default=str(SHARED / "runs/multi30k-h100"))
    parser.add_argument("--data", default=str(SHARED / "data/multi30k"))
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    published = load_published(args.run, download=False)
    model, tokenizer = published.model, published.tokenizer
    pairs = load_multi30k(args.split, args.data)
    pairs = pairs if args.all else pairs[: args.sentences]
    sentences, references = [s for s, _ in pairs], [t for _, t in pairs]
    option = dict(
        beam=args.beam,
        prune=args.prune,
        quantize=args.quantize,
        amp_dtype=AMP.get(args.amp),
    )
    option["batch_size"] = args.batch_size
    if not args.onednn:  # only then: a tree from before the option runs too
        option["onednn"] = False
    settings = {"option": option}
    if args.compare:
        settings["float32"] = dict(beam=args.beam)
    outputs = {}
    for name, kwargs in settings.items():
        print(
            f"{args.split}, {args.threads} thread(s), prune={kwargs.get('prune', True)}, "
            f"{kwargs.get('batch_size', 128)} sentences a batch:"
        )
        counting = CountOps() if args.count_ops else contextlib.nullcontext()
        with counting:
            outputs[name] = translate(
                model, tokenizer, sentences, **kwargs, log=print
            )
        if args.count_ops:
            reads = sum(counting.ops[op] for op in HOST_READS)
            print(
                f"  {counting.total:,} ATen ops, {reads:,} host reads, "
                f"{counting.ops['aten.topk']:,} beam steps"
            )
    if args.compare:
        for name, lines in outputs.items():
            print(f"sacreBLEU {name}: {sacrebleu(lines, references):.2f}")
        same = sum(
            a == b
            for a, b in zip(
                outputs["option"], outputs["float32"], strict=True
            )
        )
        print(
            f"identical to float32: {same}/{len(sentences)} "
            f"({100 * same / len(sentences):.1f} %)"
        )


if __name__ == "__main__":
    main()
