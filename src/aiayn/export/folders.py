"""The folders an export writes: what ``--out`` and RUN may be, the lock, leftovers, and the staged write.

``--out`` is a new or empty folder, or an earlier export, which is replaced as a whole (its
manifest says ``"format": "aiayn-export/1"``); a run folder, a folder of results or a folder with
other files is refused (``check_out``, ``check_run``, ``check_model_folder``). Everything is written
into a sibling folder, ``DIR.unfinished-export-<random>``, renamed to DIR at the end (``staged``):
Ctrl-C or a crash leaves the old DIR or none, never half an export. Each folder the export makes
beside DIR holds ``.aiayn-export-temporary`` from the start, with the folder's own name in it; the
next export removes a killed one's leftover by that mark (``remove_leftovers``) and leaves any other
folder alone, whatever its name. While it writes, the export holds an ``flock`` on
``DIR.export-lock`` beside DIR (``export_lock``; a file, never followed through a link, removed at
the end): a second export into the same DIR fails at once. ``stepthrough write`` and
``embedding_map`` hold their folders by the same rules (``hold_folder``).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import glob
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import cli
from ..files import atomic_write, sha256_file
from ..runs.folder import (
    CHECKPOINT,
    CONFIG,
    RunFolder,
    RunFolderError,
    shown,
)
from .graphs import EXPORT_FORMAT, MANIFEST

# DIR.unfinished-export-<random>: the folder an export writes, renamed to DIR when it is finished
UNFINISHED = ".unfinished-export-"


# DIR.replaced-export-<random>: an earlier export, moved aside while the new one takes its place
REPLACED = ".replaced-export-"


# written first into each folder above, holding the folder's name: a leftover the export removes
MARK = ".aiayn-export-temporary"


# DIR.export-lock: held (flock) while an export writes DIR
LOCK = ".export-lock"


EXPECTED_OUT = (
    "expected a new or empty folder, or an earlier export (replaced whole)"
)


EXPECTED_RUN = (
    "expected a run folder written by python -m aiayn.train (config.json, "
    "checkpoint.pt) or the published model's folder (config.json, "
    "tokenizer.model, *-averaged-fp16.pt)"
)


class FolderInUse(ValueError):
    """Another command holds the lock of the folder this one would write."""


def is_export(manifest: Any) -> bool:
    """Whether a ``manifest.json`` (parsed) is an export's: ``"format": "aiayn-export/1"``.

    Exports written before the field existed are known by their ``"what"``.
    """
    if not isinstance(manifest, dict) or not isinstance(
        manifest.get("files"), dict
    ):
        return False
    what = str(manifest.get("what", ""))
    return manifest.get("format") == EXPORT_FORMAT or what.startswith(
        "the translator as ONNX graphs (aiayn.export.command)"
    )


def _read_manifest(folder: Path) -> Any:
    """``folder/manifest.json`` parsed, ``None`` when it is missing or not JSON."""
    try:
        return json.loads((folder / MANIFEST).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _is_run_folder(folder: Path, names: list[str]) -> str:
    """What makes ``folder`` a folder of ``train`` or ``evaluate`` (``aiayn.runs.folder``), ``""`` if nothing."""
    weights = [n for n in names if fnmatch.fnmatch(n, "*averaged*.pt")]
    found = [n for n in (CONFIG, CHECKPOINT) if n in names]
    if weights:
        return f"a model's folder (it has {', '.join(found + weights)})"
    if found:
        return f"a run folder (it has {', '.join(found)})"
    run = RunFolder(folder)
    try:
        run.manifest()  # refuses a manifest that is not a run's
    except RunFolderError:
        return ""
    if run.has_manifest():
        return "a folder of python -m aiayn.evaluate's results (its manifest.json is a run's)"
    return ""


def check_out(out: Path) -> str:
    """What ``--out`` is, before anything is loaded: ``"new"``, ``"empty"`` or ``"export"``.

    Raises ``ValueError`` naming what was found instead: a file, a link, a run folder or a folder
    of results (writing into them would replace their ``manifest.json``, after which ``train``
    would not resume the run and ``evaluate`` would not read it), an earlier export that holds
    files it did not write, or another folder that is not empty.
    """
    blocking = next(
        (p for p in out.parents if p.exists() and not p.is_dir()), None
    )
    if blocking is not None:
        raise ValueError(
            f"--out {out}: {blocking} is a file, not a folder; {EXPECTED_OUT}"
        )
    if out.is_symlink():
        raise ValueError(
            f"--out {out} is a symbolic link, which the export would replace by "
            f"a folder; {EXPECTED_OUT}, named by its own path"
        )
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise ValueError(f"--out {out} is a file; {EXPECTED_OUT}")
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return "empty"
    run = _is_run_folder(out, names)
    if run:
        raise ValueError(
            f"--out {out} is {run}, which an export never writes into (its "
            f"{MANIFEST} would stop python -m aiayn.train resuming a run and "
            f"python -m aiayn.evaluate reading it); {EXPECTED_OUT}, e.g. "
            f"--out {out.parent / (out.name + '-onnx')}"
        )
    manifest = _read_manifest(out)
    if is_export(manifest):
        ours = {*manifest["files"], MANIFEST}
        foreign = [
            n for n in names if n not in ours and not HYPOTHESES.fullmatch(n)
        ]
        if foreign:
            raise ValueError(
                f"--out {out} is an earlier export, but it also holds "
                f"{shown(foreign)}, which the export did not write and "
                "replacing it would delete; move them out, or choose "
                "another --out"
            )
        return "export"
    raise ValueError(
        f"--out {out} is not empty ({shown(names)}) and is not an export "
        f"(no {MANIFEST} of python -m aiayn.export), so its files would be "
        f"overwritten; {EXPECTED_OUT}"
    )


def check_run(run: str | None) -> tuple[str, Path]:
    """What RUN names, before anything is loaded: ``("run", folder)`` or ``("published", folder)``.

    A folder with a ``*averaged*.pt`` is the published model (or a release of a run); one with
    ``config.json`` and ``checkpoint.pt`` is a run folder. Anything else is refused by name.
    Without RUN: the published model's folder (``$AIAYN_MODEL``, else the user cache).
    """
    from ..runs.published import model_dir

    if run is None:
        folder = model_dir()
        check_model_folder(
            folder,
            "python -m aiayn.export without RUN",
            f"; to export a run, name it: python -m aiayn.export {folder} "
            "--out DIR",
        )
        return "published", folder
    path = Path(run)
    if not run.strip():
        raise cli.UsageError(
            f"RUN must name a folder, got an empty string; {EXPECTED_RUN}"
        )
    if not path.exists():
        raise FileNotFoundError(
            f"the run folder {path} does not exist; {EXPECTED_RUN}"
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"the run folder {path} is a file; {EXPECTED_RUN}"
        )
    if list(path.glob("*averaged*.pt")):  # as runs.load.load_run
        return "published", path
    if (path / CONFIG).is_file() and (path / CHECKPOINT).is_file():
        return "run", path
    if (path / CONFIG).is_file():
        raise RunFolderError(
            f"the run folder {path} has {CONFIG} but no {CHECKPOINT}: the "
            "run has not saved its first checkpoint (python -m aiayn.train "
            f"--out {path} goes on); {EXPECTED_RUN}"
        )
    names = sorted(p.name for p in path.iterdir())
    holds = f"it holds {shown(names)}" if names else "it is empty"
    raise RunFolderError(
        f"{path} is neither a run folder nor the published model's folder "
        f"({holds}); {EXPECTED_RUN}"
    )


def check_model_folder(
    folder: Path, command: str, instead: str = "", offline: bool = False
) -> None:
    """Refuse a model folder that is not the published model's, before anything is downloaded into it.

    ``$AIAYN_MODEL`` (else the user cache) names the published model's folder, or a release of
    a run (with its ``SHA256SUMS``). A run folder there (``checkpoint.pt``, a run's
    ``manifest.json``) or a foreign ``config.json`` would get the published weights downloaded
    beside its own files, after which its ``config.json`` is called damaged.

    Args:
        folder: ``aiayn.runs.published.model_dir()``.
        command: what reads the model, for the message.
        instead: appended to the message: what to do with a run.
        offline: the command downloads nothing, so a missing file is refused here too.

    Raises:
        RunFolderError: the folder holds a run, or another model's ``config.json``.
        FileNotFoundError: with ``offline``, the folder or one of its files is missing.
    """
    from ..runs.published import SHA256
    from ..runs.weights_files import SUMS

    if os.environ.get("AIAYN_MODEL"):
        named, fix = f"AIAYN_MODEL={folder}", "point AIAYN_MODEL at"
    else:
        named, fix = f"the model folder {folder}", "set AIAYN_MODEL to"
    if (folder / SUMS).is_file():
        return  # a release: it is checked against its own sums when loaded
    found = [n for n in (CHECKPOINT, MANIFEST) if (folder / n).exists()]
    if found:
        why = f"a training run's folder (it has {', '.join(found)})"
    elif (folder / CONFIG).is_file() and (
        sha256_file(folder / CONFIG)[1] != SHA256[CONFIG]
    ):
        why = f"not the published model's folder (its {CONFIG} is another)"
    elif offline and not folder.is_dir():
        raise FileNotFoundError(
            f"{named} does not exist; {command} reads the published model: "
            f"{fix} the folder that holds {', '.join(SHA256)} (python -m "
            "aiayn.runs.published check downloads them into $AIAYN_MODEL, else "
            "the user cache)"
        )
    elif offline and any(not (folder / n).is_file() for n in SHA256):
        missing = [n for n in SHA256 if not (folder / n).is_file()]
        raise FileNotFoundError(
            f"{named} lacks {', '.join(missing)} of the published model, "
            f"which {command} reads: python -m aiayn.published check "
            f"downloads them into it (or {fix} a folder that holds them)"
        )
    else:
        return
    raise RunFolderError(
        f"{named} is {why}, and nothing is downloaded into it; {command} "
        f"reads the published model: {fix} the folder that holds "
        f"{', '.join(SHA256)} (or unset it to use the user cache){instead}"
    )


def hold_folder(folder: Path, what: str = "--out") -> int | None:
    """An open descriptor of ``folder`` holding an exclusive ``flock``: a command is writing it.

    The folder is opened as it is named, never through a symbolic link. Another command that
    holds it already: ``FolderInUse``, which names the folder (``what`` says what it is).
    """
    try:
        import fcntl
    except ImportError:  # not on Windows: no lock, and leftovers are kept
        return None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(folder, flags)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise ValueError(
            f"{what} {folder} is a symbolic link; name the folder by its own path"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderInUse(
            f"another command is writing into {folder}; wait for it to finish, "
            f"or choose another {what}"
        ) from None
    return fd


def _plain_file(path: Path, size: int = 256) -> bytes | None:
    """The first ``size`` bytes of ``path`` when it is a plain file (not through a link), else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(size)


