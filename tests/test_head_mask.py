"""The head mask (``aiayn.model.set_head_mask``): heads switched off at test time, as Michel et al. (2019).

A mask of ones gives today's outputs to the bit on every path (the model's forward, the reference and
production searches with and without the cache, pruning, the fast twins, oneDNN, an int8 copy,
``translate``); a head at 0 gives W^O nothing from that head and changes the outputs; a bad mask is
refused with what was expected.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aiayn.attention import MultiHeadAttention, check_head_mask
from aiayn.decoding import reference as ref
from aiayn.decoding.search import beam_search, greedy_decode
from aiayn.decoding.translate import translate
from aiayn.engine.kv_cache import decode_cached, new_cache
from aiayn.engine.precision import int8_copy
from aiayn.engine.switch import set_fast
from aiayn.masks import padding_mask
from aiayn.model import (
    HEAD_KINDS,
    Transformer,
    TransformerConfig,
    set_head_mask,
)

PAD, BOS, EOS, V = 0, 1, 2, 16
# the published model, read only (as tests/conftest.py finds it)
PUBLISHED = Path(__file__).resolve().parents[2] / "shared/runs/multi30k-h100"

pytestmark = pytest.mark.usefixtures("one_thread")


def small_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(V, V, d_model=32, d_ff=64, h=4, N=2, dropout=0.1)
    return Transformer(config).eval()


def sources() -> torch.Tensor:
    torch.manual_seed(5)
    src = torch.randint(3, V, (3, 7))
    src[1, 5:] = PAD  # a padded sentence
    src[:, -1] = EOS
    src[1, 4] = EOS
    return src


def ones(model: Transformer) -> torch.Tensor:
    return torch.ones(model.head_mask_shape)


def one_head_off(model: Transformer, k: int, n: int, i: int) -> torch.Tensor:
    mask = ones(model)
    mask[k, n, i] = 0.0
    return mask


def masked_forward(model: Transformer, src, tgt, mask: torch.Tensor) -> torch.Tensor:
    """The model's forward with ``mask`` set on its heads (``set_head_mask``), as a reader runs it."""
    with set_head_mask(model, mask):
        return model(src, tgt)


def test_the_shape_is_kind_by_layer_by_head():
    model = small_model()
    assert model.head_mask_shape == (3, 2, 4)
    grid = model.attention_grid()
    assert [len(row) for row in grid] == [2, 2, 2]
    assert grid[0][1] is model.encoder.layers[1].self_attn
    assert grid[1][0] is model.decoder.layers[0].self_attn
    assert grid[2][1] is model.decoder.layers[1].cross_attn
    assert HEAD_KINDS == ("encoder", "decoder_self", "cross")


@pytest.mark.parametrize("fast", [False, True])
def test_a_mask_of_ones_changes_no_bit_of_the_forward(fast):
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 5))
    with set_fast(model, fast):
        plain = model(src, tgt)
        masked = masked_forward(model, src, tgt, ones(model))
    assert torch.equal(plain, masked)
    assert all(m.head_mask is None for row in model.attention_grid() for m in row)


@pytest.mark.parametrize("k", range(3))
@pytest.mark.parametrize("fast", [False, True])
def test_a_head_at_zero_gives_w_o_nothing_from_it(k, fast):
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 5))
    attn = model.attention_grid()[k][1]
    seen = []
    hook = attn.w_o.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    with set_fast(model, fast):
        plain = model(src, tgt)
        masked = masked_forward(model, src, tgt, one_head_off(model, k, 1, 2))
    hook.remove()
    d_v = attn.d_v
    before, after = seen[0], seen[1]  # (B, L, h * d_v), what W^O reads
    assert not torch.equal(before[..., 2 * d_v : 3 * d_v], torch.zeros_like(before[..., :d_v]))
    assert torch.equal(after[..., 2 * d_v : 3 * d_v], torch.zeros_like(after[..., :d_v]))
    assert not torch.equal(plain, masked)


