"""Which attention heads does the published model need? sacreBLEU on test 2016 with heads switched off.

    python tools/head_ablation.py                 # every part, resuming from the JSON
    python tools/head_ablation.py --dry-run       # the plan: how many translations of the split
    python tools/head_ablation.py --limit 20 --out /tmp/h.json   # a small trial

Michel et al. (2019, "Are Sixteen Heads Really Better than One?") switch heads off at test time by
multiplying a head's output by 0 before W^O; ``aiayn.model.set_head_mask`` does that with a mask
``(3, N, h)``: kind (encoder self-attention, decoder self-attention, cross-attention) × layer ×
head. The parts, in the order they run (the most informative first, so a run cut short has them):

1. ``full``: every head;
2. ``heads``: each head removed alone (3·N·h translations of the split);
3. ``layers``: each whole attention layer removed, one kind × one layer at a time;
4. ``keep_one``: all heads but one removed in one layer, one kind × one layer at a time; the head
   kept is the one whose removal alone cost most (the lowest BLEU in ``heads``; ties: the lower
   index), so this part runs after ``heads``.

Decoding is greedy, float32, with the package's fastest faithful CPU path (``translate``: the
key/value cache, finished sentences pruned, the fast twins, oneDNN's products), on ``--threads``
threads. Scores are cased sacreBLEU with its default tokenizer (13a), as ``aiayn.evaluate`` gives
them. ``--out`` (default ``src/aiayn/results/multi30k.head_ablation.json``) is rewritten atomically
the moment each figure exists, and a second call goes on where the first stopped; a file written
with another model, split, limit or decoding is refused. Each entry holds its BLEU, the number of
translations that differ from the full model's, its seconds, and the paired bootstrap of its
change against the full model (``aiayn.bleu.paired_bootstrap``: 1,000 resamples of the
sentences, sacreBLEU's seed): the 95 % interval ``low``..``high`` and the ``p_value``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from aiayn.bleu import paired_bootstrap
from aiayn.data.multi30k import load_multi30k
from aiayn.decoding.translate import translate
from aiayn.files import atomic_write
from aiayn.model import HEAD_KINDS
from aiayn.runs.published import load_published, results_dir

FORMAT = "aiayn-head-ablation/1"
DECODING = (
    "greedy, float32, translate's default engine (key/value cache, "
    "pruning, fast twins, oneDNN)"
)


def plan(N: int, h: int) -> list[tuple[str, tuple]]:
    """Every entry in running order: ``(key, what)``; ``keep_one`` picks its head later."""
    kinds = range(len(HEAD_KINDS))
    entries: list[tuple[str, tuple]] = [("full", ())]
    entries += [
        (f"head:{HEAD_KINDS[k]}:{n}:{i}", ("head", k, n, i))
        for k in kinds
        for n in range(N)
        for i in range(h)
    ]
    entries += [
        (f"layer:{HEAD_KINDS[k]}:{n}", ("layer", k, n))
        for k in kinds
        for n in range(N)
    ]
    entries += [
        (f"keep_one:{HEAD_KINDS[k]}:{n}", ("keep_one", k, n))
        for k in kinds
        for n in range(N)
    ]
    return entries


def most_costly_head(results: dict, k: int, n: int, h: int) -> int:
    """The head of layer ``n`` of kind ``k`` whose removal alone gave the lowest BLEU."""
    kind = HEAD_KINDS[k]
    bleu = [results[f"head:{kind}:{n}:{i}"]["bleu"] for i in range(h)]
    return min(range(h), key=lambda i: (bleu[i], i))


def mask_for(what: tuple, shape: tuple[int, int, int], results: dict):
    """The head mask ``(3, N, h)`` of one entry, and the head kept (``keep_one``) or ``None``."""
    mask = torch.ones(shape)
    kept = None
    if what and what[0] == "head":
        _, k, n, i = what
        mask[k, n, i] = 0.0
    elif what and what[0] == "layer":
        _, k, n = what
        mask[k, n] = 0.0
    elif what and what[0] == "keep_one":
        _, k, n = what
        kept = most_costly_head(results, k, n, shape[2])
        mask[k, n] = 0.0
        mask[k, n, kept] = 1.0
    return mask, kept


def sacrebleu(hypotheses: list[str], references: list[str]):
    """Cased sacreBLEU (13a) and its signature."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    score = bleu.corpus_score(hypotheses, [references]).score
    return score, str(bleu.get_signature())


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _header(args, published, sentences: int) -> dict:
    c = published.model.config
    return {
        "format": FORMAT,
        "model": str(Path(os.environ.get("AIAYN_MODEL", "published")).name),
        "split": args.split,
        "sentences": sentences,
        "decoding": DECODING,
        "kinds": list(HEAD_KINDS),
        "N": c.N,
        "h": c.h,
    }


