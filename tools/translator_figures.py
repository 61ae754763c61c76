"""Write the figures of the in-browser translator (chapter 11.4) from an export, for the package to ship.

    python -m aiayn.export $AIAYN_MODEL --out runs/export --bleu int8
    python tools/translator_figures.py runs/export --out src/aiayn/results

writes ``multi30k.translator.json``: the size of every file the page downloads (onnxruntime-web's runtime from
node_modules included, and their sum as the page's button states it), the BLEU of the int8 graphs on
test 2016 (greedy and beam search, sacreBLEU: the page's search, with the export's shortlist, and the same
graphs scoring every id), the shortlist's length on the test sentences, and the versions and machine that
measured it. The chapter prints
these figures wherever it runs, with or without the model; `make book` exports again for the site (the same
command), and this file is what the chapter states.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from site_assets import NODE, download_bytes

OUT_NAME = "multi30k.translator.json"
RUNTIME = "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm"  # in node_modules, as site_assets vendors it


def generic(command: str) -> str:
    """The export command without this machine's paths: the model folder as $AIAYN_MODEL, the output as DIR."""
    words = command.split()
    out = words.index("--out")
    words[out + 1] = "DIR"
    if out == 4:  # python -m aiayn.export RUN --out ...
        words[3] = "$AIAYN_MODEL"
    return " ".join(words)


def runtime() -> dict:
    """onnxruntime-web's WebAssembly runtime as the site serves it: its version and size."""
    wasm = NODE / RUNTIME
    if not wasm.is_file():
        raise SystemExit(f"{wasm} is missing: run `npm ci` first")
    version = json.loads((NODE / "onnxruntime-web" / "package.json").read_text())["version"]
    return {"file": RUNTIME, "version": version, "bytes": wasm.stat().st_size}


def shortlisted(folder: Path, manifest: dict) -> dict:
    """The shortlist's lengths on test 2016's sources, and the BLEU of the int8 graphs scoring every id."""
    import statistics

    from aiayn.data.multi30k import load_multi30k
    from aiayn.export import scores
    from aiayn.export import translator as tr
    from aiayn.export.shortlist import load, targets

    record, vocab = load(folder), tr.Vocabulary.load(folder)
    if record is None:
        raise SystemExit(f"{folder} has no shortlist.json: export without --shortlist none")
    pairs = load_multi30k("test2016")
    lengths = [len(targets(record, tr.source_ids(vocab, s, 256), vocab.eos_id)) for s, _ in pairs]
    every = scores.score_files(folder, pairs, True, (1, manifest["settings"]["beam"]), shortlisted=False)
    return {
        "top": record["top"],
        "frequent": len(record["frequent"]),
        "vocabulary": len(vocab.pieces),
        "targets_test2016": {"median": statistics.median(lengths), "min": min(lengths), "max": max(lengths)},
        "bleu_every_id": {key: entry["bleu"] for key, entry in every.items()},
    }


def figures(folder: Path) -> dict:
    manifest = json.loads((folder / "manifest.json").read_text())
    wasm = runtime()
    if not manifest["bleu"]:
        raise SystemExit(f"{folder}/manifest.json has no BLEU: export with --bleu int8")
    bleu = {
        key.removeprefix("int8."): {k: v for k, v in entry.items() if k != "command"}
        for key, entry in manifest["bleu"].items()
        if key.startswith("int8.")
    }
    return {
        "what": "the published model as chapter 11.4's page runs it: int8 ONNX graphs (aiayn.export.command)",
        "source": manifest["source"],
        "settings": manifest["settings"],
        "files": {name: entry["bytes"] for name, entry in manifest["files"].items()},
        "page_bytes": manifest["page_bytes"],
        "page_files": manifest["page_files"],
        "runtime": wasm,
        "download_bytes": download_bytes(manifest["page_bytes"], wasm["bytes"]),
        "bleu_test2016": bleu,
        "shortlist": shortlisted(folder, manifest),
        "command": generic(next(iter(manifest["bleu"].values()))["command"]),
        "versions": manifest["versions"],
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "measured_at": time.strftime("%Y-%m-%d", time.gmtime((folder / "manifest.json").stat().st_mtime)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", type=Path, help="a folder written by python -m aiayn.export --bleu int8")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write it into")
    args = parser.parse_args()
    record = figures(args.export)
    path = args.out / OUT_NAME
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}: the page downloads {record['download_bytes'] / 1e6:.1f} MB, BLEU " +
          ", ".join(f"{k} {v['bleu']}" for k, v in record["bleu_test2016"].items()))


if __name__ == "__main__":
    main()
