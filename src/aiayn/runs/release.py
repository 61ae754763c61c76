"""A release of a run for GitHub: its averaged weights, records, model card and ``SHA256SUMS``.

Weights never enter git; they go to a GitHub release:

    python -m aiayn.published release runs/multi30k --out runs/release
    make release RUN=runs/multi30k

``prepare_release`` checks that the run was trained and evaluated on test2016 and that
``runs/release`` is new or empty, then writes the averaged weights
(``<config name>-averaged-fp32.pt``; ``--half``: float16, ``-fp16.pt``, half the size, a few
translations differ), the tokenizer, the config, the run's records, ``MODEL_CARD.md`` (data and
its licence terms, recipe, scores, limits) and, last, ``SHA256SUMS`` into ``runs/release`` (git
ignores ``runs/``); the run folder is only read. A folder without ``SHA256SUMS`` is an unfinished
release. Upload the files as the assets of a release tagged ``aiayn.runs.published.RELEASE_TAG``;
``aiayn.runs.published.load_published(root=DIR)`` loads a release, checked against its own sums
(``read_sums``).
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
from pathlib import Path

import torch

from ..files import atomic_write
from ..training.checkpoints import CHECKPOINT
from .weights_files import (
    SUMS,
    WEIGHTS_SUFFIX,
    read_sums,
    read_weights,
    weights_name,
)

__all__ = [
    "SUMS",
    "WEIGHTS_SUFFIX",
    "RUN_FILES",
    "LICENCE",
    "ReleaseError",
    "weights_name",
    "read_sums",
    "read_weights",
    "model_card",
    "prepare_release",
]

# What a release copies from its run, beside the weights, the card and the sums.
RUN_FILES = (
    "tokenizer.model", "config.json", "summary.json", "metrics.jsonl",
    "results.json", "test2016.hyp.en",
)  # fmt: skip
LICENCE = (
    "Multi30k (Elliott et al., 2016, https://github.com/multi30k/dataset) is "
    "partly derived from Flickr30k (Young et al., 2014). Its authors provide it "
    "for non-commercial research and educational purposes only; they do not own "
    "the copyright of the Flickr images, whose use must follow the Flickr Terms "
    "of Use. The model was trained on the German and English captions only, and "
    "inherits these terms: research and teaching, not commercial use. Cite both "
    "data sets."
)


class ReleaseError(ValueError):
    """A run cannot be released as asked: not evaluated yet, or the folder is not new or empty."""


# --- Making one -----------------------------------------------------------------------------------


def _release_weights(
    run: Path, name: str, half: bool
) -> tuple[str, bytes, list[str]]:
    """A run's weights (float16 with ``half``) as the bytes of a ``.pt`` file, and their checkpoints.

    A trained run's last epochs are averaged (``load_run``, which only reads); a folder that
    holds no ``checkpoint.pt`` but one ``*-averaged-fp16.pt`` (a published run) gives that file,
    as it is, under its own name.
    """
    from .load import load_run

    if not (run / CHECKPOINT).is_file():
        (path,) = sorted(run.glob(f"*{WEIGHTS_SUFFIX}"))
        data = path.read_bytes()
        saved = read_weights(
            path, data, "restore it from the release it came from"
        )
        return path.name, data, list(saved.get("averaged", [path.name]))
    _, _, model, sources = load_run(run, "cpu", average=True)
    state = {
        k: v.half() if half and v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    config = json.loads((run / "config.json").read_text())
    buffer = io.BytesIO()
    torch.save(
        {"model": state, "config": config, "averaged": sources}, buffer
    )
    return name, buffer.getvalue(), sources


def _of(n: int | None, total: int) -> str:
    """``the 1,014`` pairs, or ``the first 20 of the 1,014``."""
    every = f"the {total:,}"
    return (
        every if n is None or n >= total else f"the first {n:,} of {every}"
    )


def model_card(
    config: dict,
    summary: dict,
    results: dict,
    sums: dict[str, str],
    weights: str | None = None,
    half: bool = True,
) -> str:
    """The release's ``MODEL_CARD.md``: what the model is, its data and terms, recipe, scores, limits.

    Args:
        config: the run's ``config.json`` (nested, or the flat layout of older runs).
        summary, results: its ``summary.json`` and ``results.json``.
        sums: ``{file name: SHA-256}`` of the released files.
        weights: the weights' file name (default ``weights_name`` of the config's name).
        half: the weights are stored in float16 (else float32).
    """
    from .recipes import TrainConfig

    test = results.get("test2016", {})
    cfg = TrainConfig.from_dict(config)  # older, flat layouts too
    m = cfg.model
    weights = weights or weights_name(cfg.name)
    lines = [
        f"# {cfg.name}: a German-to-English Transformer trained on Multi30k",
        "",
        "## Model",
        f"An encoder-decoder Transformer (Vaswani et al., 2017) of the `aiayn` package: "
        f"N = {m.N} layers per stack, d_model = {m.d_model}, d_ff = {m.d_ff}, "
        f"h = {m.h}, P_drop = {m.dropout}, one joint BPE vocabulary of "
        f"{m.src_vocab_size:,} pieces shared by both embeddings and the output layer; "
        f"{summary.get('parameters', 0):,} parameters. `{weights}` holds the mean of the "
        f"weights of the last {cfg.average_last} epochs in "
        f"{'float16' if half else 'float32'}; "
        "`aiayn.runs.published.load_published(root=<this folder>)` loads it as float32.",
        "",
        "## Data and licence terms",
        LICENCE,
        f"Training: {_of(cfg.train_subset, 29000)} pairs of the Multi30k task 1 "
        f"training split; validation: {_of(cfg.val_subset, 1014)} pairs of its "
        f"validation split; test: {_of(test.get('sentences'), 1000)} pairs of "
        "test2016.",
        "",
        "## Recipe",
        f"`python -m aiayn.train --config config.json` (this release's config, the "
        f"`{cfg.name}` settings): {cfg.epochs} epochs, batches "
        f"of {cfg.max_tokens:,} padded tokens, Adam with the Noam schedule (warmup "
        f"{cfg.warmup}, factor {cfg.lr_factor}), label smoothing {cfg.label_smoothing}, "
        f"gradient clipping {cfg.clip_norm}. Trained on {summary.get('device_name')} "
        f"with torch {summary.get('torch')} ({summary.get('amp')} autocast): "
        f"{summary.get('steps', 0):,} steps in {summary.get('wall_s', 0):.0f} s.",
        "",
        "## Scores (test2016, German to English)",
        f"Beam {test.get('beam')}, length penalty α {test.get('length_penalty')}: "
        f"sacreBLEU {test.get('sacrebleu') or float('nan'):.2f} "
        f"(`{test.get('signature')}`), our BLEU {test.get('bleu', float('nan')):.2f}; "
        f"test loss {test.get('loss', float('nan')):.3f}, perplexity "
        f"{test.get('ppl', float('nan')):.2f}.",
        "",
        "## Limits",
        "Multi30k is short image captions (about 12 words): the model translates "
        "such captions and little else. Names, rare words and long sentences come "
        "out wrong or are left out; it never saw news, dialogue or other domains. "
        "Scores on Multi30k are far higher than on WMT news and cannot be compared "
        "with the paper's. It may reproduce the biases of the captions.",
        "",
        "## Files (SHA-256)",
        *(f"- `{name}`: `{digest}`" for name, digest in sums.items()),
        "",
    ]
    return "\n".join(lines)


def _check_run(run: Path):
    """The run's folder and config, once it is known to hold all a release needs."""
    from .folder import RunFolder

    if not run.is_dir():
        raise FileNotFoundError(
            f"the run {run} is not a folder: expected a run folder trained by "
            "python -m aiayn.train and evaluated by python -m aiayn.evaluate"
        )
    missing = [n for n in RUN_FILES if not (run / n).is_file()]
    weights = sorted(run.glob(f"*{WEIGHTS_SUFFIX}"))
    if not (run / CHECKPOINT).is_file() and len(weights) != 1:
        missing.insert(0, f"{CHECKPOINT} (or one *{WEIGHTS_SUFFIX})")
    if missing:
        raise FileNotFoundError(
            f"the run {run} lacks {', '.join(missing)}: train it (python -m "
            f"aiayn.train --out {run}) and evaluate it on test2016 (python -m "
            f"aiayn.evaluate {run} --split test2016) first"
        )
    folder = RunFolder(run)
    cfg = folder.read_config()
    # a damaged results.json: remove it and evaluate again (it holds only scores)
    results = folder.read_results()
    if "test2016" not in results:
        raise ReleaseError(
            f"{run / 'results.json'} has no 'test2016' entry (it has "
            f"{sorted(results)}): "
            f"evaluate the run with its own settings first (python -m "
            f"aiayn.evaluate {run} --split test2016)"
        )
    name = weights_name(cfg.name)
    if Path(name).name != name or "/" in cfg.name or "\\" in cfg.name:
        raise ReleaseError(
            f"{run / 'config.json'} names the run {cfg.name!r}, which cannot "
            "name a file; expected a name such as 'multi30k'"
        )
    return folder, cfg, results


