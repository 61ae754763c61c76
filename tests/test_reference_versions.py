"""The reader's versions (``aiayn.training.reference``, ``aiayn.decoding.reference``) equal the production ones.

Training: in float32 on the CPU, from the same seed and on the same batches, the reference step and
loop give the same losses and the same weights, to the bit, as ``train_step`` and ``fit`` with their
engine's switches off (no autocast, no scaler, no checkpoints). Decoding: the same ids as
``greedy_decode`` and ``beam_search`` on the copy task, every switch off or on (the cache, pruning,
oneDNN), and the same translations as ``translate`` with the published model on test 2016 sentences.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from aiayn.data.multi30k import load_multi30k
from aiayn.decoding import reference as ref_decoding
from aiayn.decoding.search import beam_search, greedy_decode
from aiayn.decoding.translate import translate
from aiayn.loss import LabelSmoothingLoss
from aiayn.model import Transformer, TransformerConfig
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training import reference as ref_training
from aiayn.training.batches import copy_task_batches
from aiayn.training.loop import fit
from aiayn.training.step import train_step

PAD, BOS, EOS = 0, 1, 2
V, SEQ_LEN = 12, 6
MAX_LEN = SEQ_LEN + 2  # <bos>, the letters, <eos>
DATA = Path(__file__).resolve().parents[2] / "shared/data/multi30k"

pytestmark = pytest.mark.usefixtures("one_thread")


def new_run(dropout: float = 0.1, seed: int = 0):
    """A small model with dropout, Adam and the schedule (peak rate 2e-3 at step 50), the same for a seed."""
    torch.manual_seed(seed)
    config = TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=dropout)
    model = Transformer(config)
    optimizer = make_optimizer(model)
    return model, optimizer, noam_scheduler(optimizer, 32, warmup=50, factor=2e-3 / noam_rate(50, 32, 50))


def batches(n: int = 6):
    return copy_task_batches(n, 16, SEQ_LEN, V, PAD, BOS, EOS, seed=3)


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_the_reference_step_is_the_production_step_to_the_bit():
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)
    (a, opt_a, sched_a), (b, opt_b, sched_b) = new_run(), new_run()
    torch.manual_seed(1)  # the same dropout masks for both
    a.train()
    losses_a = [ref_training.train_step(a, x, opt_a, loss_fn, sched_a) for x in batches()]
    torch.manual_seed(1)
    b.train()
    losses_b = [
        train_step(b, x, opt_b, loss_fn, sched_b, clip_norm=1.0, amp_dtype=None).item() for x in batches()
    ]
    assert losses_a == losses_b
    assert len(set(losses_a)) == len(losses_a)  # the weights moved every step
    assert_same_weights(a, b)
    assert sched_a.get_last_lr() == sched_b.get_last_lr()


def test_the_reference_loop_is_fit_to_the_bit_over_epochs():
    loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)
    data = batches(4)
    (a, opt_a, sched_a), (b, opt_b, sched_b) = new_run(), new_run()
    logged = []
    torch.manual_seed(1)
    losses = ref_training.train(
        a, data, opt_a, loss_fn, sched_a, epochs=2, log=lambda *row: logged.append(row)
    )
    torch.manual_seed(1)
    history = fit(b, data, optimizer=opt_b, scheduler=sched_b, loss_fn=loss_fn, epochs=2, progress=False)
    assert losses == history.loss and len(losses) == 8
    assert [row[:2] for row in logged] == [(e, s) for e, s in zip(history.epoch, history.step, strict=True)]
    assert [row[3] for row in logged] == history.lr
    assert_same_weights(a, b)


@pytest.fixture(scope="module")
def copy_model():
    """A copy-task model trained 100 steps with the reference loop: right on many letters, not on all."""
    model, optimizer, scheduler = new_run(dropout=0.0)
    data = copy_task_batches(100, 64, SEQ_LEN, V, PAD, BOS, EOS, seed=0)
    ref_training.train(model, data, optimizer, LabelSmoothingLoss(0.0, ignore_index=PAD), scheduler)
    return model


@pytest.fixture(scope="module")
def copy_test():
    return copy_task_batches(1, 200, SEQ_LEN, V, PAD, BOS, EOS, seed=123)[0]


SWITCHES = [
    {"use_cache": False, "prune": False, "onednn": False},  # the production reference
    {},  # the defaults: cache, pruning, oneDNN
]


@pytest.mark.parametrize("switches", SWITCHES, ids=["switches-off", "defaults"])
def test_reference_greedy_and_beam_give_the_production_ids_on_the_copy_task(copy_model, copy_test, switches):
    args = (copy_model, copy_test.src, copy_test.src_mask, MAX_LEN, BOS, EOS)
    greedy = ref_decoding.greedy_decode(*args)
    assert torch.equal(greedy, greedy_decode(*args, **switches))
    right = (greedy[:, 1:] == copy_test.tgt_out).float().mean()  # letters
    assert 0.3 < right < 0.95, "the model should be half trained, or the beams agree trivially"
    for K, alpha in ((4, 0.6), (3, 0.0), (1, 0.6)):
        beam = ref_decoding.beam_search(*args, beam_size=K, alpha=alpha)
        expected = beam_search(*args, beam_size=K, length_penalty=alpha, **switches).tokens
        assert torch.equal(beam, expected), (K, alpha)
    assert not torch.equal(ref_decoding.beam_search(*args, beam_size=4), greedy)


def test_reference_greedy_stops_at_max_len_as_production_does(copy_model, copy_test):
    for max_len in (1, 2, 4):
        args = (copy_model, copy_test.src, copy_test.src_mask, max_len, BOS, EOS)
        assert torch.equal(ref_decoding.greedy_decode(*args), greedy_decode(*args))
        out = ref_decoding.beam_search(*args)
        assert out.size(1) == max_len and torch.equal(out, beam_search(*args).tokens)


@pytest.fixture(scope="module")
def test_sentences():
    """Five German sentences of test 2016, the first of 5 to 12 words."""
    root = Path(os.environ.get("AIAYN_DATA") or DATA)
    pairs = load_multi30k("test2016", root, download=False)
    return [de for de, _ in pairs if 5 <= len(de.split()) <= 12][:5]


@pytest.mark.parametrize("beam", [1, 4])
def test_reference_translate_gives_the_published_translations(published, test_sentences, beam):
    """Equal to ``translate`` as it runs by default: batched, sorted by length, with every engine twin on
    that its defaults turn on (``set_fast`` as the run's config asks, the cache, pruning, oneDNN)."""
    model, tokenizer = published
    assert len(test_sentences) == 5
    lines = ref_decoding.translate(model, tokenizer, test_sentences, beam=beam)
    assert lines == translate(model, tokenizer, test_sentences, beam=beam)
    assert all(lines) and len(set(lines)) == len(lines)
