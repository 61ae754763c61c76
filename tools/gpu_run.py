"""Fifteen minutes of a GPU, spent in order of value; running it again goes on where it stopped.

    python tools/gpu_run.py --out gpu_run --budget-minutes 15     # on the GPU machine, in one go
    python tools/gpu_run.py --out gpu_run --dry-run --budget-minutes 15   # the plan, what would fit
    python tools/gpu_run.py --out /tmp/smoke --cpu-smoke          # every part at toy size, on the CPU

The parts, most valuable first, with what each is estimated to take on one H100 or H200 (``ESTIMATE_MIN``,
from the H200 run of 2026-11-30 in ``aiayn/results/gpu_run.h200.json``, start-up included):

1. ``gpu_check``: ``tools/gpu_check.py`` (the training loop's promises, timed phases); about 2 minutes
   (80 s alone on an H200 in ``aiayn/results/gpu_check.h200.json``; 231 s beside three runs).
2. ``multi30k``: the ``multi30k`` preset trained to its end with ``--cuda-graphs``, timed, then
   test2016 scored (beam 4, the last 5 epochs averaged); about 1.5 minutes (85 s on an H200).
3. ``one_batch``: part 2's weights decode all of test2016 in one batch (``--batch-size 1000``),
   timed, beside part 2's batches of 128; about half a minute (12 s). Needs part 2.
4. ``rnn``: the recurrent baseline of chapter 1.4 (the ``rnn`` preset: RNNsearch at the ``multi30k``
   model's parameter count, trained as part 2 is but without CUDA graphs), to its end, then test2016;
   about 5 minutes (298 s on an H200 beside three other runs; not timed alone).
5. ``t4_fp16``: the ``multi30k-t4`` preset in float16 with its gradient scaler (``amp="fp16"``, as a
   T4 runs it), to its end, then test2016; about 3.5 minutes (194 s on an H200).
6. ``seed2``, ``seed3``: the ``multi30k`` preset as in part 2 with seeds 1 and 2 (the preset's is
   0), to see the spread of one BLEU; about 1.5 minutes each (150 s each on an H200, two at once
   beside two more runs). ``seed3``'s result adds the mean and sample standard deviation of the three
   seeds' sacreBLEU when parts 2 and ``seed2`` are done. (``tools/seeds.py`` trains seeds at once and
   writes their spread at the end; here each seed is a part of its own, so that one finished is kept
   when the slice ends.)
7. ``turns``: the cost of a training step, timed taking turns in one process: the ``multi30k``
   preset as it trains by default (``plain``), with the CUDA graphs' padding but no graphs
   (``padded``), with ``--cuda-graphs`` (``graphs``), and the ``rnn`` preset's step (``rnn``), each
   for 234 steps (two epochs of ``multi30k``), three rounds of the four in the same order. Each turn's
   figure is the median step of its second epoch (the first holds the warm-up and each shape's graph
   capture); the result holds every turn and, per round, ``plain`` over ``graphs`` (what
   ``--cuda-graphs`` gains), ``padded`` over ``plain`` (what its padding costs) and ``rnn`` over
   ``plain``. It must run alone on the GPU: what decides the ``--cuda-graphs`` default. About 4 minutes.
8. ``rnn_seed2``, ``rnn_seed3``: part 4 with seeds 1 and 2, as part 6 is for ``multi30k``;
   ``rnn_seed3``'s result adds the three seeds' mean and spread when parts 4 and ``rnn_seed2`` are
   done in the same ``--out``. About 5 minutes each.
9. ``table3``: a slice of ``tools/table3.py --base multi30k --epochs 10 --jobs 4`` (Table 3's rows,
   three seeds, four runs at once), for whatever time is left (at least 4 minutes); each slice goes on
   with the sweep, and the part is done when the sweep is.

Parts 1 to 6 have been run (``aiayn/results/gpu_run.h200.json``, written from their folders by
``tools/gpu_record.py``); a machine starts bare, so the next one runs ``--parts gpu_check,turns``
alone on the GPU, then ``rnn_seed2``, ``rnn_seed3`` and ``table3`` in processes of their own, each
with its own ``--out`` (``gpu_record.py --add-to`` adds them to the record). The record says which
parts ran at the same time.

Each part writes into ``--out`` (default ``$OUT`` when set) the moment it has its result: its run
folders, its log (``<part>.log``) and its entry in ``gpu_run.json`` (``"format":
"aiayn-gpu-run/1"``, rewritten atomically): ``"started"`` when it begins, ``"done"`` with its result
and wall time when it ends. The next run of the tool skips the parts done and restarts a part that
was interrupted (its training resumes from the run folder's last checkpoint) or failed.
``--budget-minutes`` starts a part only if its estimate fits in the time left; a part that does not
fit is skipped and a later, shorter one may still run. SIGTERM or Ctrl-C passes the signal on to the
part running (a training saves its checkpoint) and exits with 128 + the signal's number.

On a machine without CUDA the tool refuses to run the parts. ``--cpu-smoke`` runs every part at toy
size on the CPU instead (the smoke preset for a few steps, a few sentences scored, ``gpu_check
--quick`` with one mode and two steps), end to end, so that the script itself is tested anywhere.
Exits 0 when every part asked for is done, 3 when some are left for a later run (skipped,
unfinished or failed: ``gpu_run.json`` says which), 128 + the signal's number when stopped.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.files import atomic_write  # noqa: E402
from aiayn.runs.presets import TrainConfig, get_preset  # noqa: E402

FORMAT = "aiayn-gpu-run/1"
STATUS = "gpu_run.json"
TOOLS = REPO / "tools"
# minutes each part is estimated to take on one H100 or H200 (measured on an H200: the module docstring)
ESTIMATE_MIN = {
    "gpu_check": 2.0, "multi30k": 1.5, "one_batch": 0.5, "rnn": 5.0, "t4_fp16": 3.5, "seed2": 1.5, "seed3": 1.5,
    "turns": 4.0, "rnn_seed2": 5.0, "rnn_seed3": 5.0, "table3": 4.0,
}  # fmt: skip
TABLE3_RUN_MIN = 3.0  # the table3 slice starts no run in its last minutes: a run of 10 epochs, 4 at once
SMOKE_STEPS = 3  # --cpu-smoke: training steps of each run
SMOKE_SENTENCES = 8  # --cpu-smoke: test2016 sentences scored
TURN_STEPS = 234  # a turn of part 7: two epochs of multi30k (117 steps each)
TURN_SKIP = 117  # not counted: the first epoch (warm-up, autotuning, each padded shape's graph capture)
TURN_ROUNDS = 3  # --cpu-smoke: 2, of SMOKE_STEPS steps each, the first not counted


@dataclass(frozen=True)
class Part:
    number: int  # as the module docstring numbers them
    name: str
    needs: str | None
    run: Callable[[Context], dict]


class Context:
    """Where a part writes, on which device, at which size, and how its commands are run."""

    def __init__(self, out: Path, smoke: bool, data: str | None, left_min: Callable[[], float | None]):
        self.out, self.smoke, self.data, self.left_min = out, smoke, data, left_min
        self.device = "cpu" if smoke else "cuda"
        self.child: subprocess.Popen | None = None
        self.log: Path | None = None
        self.status: Status | None = None

    def command(self, argv: list[str]) -> subprocess.CompletedProcess:
        """Run ``argv`` with this Python, its output appended to the part's log; the last line returned."""
        paths = [str(REPO / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            self.child = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=log, text=True,
                                          env=env)  # fmt: skip
            out, _ = self.child.communicate()
            log.write(out)
        code, self.child = self.child.returncode, None
        return subprocess.CompletedProcess(argv, code, out, "")

    def train_and_score(self, name: str, cfg: TrainConfig, smoke: str = "multi30k-smoke") -> dict:
        """Train ``cfg`` into ``out/name`` (resuming it if it was stopped) and score test2016, in one process."""
        if self.smoke:  # the ``smoke`` preset with the part's seed, a few steps; float32, as evaluate
            # decodes on a CPU (it refuses float16 there; gpu_check trains with the scaler on a CPU)
            cfg = get_preset(smoke, seed=cfg.seed, max_steps=SMOKE_STEPS)
        spec = self.out / f"{name}.config.json"
        atomic_write(spec, json.dumps(cfg.to_dict(), indent=1) + "\n")
        argv = [str(TOOLS / "table3.py"), "--one", str(spec), "--out", str(self.out / name),
                "--device", self.device, *self.data_args()]  # fmt: skip
        if self.smoke:
            argv += ["--limit", str(SMOKE_SENTENCES)]
        done = self.command(argv)
        if done.returncode != 0:
            raise PartFailed(f"training or scoring {name} failed (exit status {done.returncode}); see its log")
        return json.loads(done.stdout.splitlines()[-1])

    def data_args(self) -> list[str]:
        return ["--data", self.data] if self.data else []


class PartFailed(Exception):
    """A part's command failed; the part is tried again by the next run."""


def _multi30k(seed: int = 0) -> TrainConfig:
    from aiayn.train import with_cuda_graphs

    return with_cuda_graphs(get_preset("multi30k", seed=seed))


def part_gpu_check(ctx: Context) -> dict:
    report = ctx.out / "gpu_check.json"
    if ctx.smoke:  # one mode, two steps: the script's path, not the promises' (tests/test_gpu_check.py has those)
        argv = [__file__, "--toy-gpu-check", "--device", "cpu", "--quick", "--out", str(report)]
    else:
        argv = [str(TOOLS / "gpu_check.py"), "--out", str(report)]
    start = time.perf_counter()
    done = ctx.command([*argv, *ctx.data_args()])
    if done.returncode not in (0, 1) or not report.is_file():  # 1: a promise failed, which is a result
        raise PartFailed(f"gpu_check.py stopped with exit status {done.returncode}; see its log")
    checked = json.loads(report.read_text(encoding="utf-8"))
    return {"passed": checked.get("passed"), "report": report.name, "device_name": checked.get("device_name"),
            "torch": checked.get("torch"), "wall_s": time.perf_counter() - start}  # fmt: skip


def part_multi30k(ctx: Context) -> dict:
    return ctx.train_and_score("multi30k", _multi30k())


def part_one_batch(ctx: Context) -> dict:
    """Part 2's weights: all of test2016 in one batch, beside its batches of 128."""
    sentences = SMOKE_SENTENCES if ctx.smoke else 1000
    out = ctx.out / "one_batch"
    argv = ["-m", "aiayn.evaluate", str(ctx.out / "multi30k"), "--batch-size", str(sentences), "--out", str(out),
            "--device", ctx.device, "--no-progress", *ctx.data_args()]  # fmt: skip
    argv += ["--limit", str(sentences)] if ctx.smoke else ["--all"]
    start = time.perf_counter()
    done = ctx.command(argv)
    if done.returncode != 0:
        raise PartFailed(f"evaluate stopped with exit status {done.returncode}; see its log")
    (one,) = json.loads((out / "results.json").read_text(encoding="utf-8")).values()  # a new folder: one entry
    batched = ctx.status.part("multi30k")["result"]["test2016"]
    return {
        "sentences": one["sentences"], "decode_s": one["decode_s"], "sacrebleu": one["sacrebleu"],
        "batches_of_128_decode_s": batched["decode_s"], "batches_of_128_sacrebleu": batched["sacrebleu"],
        "wall_s": time.perf_counter() - start,
    }  # fmt: skip


def part_rnn(ctx: Context) -> dict:
    return ctx.train_and_score("rnn", get_preset("rnn"), smoke="rnn-smoke")


def part_t4_fp16(ctx: Context) -> dict:
    return ctx.train_and_score("t4_fp16", get_preset("multi30k-t4", amp="fp16"))


def part_seed(seed: int, family: str = "multi30k") -> Callable[[Context], dict]:
    """Part 2's run (or part 4's: ``family="rnn"``) with another seed; the last one adds the mean and
    spread of all three."""
    prefix = "" if family == "multi30k" else f"{family}_"

    def run(ctx: Context) -> dict:
        if family == "multi30k":
            result = ctx.train_and_score(f"seed{seed + 1}", _multi30k(seed))
        else:
            result = ctx.train_and_score(f"{prefix}seed{seed + 1}", get_preset(family, seed=seed), smoke="rnn-smoke")
        earlier = [ctx.status.part(name).get("result") for name in (family, f"{prefix}seed2")]
        if seed == 2 and all(earlier):
            bleu = [r["test2016"]["sacrebleu"] for r in (*earlier, result)]
            result["three_seeds"] = {"sacrebleu": bleu, "mean": statistics.fmean(bleu),
                                     "sample_stdev": statistics.stdev(bleu)}  # fmt: skip
        return result

    return run


def contenders(smoke: bool) -> dict[str, TrainConfig]:
    """Part 7's contenders, in the order of their turns (CUDA graphs need CUDA: none in the smoke run)."""
    from aiayn.train import with_cuda_graphs

    base, rnn = ("multi30k-smoke", "rnn-smoke") if smoke else ("multi30k", "rnn")
    steps = SMOKE_STEPS if smoke else TURN_STEPS
    plain = get_preset(base, max_steps=steps)
    graphs = with_cuda_graphs(plain)
    both = {"plain": plain, "padded": graphs.with_changes(cuda_graphs=False)}
    if not smoke:
        both["graphs"] = graphs
    return {**both, "rnn": get_preset(rnn, max_steps=steps)}


def part_turns(ctx: Context) -> dict:
    """The contenders' steps timed taking turns, in a process of its own (``--turns``)."""
    import shutil

    work = ctx.out / "turns"
    shutil.rmtree(work, ignore_errors=True)  # a stopped part takes all its turns again
    argv = [__file__, "--turns", "--out", str(work), "--device", ctx.device, *ctx.data_args()]
    done = ctx.command(argv + (["--smoke"] if ctx.smoke else []))
    if done.returncode != 0:
        raise PartFailed(f"the turns stopped with exit status {done.returncode}; see its log")
    report = json.loads((work / "turns.json").read_text(encoding="utf-8"))
    return {**report, "ratios": turn_ratios(report["rows"])}


def turn_ratios(rows: list[dict]) -> dict[str, list[float]]:
    """Per round: ``plain`` over ``graphs``, ``padded`` over ``plain`` and ``rnn`` over ``plain`` (median steps)."""
    rounds: dict[int, dict[str, float]] = {}
    for row in rows:
        rounds.setdefault(row["round"], {})[row["contender"]] = row["median_step_ms"]
    pairs = {"graphs_gain": ("plain", "graphs"), "padding_cost": ("padded", "plain"),
             "rnn_over_plain": ("rnn", "plain")}  # fmt: skip
    return {name: [round(r[a] / r[b], 3) for r in rounds.values() if a in r and b in r]
            for name, (a, b) in pairs.items() if any(a in r and b in r for r in rounds.values())}  # fmt: skip


def _turns(argv: list[str]) -> int:
    """Part 7's process: each round, each contender trained for its steps; ``turns.json`` after each turn."""
    import shutil

    from aiayn.runs.recipes import train

    p = argparse.ArgumentParser(prog="gpu_run.py --turns")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", required=True)
    p.add_argument("--data", default=None)
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    rounds, skip = (2, 1) if args.smoke else (TURN_ROUNDS, TURN_SKIP)
    report: dict = {"rounds": rounds, "steps_not_counted": skip, "rows": []}
    for number in range(1, rounds + 1):
        for name, cfg in contenders(args.smoke).items():
            seconds: list[float] = []

            def hook(state, seconds=seconds) -> None:
                if state.event == "step":
                    seconds.append(state.seconds)

            folder = args.out / f"round{number}-{name}"
            summary = train(cfg, folder, root=args.data, device=args.device, progress=False, hook=hook)
            counted = seconds[skip:]
            report.update(device_name=summary.device_name, torch=summary.torch)
            report["rows"].append({
                "round": number, "contender": name, "preset": summary.preset, "cuda_graphs": cfg.cuda_graphs,
                "pad_to": cfg.pad_to, "steps": summary.steps, "train_s": round(summary.train_s, 3),
                "counted_steps": len(counted), "median_step_ms": round(1000 * statistics.median(counted), 3),
                "mean_step_ms": round(1000 * statistics.fmean(counted), 3),
            })  # fmt: skip
            atomic_write(args.out / "turns.json", json.dumps(report, indent=1) + "\n")
            shutil.rmtree(folder)  # its checkpoints: only the times are kept
    return 0


def part_table3(ctx: Context) -> dict:
    out = ctx.out / "table3.json"
    argv = [str(TOOLS / "table3.py"), "--out", str(out), "--resume", "--device", ctx.device, *ctx.data_args()]
    if ctx.smoke:
        argv += ["--base", "multi30k-smoke", "--rows", "E", "--seeds", "1", "--max-steps", str(SMOKE_STEPS),
                 "--limit", str(SMOKE_SENTENCES)]  # fmt: skip
    else:
        argv += ["--base", "multi30k", "--epochs", "10", "--jobs", "4"]
    left = ctx.left_min()
    if left is not None:
        argv += ["--stop-after-minutes", str(max(left - TABLE3_RUN_MIN, 0.1))]
    start = time.perf_counter()
    done = ctx.command(argv)
    if done.returncode != 0:
        raise PartFailed(f"table3.py stopped with exit status {done.returncode}; see its log")
    report = json.loads(out.read_text(encoding="utf-8"))
    runs, planned = len(report["runs"]), _planned(report, ctx.smoke)
    result = {"runs": runs, "planned": planned, "wall_s": time.perf_counter() - start}
    if runs < planned:
        raise Unfinished(result)
    return result


def _planned(report: dict, smoke: bool) -> int:
    """How many runs the sweep in ``report`` has in all (``tools/table3.py``'s plan)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("table3", TOOLS / "table3.py")
    table3 = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = table3  # its dataclass looks its module up there
    spec.loader.exec_module(table3)
    rows, seeds = ("E", 1) if smoke else (",".join(table3.ROWS), 3)
    return len(table3.plan(get_preset(report["base"]), table3.variants_of(rows), seeds, report["budget"]))


class Unfinished(Exception):
    """A part that did some of its work (the table3 slice): recorded, and done by a later run."""

    def __init__(self, result: dict):
        super().__init__(f"{result['runs']} of {result['planned']} runs")
        self.result = result


PARTS = [
    Part(1, "gpu_check", None, part_gpu_check),
    Part(2, "multi30k", None, part_multi30k),
    Part(3, "one_batch", "multi30k", part_one_batch),
    Part(4, "rnn", None, part_rnn),
    Part(5, "t4_fp16", None, part_t4_fp16),
    Part(6, "seed2", None, part_seed(1)),
    Part(6, "seed3", None, part_seed(2)),
    Part(7, "turns", None, part_turns),
    Part(8, "rnn_seed2", None, part_seed(1, "rnn")),
    Part(8, "rnn_seed3", None, part_seed(2, "rnn")),
    Part(9, "table3", None, part_table3),
]


class Status:
    """``gpu_run.json``: each part's state, rewritten atomically on every change."""

    def __init__(self, out: Path):
        self.path = out / STATUS
        self.report = {"format": FORMAT, "parts": {}}
        if self.path.exists():
            report = json.loads(self.path.read_text(encoding="utf-8"))
            if report.get("format") != FORMAT:
                raise cli.UsageError(f"{self.path} is not a status file of gpu_run.py; give another --out")
            self.report = report

    def part(self, name: str) -> dict:
        return self.report["parts"].get(name, {})

    def set(self, name: str, **entry) -> None:
        self.report["parts"][name] = {**self.part(name), **entry}
        atomic_write(self.path, json.dumps(self.report, indent=1) + "\n")


class Stopped(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _select(parts: str | None) -> list[Part]:
    if parts is None:
        return PARTS
    wanted = {item.strip() for item in parts.split(",") if item.strip()}
    known = {p.name for p in PARTS} | {str(p.number) for p in PARTS}
    if wanted - known:
        raise cli.UsageError(f"--parts: unknown {sorted(wanted - known)}; the parts are "
                             f"{', '.join(f'{p.number} {p.name}' for p in PARTS)}")  # fmt: skip
    return [p for p in PARTS if p.name in wanted or str(p.number) in wanted]


def run_parts(args: argparse.Namespace, log=print) -> dict:
    out = Path(args.out or os.environ.get("OUT") or "")
    if not str(out) or str(out) == ".":
        raise cli.UsageError("--out is required where $OUT is not set: the folder to write the results into")
    parts = _select(args.parts)
    if args.dry_run:
        total = 0.0
        for part in parts:
            total += ESTIMATE_MIN[part.name]
            fits = "" if args.budget_minutes is None else (
                "  fits" if total <= args.budget_minutes else "  beyond the budget")  # fmt: skip
            log(f"{part.number}. {part.name:<10} about {ESTIMATE_MIN[part.name]:g} min (total {total:g}){fits}")
        return {}
    if not args.cpu_smoke:
        import torch

        if not torch.cuda.is_available():
            raise cli.UsageError("torch sees no CUDA GPU here, and every part is meant for one; "
                                 "--cpu-smoke runs them at toy size on the CPU")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    status = Status(out)
    start = time.perf_counter()

    def left_min() -> float | None:
        return None if args.budget_minutes is None else args.budget_minutes - (time.perf_counter() - start) / 60

    ctx = Context(out, args.cpu_smoke, args.data, left_min)
    ctx.status = status

    def stop(signum, frame):
        if ctx.child is not None and ctx.child.poll() is None:
            if signum != signal.SIGINT:  # Ctrl-C reaches the whole process group by itself
                ctx.child.send_signal(signum)  # a training saves its checkpoint
            ctx.child.wait()
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for part in parts:
            state = status.part(part.name).get("status")
            if state == "done":
                log(f"{part.name}: done in an earlier run, skipped")
                continue
            if part.needs and status.part(part.needs).get("status") != "done":
                log(f"{part.name}: skipped, it needs {part.needs}, not done")
                continue
            left = left_min()
            if left is not None and ESTIMATE_MIN[part.name] > left:
                log(f"{part.name}: skipped, about {ESTIMATE_MIN[part.name]:g} min and {left:.1f} left")
                continue
            again = f" (again: it was {state})" if state else ""
            log(f"{part.name}: starting{again}")
            ctx.log = out / f"{part.name}.log"
            status.set(part.name, status="started", started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            began = time.perf_counter()
            try:
                result = part.run(ctx)
            except Unfinished as err:
                status.set(part.name, status="unfinished", result=err.result, wall_s=time.perf_counter() - began)
                log(f"{part.name}: {err}, the next run goes on")
                continue
            except PartFailed as err:
                status.set(part.name, status="failed", error=str(err), wall_s=time.perf_counter() - began)
                log(f"{part.name}: FAILED: {err}")
                continue
            status.set(part.name, status="done", result=result, wall_s=time.perf_counter() - began)
            log(f"{part.name}: done in {time.perf_counter() - began:.0f} s")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status.report


def _toy_gpu_check(argv: list[str]) -> int:
    """``gpu_check.py`` at toy size: one CPU mode, two steps of the smoke preset (for ``--cpu-smoke``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", TOOLS / "gpu_check.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tool.MODES["cpu"] = tool.MODES["cpu"][:1]
    tool.get_preset = lambda name, **changes: get_preset(name, max_steps=2, val_subset=16, **changes)
    return tool.main(argv)


def _parser() -> argparse.ArgumentParser:
    p = cli.parser("gpu_run.py", __doc__.splitlines()[0])
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = __doc__.split("\n", 2)[2]
    p.add_argument("--out", default=None, help="the folder of the results (default $OUT); "
                   "a folder of an earlier run goes on")  # fmt: skip
    p.add_argument("--budget-minutes", type=cli.positive_float, default=None,
                   help="start only the parts whose estimate fits in the time left")  # fmt: skip
    p.add_argument("--parts", default=None, help="only these parts, by name or number, e.g. 1,2,t4_fp16")
    p.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")
    p.add_argument("--dry-run", action="store_true", help="print the parts and their estimates")
    p.add_argument("--cpu-smoke", action="store_true", help="every part at toy size on the CPU")
    return p


def _main(args: argparse.Namespace) -> int:
    try:
        report = run_parts(args)
    except Stopped as err:
        print(f"stopped by {err}; the same command goes on where it stopped", file=sys.stderr)
        return 128 + err.signum
    if not report:
        return 0
    states = {name: part["status"] for name, part in report["parts"].items()}
    print(f"parts: {states}")
    return 0 if all(states.get(p.name) == "done" for p in _select(args.parts)) else 3


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--toy-gpu-check"]:
        return _toy_gpu_check(argv[1:])
    if argv[:1] == ["--turns"]:
        return _turns(argv[1:])
    return cli.run(_parser(), argv, _main)


if __name__ == "__main__":
    sys.exit(main())
