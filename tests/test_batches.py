"""The batches of a corpus: padded once a run, each epoch's batches exactly those ``data.collate`` builds,
and padding to a few bucket lengths changes neither the loss nor the gradients."""

from __future__ import annotations

import pytest
import torch

from aiayn.data.multi30k import (
    BOS,
    EOS,
    PAD,
    collate,
    make_batches,
)
from aiayn.engine.switch import set_fast
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.training.batches import (
    Batch,
    EpochBatches,
    PaddedPairs,
    eval_batches,
)
from aiayn.training.distributed import shard

pytestmark = pytest.mark.usefixtures("one_thread")

V = 40
TENSORS = ("src", "src_mask", "tgt_in", "tgt_out", "tgt_mask")


def random_pairs(n: int = 300, longest: int = 20, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Pairs of 0..longest ids a side (empty ones too), with many ties in length."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, longest + 1, (n, 2), generator=g).tolist()
    return [
        (torch.randint(4, V, (s,), generator=g).tolist(), torch.randint(4, V, (t,), generator=g).tolist())
        for s, t in lengths
    ]


def collated(pairs, batches: list[list[int]]) -> list[Batch]:
    """The batches as they were built before ``PaddedPairs``: ``collate``, a tensor per sentence."""
    return [Batch.make(*collate([pairs[i] for i in rows]), PAD, BOS) for rows in batches]


def assert_same(got: list[Batch], expected: list[Batch]) -> None:
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for name in TENSORS:
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), name
        assert a.n_tokens == b.n_tokens


@pytest.mark.parametrize(("seed", "rank", "world"), [(0, 0, 1), (3, 0, 1), (3, 1, 3)])
def test_each_epochs_batches_are_the_collated_ones(seed, rank, world):
    """The order and the contents of every epoch's batches are what collate gave: runs and resumes
    see the same batches, step for step."""
    pairs = random_pairs()
    batches = EpochBatches(pairs, 200, seed=seed, rank=rank, world=world)
    for epoch in (0, 1, 2):
        expected = make_batches(pairs, 200, seed=seed, epoch=epoch)
        if world > 1:
            expected = shard(expected, rank, world)
        assert batches.indices(epoch) == expected
        assert_same(list(batches(epoch)), collated(pairs, expected))
        assert_same(list(batches(epoch)), collated(pairs, expected))  # again: a resume's pass


def test_eval_batches_are_the_collated_ones():
    pairs = random_pairs(seed=1)
    assert_same(eval_batches(pairs, 150), collated(pairs, make_batches(pairs, 150, shuffle=False)))
    assert eval_batches([], 150) == []


def test_epochs_share_the_shapes_not_the_groups():
    """Ties in length are drawn anew each epoch: the batches of two epochs hold other pairs, in
    batches of the same shapes (the packing sees only lengths), so every epoch has as many steps."""
    batches = EpochBatches(random_pairs(), 200)
    first, second = list(batches(0)), list(batches(1))
    assert sorted(b.tgt_out.shape + b.src.shape for b in first) == sorted(b.tgt_out.shape + b.src.shape for b in second)
    assert sorted(map(sorted, batches.indices(0))) != sorted(map(sorted, batches.indices(1)))


def test_batches_can_be_moved_ahead_to_a_device():
    pairs = random_pairs()
    moved = EpochBatches(pairs, 200, device="cpu", pin_memory=True)  # pinned only where CUDA is
    assert_same(list(moved(1)), list(EpochBatches(pairs, 200)(1)))


def test_padded_pairs_rows_are_the_ids_then_eos_then_pad():
    padded = PaddedPairs([([5, 6, 7], []), ([], [8, 9])])
    assert padded.src.tolist() == [[5, 6, 7, EOS], [EOS, PAD, PAD, PAD]]
    assert padded.tgt.tolist() == [[EOS, PAD, PAD], [8, 9, EOS]]
    assert (padded.src_lengths, padded.tgt_lengths) == ([4, 1], [1, 3])
    batch = padded.batch([1])
    assert batch.src.tolist() == [[EOS]] and batch.tgt_out.tolist() == [[8, 9, EOS]]


def test_padded_pairs_rejects_bad_input():
    with pytest.raises(ValueError, match=r"pad_to must be a positive integer, got 0"):
        PaddedPairs([([5], [6])], pad_to=0)
    with pytest.raises(ValueError, match=r"expected at least one \(source ids, target ids\) pair, got none"):
        PaddedPairs([])
    with pytest.raises(ValueError, match=r"expected at least one pair index, got an empty batch"):
        PaddedPairs([([5], [6])]).batch([])


# --- Padding to a few lengths -------------------------------------------------------------------------


