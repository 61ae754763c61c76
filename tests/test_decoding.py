"""aiayn.decoding: greedy decoding, beam search and sampling, on random and trained models."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from aiayn.decoding import (
    BeamSearchOutput,
    beam_search,
    gnmt_length_penalty,
    greedy_decode,
    sample,
)
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import Transformer, TransformerConfig
from aiayn.training import (
    LabelSmoothingLoss,
    copy_task_batches,
    fit,
    make_optimizer,
    noam_rate,
    noam_scheduler,
)

PAD, BOS, EOS = 0, 1, 2
V = 12


pytestmark = pytest.mark.usefixtures("one_thread")


def random_model(vocab: int = V, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(vocab, vocab, d_model=16, d_ff=32, h=2, N=2, dropout=0.1))


def random_source(batch: int = 6, length: int = 7, vocab: int = V, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, vocab, (batch, length), generator=g)
    for row in range(1, batch, 2):  # ragged: every other sentence is padded
        src[row, length - row // 2 - 1 :] = PAD
    return src


@pytest.fixture(scope="module")
def copy_model() -> Transformer:
    """A copy-task model trained as in test_training, for half as long: good, not necessarily perfect."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.0))
    optimizer = make_optimizer(model)
    scheduler = noam_scheduler(optimizer, 32, 20, factor=5e-3 / noam_rate(20, 32, 20))
    train = copy_task_batches(300, 64, 8, V, seed=0)
    fit(model, train, optimizer=optimizer, scheduler=scheduler, loss_fn=LabelSmoothingLoss(0.1, PAD), progress=False)
    return model


class FixedLogits(nn.Module):
    """A stand-in model whose next-token logits are always the same, whatever the input."""

    def __init__(self, logits: list[float], pad_id: int = PAD):
        super().__init__()
        self.config = SimpleNamespace(pad_id=pad_id)
        self.logits = torch.tensor(logits)

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, memory, src_mask, tgt, tgt_mask=None, cache=None):
        if cache is not None:
            cache.extend(range(tgt.size(1)))  # the positions it now holds
        return torch.zeros(tgt.size(0), tgt.size(1), 1)

    def new_cache(self):
        return PositionCount()

    def generator(self, x):
        return self.logits.expand(x.size(0), -1)


class PositionCount(list):
    """Stands in for a DecoderCache: its length is the number of positions decoded."""

    def reorder(self, index):
        pass


# --- greedy --------------------------------------------------------------------------------------


def test_greedy_equals_one_sentence_at_a_time():
    model, src = random_model(), random_source()
    out = greedy_decode(model, src, padding_mask(src, PAD), 9, BOS, EOS)
    assert out.dtype == torch.long and out.shape[0] == 6 and out.shape[1] <= 9
    assert (out[:, 0] == BOS).all()
    for row in range(src.size(0)):
        alone = src[row : row + 1, : int((src[row] != PAD).sum())]  # without its padding
        ys = torch.tensor([[BOS]])
        with torch.no_grad():
            model.eval()
            memory = model.encode(alone, padding_mask(alone, PAD))
            for _ in range(8):  # the textbook loop, one sentence, no batching
                logits = model.generator(model.decode(memory, None, ys, decoder_mask(ys, PAD))[:, -1])
                ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], dim=1)
                if ys[0, -1] == EOS:
                    break
        n = ys.size(1)
        assert torch.equal(out[row, :n], ys[0])
        assert (out[row, n:] == PAD).all()  # after <eos>, padding


def test_greedy_stops_when_all_finished_and_pads_after_eos():
    logits = [0.0] * 5
    logits[EOS] = 5.0
    out = greedy_decode(FixedLogits(logits), torch.ones(3, 4, dtype=torch.long), None, 10, BOS, EOS)
    assert torch.equal(out, torch.tensor([[BOS, EOS]] * 3))


def test_greedy_restores_training_mode_and_builds_mask():
    model, src = random_model(), random_source()
    model.train()
    with_mask = greedy_decode(model, src, padding_mask(src, PAD), 6, BOS, EOS)
    assert model.training
    assert torch.equal(greedy_decode(model, src, None, 6, BOS, EOS), with_mask)