def _check_out(out: Path, run: Path) -> None:
    """Refuse a release folder inside the run, a file, or a folder that holds anything."""
    if (
        out.resolve() == run.resolve()
        or run.resolve() in out.resolve().parents
    ):
        raise ReleaseError(
            f"the release folder {out} is inside the run {run}, which a release "
            "only reads: choose a folder outside it (e.g. runs/release)"
        )
    if out.exists() and not out.is_dir():
        raise ReleaseError(
            f"the release folder {out} is a file, not a folder: choose a new "
            "or empty folder"
        )
    names = sorted(p.name for p in out.iterdir()) if out.exists() else []
    if not names:
        return
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    if SUMS in names:
        what = "a release (it has SHA256SUMS)"
    elif "MODEL_CARD.md" in names or any(
        fnmatch.fnmatch(n, f"*{WEIGHTS_SUFFIX}") for n in names
    ):
        what = (
            "an unfinished release (no SHA256SUMS, which a release writes "
            "last: it was interrupted)"
        )
    elif "config.json" in names or "manifest.json" in names:
        what = "a run folder"
    else:
        what = f"{len(names)} entries"
    raise ReleaseError(
        f"the release folder {out} already holds {what} ({shown}): a "
        "release goes into a new or empty folder; remove it, or choose "
        "another with --out"
    )