def _mark(folder: Path, name: str) -> None:
    """Mark ``folder`` as one the export may delete when it is left over, under the name ``name``."""
    atomic_write(folder / MARK, f"{name}\n")


def is_leftover(path: Path) -> bool:
    """Whether ``path`` is a folder an export made and marked (``MARK`` holds its name)."""
    if path.is_symlink() or not path.is_dir():
        return False
    mark = _plain_file(path / MARK)
    return (
        mark is not None
        and mark.decode(errors="replace").strip() == path.name
    )


def remove_leftovers(out: Path) -> list[Path]:
    """Delete ``DIR.unfinished-export-*`` and ``DIR.replaced-export-*`` that an export left.

    A killed export (SIGKILL, a lost machine) leaves them beside DIR, each marked with ``MARK``
    (``is_leftover``); a folder of such a name without that mark is someone else's and is left
    alone. Another export that is still writing holds its folder's ``flock``, and its folder is
    kept.
    """
    try:
        import fcntl
    except ImportError:
        return []
    removed = []
    for kind in (UNFINISHED, REPLACED):
        for path in sorted(
            out.parent.glob(f"{glob.escape(out.name)}{kind}*")
        ):
            if not is_leftover(path):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:  # not ours to read: left alone
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # an export is writing it
                continue
            else:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            finally:
                os.close(fd)
    return removed