def test_the_mask_equals_a_w_o_without_that_heads_columns():
    """Zeroing head i before W^O is W^O with its d_v input columns zeroed: the definition, by another route."""
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 5))
    masked = masked_forward(model, src, tgt, one_head_off(model, 2, 0, 3))
    attn = model.attention_grid()[2][0]
    with torch.no_grad():
        attn.w_o.weight[:, 3 * attn.d_v : 4 * attn.d_v] = 0.0
    torch.testing.assert_close(model(src, tgt), masked)


def _decodings(model: Transformer, src: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every search the package has, with each engine switch, on ``src``."""
    mask = padding_mask(src, PAD)
    out = {
        "reference greedy": ref.greedy_decode(model, src, mask, 9, BOS, EOS),
        "reference beam": ref.beam_search(model, src, mask, 9, BOS, EOS, 3, 0.6),
    }
    for cache in (False, True):
        for prune in (False, True):
            for onednn in (False, True):
                name = f"cache={cache} prune={prune} onednn={onednn}"
                switches = dict(use_cache=cache, prune=prune, onednn=onednn)
                out["greedy " + name] = greedy_decode(model, src, mask, 9, BOS, EOS, **switches)
                out["beam " + name] = beam_search(model, src, mask, 9, BOS, EOS, 3, **switches).tokens
    with set_fast(model):
        out["greedy fast"] = greedy_decode(model, src, mask, 9, BOS, EOS)
        out["beam fast"] = beam_search(model, src, mask, 9, BOS, EOS, 3).tokens
    return out


def test_a_mask_of_ones_changes_no_decoding_and_a_zero_changes_them():
    model, src = small_model(), sources()
    plain = _decodings(model, src)
    with set_head_mask(model, ones(model)):
        same = _decodings(model, src)
    for name in plain:
        assert torch.equal(plain[name], same[name]), name
    changed = ones(model)
    changed[:, :, :3] = 0.0  # one head of each attention left
    with set_head_mask(model, changed):
        other = _decodings(model, src)
    differs = [name for name in plain if not torch.equal(plain[name], other[name])]
    assert len(differs) == len(plain), sorted(set(plain) - set(differs))


def test_the_cached_decoder_honours_the_mask_step_by_step():
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 4))
    src_mask = padding_mask(src, PAD)
    mask = one_head_off(model, 1, 1, 0)
    with set_head_mask(model, mask):
        memory = model.encode(src, src_mask)
        whole = model.decode(memory, src_mask, tgt)
        cache = new_cache(model)
        steps = [decode_cached(model, memory, src_mask, tgt[:, t : t + 1], cache) for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, 1), whole)
    assert not torch.allclose(whole, model.decode(model.encode(src, src_mask), src_mask, tgt))


def test_an_int8_copy_made_inside_the_block_keeps_the_mask():
    pytest.importorskip("torch.ao.quantization")
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 5))
    with set_head_mask(model, ones(model)):
        same = int8_copy(model)(src, tgt)
    assert torch.equal(int8_copy(model)(src, tgt), same)
    with set_head_mask(model, one_head_off(model, 0, 0, 1)):
        q = int8_copy(model)
    assert q.attention_grid()[0][0].head_mask[1] == 0
    assert not torch.equal(q(src, tgt), same)


def test_the_block_restores_the_masks_it_found():
    model = small_model()
    outer = one_head_off(model, 0, 1, 1)
    with set_head_mask(model, outer):
        with set_head_mask(model, None):
            assert all(m.head_mask is None for row in model.attention_grid() for m in row)
        assert torch.equal(model.attention_grid()[0][1].head_mask, outer[0, 1])
    assert model.attention_grid()[0][1].head_mask is None


def test_a_mask_that_requires_grad_gives_each_head_its_gradient():
    """Michel et al.'s importance of a head is the gradient of the loss with respect to its mask."""
    model, src = small_model(), sources()
    tgt = torch.randint(3, V, (3, 5))
    mask = ones(model).requires_grad_()
    masked_forward(model, src, tgt, mask).logsumexp(-1).mean().backward()
    assert mask.grad is not None and mask.grad.shape == (3, 2, 4)
    assert bool((mask.grad != 0).all())


@pytest.mark.parametrize(
    ("mask", "error", "message"),
    [
        ([1.0] * 24, TypeError, "got list"),
        (torch.ones(3, 2, 4, dtype=torch.long), TypeError, "got dtype torch.int64"),
        (torch.ones(3, 2, 4, dtype=torch.bool), TypeError, "got dtype torch.bool"),
        (torch.ones(2, 2, 4), ValueError, "got shape (2, 2, 4)"),
        (torch.ones(3, 8), ValueError, "got shape (3, 8)"),
        (torch.full((3, 2, 4), 0.5), ValueError, "got the value 0.5"),
        (torch.full((3, 2, 4), float("nan")), ValueError, "not finite"),
        (torch.full((3, 2, 4), float("inf")), ValueError, "not finite"),
    ],
)
def test_a_bad_mask_is_refused_with_what_was_expected(mask, error, message):
    model = small_model()
    expected = "a float tensor of shape (3, 2, 4) holding 0 and 1"
    with pytest.raises(error) as caught:
        set_head_mask(model, mask)
    assert expected in str(caught.value) and message in str(caught.value)
    assert all(m.head_mask is None for row in model.attention_grid() for m in row)


def test_check_head_mask_returns_a_good_mask_as_it_is():
    mask = torch.tensor([[0.0, 1.0]])
    assert check_head_mask(mask, (1, 2)) is mask


def test_a_module_alone_takes_a_mask_of_h():
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 3, 16)
    plain = attn(x, x, x)
    attn.head_mask = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert torch.equal(attn(x, x, x), plain)
    attn.head_mask = torch.zeros(4)
    torch.testing.assert_close(attn(x, x, x), attn.w_o.bias.expand(2, 3, 16))


