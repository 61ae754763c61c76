"""Train one preset with several seeds at once, score each on test2016, and write their mean and spread.

    python tools/seeds.py --preset multi30k --seeds 0 1 2 --out runs/seeds            # one GPU, three runs
    python tools/seeds.py --preset multi30k --seeds 0 1 2 --out runs/seeds --cuda-graphs
    python tools/seeds.py --preset multi30k-smoke --seeds 0 1 --out /tmp/s --set max_steps=20 --device cpu

Each seed is its own ``python -m aiayn.train --config OUT/seed-K.json --out OUT/seed-K`` process, all
started together (on one GPU they share it, as a maintainer's three seeds would); then each run is
scored on test2016 with its own decoding settings (``aiayn.runs.scoring.evaluate``: beam, alpha, the last
``average_last`` epochs averaged). ``OUT/seeds.json`` holds every seed's sacreBLEU, training wall time
and steps, their mean, sample standard deviation, minimum and maximum, and the commands. Running it again
resumes unfinished runs (the train command's own resume) and scores them again.

OUT follows the rules of a run folder (``aiayn.runs.folder``): it must be new, empty, or a folder this tool
wrote (its ``manifest.json`` lists ``seeds.json``, ``seed-K.json`` and ``seed-K.log``, beside which
only the ``seed-K`` run folders may lie); every file is written atomically and listed there, no other
file is replaced or deleted, and the tool holds ``OUT/.lock`` while it works, so a second one into the
same OUT fails at once.

Exits 1 when a run fails (its last lines of output are printed) or the disk is full, 2 on a bad
argument or an OUT it did not write; every error ends in one ``error:`` line that names the file.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.checks import resolve_device  # noqa: E402
from aiayn.data.multi30k import SPLITS, load_multi30k  # noqa: E402
from aiayn.files import WrittenFile, disk_full, is_disk_full, sha256_file  # noqa: E402
from aiayn.runs.folder import (  # noqa: E402
    CONFIG,
    LOCK,
    MANIFEST,
    RunFolder,
    RunFolderError,
    shown,
)
from aiayn.runs.presets import PRESETS, get_preset  # noqa: E402
from aiayn.runs.scoring import evaluate  # noqa: E402

SEEDS_JSON = "seeds.json"
OWN_FILES = re.compile(r"seeds\.json|seed-\d+\.(json|log)")  # what the manifest of OUT may list
SEED_RUN = re.compile(r"seed-\d+")  # a seed's run folder (the train command's own)
# a write of this tool killed before its rename: ".seeds.json.k3v_9x1q.tmp"
OWN_TEMPORARY = re.compile(r"\.(seeds\.json|seed-\d+\.(json|log))\.[a-z0-9_]{8}\.tmp")


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


def check_out(folder: RunFolder) -> None:
    """Refuse an OUT this tool did not write: a file, another command's folder, files it did not list.

    Raises ``RunFolderError`` (or, for a damaged manifest, the one ``RunFolder`` raises) naming the file.
    """
    out = folder.path
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise RunFolderError(f"--out {out} is a file or a link; expected a folder for the seeds' runs")
    if not out.exists():
        return
    mine = "give seeds.py a new or empty folder (it writes only into one it made)"
    if not folder.has_manifest():
        names = sorted(p.name for p in out.iterdir() if p.name != LOCK)
        if names:
            raise RunFolderError(f"--out {out} holds files seeds.py did not write ({shown(names)}) "
                                 f"and no {MANIFEST} of its own; {mine}")  # fmt: skip
        return
    manifest = folder.manifest()
    others = [name for name in manifest["files"] if not OWN_FILES.fullmatch(name)]
    if "config_sha256" in manifest or CONFIG in manifest["files"] or others:
        raise RunFolderError(f"--out {out} is a folder of another command ({folder.file(MANIFEST)} lists "
                             f"{shown(others or [CONFIG])}); {mine}")  # fmt: skip
    changed = [
        name for name, entry in manifest["files"].items()
        if not name.endswith(".log") and folder.file(name).is_file()
        and sha256_file(folder.file(name)) != (entry["size"], entry["sha256"])
    ]  # fmt: skip
    if changed:
        raise RunFolderError(f"{folder.file(changed[0])} is not the file seeds.py wrote (its size or SHA-256 "
                             f"differs from {MANIFEST}); it is left alone: move it out of the folder, or use "
                             "another --out")  # fmt: skip
    foreign = [
        name for name in folder.foreign_files()
        if not (SEED_RUN.fullmatch(name) and folder.file(name).is_dir() and not folder.file(name).is_symlink())
        and not (OWN_TEMPORARY.fullmatch(name) and folder.file(name).is_file())
    ]  # fmt: skip
    if foreign:
        raise RunFolderError(f"--out {out} holds files seeds.py did not write ({shown(foreign)}); they are "
                             "left alone: move them out of the folder, or use another --out")  # fmt: skip


def claim(folder: RunFolder) -> None:
    """Under the lock: check OUT again, remove this tool's own temporaries, give a new OUT its manifest."""
    check_out(folder)
    for path in folder.path.iterdir():
        if OWN_TEMPORARY.fullmatch(path.name) and path.is_file() and not path.is_symlink():
            path.unlink()  # a write of seeds.py killed before its rename
    if not folder.has_manifest():
        folder.start(None)


