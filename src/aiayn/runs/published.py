"""The published model: a trained Multi30k translator, found, downloaded, checked and loaded.

``load_published()`` gives the German-to-English model of one full run of the ``multi30k`` preset
(on one H100, see ``aiayn/results/README.md``) as ``(config, tokenizer, model, averaged)``, in eval
mode and in float32, ready for a CPU. It needs three files, looked up like the Multi30k files of
``aiayn.data.multi30k``:

1. in the folder given as ``root``, else in ``$AIAYN_MODEL``, else in
   ``~/.cache/aiayn/models/multi30k-h100`` (``$XDG_CACHE_HOME`` is honoured);
2. missing ones are downloaded from the repository's release assets (``RELEASE_URL``), within one
   deadline for the whole download, checked against ``SHA256`` and only then renamed into place
   (``aiayn.data.download``).

A file whose SHA-256 differs is refused by name; offline, without a copy, the error lists the files,
their URLs and where to put them. The weights are stored in float16 (52 MB) and run as float32.
They load with ``strict=True``: when the model's code changes its parameter names or packs
projections together, ``upgrade_state_dict`` converts the published layout to the new one.

A folder with its own ``SHA256SUMS`` (a release of any run, as ``aiayn.runs.release`` writes it) is
checked against those sums instead, and nothing is downloaded into it: ``load_published(root=DIR)``
loads the one ``<name>-averaged-fp32.pt`` (or ``-fp16``) it holds, with that run's config and tokenizer.

Its command line is ``python -m aiayn.published`` (``aiayn/published.py``).
"""

from __future__ import annotations

import importlib.resources
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..data.download import (
    DEADLINE_S,
    DOWNLOAD_ERRORS,
    ChecksumError,
    Downloader,
    check_file,
    download_file,
    user_cache_dir,
)
from .weights_files import (
    SUMS,
    WEIGHTS_SUFFIX,
    read_sums,
    read_weights,
    weights_name,
)

__all__ = [
    "REPOSITORY_URL",
    "RELEASE_TAG",
    "RELEASE_URL",
    "WEIGHTS",
    "SHA256",
    "ModelUnavailable",
    "ChecksumError",
    "Published",
    "model_dir",
    "results_dir",
    "fetch_published",
    "weights_file",
    "upgrade_state_dict",
    "load_published",
    "load_or_explain",
]

# The one repository URL is `repository.url` in _config.yml; a test checks that this is it.
REPOSITORY_URL = "https://github.com/aiayn-book/aiayn"
RELEASE_TAG = "multi30k-h100-2026-11-23"
RELEASE_URL = f"{REPOSITORY_URL}/releases/download/{RELEASE_TAG}/"
WEIGHTS = weights_name("multi30k")  # the published run's config name
# The files load_published needs, and their SHA-256 (from the run's SHA256SUMS).
SHA256 = {
    "config.json": "6bcfada9987bc54858e4e7462f6d897022808ea5441ac988e5f50d070a2f895b",
    "tokenizer.model": "5efc6898833bf61ae15f7e1a3614cc5fa80fd3abd271b53c0f0c58d727807dc9",
    WEIGHTS: "88f6c06decd16e2dd45ef1927ffbf788df653ea526717fdf0be844addec63776",
}


class ModelUnavailable(RuntimeError):
    """The published model's files are neither on disk nor downloadable."""


class Published(NamedTuple):
    """What ``load_published`` returns (unpacks like ``recipes.load_run``)."""

    config: Any  # the run's TrainConfig
    tokenizer: Any  # aiayn.data.tokenizer.Tokenizer
    model: torch.nn.Module  # aiayn.model.Transformer, eval mode
    averaged: list[str]  # the checkpoints whose mean the weights are


# --- Finding and checking the files ---------------------------------------------------------------


def results_dir() -> Path:
    """The published run's figures, shipped with the package: its record, curves and translations.

    Chapter 11 reads them from here, so it finds them wherever it runs (Colab opens a notebook
    alone, with nothing beside it). ``python -m aiayn.published results`` writes them.
    """
    return Path(str(importlib.resources.files("aiayn") / "results"))


