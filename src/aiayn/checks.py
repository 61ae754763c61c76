"""Input checks shared by the package (errors that say what was expected and what arrived), and one atomic write."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "check_shape",
    "check_positive",
    "check_token_dtype",
    "check_int",
    "atomic_write",
    "write_json_gz",
    "read_json_gz",
    "AtomicWriter",
    "DISK_FULL",
    "UnusableInput",
    "DiskFull",
    "is_disk_full",
    "WrittenFile",
    "sha256_file",
    "unreadable_weights",
    "resolve_device",
    "Record",
]


def _fmt(shape: Sequence[int | None]) -> str:
    inner = ", ".join("*" if s is None else str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def check_shape(
    tensor: torch.Tensor,
    expected: Sequence[int | None],
    name: str = "tensor",
) -> torch.Tensor:
    """Raise a ``ValueError`` unless ``tensor.shape`` matches ``expected``.

    Args:
        tensor: the tensor to check.
        expected: the wanted shape; ``None`` in a position accepts any size there.
        name: how the tensor is called in the error message.

    Returns:
        ``tensor`` itself, so a check can wrap an expression.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor, got {type(tensor).__name__}"
        )
    actual = tuple(tensor.shape)
    expected = tuple(expected)
    ok = len(actual) == len(expected) and all(
        e is None or a == e for a, e in zip(actual, expected, strict=True)
    )
    if not ok:
        raise ValueError(
            f"{name}: expected shape {_fmt(expected)}, got {_fmt(actual)}"
        )
    return tensor


def check_positive(**sizes: int) -> None:
    """Raise a ``ValueError`` for any size that is not a positive integer (``check_positive(d_model=512)``)."""
    for key, value in sizes.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value <= 0
        ):
            raise ValueError(
                f"{key} must be a positive integer, got {value!r}"
            )


def check_token_dtype(tokens: torch.Tensor, name: str = "tokens") -> None:
    """Raise a ``TypeError`` unless ``tokens`` is an integer tensor of token ids."""
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(
            f"{name}: expected a torch.Tensor of token ids, got {type(tokens).__name__}"
        )
    if (
        tokens.dtype.is_floating_point
        or tokens.dtype.is_complex
        or tokens.dtype == torch.bool
    ):
        raise TypeError(
            f"{name}: expected an integer tensor of token ids (torch.long), got dtype {tokens.dtype}"
        )


