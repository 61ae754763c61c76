"""aiayn.decoding.strategies: the searches by name, the one place that picks one, and a new one in one file.

The toy strategy "second-best" (the second most probable piece at every step) is written and registered
here, in the test file alone: ``translate(..., strategy="second-best")`` runs it with no other file touched.
Each registration a test makes is undone when it ends, so the registry never leaks between tests.
"""

from __future__ import annotations

import pytest
import torch

from aiayn.data.tokenizer import Tokenizer
from aiayn.decoding import strategies
from aiayn.decoding.search import (
    _generate,
    beam_search,
    decode_sorted,
    greedy_decode,
)
from aiayn.decoding.strategies import SearchOptions, register, unregister
from aiayn.decoding.translate import source_ids, translate
from aiayn.model import Transformer, TransformerConfig
from conftest import PUBLISHED

pytestmark = pytest.mark.usefixtures("one_thread")

PAD, BOS, EOS = 0, 1, 2
SENTENCES = ["Ein Hund läuft über die Wiese.", "Zwei Männer spielen Fußball.", "Ein Kind."]


# --- The toy strategy: one function and its registration ------------------------------------------


def second_best(model, src, src_mask, limits, bos_id, eos_id, options: SearchOptions) -> torch.Tensor:
    """Pick the second most probable piece at every step: greedy decoding's loop, another choice."""

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return logits.topk(2, dim=-1).indices[:, 1]  # (B, V) -> (B,)

    o = options
    return _generate(model, src, src_mask, limits, bos_id, eos_id, choose, o.use_cache, o.prune, o.onednn)


@pytest.fixture
def toy():
    """Register "second-best" for one test; give the options it was called with; unregister it after."""
    calls: list[SearchOptions] = []

    @register("second-best")
    def decode(model, src, src_mask, limits, bos_id, eos_id, options):
        calls.append(options)
        return second_best(model, src, src_mask, limits, bos_id, eos_id, options)

    try:
        yield calls
    finally:
        unregister("second-best")


@pytest.fixture(scope="module")
def tiny():
    """A random model as small as the published tokenizer's 8,000 pieces allow, with that tokenizer."""
    tokenizer = Tokenizer(PUBLISHED / "tokenizer.model")
    V = tokenizer.vocab_size
    torch.manual_seed(0)
    config = TransformerConfig(V, V, d_model=16, d_ff=32, h=2, N=1, max_len=64)
    return Transformer(config).eval(), tokenizer


def test_translate_runs_a_strategy_registered_in_a_test_file(tiny, toy):
    model, tokenizer = tiny
    log: list[str] = []
    lines = translate(model, tokenizer, SENTENCES, max_len_b=4, strategy="second-best", log=log.append)
    assert toy == [SearchOptions(4, 0.6, True, True, False)]  # one batch; oneDNN is on around it
    assert log[0].endswith("(second-best, float32)")
    sources = source_ids(tokenizer, SENTENCES, model.config.max_len)
    outputs = decode_sorted(model, sources, BOS, EOS, max_len_b=4, strategy="second-best")
    assert lines == tokenizer.decode_batch(outputs)
    # the first piece of each output is the model's second choice, never its first
    greedy = decode_sorted(model, sources, BOS, EOS, beam_size=1, max_len_b=4)
    for ids, out, best in zip(sources, outputs, greedy, strict=True):
        src = torch.tensor([ids])
        with torch.no_grad():
            memory = model.encode(src, None)
            logits = model.generator(model.decode(memory, None, torch.tensor([[BOS]]), None)[:, -1])
        assert [best[1], out[1]] == logits[0].topk(2).indices.tolist()


def test_the_registry_holds_the_built_ins_alone_after_a_test():
    assert strategies.names() == ["beam", "greedy"]
    assert strategies.get("beam").options == ("beam_size", "length_penalty", "use_cache", "prune", "onednn")
    assert strategies.get("greedy").options == ("use_cache", "prune", "onednn")


# --- One decision point, the old choice bit for bit -----------------------------------------------


def random_model(vocab: int = 12) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab, vocab, d_model=16, d_ff=32, h=2, N=2, dropout=0.1))


def random_sources(vocab: int = 12) -> list[list[int]]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() + [EOS] for n in (3, 7, 5, 9, 1, 6, 4)]


