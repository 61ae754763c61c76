"""Check that what a training run logs and translates equals what its saved weights compute, and time it.

    python tools/gpu_check.py --out gpu_check.json                 # any CUDA GPU, at most 8 minutes
    python tools/gpu_check.py --device cpu --quick --out c.json    # the same promises on a CPU (make test)

The promises, for every Adam implementation and autocast/scaler mode a run can use on the device
(``MODES``): train the smoke preset (on a CPU, its first ``CPU_PAIRS`` training pairs) with the train
command's own code (``recipes.train``); at each evaluation, translate the first validation sentences
with the model being trained. Then, in a fresh process, rebuild the model from the run folder
(``load_run``, the final weights) and compute the validation loss and those translations again: the
last logged ``val_loss`` must equal the recomputed one, and the translations must be the same strings.
A derived copy of the weights that outlived an optimizer step (the stale packed q/k/v of issue 30)
breaks both.

On CUDA the promises also cover a smoke run whose passes are replayed as CUDA graphs
(``TrainConfig.cuda_graphs``, padded as ``python -m aiayn.train --cuda-graphs`` pads). Without
``--quick`` (meant for a GPU) it also times, by phase (start-up, building batches, steps,
validation, checkpoint writes), the whole smoke preset and 4 epochs of ``multi30k`` (checked by
the same promises; on CUDA also with CUDA graphs, padded and unpadded), and decodes test2016 with beam 4
(time, BLEU) with the 4-epoch weights, in batches of 128 sentences and in one batch of all of them.
Beside each timed run without graphs it writes what ``estimate_minutes`` foretold (``estimate_s``).

Writes a JSON to ``--out`` (marked ``"format": "aiayn-gpu-check/1"``), atomically, after each run and
first before any: a new file, or a report of an earlier check, never another file nor one inside a
run folder; a second check writing into the same folder fails at once. The runs go to a temporary
folder, removed at the end or on a signal (``--work``: a new or empty folder, kept); the check never
resumes. Exits 1 when a promise fails or the disk is full, 2 on a bad argument, 128 + the signal's
number on Ctrl-C, SIGTERM or SIGHUP; every error is one ``error:`` line that names the file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.bench.estimate import estimate_minutes  # noqa: E402
from aiayn.data.multi30k import SPLITS, load_multi30k  # noqa: E402
from aiayn.data.tokenizer import Tokenizer  # noqa: E402
from aiayn.decoding.translate import translate  # noqa: E402
from aiayn.engine.switch import set_fast  # noqa: E402
from aiayn.files import atomic_write, disk_full, is_disk_full, sha256_file  # noqa: E402
from aiayn.runs import recipes  # noqa: E402
from aiayn.runs.folder import TOKENIZER, RunFolder, RunFolderError  # noqa: E402
from aiayn.runs.load import load_run  # noqa: E402
from aiayn.runs.presets import get_preset  # noqa: E402
from aiayn.runs.recipes import TrainingInterrupted  # noqa: E402
from aiayn.train import with_cuda_graphs  # noqa: E402
from aiayn.training.batches import eval_batches  # noqa: E402
from aiayn.training.step import amp_dtype_for, mean_loss  # noqa: E402

FORMAT = "aiayn-gpu-check/1"  # a report's "format": what marks a file this tool may replace
OLD_REPORT_KEYS = {"device", "device_name", "torch", "quick", "promises"}  # a report from before it had one
SENTENCES = 64  # validation sentences translated at each evaluation
# On a CPU the smoke runs train on 200 of the preset's 2,000 pairs, 6 steps an epoch instead of 50: the
# promises need steps between evaluations, not many, and bfloat16 and float16 autocast are slow on a CPU
# without those types in hardware (on the book's AVX2 machine, 7 times float32's time a step)
CPU_PAIRS = 200
# (Adam implementation, amp): what a run uses on CUDA ("auto": fused Adam, bfloat16 from compute
# capability 8.0, float16 with a scaler below), and their CPU twins, which PyTorch also runs
MODES = {
    "cuda": [("auto", "auto"), ("foreach", "auto"), ("fused", "fp16"), ("for-loop", None)],
    "cpu": [("fused", None), ("foreach", None), ("for-loop", None), ("fused", "bf16"), ("fused", "fp16")],
}


class Recorder:
    """``train``'s extra hook: the wall clock of every event, and the translations at each evaluation."""

    def __init__(self, run: Path, sentences: list[str], cfg) -> None:
        self.run, self.sentences, self.cfg = run, sentences, cfg
        self.phases = dict.fromkeys(("batches", "steps", "validation", "checkpoints"), 0.0)
        self.started = time.perf_counter()
        self.last: float | None = None  # when the previous event's hooks returned
        self.first_step: float | None = None
        self.translations: list[str] = []
        self.tokenizer: Tokenizer | None = None

    def __call__(self, state) -> None:
        now = time.perf_counter()
        if state.event == "step":
            began = now - state.seconds
            if self.last is None:
                self.first_step = began  # before it: start-up (data, model, first batch)
            else:
                self.phases["batches"] += began - self.last
            self.phases["steps"] += state.seconds
        elif self.last is not None:
            # epoch_end: the epoch file written before it; eval: validation;
            # saving, checkpoint: the checkpoint serialised, written and renamed
            phase = "validation" if state.event == "eval" else "checkpoints"
            self.phases[phase] += now - self.last
        if state.event == "eval":  # not timed: the check's own work
            self.translations = self.translate(state.model)
        self.last = time.perf_counter()

    def translate(self, model) -> list[str]:
        if self.tokenizer is None:
            self.tokenizer = Tokenizer(self.run / TOKENIZER)
        return _translate(model, self.tokenizer, self.sentences, self.cfg)


