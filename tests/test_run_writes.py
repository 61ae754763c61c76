"""What a run writes to disk does not grow with its epochs: the checkpoint (with Adam's state) is saved
every ``checkpoint_minutes`` and at the end, not at every epoch's end, and only the epochs that
``load_run`` averages get an epoch file; the averaged weights are those of the run's last epochs."""

from __future__ import annotations

import pytest
import torch

from aiayn import files
from aiayn.runs.load import load_run
from aiayn.runs.presets import PRESETS
from aiayn.runs.recipes import train

pytestmark = pytest.mark.usefixtures("one_thread")

# A few steps an epoch on a CPU; averaging the last 5 epochs, as the multi30k preset does.
SMALL = PRESETS["multi30k-smoke"].with_changes(
    name="small", train_subset=200, val_subset=10, test_subset=5, vocab_size=300, max_tokens=1024,
    warmup=10, average_last=5, checkpoint_minutes=None, log_every=10,
)  # fmt: skip


class Written:
    """The files a run writes atomically (checkpoints, epoch files, the manifest ...): name -> bytes, in all."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.bytes: dict[str, int] = {}
        self.saves: list[str] = []
        finish = files.AtomicWriter.finish

        def counted(writer: files.AtomicWriter) -> files.WrittenFile:
            first = writer.written is None
            written = finish(writer)
            if first:
                self.bytes[writer.path.name] = self.bytes.get(writer.path.name, 0) + written.size
                self.saves.append(writer.path.name)
            return written

        monkeypatch.setattr(files.AtomicWriter, "finish", counted)

    def total(self, run) -> int:
        return sum(self.bytes.values()) + (run / "metrics.jsonl").stat().st_size  # appended, not atomic


class Weights:
    """``train``'s hook: the weights at every epoch's end, and the step."""

    def __init__(self):
        self.epochs: list[dict[str, torch.Tensor]] = []
        self.step = 0

    def __call__(self, state) -> None:
        self.step = state.step
        if state.event == "epoch_end":
            self.epochs.append({k: v.detach().clone() for k, v in state.model.state_dict().items()})


def mean(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The weights averaged as ``average_checkpoints`` averages them (in float64, stored as float32)."""
    return {k: sum(s[k].double() for s in states).div(len(states)).to(v.dtype) for k, v in states[-1].items()}


def assert_weights(model: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    state = model.state_dict()
    assert state.keys() == expected.keys()
    assert all(torch.equal(state[k], expected[k]) for k in expected)


def run(cfg, out, root) -> tuple[Written, Weights]:
    """Train ``cfg`` into ``out``, counting what it writes and keeping each epoch's weights."""
    weights = Weights()
    with pytest.MonkeyPatch.context() as mp:
        written = Written(mp)
        train(cfg, out, root=root, device="cpu", progress=False, hook=weights)
    return written, weights


def test_twice_the_epochs_write_at_most_a_quarter_more(tmp_path, root, cache):
    """Before: a checkpoint and an epoch file at every epoch's end, 2.0 times the bytes for 8 epochs as for 4."""
    totals = {}
    for epochs in (4, 8):
        out = tmp_path / f"run-{epochs}"
        written, weights = run(SMALL.with_changes(epochs=epochs), out, root)
        totals[epochs] = written.total(out)
        # two checkpoints, after the first step and at the end; epoch files for the last 5 epochs only
        assert written.saves.count("checkpoint.pt") == 2
        kept = [f"epoch-{e:03d}.pt" for e in range(max(1, epochs - 4), epochs + 1)]
        assert sorted(n for n in written.saves if n.startswith("epoch-")) == kept
        assert sorted(p.name for p in out.glob("epoch-*.pt")) == kept
        # the averaged weights are the mean of the last 5 epochs' weights, as before
        _, _, model, sources = load_run(out, "cpu")
        assert sources == kept
        assert_weights(model, mean(weights.epochs[-5:]))
    assert totals[8] <= 1.25 * totals[4], totals


def test_a_run_stopped_by_max_steps_averages_its_last_epochs_and_final_weights(tmp_path, root, cache):
    """With max_steps the run ends inside an epoch: the epoch files written are those of the last
    epochs it finishes, and load_run averages them with the final weights, as before."""
    per_epoch = run(SMALL.with_changes(epochs=1, average_last=1), tmp_path / "one", root)[1].step
    cfg = SMALL.with_changes(epochs=8, average_last=2, max_steps=5 * per_epoch + 1)
    written, weights = run(cfg, tmp_path / "run", root)
    assert len(weights.epochs) == 5 and weights.step == 5 * per_epoch + 1
    assert sorted(n for n in written.saves if n.startswith("epoch-")) == ["epoch-004.pt", "epoch-005.pt"]
    _, _, model, sources = load_run(tmp_path / "run", "cpu")
    assert sources == ["epoch-005.pt", "checkpoint.pt"]
    final = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)["model"]
    assert_weights(model, mean([weights.epochs[-1], final]))