def test_pad_to_rounds_the_lengths_up_and_adds_only_pad():
    pairs = random_pairs(seed=2)
    plain, padded = EpochBatches(pairs, 200), EpochBatches(pairs, 200, pad_to=8)
    assert padded.indices(1) == plain.indices(1)
    for a, b in zip(plain(1), padded(1), strict=True):
        S, T = a.src.size(1), a.tgt_out.size(1)
        assert b.src.size(1) == -(-S // 8) * 8 and b.tgt_out.size(1) == -(-T // 8) * 8
        assert torch.equal(b.src[:, :S], a.src) and (b.src[:, S:] == PAD).all()
        assert torch.equal(b.tgt_out[:, :T], a.tgt_out) and (b.tgt_out[:, T:] == PAD).all()
        assert b.n_tokens == a.n_tokens
    buckets = {8, 16, 24}  # sentences of up to 20 ids and <eos>
    assert {b.src.size(1) for b in padded(0)} <= buckets and {b.tgt_out.size(1) for b in padded(0)} <= buckets


def test_pad_rows_adds_sentences_with_nothing_to_predict():
    pairs = random_pairs(seed=5)
    plain, padded = EpochBatches(pairs, 200, pad_to=8), EpochBatches(pairs, 200, pad_to=8, pad_rows=16)
    for a, b in zip(plain(0), padded(0), strict=True):
        B, S = a.src.shape
        assert b.src.size(0) == -(-B // 16) * 16 and b.tgt_out.shape[1:] == a.tgt_out.shape[1:]
        for name in TENSORS:
            assert torch.equal(getattr(b, name)[:B], getattr(a, name)), name
        assert (b.src[B:] == PAD).all() and (b.tgt_out[B:] == PAD).all() and not b.src_mask[B:].any()
        assert b.n_tokens == a.n_tokens
    shapes = {tuple(b.src.shape) + (b.tgt_out.size(1),) for b in padded(0)}
    assert len(shapes) < len({tuple(b.src.shape) + (b.tgt_out.size(1),) for b in plain(0)})
    with pytest.raises(ValueError, match=r"pad_rows must be a positive integer, got 0"):
        PaddedPairs([([5], [6])], pad_rows=0)


@pytest.mark.parametrize(("fast", "pad_rows"), [(False, None), (True, None), (False, 32), (True, 32)])
def test_pad_to_gives_the_same_loss_and_gradients(fast, pad_rows):
    """The loss is a mean over the non-pad targets and the masks hide the extra keys: the same
    loss and gradients as without the extra padding, up to float rounding. Rows added by
    ``pad_rows`` have no target token and no key to attend to: they change neither (nor make NaN)."""
    pairs = random_pairs(n=60, seed=4)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.0, share_embeddings=True))
    if fast:
        set_fast(model)
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)

    def loss_and_grads(batch: Batch) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad(set_to_none=True)
        logits = model(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)  # (B, T, V)
        loss = loss_fn(logits, batch.tgt_out)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    plain, padded = EpochBatches(pairs, 300), EpochBatches(pairs, 300, pad_to=16, pad_rows=pad_rows)
    for a, b in zip(plain(0), padded(0), strict=True):
        assert b.src.shape != a.src.shape or b.tgt_out.shape != a.tgt_out.shape or a.src.size(1) % 16 == 0
        if pad_rows:
            assert b.src.size(0) % pad_rows == 0 and b.src.size(0) > a.src.size(0)
        loss_a, grads_a = loss_and_grads(a)
        loss_b, grads_b = loss_and_grads(b)
        torch.testing.assert_close(loss_b, loss_a, rtol=1e-6, atol=1e-6)
        for ga, gb in zip(grads_a, grads_b, strict=True):
            torch.testing.assert_close(gb, ga, rtol=1e-5, atol=1e-6)


def test_the_train_command_trains_on_padded_shapes_with_the_same_losses(tmp_path, root, cache):
    """TrainConfig.pad_to and pad_rows reach the batches: a run on lengths rounded up to 16 and
    sentences to a multiple of 8 logs the unpadded run's losses."""
    import json

    from test_runs import TINY

    import aiayn.runs.recipes as recipes
    from aiayn.runs.recipes import train

    losses, shapes = {}, {}

    def spied(*args, **kwargs):  # the train command's batches, and the shapes of the first epoch's
        batches = EpochBatches(*args, **kwargs)
        shapes[kwargs.get("pad_to")] = {tuple(b.src.shape) + (b.tgt_in.size(1),) for b in batches(0)}
        return batches

    for pad_to in (None, 16):
        # no dropout: the same draws either way
        cfg = TINY.with_changes(epochs=1, pad_to=pad_to, pad_rows=pad_to and 8)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(recipes, "EpochBatches", spied)
            train(cfg, tmp_path / f"run-{pad_to}", root=root, device="cpu", progress=False)
        lines = (tmp_path / f"run-{pad_to}" / "metrics.jsonl").read_text().splitlines()
        losses[pad_to] = [r["loss"] for r in map(json.loads, lines) if r["event"] == "step"]
    assert all(b % 8 == 0 and s % 16 == 0 and t % 16 == 0 for b, s, t in shapes[16])
    assert any(b % 8 or s % 16 or t % 16 for b, s, t in shapes[None])  # nothing was a multiple already
    assert len(losses[None]) == len(losses[16]) > 3
    assert losses[16] == pytest.approx(losses[None], rel=1e-4)
    for name in ("pad_to", "pad_rows"):
        with pytest.raises(ValueError, match=name):
            TINY.with_changes(**{name: 0})


def test_every_epoch_has_the_same_batch_shapes():
    """Only pairs of equal lengths are reordered from epoch to epoch, so each epoch's batches have the
    same shapes, in another order: a CUDA graph captured for a shape in the first epoch serves every later one."""
    from collections import Counter

    batches = EpochBatches(random_pairs(n=400, seed=7), 200)

    def shapes(epoch: int) -> Counter:
        return Counter((*b.src.shape, b.tgt_out.size(1)) for b in batches(epoch))

    assert shapes(0) == shapes(1) == shapes(2)
    assert batches.indices(0) != batches.indices(1)  # other pairs, other order
