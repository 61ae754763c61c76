"""aiayn.decoding.search: greedy decoding, beam search and sampling, on random and trained models."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from aiayn.decoding import common as decoding_common
from aiayn.decoding.search import (
    BeamSearchOutput,
    beam_search,
    decode_sorted,
    gnmt_length_penalty,
    greedy_decode,
    length_penalty_limit,
    sample,
)
from aiayn.engine.kv_cache import KVCache, decode_cached, new_cache
from aiayn.engine.switch import set_fast
from aiayn.loss import LabelSmoothingLoss
from aiayn.masks import decoder_mask, padding_mask
from aiayn.model import Transformer, TransformerConfig
from aiayn.schedule import make_optimizer, noam_rate, noam_scheduler
from aiayn.training.batches import copy_task_batches
from aiayn.training.loop import fit

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
    """A stand-in model whose next-token logits are always the same, whatever the input.

    It has no decoder layers to cache, so it decodes with ``use_cache=False`` (the whole prefix).
    """

    def __init__(self, logits: list[float], pad_id: int = PAD):
        super().__init__()
        self.config = SimpleNamespace(pad_id=pad_id)
        self.logits = torch.tensor(logits)

    def encode(self, src, src_mask):
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, memory, src_mask, tgt, tgt_mask=None):
        return torch.zeros(tgt.size(0), tgt.size(1), 1)

    def generator(self, x):
        return self.logits.expand(x.size(0), -1)


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
    out = greedy_decode(FixedLogits(logits), torch.ones(3, 4, dtype=torch.long), None, 10, BOS, EOS, use_cache=False)
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
        use_cache=False,
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
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=0.0), r"above 0, such as .*\(got 0\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=-1), r"temperature must be .*\(got -1\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_k=0), r"top-k must be a whole number .*\(got 0\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_p=0.0), r"top-p must be a number .*\(got 0\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_p=1.5), r"top-p must be .* at most 1, .*\(got 1.5\)"),
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


DECODERS = {
    "greedy_decode": lambda m, *a: greedy_decode(m, *a),
    "beam_search": lambda m, *a: beam_search(m, *a, beam_size=2),
    "sample": lambda m, *a: sample(m, *a, generator=torch.Generator().manual_seed(0)),
}


@pytest.mark.parametrize("decode", DECODERS.values(), ids=DECODERS.keys())
@pytest.mark.parametrize(
    ("bos_id", "eos_id", "message"),
    [
        (BOS, -1, r"eos_id must be a token id in \[0, 12\) \(the model's output vocabulary\), got -1"),
        (BOS, V, r"eos_id must be a token id in \[0, 12\) \(the model's output vocabulary\), got 12"),
        (BOS, 99, r"eos_id must be a token id in \[0, 12\) .*, got 99"),
        (-1, EOS, r"bos_id must be a token id in \[0, 12\) \(the model's output vocabulary\), got -1"),
        (V, EOS, r"bos_id must be a token id in \[0, 12\) .*, got 12"),
        (1.0, EOS, r"bos_id must be an integer, got 1.0"),
        (BOS, True, r"eos_id must be an integer, got True"),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused(decode, bos_id, eos_id, message):
    with pytest.raises(ValueError, match=message):
        decode(random_model(), SRC, None, 5, bos_id, eos_id)


def test_a_stand_in_model_without_a_vocabulary_size_still_refuses_negative_ids():
    model = FixedLogits([0.0] * 5)  # its config has no tgt_vocab_size
    with pytest.raises(ValueError, match=r"eos_id must be a token id >= 0, got -1"):
        greedy_decode(model, SRC, None, 5, BOS, -1, use_cache=False)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: greedy_decode(m, SRC[:0], None, 5, BOS, EOS), ValueError,
         r"src: expected at least one sentence of at least one token, got shape \(0, 3\)"),
        (lambda m: beam_search(m, SRC[:, :0], None, 5, BOS, EOS), ValueError,
         r"src: expected at least one sentence of at least one token, got shape \(2, 0\)"),
        (lambda m: greedy_decode(m, SRC.tolist(), None, 5, BOS, EOS), TypeError,
         "src: expected a torch.Tensor of token ids, got list"),
        (lambda m: sample(m, SRC.float(), None, 5, BOS, EOS), TypeError,
         "src: expected an integer tensor of token ids"),
        (lambda m: greedy_decode(m, SRC.to("meta"), None, 5, BOS, EOS), ValueError,
         r"src is on meta but the model is on cpu: move it with src.to\('cpu'\)"),
        (lambda m: greedy_decode(m, SRC, padding_mask(SRC, PAD).to("meta"), 5, BOS, EOS), ValueError,
         "src_mask is on meta but the model is on cpu"),
        (lambda m: greedy_decode(m, SRC, [[True] * 3] * 2, 5, BOS, EOS), TypeError,
         r"src_mask: expected a boolean \(B, 1, 1, S\) torch.Tensor or None, got list"),
        (lambda m: greedy_decode(m, SRC, None, "5", BOS, EOS), ValueError,
         "max_len must be a positive integer .* got '5'"),
        (lambda m: greedy_decode(m, SRC, None, 5.0, BOS, EOS), ValueError,
         "max_len must be a positive integer .* got 5.0"),
        (lambda m: greedy_decode(m, SRC, None, torch.tensor([2.0, 3.0]), BOS, EOS), ValueError,
         r"max_len: expected one positive integer per sentence \(2\), got \[2.0, 3.0\]"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, beam_size=2.0), ValueError,
         "beam_size must be a positive integer, got 2.0"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, length_penalty=math.inf), ValueError,
         "length_penalty .* non-negative number, got inf"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, length_penalty=math.nan), ValueError,
         "length_penalty .* non-negative number, got nan"),
        (lambda m: beam_search(m, SRC, None, 5, BOS, EOS, length_penalty=1e308), ValueError,
         r"length_penalty \(alpha\) 1e\+308 makes the penalty \(\(5 \+ L\) / 6\)\^alpha overflow torch.float32"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=True), ValueError,
         r"temperature must be a number above 0, .*\(got true\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, temperature=math.inf), ValueError,
         r"temperature must be a number above 0, .*\(got infinity\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, top_p=math.nan), ValueError,
         r"top-p must be a number above 0 and at most 1, .*\(got not a number\)"),
        (lambda m: sample(m, SRC, None, 5, BOS, EOS, generator=0), TypeError,
         "generator: expected a torch.Generator or None, got int"),
    ],
)  # fmt: skip
def test_careless_inputs_end_in_one_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call(random_model())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_a_generator_on_another_device_is_refused():
    model = random_model().cuda()
    with pytest.raises(ValueError, match=r"generator is on cpu but src is on cuda:0"):
        sample(model, SRC.cuda(), None, 5, BOS, EOS, generator=torch.Generator())


def test_length_penalty_limit_and_overflow():
    assert length_penalty_limit(4999) == pytest.approx(13.19, abs=0.01)  # the command line's bound
    assert length_penalty_limit(0) == math.inf
    lengths = torch.tensor([1, 500])
    assert torch.isfinite(gnmt_length_penalty(lengths, length_penalty_limit(500) - 0.01)).all()
    message = r"overflow torch.float32 for an output of L = 500 tokens; use an alpha of at most 20.02"
    with pytest.raises(ValueError, match=message):
        gnmt_length_penalty(lengths, 20.1)
    with pytest.raises(ValueError, match=r"overflow torch.float64 .* L = 1000000 tokens"):
        gnmt_length_penalty(10**6, 100.0)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((3, "0.6"), ValueError, r"length_penalty \(alpha\) must be a finite number >= 0, got '0.6'"),
        ((3, -0.5), ValueError, r"length_penalty \(alpha\) must be a finite number >= 0, got -0.5"),
        ((3, math.nan), ValueError, r"length_penalty \(alpha\) must be a finite number >= 0, got nan"),
        ((-1, 0.6), ValueError, "length must be an integer >= 0, got -1"),
        ((2.5, 0.6), ValueError, "length must be an integer >= 0, got 2.5"),
    ],
)
def test_gnmt_length_penalty_refuses_bad_arguments(args, error, message):
    with pytest.raises(error, match=message):
        gnmt_length_penalty(*args)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"sources": "3 2"}, TypeError, "sources: expected a list of id sequences .* got str"),
        ({"sources": torch.tensor([[3, 2]])}, TypeError, "sources: expected a list of id sequences .* got Tensor"),
        ({"sources": [3, 2]}, TypeError, r"sources\[0\]: expected a list of integer token ids, got int"),
        ({"sources": [[3.5, 2]]}, TypeError, r"sources\[0\]: expected integer token ids, got 3.5"),
        ({"sources": [[3, 2], [True, 2]]}, TypeError, r"sources\[1\]: expected integer token ids, got True"),
        ({"beam_size": 0}, ValueError, "beam_size must be an integer >= 1, got 0"),
        ({"beam_size": 1, "length_penalty": math.inf}, ValueError, "must be a finite number >= 0, got inf"),
        ({"beam_size": 1, "length_penalty": 14.0, "max_len_b": 5000}, ValueError,
         r"overflow torch.float32 for an output of L = 4999 tokens; use an alpha of at most 13.19"),
        ({"max_len_a": -1}, ValueError, "max_len_a must be a finite number >= 0, got -1"),
        ({"max_len_a": math.nan}, ValueError, "max_len_a must be a finite number >= 0, got nan"),
        ({"max_len_b": -100}, ValueError, "max_len_b must be an integer >= 0, got -100"),
        ({"max_len_b": 2.5}, ValueError, "max_len_b must be an integer >= 0, got 2.5"),
    ],
)  # fmt: skip
def test_decode_sorted_refuses_careless_inputs(kwargs, error, message):
    kwargs = {"sources": [[3, 2]], **kwargs}
    with pytest.raises(error, match=message):
        decode_sorted(random_model(), bos_id=BOS, eos_id=EOS, **kwargs)


def test_decode_sorted_takes_tensors_and_tuples_as_sources():
    model = random_model()
    lists = decode_sorted(model, [[3, 4, 2], [5, 2]], BOS, EOS, beam_size=1, max_len_b=3)
    assert decode_sorted(model, [torch.tensor([3, 4, 2]), (5, 2)], BOS, EOS, beam_size=1, max_len_b=3) == lists
    assert decode_sorted(model, [], BOS, EOS) == []


def test_max_len_one_returns_bos_only():
    out = greedy_decode(random_model(), SRC, None, 1, BOS, EOS)
    assert torch.equal(out, torch.full((2, 1), BOS))


# --- Key/value cache -------------------------------------------------------------------------------


def padded_targets(model: Transformer, src: torch.Tensor) -> torch.Tensor:
    """Decoder inputs as decoding makes them: ``<bos>``, tokens, and padding after ``<eos>``."""
    return greedy_decode(model, src, None, 10, BOS, EOS, use_cache=False)


@pytest.mark.parametrize("fast", [False, True], ids=["explicit", "fast path"])
@pytest.mark.parametrize("learned_positions", [False, True], ids=["sinusoids", "learned positions"])
def test_cached_logits_equal_teacher_forcing_at_every_step(fast, learned_positions):
    torch.manual_seed(0)
    config = TransformerConfig(V, V, d_model=16, d_ff=32, h=2, N=2, learned_positions=learned_positions)
    model, src = Transformer(config).eval(), random_source()
    tgt = padded_targets(model, src)  # (B, T)
    src_mask = padding_mask(src, PAD)
    with torch.no_grad(), set_fast(model, fast):
        memory = model.encode(src, src_mask)
        teacher = model.generator(model.decode(memory, src_mask, tgt, decoder_mask(tgt, PAD)))  # (B, T, V)
        cache = new_cache(model)
        for t in range(tgt.size(1)):
            step = model.generator(decode_cached(model, memory, src_mask, tgt[:, t : t + 1], cache))  # (B, 1, V)
            assert_close(step[:, 0], teacher[:, t], msg=lambda m, t=t: f"step {t}: {m}")
        assert len(cache) == tgt.size(1)


def test_cache_fed_in_chunks_equals_teacher_forcing():
    model, src = random_model().eval(), random_source()
    tgt = padded_targets(model, src)
    with torch.no_grad():
        memory = model.encode(src)
        teacher = model.decode(memory, padding_mask(src, PAD), tgt)
        cache = new_cache(model)
        parts = tgt.split([3, 1, tgt.size(1) - 4], dim=1)  # several positions at once, then one, then the rest
        chunks = [decode_cached(model, memory, padding_mask(src, PAD), part, cache) for part in parts]
    assert_close(torch.cat(chunks, dim=1), teacher)


def test_cache_runs_the_decoder_over_one_position_per_step(monkeypatch):
    model, src = random_model(), random_source()
    seen: list[int] = []
    decode = model.decode

    def counting_cached(model, memory, src_mask, tgt, cache, tgt_mask=None):
        seen.append(tgt.size(1))
        return decode_cached(model, memory, src_mask, tgt, cache, tgt_mask)

    def counting_decode(memory, src_mask, tgt, tgt_mask=None):
        seen.append(tgt.size(1))
        return decode(memory, src_mask, tgt, tgt_mask)

    monkeypatch.setattr(decoding_common, "decode_cached", counting_cached)
    model.decode = counting_decode
    steps = greedy_decode(model, src, None, 9, BOS, EOS).size(1) - 1
    assert seen == [1] * steps
    seen.clear()
    greedy_decode(model, src, None, 9, BOS, EOS, use_cache=False)
    assert seen == list(range(1, steps + 1))  # the whole prefix again at every step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_same_with_and_without_cache(seed):
    model, src = random_model(seed=seed), random_source(seed=seed)
    assert torch.equal(
        greedy_decode(model, src, None, 12, BOS, EOS), greedy_decode(model, src, None, 12, BOS, EOS, use_cache=False)
    )


@pytest.mark.parametrize("fast", [False, True], ids=["explicit", "fast path"])
@pytest.mark.parametrize("beam_size", [2, 4, 7])
@pytest.mark.parametrize("seed", [0, 1])
def test_beam_search_same_hypotheses_with_and_without_cache(seed, beam_size, fast):
    model, src = random_model(seed=seed), random_source(seed=seed)
    reference = beam_search(model, src, None, 12, BOS, EOS, beam_size, 0.6, use_cache=False)
    with set_fast(model, fast):
        cached = beam_search(model, src, None, 12, BOS, EOS, beam_size, 0.6)
    assert torch.equal(cached.tokens, reference.tokens)
    assert_close(cached.scores, reference.scores)
    assert_close(cached.log_probs, reference.log_probs)


def test_beam_search_with_cache_on_trained_model(copy_model):
    test = copy_task_batches(1, 16, 8, V, seed=99)[0]
    reference = beam_search(copy_model, test.src, test.src_mask, 10, BOS, EOS, 4, use_cache=False)
    cached = beam_search(copy_model, test.src, test.src_mask, 10, BOS, EOS, 4)
    assert torch.equal(cached.tokens, reference.tokens)


def test_sampling_same_with_and_without_cache():
    model, src = random_model(), random_source()
    draws = [
        sample(model, src, None, 12, BOS, EOS, generator=torch.Generator().manual_seed(3), use_cache=use_cache)
        for use_cache in (True, False)
    ]
    assert torch.equal(*draws)


# --- One limit per sentence, batches of similar length ---------------------------------------------


def strip_padding(row: torch.Tensor) -> list[int]:
    ids = row.tolist()
    while ids and ids[-1] == PAD:
        ids.pop()
    return ids


@pytest.mark.parametrize("beam_size", [1, 3])
def test_one_max_len_per_sentence_equals_decoding_each_with_its_own(beam_size):
    model, src = random_model(), random_source()
    limits = [2, 5, 9, 1, 7, 3]
    out = beam_search(model, src, None, limits, BOS, EOS, beam_size).tokens
    for row, limit in enumerate(limits):
        alone = beam_search(model, src[row : row + 1], None, limit, BOS, EOS, beam_size).tokens
        assert strip_padding(out[row]) == strip_padding(alone[0])
        assert len(strip_padding(out[row])) <= limit


def varied_sources(n: int = 11, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (n,), generator=g).tolist()
    return [torch.randint(3, V, (k,), generator=g).tolist() + [EOS] for k in lengths]


@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("trained", [False, True], ids=["random model", "copy model"])
def test_a_translation_does_not_depend_on_its_batch(beam_size, trained, copy_model):
    model = copy_model if trained else random_model()
    sources = varied_sources()
    settings = dict(beam_size=beam_size, max_len_a=1.0, max_len_b=2)
    together = decode_sorted(model, sources, BOS, EOS, batch_size=len(sources), **settings)
    in_threes = decode_sorted(model, sources, BOS, EOS, batch_size=3, **settings)
    alone = [decode_sorted(model, [s], BOS, EOS, **settings)[0] for s in sources]
    assert together == alone == in_threes
    assert len({len(s) for s in sources}) > 3  # the batch really mixes lengths, hence padding
    for s, out in zip(sources, together, strict=True):
        assert out[0] == BOS and len(out) <= int(len(s) + 2) + 1


def test_decode_sorted_copies_with_trained_model(copy_model):
    test = copy_task_batches(1, 8, 8, V, seed=7)[0]  # the copy model knows sentences of 8 tokens
    outputs = decode_sorted(copy_model, test.src.tolist(), BOS, EOS, beam_size=4, batch_size=3, max_len_b=2)
    assert outputs == [[BOS, *s, EOS] for s in test.src.tolist()]


def test_decode_sorted_equals_greedy_on_one_unpadded_batch():
    model = random_model()
    src = torch.randint(3, V, (5, 6), generator=torch.Generator().manual_seed(4))
    greedy = greedy_decode(model, src, None, 6 + 4 + 1, BOS, EOS)
    sorted_out = decode_sorted(model, src.tolist(), BOS, EOS, beam_size=1, max_len_b=4)
    assert sorted_out == [strip_padding(row) for row in greedy]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: greedy_decode(m, SRC, None, [3, 4, 5], BOS, EOS), ValueError, r"per sentence \(2\)"),
        (lambda m: beam_search(m, SRC, None, [3, 0], BOS, EOS), ValueError, r"per sentence .*\[3, 0\]"),
        (lambda m: decode_sorted(m, [[3, 2], []], BOS, EOS), ValueError, "sources must hold 1 to max_len=5000 ids"),
        (lambda m: decode_sorted(m, [[3, 2]], BOS, EOS, batch_size=0), ValueError, "batch_size must be an integer >="),
        (
            lambda m: decode_cached(m, m.encode(SRC), None, SRC[:, :1], []),
            TypeError,
            r"cache: expected a DecoderCache from new_cache\(model\)",
        ),
    ],
)
def test_bad_cache_and_batching_arguments_raise(call, error, message):
    with pytest.raises(error, match=message):
        call(random_model())


def test_a_cache_of_another_batch_size_is_rejected():
    model = random_model().eval()
    cache = new_cache(model)
    with torch.no_grad():
        decode_cached(model, model.encode(SRC), None, SRC[:, :1], cache)
        with pytest.raises(ValueError, match="cache holds 2 sequences but tgt has batch size 1"):
            decode_cached(model, model.encode(SRC[:1]), None, SRC[:1, :1], cache)


# --- Finished sentences leave the batch -------------------------------------------------------------


def ragged_source(seed: int = 0) -> torch.Tensor:
    """Eight sources of 1 to 8 tokens, padded: very different lengths in one batch."""
    g = torch.Generator().manual_seed(seed)
    lengths = [1, 8, 2, 6, 3, 8, 4, 5]
    src = torch.full((len(lengths), max(lengths)), PAD)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(3, V, (n,), generator=g)
    return src


def decode_batch_sizes(model: Transformer, decode) -> list[tuple[int, int | None]]:
    """Run ``decode()`` and return, per decoder step, the rows decoded and the rows of the cross-attention cache."""
    seen = []
    original = model.decode

    def counting_cached(model, memory, src_mask, tgt, cache, tgt_mask=None):
        out = decode_cached(model, memory, src_mask, tgt, cache, tgt_mask)
        seen.append((tgt.size(0), cache.layers[0][1].k.size(0)))
        return out

    def counting_decode(memory, src_mask, tgt, tgt_mask=None):
        seen.append((tgt.size(0), None))
        return original(memory, src_mask, tgt, tgt_mask)

    model.decode = counting_decode
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decoding_common, "decode_cached", counting_cached)
        try:
            decode()
        finally:
            del model.decode  # the class's method again
    return seen


@pytest.mark.parametrize("beam_size", [1, 3])
def test_finished_sentences_leave_the_batch(beam_size):
    model, src = random_model(), ragged_source()
    limits = [2, 9, 3, 7, 4, 9, 5, 6]  # sentences end at different steps, whatever the model says
    B, K = src.size(0), beam_size

    def decode(prune):
        if beam_size == 1:
            return lambda: greedy_decode(model, src, None, limits, BOS, EOS, prune=prune)
        return lambda: beam_search(model, src, None, limits, BOS, EOS, beam_size, prune=prune)

    pruned = decode_batch_sizes(model, decode(True))
    full = decode_batch_sizes(model, decode(False))
    # the reference computes every row at every step, each beam with its own copy of the source
    assert full == [(B * K, B * K)] * len(full)
    assert len(pruned) == len(full)  # the same steps
    rows = [n for n, _ in pruned]
    sources = [s for _, s in pruned]
    assert rows[0] == B  # one beam per sentence at the first step: the others are its copies
    # the cross-attention cache shrinks with the batch
    assert sources == sorted(sources, reverse=True) and sources[-1] < B
    assert all(s <= n <= K * s for n, s in pruned)  # each sentence left has 1 to K beams searched
    if K == 1:
        assert rows == sources
    # a sentence at its limit (t + 1 columns after step t) has left (one that said <eos> too)
    assert all(s <= sum(limit > t + 1 for limit in limits) for t, s in enumerate(sources))
    assert sum(rows) < len(rows) * B * K


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
def test_finished_beams_are_not_decoded(use_cache, copy_model):
    """A beam that said <eos> waits outside the batch for its sentence's others: fewer rows, same search."""
    model, src, K = copy_model, ragged_source(seed=2), 4
    results = []

    def search(prune):
        results.append(beam_search(model, src, None, 12, BOS, EOS, K, 0.6, use_cache, prune))

    pruned = decode_batch_sizes(model, lambda: search(True))
    full = decode_batch_sizes(model, lambda: search(False))
    assert [n for n, _ in full] == [src.size(0) * K] * len(full)
    rows = [n for n, _ in pruned]
    assert any(n % K for n in rows[1:])  # some sentence was searched with fewer than K beams
    assert sum(rows) < sum(n for n, _ in full)
    assert torch.equal(results[0].tokens, results[1].tokens)
    assert_close(results[0].scores, results[1].scores)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