def train_at_once(folder: RunFolder, configs: dict[int, Path], argv: list[str]) -> dict[int, dict]:
    """Start one train command per seed, wait for all; each seed's exit status, wall time and log."""
    out = folder.path
    started, procs = {}, {}
    for seed, config in configs.items():
        name = f"seed-{seed}.log"
        folder.write(name, "")  # listed before the train command writes into it
        log = folder.file(name).open("w")
        command = [sys.executable, "-m", "aiayn.train", "--config", str(config),
                   "--out", str(out / f"seed-{seed}"), "--no-progress", *argv]  # fmt: skip
        started[seed] = time.perf_counter()
        procs[seed] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log, command)
    done = {}
    for seed, (proc, log, command) in procs.items():
        code = proc.wait()
        log.close()
        path = folder.file(f"seed-{seed}.log")
        folder.record(path.name, WrittenFile(path, *sha256_file(path)))  # as the run left it
        done[seed] = {"returncode": code, "train_wall_s": time.perf_counter() - started[seed],
                      "command": " ".join(command[1:])}  # fmt: skip
    return done


def _failure(seed: int, code: int, log: Path) -> str:
    """What went wrong with a seed's run, ending in one ``error:`` line that names its log."""
    lines = log.read_text(errors="replace").splitlines()
    said = [line for line in lines if line.startswith("error: ")]
    if said and lines[-1] == said[-1]:  # the train command said it in one line
        return f"error: seed {seed} failed (exit {code}): {said[-1][len('error: '):]} (output: {log})"
    tail = "\n".join(lines[-15:])
    return f"{tail}\nerror: seed {seed} failed (exit {code}); the last lines of {log} are above"


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser("seeds.py", __doc__.splitlines()[0])
    parser.add_argument("--preset", default="multi30k", help=f"one of: {', '.join(PRESETS)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="default 0 1 2")
    parser.add_argument("--out", required=True, help="a new or empty folder (or one seeds.py wrote) for the "
                        "runs and seeds.json")  # fmt: skip
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change a TrainConfig or model field, e.g. --set max_steps=20 --set N=6")  # fmt: skip
    parser.add_argument("--cuda-graphs", action="store_true", help="passed on to every train command")
    parser.add_argument("--device", default=None, help="cuda, cpu ... (default cuda when available)")
    parser.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")
    return parser


def _seeds(args: argparse.Namespace) -> int:
    if len(set(args.seeds)) != len(args.seeds) or any(s < 0 for s in args.seeds):
        raise cli.UsageError(f"--seeds must be distinct integers >= 0, got {args.seeds}")
    changes = changes_of(args.set)
    try:
        configs = {seed: get_preset(args.preset, **changes, seed=seed) for seed in args.seeds}
    except TypeError as err:  # a value of the wrong type for its field
        raise cli.UsageError(str(err)) from None
    if args.device is not None:
        resolve_device(args.device)  # a device that is not here is refused before any work
    for split in SPLITS:  # every train command and the scoring need them: missing ones fail now
        load_multi30k(split, args.data)
    folder = RunFolder(args.out)
    check_out(folder)  # before the lock, which would write .lock into a folder that is not ours
    with folder.locked():
        claim(folder)
        return _train_and_score(args, folder, changes, configs)


def _train_and_score(args: argparse.Namespace, folder: RunFolder, changes: dict, configs: dict) -> int:
    out = folder.path
    paths = {}
    for seed, cfg in configs.items():
        paths[seed] = folder.file(f"seed-{seed}.json")
        folder.write(paths[seed].name, json.dumps(cfg.to_dict(), indent=1) + "\n")
    passed_on = (["--cuda-graphs"] if args.cuda_graphs else []) + sum(
        (["--" + name, value] for name, value in (("device", args.device), ("data", args.data)) if value), []
    )
    start = time.perf_counter()
    runs = train_at_once(folder, paths, passed_on)
    wall = time.perf_counter() - start
    failed = [seed for seed, run in runs.items() if run["returncode"] != 0]
    for seed in failed:
        print(_failure(seed, runs[seed]["returncode"], out / f"seed-{seed}.log"), file=sys.stderr)
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
    folder.write(SEEDS_JSON, json.dumps(report, indent=1) + "\n")
    spread = "" if report["sacrebleu_stdev"] is None else f", sample stdev {report['sacrebleu_stdev']:.2f}"
    print(f"{len(bleu)} seeds trained at once in {wall:.1f} s: sacreBLEU mean {report['sacrebleu_mean']:.2f}"
          f"{spread} (min {min(bleu):.2f}, max {max(bleu):.2f}); wrote {out / SEEDS_JSON}")  # fmt: skip
    return 0


def _in_one_line(args: argparse.Namespace) -> int:
    """``_seeds``, with a full disk said in one line: the file, and how to go on."""
    try:
        return _seeds(args)
    except OSError as err:
        if not is_disk_full(err):
            raise
        # cli.run says it in one line
        raise disk_full(err, "run the same command again (it resumes the seeds' runs)") from None


def main(argv: list[str] | None = None) -> int:
    return cli.run(_parser(), argv, _in_one_line)


if __name__ == "__main__":
    sys.exit(main())
