"""Record the tree of one beam search with the published model, for chapter 8.3's figure (issue 44).

The script reads the published run (``$AIAYN_MODEL``, float32 on the CPU) and test 2016
(``$AIAYN_DATA``), decodes the first ``--scan`` test sentences greedily and with beam 4 (α 0.6,
the output limit of ``decode_sorted``), takes the first line (from 0) whose two translations differ
and whose beam output has at most ``--most`` pieces (a tree a phone can show), and writes its
``aiayn.decoding.trace.BeamTrace``, pieces as text, with each node's cross-attention:

    .venv/bin/python tools/beam_trace.py --out src/aiayn/results

``--line N`` records line N instead of searching. The record names the line, the source and both
translations, the search's sizes and the model (its weights file, their SHA-256 and the commit that
trained them, from the run's README); ``tests/test_beam_trace.py`` decodes it again and compares.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import torch

from aiayn.data.multi30k import BOS, EOS, load_multi30k
from aiayn.decoding.search import beam_search, greedy_decode
from aiayn.decoding.trace import BeamTrace, readable

ROOT = Path(__file__).resolve().parents[1]
NAME = "multi30k.beam_trace.json"
K, ALPHA = 4, 0.6  # the paper's beam and length penalty, the run's own


def limit(model, n_source: int) -> int:
    """The output limit ``decode_sorted`` gives a source of ``n_source`` ids (max_len_a 1, b 50)."""
    return min(int(1.0 * n_source + 50) + 1, model.config.max_len)


def decode(model, tokenizer, source: str, trace: BeamTrace | None = None):
    """Greedy and beam-4 pieces of ``source``, one sentence, float32 (``trace`` filled if given)."""
    ids = tokenizer.encode(source) + [EOS]
    src = torch.tensor([ids])  # (1, S)
    n = limit(model, len(ids))
    greedy = greedy_decode(model, src, None, n, BOS, EOS)[0].tolist()
    beam = beam_search(model, src, None, n, BOS, EOS, K, ALPHA, trace=trace)
    strip = [i for i in beam.tokens[0].tolist() if i != model.config.pad_id]
    return ids, greedy, strip


def record(model, tokenizer, line: int, source: str) -> dict:
    """The record of test line ``line``: its tree, pieces as text, and what it was made with."""
    trace = BeamTrace(attention=True)
    ids, greedy, beam = decode(model, tokenizer, source, trace)
    piece = tokenizer.id_to_piece
    return {
        "line": line,
        "source": source,
        "source_pieces": [piece(i) for i in ids],
        "greedy": tokenizer.decode(greedy),
        "beam": tokenizer.decode(beam),
        "sizes": {
            "beam_size": K, "length_penalty": ALPHA,
            "max_len": limit(model, len(ids)), "pruned": K, "top": trace.top,
            "digits": 4, "attention_digits": trace.digits,
        },  # fmt: skip
        "tree": readable(trace.trees[0], piece),
    }


def model_record(folder: Path) -> dict:
    """The weights file, its SHA-256 (from ``SHA256SUMS``) and the commit the run's README names."""
    sums = dict(
        reversed(line.split()) for line in (folder / "SHA256SUMS").read_text().splitlines()
    )
    weights = next(name for name in sums if name.endswith(".pt"))
    readme = (folder / "README.md").read_text()
    commit = re.search(r"at commit `([0-9a-f]+)`", readme)
    return {
        "run": folder.name, "weights": weights, "sha256": sums[weights],
        "commit": commit.group(1) if commit else None,
        "dtype": "float32", "device": "cpu",
    }  # fmt: skip


def main() -> None:
    from aiayn.runs.load import load_run

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "src/aiayn/results")
    parser.add_argument("--line", type=int, default=None)
    parser.add_argument("--scan", type=int, default=200)
    parser.add_argument("--most", type=int, default=12)
    args = parser.parse_args()
    folder = Path(os.environ["AIAYN_MODEL"])
    torch.manual_seed(0)
    _, tokenizer, model, _ = load_run(folder, "cpu")
    pairs = load_multi30k("test2016", download=False)
    lines = [args.line] if args.line is not None else range(args.scan)
    for line in lines:
        _, greedy, beam = decode(model, tokenizer, pairs[line][0])
        if args.line is not None or (greedy != beam and len(beam) <= args.most):
            break
    else:
        raise SystemExit(f"no line of the first {args.scan} fits")
    out = record(model, tokenizer, line, pairs[line][0])
    out["model"] = model_record(folder)
    text = json.dumps(out, ensure_ascii=False, separators=(",", ":"))
    (args.out / NAME).write_text(text + "\n")
    print(f"line {line}: {out['source']!r}\n  greedy: {out['greedy']}\n  beam:   {out['beam']}")
    print(f"{args.out / NAME}: {len(text) + 1} bytes")


if __name__ == "__main__":
    main()