def model_dir(root: str | os.PathLike | None = None) -> Path:
    """Where the published files live: ``root``, else ``$AIAYN_MODEL``, else the user cache."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("AIAYN_MODEL")
    if env:
        return Path(env).expanduser()
    return user_cache_dir("models", "multi30k-h100")


def _unavailable(
    missing: Sequence[str], directory: Path, reason: str
) -> str:
    lines = [
        f"the published model's files are missing from {directory} and could "
        f"not be downloaded ({reason}).",
        "Needed:",
        *(f"  {name}  <-  {RELEASE_URL}{name}" for name in missing),
        f"Download them by hand into {directory}, or point the AIAYN_MODEL "
        "environment variable (or the root= argument) at a folder that holds them.",
    ]
    return "\n".join(lines)


def fetch_published(
    root: str | os.PathLike | None = None,
    *,
    download: bool = True,
    downloader: Downloader | None = None,
    deadline_s: float = DEADLINE_S,
) -> Path:
    """Make sure the published files are in ``model_dir(root)`` and intact; return that folder.

    Args:
        root: the folder (default ``$AIAYN_MODEL``, else the user cache).
        download: fetch missing files from ``RELEASE_URL``.
        downloader: ``(url, deadline) -> byte pieces``; default ``aiayn.data.download.urlopen_pieces``
            (tests pass a fake).
        deadline_s: seconds allowed for downloading all missing files together.

    A folder holding ``SHA256SUMS`` (a release) is checked against it instead: every file it
    lists must be there and match; nothing is downloaded into it.

    Raises:
        ModelUnavailable: files are missing and cannot be downloaded.
        ChecksumError: a file (on disk or downloaded) is not the published one.
        NotADirectoryError: the folder is a file.
    """
    directory = model_dir(root)
    if directory.exists() and not directory.is_dir():
        given = "root=" if root is not None else "$AIAYN_MODEL"
        raise NotADirectoryError(
            f"the model folder {directory} is a file, not a folder: give "
            f"{given} the folder holding {', '.join(SHA256)} (or a release "
            "with its SHA256SUMS)"
        )
    if (directory / SUMS).is_file():
        _check_release(directory)
        return directory
    unfinished = [
        p.name
        for p in sorted(directory.glob(f"*{WEIGHTS_SUFFIX}"))
        if p.name != WEIGHTS
    ]
    if unfinished or (directory / "MODEL_CARD.md").is_file():
        raise ModelUnavailable(
            f"{directory} holds {', '.join(unfinished) or 'MODEL_CARD.md'} but "
            f"no {SUMS}: an unfinished release (SHA256SUMS is written last). "
            "Release the run again into a new folder (python -m "
            "aiayn.published release RUN --out DIR)"
        )
    missing = [n for n in SHA256 if not (directory / n).is_file()]
    if missing and not download:
        raise ModelUnavailable(
            _unavailable(missing, directory, "download=False")
        )
    deadline = time.monotonic() + deadline_s
    for name in missing:
        try:
            download_file(
                RELEASE_URL + name,
                directory / name,
                SHA256[name],
                deadline,
                downloader,
            )
        except DOWNLOAD_ERRORS as err:
            reason = f"{type(err).__name__}: {err}"
            raise ModelUnavailable(
                _unavailable(missing, directory, reason)
            ) from err
    for name, expected in SHA256.items():
        check_file(
            directory / name,
            expected,
            "The file is damaged or not the published one; delete it to "
            "download it again.",
        )
    return directory


def weights_file(directory: Path) -> Path:
    """The weights of a folder: ``WEIGHTS``, or in a release the one ``*-averaged-fp32.pt`` or ``-fp16``."""
    if not (directory / SUMS).is_file():
        return directory / WEIGHTS
    found = sorted(directory.glob(f"*{WEIGHTS_SUFFIX}"))
    if len(found) != 1:
        raise ModelUnavailable(
            f"{directory} holds {len(found)} weights files "
            f"({', '.join(p.name for p in found) or 'none'}); expected exactly "
            f"one *{WEIGHTS_SUFFIX}, as python -m aiayn.published release "
            "writes it"
        )
    return found[0]


def _check_release(directory: Path) -> None:
    """Check a folder against its own ``SHA256SUMS``: every file listed, present and intact."""
    sums = read_sums(directory / SUMS)
    weights = weights_file(directory)
    unlisted = [
        n for n in ("config.json", "tokenizer.model", weights.name)
        if n not in sums
    ]  # fmt: skip
    if unlisted:
        raise ChecksumError(
            f"{directory / SUMS} does not list {', '.join(unlisted)}, so "
            "they cannot be checked; release the run again (python -m "
            "aiayn.published release RUN --out DIR)"
        )
    missing = [n for n in sums if not (directory / n).is_file()]
    if missing:
        raise ModelUnavailable(
            f"{directory} lacks {', '.join(missing)}, which its {SUMS} "
            "lists: copy the whole release into the folder again"
        )
    for name, expected in sums.items():
        check_file(
            directory / name,
            expected,
            f"The file is damaged or not the one {directory / SUMS} lists; "
            "copy it from the release again.",
        )


# --- Loading --------------------------------------------------------------------------------------


def _pack(
    state: dict, prefix: str, want: torch.Tensor
) -> torch.Tensor | None:
    """A packed projection ``want`` rebuilt from the separate q/k/v ones under ``prefix``."""
    leaf = "weight" if want.dim() == 2 else "bias"
    for parts in (("w_q", "w_k", "w_v"), ("w_k", "w_v")):
        keys = [f"{prefix}{p}.{leaf}" for p in parts]
        if all(k in state for k in keys):
            packed = torch.cat([state[k] for k in keys], dim=0)
            if packed.shape == want.shape:
                return packed
    return None


def upgrade_state_dict(
    state: dict[str, torch.Tensor], model: torch.nn.Module
) -> dict:
    """Convert published weights to the parameter layout of ``model``'s code.

    The published layout (``aiayn`` at commit dffaf16) keeps four projections per attention layer,
    ``w_q``, ``w_k``, ``w_v`` and ``w_o``. A key the model wants but the file lacks is rebuilt
    when the file holds its parts under the same module: a packed ``(3·d, d)`` projection from
    ``w_q``, ``w_k``, ``w_v``, a packed ``(2·d, d)`` one from ``w_k``, ``w_v`` (same for biases).
    Keys used that way, and buffers the model does not keep, are dropped. Anything else is left
    for ``load_state_dict(strict=True)`` to report.

    Args:
        state: the published ``state_dict``.
        model: a freshly built model of the published config.

    Returns:
        A state dict with the model's keys wherever a conversion applied.
    """
    wanted = model.state_dict()
    if set(state) == set(wanted):
        return dict(state)
    out = {k: v for k, v in state.items() if k in wanted}
    used: set[str] = set()
    for key, want in wanted.items():
        if key in out:
            continue
        prefix = key.rsplit(".", 2)[0] + "." if key.count(".") >= 2 else ""
        packed = _pack(state, prefix, want)
        if packed is not None:
            out[key] = packed
            used.update(k for k in state if k.startswith(prefix))
    buffers = {name for name, _ in model.named_buffers()}
    left = [
        k
        for k in state
        if k not in out and k not in used and k not in buffers
    ]
    out.update({k: state[k] for k in left})  # strict loading will name them
    return out


def load_published(
    root: str | os.PathLike | None = None,
    device: torch.device | str = "cpu",
    *,
    dtype: torch.dtype = torch.float32,
    download: bool = True,
    downloader: Downloader | None = None,
) -> Published:
    """The published translator, checked and loaded strictly, in eval mode.

    Args:
        root: the folder with the files (default ``$AIAYN_MODEL``, else the user cache), or
            a release of any run (checked against its own ``SHA256SUMS``).
        device: where the model goes (default the CPU).
        dtype: the dtype the stored float16 weights are cast to (float32: CPUs run it fastest).
        download: fetch missing files from the release.
        downloader: see ``fetch_published``.

    Returns:
        ``Published(config, tokenizer, model, averaged)``.
    """
    from ..data.tokenizer import Tokenizer
    from .presets import TrainConfig, build_model

    directory = fetch_published(
        root, download=download, downloader=downloader
    )
    weights = weights_file(directory)
    saved = read_weights(weights, fix="copy it from the release again")
    config_file = json.loads((directory / "config.json").read_text())
    if "config" not in saved:
        raise ValueError(
            f"{weights} holds no 'config' entry (it holds "
            f"{', '.join(map(repr, sorted(map(str, saved))))}): expected the "
            "run's config beside its 'model' weights, as a release writes "
            "them; copy it from the release again"
        )
    if saved["config"] != config_file:
        raise ValueError(
            f"{weights} was saved with another config than "
            f"{directory / 'config.json'}"
        )
    cfg = TrainConfig.from_dict(config_file)  # older, flat layouts too
    tokenizer = Tokenizer(directory / "tokenizer.model")
    model = build_model(cfg, tokenizer)
    state = {
        k: v.to(dtype) if v.is_floating_point() else v
        for k, v in saved["model"].items()
    }
    model.load_state_dict(upgrade_state_dict(state, model), strict=True)
    model = model.to(device=device, dtype=dtype).eval()
    return Published(cfg, tokenizer, model, list(saved.get("averaged", [])))


def load_or_explain(
    run: str | os.PathLike | None = None,
) -> Published | None:
    """The published model (or, with ``run``, the model of a run folder), else ``None`` and why.

    Chapter 11 starts with this: without the published files it prints one paragraph (what is
    missing, and the three ways to get it: the release, ``$AIAYN_MODEL``, or training a profile
    in this runtime and naming its folder as ``run``) instead of a traceback, and the rest of the
    chapter falls back on the figures that ship with the package (``results_dir()``).
    """
    import textwrap

    if run is not None:
        from .load import load_run

        return Published(*load_run(run, "cpu"))
    try:
        return load_published()
    except (ModelUnavailable, ChecksumError) as err:
        reason = str(err).splitlines()[0].rstrip(".")
    where = model_dir()
    text = (
        f"The published model cannot be loaded here: {reason}. The rest of "
        "this page uses the figures and translations that ship with the "
        "package and skips what needs the model, saying so. Three ways to "
        f"get it: (1) download {', '.join(SHA256)} from {RELEASE_URL} into "
        f"{where}; (2) set $AIAYN_MODEL to a folder that holds them; (3) train "
        "a model in this runtime, e.g. `!python -m aiayn.train --preset "
        "laptop --out runs/laptop` (about an hour on two CPU cores) or "
        '`--preset multi30k-t4` on a GPU, then set RUN = "runs/laptop" at '
        "the top of this cell and run the page again."
    )
    print(
        textwrap.fill(
            text, 77, break_on_hyphens=False, break_long_words=False
        )
    )
    return None
