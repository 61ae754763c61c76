"""Measure what section 11.5 reports about torchrun on a GPU machine, and write it as JSON (issue 21).

Runs, on the machine it is started on (a GPU machine: the figures are that machine's):

1. ``python -m aiayn.equivalence check``: two gloo CPU processes against one, 5 SGD steps;
2. ``torchrun --standalone --nproc_per_node 1 -m aiayn.train --preset multi30k-smoke`` on the GPU
   (nccl), then ``python -m aiayn.evaluate`` of it;
3. the same with ``--nproc_per_node`` one more than the GPUs: the line it is refused with;
4. ``--preset multi30k --max-steps STEPS`` under torchrun (nccl), straight, and again interrupted
   by Ctrl-C (SIGINT to the process group) after ``--interrupt-after`` seconds and resumed with
   the same command: are the final weights bit-equal?
5. two gloo processes on the machine's CPU training the smoke preset;
6. ``python -m aiayn.bench --contenders "ours (fused)" "ours (set_fast)" ...`` on the GPU:
   ops per step, median time per step and per-round ratios, interleaved; and the same with
   PyTorch's cuDNN attention kernel on and off (the first step of each batch shape).

It takes about 9 minutes on an H100. ``src/aiayn/results/torchrun.h100.json`` came from its parts:
its first full run stopped at the bench (then with a compiled contender, since left out), whose
rows, and the refusal line, were measured by the same commands in separate calls.

Usage (from the repository root, with the Multi30k files in $AIAYN_DATA)::

    PYTHONPATH=src python tools/torchrun_figures.py --out torchrun.h100.json

The JSON, copied unchanged into ``src/aiayn/results/``, is what section 11.5 prints.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from aiayn.training.checkpoints import CHECKPOINT, read_checkpoint

PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone"]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(args), flush=True)
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    print(done.stdout[-2000:], done.stderr[-2000:], flush=True)
    return done


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return read_checkpoint(folder / CHECKPOINT)["model"]


KEPT = ("name", "step_ms", "speed", "speed_min", "speed_max", "rounds", "first_shape_steps", "first_shape_ms",
        "ops_per_step", "tokens_per_s", "loss")  # fmt: skip


def kept(rows: list[dict]) -> list[dict]:
    return [{k: row[k] for k in KEPT} for row in rows]


def bench(contenders: list[str], rounds: int, out: Path, cudnn: bool | None = None) -> list[dict]:
    """``python -m aiayn.bench`` on the GPU; with ``cudnn`` set, PyTorch's cuDNN attention on or off."""
    argv = ["--device", "cuda", "--contenders", *contenders, "--rounds", str(rounds), "--json", str(out)]
    if cudnn is None:
        run([PY, "-m", "aiayn.bench", *argv], check=True)
    else:
        code = (
            "import sys, torch; torch.backends.cuda.enable_cudnn_sdp(sys.argv[1] == 'on'); "
            "from aiayn.bench import main; main(sys.argv[2:])"
        )
        run([PY, "-c", code, "on" if cudnn else "off", *argv, "--no-ops"], check=True)
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--steps", type=int, default=250, help="steps of the multi30k runs")
    p.add_argument("--interrupt-after", type=float, default=30.0, help="seconds before Ctrl-C")
    p.add_argument("--rounds", type=int, default=5, help="bench rounds")
    args = p.parse_args()
    gpus = torch.cuda.device_count()
    if gpus == 0:
        raise SystemExit("torchrun_figures.py measures a GPU machine; this one has none")
    work = Path(tempfile.mkdtemp())
    figures: dict = {
        "measured_at": datetime.date.today().isoformat(),
        "device_name": torch.cuda.get_device_name(0),
        "gpus": gpus,
        "cpu_cores": os.cpu_count(),
        "torch": torch.__version__,
        "command": "PYTHONPATH=src python tools/torchrun_figures.py --out torchrun.h100.json",
    }

    check = run([PY, "-m", "aiayn.equivalence", "check"], check=True)
    line = check.stdout.strip().splitlines()[-1]
    figures["equivalence"] = {
        "command": "python -m aiayn.equivalence check",
        "line": line,
        "max_abs": float(line.rsplit("=", 1)[1]),
    }

    smoke = work / "smoke"
    one = [*TORCHRUN, "--nproc_per_node", "1", "-m", "aiayn.train", "--no-progress"]
    run([*one, "--preset", "multi30k-smoke", "--device", "cuda", "--out", str(smoke)], check=True)
    run([PY, "-m", "aiayn.evaluate", str(smoke), "--device", "cuda"], check=True)
    test = json.loads((smoke / "results.json").read_text())["test2016"]
    s = summary(smoke)
    figures["nccl_smoke"] = {
        "command": "torchrun --standalone --nproc_per_node 1 -m aiayn.train --preset multi30k-smoke "
        "--device cuda --no-progress; python -m aiayn.evaluate RUN --device cuda",
        "processes": s["processes"],
        "steps": s["steps"],
        "wall_s": round(s["wall_s"], 1),
        "sacrebleu_test2016": round(test["sacrebleu"], 2),
    }

    too_many = run(
        [*TORCHRUN, "--nproc_per_node", str(gpus + 1), "-m", "aiayn.train", "--preset",
         "multi30k-smoke", "--device", "cuda", "--out", str(work / "refused"), "--no-progress"]
    )  # fmt: skip
    said = [line for line in (too_many.stdout + too_many.stderr).splitlines() if line.startswith("error:")]
    figures["too_many_processes"] = {
        "command": f"torchrun --standalone --nproc_per_node {gpus + 1} -m aiayn.train --preset multi30k-smoke "
        "--device cuda",
        "line": said[0] if said else None,
        "torchrun_exit": too_many.returncode,
    }

    base = [*one, "--preset", "multi30k", "--max-steps", str(args.steps), "--device", "cuda"]
    straight, resumed = work / "straight", work / "resumed"
    run([*base, "--out", str(straight)], check=True)
    started = subprocess.Popen([*base, "--out", str(resumed)], start_new_session=True)
    time.sleep(args.interrupt_after)
    os.killpg(started.pid, signal.SIGINT)
    started.wait()
    run([*base, "--out", str(resumed)], check=True)
    a, b = weights(straight), weights(resumed)
    figures["nccl_resume"] = {
        "command": f"torchrun --standalone --nproc_per_node 1 -m aiayn.train --preset multi30k --max-steps "
        f"{args.steps} --device cuda --no-progress: once straight, once stopped by SIGINT to its process "
        f"group after {args.interrupt_after:g} s and run again",
        "steps": summary(resumed)["steps"],
        "resumed_from_step": summary(resumed)["resumed_from_step"],
        "bit_equal": all(torch.equal(a[k], b[k]) for k in a),
    }

    gloo = work / "gloo"
    run([*TORCHRUN, "--nproc_per_node", "2", "-m", "aiayn.train", "--preset", "multi30k-smoke",
         "--device", "cpu", "--out", str(gloo), "--no-progress"],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, check=True)  # fmt: skip
    s = summary(gloo)
    figures["gloo_cpu"] = {
        "command": "OMP_NUM_THREADS=1 torchrun --standalone --nproc_per_node 2 -m aiayn.train "
        "--preset multi30k-smoke --device cpu --no-progress",
        "processes": s["processes"],
        "steps": s["steps"],
        "wall_s": round(s["wall_s"], 1),
        "device_name": s["device_name"],
    }

    # the compiled contender is left out: compiling for 50 batch shapes outlasts a 10-minute call
    contenders = ["ours (fused)", "ours (set_fast)", "ours (explicit)"]
    rows = bench(contenders, args.rounds, work / "bench.json")
    figures["bench"] = {
        "command": "python -m aiayn.bench --device cuda --contenders "
        + " ".join(repr(c) for c in contenders) + f" --rounds {args.rounds}",
        "batches": f"{rows[0]['data']}, {rows[0]['shapes']} shapes, {rows[0]['max_tokens']} tokens a batch, "
        f"amp {rows[0]['amp']}",
        "rows": kept(rows),
    }
    figures["cudnn_attention"] = {
        "command": "python -m aiayn.bench --device cuda --contenders 'ours (fused)' 'ours (set_fast)' "
        "--rounds 3 --no-ops, with torch.backends.cuda.enable_cudnn_sdp(True), then (False)",
        **{
            kernel: kept(bench(contenders[:2], 3, work / f"cudnn-{kernel}.json", cudnn=kernel == "on"))
            for kernel in ("on", "off")
        },
    }
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    print(json.dumps({k: v for k, v in figures.items() if k != "bench"}, indent=1))


if __name__ == "__main__":
    main()
