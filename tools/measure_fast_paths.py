"""Measure, on this machine's CPU, what the fast path and the decoding cache save.

1. Ops dispatched per training step (forward + loss, backward, gradient clipping, Adam step) for
   the ``multi30k`` preset's model shape on one batch of real Multi30k pairs of 20-30 tokens,
   counted by ``aiayn.bench.count_step_ops`` (a ``TorchDispatchMode``: every ATen call that
   reaches a kernel), for: the explicit model, the preset as trained today (fused attention
   only), ``set_fast`` (every fast path) and ``nn.Transformer`` with the same weights.
2. Beam-4 decoding of the first test 2016 sentences with the published weights (float32):
   uncached as today, cached, cached with padded batches, cached with the fast path; each time
   as a ratio of the uncached time measured in the same run, and the fraction of output lines
   identical to the uncached ones.

Run from the repository root (the data and the published run are read, never written)::

    AIAYN_DATA=../shared/data/multi30k .venv/bin/python tools/measure_fast_paths.py --sentences 50

Timings are of this CPU, on one thread by default: on a CPU shared with other work, two threads
wait for each other at every small operation and the timings swing several-fold. Op counts do
not depend on the machine, except that Adam is counted with ``fused=True``, as ``make_optimizer``
chooses it on CUDA, and that attention with dropout takes PyTorch's math path on the CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import time
from pathlib import Path

import torch

from aiayn.bench.contenders import TorchTransformer
from aiayn.bench.op_counts import count_step_ops
from aiayn.data.multi30k import (
    BOS,
    EOS,
    PAD,
    Tokenizer,
    load_multi30k,
)
from aiayn.decoding.search import beam_search, decode_sorted
from aiayn.engine.switch import set_fast
from aiayn.model import Transformer, TransformerConfig
from aiayn.training.batches import Batch

RUN = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"


def build(config_json: dict, vocab_size: int) -> Transformer:
    """The run's model, with the sizes of its config.json (as ``recipes.build_model`` builds it)."""
    c = config_json
    config = TransformerConfig(
        vocab_size,
        vocab_size,
        d_model=c["d_model"],
        d_ff=c["d_ff"],
        h=c["h"],
        N=c["N"],
        dropout=c["dropout"],
        max_len=c["max_len"],
        share_embeddings=c["share_embeddings"],
        tie_output=c["tie_output"],
        pad_id=PAD,
    )
    return Transformer(config)


def realistic_batch(tokenizer: Tokenizer, n: int = 30, low: int = 20, high: int = 30) -> Batch:
    """The first ``n`` training pairs whose source and target both have ``low``-``high`` ids (``<eos>`` included)."""
    src, tgt = [], []
    for de, en in load_multi30k("train"):
        s, t = tokenizer.encode(de) + [EOS], tokenizer.encode(en) + [EOS]
        if low <= len(s) <= high and low <= len(t) <= high:
            src.append(s)
            tgt.append(t)
            if len(src) == n:
                break
    return Batch.from_pairs(src, tgt, PAD, BOS)


def op_counts(config_json: dict, batch: Batch) -> list[tuple[str, dict[str, int]]]:
    torch.manual_seed(0)
    explicit = build(config_json, 8000)
    preset = copy.deepcopy(explicit)
    for m in preset.modules():  # the multi30k preset trains with fused attention only
        if hasattr(m, "use_fused"):
            m.use_fused = True
    fast = copy.deepcopy(explicit)
    set_fast(fast)
    rows = [
        ("ours, explicit", explicit),
        ("ours, fused attention (preset today)", preset),
        ("ours, set_fast (all fast paths)", fast),
        ("nn.Transformer, same weights", TorchTransformer(explicit)),
    ]
    # the first step creates Adam's state, the second is counted (bench.count_step_ops); Adam fused
    # as make_optimizer chooses it on CUDA
    return [(name, count_step_ops(model, batch, fused_adam=True, top=6)) for name, model in rows]