def check_int(
    name: str,
    value: object,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """Raise a ``ValueError`` unless ``value`` is an integer (not a bool) within ``[minimum, maximum]``.

    Args:
        name: how the value is called in the error message (``"--limit"``, ``"beam"``).
        value: the value to check.
        minimum, maximum: inclusive bounds; ``None`` leaves that side open.

    Returns:
        ``value`` itself.
    """
    ok = not isinstance(value, bool) and isinstance(value, int)
    ok = (
        ok
        and (minimum is None or value >= minimum)
        and (maximum is None or value <= maximum)
    )
    if not ok:
        if minimum is not None and maximum is not None:
            wanted = f"an integer in [{minimum}, {maximum}]"
        elif minimum is not None:
            wanted = f"an integer >= {minimum}"
        elif maximum is not None:
            wanted = f"an integer <= {maximum}"
        else:
            wanted = "an integer"
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return value  # type: ignore[return-value]


@dataclass(frozen=True)
class WrittenFile:
    """What an atomic write wrote: the final path, its size in bytes and its SHA-256 (hex)."""

    path: Path
    size: int
    sha256: str

    def __fspath__(self) -> str:
        return os.fspath(self.path)


_UMASK = os.umask(0o022)
os.umask(_UMASK)
TMP_SUFFIX = ".tmp"  # temporary files are ".<name>.<random>.tmp" beside their destination


class AtomicWriter:
    """Write a file so that readers see the old file or the whole new one, never a part.

    The bytes go to a temporary ``.<name>.<random>.tmp`` in the same folder and are hashed on
    the way (no second read). ``finish()`` flushes them to disk and returns the ``WrittenFile``
    still under the temporary name, so that a manifest can note what is coming; leaving the
    ``with`` block renames the file over ``path`` (``os.replace``). On any error, a full disk and
    Ctrl-C included, the temporary file is removed; only a killed process can leave one behind,
    and ``aiayn.runs.folder`` removes those of its own files.

        with AtomicWriter(path) as w:
            w.write(data)
            manifest.expect(w.finish())   # optional
        w.written                         # path, size, SHA-256

    Args:
        path: destination file; its folder must exist.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.written: WrittenFile | None = None

    def __enter__(self) -> AtomicWriter:
        fd, self.tmp = tempfile.mkstemp(
            dir=self.path.parent,
            prefix=f".{self.path.name}.",
            suffix=TMP_SUFFIX,
        )
        os.chmod(
            fd, 0o666 & ~_UMASK
        )  # as open() would create it, not mkstemp's 0o600
        self.f = os.fdopen(fd, "wb")
        self.hash, self.size = hashlib.sha256(), 0
        return self

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append ``data``, hashing it in 8 MiB pieces as they are written."""
        view = memoryview(data).cast("B")
        for i in range(0, len(view), 1 << 23):
            piece = view[i : i + (1 << 23)]
            self.hash.update(piece)
            with self._naming_the_file():
                self.f.write(piece)
            self.size += len(piece)

    def finish(self) -> WrittenFile:
        """Flush to disk; the file keeps its temporary name until the ``with`` block ends."""
        if self.written is None:
            with self._naming_the_file():
                self.f.flush()
                os.fsync(self.f.fileno())
                self.f.close()
            self.written = WrittenFile(
                self.path, self.size, self.hash.hexdigest()
            )
        return self.written

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if kind is None:
                self.finish()
                os.replace(self.tmp, self.path)
                return
        except BaseException:
            self._discard()
            raise
        self._discard()

    @contextlib.contextmanager
    def _naming_the_file(self):
        """Give an ``OSError`` that names no file (a full disk's) the destination's name."""
        try:
            yield
        except OSError as err:
            if err.filename is not None:
                raise
            raise OSError(err.errno, err.strerror, str(self.path)) from None

    def _discard(self) -> None:
        """Close and remove the temporary file, even when closing fails (a full disk)."""
        try:
            # closing flushes what is buffered, which fails again on a full disk; the error
            # that is already on its way is the one to report
            with contextlib.suppress(OSError):
                self.f.close()
        finally:
            Path(self.tmp).unlink(missing_ok=True)


class UnusableInput(RuntimeError):
    """An input the user supplies (a data folder, a downloaded file) cannot be used: a usage error."""


# what a write raises for want of room: a full disk, a quota, a limit on a file's size
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class DiskFull(OSError):
    """A write failed for want of room; the message names the file and says how to go on."""


def is_disk_full(err: BaseException) -> bool:
    return isinstance(err, OSError) and err.errno in DISK_FULL


def disk_full(err: OSError, then: str) -> DiskFull:
    """``err`` (a full disk's) said in one line: the file, why, and ``then``, what to do after freeing room."""
    where = f"{err.filename}: " if err.filename else ""
    return DiskFull(
        err.errno,
        f"{where}no room to write it ({err.strerror}); free some space, then {then}",
    )


def atomic_write(
    path: str | os.PathLike, content: bytes | bytearray | memoryview | str
) -> WrittenFile:
    """Write ``content`` (text as UTF-8) to ``path`` atomically; see ``AtomicWriter``.

    Returns:
        A ``WrittenFile`` with the path, size and SHA-256 of what was written.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    with AtomicWriter(path) as w:
        w.write(data)
    return w.written


def write_json_gz(
    path: str | os.PathLike,
    record: object,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> WrittenFile:
    """``record`` as compact gzipped JSON, written atomically; the same record gives the same
    bytes (no time stamp in the gzip header), so a figures file written again diffs as unchanged."""
    text = json.dumps(
        record,
        separators=(",", ":"),
        sort_keys=sort_keys,
        ensure_ascii=ensure_ascii,
    )
    return atomic_write(path, gzip.compress(text.encode("utf-8"), mtime=0))


def read_json_gz(path: str | os.PathLike) -> Any:
    """What ``write_json_gz`` wrote."""
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def sha256_file(path: str | os.PathLike) -> tuple[int, str]:
    """Size and SHA-256 (hex) of a file, read in 1 MiB pieces."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return size, h.hexdigest()


def unreadable_weights(
    label: str, err: Exception, what: str = "weights file"
) -> str:
    """Why ``torch.load(..., weights_only=True)`` refused the file ``label``, in one line.

    It names the file and never passes on torch's advice to load with ``weights_only=False``,
    which would run whatever the file asks: a file that asks to call a function is no weights
    file, and the message says which function it asks for.

    Args:
        label: the file, as the message names it.
        err: what ``torch.load`` raised.
        what: what the file should have been (``"checkpoint"``).
    """
    asked = re.search(r"GLOBAL ([\w.]+)", str(err))
    if asked is not None:
        return (
            f"{label} is not a {what}: loading it would call "
            f"{asked.group(1)}, and a {what} holds only tensors and numbers, "
            "so it is not loaded"
        )
    return (
        f"{label} cannot be read as a {what} ({type(err).__name__}): it is "
        f"truncated or damaged, or not a {what}"
    )


def resolve_device(device: torch.device | str | None) -> torch.device:
    """``device``, checked to exist here; ``None`` gives CUDA when available, else the CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(device)
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError) as err:
        cuda = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        raise ValueError(
            f"device {str(device)!r} cannot be used here ({str(err).splitlines()[0]}); "
            f"available: {', '.join(['cpu', *cuda])}. Pass one of them with --device"
        ) from None
    return device


class Record:
    """A dataclass that also answers ``record["name"]`` and ``to_dict()``: results written as JSON.

    ``RunSummary`` and ``EvalResult`` were dicts once; code written then keeps working.
    """

    def __getitem__(self, key: str):
        if key not in {f.name for f in fields(self)}:
            raise KeyError(key)
        return getattr(self, key)

    def to_dict(self) -> dict:
        return asdict(self)