def prepare_release(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    half: bool = False,
) -> dict[str, str]:
    """Write the files of a release of ``run_dir`` into ``out_dir``: weights, records, card, sums.

    ``run_dir`` is a run trained and evaluated on test2016 (``aiayn.runs.recipes``: its last epochs
    are averaged), or a folder that already holds one ``*-averaged-fp16.pt`` (released as it
    is); it is only read. Everything is checked before anything is written:
    the run's files (against its manifest), that its test2016 scores come from the weights
    released, and that ``out_dir`` is new or empty. Each file is written atomically and
    ``SHA256SUMS`` last, so a folder without it is an unfinished release.

    The weights are named ``weights_name(config name, half)``: ``multi30k-smoke-averaged-fp32.pt``
    for a smoke run. In float32 (the default) the release translates exactly as the run; ``half``
    stores float16, half the size (the published ``multi30k-averaged-fp16.pt`` is so), which
    changes a few translations (25 of 1,000 test sentences of a smoke run, beam 2).

    Returns:
        ``{file name: SHA-256}`` of the files written (also in ``SHA256SUMS``).

    Raises:
        FileNotFoundError: the run lacks a file (not trained or not evaluated).
        ReleaseError: ``out_dir`` is not new or empty, or the scores do not fit the weights.
    """
    run, out = Path(run_dir), Path(out_dir)
    folder, cfg, results = _check_run(run)
    _check_out(out, run)
    name, weights, sources = _release_weights(
        run, weights_name(cfg.name, half), half
    )
    scored = results["test2016"].get("checkpoints")
    if scored is not None and list(scored) != list(sources):
        raise ReleaseError(
            f"the test2016 scores in {run / 'results.json'} come from the mean "
            f"of {', '.join(scored)}, but the run's last epochs are now "
            f"{', '.join(sources)} (trained on since?): evaluate it again "
            f"(python -m aiayn.evaluate {run} --split test2016)"
        )
    files = {name: weights}
    files |= {name: folder.read_verified(name) for name in RUN_FILES}
    records = [
        json.loads(files[n])
        for n in ("config.json", "summary.json", "results.json")
    ]
    out.mkdir(parents=True, exist_ok=True)
    sums = {name: atomic_write(out / name, data).sha256
            for name, data in files.items()}  # fmt: skip
    card = model_card(
        *records, sums, weights=name, half=name.endswith("-fp16.pt")
    )
    sums["MODEL_CARD.md"] = atomic_write(out / "MODEL_CARD.md", card).sha256
    text = "".join(
        f"{digest}  {name}\n" for name, digest in sorted(sums.items())
    )
    atomic_write(out / SUMS, text)
    return sums