_LOCK_TEXT = b"python -m aiayn.export writes the folder beside this file\n"


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (a finished export removes its lock)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    mine = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _open_lock(lock: Path, out: Path) -> int:
    """``lock`` created or opened as a plain file (never through a link), its ``flock`` held."""
    import fcntl

    while True:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(lock, flags, 0o666)
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise ValueError(
                    f"{lock} is a symbolic link; the export takes its lock there "
                    "and never follows a link: remove the link, or choose another "
                    "--out"
                ) from None
            if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PermissionError(
                    f"--out {out}: cannot create {lock} ({err.strerror}); "
                    "choose a folder you can write to"
                ) from None
            if err.errno == errno.EISDIR:
                raise ValueError(
                    f"{lock} is a folder, where the export takes its lock; "
                    "move it away, or choose another --out"
                ) from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(
                    f"{lock} is not a plain file, where the export takes its "
                    "lock; move it away, or choose another --out"
                )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise FolderInUse(
                    f"another command is writing {out} (it holds {lock}); wait "
                    "for it to finish, or choose another --out"
                ) from None
            # the export that held it removed it: open the new one
            if not _same_file(fd, lock):
                os.close(fd)
                continue
            text = os.pread(fd, 4096, 0)
            if text and text != _LOCK_TEXT:
                raise ValueError(
                    f"{lock} is a file the export did not write, where it takes "
                    "its lock; move it away, or choose another --out"
                )
            if not text:
                os.write(fd, _LOCK_TEXT)
            return fd
        except BaseException:
            os.close(fd)
            raise


