"""Train one preset with several seeds at once, score each on test2016, and write their mean and spread.

    python tools/seeds.py --preset multi30k --seeds 0 1 2 --out runs/seeds            # one GPU, three runs
    python tools/seeds.py --preset multi30k --seeds 0 1 2 --out runs/seeds --cuda-graphs
    python tools/seeds.py --preset multi30k-smoke --seeds 0 1 --out /tmp/s --set max_steps=20 --device cpu

Each seed is its own ``python -m aiayn.train --config OUT/seed-K.json --out OUT/seed-K`` process, all
started together (on one GPU they share it, as a maintainer's three seeds would); then each run is
scored on test2016 with its own decoding settings (``aiayn.scoring.evaluate``: beam, alpha, the last
``average_last`` epochs averaged). ``OUT/seeds.json`` holds every seed's sacreBLEU, training wall time
and steps, their mean, sample standard deviation, minimum and maximum, and the commands. Running it again
resumes unfinished runs (the train command's own resume) and scores them again.

Exits 1 when a run fails (its last lines of output are printed), 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn.presets import PRESETS, get_preset  # noqa: E402
from aiayn.scoring import evaluate  # noqa: E402


def _value(text: str):
    """A ``--set`` value: JSON when it parses (numbers, true, null), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def changes_of(pairs: list[str]) -> dict:
    """``["max_steps=20", "N=6"]`` as ``{"max_steps": 20, "N": 6}``; a pair without ``=`` is refused."""
    changes = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--set expects NAME=VALUE, e.g. max_steps=20, got {pair!r}")
        changes[name] = _value(text)
    return changes


def train_at_once(configs: dict[int, Path], out: Path, argv: list[str]) -> dict[int, dict]:
    """Start one train command per seed, wait for all; each seed's exit status, wall time and log."""
    started, procs = {}, {}
    for seed, config in configs.items():
        log = (out / f"seed-{seed}.log").open("w")
        command = [sys.executable, "-m", "aiayn.train", "--config", str(config),
                   "--out", str(out / f"seed-{seed}"), "--no-progress", *argv]  # fmt: skip
        started[seed] = time.perf_counter()
        procs[seed] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log, command)
    done = {}
    for seed, (proc, log, command) in procs.items():
        code = proc.wait()
        log.close()
        done[seed] = {"returncode": code, "train_wall_s": time.perf_counter() - started[seed],
                      "command": " ".join(command[1:])}  # fmt: skip
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="multi30k", help=f"one of: {', '.join(PRESETS)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument("--out", required=True, help="a folder for the runs and seeds.json")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change a TrainConfig or model field, e.g. --set max_steps=20 --set N=6")  # fmt: skip
    parser.add_argument("--cuda-graphs", action="store_true", help="passed on to every train command")
    parser.add_argument("--device", default=None, help="cuda, cpu ... (default cuda when available)")
    parser.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")
    args = parser.parse_args(argv)
    if len(set(args.seeds)) != len(args.seeds) or any(s < 0 for s in args.seeds):
        print(f"error: --seeds must be distinct integers >= 0, got {args.seeds}", file=sys.stderr)
        return 2
    try:
        changes = changes_of(args.set)
        configs = {seed: get_preset(args.preset, **changes, seed=seed) for seed in args.seeds}
    except (TypeError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for seed, cfg in configs.items():
        paths[seed] = out / f"seed-{seed}.json"
        paths[seed].write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    passed_on = (["--cuda-graphs"] if args.cuda_graphs else []) + sum(
        (["--" + name, value] for name, value in (("device", args.device), ("data", args.data)) if value), []
    )
    start = time.perf_counter()
    runs = train_at_once(paths, out, passed_on)
    wall = time.perf_counter() - start
    failed = [seed for seed, run in runs.items() if run["returncode"] != 0]
    for seed in failed:
        tail = (out / f"seed-{seed}.log").read_text().splitlines()[-15:]
        print(f"seed {seed} failed (exit {runs[seed]['returncode']}):\n" + "\n".join(tail), file=sys.stderr)
    if failed:
        return 1
    for seed, run in runs.items():
        summary = json.loads((out / f"seed-{seed}" / "summary.json").read_text())
        result = evaluate(out / f"seed-{seed}", "test2016", device=args.device, root=args.data, progress=False)
        run.update(steps=summary["steps"], device_name=summary["device_name"], sacrebleu=result.sacrebleu,
                   decode_s=result.decode_s, checkpoints=result.checkpoints)  # fmt: skip
        print(f"seed {seed}: {summary['steps']} steps, trained in {run['train_wall_s']:.1f} s, "
              f"test2016 sacreBLEU {result.sacrebleu:.2f}")  # fmt: skip
    bleu = [run["sacrebleu"] for run in runs.values()]
    report = {
        "preset": args.preset, "changes": changes, "cuda_graphs": args.cuda_graphs,
        "seeds": {str(seed): run for seed, run in runs.items()},
        "sacrebleu_mean": statistics.fmean(bleu),
        "sacrebleu_stdev": statistics.stdev(bleu) if len(bleu) > 1 else None,
        "sacrebleu_min": min(bleu), "sacrebleu_max": max(bleu),
        "train_wall_s": wall, "torch": torch.__version__,
    }  # fmt: skip
    (out / "seeds.json").write_text(json.dumps(report, indent=1) + "\n")
    spread = "" if report["sacrebleu_stdev"] is None else f", sample stdev {report['sacrebleu_stdev']:.2f}"
    print(f"{len(bleu)} seeds trained at once in {wall:.1f} s: sacreBLEU mean {report['sacrebleu_mean']:.2f}"
          f"{spread} (min {min(bleu):.2f}, max {max(bleu):.2f}); wrote {out / 'seeds.json'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
