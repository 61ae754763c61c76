"""Where a run folder stands and what the train command writes into it while it trains.

``plan_run`` reads a folder before anything is written: new, a run to resume (from which checkpoint,
at which step), a finished run, or one to replace; each refusal says what to do. ``RunLog`` is
``fit``'s hook for the folder: the metrics log, the epoch weights to average (only the last
``average_last`` that can be averaged) and the manifest entries of each checkpoint. The bytes
and the names of ``checkpoint.pt`` and ``epoch-NNN.pt`` are ``aiayn.training.checkpoints``'s;
this module only says when and where.
``cut_metrics`` cuts ``metrics.jsonl`` back to a checkpoint when a run resumes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ..files import WrittenFile, sha256_file
from ..training import distributed
from ..training.checkpoints import (
    epoch_bytes,
    epoch_file,
    fit_position,
    is_epoch_file,
    read_checkpoint,
)
from ..training.loop import FitState
from .folder import (
    CHECKPOINT,
    CONFIG,
    MANIFEST,
    METRICS,
    ResumeError,
    RunFolder,
    RunFolderError,
    check_resumable,
    shown,
)
from .presets import TrainConfig


class Plan(NamedTuple):
    action: str  # "fresh", "restart" (no checkpoint to resume from), "resume", "done"
    # the verified checkpoint to resume from, read once (fit loads it as it is)
    checkpoint: dict[str, Any] | None = None
    position: dict[str, Any] | None = (
        None  # its step and epoch, and its manifest entry
    )
    old: TrainConfig | None = None


def plan_run(
    folder: RunFolder, cfg: TrainConfig, resume: bool, overwrite: bool
) -> Plan:
    """Decide, without writing anything, how ``train`` uses the folder (or say why it cannot)."""
    path = folder.path
    if path.exists() and not path.is_dir():
        raise RunFolderError(
            f"--out {path} is a file, not a folder; "
            "choose a new or empty folder"
        )
    if path.is_dir() and not path.stat().st_mode & 0o222:
        raise RunFolderError(
            f"--out {path} is read-only; choose a folder you can write to"
        )
    if not path.exists() or not any(path.iterdir()):
        return Plan("fresh")
    if not folder.has_manifest() and not folder.is_legacy():
        names = sorted(p.name for p in path.iterdir())
        raise RunFolderError(
            f"--out {path} is not empty ({shown(names)}) and is not a run "
            "folder (it has no manifest.json): training writes only "
            "into a new or empty folder or its own run folder. "
            "Choose another --out"
        )
    has_checkpoint = (path / CHECKPOINT).is_file()
    if folder.is_legacy():
        if not resume:
            raise RunFolderError(
                f"--out {path} is a run folder of an older version "
                "(no manifest.json), whose files cannot be told from "
                "others: it is never replaced. Choose another --out"
            )
        if not has_checkpoint:
            raise RunFolderError(
                f"--out {path} holds a config.json but no checkpoint.pt "
                "to resume from. "
                "Choose another --out"
            )
    else:
        # Without --overwrite, no file a previous command produced is deleted or replaced.
        trained, missing = folder.trained_files(), folder.missing_files()
        if trained and not overwrite:
            if not resume:
                raise RunFolderError(
                    f"--out {path} holds a trained run ({shown(trained)}); "
                    "--no-resume would replace it. Add --overwrite to "
                    "replace it, or choose another --out"
                )
            if missing:
                also = (
                    f" (so are {shown(missing[1:])})" if missing[1:] else ""
                )
                raise RunFolderError(
                    f"{path / missing[0]} is missing, and {MANIFEST} lists it "
                    f"as a file of this trained run{also}: put it back to "
                    "resume the run, or replace the run with --no-resume "
                    "--overwrite, or choose another --out"
                )
            if not has_checkpoint:
                if folder.listed(CONFIG) and trained == [METRICS]:
                    # a run stopped before its first checkpoint, saved after its first step (a
                    # disk too small for one): only the log of that step is lost
                    return Plan("restart")
                # weights without a checkpoint (an older version's run), or a folder of results
                again = (
                    "--no-resume --overwrite starts the run again, or "
                    if folder.listed(CONFIG)
                    else ""
                )
                raise RunFolderError(
                    f"--out {path} holds the files of an earlier command "
                    f"({shown(trained)}) but no checkpoint.pt to resume "
                    f"from; {again}choose another --out"
                )
        if resume and not has_checkpoint and folder.listed(CONFIG):
            # one of ours stopped before its first checkpoint: nothing to resume
            return Plan("restart")
        if not resume or not has_checkpoint:
            return Plan("fresh")  # a new run

    old = folder.read_config()
    data = folder.read_verified(CHECKPOINT)
    checkpoint = read_checkpoint(data, str(path / CHECKPOINT))
    run_id = checkpoint["extra"].get("run_id")
    if folder.has_manifest() and run_id != folder.run_id():
        raise RunFolderError(
            f"{path / CHECKPOINT} belongs to another run (run id "
            f"{run_id}, the manifest says {folder.run_id()}); restore "
            "this run's checkpoint, or start afresh with --no-resume "
            "--overwrite"
        )
    at = fit_position(checkpoint)
    distributed.check_same_world(at.world_size, f"--out {path}")
    check_resumable(folder, old, cfg)
    position = {
        "step": at.step,
        "epoch": at.epoch,
        "entry": folder.entry(CHECKPOINT, data),
    }
    finished_epochs = at.epoch if at.batches_done == 0 else None
    if finished_epochs is not None and cfg.epochs < finished_epochs:
        raise _fewer_epochs(path, finished_epochs, cfg.epochs)
    if (finished_epochs is not None and cfg.epochs == finished_epochs) or (
        cfg.max_steps is not None and at.step >= cfg.max_steps
    ):
        return Plan("done", checkpoint, position, old)
    return Plan("resume", checkpoint, position, old)


def _fewer_epochs(path: Path, done: int, asked: int) -> ResumeError:
    return ResumeError(
        f"--out {path} has already trained {done} epochs; {asked} epochs is fewer, so there is "
        f"nothing to continue and its config.json is left as it is. Use --epochs {done} or more to "
        "continue, --no-resume --overwrite to train again from scratch, or another --out"
    )


# --- The run --------------------------------------------------------------------------------------


def first_averaged(cfg: TrainConfig, steps_per_epoch: int) -> int:
    """The first epoch (1-based) whose weights can be among the last ``average_last`` that
    ``load_run`` averages: the last epoch the run can finish (``epochs``, or fewer when
    ``max_steps`` stops it first), less ``average_last - 1``. Every epoch has as many steps
    (``make_batches`` packs by lengths alone)."""
    last = cfg.epochs
    if cfg.max_steps is not None:
        last = min(last, cfg.max_steps // steps_per_epoch)
    return last - cfg.average_last + 1


class RunLog:
    """``fit``'s hook for a run folder: the metrics log, the epoch weights and the manifest.

    The weights of an epoch are written only when they can be among the last ``average_last``
    of the run (``first_averaged`` on), and only the last ``average_last`` are kept: a run of 8
    epochs writes as many epoch files as one of 5.
    """

    def __init__(
        self,
        folder: RunFolder,
        cfg: TrainConfig,
        first_step: int,
        log_file,
        first_averaged: int = 1,
    ):
        self.folder, self.cfg, self.first_step, self.log_file = (
            folder,
            cfg,
            first_step,
            log_file,
        )
        self.first_averaged = first_averaged
        self.last_eval: dict[str, Any] = {}
        self.epochs_done = 0

    def write(self, record: dict[str, Any]) -> None:
        try:
            self.log_file.write(json.dumps(record) + "\n")
            self.log_file.flush()  # a killed run loses no logged line
        except OSError as err:  # a full disk's error names no file
            if err.filename is not None:
                raise
            raise OSError(
                err.errno, err.strerror, self.log_file.name
            ) from None

    def __call__(self, state: FitState) -> None:
        if state.event == "step":
            if (
                state.step % self.cfg.log_every == 0
                or state.step == self.first_step + 1
            ):
                tok_s = (
                    state.tokens / state.seconds
                    if state.seconds > 0
                    else 0.0
                )
                self.write({
                    "event": "step", "step": state.step, "epoch": state.epoch, "loss": state.loss,
                    "lr": state.lr, "tokens": state.tokens, "seconds": state.seconds, "tokens_per_s": tok_s,
                })  # fmt: skip
        elif state.event == "eval":
            self.last_eval = {
                "event": "eval",
                "step": state.step,
                "epoch": state.epoch,
                **state.metrics,
            }
            self.write(self.last_eval)
        elif state.event == "epoch_end":
            self.epochs_done = state.epoch + 1
            if (
                self.cfg.average_last > 1
                and self.epochs_done >= self.first_averaged
            ):
                self.folder.write(
                    epoch_file(state.epoch + 1),
                    epoch_bytes(state.model, state.step, state.epoch + 1),
                    step=state.step,
                )
                epochs = sorted(
                    n
                    for n in self.folder.manifest()["files"]
                    if is_epoch_file(n)
                )
                for old in epochs[: -self.cfg.average_last]:
                    self.folder.remove(old)
        elif state.event in ("saving", "checkpoint"):
            self.log_file.flush()  # the metrics as they stand at this checkpoint
            size, digest = sha256_file(self.folder.file(METRICS))
            where = {
                "step": state.step,
                "metrics_size": size,
                "metrics_sha256": digest,
            }
            if state.event == "saving":
                self.folder.expect(CHECKPOINT, state.saved, **where)
            else:
                self.folder.record(CHECKPOINT, state.saved, **where)
                self.folder.record(
                    METRICS,
                    written_prefix(size, digest, self.folder.file(METRICS)),
                )


def both_hooks(
    first: Callable[[FitState], None],
    then: Callable[[FitState], None] | None,
) -> Callable[[FitState], None]:
    """One hook that calls ``first``, then ``then`` (when given)."""
    if then is None:
        return first

    def both(state: FitState) -> None:
        first(state)
        then(state)

    return both


def written_prefix(size: int, digest: str, path: Path) -> WrittenFile:
    return WrittenFile(path, size, digest)


def cut_metrics(folder: RunFolder, entry: dict[str, Any]) -> None:
    """Cut ``metrics.jsonl`` back to what it held when the checkpoint was saved (checked by hash)."""
    path = folder.file(METRICS)
    size = entry.get("metrics_size")
    if (
        size is None
    ):  # an older run folder: keep the lines up to the checkpoint's step
        step = entry.get("step")
        lines = path.read_text().splitlines() if path.is_file() else []
        kept = []
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise RunFolderError(
                    f"{path} line {number} is damaged (not JSON); restore the file"
                ) from None
            if step is None or record["step"] <= step:
                kept.append(line + "\n")
        folder.write(METRICS, "".join(kept))
        return
    data = path.read_bytes() if path.is_file() else b""
    if (
        len(data) < size
        or hashlib.sha256(data[:size]).hexdigest() != entry["metrics_sha256"]
    ):
        raise RunFolderError(
            f"{path} does not hold the {size:,} bytes the run had logged at its checkpoint "
            "(damaged or replaced); restore it, or start afresh with --no-resume --overwrite"
        )
    folder.write(METRICS, data[:size])
