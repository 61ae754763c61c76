"""The files a published model or a release of a run holds: their names, ``SHA256SUMS`` and the weights.

What ``aiayn.runs.published`` needs to read a model, apart from ``aiayn.runs.release``, which writes one: loading
the published model reads these and imports no tool that makes a release or trains.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import torch

from ..data.download import ChecksumError
from ..files import unreadable_weights

__all__ = [
    "SUMS",
    "WEIGHTS_SUFFIX",
    "weights_name",
    "read_sums",
    "read_weights",
]

SUMS = "SHA256SUMS"  # a release's own sums, written last
WEIGHTS_SUFFIX = "-averaged-fp??.pt"  # a glob: fp32, or fp16 (half the size)


def weights_name(config_name: str, half: bool = True) -> str:
    """The released weights of a run: ``<config name>-averaged-fp16.pt`` (``-fp32`` in float32)."""
    return f"{config_name}-averaged-fp{16 if half else 32}.pt"


_SUMS_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


def read_sums(path: str | os.PathLike) -> dict[str, str]:
    """``{file name: SHA-256}`` from a ``SHA256SUMS`` file (``sha256sum``'s format)."""
    path = Path(path)
    sums = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        match = _SUMS_LINE.fullmatch(line)
        name = match.group(2) if match else ""
        if not match or Path(name).name != name or name in (".", ".."):
            raise ChecksumError(
                f"{path} line {number} is {line[:80]!r}; expected "
                "'<64 hex digits>  <file name>' (as sha256sum writes)"
            )
        sums[name] = match.group(1)
    return sums


def read_weights(
    path: Path, data: bytes | None = None, fix: str = ""
) -> dict[str, Any]:
    """The weights in ``path`` (or its bytes); a file that holds none is refused by name.

    Args:
        path: the file, named in errors.
        data: its bytes, when already read.
        fix: what to do, appended to an error.
    """
    try:
        saved = torch.load(
            path if data is None else io.BytesIO(data),
            map_location="cpu",
            weights_only=True,
        )
    except Exception as err:  # pickle, zip and torch errors alike
        raise ValueError(
            f"{unreadable_weights(str(path), err)}; {fix}"
        ) from None
    if not isinstance(saved, dict) or not isinstance(
        saved.get("model"), dict
    ):
        raise ValueError(
            f"{path} is not a weights file of aiayn (expected a dict with a "
            f"'model' state, got {type(saved).__name__}); {fix}"
        )
    return saved
