"""Table 3 of the paper on Multi30k: each variation of a base preset, trained with a few seeds; resumable.

    python tools/table3.py --out table3.json --dry-run                    # the plan: configs, parameters
    python tools/table3.py --out table3.json --epochs 10 --jobs 4         # one GPU, four runs at a time
    python tools/table3.py --out table3.json --epochs 10 --jobs 4 --resume   # after a stop: goes on
    python tools/table3.py --out table3.json --summary                    # mean ± spread against the base

The rows, as ``aiayn.model.TABLE3_VARIANTS`` and ``TABLE3_TRAINING_ONLY`` give them, on top of
``--base`` (default the ``multi30k`` preset):

- (A) ``h`` 1, 4, 16, 32 at constant computation: ``d_model`` stays, ``d_k = d_v = d_model / h``;
- (B) ``d_k`` 16, 32, with ``d_v = d_model / h`` as in the base;
- (C) ``N`` 2, 4, 8; ``d_model`` 256, 1024 (``d_k = d_v = d_model / h``); ``d_ff`` 1024, 4096;
- (D) ``P_drop`` 0, 0.2 (D1, D2) and ``ε_ls`` 0, 0.2 (D3, D4);
- (E) learned positional embeddings instead of sinusoids.

Every run trains with ``aiayn.runs.recipes.train`` (as ``python -m aiayn.train``) into its own
run folder under ``--work`` (default ``<out>.runs/``), then is scored with
``aiayn.runs.scoring.evaluate`` (as ``python -m aiayn.evaluate``): sacreBLEU on test2016 (the base's
``test_subset``, or ``--limit``), beam and averaging as the base preset says. The ``base`` itself runs
with every seed, so that each row is compared with runs trained the same way.

``--seeds N`` (default 3) trains seeds ``s, s+1, ..., s+N-1``, ``s`` the base's seed; the runs go
seed by seed (all rows with the first seed, then the second ...), so that a sweep cut short has one
run of every row before it has two. ``--jobs K`` trains K runs at once, each in a process of its own
(``python tools/table3.py --one ...``): a step of these small models is mostly host time (see
``aiayn.runs.presets``), so several processes overlap on one GPU. To fit a budget, ``--epochs`` or
``--max-steps`` shortens every run alike: the paper trained every row for the same number of steps,
and a budget in minutes would give the larger rows fewer. ``--max-runs`` and ``--stop-after-minutes``
end the sweep after so many runs, or start none after so many minutes. SIGTERM or Ctrl-C stops the
sweep; with ``--jobs`` each running process gets SIGTERM and saves its checkpoint first.

``--out`` is ONE JSON, rewritten atomically (``aiayn.files.atomic_write``) after every run:
``{"format": "aiayn-table3/1", "base", "budget", "runs": {"<variant>/seed<s>": {...}}}``, each run
with its changes, config, parameters, ``d_k``/``d_v``, steps, validation loss and perplexity (the
last validation, final weights), test2016 sacreBLEU, and wall time (training plus scoring).
An existing ``--out`` is continued only with ``--resume``: the runs it holds are skipped, a run
that a kill interrupted resumes from its last checkpoint in its run folder (``train`` resumes
exactly), and every other run starts. A different ``--base`` or budget is refused, so that no two
budgets mix in one table. ``--summary`` prints, per variant, the mean ± the spread (the sample
standard deviation over seeds) of the BLEU and the perplexity, the difference from the base, and
whether it exceeds the two spreads added (``|Δ| > s_variant + s_base``); with one seed there is no
spread, and no difference is called out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.files import atomic_write  # noqa: E402
from aiayn.model import (  # noqa: E402
    TABLE3_TRAINING_ONLY,
    TABLE3_VARIANTS,
    count_parameters,
)
from aiayn.runs.presets import PRESETS, TrainConfig, build_model, get_preset  # noqa: E402
from aiayn.runs.recipes import TrainingInterrupted  # noqa: E402

FORMAT = "aiayn-table3/1"
ROWS = "ABCDE"
# every variant of Table 3 by row letter, in the paper's order
VARIANTS = {
    letter: [v for v in (*TABLE3_VARIANTS, *TABLE3_TRAINING_ONLY) if v[0] == letter]
    for letter in ROWS
}


@dataclass(frozen=True)
class Run:
    """One run of the sweep: a variant (``"base"``, ``"A1"`` ...) with a seed, and its config."""

    variant: str
    seed: int
    cfg: TrainConfig
    changes: dict

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"

    @property
    def folder(self) -> str:
        return f"{self.variant}-seed{self.seed}"


def variant_changes(base: TrainConfig, variant: str) -> dict:
    """The fields ``variant`` changes on ``base`` (model fields and training ones alike).

    (A) and the ``d_model`` rows of (C) keep ``d_k = d_v = d_model / h``; (B) sets ``d_k`` and keeps
    ``d_v`` at the base's ``d_model / h`` (the paper's 64).
    """
    if variant == "base":
        return {}
    if variant in TABLE3_TRAINING_ONLY:
        return dict(TABLE3_TRAINING_ONLY[variant])
    if variant not in TABLE3_VARIANTS:
        known = ", ".join(v for row in VARIANTS.values() for v in row)
        raise cli.UsageError(f"unknown Table 3 variant {variant!r}; expected a row letter ({', '.join(ROWS)}) "
                             f"or one of {known}")  # fmt: skip
    changes = dict(TABLE3_VARIANTS[variant])
    if variant[0] == "B":
        changes["d_v"] = base.d_model // base.h
    elif "h" in changes or "d_model" in changes:
        changes |= {"d_k": None, "d_v": None}
    return changes


def variants_of(rows: str) -> list[str]:
    """``"A,C4,E"`` as variant names: a letter is its whole row, a name is itself; ``base`` first."""
    names: list[str] = []
    for item in (part.strip() for part in rows.split(",")):
        if not item:
            continue
        for name in VARIANTS.get(item.upper(), [item.upper() if item != "base" else item]):
            if name not in names and name != "base":
                names.append(name)
    return ["base", *names]


def budget_of(args: argparse.Namespace) -> dict:
    """What every run shares and the JSON records: the length of the runs, the sentences scored."""
    return {"epochs": args.epochs, "max_steps": args.max_steps, "limit": args.limit}


def plan(base: TrainConfig, variants: list[str], seeds: int, budget: dict) -> list[Run]:
    """Every run, seed by seed: all variants with the first seed, then with the second ..."""
    length = {k: v for k, v in budget.items() if k in ("epochs", "max_steps") and v is not None}
    runs = []
    for i in range(seeds):
        seed = base.seed + i
        for variant in variants:
            changes = variant_changes(base, variant)
            cfg = base.with_changes(
                **changes, **length, seed=seed, name=f"{base.name}-table3-{variant}"
            )
            runs.append(Run(variant, seed, cfg, changes))
    return runs


def changed(changes: dict) -> str:
    """``{"h": 1, "d_k": None}`` as ``h=1`` (``None``: the default, ``d_model / h``); the base as ``-``."""
    return " ".join(f"{k}={v}" for k, v in changes.items() if v is not None) or "-"


def parameters(cfg: TrainConfig) -> int:
    """The model's parameters over the config's vocabulary, counted without allocating them."""
    with torch.device("meta"):
        return count_parameters(build_model(cfg, cfg.vocab_size))


def head_widths(cfg: TrainConfig) -> tuple[int, int]:
    """``(d_k, d_v)`` as the model builds them: ``d_model / h`` unless set."""
    m = cfg.model
    return m.d_k or m.d_model // m.h, m.d_v or m.d_model // m.h


def train_and_score(cfg: TrainConfig, run_dir: Path, device: str | None, root: str | None,
                    limit: int | None) -> dict:  # fmt: skip
    """Train ``cfg`` into ``run_dir`` (resuming it if a checkpoint is there), score test2016."""
    from aiayn.runs.recipes import train
    from aiayn.runs.scoring import evaluate

    start = time.perf_counter()
    summary = train(cfg, run_dir, root=root, device=device, progress=False)
    result = evaluate(run_dir, "test2016", limit="config" if limit is None else limit, device=device, root=root)
    return {
        "steps": summary.steps, "epochs_done": summary.epochs_done, "train_pairs": summary.train_pairs,
        "val_loss": summary.val_loss, "val_ppl": summary.val_ppl, "parameters_trained": summary.parameters,
        "test2016": {"sentences": result.sentences, "sacrebleu": result.sacrebleu, "bleu": result.bleu,
                     "beam": result.beam, "checkpoints": result.checkpoints, "decode_s": result.decode_s},
        "train_s": summary.train_s, "wall_s": time.perf_counter() - start,
        "resumed_from_step": summary.resumed_from_step,
        "device_name": summary.device_name, "torch": summary.torch,
    }  # fmt: skip


def record(run: Run, measured: dict) -> dict:
    """The JSON entry of a finished run."""
    d_k, d_v = head_widths(run.cfg)
    m = run.cfg.model
    return {
        "variant": run.variant, "row": run.variant[0] if run.variant != "base" else "base",
        "seed": run.seed, "changes": run.changes,
        "d_model": m.d_model, "h": m.h, "d_k": d_k, "d_v": d_v, "N": m.N, "d_ff": m.d_ff,
        "parameters": parameters(run.cfg), **measured, "config": run.cfg.to_dict(),
    }  # fmt: skip


class Sweep:
    """The ``--out`` JSON: read once, rewritten atomically after every run (from any thread)."""

    def __init__(self, out: Path, base: str, budget: dict, resume: bool):
        self.out, self.lock = out, threading.Lock()
        fresh = {"format": FORMAT, "base": base, "budget": budget, "runs": {}}
        if not out.exists():
            self.report = fresh
            return
        if out.is_dir():
            raise cli.UsageError(f"--out {out} is a folder; expected a JSON file name")
        try:
            report = json.loads(out.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            report = None
        if not isinstance(report, dict) or report.get("format") != FORMAT:
            raise cli.UsageError(f"--out {out} exists and is not a sweep of table3.py (no \"format\": "
                                 f"\"{FORMAT}\"); it is left alone: give a new file name")  # fmt: skip
        if not resume:
            raise cli.UsageError(f"--out {out} holds a sweep already: pass --resume to go on with it, "
                                 "or give a new file name")  # fmt: skip
        if (report["base"], report["budget"]) != (base, budget):
            raise cli.UsageError(
                f"--out {out} holds a sweep of --base {report['base']} with {report['budget']}, not of "
                f"--base {base} with {budget}; runs of two budgets do not compare: give a new file name"
            )
        self.report = report

    def save_run(self, run: Run, entry: dict) -> None:
        with self.lock:
            self.report["runs"][run.key] = entry
            self.save()

    def save(self) -> None:
        atomic_write(self.out, json.dumps(self.report, indent=1) + "\n")


def _run_in_process(run: Run, args: argparse.Namespace, work: Path) -> dict:
    return train_and_score(run.cfg, work / run.folder, args.device, args.data, args.limit)


class Stopped(Exception):
    """A signal stopped a sweep of --jobs processes; each saved its run's checkpoint."""

    def __init__(self, signal_name: str):
        super().__init__(f"interrupted ({signal_name}); the runs going on saved their checkpoints")
        self.signal_name = signal_name


