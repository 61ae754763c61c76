"""The export (aiayn.export: graphs, command): the ONNX graphs equal the PyTorch model, the BLEU is its files'."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from conftest import PUBLISHED

from aiayn.data.multi30k import BOS, EOS, load_multi30k
from aiayn.decoding.search import beam_search, decode_sorted
from aiayn.export import graphs
from aiayn.export import translator as tr
from aiayn.files import sha256_file

SETTINGS = json.loads((PUBLISHED / "config.json").read_text())


def _limit(ids: list[int]) -> int:
    return tr.output_limit(len(ids), SETTINGS)


@pytest.fixture(scope="module")
def test_ids(published, root):
    """The first 100 sentences of test 2016 as the encoder reads them."""
    _, tokenizer = published
    pairs = load_multi30k("test2016", root)[:100]
    return [tokenizer.encode(s) + [EOS] for s, _ in pairs]


def test_export_leaves_the_model_in_eval_mode_with_its_attention_path(
    tmp_path, one_thread
):
    from aiayn.model import Transformer, TransformerConfig

    model = Transformer(
        TransformerConfig(
            src_vocab_size=40, tgt_vocab_size=40, d_model=32, d_ff=64, h=4, N=2,
            fused_attention=True,
        )
    )
    model.train()  # as a model is after training
    heads = [m for m in model.modules() if hasattr(m, "use_fused")]
    assert len(heads) == 6 and all(m.use_fused for m in heads)
    graphs.export_graphs(model, tmp_path)
    assert not any(m.training for m in model.modules())  # dropout is off
    assert all(m.use_fused for m in heads)  # the fast path, as before
    src, tgt = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    torch.testing.assert_close(model(src, tgt), model(src, tgt), rtol=0, atol=0)


def test_the_graphs_take_any_batch_and_length(exported):
    names = [graphs.graph_file(g, q) for g in graphs.GRAPHS for q in (False, True)]
    assert len(names) == 8
    for name in names:
        graph = onnx.load(exported / name, load_external_data=False).graph
        for value in graph.input:
            dims = value.type.tensor_type.shape.dim
            symbolic = [d.dim_param for d in dims if d.dim_param]
            # memory (batch, src_len, 512); src (batch, src_len); prefix (batch, tgt_len);
            # tokens (batch, new_len); cross_k (6, batch, 8, src_len, 64); past_k (6, batch, 8, past_len, 64);
            # targets (targets,); head_mask (3, 6, 8), fixed
            want = {"targets": 1, graphs.HEAD_MASK: 0}.get(value.name, 2)
            assert len(symbolic) == want, (name, value.name, dims)


def _searches(model, vocab, pairs):
    """Greedy and beam 4 of each source sentence: a list of (greedy, beam) ids."""
    found = []
    for text, _ in pairs:
        ids = tr.source_ids(vocab, text, SETTINGS["max_len"])
        limit = _limit(ids)
        beam = tr.beam_search(model, vocab, ids, limit, 4, SETTINGS["length_penalty"])
        found.append((tr.greedy(model, vocab, ids, limit), beam))
    return found


def test_the_cache_translates_as_the_whole_prefix_decoder(exported, root, one_thread):
    """The step graph with its key/value cache (OnnxModel) against decoder.onnx rerun over the whole
    prefix (PrefixModel), the same search over both: float32, the same tokens on every sentence;
    int8, on nearly every one (activations are quantized per tensor as they run, and a step's tensor
    holds the new position only, the whole prefix's all of them: the rounding steps differ)."""
    from aiayn.export.prefix import PrefixModel

    vocab = tr.Vocabulary.load(exported)
    val = load_multi30k("val", root)[:12]
    cached = _searches(tr.OnnxModel(exported, int8=False), vocab, val)
    assert cached == _searches(PrefixModel(exported, int8=False), vocab, val)
    test = load_multi30k("test2016", root)[-40:]  # other tests read its start
    cached = _searches(tr.OnnxModel(exported), vocab, test)
    prefix = _searches(PrefixModel(exported), vocab, test)
    for kind in (0, 1):  # greedy, beam 4
        same = sum(c[kind] == p[kind] for c, p in zip(cached, prefix, strict=True))
        assert same >= 36, f"{'greedy beam'.split()[kind]}: {same}/40 sentences the same"


def test_the_float32_graphs_decode_as_pytorch_greedy(published, exported, test_ids, one_thread):
    model, _ = published
    vocab = tr.Vocabulary.load(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    expected = decode_sorted(model, test_ids, BOS, EOS, beam_size=1)
    got = [tr.greedy(onnx_model, vocab, ids, _limit(ids)) for ids in test_ids]
    same = sum(g == e for g, e in zip(got, expected, strict=True))
    assert same == len(test_ids) == 100


def test_the_python_beam_search_over_the_graphs_is_aiayn_decoding_s(
    published, exported, test_ids, one_thread
):
    model, _ = published
    vocab = tr.Vocabulary.load(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    alpha = SETTINGS["length_penalty"]
    for ids in test_ids[:25]:
        limit = _limit(ids)
        ours = tr.beam_search(onnx_model, vocab, ids, limit, 4, alpha)
        theirs = beam_search(
            model, torch.tensor([ids]), None, [limit], BOS, EOS, 4, alpha
        ).tokens[0].tolist()
        while theirs[-1] == 0:
            theirs.pop()
        assert ours == theirs


def test_the_page_s_search_tree_is_decoding_s_beam_trace(
    published, exported, test_ids, one_thread
):
    """``SearchTree`` of the page's search on the float32 graphs is ``BeamTrace``'s tree of
    ``aiayn.decoding``'s beam search, node for node: pieces, parents, kept beams, winner, the five
    next pieces, scores and attention within float32 rounding (``pruned`` aside: the page ranks
    each beam's K best only). The output is the same with a trace or without."""
    from aiayn.decoding.trace import BeamTrace, path

    model, _ = published
    vocab = tr.Vocabulary.load(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    alpha = SETTINGS["length_penalty"]
    for ids in test_ids[25:31]:
        limit, trace = _limit(ids), tr.SearchTree()
        ours = tr.beam_search(onnx_model, vocab, ids, limit, 4, alpha, trace=trace)
        assert ours == tr.beam_search(onnx_model, vocab, ids, limit, 4, alpha)
        tree = trace.tree
        assert path(tree, tree["winner"]) == ours
        reference = BeamTrace(attention=True, digits=6)
        src = torch.tensor([ids])
        beam_search(model, src, None, [limit], BOS, EOS, 4, alpha, trace=reference)
        theirs = reference.trees[0]
        assert tree["winner"] == theirs["winner"]
        assert [s["kept"] for s in tree["steps"]] == [s["kept"] for s in theirs["steps"]]
        assert len(tree["nodes"]) == len(theirs["nodes"])
        for a, b in zip(tree["nodes"], theirs["nodes"], strict=True):
            same = ("id", "parent", "step", "piece", "finished")
            assert {k: a[k] for k in same} == {k: b[k] for k in same}
            assert a["log_p"] == pytest.approx(b["log_p"], abs=1e-4)
            assert a["score"] == pytest.approx(b["score"], abs=1e-4)
            assert [i for i, _ in a["top"]] == [i for i, _ in b["top"]]
            np.testing.assert_allclose([p for _, p in a["top"]], [p for _, p in b["top"]], atol=1e-5)
            if a["attention"] is not None:  # a node the search extended
                np.testing.assert_allclose(a["attention"], b["attention"], atol=1e-4)
        for step in tree["steps"]:  # what the page fades: candidates it ranked below the kept
            kept = min(tree["nodes"][n]["score"] for n in step["kept"] if n is not None)
            assert all(c["score"] <= kept for c in step["pruned"]) and len(step["pruned"]) <= 4


def test_the_attention_outputs_are_the_model_s(published, exported, test_ids, one_thread):
    from aiayn.viz import model_attention

    model, tokenizer = published
    vocab = tr.Vocabulary.load(exported)
    onnx_model = tr.OnnxModel(exported, int8=False)
    ids = test_ids[0]
    ys = tr.greedy(onnx_model, vocab, ids, _limit(ids))
    source = tokenizer.decode(ids)
    maps, _ = model_attention(model, tokenizer, source, tokenizer.decode(ys))
    ours = tr.attention(onnx_model, ids, ys)
    for kind in ("encoder", "cross", "decoder_self"):
        expected = torch.stack([w[0] for w in maps[kind]]).numpy()
        np.testing.assert_allclose(ours[kind], expected, atol=1e-5)


def test_the_manifest_s_bleu_is_that_of_its_files(exported, root):
    manifest = json.loads((exported / graphs.MANIFEST).read_text())
    for name, entry in manifest["files"].items():
        assert (exported / name).stat().st_size == entry["bytes"]
        assert sha256_file(exported / name)[1] == entry["sha256"], name
    assert manifest["page_bytes"] <= 40e6
    pairs = load_multi30k("test2016", root)[:100]
    again = tr.score_files(exported, pairs, int8=True, beams=(1, 4))
    for key in ("beam1", "beam4"):
        stored = manifest["bleu"][f"int8.{key}"]
        assert stored["sentences"] == 100
        assert again[key]["bleu"] == stored["bleu"]
        assert stored["bleu"] > 30  # a translator, not noise
        written = (exported / f"test2016.int8.{key}.hyp.en").read_text().splitlines()
        assert written == again[key]["hypotheses"]


def test_bpe_encode_is_sentencepiece(published, exported, root):
    _, tokenizer = published
    vocab = tr.Vocabulary.load(exported)
    odd = ["", "  ", "\U0001f600\U0001f389", "ab\U0001f600\U0001f600cd", "<unk>", "\t\n",
           "Straße über Öl", " führt", "x  y"]
    sentences = [s for split in ("val", "test2016") for s, _ in load_multi30k(split, root)]
    for text in sentences + odd:
        ids = tokenizer.encode(text)
        assert tr.bpe_encode(vocab, text) == ids, text
        assert tr.detokenize(vocab, ids) == tokenizer.decode(ids), text


def test_sentences_with_nothing_known_or_too_long_are_named(exported):
    vocab = tr.Vocabulary.load(exported)
    assert tr.source_ids(vocab, "", 256) is None
    assert tr.source_ids(vocab, "\U0001f600 \U0001f389", 256) is None
    assert tr.source_ids(vocab, "Ein Mann.", 256)[-1] == vocab.eos_id
    with pytest.raises(ValueError, match="pieces \\+ <eos>, the model reads at most 256"):
        tr.source_ids(vocab, "Hund " * 300, 256)


def test_export_reads_odd_input_as_translation_does(published, exported):
    """Decomposed umlauts, runs of whitespace, non-breaking and zero-width characters: onnx_translator.source_ids (the
    page's twin) and translation.source_ids (sentencepiece) give the same ids, or both None."""
    from test_web_js import ODD_INPUT

    from aiayn.decoding.translate import source_ids

    _, tokenizer = published
    vocab = tr.Vocabulary.load(exported)
    for text in ODD_INPUT:
        assert tr.source_ids(vocab, text, 256) == source_ids(tokenizer, [text], 256)[0], repr(text)
    composed = tr.source_ids(vocab, "Zwei Mädchen überqueren die Brücke.", 256)
    assert tr.source_ids(vocab, "Zwei Ma\u0308dchen u\u0308berqueren die Bru\u0308cke.", 256) == composed
    assert tr.source_ids(vocab, " Ein \t Mann.\n", 256) == tr.source_ids(vocab, "Ein Mann.", 256)
    for blank in ("\u00a0", "\u200b\u2060\ufeff", " \u200c \u200d\t"):
        assert tr.source_ids(vocab, blank, 256) is None, repr(blank)


def test_the_json_files_of_an_export_name_no_path(exported):
    """manifest.json, translator.json and tokenizer.json (what the page downloads besides the graphs) name
    neither the model's folder, nor the output, nor any other absolute path."""
    import re

    absolute = re.compile(r"(?<![\w.])(/(?:home|root|work|tmp|Users|mnt|opt|var|srv)/|[A-Za-z]:\\)")
    places = [str(p) for p in (PUBLISHED, PUBLISHED.resolve(), exported, exported.resolve(), exported.parent)]

    def strings(value):
        if isinstance(value, str):
            yield value
        elif isinstance(value, dict):
            for k, v in value.items():
                yield k
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)

    for name in (graphs.MANIFEST, graphs.SETTINGS_JSON, graphs.TOKENIZER_JSON):
        found = [
            s for s in strings(json.loads((exported / name).read_text("utf-8")))
            if absolute.search(s) or any(p in s for p in places)
        ]
        assert not found, f"{name} names {found[:3]}"


def test_the_step_s_output_layer_is_one_product_with_the_constant_weight(tmp_path, one_thread):
    """Every id's logit from one product with the tied weight (int8: the embedding's one copy,
    transposed), then the targets' columns: no step gathers and dequantizes the weight's rows of
    the targets, which with every id as targets cost the whole matrix each step (chapter 13.2)."""
    import onnxruntime as ort

    from aiayn.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, d_ff=64, h=4, N=2))
    graphs.export_graphs(model, tmp_path)
    graphs.quantize_graphs(tmp_path)
    weight = graphs.GENERATOR
    for int8 in (False, True):
        graph = onnx.load(tmp_path / graphs.graph_file("decoder_step", int8)).graph
        made = {o: n for n in graph.node for o in n.output}
        tables = [t for t in graph.initializer if t.name.startswith(weight) and len(t.dims) == 2]
        assert [list(t.dims) for t in tables] == [[40, 32]], "one copy of the tied weight"
        for node in graph.node:  # the embedding alone gathers the weight's rows, of the tokens
            if node.op_type == "Gather" and node.input[0] == tables[0].name:
                assert node.input[1] == "tokens", node
        products = [n for n in graph.node if n.op_type in ("MatMulInteger", "Gemm", "MatMul")
                    and any(i.startswith(weight) for i in n.input)]  # fmt: skip
        assert len(products) == 1, products
        if int8:  # the product reads the one int8 table, transposed
            assert products[0].op_type == "MatMulInteger"
            assert made[products[0].input[1]].op_type == "Transpose"
            assert made[products[0].input[1]].input[0] == tables[0].name
    # the float32 step's log-probabilities are the model's, over every id or a few
    session = ort.InferenceSession(str(tmp_path / "decoder_step.onnx"), providers=["CPUExecutionProvider"])
    src, prefix = torch.tensor([[5, 6, 7, 2]]), torch.tensor([[1, 5, 6]])
    memory = model.encode(src, (src != 0)[:, None, None, :])
    cross_k, cross_v = graphs.CrossKVGraph(model)(memory)
    empty = cross_k[:, :, :, :0].detach().numpy()
    expected = model(src, prefix)[:, -1].log_softmax(-1)  # (1, V)
    for targets in (torch.arange(40), torch.tensor([2, 9, 17, 33])):
        feeds = {"tokens": prefix.numpy(), "src": src.numpy(), "cross_k": cross_k.detach().numpy(),
                 "cross_v": cross_v.detach().numpy(), "past_k": empty, "past_v": empty,
                 "targets": targets.numpy(), "head_mask": np.ones((3, 2, 4), np.float32)}  # fmt: skip
        (got,) = session.run(["log_probs"], feeds)
        want = expected[:, targets].log_softmax(-1).detach().numpy()
        np.testing.assert_allclose(got, want, atol=1e-5)