def old_choice(model, sources, beam_size, batch_size, max_len_b, **engine) -> list[list[int]]:
    """``decode_sorted`` as it was before the registry: ``greedy_decode`` for K = 1, else ``beam_search``."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out = [None] * len(sources)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        src = torch.full((len(chunk), max(len(sources[i]) for i in chunk)), PAD)
        for row, i in enumerate(chunk):
            src[row, : len(sources[i])] = torch.tensor(sources[i])
        limits = [min(len(sources[i]) + max_len_b + 1, model.config.max_len) for i in chunk]
        args = (model, src, None, limits, BOS, EOS)
        if beam_size == 1:
            tokens = greedy_decode(*args, **engine)
        else:
            tokens = beam_search(*args, beam_size, **engine).tokens
        for row, i in enumerate(chunk):
            ids = tokens[row].tolist()
            while ids[-1] == PAD:
                ids.pop()
            out[i] = ids
    return out


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("prune", [True, False])
def test_no_strategy_is_the_old_choice_bit_for_bit(beam_size, prune):
    model, sources = random_model(), random_sources()
    expected = old_choice(model, sources, beam_size, 3, 8, prune=prune, onednn=False)
    settings = dict(batch_size=3, max_len_b=8, prune=prune)
    got = decode_sorted(model, sources, BOS, EOS, beam_size, **settings, onednn=False)
    assert got == expected
    named = "greedy" if beam_size == 1 else "beam"
    assert decode_sorted(model, sources, BOS, EOS, beam_size, **settings, strategy=named) == got


def test_a_strategy_named_runs_whatever_the_beam_size():
    model, sources = random_model(), random_sources()
    greedy = decode_sorted(model, sources, BOS, EOS, beam_size=1, max_len_b=8)
    assert decode_sorted(model, sources, BOS, EOS, beam_size=4, max_len_b=8, strategy="greedy") == greedy
    assert strategies.pick(None, 1).name == "greedy" and strategies.pick(None, 2).name == "beam"
    assert strategies.pick("greedy", 4).name == "greedy"


# --- What the registry refuses ----------------------------------------------------------------------


def test_a_name_registered_twice_is_refused_and_the_first_stays():
    first = strategies.get("greedy").decode
    with pytest.raises(ValueError, match=r"a decoding strategy named 'greedy' is registered already "
                       r"\(aiayn\.decoding\.search\._greedy_strategy\): choose another name"):
        register("greedy")(second_best)
    assert strategies.get("greedy").decode is first


def test_the_same_function_registered_again_replaces_itself():
    def make():  # what reloading the module that registers it gives: a new function, the same place
        def decode(*args):
            return second_best(*args)

        return decode

    first, again = make(), make()
    register("again")(first)
    try:
        register("again")(again)
        assert strategies.get("again").decode is again
    finally:
        unregister("again")


def test_an_unknown_name_lists_the_registered_ones(tiny):
    model, tokenizer = tiny
    message = r"unknown decoding strategy 'nucleus'; registered: 'beam', 'greedy'"
    with pytest.raises(ValueError, match=message):
        translate(model, tokenizer, SENTENCES, strategy="nucleus")
    with pytest.raises(ValueError, match=message):
        decode_sorted(random_model(), random_sources(), BOS, EOS, strategy="nucleus")
    with pytest.raises(ValueError, match=message):
        unregister("nucleus")
    with pytest.raises(TypeError, match="strategy: expected a name \\(str\\), got int"):
        strategies.get(4)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("", (), "name: expected a non-empty str, got ''"),
        ("wide", ("beam_size", "width"), r"options: 'width' are not fields of SearchOptions \(beam_size, "),
    ],
)
def test_a_bad_registration_is_refused(name, options, message):
    with pytest.raises(ValueError, match=message):
        register(name, options)
    assert strategies.names() == ["beam", "greedy"]


def test_a_strategy_that_returns_no_batch_of_ids_is_named():
    register("broken")(lambda model, src, *rest: src[0])  # (S,), not (B, L)
    try:
        with pytest.raises(ValueError, match=r"decoding strategy 'broken' returned shape \(10,\), expected "
                           r"\(B, L\) token ids with B = 1"):
            decode_sorted(random_model(), random_sources()[3:4], BOS, EOS, strategy="broken")
    finally:
        unregister("broken")