@pytest.mark.parametrize("beam_size", [1, 4])
@pytest.mark.parametrize("trained", [False, True], ids=["random model", "copy model"])
def test_pruned_decoding_equals_computing_every_row(beam_size, use_cache, trained, copy_model):
    model = copy_model if trained else random_model(seed=1)
    src = ragged_source(seed=2)
    for max_len in (12, [2, 11, 3, 9, 4, 12, 6, 7]):
        args = (model, src, None, max_len, BOS, EOS)
        if beam_size == 1:
            pruned = greedy_decode(*args, use_cache, prune=True)
            full = greedy_decode(*args, use_cache, prune=False)
        else:
            pruned_search = beam_search(*args, beam_size, 0.6, use_cache, prune=True)
            full_search = beam_search(*args, beam_size, 0.6, use_cache, prune=False)
            assert_close(pruned_search.scores, full_search.scores)
            assert_close(pruned_search.log_probs, full_search.log_probs)
            pruned, full = pruned_search.tokens, full_search.tokens
        assert torch.equal(pruned, full)
        if trained or isinstance(max_len, list):  # the outputs end at many different steps
            assert len({len(strip_padding(row)) for row in full}) >= 3


def test_decode_sorted_same_with_and_without_pruning(copy_model):
    sources = varied_sources(n=20, seed=3)
    for beam_size in (1, 4):
        settings = dict(beam_size=beam_size, batch_size=8, max_len_b=3)
        assert decode_sorted(copy_model, sources, BOS, EOS, **settings) == decode_sorted(
            copy_model, sources, BOS, EOS, prune=False, **settings
        )


