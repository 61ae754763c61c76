"""From a preset to a trained run folder: prepare the data, build the model, train, leave a summary.

``train(cfg, out_dir)`` reads top to bottom: check the device, the data and the folder (nothing is
written before all three are fine), take the folder's lock, write the config and tokenizer, and
call ``training.fit``, whose hook writes the metrics, the epoch weights and the manifest entries.
Ctrl-C stops after the step under way, saves a checkpoint and says how to resume.

Where the other parts of a run live:

- the presets and ``TrainConfig``: ``aiayn.runs.presets`` (``PRESETS``, ``build_model`` are re-exported here);
- the run folder (files, manifest, lock): ``aiayn.runs.folder``; where a folder stands and the hook that
  writes into it while training (``plan_run``, ``RunLog``): ``aiayn.runs.run_log``;
- the schedule: ``aiayn.schedule``; the loss: ``aiayn.loss``; the batches: ``aiayn.training.batches``;
- ``train_step``: ``aiayn.training.step``; ``fit``: ``aiayn.training.loop``;
- translating a run: ``aiayn.decoding.translate``; scoring it: ``aiayn.runs.scoring`` (``evaluate``, ``load_run``,
  ``translate`` are re-exported here, so ``from aiayn.runs.recipes import ...`` keeps working).

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..checks import Record, resolve_device
from ..data.multi30k import (
    Tokenizer,
    encode_pairs,
    load_multi30k,
    train_tokenizer,
)
from ..decoding.translate import translate
from ..engine.cuda_graphs import check_cuda_graphs
from ..engine.switch import set_fast
from ..files import disk_full, is_disk_full, sha256_file
from ..loss import LabelSmoothingLoss
from ..model import count_parameters
from ..schedule import make_optimizer, noam_scheduler
from ..training import distributed
from ..training.batches import EpochBatches, eval_batches
from ..training.loop import FitConfig, FitState, fit
from ..training.step import amp_dtype_for
from .folder import (
    CHECKPOINT,
    METRICS,
    SUMMARY,
    TOKENIZER,
    ResumeError,
    RunFolder,
    RunFolderError,
)
from .load import load_run
from .presets import (
    PRESETS,
    TrainConfig,
    build_model,
    get_preset,
)
from .run_log import (
    Plan,
    RunLog,
    both_hooks,
    cut_metrics,
    first_averaged,
    plan_run,
    written_prefix,
)
from .scoring import evaluate

__all__ = [
    "PreparedData",
    "prepare_data",
    "RunSummary",
    "TrainingInterrupted",
    "train",
    "warmup_note",
    # re-exported from their homes
    "PRESETS",
    "TrainConfig",
    "get_preset",
    "build_model",
    "ResumeError",
    "RunFolderError",
    "evaluate",
    "load_run",
    "translate",
]

Pairs = list[tuple[str, str]]
IdPairs = list[tuple[list[int], list[int]]]


class PreparedData(NamedTuple):
    """The tokenizer, the sentence pairs of each split (subsets applied) and their ids (no special tokens)."""

    tokenizer: Tokenizer
    train: Pairs
    val: Pairs
    test: Pairs
    train_ids: IdPairs
    val_ids: IdPairs
    test_ids: IdPairs


def prepare_data(
    cfg: TrainConfig,
    root: str | os.PathLike | None = None,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PreparedData:
    """Load Multi30k de→en, learn (or reuse) the joint tokenizer and encode every split.

    The tokenizer is learned from the training pairs that the run uses (``train_subset``). Training
    pairs with a side longer than ``cfg.max_len`` pieces (``<eos>`` included) are dropped; validation
    and test pairs are all kept.

    Args:
        cfg: the run's config.
        root: the Multi30k folder (default ``$AIAYN_DATA``, see ``data.data_dir``).
        tokenizer: use this tokenizer instead of learning one (a resumed run reuses its own).
        cache_dir: where ``train_tokenizer`` caches models (default ``~/.cache/aiayn/tokenizers``).
    """
    splits = {
        split: load_multi30k(split, root)
        for split in ("train", "val", "test2016")
    }
    train_pairs = splits["train"][: cfg.train_subset]
    val_pairs = splits["val"][: cfg.val_subset]
    test_pairs = splits["test2016"][: cfg.test_subset]
    if tokenizer is None:
        tokenizer = train_tokenizer(
            train_pairs, cfg.vocab_size, cache_dir=cache_dir
        )
    train_ids = encode_pairs(tokenizer, train_pairs)
    keep = [
        i
        for i, (s, t) in enumerate(train_ids)
        if max(len(s), len(t)) + 1 <= cfg.max_len
    ]
    return PreparedData(
        tokenizer,
        [train_pairs[i] for i in keep],
        val_pairs,
        test_pairs,
        [train_ids[i] for i in keep],
        encode_pairs(tokenizer, val_pairs),
        encode_pairs(tokenizer, test_pairs),
    )


@dataclass(frozen=True)
class RunSummary(Record):
    """What ``train`` returns and writes to ``summary.json``.

    ``summary["steps"]`` works as well as ``summary.steps`` (code written when this was a dict).
    """

    preset: str
    out_dir: str
    device: str
    device_name: str
    torch: str
    amp: str | None
    fused_attention: bool
    compile: bool
    parameters: int
    train_pairs: int
    resumed_from_step: int | None
    steps: int
    steps_this_run: int
    epochs_done: int
    wall_s: float
    train_s: float
    tokens_per_s: float
    loss_first: float | None
    loss_last: float | None
    val_loss: float | None
    val_ppl: float | None
    peak_memory_mib: float | None = None
    interrupted: bool = False
    processes: int = 1

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunSummary:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


class TrainingInterrupted(Exception):
    """Ctrl-C (or SIGTERM, SIGHUP) stopped a run; a checkpoint was saved. The message says how to resume."""

    def __init__(
        self,
        message: str,
        summary: RunSummary,
        signal_name: str | None = "SIGINT",
    ):
        super().__init__(message)
        self.summary = summary
        self.signal_name = signal_name


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


@contextlib.contextmanager
def _cpu_threads(n: int | None, device: torch.device) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads when on the CPU, then restore the previous count."""
    if n is None or device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Stop(threading.Event):
    """Set by the first stopping signal; ``signal_name`` says which (``SIGINT`` for Ctrl-C)."""

    signal_name: str | None = None


