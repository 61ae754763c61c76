"""Files the package downloads and checks by SHA-256: the Multi30k captions and the published model.

``download_file(url, path, sha256, deadline)`` streams the body into a temporary file beside
``path``, hashing it on the way, and renames it into place only when its SHA-256 is the expected
one: a file that is there under its name has been checked. ``check_file`` checks one already on
disk. Both raise ``ChecksumError``. ``user_cache_dir`` is where downloads are kept unless a folder
is given.
"""

from __future__ import annotations

import http.client
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..checks import UnusableInput
from ..files import AtomicWriter, sha256_file

__all__ = [
    "DEADLINE_S",
    "STALL_S",
    "DOWNLOAD_ERRORS",
    "ChecksumError",
    "Downloader",
    "user_cache_dir",
    "urlopen_pieces",
    "download_file",
    "check_file",
]

DEADLINE_S = 600.0  # for all the files one call downloads: a server trickling bytes is cut off too
STALL_S = 60.0  # the longest wait for the connection, the headers or the next bytes
# What a failed download raises (TimeoutError is an OSError: a slow one reports like a failed one).
DOWNLOAD_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError)

# A downloader takes a URL and the time.monotonic() deadline and yields the body in pieces.
Downloader = Callable[[str, float], Iterable[bytes]]


class ChecksumError(UnusableInput):
    """A file's SHA-256 differs from the one the package expects."""


def user_cache_dir(*parts: str) -> Path:
    """``~/.cache/aiayn/<parts>``, where downloads and what is learned from them are kept.

    ``$XDG_CACHE_HOME`` replaces ``~/.cache`` when it is set.
    """
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache").joinpath(
        "aiayn", *parts
    )


def _socket_of(response) -> socket.socket | None:
    """The socket under an ``http.client`` response (``None`` for anything else)."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def urlopen_pieces(
    url: str, deadline: float, size: int = 1 << 20
) -> Iterator[bytes]:
    """The body at ``url`` in pieces of at most ``size`` bytes, all of it by ``deadline``.

    ``deadline`` is a ``time.monotonic()`` time. ``response.read(n)`` would wait for all ``n``
    bytes, so a server sending a byte a second would never be cut off: each read here takes what
    has arrived (``read1``), under a socket timeout of the time left (at most ``STALL_S``).

    Raises:
        TimeoutError: the download ran past ``deadline`` (the message names ``url``).
    """
    budget, got = deadline - time.monotonic(), 0

    def past() -> TimeoutError:
        return TimeoutError(
            f"downloading {url} took over {budget:.0f} s and ran past its "
            f"deadline ({got:,} bytes so far)"
        )

    def time_left() -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise past()
        return min(STALL_S, left)

    with urllib.request.urlopen(url, timeout=time_left()) as response:
        sock = _socket_of(response)
        read = getattr(response, "read1", response.read)
        while True:
            left = time_left()
            if sock is not None:
                sock.settimeout(left)
            try:
                piece = read(size)
            except TimeoutError:
                if time.monotonic() >= deadline:
                    raise past() from None
                raise TimeoutError(
                    f"downloading {url} stalled: no bytes for {left:.0f} s "
                    f"({got:,} bytes so far)"
                ) from None
            if not piece:
                return
            got += len(piece)
            yield piece
            time_left()


def download_file(
    url: str,
    path: str | os.PathLike,
    sha256: str,
    deadline: float,
    downloader: Downloader | None = None,
) -> None:
    """Stream ``url`` into a temporary file beside ``path``, check it, then rename it to ``path``.

    Args:
        url: where the file is.
        path: where it goes; its folder is made if missing.
        sha256: the SHA-256 (hex) the file must have.
        deadline: the ``time.monotonic()`` time by which the download must be done.
        downloader: ``(url, deadline) -> byte pieces``; default ``urlopen_pieces`` (tests pass
            a fake).

    Raises:
        ChecksumError: the body is not the expected file; nothing is written.
        TimeoutError: the download ran past ``deadline``; nothing is written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with AtomicWriter(
        path
    ) as w:  # the temporary file is removed unless the block ends well
        for piece in (downloader or urlopen_pieces)(url, deadline):
            w.write(piece)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"downloading {url} ran past the deadline"
                )
        actual = w.finish().sha256
        if actual != sha256:
            raise ChecksumError(
                f"downloaded {url} has SHA-256 {actual}, expected {sha256}; "
                f"nothing was written to {path.parent}"
            )


# (path, inode, size, mtime_ns) -> SHA-256 of the files checked in this process
_CHECKED: dict[tuple[str, int, int, int], str] = {}


def check_file(path: str | os.PathLike, sha256: str, fix: str) -> None:
    """Raise ``ChecksumError`` unless the file at ``path`` has the SHA-256 ``sha256``.

    A file is read once per process: while its inode, size and modification time stay the same,
    its SHA-256 is remembered.

    Args:
        path: the file.
        sha256: the SHA-256 (hex) it must have.
        fix: what the message says after the two sums (what the file may be, what to do).
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _CHECKED:
        _CHECKED[key] = sha256_file(path)[1]
    actual = _CHECKED[key]
    if actual != sha256:
        raise ChecksumError(
            f"{path} has SHA-256 {actual}, expected {sha256}. {fix}"
        )
