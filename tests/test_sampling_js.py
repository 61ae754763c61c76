"""The page's sampler, aiayn/web/sampling.mjs, is aiayn.decoding.search.sample's choice and aiayn.decoding.seeded.

Python writes its draws for random logits under every kind of setting to tests/js/sampling.cases.json
(``python tests/test_sampling_js.py`` writes it again); tests/js/sampling.test.mjs makes the same draws in
JavaScript and must get the same tokens. What Python's ``sample`` does with a seed is checked here too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from aiayn.decoding.search import check_sampling, sample, sampling_probs
from aiayn.decoding.seeded import Mulberry32, check_seed, draw
from aiayn.model import Transformer, TransformerConfig

REPO = Path(__file__).resolve().parents[1]
CASES = REPO / "tests/js/sampling.cases.json"
SETTINGS = [  # temperature, top_k, top_p
    (1.0, None, None), (0.5, None, None), (1.7, None, None), (1.0, 5, None), (1.0, 1, None),
    (1.0, None, 0.9), (1.0, None, 0.3), (0.8, 10, 0.95), (2.0, 3, 0.5), (1.0, 200, 1.0),
]  # fmt: skip
REFUSED = [  # temperature, top_k, top_p, seed: what a reader can type wrong in the page's fields
    (0.0, None, None, 1), (-1.5, None, None, 1), (None, None, None, 1), (float("inf"), None, None, 1),
    (1.0, 0, None, 1), (1.0, 2.5, None, 1), (1.0, None, 0.0, 1), (1.0, None, 1.5, 1),
    (1.0, None, None, -1), (1.0, None, None, 2**32), (1.0, None, None, 7.5), (1.0, None, None, None),
]  # fmt: skip


def refusal(temperature, top_k, top_p, seed) -> str:
    """Python's message for settings the sampler refuses: check_sampling's, then the seed's."""
    try:
        check_sampling(temperature, top_k, top_p)
        check_seed(seed)
    except ValueError as err:
        return str(err)
    raise AssertionError(f"{(temperature, top_k, top_p, seed)} were not refused")


def _json_number(x):
    return "Infinity" if x == float("inf") else x  # JSON has no infinity: the test reads this one back


def sampling_cases() -> dict:
    """Uniform numbers of a few seeds, and eight draws in a row under each setting."""
    torch.manual_seed(0)
    cases = []
    for n, (temperature, top_k, top_p) in enumerate(SETTINGS):
        logits = torch.randn(8, 40) * 3  # (steps, V): one row a step
        random = Mulberry32(1000 + n)
        probs = sampling_probs(logits, temperature, top_k, top_p)  # (steps, V)
        ids = [draw(row[None], random).item() for row in probs]
        cases.append(
            {
                "seed": 1000 + n,
                "temperature": temperature,
                "top_k": top_k,
                "top_p": top_p,
                "logits": logits.tolist(),
                "ids": ids,
            }
        )
    streams = {
        seed: [round(u * 2**32) for u in _numbers(seed, 5)]
        for seed in (0, 1, 42, 2**31, 2**32 - 1)
    }
    return {
        "what": "aiayn.decoding.seeded and search.sampling_probs (tests/test_sampling_js.py writes this file)",
        "streams": {str(k): v for k, v in streams.items()},
        "draws": cases,
        "refusals": [
            {
                "temperature": _json_number(t),
                "top_k": k,
                "top_p": p,
                "seed": seed,
                "message": refusal(t, k, p, seed),
            }
            for t, k, p, seed in REFUSED
        ],
    }


def _numbers(seed: int, n: int) -> list[float]:
    random = Mulberry32(seed)
    return [random.next() for _ in range(n)]


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing: the page's JavaScript is tested with node --test")
    return node


def test_the_committed_sampling_cases_are_python_s():
    committed = json.loads(CASES.read_text("utf-8"))
    assert committed == sampling_cases(), f"{CASES} is out of date: `python tests/test_sampling_js.py`"


