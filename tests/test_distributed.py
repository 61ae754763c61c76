"""aiayn.training.distributed: two gloo ranks train as one process would, only rank 0 writes, resume is exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_runs import (
    AT_PHASE,
    TINY,
    copy_run,
    outcome,
    resumes_exactly,
    run_cli,
    snapshot,
    wait_for_steps,
)

from aiayn.runs.folder import RunFolder
from aiayn.training import distributed, equivalence
from aiayn.training.batches import EpochBatches

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]


# --- Sharding ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 31])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_shard_gives_every_batch_to_at_most_one_rank_in_equal_counts(n, world):
    batches = list(range(n))
    if n < world:
        with pytest.raises(ValueError, match=rf"{n} batches cannot be shared by {world} processes"):
            distributed.shard(batches, 0, world)
        return
    shards = [distributed.shard(batches, r, world) for r in range(world)]
    assert {len(s) for s in shards} == {n // world}  # equal counts
    kept = sorted(b for s in shards for b in s)
    assert kept == sorted(set(kept)) == batches[: n - n % world]  # once each; the last n % world dropped
    # step k of all ranks together is global batches k*world ... k*world + world - 1
    assert [s[0] for s in shards] == list(range(world))


def test_epoch_batches_of_the_ranks_are_the_batches_of_one_process():
    g = torch.Generator().manual_seed(0)
    pairs = [
        (list(range(3, 3 + int(a))), list(range(3, 3 + int(b))))
        for a, b in torch.randint(1, 20, (300, 2), generator=g)
    ]
    one = EpochBatches(pairs, 200, seed=3)
    for epoch in (0, 1):
        everything = one.indices(epoch)
        ranks = [EpochBatches(pairs, 200, seed=3, rank=r, world=3).indices(epoch) for r in range(3)]
        assert {len(r) for r in ranks} == {len(everything) // 3}
        assert [b for step in zip(*ranks, strict=True) for b in step] == everything[: 3 * len(ranks[0])]
    assert len(EpochBatches(pairs, 200, seed=3, rank=1, world=3)) == len(one) // 3


# --- Refusals that need no second process ----------------------------------------------------------


def test_a_plain_process_starts_no_process_group(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed.setup(None) is None and distributed.setup("cpu") == "cpu"
    assert not dist.is_initialized()
    assert (distributed.rank(), distributed.world_size(), distributed.is_main()) == (0, 1, True)
    assert distributed.token_weight(17) == (1.0, 17) and distributed.shard([1, 2], 0, 1) == [1, 2]


@pytest.mark.parametrize(
    "gpus, device, message",
    [
        (0, "cuda", r"^torchrun with --device cuda trains with nccl, which needs GPUs, and this machine has none; "
                    r"pass --device cpu"),
        (2, None, r"^torchrun started 4 processes on this machine but it has 2 GPUs: use --nproc_per_node 2 or fewer"),
        (4, "cuda:1", r"^under torchrun each process takes the GPU of its LOCAL_RANK; pass --device cuda, not cuda:1"),
        (0, "mps", r"^torchrun trains on cuda \(nccl\) or cpu \(gloo\), got --device mps"),
    ],
    ids=["nccl-without-gpus", "more-processes-than-gpus", "one-gpu-named", "other-device"],
)  # fmt: skip
def test_setup_refuses_what_torchrun_cannot_do_in_one_line(monkeypatch, gpus, device, message):
    for name, value in (("WORLD_SIZE", "4"), ("LOCAL_WORLD_SIZE", "4"), ("RANK", "0"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(ValueError, match=message) as error:
        distributed.setup(device)
    assert "\n" not in str(error.value)
    assert not dist.is_initialized()


# --- Two gloo processes ----------------------------------------------------------------------------


def test_two_ranks_make_the_updates_of_one_process_that_sees_both_batches():
    # fit on 2 gloo ranks (DDP, token-weighted loss, clipping, SGD) against one process that sums
    # the losses of the same 2 batches per step over their tokens
    assert equivalence.check_equivalence(2, steps=4) < 1e-6


def torchrun(config: Path, out: Path, root: Path, env: dict, n: int = 2, *more: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
            "-m", "aiayn.train", "--config", str(config), "--out", str(out), "--device", "cpu",
            "--data", str(root), "--no-progress", *more]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def straight(tmp_path_factory, root, cache):
    """An uninterrupted 2-rank run, and what a run needs to be started again."""
    folder = tmp_path_factory.mktemp("two-ranks")
    config = folder / "small.json"
    cfg = TINY.with_changes(name="small", checkpoint_every=3)  # 400 pairs: 14 steps an epoch on each rank
    values = cfg.to_dict()
    values["model"]["dropout"] = 0.1  # resuming then needs each rank's own random state
    config.write_text(json.dumps(values))
    env = {**os.environ, "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO / "src")}  # fmt: skip
    process = torchrun(config, folder / "run", root, env)
    printed, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return config, env, folder / "run", printed


def test_only_rank_0_writes_into_the_run_folder(straight):
    _, _, run, printed = straight
    manifest = json.loads((run / "manifest.json").read_text())
    names = {p.name for p in run.iterdir()} - {"manifest.json", ".lock"}
    assert names == set(manifest["files"]) == {
        "config.json", "tokenizer.model", "metrics.jsonl", "checkpoint.pt", "summary.json",
        "epoch-001.pt", "epoch-002.pt",
    }  # fmt: skip
    files = snapshot(run)
    for name, entry in manifest["files"].items():  # the bytes its one writer listed
        assert files[name] == entry["sha256"], name
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").open()) if r["event"] == "step"]
    assert steps == list(range(1, len(steps) + 1))  # each step logged once, not once per rank
    summary = json.loads((run / "summary.json").read_text())
    assert summary["processes"] == 2 and summary["steps"] == len(steps)
    assert printed.count("training a new run in") == 1 and printed.count("steps (") == 1


def test_an_interrupted_two_rank_run_resumes_exactly(straight, tmp_path, root):
    config, env, run, _ = straight
    steps, evals, weights = outcome(run)
    out = tmp_path / "run"
    process = torchrun(config, out, root, env)
    wait_for_steps(out, 7, process)  # mid-epoch, after the checkpoint at step 6
    process.send_signal(signal.SIGINT)  # to torchrun, which passes it to both ranks
    _, err = process.communicate(timeout=60)
    assert err.count("interrupted (Ctrl-C) at step") == 1, err  # rank 0 alone says it
    command = "Run the same command again to resume: torchrun --standalone --nproc_per_node 2 -m aiayn.train"
    assert command in err, err
    stopped = json.loads((out / "summary.json").read_text())["steps"]
    assert stopped < steps[-1][0]

    resumed = torchrun(config, out, root, env)
    printed, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert f"from its checkpoint at step {stopped}" in printed
    got_steps, got_evals, got_weights = outcome(out)
    assert got_steps == steps and got_evals == evals  # every loss, bit for bit, each step once
    assert all(torch.equal(got_weights[k], weights[k]) for k in weights)


@pytest.mark.parametrize(("phase", "sig"), [("step", signal.SIGTERM), ("validation", signal.SIGINT),
                                          ("epoch-end", signal.SIGHUP), ("checkpoint", signal.SIGTERM)])  # fmt: skip
def test_a_signal_at_any_moment_of_a_two_rank_run_leaves_a_checkpoint_it_resumes_from(straight, tmp_path, root,
                                                                                      phase, sig):  # fmt: skip
    config, env, run, _ = straight
    script = tmp_path / "at_phase.py"
    script.write_text(AT_PHASE)
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
            phase, sig.name, "--config", str(config), "--out", str(out), "--device", "cpu", "--data", str(root),
            "--no-progress"]  # fmt: skip
    stopped = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    how = "Ctrl-C" if sig == signal.SIGINT else sig.name
    assert stopped.stderr.count(f"interrupted ({how}) at step") == 1, stopped.stderr  # rank 0 alone says it
    step = json.loads((out / "summary.json").read_text())["steps"]
    saved = json.loads((out / "manifest.json").read_text())["files"]["checkpoint.pt"]["step"]
    assert saved == step and f"at step {step}; the checkpoint is saved in {out / 'checkpoint.pt'}" in stopped.stderr
    resumes_exactly(out, torchrun(config, out, root, env), outcome(run))


def test_resuming_with_another_number_of_processes_is_refused(straight, tmp_path, root, capsys):
    config, _, run, _ = straight
    copy = copy_run(run, tmp_path / "run")
    before = snapshot(copy)
    argv = ["--config", str(config), "--out", str(copy), "--device", "cpu", "--data", str(root), "--epochs", "3"]
    code, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1
    assert err == (
        f"error: cannot resume --out {copy}: it was trained on 2 processes and this is 1; "
        "resume it with torchrun --nproc_per_node 2\n"
    )
    assert snapshot(copy) == before


def test_a_locked_run_folder_is_refused_by_every_rank_in_the_same_words(straight, tmp_path, root):
    """Not rank 0 alone, with rank 1 dying at its barrier ("Connection closed by peer") and named the cause."""
    config, env, run, _ = straight
    copy = copy_run(run, tmp_path / "run")
    before = snapshot(copy)
    with RunFolder(copy).locked():  # another command writing into the folder
        process = torchrun(config, copy, root, env, 2, "--epochs", "3")  # resume it for a third epoch
        _, err = process.communicate(timeout=120)
    assert process.returncode != 0
    # each rank that gets to speak says rank 0's refusal (torchrun may stop rank 1 first)
    refusals = {line for line in err.splitlines() if line.startswith("error: ")}
    assert len(refusals) == 1 and "another command is writing into" in refusals.pop(), err
    assert "Connection closed by peer" not in err and "gloo" not in err.lower(), err
    assert "(exitcode: 1)" not in err, err  # no rank failed other than by the refusal (exit 2)
    assert snapshot(copy) == before