@contextlib.contextmanager
def export_lock(out: Path) -> Iterator[Path | None]:
    """Hold ``DIR.export-lock`` beside ``out`` for the block: one export writes ``out`` at a time.

    A second export into ``out`` fails at once (``FolderInUse``); the lock file is a plain file,
    never a link's target, and is removed at the end (a killed export's is taken over).
    """
    try:
        import fcntl  # noqa: F401
    except ImportError:  # not on Windows: no lock
        yield None
        return
    lock = out.parent / f"{out.name}{LOCK}"
    fd = _open_lock(lock, out)
    try:
        yield lock
    finally:
        # still ours and held: no other export can be using it
        if _same_file(fd, lock):
            with contextlib.suppress(OSError):
                lock.unlink()
        os.close(fd)


def _marked_folder(out: Path, kind: str) -> Path:
    """A new folder ``DIR<kind><random>`` beside ``out``, marked as the export's own (``MARK``)."""
    path = out.parent / f"{out.name}{kind}{secrets.token_hex(4)}"
    try:
        path.mkdir()
    except PermissionError as err:
        raise PermissionError(
            f"--out {out}: cannot create a folder in {out.parent} "
            f"({err.strerror}); choose a folder you can write to"
        ) from None
    try:
        _mark(path, path.name)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return path


@contextlib.contextmanager
def staged(
    out: Path, log: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """A new folder to write into, renamed to ``out`` when the block succeeds.

    Call it under ``export_lock(out)``. The folder lies inside ``DIR.unfinished-export-<random>``,
    beside ``out``, which holds the export's mark (``MARK``) from the start. ``out`` is checked
    again at the end (``check_out``); an earlier export there is moved into a marked
    ``DIR.replaced-export-<random>``, replaced and then deleted, so that its files never mix
    with the new ones. On an error or Ctrl-C the new folder is deleted and ``out`` stays as it
    was; a killed export leaves marked folders that the next one removes (``remove_leftovers``).
    """
    say = log or (lambda line: None)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in remove_leftovers(out):
        say(f"removed {path}, left by an export that was killed")
    tmp = _marked_folder(out, UNFINISHED)
    fd = hold_folder(tmp)
    new = tmp / out.name  # the export, beside the mark
    try:
        yield new
        kind = check_out(out)  # it may have changed since the start
        if kind == "empty":
            out.rmdir()
        if kind != "export":
            new.rename(out)
            return
        old = _marked_folder(out, REPLACED)
        try:
            out.rename(old / out.name)
        except BaseException:
            shutil.rmtree(old, ignore_errors=True)  # only the mark
            raise
        try:
            new.rename(out)
        except BaseException:
            try:
                (old / out.name).rename(out)
            except BaseException:
                (old / MARK).unlink()  # the earlier export stays in old
                raise
            shutil.rmtree(old, ignore_errors=True)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if fd is not None:
            os.close(fd)


# what an export holds besides the files its manifest lists: the translations it scored
HYPOTHESES = re.compile(r"test2016\.(int8|fp32)\.beam\d+\.hyp\.en")