def test_translate_with_the_published_model(published):
    model, tokenizer = published
    from aiayn.data.multi30k import load_multi30k

    sentences = [s for s, _ in load_multi30k("test2016")[:12]]
    plain = translate(model, tokenizer, sentences, beam=1)
    assert translate(model, tokenizer, sentences, beam=1, head_mask=ones(model)) == plain
    beam = translate(model, tokenizer, sentences, beam=2)
    assert translate(model, tokenizer, sentences, beam=2, head_mask=ones(model)) == beam
    no_cross = ones(model)
    no_cross[2] = 0.0  # the decoder reads nothing of the source
    assert translate(model, tokenizer, sentences, beam=1, head_mask=no_cross) != plain
    with pytest.raises(ValueError, match=r"shape \(3, 3, 8\)"):
        translate(model, tokenizer, sentences, head_mask=torch.ones(3, 6, 8))


def test_evaluate_scores_a_masked_model_under_its_own_setting(tmp_path):
    from aiayn.runs.scoring import evaluate

    def run(mask, out):
        return evaluate(PUBLISHED, limit=4, beam=1, device="cpu", out_dir=tmp_path / out, head_mask=mask)

    plain = run(None, "plain")
    same = run(torch.ones(3, 3, 8), "same")
    no_cross = torch.ones(3, 3, 8)
    no_cross[2] = 0.0
    other = run(no_cross, "other")
    assert same.setting == plain.setting and "heads" not in plain.setting
    assert other.setting.startswith(plain.setting + ".heads")
    read = (tmp_path / "plain" / plain.hypotheses_file).read_text
    assert (tmp_path / "same" / same.hypotheses_file).read_text() == read()
    assert (tmp_path / "other" / other.hypotheses_file).read_text() != read()
    assert other.loss > plain.loss
    with pytest.raises(ValueError, match="head_mask: expected a float tensor of shape"):
        run(torch.ones(3, 8), "bad")
