"""A reader's laptop hour: what two CPU cores train in 60 minutes, measured and written to ``laptop.json``.

    python tools/laptop_hour.py sizes --out runs/sizes.json   # target tokens/s of candidate sizes
    python tools/laptop_hour.py train --out runs/laptop       # the hour: the train command, timed
    python tools/laptop_hour.py train --out runs/laptop-1 --seed 1   # the same hour with other seeds
    python tools/laptop_hour.py train --out runs/laptop-2 --seed 2
    python tools/laptop_hour.py record runs/laptop --sizes runs/sizes.json \
        --seeds runs/laptop-1 runs/laptop-2 --out src/aiayn/results

    # the recurrent model the paper replaced, in the same time (chapter 1.4)
    python tools/laptop_hour.py train --preset rnn-laptop --out runs/rnn-laptop
    python tools/laptop_hour.py sizes --out runs/sizes-rnn-day.json     # the machine's speed that day
    python tools/laptop_hour.py speed runs/rnn-laptop --out runs/speed.json
    python tools/laptop_hour.py record runs/rnn-laptop --sizes runs/sizes-rnn-day.json \
        --speed runs/speed.json --out src/aiayn/results

``sizes`` times training steps of a few model sizes on 1 and 2 threads (the same synthetic batches
of 2,048 tokens, sentences of 7 to 14 pieces, ``--seconds`` each, in rounds that alternate the
sizes) and prints each one's target tokens per second: the ``laptop`` preset is the largest size
whose hour still holds about 14 epochs. ``train`` runs ``python -m aiayn.train --preset laptop --out
OUT --device cpu --no-progress`` and writes ``OUT.hour.json`` beside the run folder (never inside
it: the folder belongs to the train command): the command, its wall time, its exit status and the
machine's load average every 30 s. Stopped (Ctrl-C, a lost session), the same command resumes the
run and adds the parts' times; a finished hour is refused, so that no hour is timed twice. ``--seed K``
trains the preset with seed K (weights, dropout, batch order), its config written beside the run folder.
``record`` scores the run on all of test2016 (``aiayn.evaluate``'s own scoring: beam 4, alpha 0.6,
the last 3 epochs averaged, on the CPU) and writes ``laptop.json`` (the config, the hour, the
validation curve, cased sacreBLEU with its 95 % interval, the same translations lower-cased, the
published model's figures beside them and a paired bootstrap against it, six examples) and
``laptop.test2016.hyp.en`` into ``--out``; ``--seeds`` scores further hours of the same config but
for the seed the same way, adds their scores and last validation loss (``seeds``) and writes their
translations beside it (``laptop-seedK.test2016.hyp.en``).

``--preset rnn-laptop`` does the same for the recurrent baseline (``aiayn.baselines.rnn``) trained by the
laptop's recipe for 6 epochs; ``record`` then writes ``rnn-laptop.json`` and adds a paired bootstrap
against the laptop Transformer's translations. Two hours timed on different days do not compare (a
shared machine's speed changes from day to day: ``sizes`` run on each hour's day and recorded with it
shows by how much), so ``speed`` times training steps of the two models on the same Multi30k batches
(the run's tokenizer, a sample of an epoch's batches from short to long), taking turns, and gives the
ratio of each round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from aiayn import cli  # noqa: E402
from aiayn.bleu import bootstrap_bleu, corpus_bleu, paired_bootstrap  # noqa: E402
from aiayn.data.multi30k import load_multi30k  # noqa: E402
from aiayn.files import atomic_write  # noqa: E402
from aiayn.runs.presets import get_preset  # noqa: E402
from aiayn.runs.scoring import evaluate  # noqa: E402

# Candidate sizes: (vocabulary, d_model, d_ff, heads, layers). The last is multi30k-t4's model.
SIZES = {
    "width 128, 2 layers, 2,000 pieces": (2000, 128, 512, 4, 2),
    "width 192, 3 layers, 4,000 pieces": (4000, 192, 768, 4, 3),
    "width 256, 2 layers, 4,000 pieces": (4000, 256, 1024, 4, 2),
    "width 256, 3 layers, 8,000 pieces": (8000, 256, 1024, 4, 3),
}
EXAMPLE_LINES = (4, 6, 8, 14, 20, 26)  # test2016 lines shown on chapter 11's page
HOURS = ("laptop", "rnn-laptop")  # the presets timed: the Transformer and the recurrent model it replaced


def measure_sizes(seconds: float, rounds: int, sizes: dict = SIZES) -> list[dict]:
    """Target tokens per second of a training step of each of ``sizes`` on 1 and 2 threads."""
    from aiayn.bench.run import synthetic_batches
    from aiayn.loss import LabelSmoothingLoss
    from aiayn.model import Transformer, TransformerConfig, count_parameters
    from aiayn.training.step import train_step

    setups = {}
    for name, (vocab, d, d_ff, h, n) in sizes.items():
        torch.manual_seed(0)
        config = TransformerConfig(vocab, vocab, d_model=d, d_ff=d_ff, h=h, N=n, dropout=0.1,
                                   share_embeddings=True, tie_output=True, pad_id=0)  # fmt: skip
        model = Transformer(config)
        adam = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
        batches = synthetic_batches(20, 2048, 14, vocab)
        setups[name] = (model, adam, batches, count_parameters(model))
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=0)
    speeds: dict[tuple[str, int], list[float]] = {}
    for _ in range(rounds):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, (model, adam, batches, _) in setups.items():
                for batch in batches[:2]:  # warm up at this thread count
                    train_step(model, batch, adam, loss_fn)
                tokens, start, i = 0, time.perf_counter(), 0
                while time.perf_counter() - start < seconds:
                    batch = batches[i % len(batches)]
                    train_step(model, batch, adam, loss_fn)
                    tokens, i = tokens + batch.n_tokens, i + 1
                speed = tokens / (time.perf_counter() - start)
                speeds.setdefault((name, threads), []).append(speed)
    return [
        {"size": name, "threads": threads, "parameters": setups[name][3],
         "tokens_per_s": round(statistics.median(v)), "rounds": [round(s) for s in v]}
        for (name, threads), v in speeds.items()
    ]  # fmt: skip


def measure_speed(run: Path, data: str | None, sample: int = 30, rounds: int = 3, threads: int = 2) -> dict:
    """Seconds a training step of the ``laptop`` and ``rnn-laptop`` models takes on the same batches.

    The batches are ``sample`` of the laptop recipe's first epoch, evenly spaced in the order of their
    target length (so that their sum stands for the epoch's), built as the train command builds them
    with ``run``'s tokenizer; the models too (the Transformer with its fast paths). After a warm-up
    pass, the two models take turns, a pass over the sample each, ``rounds`` times, on ``threads``
    threads; each round gives the ratio of the two passes.
    """
    from aiayn.data.tokenizer import Tokenizer
    from aiayn.engine.switch import set_fast
    from aiayn.loss import LabelSmoothingLoss
    from aiayn.model import count_parameters
    from aiayn.runs.presets import build_model
    from aiayn.runs.recipes import prepare_data
    from aiayn.schedule import make_optimizer
    from aiayn.training.batches import EpochBatches
    from aiayn.training.step import train_step

    recipe = get_preset("laptop")
    prepared = prepare_data(recipe, data, tokenizer=Tokenizer(run / "tokenizer.model"))
    epoch = sorted(EpochBatches(prepared.train_ids, recipe.max_tokens, seed=recipe.seed)(0),
                   key=lambda b: (b.tgt_out.shape[1], b.src.shape[1]))  # fmt: skip
    if not 0 < sample <= len(epoch):
        raise ValueError(f"sample must be 1..{len(epoch)} (the epoch's batches), got {sample}")
    batches = [epoch[i * len(epoch) // sample] for i in range(sample)]
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        models = {}
        for name in HOURS:  # as the train command builds them (runs.recipes)
            models[name] = build_model(get_preset(name), prepared.tokenizer).train()
            if get_preset(name).model.fused_attention:
                set_fast(models[name])
        optimizers = {name: make_optimizer(model) for name, model in models.items()}
        loss_fn = LabelSmoothingLoss(recipe.label_smoothing, ignore_index=prepared.tokenizer.pad_id)
        load_before = float(Path("/proc/loadavg").read_text().split()[0])
        times: dict[str, list[list[float]]] = {name: [] for name in HOURS}
        for turn in range(rounds + 1):  # the first pass of each warms up and is not kept
            for name, model in models.items():
                seconds = []
                for batch in batches:
                    start = time.perf_counter()
                    train_step(model, batch, optimizers[name], loss_fn, clip_norm=recipe.clip_norm)
                    seconds.append(time.perf_counter() - start)
                if turn:
                    times[name].append(seconds)
        load_after = float(Path("/proc/loadavg").read_text().split()[0])
    finally:
        torch.set_num_threads(previous)
    transformer, rnn = HOURS
    ratios = [sum(r) / sum(t) for t, r in zip(times[transformer], times[rnn], strict=True)]
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs",
        "torch": torch.__version__, "threads": threads, "measured_at": time.strftime("%Y-%m-%d"),
        "load_average": {"before": load_before, "after": load_after},
        "epoch_batches": len(epoch), "parameters": {n: count_parameters(m) for n, m in models.items()},
        "batches": [{"rows": b.src.shape[0], "source_len": b.src.shape[1], "target_len": b.tgt_out.shape[1],
                     "target_tokens": b.n_tokens,
                     **{f"{n}_s": round(statistics.median(r[i] for r in times[n]), 4) for n in HOURS}}
                    for i, b in enumerate(batches)],
        "rounds": [{f"{n}_s": round(sum(times[n][k]), 2) for n in HOURS} | {"ratio": round(ratios[k], 3)}
                   for k in range(rounds)],
        "ratio": {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
                  "max": round(max(ratios), 3)},
    }  # fmt: skip


def train_hour(out: Path, preset: tuple[str, str] = ("--preset", "laptop")) -> dict:
    """Run the train command on ``out``, timing it and sampling the load average every 30 s.

    ``preset``: the train command's ``--preset laptop`` (the tests give a tiny ``--config``).
    """
    command = ["python", "-m", "aiayn.train", *preset, "--out", str(out), "--device", "cpu", "--no-progress"]
    loads: list[tuple[float, float]] = []
    done = threading.Event()
    start = time.time()

    def sample() -> None:
        while not done.wait(30.0):
            one_minute = float(Path("/proc/loadavg").read_text().split()[0])
            loads.append((round(time.time() - start), one_minute))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = subprocess.run([sys.executable, *command[1:]], check=False).returncode
    done.set()
    return {"command": " ".join(command), "rc": rc, "wall_s": round(time.time() - start, 1),
            "load_average": loads, "finished_at": time.strftime("%Y-%m-%d")}  # fmt: skip


def seed_config(out: Path, seed: int, preset: str = "laptop") -> Path:
    """``preset`` with another ``seed``, written beside the run folder ``out`` (the train command's
    ``--config``): the same recipe, other weights, dropout and batch order."""
    config = out.with_name(out.name + ".config.json")
    atomic_write(config, json.dumps(get_preset(preset, seed=seed).to_dict(), indent=1) + "\n")
    return config


def resumed(before: dict | None, hour: dict) -> dict:
    """``hour`` after the stopped part ``before`` (Ctrl-C, a lost session): the wall times added, the
    load samples of the second part shifted by the first's time, ``parts`` counted."""
    if before is None:
        return {**hour, "parts": 1}
    shifted = [(round(t + before["wall_s"]), load) for t, load in hour["load_average"]]
    return {**hour, "wall_s": round(before["wall_s"] + hour["wall_s"], 1),
            "load_average": before["load_average"] + shifted, "parts": before.get("parts", 1) + 1}  # fmt: skip


def curve(run: Path) -> tuple[list[float], int]:
    """The validation loss after each epoch and the target tokens of the first, from ``metrics.jsonl``."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [round(r["val_loss"], 4) for r in rows if r["event"] == "eval" and r["epoch_done"]]
    return losses, sum(r["tokens"] for r in rows if r["event"] == "step" and r["epoch"] == 0)


def another_seed(run: Path, first: dict, data: str | None) -> tuple[dict, str]:
    """A further seed of the hour beside the record ``first``: its seed, last validation loss and test2016
    scores, decoded as the first was, and its translations. Its config must be the first's but for the
    seed. Its time is not recorded: the hour is timed once, on a machine doing nothing else, and seeds
    only spread the scores."""
    config, hour = check_another_seed(run, first["config"]), read_hour(run)
    result, hyps, _, scores = scored(run, data)
    name = config["name"]
    command = hour["command"].replace(str(run), f"runs/{name}-{config['seed']}")  # its config beside it
    return {"seed": config["seed"], "command": command, "val_loss": curve(run)[0][-1],
            "sacrebleu": round(result.sacrebleu, 2), "hypotheses": seed_hypotheses(config["seed"], name),
            **scores}, "\n".join(hyps) + "\n"  # fmt: skip


def seed_hypotheses(seed: int, preset: str = "laptop") -> str:
    """The file of a further seed's test2016 translations, beside ``laptop.json`` (``rnn-laptop.json``)."""
    return f"{preset}-seed{seed}.test2016.hyp.en"


def scored(run: Path, data: str | None) -> tuple:
    """``run`` decoded on test2016 by ``evaluate``: its result, translations, the (German, English) pairs,
    and its scores: the 95 % interval, lower-cased BLEU and a paired bootstrap against the published model."""
    result = evaluate(run, "test2016", device="cpu", root=data, progress=False)
    hyps = (run / result.hypotheses_file).read_text(encoding="utf-8").splitlines()
    pairs = load_multi30k("test2016", data, download=False)[: len(hyps)]  # all, unless the config sets a subset
    refs = [en for _, en in pairs]
    published = (REPO / "src/aiayn/results/multi30k.test2016.hyp.en").read_text(encoding="utf-8").splitlines()
    cased = bootstrap_bleu(hyps, refs)
    paired = paired_bootstrap(published[: len(hyps)], hyps, refs)  # the laptop against the published model
    return result, hyps, pairs, {
        "low": round(cased.low, 2), "high": round(cased.high, 2),
        "lowercased": round(corpus_bleu(hyps, refs, lowercase=True).score, 2),
        "against_published": {"difference": round(paired.difference, 2), "low": round(paired.low, 2),
                              "high": round(paired.high, 2), "p_value": round(paired.p_value, 4)},
    }  # fmt: skip


def check_another_seed(run: Path, first: dict) -> dict:
    """``run``'s config, which must be the first run's config ``first`` with another seed."""
    config = json.loads((run / "config.json").read_text())
    if {**config, "seed": first["seed"]} != first or config["seed"] == first["seed"]:
        raise ValueError(f"{run} is not another seed of the recorded run: its config must differ in the seed alone")
    return config


def seeds(text: dict, others: list[dict]) -> dict:
    """The record's ``seeds``: every seed's test2016 sacreBLEU, the first's included, with their mean and range."""
    scores = {text["config"]["seed"]: text["test2016"]["sacrebleu"], **{o["seed"]: o["sacrebleu"] for o in others}}
    if len(scores) != len(others) + 1:
        raise ValueError(f"the runs' seeds repeat: {[text['config']['seed'], *(o['seed'] for o in others)]}")
    return {"sacrebleu": scores, "mean": round(statistics.mean(scores.values()), 2),
            "min": min(scores.values()), "max": max(scores.values()), "others": others}  # fmt: skip


def read_hour(run: Path) -> dict:
    """The finished hour ``train`` wrote beside ``run``."""
    hour_file = run.with_name(run.name + ".hour.json")
    if not hour_file.is_file():
        raise FileNotFoundError(f"{hour_file} not found: `python tools/laptop_hour.py train` writes it")
    hour = json.loads(hour_file.read_text())
    if json.loads((run / "config.json").read_text())["name"] not in HOURS:
        raise ValueError(f"{run} is not a run of the laptop or the rnn-laptop preset")
    if "finished_at" not in hour:  # written before hours carried their date: the file's
        hour["finished_at"] = time.strftime("%Y-%m-%d", time.localtime(hour_file.stat().st_mtime))
    return hour


def record(run: Path, hour: dict, sizes: list[dict] | None, data: str | None,
           speed: dict | None = None) -> tuple[dict, str]:
    """``laptop.json``'s content (``rnn-laptop.json``'s) and the run's 1,000 test2016 translations."""
    config = json.loads((run / "config.json").read_text())
    name = config["name"]
    summary = json.loads((run / "summary.json").read_text())
    result, hyps, pairs, scores = scored(run, data)
    refs = [en for _, en in pairs]
    published = (REPO / "src/aiayn/results/multi30k.test2016.hyp.en").read_text(encoding="utf-8").splitlines()
    published = published[: len(hyps)]
    loads = [load for _, load in hour["load_average"]]
    losses, tokens = curve(run)
    text = {
        "preset": name,
        "command": hour["command"].replace(str(run), f"runs/{name}"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs",
        "torch": torch.__version__,
        "measured_at": hour["finished_at"],
        "note": "wall time of the train command alone (the tokenizer is trained inside it); test2016 scored "
                "after it by aiayn.runs.scoring.evaluate on the same machine",
        "config": config,
        "wall_s": hour["wall_s"],
        "train_s": round(summary["train_s"], 1),
        "load_average": {"min": min(loads, default=None), "max": max(loads, default=None),
                         "median": statistics.median(loads) if loads else None, "every_30_s": loads},
        "steps": summary["steps"],
        "epochs": summary.get("epochs_done"),
        "parameters": summary["parameters"],
        "val_loss_by_epoch": losses,
        "target_tokens_per_epoch": tokens,
        "test2016": {
            "sentences": len(hyps), "beam": result.beam, "length_penalty": result.length_penalty,
            "checkpoints": result.checkpoints, "sacrebleu": round(result.sacrebleu, 2),
            "low": scores["low"], "high": scores["high"], "signature": result.signature,
            "lowercased": scores["lowercased"], "decode_s": round(result.decode_s, 1),
            "published": {"sacrebleu": round(corpus_bleu(published, refs).score, 2),
                          "lowercased": round(corpus_bleu(published, refs, lowercase=True).score, 2)},
            "against_published": scores["against_published"],
        },
        "sizes": sizes,
        "speed": speed,
        "examples": [
            {"line": i, "German": pairs[i][0], "reference": refs[i], name: hyps[i]}
            for i in EXAMPLE_LINES
            if i < len(hyps)
        ],
    }  # fmt: skip
    if name != "laptop":  # the recurrent hour beside the Transformer's, on the same sentences
        laptop = (REPO / "src/aiayn/results/laptop.test2016.hyp.en").read_text(encoding="utf-8").splitlines()
        paired = paired_bootstrap(laptop[: len(hyps)], hyps, refs)
        text["test2016"]["against_laptop"] = {
            "difference": round(paired.difference, 2), "low": round(paired.low, 2),
            "high": round(paired.high, 2), "p_value": round(paired.p_value, 4),
        }  # fmt: skip
    return text, "\n".join(hyps) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = cli.parser("python tools/laptop_hour.py", __doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="part", required=True)
    s = sub.add_parser("sizes")
    s.add_argument("--out", type=Path, required=True, help="the JSON to write")
    s.add_argument("--seconds", type=cli.positive_float, default=10.0)
    s.add_argument("--rounds", type=cli.positive_int, default=2)
    t = sub.add_parser("train")
    t.add_argument("--out", type=Path, required=True, help="the run folder (new, or one to resume)")
    t.add_argument("--seed", type=int, default=0, help="the preset's seed (default 0, the preset's own)")
    t.add_argument("--preset", choices=HOURS, default="laptop",
                   help="the Transformer's hour (laptop) or the recurrent baseline's (rnn-laptop)")
    v = sub.add_parser("speed")
    v.add_argument("run", type=Path, help="a run folder of either hour (its tokenizer builds the batches)")
    v.add_argument("--out", type=Path, required=True, help="the JSON to write")
    v.add_argument("--sample", type=cli.positive_int, default=30, help="batches of the epoch timed")
    v.add_argument("--rounds", type=cli.positive_int, default=3)
    v.add_argument("--data", help="Multi30k folder (default $AIAYN_DATA)")
    r = sub.add_parser("record")
    r.add_argument("run", type=Path, help="the run folder `train` wrote")
    r.add_argument("--sizes", type=Path, help="the JSON `sizes` wrote")
    r.add_argument("--speed", type=Path, help="the JSON `speed` wrote")
    r.add_argument("--seeds", type=Path, nargs="+", default=[], metavar="RUN",
                   help="run folders of further seeds (`train --seed K`), scored beside the first")
    r.add_argument("--data", help="Multi30k folder (default $AIAYN_DATA)")
    r.add_argument("--out", type=Path, default=REPO / "src/aiayn/results")

    def body(args: argparse.Namespace) -> None:
        if args.part == "sizes":
            rows = measure_sizes(args.seconds, args.rounds)
            for row in rows:
                print(f"{row['size']:<36} {row['threads']} thread(s) {row['tokens_per_s']:>6,} target tokens/s")
            atomic_write(args.out, json.dumps(rows, indent=1) + "\n")
        elif args.part == "speed":
            speed = measure_speed(args.run, args.data, args.sample, args.rounds)
            for row in speed["rounds"]:
                print("  ".join(f"{k} {v}" for k, v in row.items()))
            ratio = speed["ratio"]
            print(f"a step of rnn-laptop takes {ratio['median']} times laptop's ({ratio['min']}-{ratio['max']})")
            atomic_write(args.out, json.dumps(speed, indent=1) + "\n")
        elif args.part == "train":
            hour_file = args.out.with_name(args.out.name + ".hour.json")
            before = json.loads(hour_file.read_text()) if hour_file.is_file() else None
            if before is not None and before["rc"] == 0:
                raise ValueError(f"{hour_file} holds a finished hour: record it, or train into another --out")
            preset = ("--preset", args.preset)
            if args.seed != 0:
                preset = ("--config", str(seed_config(args.out, args.seed, args.preset)))
            hour = resumed(before, train_hour(args.out, preset))
            atomic_write(hour_file, json.dumps(hour, indent=1) + "\n")
            if hour["rc"]:
                raise RuntimeError(f"the train command exited with status {hour['rc']}")
            print(f"trained in {hour['wall_s'] / 60:.1f} min; next: python tools/laptop_hour.py record {args.out}")
        else:
            hour = read_hour(args.run)
            sizes = json.loads(args.sizes.read_text()) if args.sizes else None
            speed = json.loads(args.speed.read_text()) if args.speed else None
            for other in args.seeds:  # every run checked before any is decoded
                read_hour(other)
                check_another_seed(other, json.loads((args.run / "config.json").read_text()))
            text, hyps = record(args.run, hour, sizes, args.data, speed)
            name = text["preset"]
            others = [another_seed(run, text, args.data) for run in args.seeds]
            if others:
                text["seeds"] = seeds(text, [other for other, _ in others])
            args.out.mkdir(parents=True, exist_ok=True)
            for other, lines in others:
                atomic_write(args.out / other["hypotheses"], lines)
            atomic_write(args.out / f"{name}.json", json.dumps(text, indent=1, ensure_ascii=False) + "\n")
            atomic_write(args.out / f"{name}.test2016.hyp.en", hyps)
            t = text["test2016"]
            print(f"test2016: sacreBLEU {t['sacrebleu']:.2f} ({t['low']:.2f}-{t['high']:.2f}), "
                  f"lower-cased {t['lowercased']:.2f}; {text['wall_s'] / 60:.1f} min")  # fmt: skip
            for other in text.get("seeds", {}).get("others", []):
                low, high = other["low"], other["high"]
                print(f"seed {other['seed']}: sacreBLEU {other['sacrebleu']:.2f} ({low:.2f}-{high:.2f})")

    cli.run(p, argv, body)


if __name__ == "__main__":
    main()