_CHILDREN: set[subprocess.Popen] = set()  # the --one processes running now
_CHILDREN_LOCK = threading.Lock()


@contextlib.contextmanager
def _stop_children_on_signals() -> Iterator[None]:
    """SIGTERM or Ctrl-C: each --one process gets SIGTERM (its training saves a checkpoint), then stop."""

    def stop(signum, frame):
        with _CHILDREN_LOCK:
            children = list(_CHILDREN)
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            child.wait()
        raise Stopped(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _run_in_subprocess(run: Run, args: argparse.Namespace, work: Path) -> dict:
    """``--one``: the run in a process of its own; its last line of output is the measured JSON."""
    spec = work / f"{run.folder}.json"  # beside the run folder, which holds only what train writes
    atomic_write(spec, json.dumps(run.cfg.to_dict()))
    argv = [sys.executable, __file__, "--one", str(spec), "--out", str(work / run.folder)]
    for flag, value in (("--device", args.device), ("--data", args.data), ("--limit", args.limit)):
        if value is not None:
            argv += [flag, str(value)]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with _CHILDREN_LOCK:
        _CHILDREN.add(child)
    try:
        stdout, stderr = child.communicate()
    finally:
        with _CHILDREN_LOCK:
            _CHILDREN.discard(child)
    done = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{run.key} failed (exit status {done.returncode}):\n{done.stderr[-2000:]}")
    spec.unlink()
    return json.loads(done.stdout.splitlines()[-1])


def sweep(args: argparse.Namespace, log=print) -> dict:
    """Run what the JSON lacks; return the report."""
    base = get_preset(args.base)
    budget = budget_of(args)
    runs = plan(base, variants_of(args.rows), args.seeds, budget)
    out = Path(args.out)
    if args.dry_run:
        for run in runs:
            d_k, d_v = head_widths(run.cfg)
            m = run.cfg.model
            log(f"{run.key:<11} {changed(run.changes):<26} d_model {m.d_model:>4} h {m.h:>2} d_k {d_k:>3} "
                f"d_v {d_v:>3} N {m.N} d_ff {m.d_ff:>4} P_drop {m.dropout} eps_ls {run.cfg.label_smoothing} "
                f"epochs {run.cfg.epochs} max_steps {run.cfg.max_steps}: "
                f"{parameters(run.cfg):>11,} parameters")  # fmt: skip
        log(f"{len(runs)} runs; --out {out}")
        return {}
    book = Sweep(out, args.base, budget, args.resume)
    todo = [run for run in runs if run.key not in book.report["runs"]]
    done = len(runs) - len(todo)
    if args.max_runs is not None:
        todo = todo[: args.max_runs]
    log(f"{done} of {len(runs)} runs in {out} already; running {len(todo)}")
    work = Path(args.work) if args.work else out.with_suffix(".runs")
    work.mkdir(parents=True, exist_ok=True)
    book.save()
    start = time.perf_counter()

    def one(run: Run) -> None:
        minutes = (time.perf_counter() - start) / 60
        if args.stop_after_minutes is not None and minutes >= args.stop_after_minutes:
            return
        log(f"{run.key}: training {json.dumps(run.changes)} into {work / run.folder}")
        go = _run_in_process if args.jobs == 1 else _run_in_subprocess
        entry = record(run, go(run, args, work))
        book.save_run(run, entry)
        log(f"{run.key}: val ppl {entry['val_ppl']:.2f}, sacreBLEU {entry['test2016']['sacrebleu']:.2f}, "
            f"{entry['wall_s']:.0f} s")  # fmt: skip

    if args.jobs == 1:
        for run in todo:
            one(run)
    else:
        with _stop_children_on_signals(), ThreadPoolExecutor(args.jobs) as pool:
            futures = [pool.submit(one, run) for run in todo]
            try:
                for future in futures:
                    future.result()
            finally:  # a stop or a failure: start no other run
                for future in futures:
                    future.cancel()
    return book.report


def _spread(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (``None`` for one value)."""
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def summarize(report: dict) -> list[dict]:
    """Per variant: seeds, parameters, mean ± spread of sacreBLEU and perplexity, and Δ from the base.

    A difference is called beyond the spread when ``|Δ| > s_variant + s_base`` (both known).
    """
    by_variant: dict[str, list[dict]] = {}
    for entry in report["runs"].values():
        by_variant.setdefault(entry["variant"], []).append(entry)
    means: dict[str, dict] = {}
    for variant, entries in by_variant.items():
        means[variant] = {
            "bleu": _spread([e["test2016"]["sacrebleu"] for e in entries]),
            "ppl": _spread([e["val_ppl"] for e in entries]),
        }
    rows = []
    order = ["base", *(v for row in VARIANTS.values() for v in row)]
    for variant in sorted(by_variant, key=lambda v: order.index(v) if v in order else len(order)):
        entries = by_variant[variant]
        row = {"variant": variant, "changes": entries[0]["changes"], "seeds": len(entries),
               "parameters": entries[0]["parameters"]}  # fmt: skip
        for metric in ("bleu", "ppl"):
            mean, spread = means[variant][metric]
            row[metric], row[f"{metric}_spread"] = mean, spread
            if variant != "base" and "base" in means:
                base_mean, base_spread = means["base"][metric]
                row[f"{metric}_delta"] = delta = mean - base_mean
                known = spread is not None and base_spread is not None
                row[f"{metric}_beyond_spread"] = known and abs(delta) > spread + base_spread
        rows.append(row)
    return rows


def _pm(mean: float, spread: float | None) -> str:
    return f"{mean:6.2f} ± {spread:4.2f}" if spread is not None else f"{mean:6.2f} ±  n/a"


def print_summary(report: dict, log=print) -> None:
    log(f"Table 3 on Multi30k, base {report['base']}, budget {report['budget']}: sacreBLEU on test2016 and "
        "validation perplexity, mean ± sample std over seeds; * marks a difference beyond both spreads")  # fmt: skip
    log(f"{'variant':<8} {'changes':<26} {'seeds':>5} {'params':>11}  {'BLEU':>13} {'ΔBLEU':>7}  "
        f"{'ppl':>13} {'Δppl':>7}")  # fmt: skip
    for row in summarize(report):
        delta = {}
        for metric in ("bleu", "ppl"):
            if f"{metric}_delta" not in row:
                delta[metric] = f"{'':>8}"
            else:
                star = "*" if row[f"{metric}_beyond_spread"] else " "
                delta[metric] = f"{row[f'{metric}_delta']:+7.2f}{star}"
        log(f"{row['variant']:<8} {changed(row['changes']):<26} {row['seeds']:>5} {row['parameters']:>11,}  "
            f"{_pm(row['bleu'], row['bleu_spread'])} {delta['bleu']} {_pm(row['ppl'], row['ppl_spread'])} "
            f"{delta['ppl']}")  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = cli.parser("table3.py", __doc__.splitlines()[0])
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("\n", 2)[2]
    p.add_argument("--out", required=True, help="the sweep's JSON (new, or with --resume one of this tool)")
    p.add_argument("--base", default="multi30k", help=f"the base preset, one of: {', '.join(PRESETS)} "
                   "(default multi30k)")  # fmt: skip
    p.add_argument("--rows", default=",".join(ROWS), help="row letters or variant names, e.g. A,B or C4,E "
                   "(default A,B,C,D,E); the base always runs")  # fmt: skip
    p.add_argument("--seeds", type=cli.positive_int, default=3, help="seeds per variant (default 3)")
    p.add_argument("--epochs", type=cli.positive_int, default=None, help="every run trains this many epochs")
    p.add_argument("--max-steps", type=cli.positive_int, default=None, help="every run stops after so many steps")
    p.add_argument("--limit", type=cli.positive_int, default=None,
                   help="score the first N test2016 sentences (default: the base's test_subset, else all)")  # fmt: skip
    p.add_argument("--jobs", type=cli.positive_int, default=1, help="runs at once, each in its own process")
    p.add_argument("--max-runs", type=cli.positive_int, default=None, help="run at most this many, then stop")
    p.add_argument("--stop-after-minutes", type=cli.positive_float, default=None,
                   help="start no run after this many minutes")  # fmt: skip
    p.add_argument("--work", default=None, help="folder of the run folders (default <out>.runs)")
    p.add_argument("--device", default=None, help="default cuda when available")
    p.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")
    p.add_argument("--resume", action="store_true", help="go on with the sweep in --out")
    p.add_argument("--dry-run", action="store_true", help="print each run's config and parameters, run none")
    p.add_argument("--summary", action="store_true", help="print the mean ± spread of each variant in --out")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    return p


def _main(args: argparse.Namespace) -> int:
    if args.one:  # a process of --jobs: one run, its measurements on the last line
        cfg = TrainConfig.from_dict(json.loads(Path(args.one).read_text()))
        print(json.dumps(train_and_score(cfg, Path(args.out), args.device, args.data, args.limit)))
        return 0
    if args.summary:
        report = json.loads(Path(args.out).read_text(encoding="utf-8"))
        if report.get("format") != FORMAT:
            raise cli.UsageError(f"--out {args.out} is not a sweep of table3.py")
        print_summary(report)
        return 0
    if args.base not in PRESETS:
        raise cli.UsageError(f"--base must be one of {', '.join(PRESETS)}, got {args.base!r}")
    try:
        report = sweep(args)
    except (TrainingInterrupted, Stopped) as err:
        print(f"{err}; {args.out} holds every run finished before: the same command with --resume goes on",
              file=sys.stderr)  # fmt: skip
        return 128 + getattr(signal, err.signal_name or "SIGINT")  # 130 for Ctrl-C, 143 for SIGTERM
    if report:
        print(f"{len(report['runs'])} runs in {args.out}; python tools/table3.py --out {args.out} --summary")
    return 0


def main(argv: list[str] | None = None) -> int:
    return cli.run(_parser(), argv, _main)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
