"""The run folder: its files, its manifest, its lock, and the rules for writing into a folder.

A run folder written by ``python -m aiayn.train`` holds:

    manifest.json     every file the run wrote: size and SHA-256, the config's hash, the run's id
    config.json       the TrainConfig
    tokenizer.model   the sentencepiece model the run was trained with
    checkpoint.pt     the latest state (weights, optimizer, schedule, RNG): training resumes from it;
                      saved after the first step, every ``checkpoint_minutes``, at the run's end
                      and when a signal stops it
    epoch-NNN.pt      the weights after epoch NNN, for averaging: written for the run's last
                      ``average_last`` epochs only, and only the last ``average_last`` kept

(the names, bytes and reading of ``checkpoint.pt`` and ``epoch-NNN.pt`` are
``aiayn.training.checkpoints``'s alone; this module places them, as every other file)
    metrics.jsonl     one JSON line per logged step and per evaluation
    summary.json      what ``train`` returned
    results.json      evaluation results, one entry per split and decoding setting
    <setting>.hyp.en  one detokenized translation per line, one file per decoding setting
    .lock             held while a command writes into the folder

Rules:

- Training writes only into a new or empty folder, or into a folder with a ``manifest.json`` (one
  it made itself). It never deletes a file the manifest does not list.
- Every file is written atomically (``files.atomic_write``) and hashed while it is written; the
  manifest is updated after it. A file whose size or hash differs from the manifest is refused by
  name when it is read. ``metrics.jsonl`` grows between checkpoints: the manifest keeps the size
  and hash it had at the last checkpoint, and a resumed run cuts it back to that.
- A command holds ``.lock`` (``fcntl.flock``) while it writes; a second one fails at once.
- Every name a manifest lists is a plain file name in the folder: an entry with ``..``, an
  absolute path or a sub-folder is refused by name before anything is read or deleted. ``.lock`` is
  a plain file in the folder, opened without following a link (a linked one is refused).
- Older run folders (``config.json`` but no manifest, such as a published run) are read as they
  are and get a manifest the first time a command writes into them.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import time
import uuid
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..files import (
    TMP_SUFFIX,
    AtomicWriter,
    WrittenFile,
    atomic_write,
    sha256_file,
)
from ..training.checkpoints import CHECKPOINT, epoch_file, is_epoch_file
from .presets import TrainConfig

__all__ = [
    "MANIFEST",
    "CONFIG",
    "TOKENIZER",
    "CHECKPOINT",
    "METRICS",
    "SUMMARY",
    "RESULTS",
    "LOCK",
    "epoch_file",
    "RunFolderError",
    "ResumeError",
    "RunFolder",
    "config_hash",
    "shown",
]

MANIFEST = "manifest.json"
CONFIG = "config.json"
TOKENIZER = "tokenizer.model"
METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
RESULTS = "results.json"
LOCK = ".lock"
FORMAT = "aiayn-run/1"
_TEMPORARY = re.compile(rf"\.(.+)\.[a-z0-9_]{{8}}{re.escape(TMP_SUFFIX)}")
# the files of a run folder from before manifests existed
_LEGACY_FILES = (CONFIG, TOKENIZER, CHECKPOINT, METRICS, SUMMARY, RESULTS)

# Fields that may change when a run is resumed: how long to go on, how fast, how to decode.
RESUMABLE_CHANGES = frozenset({
    "epochs", "max_steps", "amp", "adam", "compile", "cuda_graphs", "pin_memory", "cpu_threads", "log_every",
    "checkpoint_every", "checkpoint_minutes", "beam", "length_penalty", "max_len_a",
    "max_len_b", "test_subset",
})  # fmt: skip


class RunFolderError(ValueError):
    """A run folder cannot be used as asked; the message names the file and the fix."""


class ResumeError(RunFolderError):
    """A run cannot be continued with the config given (it was trained with other settings)."""


def config_hash(cfg: TrainConfig) -> str:
    """SHA-256 of the settings a run cannot change when it resumes (everything but ``RESUMABLE_CHANGES``)."""
    fixed = {
        k: v for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES
    }
    return hashlib.sha256(
        json.dumps(fixed, sort_keys=True).encode()
    ).hexdigest()


def _check_listed(manifest: Path, name: str, entry: Any) -> None:
    """A manifest lists plain names of files inside its folder, never a path that leads out of it."""
    plain = (
        isinstance(name, str)
        and name not in ("", ".", "..", MANIFEST, LOCK)
        and not name.startswith(".")
        and not any(c in name for c in ("/", "\\", "\0"))
    )
    if not plain:
        raise RunFolderError(
            f"{manifest} lists {name!r}, which is not the name of a file inside the run folder "
            "(a run lists plain names only; '..', absolute paths and sub-folders are refused). "
            "The manifest was edited: no file is deleted or replaced because of it. Restore it, "
            "or move the folder aside and train into a new one"
        )
    if not (
        isinstance(entry, dict)
        and isinstance(entry.get("size"), int)
        and isinstance(entry.get("sha256"), str)
    ):
        raise RunFolderError(
            f"{manifest} is damaged (the entry of {name!r} has no size and SHA-256); restore it, "
            "or move the folder aside and train into a new one"
        )


def _entry(written: WrittenFile, **more: Any) -> dict[str, Any]:
    return {"size": written.size, "sha256": written.sha256, **more}


class RunFolder:
    """One run folder: read it, check it, write into it (under its lock).

    Args:
        path: the folder (it need not exist yet).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._manifest: dict[str, Any] | None = None
        self._lock_file = None

    def __repr__(self) -> str:
        return f"RunFolder('{self.path}')"

    def file(self, name: str) -> Path:
        return self.path / name

    # --- Reading -----------------------------------------------------------------------------

    def has_manifest(self) -> bool:
        return self.file(MANIFEST).is_file()

    def is_legacy(self) -> bool:
        """A run folder from before manifests: a ``config.json`` and no ``manifest.json``."""
        return not self.has_manifest() and self.file(CONFIG).is_file()

    def manifest(self) -> dict[str, Any]:
        """The manifest (read once), checked to be one; an empty one for a folder without."""
        if self._manifest is None:
            if not self.has_manifest():
                return {"format": FORMAT, "files": {}, "pending": {}}
            self._manifest = self._read_manifest()
        return self._manifest

    def _read_manifest(self) -> dict[str, Any]:
        path = self.file(MANIFEST)
        try:
            manifest = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RunFolderError(
                f"{path} is damaged (not valid JSON: {err}); without it the folder's files cannot "
                "be checked. Move the folder aside and train into a new one"
            ) from None
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != FORMAT
            or not isinstance(manifest.get("files"), dict)
        ):
            raise RunFolderError(
                f"{path} is not a manifest of aiayn (expected format {FORMAT!r}); "
                "train into a new or empty folder"
            )
        manifest.setdefault("pending", {})
        for table in ("files", "pending"):
            if not isinstance(manifest[table], dict):
                raise RunFolderError(
                    f"{path} is damaged ({table!r} is not a table of files); restore it, or move "
                    "the folder aside and train into a new one"
                )
            for name, entry in manifest[table].items():
                _check_listed(path, name, entry)
        return manifest

    def listed(self, name: str) -> bool:
        return name in self.manifest()["files"]

    def read_verified(self, name: str) -> bytes:
        """The bytes of ``name``, checked against the manifest when it lists the file.

        Raises ``RunFolderError`` naming the file when it is missing, or when its size or SHA-256
        differ from what the run wrote (damaged, or copied from another run).
        """
        path = self.file(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise RunFolderError(
                f"{path} is missing: is {self.path} a run folder written by python -m aiayn.train?"
            ) from None
        expected = [
            m[name]
            for m in (self.manifest()["files"], self.manifest()["pending"])
            if name in m
        ]
        if expected:
            digest = hashlib.sha256(data).hexdigest()
            if not any(
                e["size"] == len(data) and e["sha256"] == digest
                for e in expected
            ):
                e = expected[0]
                raise RunFolderError(
                    f"{path} does not match {MANIFEST}: {len(data):,} bytes with SHA-256 "
                    f"{digest[:12]}…, the run wrote {e['size']:,} bytes with {e['sha256'][:12]}…. "
                    "The file is damaged or comes from another run: restore it, or start "
                    "afresh (python -m aiayn.train ... --no-resume --overwrite)"
                )
        return data

    def entry(self, name: str, data: bytes) -> dict[str, Any]:
        """The manifest entry (files or pending) that ``data`` matches, ``{}`` if none."""
        digest = hashlib.sha256(data).hexdigest()
        for table in (self.manifest()["files"], self.manifest()["pending"]):
            e = table.get(name)
            if e and e["sha256"] == digest:
                return e
        return {}

    def read_json(self, name: str) -> Any:
        """A JSON file of the run, checked against the manifest, with errors that name it."""
        data = self.read_verified(name)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RunFolderError(
                f"{self.file(name)} is damaged (not valid JSON: {err}); restore it, or "
                "start the run afresh"
            ) from None

    def read_results(self) -> dict[str, Any]:
        """``results.json`` (``{}`` without one); a damaged one is refused with the fix.

        It holds only scores, which ``python -m aiayn.evaluate`` writes again: the fix is to remove
        it and evaluate again, never to train again.
        """
        path = self.file(RESULTS)
        if not path.is_file():
            return {}
        fix = (
            "remove that file (it holds only scores, which python -m "
            "aiayn.evaluate writes again) and evaluate the run again"
        )
        try:
            results = json.loads(self.read_verified(RESULTS))
        except RunFolderError:
            raise RunFolderError(
                f"{path} does not match {MANIFEST} (damaged or replaced); {fix}"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RunFolderError(
                f"{path} is damaged (not valid JSON: {err}); {fix}"
            ) from None
        if not isinstance(results, dict):
            raise RunFolderError(
                f"{path} is not a JSON object of results; {fix}"
            )
        return results

    def read_config(self) -> TrainConfig:
        """The run's ``TrainConfig`` (old flat ``config.json`` files too)."""
        values = self.read_json(CONFIG)
        try:
            cfg = TrainConfig.from_dict(values)
        except (ValueError, TypeError) as err:
            raise RunFolderError(
                f"{self.file(CONFIG)} is not a valid TrainConfig: {err}"
            ) from None
        expected = self.manifest().get("config_sha256")
        if expected is not None and expected != config_hash(cfg):
            raise RunFolderError(
                f"{self.file(CONFIG)} does not match the config hash in {MANIFEST}; restore it, "
                "or start the run afresh"
            )
        return cfg

    def trained_files(self) -> list[str]:
        """Files listed in the manifest that a previous command produced and only it can remake.

        Everything but ``config.json``, ``tokenizer.model`` and an empty ``metrics.jsonl`` (what a
        run holds before its first checkpoint): a checkpoint, epoch weights, logged metrics, a
        summary, results, translations. A folder with any of them is a trained run, which no
        command replaces without ``--overwrite``.
        """
        files = self.manifest()["files"]
        return sorted(
            name
            for name, entry in files.items()
            if name not in (CONFIG, TOKENIZER)
            and not (name == METRICS and entry.get("size") == 0)
        )

    def missing_files(self) -> list[str]:
        """Files the manifest lists that are not in the folder."""
        return sorted(
            name
            for name in self.manifest()["files"]
            if not self.file(name).is_file()
        )

    def epoch_files(self) -> list[Path]:
        """The epoch weights present (``epoch-NNN.pt`` files), oldest first."""
        return sorted(
            p
            for p in self.path.glob("*.pt")
            if is_epoch_file(p.name) and p.is_file()
        )

    def foreign_files(self) -> list[str]:
        """Names in the folder that this run did not write (and are not its lock or manifest)."""
        ours = set(self.manifest()["files"]) | {MANIFEST, LOCK}
        return sorted(
            p.name for p in self.path.iterdir() if p.name not in ours
        )

    # --- Writing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, wait: float = 0.0) -> Iterator[RunFolder]:
        """Hold the folder's lock for the block; fails when another command holds it ``wait`` s on.

        The manifest is read again under the lock: another command may have written meanwhile.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        f = self._open_lock()
        try:
            self._flock(f, exclusive=True, wait=wait)
            self._lock_file = f
            self._manifest = None
            self.remove_stale_temporaries()
            yield self
        finally:
            self._lock_file = None
            f.close()

    def check_unlocked(self) -> None:
        """Fail now when another command is writing into the folder; hold nothing afterwards.

        A shared lock, for an instant: two commands that check at the same time do not see each
        other, only one that holds the folder's lock (``locked``) is seen.
        """
        with self._open_lock() as f:
            self._flock(f, exclusive=False, wait=0.0)

    def _open_lock(self):
        """The folder's ``.lock``, created as a plain file in it; a link there is refused, never followed."""
        path = self.file(LOCK)
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(path, flags, 0o666)
        except OSError as err:
            if err.errno != errno.ELOOP and not path.is_symlink():
                raise
            raise RunFolderError(
                f"{path} is a symbolic link; a run folder's lock is a plain file in the folder, "
                "never a link's target: remove the link, then run the command again"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise RunFolderError(
                f"{path} is not a plain file; a run folder's lock is one: remove it, then run the "
                "command again"
            )
        return os.fdopen(fd, "a+")

    def _flock(self, f, exclusive: bool, wait: float) -> None:
        try:
            import fcntl
        except ImportError:  # not on Windows: no lock
            return
        how = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(f, how | fcntl.LOCK_NB)
                return
            except OSError as err:
                if err.errno not in (
                    errno.EAGAIN,
                    errno.EACCES,
                    errno.EWOULDBLOCK,
                ):
                    raise
                if time.monotonic() >= deadline:
                    raise RunFolderError(
                        f"another command is writing into {self.path} (it holds "
                        f"{self.file(LOCK)}); wait for it to finish, or use another folder"
                    ) from None
            time.sleep(0.05)

    def _check_locked(self) -> None:
        if self._lock_file is None:
            raise RuntimeError(
                f"write into {self.path} only inside RunFolder.locked()"
            )

    def remove_stale_temporaries(self) -> list[str]:
        """Remove ``.<name>.<random>.tmp`` files left by a killed save of a file the run writes."""
        removed = []
        for path in self.path.glob(f".*{TMP_SUFFIX}"):
            # ".checkpoint.pt.k3v_9x1q.tmp": the name and mkstemp's 8 random characters
            match = _TEMPORARY.fullmatch(path.name)
            if match is None or path.is_symlink() or not path.is_file():
                continue
            base = match.group(1)
            if (
                base in (*_LEGACY_FILES, MANIFEST)
                or is_epoch_file(base)
                or base.endswith(".hyp.en")
            ):
                path.unlink(missing_ok=True)
                removed.append(path.name)
        return removed

    def _write_manifest(self) -> None:
        atomic_write(
            self.file(MANIFEST),
            json.dumps(self.manifest(), indent=1, sort_keys=True) + "\n",
        )

    def start(self, cfg: TrainConfig | None) -> None:
        """Begin a new run in this folder (or, with ``cfg=None``, a folder of results): a fresh manifest."""
        self._check_locked()
        self._manifest = {
            "format": FORMAT,
            "run_id": uuid.uuid4().hex,
            "files": {},
            "pending": {},
        }
        if cfg is not None:
            self._manifest["config_sha256"] = config_hash(cfg)
        self._write_manifest()

    def adopt(self) -> None:
        """Give an older run folder a manifest that lists the run files it holds as they are."""
        self._check_locked()
        files = {}
        names = [*_LEGACY_FILES, *(p.name for p in self.epoch_files())]
        names += [p.name for p in self.path.glob("*.hyp.en")]
        for name in names:
            if self.file(name).is_file():
                size, digest = sha256_file(self.file(name))
                files[name] = {"size": size, "sha256": digest}
        self._manifest = {
            "format": FORMAT,
            "run_id": uuid.uuid4().hex,
            "files": files,
            "pending": {},
        }
        if CONFIG in files:
            self._manifest["config_sha256"] = config_hash(self.read_config())
        self._write_manifest()

    def expect(self, name: str, written: WrittenFile, **more: Any) -> None:
        """Note in the manifest that ``name`` is about to be replaced by ``written``."""
        self._check_locked()
        self.manifest()["pending"][name] = _entry(written, **more)
        self._write_manifest()

    def record(self, name: str, written: WrittenFile, **more: Any) -> None:
        """Note in the manifest that ``name`` now holds ``written``."""
        self._check_locked()
        manifest = self.manifest()
        manifest["pending"].pop(name, None)
        manifest["files"][name] = _entry(written, **more)
        self._write_manifest()

    def write(
        self,
        name: str,
        content: bytes | bytearray | memoryview | str,
        **more: Any,
    ) -> WrittenFile:
        """Write a file of the run atomically and list it in the manifest (``more``: extra fields)."""
        self._check_locked()
        data = (
            content.encode("utf-8") if isinstance(content, str) else content
        )
        with AtomicWriter(self.file(name)) as writer:
            writer.write(data)
            self.expect(
                name, writer.finish(), **more
            )  # the manifest knows it before it lands
        self.record(name, writer.written, **more)
        return writer.written

    def write_json(self, name: str, value: Any) -> WrittenFile:
        return self.write(name, json.dumps(value, indent=2) + "\n")

    def set_config(self, cfg: TrainConfig) -> None:
        """Write ``config.json`` and its hash."""
        self._check_locked()
        self.manifest()["config_sha256"] = config_hash(cfg)
        self.write_json(CONFIG, cfg.to_dict())

    def remove(self, name: str) -> None:
        """Delete a file the manifest lists (never another one)."""
        self._check_locked()
        if not self.listed(name):
            raise RunFolderError(
                f"{self.file(name)} is not a file of this run: it is left alone"
            )
        _check_listed(
            self.file(MANIFEST), name, self.manifest()["files"][name]
        )
        self.file(name).unlink(
            missing_ok=True
        )  # a link: the link, never its target
        self.manifest()["files"].pop(name)
        self.manifest()["pending"].pop(name, None)
        self._write_manifest()

    def remove_run(self) -> list[str]:
        """Delete every file the manifest lists; other files stay."""
        names = list(self.manifest()["files"])
        for name in names:
            self.remove(name)
        return names

    def run_id(self) -> str | None:
        return self.manifest().get("run_id")


def shown(names: list[str], most: int = 5) -> str:
    """``a, b, c and 4 more``: a list of file names for a one-line message."""
    more = len(names) - most
    return ", ".join(names[:most]) + (
        f" and {more} more" if more > 0 else ""
    )


def changed_fields(old: TrainConfig, new: TrainConfig) -> list[str]:
    """Names of the fields that differ (``model`` as one)."""
    return [
        f.name
        for f in fields(TrainConfig)
        if getattr(old, f.name) != getattr(new, f.name)
    ]


def check_resumable(
    folder: RunFolder, old: TrainConfig, new: TrainConfig
) -> None:
    """Raise ``ResumeError`` when ``new`` changes a setting a resumed run cannot change."""
    fixed = [
        name
        for name in changed_fields(old, new)
        if name not in RESUMABLE_CHANGES
    ]
    if fixed:
        details = ", ".join(
            _describe_change(name, getattr(old, name), getattr(new, name))
            for name in fixed
        )
        raise ResumeError(
            f"cannot resume {folder.path}: it was trained with other settings ({details}). "
            "Use another --out folder, or --no-resume --overwrite to replace this run"
        )


def _describe_change(name: str, old: Any, new: Any) -> str:
    if name == "model":
        parts = [
            f"{f.name}: {getattr(old, f.name)!r} -> {getattr(new, f.name)!r}"
            for f in fields(old)
            if getattr(old, f.name) != getattr(new, f.name)
        ]
        return ", ".join(f"model.{p}" for p in parts)
    return f"{name}: {old!r} -> {new!r}"
