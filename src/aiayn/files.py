"""Files written whole or not at all, and read back checked: the package's one atomic write.

``atomic_write`` (and ``AtomicWriter``, for a file written in pieces) writes a temporary file beside
its destination, hashes it while it is written, flushes it to disk and renames it into place, so a
reader finds the old file or the new one, never half of one. ``write_json_gz``/``read_json_gz`` keep
the book's recorded figures; ``sha256_file`` checks a download or a manifest entry. A full disk is
said in one line that names the file and how to go on (``disk_full``), and a weights file that asks
to run code is refused by name (``unreadable_weights``). Checks of arguments and tensors are
``aiayn.checks``.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write",
    "write_json_gz",
    "read_json_gz",
    "AtomicWriter",
    "TMP_SUFFIX",
    "DISK_FULL",
    "DiskFull",
    "is_disk_full",
    "disk_full",
    "WrittenFile",
    "sha256_file",
    "unreadable_weights",
]


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
