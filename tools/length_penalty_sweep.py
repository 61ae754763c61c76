"""Choose beam search's length penalty α on validation by a rule that does not chase noise (issue 22).

The rule is fixed here, before any α is decoded (``RULE``): among the α whose validation BLEU is
not significantly below the best one's (paired bootstrap, p >= 0.05), take the one closest to the
run's own α = 0.6; test 2016 is scored only at that α. A choice that only goes to the top of the
sweep would pick among values the validation set cannot tell apart, and the test would reward luck.

The script decodes the 1,014 validation captions with the published model (float32, beam 4, one
CPU thread, ``aiayn.decoding.translate.translate``) at each α of ``ALPHAS``, scores each with a 95 %
bootstrap interval (``aiayn.bleu.bootstrap_bleu``) and a paired bootstrap test against the best
(``aiayn.bleu.paired_bootstrap``), applies the rule, and then decodes test 2016 at the chosen α, at
the run's own 0.6 and at the best on validation (what choosing the top would have given). It writes
each decode's translations and ``length_penalty.json`` into ``--out``:

    .venv/bin/python tools/length_penalty_sweep.py --out src/aiayn/results

``--score-only`` decodes nothing: it scores the translation files already in ``--out`` again and
rewrites the record (keeping the recorded decoding times), for a change of the record alone.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import torch

from aiayn.bleu import bootstrap_bleu, corpus_bleu, paired_bootstrap
from aiayn.data.multi30k import load_multi30k

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
ALPHAS = (0.6, 1.0, 1.4, 1.8, 2.2)
DEFAULT_ALPHA = 0.6  # the run's own, the paper's
LEVEL = 0.05  # "significantly below": p < LEVEL in the paired bootstrap
BEAM = 4
RULE = (
    "fixed before the sweep: decode val (1,014 sentences) at alpha = 0.6, 1.0, 1.4, 1.8, 2.2; "
    "compare each alpha with the best on val by a paired bootstrap (1,000 resamples of the "
    "sentences, seed 12345, sacreBLEU's paired-bs p-value); among the alphas whose val BLEU is "
    "not significantly below the best (p >= 0.05, the best included), choose the one closest "
    "to the run's own alpha = 0.6; score test2016 once, at that alpha"
)


def hyp_name(split: str, alpha: float) -> str:
    return f"multi30k.{split}.lp{alpha}.hyp.en"


def decode(model, tokenizer, sources, alpha: float, out: Path, name: str) -> float:
    """Translate ``sources`` at ``alpha``, write one line each to ``out / name``; the seconds taken."""
    from aiayn.decoding.translate import translate

    start = time.perf_counter()
    lines = translate(model, tokenizer, sources, beam=BEAM, length_penalty=alpha)
    seconds = time.perf_counter() - start
    (out / name).write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    print(f"{name}: {len(lines)} lines in {seconds:.1f} s", flush=True)
    return round(seconds, 1)


def read(out: Path, name: str) -> list[str]:
    return (out / name).read_text(encoding="utf-8").splitlines()


def scored(lines: list[str], references: list[str]) -> dict:
    """Our BLEU, sacreBLEU's (the same, checked), the 95 % interval and the length ratio."""
    from sacrebleu.metrics import BLEU

    ours, interval = corpus_bleu(lines, references), bootstrap_bleu(lines, references)
    metric = BLEU()
    sacre = metric.corpus_score(lines, [references]).score
    assert abs(ours.score - sacre) < 1e-9, (ours.score, sacre)
    return {
        "bleu": round(ours.score, 2),
        "sacrebleu": round(sacre, 2),
        "low": round(interval.low, 2),
        "high": round(interval.high, 2),
        "ratio": round(ours.ratio, 3),
        "signature": str(metric.get_signature()),
    }


def paired(baseline: list[str], system: list[str], references: list[str]) -> dict:
    test = paired_bootstrap(baseline, system, references)
    return {
        "difference": round(test.difference, 2),
        "low": round(test.low, 2),
        "high": round(test.high, 2),
        "p_value": round(test.p_value, 4),
        "sign_flips": round(test.sign_flips, 3),
    }


