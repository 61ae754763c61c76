"""What ``tools/gpu_run.py`` measured, as one record under ``src/aiayn/results``, named after the GPU.

    python tools/gpu_record.py RUN_OUT [RUN_OUT ...] --commit ABC1234 --command "..." [--command "..."] \
        [--steps steps.json] --out src/aiayn/results

Each ``RUN_OUT`` is a folder that ``gpu_run.py --out`` wrote (several when parts ran in processes of
their own, some at the same time). The record, ``gpu_run.<gpu>.json`` (``nvidia h200`` gives ``h200``),
holds for each part done its result as ``gpu_run.json`` has it and, for a training part, its run folder's
validation loss after every epoch, its summary (precision, speed, peak memory, the train command's wall
time) and test2016's 95 % bootstrap interval; which other parts ran at the same time (from their start
and wall times: a time taken beside others is not a time alone); the three seeds' mean and spread when
``multi30k``, ``seed2`` and ``seed3`` are done (``three_seeds``), and when ``rnn``, ``rnn_seed2`` and
``rnn_seed3`` are (``rnn_three_seeds``); and the recurrent baseline against the Transformer of the
same recipe by a paired bootstrap. Each training part's translations are copied beside it as
``gpu_run.<gpu>.<part>.test2016.hyp.en``. ``--steps`` adds a JSON list of ``{"preset", "steps",
"train_s"}`` rows, the presets timed taking turns, each pair of rows a round.

A machine is lent for 15 minutes, so the parts of one record may come from several. ``--add-to
RECORD`` adds the parts of ``RUN_OUT`` to an earlier record of the same GPU, in place: its parts
stay as they are (a part in both is refused), the new ones are listed under ``later`` with their own
commit, commands and date, and the seeds and the paired bootstrap are computed again over all the
parts, the earlier ones' translations read from the files beside the record. Which parts ran at
the same time is worked out within one machine's parts only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.bleu import bootstrap_bleu, paired_bootstrap  # noqa: E402
from aiayn.data import data_dir, load_multi30k  # noqa: E402
from aiayn.files import atomic_write  # noqa: E402

FORMAT = "aiayn-gpu-record/1"
# the parts that train a run folder of their name
TRAINED = ("multi30k", "seed2", "seed3", "rnn", "t4_fp16", "rnn_seed2", "rnn_seed3")
SEEDS = {"three_seeds": ("multi30k", "seed2", "seed3"), "rnn_three_seeds": ("rnn", "rnn_seed2", "rnn_seed3")}


def gpu_name(device_name: str) -> str:
    """``NVIDIA H200`` -> ``h200``, ``NVIDIA H100 80GB HBM3`` -> ``h100``."""
    words = device_name.lower().replace("nvidia", "").split()
    if not words:
        raise cli.UsageError(f"no GPU name in {device_name!r}")
    return words[0]


def read_parts(folders: list[Path]) -> tuple[dict, dict]:
    """Every part done in ``folders``: its entry in ``gpu_run.json``, and the folder it is in."""
    parts, where = {}, {}
    for folder in folders:
        status = json.loads((folder / "gpu_run.json").read_text(encoding="utf-8"))
        if status.get("format") != "aiayn-gpu-run/1":
            raise cli.UsageError(f"{folder} holds no gpu_run.py status file")
        for name, part in status["parts"].items():
            if part.get("status") != "done":
                continue
            if name in parts:
                raise cli.UsageError(f"part {name} is done in {where[name]} and in {folder}: give one of them")
            parts[name], where[name] = part, folder
    if not parts:
        raise cli.UsageError("no part is done in the folders given")
    return parts, where


def _span(part: dict) -> tuple[datetime, datetime]:
    start = datetime.strptime(part["started"], "%Y-%m-%dT%H:%M:%SZ")
    return start, start + timedelta(seconds=part["wall_s"])


def at_once(parts: dict) -> dict[str, list[str]]:
    """For each part, the others that ran while it ran for more than a second (``started`` is to the second)."""
    spans = {name: _span(part) for name, part in parts.items()}

    def overlap(a: tuple, b: tuple) -> float:
        return (min(a[1], b[1]) - max(a[0], b[0])).total_seconds()

    return {name: sorted(other for other in spans if other != name and overlap(spans[name], spans[other]) > 1)
            for name in spans}  # fmt: skip


def val_losses(run: Path) -> list[float]:
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return [round(e["val_loss"], 4) for e in events if e["event"] == "eval" and e.get("epoch_done")]


def translations(run: Path, sentences: int) -> list[str]:
    """The run's test2016 translations of ``sentences`` sentences, as ``evaluate`` wrote them."""
    results = json.loads((run / "results.json").read_text(encoding="utf-8")).values()
    (entry,) = [r for r in results if r["split"] == "test2016" and r["sentences"] == sentences]
    return (run / entry["hypotheses_file"]).read_text(encoding="utf-8").splitlines()