def test_a_reordered_cache_appends_into_its_free_slot_with_the_same_keys():
    torch.manual_seed(0)
    k0, v0 = torch.randn(4, 2, 3, 5), torch.randn(4, 2, 3, 5)  # (B, h, L, d)
    k1, v1 = torch.randn(3, 2, 1, 5), torch.randn(3, 2, 1, 5)
    k2, v2 = torch.randn(3, 2, 2, 5), torch.randn(3, 2, 2, 5)
    beams, drop = torch.tensor([1, 1, 0, 3]), torch.tensor([0, 2, 3])
    cache = KVCache()
    cache.update(k0, v0)
    cache.reorder(beams)  # the surviving beams
    cache.keep_rows(drop)  # then a finished sentence leaves
    assert len(cache) == 3 and cache.k.shape == (3, 2, 4, 5)  # one free slot
    k, v = cache.update(k1, v1)  # written into the free slot
    rows = beams[drop]
    assert torch.equal(k, torch.cat([k0[rows], k1], dim=2))
    assert torch.equal(v, torch.cat([v0[rows], v1], dim=2))
    k, v = cache.update(k2, v2)  # no free slot: appended
    assert len(cache) == 6
    assert torch.equal(k, torch.cat([k0[rows], k1, k2], dim=2))
    assert torch.equal(v, torch.cat([v0[rows], v1, v2], dim=2))