def _translate(model, tokenizer, sentences, cfg) -> list[str]:
    return translate(
        model, tokenizer, sentences, beam=cfg.beam, length_penalty=cfg.length_penalty,
        max_len_a=cfg.max_len_a, max_len_b=cfg.max_len_b,
    )  # fmt: skip


def replay(run: Path, device: str, root: str | None, sentences: list[str]) -> dict:
    """In this (fresh) process: the run's final weights, their validation loss and translations."""
    cfg, tokenizer, model, _ = load_run(run, device, average=False)
    if cfg.model.fused_attention:
        set_fast(model)  # as the train command trains and evaluates
    data = recipes.prepare_data(cfg, root, tokenizer)
    with recipes._attention_kernels():  # the train command's attention kernels
        loss = mean_loss(model, eval_batches(data.val_ids, cfg.max_tokens), amp_dtype_for(cfg.amp, device))
        translations = _translate(model, tokenizer, sentences, cfg)
    return {"val_loss": loss, "translations": translations}


def train_and_replay(
    cfg, name: str, work: Path, scratch: Path, device: str, root: str | None, tolerance: float
) -> dict:
    """Train ``cfg`` into ``work/name``, replay it in a fresh process, compare; with the phases' times.

    The sentences go to the replay through a file in ``scratch`` (the check's temporary folder).
    """
    run = work / name
    sentences = [de for de, _ in load_multi30k("val", root)[:SENTENCES]]
    recorder = Recorder(run, sentences, cfg)
    summary = recipes.train(cfg, run, root=root, device=device, progress=False, hook=recorder)
    wall = time.perf_counter() - recorder.started
    logged = summary.val_loss
    (scratch / f"{name}.sentences.json").write_text(json.dumps(sentences))
    argv = [sys.executable, __file__, "--replay", str(run), "--device", device,
            "--sentences", str(scratch / f"{name}.sentences.json")]  # fmt: skip
    if root:
        argv += ["--data", str(root)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the replay of {run} failed:\n{done.stderr[-3000:]}")
    fresh = json.loads(done.stdout.splitlines()[-1])
    same = sum(a == b for a, b in zip(recorder.translations, fresh["translations"], strict=True))
    differ = [
        {"source": s, "training": a, "fresh": b}
        for s, a, b in zip(sentences, recorder.translations, fresh["translations"], strict=True)
        if a != b
    ]
    loss_ok = abs(logged - fresh["val_loss"]) <= tolerance * max(1.0, abs(logged))
    phases = {"start_up": recorder.first_step - recorder.started, **recorder.phases}
    return {
        "run": name, "preset": cfg.name, "adam": cfg.adam, "amp": cfg.amp,
        "amp_dtype": str(amp_dtype_for(cfg.amp, device) or torch.float32).replace("torch.", ""),
        "steps": summary.steps, "epochs": summary.epochs_done,
        "val_loss_logged": logged, "val_loss_fresh": fresh["val_loss"],
        "val_loss_tolerance": tolerance, "translations": len(sentences), "identical": same,
        "differing": differ[:5],
        "passed": bool(loss_ok and same == len(sentences)),
        "wall_s": wall, "phases_s": phases,
    }  # fmt: skip


def _evaluate(run: Path, device: str, root: str | None, beam: int, batch_size: int = 128) -> dict:
    start = time.perf_counter()
    result = recipes.evaluate(
        run, "test2016", beam=beam, limit=None, device=device, root=root, average=False, batch_size=batch_size
    )
    return {
        "sentences": result.sentences, "beam": beam, "batch_size": batch_size, "bleu": result.bleu,
        "sacrebleu": result.sacrebleu, "decode_s": result.decode_s, "wall_s": time.perf_counter() - start,
        "translations": (run / result.hypotheses_file).read_text(encoding="utf-8").splitlines(),
    }  # fmt: skip


def _estimate_s(cfg, device_name: str) -> float | None:
    """``estimate_minutes`` of the run in seconds; ``None`` on a device without data-sheet figures."""
    try:
        return 60 * estimate_minutes(cfg, device_name).minutes
    except ValueError:  # a CPU, or a GPU not in GPU_SPECS
        return None


def check(device: str, quick: bool, root: str | None, work: Path, scratch: Path, log, save) -> dict:
    kind = torch.device(device).type
    tolerance = 1e-6 if kind == "cpu" else 2e-3  # GPU: kernels may add in another order
    smoke = get_preset("multi30k-smoke")  # 3 epochs: a stale copy shows from the 2nd evaluation on
    if kind == "cpu":
        smoke = replace(smoke, train_subset=CPU_PAIRS)
    report: dict = {
        "format": FORMAT,
        "device": device,
        "device_name": recipes._device_name(torch.device(device)),
        "torch": torch.__version__,
        "quick": quick,
        "promises": [],
    }
    save(report)  # the file can be written: known now, not after the first run
    runs = [(f"smoke-{adam}-{amp or 'fp32'}", replace(smoke, adam=adam, amp=amp)) for adam, amp in MODES[kind]]
    if kind == "cuda":
        runs.append(("smoke-graphs", with_cuda_graphs(smoke)))
    for name, cfg in runs:
        log(f"{name}: training, then replaying in a fresh process")
        result = train_and_replay(cfg, name, work, scratch, device, root, tolerance)
        report["promises"].append(result)
        save(report)  # what is done so far, should a later part not finish
        log(f"  {'ok' if result['passed'] else 'FAILED'}: val loss {result['val_loss_logged']:.6f} logged, "
            f"{result['val_loss_fresh']:.6f} fresh; {result['identical']}/{result['translations']} "
            f"translations identical; {result['wall_s']:.1f} s")  # fmt: skip
    if not quick:
        big = replace(get_preset("multi30k"), epochs=4, average_last=1)
        bigs = [("multi30k-4", big)]
        if kind == "cuda":  # padded as the flag pads (28 shapes), and as it is (108 shapes)
            bigs += [("multi30k-4-graphs", with_cuda_graphs(big)),
                     ("multi30k-4-graphs-unpadded", replace(big, cuda_graphs=True))]  # fmt: skip
        for name, cfg in bigs:
            log(f"{name}: training, then replaying in a fresh process")
            result = train_and_replay(cfg, name, work, scratch, device, root, tolerance)
            if not cfg.cuda_graphs:  # what estimate_minutes foretold, beside what was measured
                result["estimate_s"] = _estimate_s(cfg, report["device_name"])
            report["promises"].append(result)
            save(report)
            log(f"  {'ok' if result['passed'] else 'FAILED'}: val loss {result['val_loss_logged']:.4f} "
                f"logged, {result['val_loss_fresh']:.4f} fresh; phases {result['phases_s']}")  # fmt: skip
        log("test2016, beam 4, with the 4-epoch weights, 128 sentences a batch and all in one")
        batched = _evaluate(work / "multi30k-4", device, root, beam=4)
        one = _evaluate(work / "multi30k-4", device, root, beam=4, batch_size=1000)
        lines = batched.pop("translations"), one.pop("translations")
        one["identical_to_batches_of_128"] = sum(a == b for a, b in zip(*lines, strict=True))
        report["test2016"], report["test2016_one_batch"] = batched, one
        log(f"  {batched}\n  {one}")
    report["passed"] = all(p["passed"] for p in report["promises"])
    return report


class Interrupted(Exception):
    """A signal stopped the check; the message says what is left (exit status 128 + the signal's number)."""

    def __init__(self, message: str, signal_name: str):
        super().__init__(message)
        self.signal_name = signal_name


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside a training (inside one, the train code saves and stops)."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Stopped`` as Ctrl-C raises ``KeyboardInterrupt``, so the work folder goes."""

    def stop(signum, frame):
        raise Stopped(signal.Signals(signum).name)

    names = [name for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    previous = {name: signal.signal(getattr(signal, name), stop) for name in names}
    try:
        yield
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def is_report(path: Path) -> bool:
    """Whether ``path`` holds a report of this tool (its ``format``, or the keys of one from before it had one)."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(report, dict) and (report.get("format") == FORMAT or OLD_REPORT_KEYS <= report.keys())


def _run_folder_around(path: Path) -> Path | None:
    """The run folder (one with an aiayn ``manifest.json``, or a run from before manifests) that holds ``path``."""
    parent = path.resolve().parent
    if RunFolder(parent).is_legacy() and (parent / TOKENIZER).is_file():
        return parent
    for folder in (parent, *parent.parents):
        with contextlib.suppress(RunFolderError, OSError):
            if RunFolder(folder).has_manifest() and RunFolder(folder).manifest():
                return folder
    return None


def check_out(out: Path) -> None:
    """Refuse an ``--out`` this tool may not write: a folder, a link, a file in a run folder, another file."""
    if out.is_symlink():
        raise cli.UsageError(f"--out {out} is a symbolic link; give the name of a plain file (the link is left alone)")
    if out.is_dir():
        raise cli.UsageError(f"--out {out} is a folder; expected a file name")
    run = _run_folder_around(out)
    if run is not None:
        raise cli.UsageError(f"--out {out} is inside the run folder {run}, which holds only what its commands "
                             "write; write the check elsewhere")  # fmt: skip
    if out.exists() and not is_report(out):
        raise cli.UsageError(f"--out {out} exists and is not a report of gpu_check.py (no \"format\": "
                             f"\"{FORMAT}\"); it is left alone: give a new file name")  # fmt: skip


def check_work(work: Path) -> None:
    """Refuse a ``--work`` that is a file or holds anything: the check trains its runs afresh."""
    if work.exists() and not work.is_dir():
        raise cli.UsageError(f"--work {work} is a file; expected a new or empty folder for the check's runs")
    if work.is_dir() and any(work.iterdir()):
        raise cli.UsageError(f"--work {work} is not empty; the check trains its runs afresh into a new or empty "
                             "folder: give another")  # fmt: skip


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold a lock on ``folder`` itself (no file is made there); a second check writing into it fails at once."""
    try:
        import fcntl
    except ImportError:  # not on Windows: no lock
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise cli.UsageError(f"another gpu_check.py is writing into {folder}; wait for it to finish, or "
                                 "write into another folder") from None  # fmt: skip
        yield
    finally:
        os.close(fd)


class Report:
    """The ``--out`` file: written atomically, and only over what is absent, a report, or what it wrote last."""

    def __init__(self, out: Path):
        self.out = out
        self.written: tuple[int, str] | None = None
        self.runs: int | None = None  # how many runs the file holds

    def save(self, report: dict) -> None:
        if self.written is None:
            check_out(self.out)
        elif self.out.exists() and sha256_file(self.out) != self.written:
            raise Failed(f"{self.out} was replaced while the check ran (it is not the report the check wrote); "
                         "it is left alone: run the check again with another --out")  # fmt: skip
        written = atomic_write(self.out, json.dumps(report, indent=1) + "\n")
        self.written = written.size, written.sha256
        self.runs = len(report["promises"])


class Failed(Exception):
    """A failure (exit status 1) said in one line."""


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser("gpu_check.py", __doc__.splitlines()[0])
    parser.add_argument("--out", help="the JSON to write: a new file, or a report of an earlier check")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--quick", action="store_true", help="the promises only, on short smoke runs")
    parser.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")
    parser.add_argument("--work", default=None, help="a new or empty folder for the runs, kept afterwards "
                        "(default: a temporary folder, removed)")  # fmt: skip
    parser.add_argument("--replay", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--sentences", default=None, help=argparse.SUPPRESS)
    return parser


def _gpu_check(args: argparse.Namespace) -> int:
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.split(":")[0] not in MODES:
        raise cli.UsageError(f"--device must be cuda or cpu, got {device!r}")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise cli.UsageError("--device cuda, but torch sees no CUDA GPU here; pass --device cpu")
    if args.replay:
        sentences = json.loads(Path(args.sentences).read_text())
        print(json.dumps(replay(Path(args.replay), device, args.data, sentences)))
        return 0
    if not args.out:
        raise cli.UsageError("--out is required: the JSON file to write")
    out = Path(args.out)
    check_out(out)
    if args.work:
        check_work(Path(args.work))
    for split in SPLITS:  # the runs and the decoding need them: missing ones fail now, not minutes on
        load_multi30k(split, args.data)

    def log(line: str) -> None:
        print(line, flush=True)

    start = time.perf_counter()
    report_file = Report(out)

    def save(report: dict) -> None:
        report["wall_s"] = time.perf_counter() - start
        report_file.save(report)

    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out.parent), _stop_on_signals():
        try:
            with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
                work = Path(args.work) if args.work else Path(tmp) / "runs"
                work.mkdir(parents=True, exist_ok=True)
                report = check(device, args.quick, args.data, work, Path(tmp), log, save)
                save(report)
        except (TrainingInterrupted, KeyboardInterrupt) as err:
            raise _interrupted(err, out, report_file, args.work) from None
    log(f"{'passed' if report['passed'] else 'FAILED'} in {report['wall_s']:.0f} s; wrote {out}")
    return 0 if report["passed"] else 1


def _interrupted(err: BaseException, out: Path, report_file: Report, work: str | None) -> Interrupted:
    """What a signal left, in one line: no run resumes, where the runs are, what was checked."""
    name = getattr(err, "signal_name", None) or "SIGINT"
    how = "Ctrl-C" if name == "SIGINT" else name
    runs = (f"its runs so far stay in {work} (the check does not resume them: run it again with a new "
            "--work, or none)" if work else
            "its runs were in a temporary folder, now removed (the check does not resume: run it again "
            "to start afresh)")  # fmt: skip
    done = report_file.runs
    checked = "" if done is None else f"; {out} holds the {done} run{'s' * (done > 1)} checked before" if done else (
        f"; {out} holds none of its runs yet")  # fmt: skip
    return Interrupted(f"error: interrupted ({how}); {runs}{checked}", name)


def _in_one_line(args: argparse.Namespace) -> int:
    """``_gpu_check``, with a signal, a failure and a full disk each said in one line."""
    try:
        return _gpu_check(args)
    except Interrupted as err:
        print(err, file=sys.stderr)
        return 128 + getattr(signal, err.signal_name)  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
    except Failed as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        if not is_disk_full(err):
            raise
        raise disk_full(err, "run the check again") from None  # cli.run says it in one line


def main(argv: list[str] | None = None) -> int:
    return cli.run(_parser(), argv, _in_one_line)


if __name__ == "__main__":
    sys.exit(main())