def _load(path: Path, header: dict) -> dict:
    """The record so far at ``path`` (a new one if none), refused if written otherwise."""
    if not path.exists():
        return {**header, "results": {}}
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SystemExit(
            f"{path} is not a record of this tool ({error}); pass another --out"
        ) from error
    if not isinstance(record, dict) or not isinstance(
        record.get("results"), dict
    ):
        raise SystemExit(
            f"{path} is not a record of this tool (no results); pass another --out"
        )
    differs = [k for k in header if record.get(k) != header[k]]
    if differs:
        raise SystemExit(
            f"{path} was written with another {', '.join(differs)} "
            f"({', '.join(f'{k}={record.get(k)!r}' for k in differs)}); "
            "pass another --out"
        )
    return record


def _save(path: Path, record: dict) -> None:
    atomic_write(path, json.dumps(record, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    default = results_dir() / "multi30k.head_ablation.json"
    p.add_argument("--out", type=Path, default=default)
    p.add_argument("--split", default="test2016")
    p.add_argument(
        "--limit", type=int, default=None, help="first N sentences"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--parts", default="full,heads,layers,keep_one")
    p.add_argument("--dry-run", action="store_true")
    args = p.parse_args(argv)
    parts = set(args.parts.split(","))
    unknown = parts - {"full", "heads", "layers", "keep_one"}
    if unknown:
        p.error(f"--parts: unknown {sorted(unknown)}")
    torch.set_num_threads(args.threads)
    published = load_published()
    model, tokenizer, cfg = (
        published.model,
        published.tokenizer,
        published.config,
    )
    pairs = load_multi30k(args.split)[: args.limit]
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    record = _load(args.out, _header(args, published, len(pairs)))
    results = record["results"]
    shape = model.head_mask_shape
    names = {"head": "heads", "layer": "layers", "keep_one": "keep_one"}
    todo = [
        (key, what)
        for key, what in plan(shape[1], shape[2])
        if key not in results
        and names.get(what[0] if what else "", "full") in parts
    ]
    print(f"{len(results)} figures held, {len(todo)} to measure", flush=True)
    if args.dry_run:
        return 0
    record.update(
        machine=f"{_cpu_name()}, {os.cpu_count()} cores shared with other "
        f"jobs (load {os.getloadavg()[0]:.1f} at the start), "
        f"{args.threads} thread(s)",
        torch=torch.__version__,
        python=platform.python_version(),
    )
    full_lines = None
    for key, what in todo:
        if what and "full" not in results:
            raise SystemExit(
                "the full model's figure comes first: add full to --parts"
            )
        if what and what[0] == "keep_one":
            kind, n = HEAD_KINDS[what[1]], what[2]
            heads = [f"head:{kind}:{n}:{i}" for i in range(shape[2])]
            if any(head not in results for head in heads):
                raise SystemExit(
                    f"{key} keeps the head whose removal alone cost most: "
                    "measure the heads first (add heads to --parts)"
                )
        mask, kept = mask_for(what, shape, results)
        start = time.perf_counter()
        lines = translate(
            model, tokenizer, sources, beam=1, batch_size=args.batch_size,
            max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b, head_mask=mask,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        bleu, signature = sacrebleu(lines, references)
        if key == "full":
            full_lines = lines
            record["full_lines"] = lines
        full_lines = full_lines or record["full_lines"]
        changed = sum(a != b for a, b in zip(lines, full_lines, strict=True))
        entry = {
            "bleu": bleu,
            "changed": changed,
            "seconds": round(seconds, 2),
        }
        if (
            key != "full"
        ):  # the change against the full model, with its noise
            paired = paired_bootstrap(full_lines, lines, references)
            entry.update(
                low=round(paired.low, 3),
                high=round(paired.high, 3),
                p_value=round(paired.p_value, 4),
            )
        if kept is not None:
            entry["kept"] = kept
        results[key] = entry
        record["signature"] = signature
        record["wall_s"] = round(record.get("wall_s", 0.0) + seconds, 1)
        _save(args.out, record)
        print(
            f"{key}: BLEU {bleu:.2f}, {changed} changed, {seconds:.1f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