def decode_runs(config_json: dict, n: int, repeats: int) -> list[dict]:
    tokenizer = Tokenizer(RUN / "tokenizer.model")
    state = torch.load(RUN / "multi30k-averaged-fp16.pt", map_location="cpu", weights_only=True)["model"]
    model = build(config_json, tokenizer.vocab_size).eval()
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    sentences = [de for de, _ in load_multi30k("test2016")[:n]]
    ids = [s[: model.config.max_len - 1] + [EOS] for s in tokenizer.encode_batch(sentences)]
    beam, alpha = config_json["beam"], config_json["length_penalty"]
    a, b = config_json["max_len_a"], config_json["max_len_b"]

    def by_exact_length(use_cache: bool) -> list[str]:
        """As ``recipes.translate`` batches today: one source length per batch, no padding."""
        groups: dict[int, list[int]] = {}
        for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
            groups.setdefault(len(ids[i]), []).append(i)
        out = [""] * len(ids)
        for chunk in groups.values():
            S = len(ids[chunk[0]])
            src = torch.tensor([ids[i] for i in chunk])  # (B, S)
            limit = min(int(a * S + b) + 1, model.config.max_len)
            tokens = beam_search(model, src, None, limit, BOS, EOS, beam, alpha, use_cache=use_cache).tokens
            for i, text in zip(chunk, tokenizer.decode_batch(tokens), strict=True):
                out[i] = text
        return out

    def padded(batch_size: int) -> list[str]:
        outputs = decode_sorted(model, ids, BOS, EOS, beam, alpha, batch_size, a, b)
        return tokenizer.decode_batch(outputs)

    def with_fast(run):
        def inner():
            with set_fast(model):
                return run()

        return inner

    variants = [
        ("uncached, exact-length batches (today)", lambda: by_exact_length(False)),
        ("cached, exact-length batches", lambda: by_exact_length(True)),
        ("cached, padded batches of 128", lambda: padded(128)),
        ("cached, padded batches, set_fast", with_fast(lambda: padded(128))),
    ]
    results = [{"variant": name, "seconds": float("inf"), "lines": None} for name, _ in variants]
    for _ in range(repeats):  # round robin, so that a busy moment of the machine hits every variant
        for result, (_, run) in zip(results, variants, strict=True):
            start = time.perf_counter()
            result["lines"] = run()
            result["seconds"] = min(result["seconds"], time.perf_counter() - start)
    reference = results[0]
    for r in results:
        r["speedup"] = reference["seconds"] / r["seconds"]
        r["identical"] = sum(x == y for x, y in zip(r["lines"], reference["lines"], strict=True)) / len(ids)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=50, help="test 2016 sentences to decode")
    parser.add_argument("--repeats", type=int, default=1, help="time each decoding variant this often, keep the best")
    parser.add_argument("--skip-decoding", action="store_true")
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads (1: steadiest on a CPU shared with others)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config_json = json.loads((RUN / "config.json").read_text())
    print(
        f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    batch = realistic_batch(Tokenizer(RUN / "tokenizer.model"))
    print(
        f"\nOps per training step, multi30k shape (d_model 512, d_ff 2048, h 8, N 3, vocab 8000), "
        f"one batch of {batch.src.size(0)} pairs, src {tuple(batch.src.shape)}, tgt {tuple(batch.tgt_in.shape)}:"
    )
    rows = op_counts(config_json, batch)
    print(f"{'model':40} {'fwd+loss':>9} {'backward':>9} {'clip+Adam':>10} {'total':>7}")
    for name, c in rows:
        print(f"{name:40} {c['forward + loss']:9d} {c['backward']:9d} {c['clip + Adam']:10d} {c['total']:7d}")
    for name, c in rows:
        print(f"  most frequent forward ops, {name}: {c['top']}")

    if args.skip_decoding:
        return
    print(f"\nBeam {config_json['beam']} (alpha {config_json['length_penalty']}) decoding of the first "
          f"{args.sentences} test 2016 sentences, published weights as float32, best of {args.repeats}:")
    print(f"{'variant':42} {'seconds':>8} {'speed-up':>9} {'identical lines':>16}")
    for r in decode_runs(config_json, args.sentences, args.repeats):
        print(f"{r['variant']:42} {r['seconds']:8.1f} {r['speedup']:8.2f}x {r['identical']:15.0%}")


if __name__ == "__main__":
    main()
