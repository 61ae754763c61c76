"""Train a preset from the command line; running the same command again continues the run.

    python -m aiayn.train --preset multi30k --out runs/base
    python -m aiayn.train --preset multi30k-smoke --out runs/smoke --device cpu
    python -m aiayn.train --preset multi30k --out runs/base --max-steps 500   # stop early, resume later
    python -m aiayn.train --preset multi30k --out runs/base --no-resume --overwrite   # train it again

``--out`` must be a new or empty folder, or a run folder this command wrote (``aiayn.runs.folder``): it
gets ``manifest.json``, ``config.json``, ``metrics.jsonl``, ``checkpoint.pt``, the last epochs'
weights and ``tokenizer.model``. Ctrl-C, SIGTERM (pre-emption: docker stop, Slurm, Kubernetes) and
SIGHUP save a checkpoint and exit, printing the same command, which resumes. Without ``--overwrite``
no file of a trained run is deleted or replaced.
Score the run with ``python -m aiayn.evaluate runs/base``.

On Colab, put ``--out`` on Google Drive, which outlives the session::

    from google.colab import drive; drive.mount("/content/drive")
    !python -m aiayn.train --preset multi30k-t4 --out /content/drive/MyDrive/aiayn/t4

``checkpoint.pt`` is saved after the first step, every ``--checkpoint-minutes`` (default 10), at the run's
end and when Ctrl-C, SIGTERM or SIGHUP stops it, at any moment (a validation included). A full disk
stops the run with the checkpoint it keeps and the command that resumes from it.
When the session disconnects, run the same command in a new one: it resumes from the last
checkpoint, exactly as if it had not stopped (weights, optimizer, loss scale, random state and
position in the epoch), and loses at most the steps since that checkpoint.

On several GPUs (one process each, nccl), or several CPU processes (gloo)::

    torchrun --standalone --nproc_per_node 8 -m aiayn.train --preset multi30k --out runs/base
    torchrun --standalone --nproc_per_node 2 -m aiayn.train --preset multi30k-smoke --out runs/s --device cpu

Rank 0 writes the run folder and prints; the others print only a failure of their own. A run
resumes on as many processes as it was started with (``aiayn.training.distributed``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import cli
from .data.multi30k import data_dir
from .runs.presets import PRESETS, TrainConfig, get_preset
from .runs.recipes import RunSummary, TrainingInterrupted, train
from .training import distributed

__all__ = ["main", "with_cuda_graphs"]

# --cuda-graphs' padding: an epoch of the multi30k preset has 28 batch shapes (108 unpadded), at
# 31 % more padded positions (16 and 32: 22 shapes, +49 %; 4 and 32: 48, +18 %)
GRAPHED_PAD_TO, GRAPHED_PAD_ROWS = 8, 32


def with_cuda_graphs(cfg: TrainConfig) -> TrainConfig:
    """``cfg`` as ``--cuda-graphs`` trains it: graphs on, padded unless it sets its own padding."""
    return cfg.with_changes(
        cuda_graphs=True,
        pad_to=cfg.pad_to or GRAPHED_PAD_TO,
        pad_rows=cfg.pad_rows or GRAPHED_PAD_ROWS,
    )


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.train",
        "Train a Transformer on Multi30k de->en from a preset. Running the same command again "
        "resumes the run from its last checkpoint (saved every --checkpoint-minutes, at the end, "
        "and at Ctrl-C, SIGTERM or SIGHUP): after Ctrl-C or a lost Colab session, run it again. On Colab, "
        "give --out a folder on Google Drive (e.g. /content/drive/MyDrive/aiayn/t4) so that the "
        "run outlives the session.",
    )
    p.add_argument(
        "--preset",
        default="multi30k",
        help=f"one of: {', '.join(PRESETS)} (default multi30k)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="a config.json (a TrainConfig) instead of a preset",
    )
    p.add_argument(
        "--out",
        required=True,
        help="run folder: new, empty, or one this command wrote (resumed); "
        "on Colab a folder on Google Drive",
    )
    p.add_argument(
        "--data",
        default=None,
        help="Multi30k folder (default $AIAYN_DATA or ~/.cache/aiayn/multi30k)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="cuda, cpu, cuda:1 ... (default cuda when available)",
    )
    p.add_argument(
        "--max-steps",
        type=cli.positive_int,
        default=None,
        help="stop after this many steps in total",
    )
    p.add_argument(
        "--epochs",
        type=cli.positive_int,
        default=None,
        help="override the number of epochs",
    )
    p.add_argument("--checkpoint-minutes", type=cli.positive_float, default=None,
                   help="also save a checkpoint after this many minutes inside an epoch (default 10)")  # fmt: skip
    p.add_argument(
        "--compile", action="store_true", help="torch.compile the model"
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="replay each batch shape's forward and backward as CUDA graphs "
        "(one GPU); pads lengths to a multiple of 8 and sentences to one of 32 "
        "unless the config sets pad_to and pad_rows",
    )
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="start afresh instead of continuing the run",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="with --no-resume: replace a trained run's files",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar"
    )
    return p


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _config(args: argparse.Namespace) -> TrainConfig:
    overrides = {}
    for name in ("max_steps", "epochs", "checkpoint_minutes"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.compile:
        overrides["compile"] = True
    if args.config is None:
        cfg = get_preset(args.preset)
    else:
        path = Path(args.config)
        try:
            values = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(
                f"--config {path} cannot be read as JSON ({err})"
            ) from None
        cfg = TrainConfig.from_dict(values)
    cfg = cfg.with_changes(**overrides)
    return with_cuda_graphs(cfg) if args.cuda_graphs else cfg


def _train(args: argparse.Namespace) -> RunSummary:
    if not args.out.strip():
        raise cli.UsageError(
            "--out must name a folder, got an empty string; e.g. --out runs/base"
        )
    if args.overwrite and not args.no_resume:
        raise cli.UsageError(
            "--overwrite replaces a trained run and goes with --no-resume"
        )
    cfg = _config(args)
    summary = train(
        cfg,
        args.out,
        root=args.data,
        device=args.device,
        progress=not args.no_progress,
        resume=not args.no_resume,
        overwrite=args.overwrite,
        log=print,
    )
    val = (
        "n/a"
        if summary.val_loss is None
        else f"{summary.val_loss:.3f} (ppl {summary.val_ppl:.2f})"
    )
    print(
        f"{cfg.name}: {summary.steps} steps ({summary.steps_this_run} now) in {summary.wall_s:.1f} s "
        f"on {summary.device_name}, torch {summary.torch}\n"
        f"  {summary.tokens_per_s:,.0f} target tokens/s, {summary.parameters:,} parameters\n"
        f"  train loss {_num(summary.loss_first)} -> {_num(summary.loss_last)}; val loss {val}\n"
        f"  run folder: {summary.out_dir}   next: {_evaluate_command(summary.out_dir, args.data)}",
        file=sys.stdout,
    )
    return summary


def _evaluate_command(out_dir: str, data: str | None) -> str:
    """The evaluate command for this run, naming the data folder unless it is the default one.

    A run records no data folder, so a folder given by ``--data`` or an inline ``$AIAYN_DATA``
    must be named again, or the printed command would look in the default one.
    """
    command = f"python -m aiayn.evaluate {shlex.quote(str(out_dir))}"
    if data is not None or os.environ.get("AIAYN_DATA"):
        command += f" --data {shlex.quote(str(data_dir(data).resolve()))}"
    return command


def _stopped(argv: list[str]):
    """``_train``, reporting a stop by a signal in one line with the command that resumes it."""

    def body(args: argparse.Namespace) -> RunSummary:
        try:
            return _train(args)
        except TrainingInterrupted as err:
            command = shlex.join([*_launcher(), "-m", "aiayn.train", *argv])
            print(f"{err}: {command}", file=sys.stderr)
            # exit status 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
            signum = getattr(signal, err.signal_name or "SIGINT")
            raise SystemExit(128 + signum) from None

    return body


def _launcher() -> list[str]:
    """How this process was started: ``python`` or, under torchrun, ``torchrun ...``."""
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        return ["python"]
    local = os.environ.get("LOCAL_WORLD_SIZE", world)
    if local == world:  # one machine
        return ["torchrun", "--standalone", "--nproc_per_node", world]
    return ["torchrun", "--nnodes", str(int(world) // int(local)), "--nproc_per_node", local,
            "<your --rdzv options>"]  # fmt: skip


@contextlib.contextmanager
def _rank_0_speaks():
    """Under torchrun, the ranks other than 0 print nothing but a failure of their own.

    A refusal (exit status 2) or an interrupt is the same on every rank, and rank 0 prints it.
    """
    if os.environ.get("RANK", "0") == "0":
        yield
        return
    out, err = io.StringIO(), io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
        ):
            yield
    except SystemExit as stop:
        code = stop.code
        if not isinstance(code, int) or code == 1 or 2 < code < 128:
            sys.stderr.write(err.getvalue())
        elif code == 2:  # let rank 0 print it before torchrun stops all
            time.sleep(2)
        raise


def main(argv: Sequence[str] | None = None) -> RunSummary:
    """Parse ``argv`` (default ``sys.argv[1:]``), train, print a summary and return it.

    Ctrl-C, SIGTERM and SIGHUP save a checkpoint and exit with 128 + the signal's number, after
    one line that gives the command which resumes the run.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with _rank_0_speaks():
            return cli.run(_parser(), argv, _stopped(argv))
    finally:
        distributed.teardown()


if __name__ == "__main__":
    main()