def _earlier(add_to: Path | None, parts: dict, device_name: str) -> tuple[dict | None, dict[str, list[str]]]:
    """The record ``--add-to`` names and its parts' translations, checked against the new parts."""
    if add_to is None:
        return None, {}
    earlier = json.loads(add_to.read_text(encoding="utf-8"))
    if earlier.get("format") != FORMAT:
        raise cli.UsageError(f"--add-to {add_to}: expected a record of gpu_record.py ({FORMAT})")
    if earlier["device_name"] != device_name:
        raise cli.UsageError(f"--add-to {add_to} is of {earlier['device_name']}, these parts ran on {device_name}: "
                             "one record a GPU")  # fmt: skip
    both = sorted(set(parts) & set(earlier["parts"]))
    if both:
        raise cli.UsageError(f"--add-to {add_to} has {', '.join(both)} already: give folders without them")
    hyps = {name: (add_to.parent / entry["hypotheses"]).read_text(encoding="utf-8").splitlines()
            for name, entry in earlier["parts"].items() if "hypotheses" in entry}  # fmt: skip
    return earlier, hyps


def record(folders: list[Path], out: Path, commit: str, commands: list[str], steps: Path | None,
           root: str | None, add_to: Path | None = None) -> Path:  # fmt: skip
    parts, where = read_parts(folders)
    refs = [en for _, en in load_multi30k("test2016", data_dir(root), download=False)]
    named = [p["result"] for p in parts.values() if p["result"].get("device_name")]
    if not named:
        raise cli.UsageError(f"none of the parts done ({', '.join(parts)}) names its GPU: record them with "
                             "a part that does (a training part, turns, or gpu_check since it says it)")  # fmt: skip
    device_name = named[0]["device_name"]
    gpu = gpu_name(device_name)
    earlier, hyps = _earlier(add_to, parts, device_name)
    entries, beside = {}, at_once(parts)
    for name, part in parts.items():
        entry = {"result": part["result"], "started": part["started"], "wall_s": round(part["wall_s"], 1),
                 "at_the_same_time_as": beside[name]}  # fmt: skip
        if name in TRAINED:
            run = where[name] / name
            summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
            hyps[name] = translations(run, part["result"]["test2016"]["sentences"])
            scored = bootstrap_bleu(hyps[name], refs[: len(hyps[name])])
            if round(scored.score, 6) != round(part["result"]["test2016"]["sacrebleu"], 6):
                raise cli.UsageError(f"{run}: the translations do not score the part's sacreBLEU")
            entry.update({
                "preset": json.loads((run / "config.json").read_text(encoding="utf-8"))["name"],
                "amp": summary["amp"], "tokens_per_s": round(summary["tokens_per_s"]),
                "train_command_wall_s": round(summary["wall_s"], 1),  # training alone, without scoring
                "peak_memory_mib": summary["peak_memory_mib"] and round(summary["peak_memory_mib"]),  # None on a CPU
                "val_loss_by_epoch": val_losses(run),
                "test2016_interval": {"sacrebleu": round(scored.score, 2), "low": round(scored.low, 2),
                                      "high": round(scored.high, 2)},
                "hypotheses": f"gpu_run.{gpu}.{name}.test2016.hyp.en",
            })  # fmt: skip
        entries[name] = entry
    torch_version = named[0]["torch"]
    measured_at = min(p["started"] for p in parts.values())[:10]
    if earlier is None:
        report = {"format": FORMAT, "device_name": device_name, "torch": torch_version, "commit": commit,
                  "measured_at": measured_at, "commands": commands, "parts": entries}  # fmt: skip
    else:  # the first machine's commit, commands and date stay at the top; each later one's under "later"
        report = {**earlier, "parts": {**earlier["parts"], **entries}}
        report["later"] = [*earlier.get("later", []), {"parts": list(entries), "torch": torch_version,
                           "commit": commit, "measured_at": measured_at, "commands": commands}]  # fmt: skip
    every = report["parts"]
    for key, names in SEEDS.items():
        if all(name in every for name in names):
            bleu = [every[name]["result"]["test2016"]["sacrebleu"] for name in names]
            report[key] = {"parts": list(names), "sacrebleu": [round(b, 2) for b in bleu],
                           "mean": round(statistics.fmean(bleu), 2),
                           "sample_stdev": round(statistics.stdev(bleu), 2)}  # fmt: skip
    if "rnn" in hyps and "multi30k" in hyps:
        paired = paired_bootstrap(hyps["multi30k"], hyps["rnn"], refs[: len(hyps["rnn"])])
        report["rnn_against_multi30k"] = {
            "difference": round(paired.difference, 2), "low": round(paired.low, 2),
            "high": round(paired.high, 2), "p_value": round(paired.p_value, 4),
        }  # fmt: skip
    if steps is not None:
        rows = json.loads(steps.read_text(encoding="utf-8"))
        rounds = [dict(zip((a["preset"], b["preset"]), (a["train_s"] / a["steps"], b["train_s"] / b["steps"]),
                           strict=True)) for a, b in zip(rows[::2], rows[1::2], strict=True)]  # fmt: skip
        report["step_cost"] = {"rows": rows, "seconds_a_step": [{k: round(v, 5) for k, v in r.items()} for r in rounds],
                               "ratio": [round(r["rnn"] / r["multi30k"], 3) for r in rounds]}  # fmt: skip
    if add_to is not None:
        out = add_to.parent
    out.mkdir(parents=True, exist_ok=True)
    path = add_to or out / f"gpu_run.{gpu}.json"
    atomic_write(path, json.dumps(report, indent=1) + "\n")
    for name, lines in hyps.items():
        atomic_write(out / f"gpu_run.{gpu}.{name}.test2016.hyp.en", "".join(line + "\n" for line in lines))
    return path


def main(argv: list[str] | None = None) -> int:
    p = cli.parser("gpu_record.py", __doc__.splitlines()[0])
    p.add_argument("folders", type=Path, nargs="+", help="folders gpu_run.py wrote (--out)")
    p.add_argument("--out", type=Path, default=REPO / "src/aiayn/results")
    p.add_argument("--commit", required=True, help="the commit the parts ran at")
    p.add_argument("--command", required=True, action="append", help="a command that ran them, as run (each one)")
    p.add_argument("--steps", type=Path, default=None, help="rows of presets timed taking turns")
    p.add_argument("--add-to", type=Path, default=None,
                   help="an earlier record of the same GPU to add these parts to (rewritten in place)")
    p.add_argument("--data", default=None, help="the Multi30k folder (default $AIAYN_DATA)")

    def body(args: argparse.Namespace) -> int:
        print(record(args.folders, args.out, args.commit, args.command, args.steps, args.data, args.add_to))
        return 0

    return cli.run(p, argv, body)


if __name__ == "__main__":
    sys.exit(main())