# Ctrl-C, and what pre-emption sends (docker stop, Slurm, Kubernetes, a VM's shutdown, torchrun
# stopping the other ranks), and a closed terminal: each saves a checkpoint, then the run exits.
_STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP")
    if hasattr(signal, name)
)


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[_Stop]:
    """An event set by the first Ctrl-C, SIGTERM or SIGHUP (a second one acts at once); the old handlers after."""
    stop = _Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum, frame):
        stop.signal_name = signal.Signals(signum).name
        stop.set()
        # a second signal acts at once; not under torchrun, which passes the terminal's Ctrl-C on
        # to the processes that got it already
        if distributed.world_size() == 1:
            for sig in _STOP_SIGNALS:
                signal.signal(sig, previous[sig])

    previous = {sig: signal.signal(sig, handler) for sig in _STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# --- What to do with the folder -------------------------------------------------------------------


def train(
    cfg: TrainConfig | str,
    out_dir: str | os.PathLike,
    root: str | os.PathLike | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    resume: bool = True,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
    hook: Callable[[FitState], None] | None = None,
) -> RunSummary:
    """Train the model of ``cfg`` on Multi30k de→en and leave the run in ``out_dir``.

    Under ``torchrun`` every process calls ``train``: each trains on its share of the batches
    (``aiayn.training.distributed``), rank 0 alone writes into ``out_dir`` (it learns the tokenizer; the
    others read it from the folder) and says what it does.

    ``out_dir`` must be new, empty, or a run folder this function wrote (see ``aiayn.runs.folder``); no
    other file is ever deleted. With ``resume`` and a checkpoint there, training continues from it
    exactly (weights, optimizer, schedule, RNG and position in the epoch); ``metrics.jsonl`` is cut
    back to the checkpoint. Only the length (``epochs``, ``max_steps``), speed and decoding settings
    may differ from the saved config. Replacing a trained run needs ``resume=False, overwrite=True``,
    and happens only after the device and the data were checked.

    Args:
        cfg: a ``TrainConfig`` or a preset name.
        out_dir: the run folder (created if needed).
        root: the Multi30k folder (default ``$AIAYN_DATA``).
        device: default CUDA when available, else CPU.
        progress: show a progress bar.
        resume: continue from ``out_dir/checkpoint.pt`` when it exists.
        overwrite: with ``resume=False``, replace a trained run's files.
        log: called with a line about what is done with the folder (e.g. ``print``).
        hook: also called with every ``FitState`` of ``fit`` (rank 0 only), after the run's own
            log: ``tools/gpu_check.py`` translates with the model being trained at each evaluation.

    Returns:
        A ``RunSummary`` (also written to ``summary.json``).

    Raises:
        TrainingInterrupted: Ctrl-C, SIGTERM or SIGHUP stopped the run after saving a checkpoint.
    """
    start_time = time.perf_counter()
    cfg = get_preset(cfg) if isinstance(cfg, str) else cfg
    say = log or (lambda line: None)
    # 1. Check all before writing anything: the device, the folder, the data.
    device = resolve_device(
        distributed.setup(device)
    )  # under torchrun: this rank's
    main = distributed.is_main()
    if not main:  # rank 0 alone speaks and shows progress
        say, progress = (lambda line: None), False
    if cfg.cuda_graphs:
        check_cuda_graphs(device, distributed.world_size())
    if cfg.compile and device.type == "cpu":
        say(
            "note: compiled training on a CPU is slower than eager (Inductor "
            "draws dropout's random numbers slowly); compile on a GPU"
        )
    folder = RunFolder(out_dir)
    if folder.has_manifest():
        # fail now, before any advice about the folder's files (they may be changing) or the
        # data, when another command is writing; under torchrun every rank fails with rank 0's words
        distributed.main_first(folder.check_unlocked)
    plan = plan_run(folder, cfg, resume, overwrite)
    distributed.barrier()  # every rank has read the folder before rank 0 writes into it
    if plan.action == "done":
        with contextlib.suppress(
            RunFolderError, TypeError
        ):  # no summary yet: finish the run below
            # out_dir: where the folder is now, if it was moved
            summary = RunSummary.from_dict({
                **folder.read_json(SUMMARY),
                "steps_this_run": 0,
                "out_dir": str(folder.path),
            })  # fmt: skip
            say(
                f"{folder.path} has finished: step "
                f"{plan.position['step']}, nothing to train"
            )
            return summary
        plan = plan._replace(action="resume")  # its checkpoint, as read
    tokenizer = None
    if plan.action == "resume":
        folder.read_verified(TOKENIZER)
        tokenizer = Tokenizer(folder.file(TOKENIZER))
    with _cpu_threads(cfg.cpu_threads, device):
        if not main:  # the other ranks wait for the run rank 0 opens, then read its tokenizer
            distributed.barrier()
            opened = RunFolder(folder.path)
            opened.read_verified(TOKENIZER)
            data = prepare_data(cfg, root, Tokenizer(opened.file(TOKENIZER)))
            first_step = (
                plan.position["step"] if plan.action == "resume" else 0
            )
            return _run(
                cfg,
                folder,
                plan,
                first_step,
                data,
                device,
                False,
                start_time,
                None,
            )
        data = prepare_data(cfg, root, tokenizer=tokenizer)
        # 2. Write, under the folder's lock.
        with folder.locked():
            first_step = _open_run(cfg, folder, plan, data, say)
            distributed.barrier()  # the run is open: the other ranks go on
            return _run(
                cfg,
                folder,
                plan,
                first_step,
                data,
                device,
                progress,
                start_time,
                hook,
                say,
            )


def _when_saved(cfg: TrainConfig) -> str:
    when = []
    if cfg.checkpoint_minutes:
        when.append(f"every {cfg.checkpoint_minutes:g} minutes")
    if cfg.checkpoint_every:
        when.append(f"every {cfg.checkpoint_every} steps")
    stops = "when Ctrl-C, SIGTERM or SIGHUP stops it"
    return f"saved {' and '.join([*when, stops])}"


def _open_run(
    cfg: TrainConfig,
    folder: RunFolder,
    plan: Plan,
    data: PreparedData,
    say: Callable[[str], None],
) -> int:
    """Start the run in ``folder`` (or prepare it to resume); return the step it starts from."""
    if plan.action in ("fresh", "restart"):
        if folder.has_manifest():
            removed = folder.remove_run()
            if plan.action == "restart":
                say(
                    f"{folder.path} stopped before its first checkpoint (saved "
                    "after the first step), so it starts again"
                )
            elif removed:
                say(
                    f"replacing the run in {folder.path} "
                    f"({len(removed)} files)"
                )
        folder.start(cfg)
        folder.write(TOKENIZER, Path(data.tokenizer.model_file).read_bytes())
        folder.set_config(cfg)
        folder.write(METRICS, "")
        first_step = 0
        say(
            f"training a new run in {folder.path}; if it stops (Ctrl-C, "
            "a lost Colab session), the same command resumes from its "
            f"last checkpoint ({_when_saved(cfg)})"
        )
    else:
        if folder.is_legacy():
            folder.adopt()
            say(
                f"{folder.path} gets a manifest.json "
                "(a run folder of an older version)"
            )
        if plan.old != cfg:
            folder.set_config(cfg)
        cut_metrics(
            folder, plan.position["entry"] or {"step": plan.position["step"]}
        )
        first_step = plan.position["step"]
        say(
            f"resuming {folder.path} from its checkpoint at step "
            f"{first_step} ({plan.position['epoch']} epochs done): the run "
            "continues exactly where it stopped"
        )
    return first_step


def warmup_note(
    cfg: TrainConfig, steps_per_epoch: int, processes: int
) -> str | None:
    """One line when the warm-up is not shorter than the run: the rate would never peak nor decay.

    Args:
        cfg: the run's config (``warmup``, ``epochs``, ``max_steps``).
        steps_per_epoch: optimizer steps an epoch, on each process (``len(EpochBatches)``).
        processes: how many processes train together (each step takes one batch on each).

    Returns:
        The line (what is wrong and what to change), or ``None`` when the schedule fits the run.
    """
    total = cfg.epochs * steps_per_epoch
    on = f" on {processes} processes" if processes > 1 else ""
    run = f"{cfg.epochs} epochs of {steps_per_epoch} steps{on}"
    if cfg.max_steps is not None and cfg.max_steps < total:
        total, run = cfg.max_steps, f"--max-steps {cfg.max_steps:,}"
    if cfg.warmup < total:
        return None
    return (
        f"note: the warm-up ({cfg.warmup:,} steps) is not shorter than this run "
        f"({total:,} steps: {run}), so the learning rate rises all run, never "
        "peaks and never decays; train longer (--epochs, --max-steps) or give "
        f'"warmup" below {total:,} in a --config file (e.g. a fifth of the '
        f"run, {max(1, total // 5):,})"
    )


def _attention_kernels() -> contextlib.AbstractContextManager:
    """Fused attention without cuDNN's kernel while training.

    PyTorch's ``scaled_dot_product_attention`` picks cuDNN's kernel on an H100, which builds a plan
    for every new batch shape: about 0.4 s for each of an epoch's shapes, as fast as the others
    afterwards (``python -m aiayn.bench`` on an H100, the first step of each shape: 443 ms with it,
    49 ms without; see ``results/torchrun.h100.json``). Flash, memory-efficient and math kernels
    remain.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH,
    ])  # fmt: skip


def _run(
    cfg: TrainConfig,
    folder: RunFolder,
    plan: Plan,
    first_step: int,
    data: PreparedData,
    device: torch.device,
    progress: bool,
    start_time: float,
    hook: Callable[[FitState], None] | None,
    say: Callable[[str], None] = lambda line: None,
) -> RunSummary:
    """Build the model and train it (every rank); rank 0 logs, saves and writes the summary."""
    main = distributed.is_main()
    amp = amp_dtype_for(cfg.amp, device)  # float16 (with a scaler) on a T4
    torch.manual_seed(cfg.seed)
    model = build_model(cfg, data.tokenizer).to(device)
    if cfg.model.fused_attention:
        # fused attention, packed q/k/v, F.layer_norm: the same numbers
        # (tests/test_fast_paths.py), fewer ops, the same state_dict
        set_fast(model)
    # "auto": fused Adam when the model is on CUDA
    optimizer = make_optimizer(model, implementation=cfg.adam)
    scheduler = noam_scheduler(
        optimizer, cfg.model.d_model, cfg.warmup, cfg.lr_factor
    )
    if cfg.compile:
        # in place: state_dict keys stay those of the plain model; dynamic
        # shapes, so that each new batch shape does not compile again
        model.compile(dynamic=True)
    batches = EpochBatches(
        data.train_ids,
        cfg.max_tokens,
        cfg.seed,
        cfg.pin_memory and device.type == "cuda",
        rank=distributed.rank(),
        world=distributed.world_size(),
        device=device,  # each batch copied while the step before it runs
        pad_to=cfg.pad_to,
        pad_rows=cfg.pad_rows,
    )
    note = warmup_note(cfg, len(batches), distributed.world_size())
    if note is not None:
        say(note)  # before step 1

    with (
        open(folder.file(METRICS) if main else os.devnull, "a") as log_file,
        _stop_on_signals() as stop,
        _attention_kernels(),
    ):
        run_log = RunLog(
            folder,
            cfg,
            first_step,
            log_file,
            first_averaged(cfg, len(batches)),
        )
        try:
            history = fit(
                model,
                batches,
                config=FitConfig(
                    epochs=cfg.epochs,
                    clip_norm=cfg.clip_norm,
                    amp_dtype=amp,
                    device=device,
                    max_steps=cfg.max_steps,
                    checkpoint_every=cfg.checkpoint_every,
                    checkpoint_minutes=cfg.checkpoint_minutes,
                    checkpoint_extra={"run_id": folder.run_id()},
                    progress=progress,
                    cuda_graphs=cfg.cuda_graphs,
                ),
                optimizer=optimizer,
                scheduler=scheduler,
                loss_fn=LabelSmoothingLoss(
                    cfg.label_smoothing, ignore_index=cfg.model.pad_id
                ),
                val_batches=eval_batches(data.val_ids, cfg.max_tokens),
                hook=both_hooks(run_log, hook) if main else None,
                stop=stop,
                checkpoint_path=folder.file(CHECKPOINT),
                resume_from=plan.checkpoint,  # read once, by plan_run
            )
        except OSError as err:
            if not is_disk_full(err):
                raise
            raise disk_full(err, _how_to_go_on(folder)) from None
        # every epoch has as many steps (make_batches packs by lengths alone), on every rank
        last_step = cfg.epochs * len(batches)
        if cfg.max_steps is not None:
            last_step = min(last_step, cfg.max_steps)
        finished = bool(history.step) and history.step[-1] >= last_step
        # a stop asked for as the run's last checkpoint was written: nothing is left to resume
        interrupted = stop.is_set() and not finished
    if main:
        # the metrics as the run leaves them: a run stopped by max_steps validates
        # after its last checkpoint, and that line must not look like damage
        size, digest = sha256_file(folder.file(METRICS))
        folder.record(
            METRICS, written_prefix(size, digest, folder.file(METRICS))
        )

    new = [i for i, s in enumerate(history.step) if s > first_step]
    tokens = sum(history.tokens[i] for i in new)
    seconds = sum(history.seconds[i] for i in new)
    last_eval = history.evals[-1] if history.evals else {}
    epochs_done = (
        history.epoch[-1] + int(bool(last_eval.get("epoch_done")))
        if history.epoch
        else 0
    )
    summary = RunSummary(
        preset=cfg.name,
        out_dir=str(folder.path),
        device=str(device),
        device_name=_device_name(device),
        torch=torch.__version__,
        amp=str(amp).replace("torch.", "") if amp else None,
        fused_attention=cfg.model.fused_attention,
        compile=cfg.compile,
        parameters=count_parameters(model),
        train_pairs=len(data.train_ids),
        resumed_from_step=first_step if plan.action == "resume" else None,
        steps=history.step[-1] if history.step else first_step,
        steps_this_run=len(new),
        epochs_done=max(epochs_done, run_log.epochs_done),
        wall_s=time.perf_counter() - start_time,
        train_s=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        loss_first=history.loss[0] if history.loss else None,
        loss_last=history.loss[-1] if history.loss else None,
        val_loss=last_eval.get("val_loss"),
        val_ppl=last_eval.get("val_ppl"),
        peak_memory_mib=torch.cuda.max_memory_allocated(device) / 2**20
        if device.type == "cuda"
        else None,
        interrupted=interrupted,
        processes=distributed.world_size(),
    )
    if main:
        folder.write_json(SUMMARY, summary.to_dict())
    if interrupted:
        how = "Ctrl-C" if stop.signal_name == "SIGINT" else stop.signal_name
        raise TrainingInterrupted(
            f"interrupted ({how}) at step {summary.steps}; "
            f"{_saved_at(folder, summary.steps)}. "
            "Run the same command again to resume",
            summary,
            stop.signal_name,
        )
    return summary


def _saved_step(folder: RunFolder) -> int | None:
    """The step of the checkpoint the run folder lists (rank 0's view), ``None`` without one."""
    entry = folder.manifest()["files"].get(CHECKPOINT)
    return None if entry is None else entry.get("step")


def _saved_at(folder: RunFolder, step: int) -> str:
    """Where the stopped run stands, as its manifest says (the other ranks: as rank 0 wrote it)."""
    if not distributed.is_main():
        return f"the checkpoint is saved in {folder.path / CHECKPOINT}"
    saved = _saved_step(folder)
    if saved is None:
        return f"no checkpoint was saved in {folder.path}, so the run starts again"
    if saved == step:
        return f"the checkpoint is saved in {folder.path / CHECKPOINT}"
    return f"its checkpoint at step {saved} is saved in {folder.path / CHECKPOINT}"


def _how_to_go_on(folder: RunFolder) -> str:
    """After a full disk: the checkpoint the run keeps, and the command that goes on from it."""
    saved = _saved_step(folder)
    if saved is None:
        return "run the same command again: the run had no checkpoint yet, so it starts again"
    return (
        f"run the same command again: it resumes from the checkpoint at step {saved} "
        f"({folder.path / CHECKPOINT}), which the run keeps"
    )
