"""Loading a trained run: its model rebuilt from the run folder, the last epochs' weights averaged.

``load_run(run_dir)`` reads ``config.json``, the tokenizer and the checkpoints (checked against the
folder's manifest), averages the last ``average_last`` epochs' weights as the paper does, and gives
the model in eval mode. Nothing is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..checks import resolve_device
from ..data.tokenizer import Tokenizer
from ..model import Transformer
from ..training.checkpoints import read_checkpoint
from .folder import CHECKPOINT, TOKENIZER, RunFolder, RunFolderError
from .presets import TrainConfig, build_model

__all__ = ["average_checkpoints", "load_run"]


def _weights(folder: RunFolder, path: Path) -> dict[str, Any]:
    """The checkpoint at ``path`` (checked against the folder's manifest when it lists it)."""
    data = (
        folder.read_verified(path.name)
        if path.parent == folder.path
        else path.read_bytes()
    )
    return read_checkpoint(data, str(path))


def average_checkpoints(
    paths: Sequence[str | os.PathLike],
) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights in ``paths`` (floating-point tensors; others from the last).

    Files inside a run folder with a manifest are checked against it.
    """
    if not paths:
        raise ValueError(
            "average_checkpoints: expected at least one checkpoint path, "
            "got none"
        )
    states = [
        _weights(RunFolder(Path(p).parent), Path(p))["model"] for p in paths
    ]
    _check_same_shapes(paths, states)
    mean = {}
    for key, value in states[-1].items():
        if (
            value.is_floating_point()
        ):  # averaged in float64, stored as before
            total = sum(s[key].double() for s in states)
            mean[key] = total.div(len(states)).to(value.dtype)
        else:
            mean[key] = value
    return mean


def _check_same_shapes(
    paths: Sequence[str | os.PathLike], states: list[dict[str, Any]]
) -> None:
    """Refuse, naming both files, weights that cannot be averaged with the last file's."""
    last = paths[-1]
    for path, state in zip(paths, states, strict=True):
        for key, value in states[-1].items():
            if key not in state:
                raise ValueError(
                    f"{path} holds no {key!r}, which {last} holds: checkpoints of "
                    "different models cannot be averaged"
                )
            if isinstance(value, torch.Tensor) and (
                not isinstance(state[key], torch.Tensor)
                or state[key].shape != value.shape
            ):
                shape = tuple(getattr(state[key], "shape", ()))
                raise ValueError(
                    f"{path} holds {key} of shape {shape}, {last} of shape "
                    f"{tuple(value.shape)}: checkpoints of different models "
                    "cannot be averaged"
                )


def load_run(
    run_dir: str | os.PathLike,
    device: torch.device | str | None = None,
    average: bool = True,
) -> tuple[TrainConfig, Tokenizer, Transformer, list[str]]:
    """Rebuild a trained model from its run folder, in eval mode; nothing is written.

    With ``average`` and ``average_last = k > 1``, the weights are the mean of the last k epoch
    checkpoints, plus the final weights when training stopped inside an epoch after them. A folder
    that holds no ``checkpoint.pt`` but one ``*averaged*.pt`` (a published run) gives those weights.

    Returns:
        ``(config, tokenizer, model, names of the checkpoints whose weights it holds)``.
    """
    folder = RunFolder(run_dir)
    if not folder.path.is_dir():
        raise RunFolderError(
            f"{folder.path} is not a folder: expected a run folder "
            "written by python -m aiayn.train"
        )
    cfg = folder.read_config()
    folder.read_verified(TOKENIZER)
    tokenizer = Tokenizer(folder.file(TOKENIZER))
    device = resolve_device(device)
    model = build_model(cfg, tokenizer)
    checkpoint = folder.file(CHECKPOINT)
    published = sorted(folder.path.glob("*averaged*.pt"))
    if not checkpoint.is_file() and published:
        saved = _weights(folder, published[0])
        state = {
            k: v.float() if v.is_floating_point() else v
            for k, v in saved["model"].items()
        }
        sources = list(saved.get("averaged", [published[0].name]))
    else:
        sources = [checkpoint]
        if average and cfg.average_last > 1:
            epochs = folder.epoch_files()
            final_step = _weights(folder, checkpoint)["step"]
            last_epoch_step = (
                _weights(folder, epochs[-1])["step"] if epochs else -1
            )
            sources = epochs + (
                [checkpoint] if final_step > last_epoch_step else []
            )
            sources = sources[-cfg.average_last :]
        state = average_checkpoints(sources)
        sources = [p.name for p in sources]
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise RunFolderError(
            f"the weights in {folder.path} do not fit its config.json "
            f"({str(err).splitlines()[0]}); "
            "were files copied in from another run?"
        ) from None
    return cfg, tokenizer, model.to(device).eval(), sources