def test_the_javascript_sampler_draws_python_s_tokens():
    command = [_node(), "--test", str(REPO / "tests/js/sampling.test.mjs")]
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_mulberry32_is_uniform_and_in_range():
    numbers = torch.tensor(_numbers(7, 20000), dtype=torch.float64)
    assert 0 <= numbers.min() and numbers.max() < 1
    # ten bins of 2,000 expected each: a chi-square far below its 0.1 % point (27.9, 9 df)
    counts = torch.histc(numbers, bins=10, min=0, max=1)
    assert ((counts - 2000) ** 2 / 2000).sum() < 27.9


def test_draw_follows_the_probabilities_and_never_draws_a_zero():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(4000, 1)
    ids = draw(probs, Mulberry32(3))
    counts = torch.bincount(ids, minlength=6).double() / 4000
    assert counts[[0, 2, 5]].sum() == 0
    torch.testing.assert_close(counts[[1, 3, 4]], torch.tensor([0.5, 0.3, 0.2]).double(), atol=0.03, rtol=0)


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True, "7"])
def test_a_seed_outside_32_bits_is_refused(seed):
    with pytest.raises((ValueError, TypeError), match="seed"):
        Mulberry32(seed)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((0.0, None, None, 1), "the temperature must be a number above 0, such as 0.7 or 1.5 (got 0)"),
        ((None, None, None, 1), "the temperature must be a number above 0, such as 0.7 or 1.5 (got nothing)"),
        ((float("nan"), None, None, 1), "the temperature must be a number above 0, such as 0.7 or 1.5 "
                                        "(got not a number)"),
        ((1.0, 2.5, None, 1), "top-k must be a whole number from 1 up, or nothing to keep every piece (got 2.5)"),
        ((1.0, None, 1.5, 1), "top-p must be a number above 0 and at most 1, or nothing to keep every piece "
                              "(got 1.5)"),
        ((1.0, None, None, 2**32), "the seed must be a whole number from 0 to 4,294,967,295 (got 4,294,967,296)"),
        ((1.0, None, None, -1), "the seed must be a whole number from 0 to 4,294,967,295 (got -1)"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_in_the_reader_s_words(settings, message):
    """The page shows these messages as they are: what the reader typed and what the field allows."""
    assert refusal(*settings) == message


def _tiny_model() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, d_ff=32, h=2, N=1)
    return Transformer(config).eval()


def test_sample_with_a_seed_repeats_itself_and_follows_its_seed():
    model, src = _tiny_model(), torch.tensor([[5, 6, 7, 8, 2]])
    args = (model, src, None, 12, 1, 2)
    runs = {seed: sample(*args, temperature=2.0, seed=seed) for seed in range(6)}
    torch.testing.assert_close(sample(*args, temperature=2.0, seed=3), runs[3])
    assert len({tuple(t.flatten().tolist()) for t in runs.values()}) > 1
    # every way of running a step draws the same tokens
    for use_cache in (False, True):
        for prune in (False, True):
            again = sample(*args, temperature=2.0, seed=3, use_cache=use_cache, prune=prune)
            torch.testing.assert_close(again, runs[3])


def test_sample_with_a_seed_draws_each_token_from_sampling_probs():
    """Re-derive the tokens step by step: the teacher-forced logits, the same filters, the same numbers."""
    model, src = _tiny_model(), torch.tensor([[5, 6, 7, 8, 2]])
    out = sample(model, src, None, 10, 1, 2, temperature=1.5, top_k=6, top_p=0.9, seed=11)
    random, ys = Mulberry32(11), out[:, :1]
    for t in range(1, out.size(1)):
        logits = model(src, ys)[:, -1]  # (1, V)
        token = draw(sampling_probs(logits, 1.5, 6, 0.9), random)
        assert token.item() == out[0, t].item()
        if token.item() == 2:
            break
        ys = torch.cat([ys, token[:, None]], dim=1)


def test_a_seed_and_a_generator_together_are_refused():
    model, src = _tiny_model(), torch.tensor([[5, 6, 2]])
    with pytest.raises(ValueError, match="generator or a seed, not both"):
        sample(model, src, None, 5, 1, 2, generator=torch.Generator(), seed=1)


if __name__ == "__main__":
    CASES.write_text(json.dumps(sampling_cases(), indent=1) + "\n")
    print(f"wrote {CASES}")
