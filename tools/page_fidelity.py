"""How often the page writes the model's own sentence: the page's Python twin against PyTorch.

The page (chapter 11.4) runs int8 graphs and, when the reader switches it on, a shortlist. Both can change
a choice of the search. This tool translates a hundred everyday German sentences of its own
(tests/data/everyday.de.txt: questions, names, numbers, long sentences; none a caption) with the published
model in PyTorch (``aiayn.decoding.translate``, float32) and with ``aiayn.export.translator`` on the page's
files, in int8 and float32, scoring every id or the shortlist, greedy and with beam search, and counts the
sentences where the two write the same English.

    python tools/page_fidelity.py                  # exports $AIAYN_MODEL into a temporary folder first
    python tools/page_fidelity.py --export DIR     # an export already made (python -m aiayn.export)

It writes src/aiayn/results/page_fidelity.json, which chapters 11.4 and 13.2 read.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ROOT / "tests" / "data" / "everyday.de.txt"
RESULTS = ROOT / "src" / "aiayn" / "results" / "page_fidelity.json"


def read_sentences(path: Path = SENTENCES) -> list[str]:
    """The sentences of ``path``, one a line (blank lines skipped)."""
    return [line.strip() for line in path.read_text("utf-8").splitlines() if line.strip()]


def export_into(folder: Path) -> Path:
    """The page's files of $AIAYN_MODEL (or the user cache), exported by ``aiayn.export`` into ``folder``."""
    from aiayn.export.command import main as export_main

    out = folder / "export"
    code = export_main(["--out", str(out), "--bleu", "none", "--no-progress"])
    if code != 0:
        raise SystemExit(f"python -m aiayn.export failed ({code})")
    return out


def pytorch_sentences(published, sentences: list[str], settings: dict, beam: int) -> list[str]:
    """The published model's translations in PyTorch: float32, the reference path (no engine's fast path), in
    batches (a sentence's translation does not depend on the others in its batch)."""
    import torch

    from aiayn.decoding.translate import translate

    with torch.inference_mode():
        return translate(
            published.model, published.tokenizer, sentences, beam=beam,
            length_penalty=settings["length_penalty"], fast=False,
            max_len_a=settings["max_len_a"], max_len_b=settings["max_len_b"],
        )  # fmt: skip


def measure(folder: Path, sentences: list[str]) -> dict:
    """The share of ``sentences`` where each search of the page's twin writes PyTorch's English."""
    from aiayn.export.translator import (
        OnnxModel,
        Vocabulary,
        load_settings,
        load_shortlist,
        translate,
    )

    settings = load_settings(folder)
    vocab = Vocabulary.load(folder)
    shortlist = load_shortlist(folder, vocab)
    if shortlist is None:
        raise SystemExit(f"{folder} has no shortlist.json: export it with --shortlist train")
    from aiayn.runs.published import load_published

    beams = (1, settings["beam"])
    published = load_published(download=False)
    reference = {}
    for beam in beams:
        started = time.perf_counter()
        reference[beam] = pytorch_sentences(published, sentences, settings, beam)
        print(f"PyTorch, beam {beam}: {time.perf_counter() - started:.1f} s", flush=True)
    same, seconds, outputs = {}, {}, {}
    for int8 in (True, False):
        model = OnnxModel(folder, int8)
        for listed in (False, True):
            for beam in beams:
                name = f"{'int8' if int8 else 'float32'}.{'shortlist' if listed else 'every_id'}.beam{beam}"
                started = time.perf_counter()
                english = translate(model, vocab, sentences, settings, beam, shortlist=shortlist if listed else None)
                seconds[name] = round(time.perf_counter() - started, 2)
                same[name] = sum(a == b for a, b in zip(english, reference[beam], strict=True))
                outputs[name] = english
                print(f"{name:28} {same[name]:3d} of {len(sentences)} as PyTorch ({seconds[name]:.1f} s)", flush=True)
    return {
        "what": "sentences of tests/data/everyday.de.txt where the page's Python twin writes PyTorch's English",
        "sentences": len(sentences),
        "same": same,
        "decode_s": seconds,
        "pytorch": {f"beam{b}": reference[b] for b in beams},
        "page": outputs,
        "settings": {k: settings[k] for k in ("beam", "length_penalty", "max_len_a", "max_len_b")},
        "command": "python tools/page_fidelity.py",
        "machine": f"{platform.machine()}, one onnxruntime thread",
        "measured_at": date.today().isoformat(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="an export of the model (default: export into a temp folder)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"the record to write (default {RESULTS})")
    args = parser.parse_args(argv)
    sentences = read_sentences()
    with tempfile.TemporaryDirectory(prefix="page-fidelity-") as tmp:
        folder = args.export or export_into(Path(tmp))
        record = measure(folder, sentences)
    args.out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