def test_greedy_copies_with_trained_model(copy_model):
    test = copy_task_batches(1, 50, 8, V, seed=7)[0]
    out = greedy_decode(copy_model, test.src, test.src_mask, 10, BOS, EOS)
    assert (out[:, 1:] == test.tgt_out).all(dim=1).float().mean() >= 0.9


# --- beam search ---------------------------------------------------------------------------------


def test_gnmt_length_penalty():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2**0.6)
    assert gnmt_length_penalty(7, 0.0) == 1.0
    torch.testing.assert_close(gnmt_length_penalty(torch.tensor([1, 7]), 1.0), torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_size_one_equals_greedy_on_random_model(seed):
    model, src = random_model(seed=seed), random_source(seed=seed)
    greedy = greedy_decode(model, src, None, 9, BOS, EOS)
    result = beam_search(model, src, None, 9, BOS, EOS, beam_size=1)
    assert torch.equal(result.tokens, greedy)


def test_beam_size_one_equals_greedy_on_trained_model(copy_model):
    test = copy_task_batches(1, 32, 8, V, seed=8)[0]
    greedy = greedy_decode(copy_model, test.src, test.src_mask, 10, BOS, EOS)
    assert torch.equal(beam_search(copy_model, test.src, test.src_mask, 10, BOS, EOS, beam_size=1).tokens, greedy)


def test_beam_search_copies_with_trained_model(copy_model):
    test = copy_task_batches(1, 50, 8, V, seed=7)[0]
    tokens, scores, log_probs = beam_search(copy_model, test.src, test.src_mask, 10, BOS, EOS, beam_size=4)
    greedy = greedy_decode(copy_model, test.src, test.src_mask, 10, BOS, EOS)
    exact_beam = (tokens[:, 1:] == test.tgt_out).all(dim=1).float().mean()
    exact_greedy = (greedy[:, 1:] == test.tgt_out).all(dim=1).float().mean()
    assert exact_beam >= exact_greedy
    assert scores.shape == log_probs.shape == (50,)
    lengths = (tokens[:, 1:] != PAD).sum(dim=1)  # generated tokens, <eos> included
    torch.testing.assert_close(scores, log_probs / gnmt_length_penalty(lengths, 0.6))


def _sequence_log_prob(model, src, generated: tuple[int, ...]) -> float:
    """log P(generated | src) by teacher forcing, one full forward pass."""
    tgt_in = torch.tensor([[BOS, *generated[:-1]]])
    with torch.no_grad():
        logits = model(src, tgt_in, padding_mask(src, PAD), decoder_mask(tgt_in, PAD))  # (1, T, V)
    log_p = logits.log_softmax(-1)[0, torch.arange(len(generated)), torch.tensor(generated)]
    return float(log_p.sum())


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
def test_wide_beam_finds_the_exact_best_sequence(alpha):
    """With a beam as wide as the search space, beam search is exhaustive: compare with brute force."""
    vocab, max_len = 5, 4  # up to 3 generated tokens from 5 ids: 5 + 25 + 125 candidates at most
    model = random_model(vocab=vocab, seed=3).eval()
    src = torch.tensor([[3, 4, 3]])
    best_score, best_seq = -math.inf, None
    for n in range(1, max_len):
        for seq in itertools.product(range(vocab), repeat=n):
            if EOS in seq[:-1] or (n < max_len - 1 and seq[-1] != EOS):
                continue  # <eos> only at the end; shorter than the limit only if finished
            score = _sequence_log_prob(model, src, seq) / gnmt_length_penalty(n, alpha)
            if score > best_score:
                best_score, best_seq = score, seq
    result = beam_search(model, src, None, max_len, BOS, EOS, beam_size=vocab**3, length_penalty=alpha)
    got = result.tokens[0, 1:].tolist()
    assert tuple(got[: len(best_seq)]) == best_seq
    assert all(t == PAD for t in got[len(best_seq) :])
    assert result.scores[0].item() == pytest.approx(best_score, abs=1e-5)


def test_beam_search_returns_named_tuple_and_restores_mode():
    model, src = random_model(), random_source()
    model.train()
    result = beam_search(model, src, None, 6, BOS, EOS, beam_size=3)
    assert isinstance(result, BeamSearchOutput) and model.training
    assert result.tokens.shape[0] == 6 and result.tokens.shape[1] <= 6 and (result.tokens[:, 0] == BOS).all()
    for row in result.tokens.tolist():  # after <eos>, padding only
        if EOS in row:
            assert all(t == PAD for t in row[row.index(EOS) + 1 :])


# --- sampling ------------------------------------------------------------------------------------


def test_sampling_limits_equal_greedy():
    model, src = random_model(), random_source()
    greedy = greedy_decode(model, src, None, 9, BOS, EOS)
    assert torch.equal(sample(model, src, None, 9, BOS, EOS, top_k=1), greedy)
    assert torch.equal(sample(model, src, None, 9, BOS, EOS, top_p=1e-6), greedy)
    assert torch.equal(sample(model, src, None, 9, BOS, EOS, temperature=1e-4), greedy)


def test_sampling_is_reproducible_with_a_generator():
    model, src = random_model(), random_source()
    a = sample(model, src, None, 9, BOS, EOS, generator=torch.Generator().manual_seed(5))
    b = sample(model, src, None, 9, BOS, EOS, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and (a[:, 0] == BOS).all()


def _first_tokens(logits: list[float], n: int = 20_000, **kwargs) -> torch.Tensor:
    model = FixedLogits(logits)
    out = sample(
        model,
        torch.ones(n, 2, dtype=torch.long),
        None,
        2,
        BOS,
        EOS,
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )
    return torch.bincount(out[:, 1], minlength=len(logits)).float() / n


def test_sampling_follows_the_tempered_distribution():
    logits = [-1.0, 0.0, 0.5, 1.0, 2.0]
    for temperature in (0.5, 1.0, 2.0):
        expected = (torch.tensor(logits) / temperature).softmax(-1)
        freq = _first_tokens(logits, temperature=temperature)
        torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


def test_top_k_and_top_p_truncate():
    logits = [0.0, 1.0, 2.0, 3.0, 4.0]  # probabilities about .01 .03 .09 .23 .64
    freq = _first_tokens(logits, top_k=2)
    assert freq[:3].sum() == 0 and freq[3:].sum() == 1
    expected = torch.tensor(logits[3:]).softmax(-1)
    torch.testing.assert_close(freq[3:], expected, atol=0.015, rtol=0)
    freq = _first_tokens(logits, top_p=0.8)  # .64 < .8, .64 + .23 >= .8: the two most probable remain
    assert freq[:3].sum() == 0 and freq[3:].sum() == 1
    freq = _first_tokens(logits, top_p=0.5)  # the most probable alone reaches .5
    assert freq[4] == 1


# --- bad input -----------------------------------------------------------------------------------

SRC = torch.ones(2, 3, dtype=torch.long)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=0.0), "temperature must be a positive .* got 0.0"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=-1), "temperature must be a positive number, got -1"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_k=0), "top_k must be a positive integer or None, got 0"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_p=0.0), r"top_p must be in \(0, 1\] or None, got 0.0"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_p=1.5), r"top_p must be in \(0, 1\] or None, got 1.5"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, beam_size=0), "beam_size must be a positive integer, got 0"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, length_penalty=-1), "length_penalty .* non-negative"),
        (lambda m: greedy_decode(m, SRC, None, 0, BOS, EOS), "max_len must be a positive integer .* got 0"),
        (lambda m: beam_search(m, SRC, None, 0, BOS, EOS), "max_len must be a positive integer .* got 0"),
        (lambda m: sample(m, SRC, None, 0, BOS, EOS), "max_len must be a positive integer .* got 0"),
        (lambda m: greedy_decode(m, SRC[0], None, 5, BOS, EOS), r"src: expected shape \(B, S\) .* got \(3,\)"),
        (lambda m: greedy_decode(m, SRC, None, 5, PAD, EOS), "bos_id must differ from the padding id"),
    ],
)
def test_bad_arguments_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call(random_model())


def test_max_len_one_returns_bos_only():
    out = greedy_decode(random_model(), SRC, None, 1, BOS, EOS)
    assert torch.equal(out, torch.full((2, 1), BOS))
