"""A run's figures copied into the book: the small files of ``src/aiayn/results/``.

Chapter 11 reads them (``aiayn.runs.published.results_dir()``) wherever it runs, without the run:

    python -m aiayn.published results runs/multi30k --commit <sha> --date <day> --command "..."
    python -m aiayn.published attention --lines 209 757 276

write the run's record (where, when and how it was measured), its test translations, its
training and validation curves, and the published model's attention on a few of those test
translations, each file well under 1 MB.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..data.multi30k import load_multi30k
from ..data.tokenizer import Tokenizer
from ..files import atomic_write

__all__ = ["ATTENTION", "write_results", "write_attention"]

ATTENTION = "multi30k.attention.json.gz"


def _curves(records: list[dict[str, Any]], every: int) -> tuple[str, str]:
    """The training curve as means over windows of ``every`` steps, and every validation, as CSV."""
    steps = [r for r in records if r["event"] == "step"]
    train = ["step,epoch,loss,lr,tokens_per_s"]
    for k in range(0, len(steps), every):
        window = steps[k : k + every]
        last = window[-1]
        loss = sum(r["loss"] for r in window) / len(window)
        speed = sum(r["tokens"] for r in window) / sum(
            r["seconds"] for r in window
        )
        train.append(
            f"{last['step']},{last['epoch']},{loss:.4f},{last['lr']:.4e},{speed:.0f}"
        )
    val = ["step,epoch,val_loss,val_ppl"] + [
        f"{r['step']},{r['epoch']},{r['val_loss']:.4f},{r['val_ppl']:.3f}"
        for r in records
        if r["event"] == "eval"
    ]
    return "\n".join(train) + "\n", "\n".join(val) + "\n"


def write_results(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    commit: str,
    date: str,
    commands: Sequence[str],
    bench: list[dict[str, Any]] | None = None,
    split: str = "test2016",
    every: int = 10,
) -> dict[str, Path]:
    """Copy a run's figures into the book (``src/aiayn/results``): small files, each well under 1 MB.

    Writes ``<name>.json`` (where, when and how it was measured: device, torch, commit, date,
    commands; the config, the training summary, the split's scores, and ``bench`` rows if given),
    ``<name>.<split>.hyp.en`` (the translations), ``<name>.train.csv`` (training loss averaged
    over windows of ``every`` steps, learning rate, speed) and ``<name>.val.csv`` (every
    validation). Machine paths are left out.

    Args:
        run_dir: a trained and evaluated run folder (or a release of one).
        out_dir: e.g. ``src/aiayn/results`` (``results_dir()`` once installed).
        commit, date: the code's commit and the day of the run (a run folder does not record them).
        commands: the commands that produced the run, in order.
        bench: rows of ``python -m aiayn.bench`` on the same machine, if measured.
        split: the evaluated split.
        every: steps per point of the training curve.

    Returns:
        ``{kind: path}`` of the files written.
    """
    run, out = Path(run_dir), Path(out_dir)
    needed = [
        "config.json",
        "summary.json",
        "results.json",
        "metrics.jsonl",
        f"{split}.hyp.en",
    ]
    missing = [n for n in needed if not (run / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{run} lacks {missing}: train and evaluate it first"
        )
    config = json.loads((run / "config.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    summary.pop("out_dir", None)
    results = json.loads((run / "results.json").read_text())
    if split not in results:
        raise ValueError(
            f"{run / 'results.json'} has no {split!r} (it has {sorted(results)})"
        )
    name = config["name"]
    records = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    train_csv, val_csv = _curves(records, every)
    files = {
        "hypotheses": out / f"{name}.{split}.hyp.en",
        "train_curve": out / f"{name}.train.csv",
        "val_curve": out / f"{name}.val.csv",
        "record": out / f"{name}.json",
    }
    record = {
        "name": name,
        "measured_at": date,
        "commit": commit,
        "commands": list(commands),
        "device_name": summary.get("device_name"),
        "torch": summary.get("torch"),
        "config": config,
        "train": summary,
        "split": split,
        "test": results[split],
        "hypotheses": files["hypotheses"].name,
        "curves": {
            "train": files["train_curve"].name,
            "val": files["val_curve"].name,
            "every": every,
        },
        "bench": bench,
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(files["hypotheses"], (run / f"{split}.hyp.en").read_bytes())
    atomic_write(files["train_curve"], train_csv.encode())
    atomic_write(files["val_curve"], val_csv.encode())
    atomic_write(
        files["record"], (json.dumps(record, indent=2) + "\n").encode()
    )
    return files


def write_attention(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    lines: Sequence[int],
    out: str | os.PathLike,
    *,
    results: str | os.PathLike,
    root: str | os.PathLike | None = None,
) -> Path:
    """The model's attention re-reading its own test translations, on ``lines``, as ``ATTENTION``.

    Args:
        model, tokenizer: the published model (``aiayn.runs.published.load_published``).
        lines: test2016 line numbers (from 0).
        out: the folder to write ``ATTENTION`` into.
        results: the book's results, which hold the record ``multi30k.json`` and the
            translations it names (``aiayn.runs.published.results_dir()``).
        root: the Multi30k folder (``aiayn.data.multi30k.data_dir``).

    Returns:
        The file written.
    """
    from ..viz.translation import model_attention, save_attention_examples

    results = Path(results)
    record = json.loads((results / "multi30k.json").read_text())
    hypotheses = (results / record["hypotheses"]).read_text().splitlines()
    sources = [de for de, _ in load_multi30k("test2016", root)]
    examples = {
        line: model_attention(
            model, tokenizer, sources[line], hypotheses[line]
        )
        for line in lines
    }
    save_attention_examples(Path(out) / ATTENTION, examples)
    return Path(out) / ATTENTION