def choose(val: list[dict]) -> tuple[float, float]:
    """Apply ``RULE`` to the scored sweep: (best on val, chosen)."""
    best = max(val, key=lambda row: row["sacrebleu"])
    eligible = [row for row in val if row is best or row["vs_best"]["p_value"] >= LEVEL]
    chosen = min(eligible, key=lambda row: (abs(row["length_penalty"] - DEFAULT_ALPHA), row["length_penalty"]))
    return best["length_penalty"], chosen["length_penalty"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "src/aiayn/results")
    parser.add_argument("--run", default=str(SHARED / "runs/multi30k-h100"))
    parser.add_argument("--data", default=str(SHARED / "data/multi30k"))
    parser.add_argument("--score-only", action="store_true", help="score the files in --out again; decode nothing")
    args = parser.parse_args()
    out: Path = args.out
    record_path = out / "length_penalty.json"
    old = json.loads(record_path.read_text()) if record_path.exists() else {}
    seconds = {("val", row["length_penalty"]): row.get("decode_s") for row in old.get("val", [])}
    seconds |= {("test2016", row["length_penalty"]): row.get("decode_s") for row in old.get("test2016", {}).values()}

    splits = {name: load_multi30k(name, args.data, download=False) for name in ("val", "test2016")}
    sources = {name: [de for de, _ in pairs] for name, pairs in splits.items()}
    references = {name: [en for _, en in pairs] for name, pairs in splits.items()}
    model = tokenizer = None
    if not args.score_only:
        from aiayn.runs.published import load_published

        torch.set_num_threads(1)
        _, tokenizer, model, _ = load_published(args.run, download=False)

    def run(split: str, alpha: float) -> None:
        if not args.score_only:
            seconds[split, alpha] = decode(model, tokenizer, sources[split], alpha, out, hyp_name(split, alpha))

    # 1. validation: every alpha, each with its interval
    for alpha in ALPHAS:
        run("val", alpha)
    hyps = {alpha: read(out, hyp_name("val", alpha)) for alpha in ALPHAS}
    val = [
        {"length_penalty": a, **scored(hyps[a], references["val"]), "hypotheses": hyp_name("val", a)}
        for a in ALPHAS
    ]
    top = max(val, key=lambda row: row["sacrebleu"])["length_penalty"]
    for row in val:  # 2. each against the best, on the same resamples
        row["vs_best"] = paired(hyps[top], hyps[row["length_penalty"]], references["val"])
        row["decode_s"] = seconds.get(("val", row["length_penalty"]))
    best, chosen = choose(val)  # 3. the rule
    for row in val:
        print(f"val alpha {row['length_penalty']}: {row['sacrebleu']:.2f} [{row['low']:.2f}, {row['high']:.2f}], "
              f"against the best {row['vs_best']['difference']:+.2f} p = {row['vs_best']['p_value']:.3f}")
    print(f"best on val {best}, chosen by the rule {chosen}")

    # 4. test 2016: the chosen alpha, the run's own, and the top of the sweep
    tested = sorted({chosen, DEFAULT_ALPHA, best})
    for alpha in tested:
        run("test2016", alpha)
    test_hyps = {alpha: read(out, hyp_name("test2016", alpha)) for alpha in tested}
    test = {
        str(a): {"length_penalty": a, **scored(test_hyps[a], references["test2016"]),
                 "hypotheses": hyp_name("test2016", a), "decode_s": seconds.get(("test2016", a))}
        for a in tested
    }  # fmt: skip
    # each against the run's own 0.6, and the top of the sweep against the rule's choice
    pairs = [(DEFAULT_ALPHA, a) for a in tested if a != DEFAULT_ALPHA]
    pairs += [(chosen, best)] if (chosen, best) not in pairs and chosen != best else []
    comparisons = [
        {"baseline": a, "system": b, **paired(test_hyps[a], test_hyps[b], references["test2016"])} for a, b in pairs
    ]
    for key, row in test.items():
        print(f"test2016 alpha {key}: {row['sacrebleu']:.2f} [{row['low']:.2f}, {row['high']:.2f}]")
    for row in comparisons:
        print(f"test2016 {row['system']} - {row['baseline']}: {row['difference']:+.2f} "
              f"[{row['low']:+.2f}, {row['high']:+.2f}] p = {row['p_value']:.3f}")

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    record = {
        "what": "the length penalty alpha of beam search (K = 4), chosen on the validation set only, "
        "for the published multi30k weights, decoded on a CPU",
        "rule": RULE,
        "bootstrap": "95 % intervals: 1,000 resamples of the sentences with replacement, seed 12345 "
        "(aiayn.bleu.bootstrap_bleu, sacreBLEU's --confidence draws); paired tests: "
        "aiayn.bleu.paired_bootstrap (sacreBLEU's --paired-bs), the same 1,000 resamples for both systems",
        "machine": old.get("machine") if args.score_only else
        f"a shared {os.cpu_count()}-core {platform.machine()} CPU, one thread, torch {torch.__version__}, "
        "the float16 weights run as float32",
        "measured_at": old.get("measured_at") if args.score_only else datetime.date.today().isoformat(),
        "commit": old.get("commit") if args.score_only else (commit.stdout.strip() or None),
        "commands": [
            "python tools/length_penalty_sweep.py --out src/aiayn/results",
            "(it runs aiayn.decoding.translate.translate(model, tokenizer, sources, beam=4, length_penalty=A) with "
            "torch.set_num_threads(1) on val for A = 0.6, 1.0, 1.4, 1.8, 2.2, then on test2016 at "
            + ", ".join(str(a) for a in tested) + ")",
        ],
        "val": val,
        "best_on_val": best,
        "chosen": chosen,
        "test2016": test,
        "test2016_paired": comparisons,
        "hypotheses": hyp_name("test2016", chosen),
        "note": "decode_s are CPU seconds under varying load (other work shared the 2 cores), not a benchmark",
    }
    record_path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {record_path}")


if __name__ == "__main__":
    main()
