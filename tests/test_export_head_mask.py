"""The page's graphs take a head mask (issue 44): ``head_mask (3, N, h)``, an input of the encoder and
the step graph, applied as ``MultiHeadAttention.attend`` applies ``set_head_mask``'s.

All ones gives the translations of the model with every head; a mask gives, on the float32 graphs,
the masked PyTorch model's greedy translation; ``masked_bleu`` (what the page's grid prints) is
sacreBLEU of those translations; a bad mask is refused with what was expected.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from sacrebleu.metrics import BLEU

from aiayn.data.multi30k import BOS, EOS, load_multi30k
from aiayn.decoding.search import decode_sorted
from aiayn.export import graphs, scores
from aiayn.export import translator as tr
from aiayn.model import set_head_mask
from aiayn.runs.published import results_dir

pytestmark = pytest.mark.usefixtures("one_thread")


def masks(shape) -> dict[str, np.ndarray]:
    """The page's presets, and a seeded random mask with a quarter of the heads off."""
    kinds, N, h = shape
    ablation = json.loads((results_dir() / "multi30k.head_ablation.json").read_text())
    found = {}
    one = np.zeros(shape, np.float32)  # one head per layer: 11.2's kept head
    for k, kind in enumerate(("encoder", "decoder_self", "cross")):
        for n in range(N):
            one[k, n, ablation["results"][f"keep_one:{kind}:{n}"]["kept"]] = 1
    found["one head per layer"] = one
    no_cross = np.ones(shape, np.float32)
    no_cross[2, N - 1] = 0
    found["no cross-attention in the last layer"] = no_cross
    rng = np.random.default_rng(44)
    found["random"] = (rng.random(shape) > 0.25).astype(np.float32)
    return found


@pytest.fixture(scope="module")
def pairs(root):
    return load_multi30k("test2016", root)[:12]


def test_the_mask_is_an_input_of_the_encoder_and_the_step_graph(exported):
    import onnx

    for name in ("encoder", "decoder_step"):
        for int8 in (False, True):
            graph = onnx.load(exported / graphs.graph_file(name, int8), load_external_data=False).graph
            inputs = {v.name: v for v in graph.input}
            dims = inputs[graphs.HEAD_MASK].type.tensor_type.shape.dim
            assert [d.dim_value for d in dims] == [3, 3, 8], name
    assert tr.OnnxModel(exported, int8=False).head_mask_shape == (3, 3, 8)


def test_all_ones_translates_as_every_head(published, exported, pairs):
    """None, all ones as an array and as the page's nested lists: the same ids, and the PyTorch
    model's with every head (greedy, float32)."""
    model, tokenizer = published
    vocab, settings = tr.Vocabulary.load(exported), tr.load_settings(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    ids = [tokenizer.encode(s) + [EOS] for s, _ in pairs]
    expected = decode_sorted(model, ids, BOS, EOS, beam_size=1)
    ones = np.ones((3, 3, 8), np.float32)
    for src, theirs in zip(ids, expected, strict=True):
        limit = tr.output_limit(len(src), settings)
        every = tr.greedy(onnx_model, vocab, src, limit)
        assert every == theirs
        assert tr.greedy(onnx_model, vocab, src, limit, head_mask=ones) == every
        assert tr.greedy(onnx_model, vocab, src, limit, head_mask=ones.tolist()) == every
    # the int8 graphs too, the page's: the same ids with None and with ones
    int8 = tr.OnnxModel(exported, int8=True)
    for src in ids:
        limit = tr.output_limit(len(src), settings)
        every = tr.greedy(int8, vocab, src, limit)
        assert tr.greedy(int8, vocab, src, limit, head_mask=ones.tolist()) == every


def test_a_mask_translates_as_the_masked_pytorch_model(published, exported, pairs):
    """Each preset of the page and a random mask: the float32 graphs' greedy translation is the
    PyTorch model's under ``set_head_mask``, sentence by sentence; each mask changes some."""
    model, tokenizer = published
    vocab, settings = tr.Vocabulary.load(exported), tr.load_settings(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    ids = [tokenizer.encode(s) + [EOS] for s, _ in pairs]
    every = decode_sorted(model, ids, BOS, EOS, beam_size=1)
    for name, mask in masks(onnx_model.head_mask_shape).items():
        with set_head_mask(model, torch.from_numpy(mask)):
            expected = decode_sorted(model, ids, BOS, EOS, beam_size=1)
        got = [
            tr.greedy(onnx_model, vocab, src, tr.output_limit(len(src), settings), head_mask=mask)
            for src in ids
        ]
        assert got == expected, name
        changed = sum(g != e for g, e in zip(got, every, strict=True))
        assert changed >= 1, f"{name}: no translation changed"


def test_masked_bleu_is_sacrebleu_of_the_masked_translations(published, exported, pairs):
    model, tokenizer = published
    vocab, settings = tr.Vocabulary.load(exported), tr.load_settings(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    mask = masks(onnx_model.head_mask_shape)["no cross-attention in the last layer"]
    told = []
    got = scores.masked_bleu(onnx_model, vocab, settings, pairs, mask, told.append)
    assert told == list(range(1, len(pairs) + 1))
    ids = [tokenizer.encode(s) + [EOS] for s, _ in pairs]
    with set_head_mask(model, torch.from_numpy(mask)):
        expected = [tokenizer.decode(y) for y in decode_sorted(model, ids, BOS, EOS, beam_size=1)]
    assert got["hypotheses"] == expected
    references = [e for _, e in pairs]
    assert got["bleu"] == BLEU().corpus_score(expected, [references]).score
    every = scores.masked_bleu(onnx_model, vocab, settings, pairs)
    assert every["bleu"] != got["bleu"]
    translated = tr.translate(onnx_model, vocab, [s for s, _ in pairs], settings, 1)
    assert every["hypotheses"] == translated


BAD = [
    (np.ones((3, 3)), "got shape (3, 3)"),
    (np.ones((3, 3, 8, 1)), "got shape (3, 3, 8, 1)"),
    (np.full((3, 3, 8), 0.5), "got the value 0.5"),
    (np.full((3, 3, 8), np.nan), "got a value that is not finite"),
    (np.full((3, 3, 8), np.inf), "got a value that is not finite"),
    ("all", "got str all"),
    ([[1, 0], [1]], "got list [[1, 0], [1]]"),
    (np.ones((3, 3, 8), bool), "got ndarray"),
]


@pytest.mark.parametrize(("mask", "words"), BAD, ids=[w for _, w in BAD])
def test_a_bad_mask_is_refused_with_what_was_expected(exported, mask, words):
    onnx_model = tr.OnnxModel(exported, int8=True)
    vocab, settings = tr.Vocabulary.load(exported), tr.load_settings(exported)
    expected = "head_mask: expected (3, 3, 8) numbers 0 and 1, "
    with pytest.raises(ValueError, match=f"^{re.escape(expected + words)}"):
        tr.greedy(onnx_model, vocab, [5, 6, EOS], 5, head_mask=mask)
    with pytest.raises(ValueError, match="head_mask: expected"):
        scores.masked_bleu(onnx_model, vocab, settings, [("Ein Hund.", "A dog.")], mask)


def test_the_prefix_reference_refuses_a_mask(exported):
    from aiayn.export.prefix import PrefixModel

    vocab = tr.Vocabulary.load(exported)
    prefix = PrefixModel(exported, int8=False)
    with pytest.raises(ValueError, match="takes no head_mask"):
        tr.greedy(prefix, vocab, [5, 6, EOS], 5, head_mask=np.ones((3, 3, 8)))
