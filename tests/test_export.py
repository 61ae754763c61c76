"""The export (aiayn.export: graphs, command): the ONNX graphs equal the PyTorch model, the BLEU is its files'."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch

from aiayn.data.multi30k import BOS, EOS, load_multi30k
from aiayn.decoding.search import beam_search, decode_sorted
from aiayn.export import graphs, scores
from aiayn.export import translator as tr
from aiayn.files import sha256_file
from conftest import PUBLISHED

SETTINGS = json.loads((PUBLISHED / "config.json").read_text())


def _limit(ids: list[int]) -> int:
    return tr.output_limit(len(ids), SETTINGS)


@pytest.fixture(scope="module")
def test_ids(published, root):
    """The first 100 sentences of test 2016 as the encoder reads them."""
    _, tokenizer = published
    pairs = load_multi30k("test2016", root)[:100]
    return [tokenizer.encode(s) + [EOS] for s, _ in pairs]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, one_thread):
    """A small model, in training mode on its fused attention path as after training, exported and
    quantized once (an export takes seconds whatever the size): d_ff 1024, so that its int8 rows are
    2,048 bytes long. Returns the model, the folder and whether each attention was fused before."""
    from aiayn.model import Transformer, TransformerConfig

    torch.manual_seed(0)
    model = Transformer(TransformerConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, d_ff=1024, h=4, N=2,
                                          fused_attention=True))  # fmt: skip
    model.train()
    fused = [m.use_fused for m in model.modules() if hasattr(m, "use_fused")]
    folder = tmp_path_factory.mktemp("tiny")
    graphs.export_graphs(model, folder)
    graphs.quantize_graphs(folder)
    return model, folder, fused


def test_export_leaves_the_model_in_eval_mode_with_its_attention_path(tiny):
    model, _, fused = tiny
    heads = [m for m in model.modules() if hasattr(m, "use_fused")]
    assert len(fused) == 6 and all(fused)  # before the export
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
    again = scores.score_files(exported, pairs, int8=True, beams=(1, 4))
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


def test_the_step_s_output_layer_is_one_product_with_the_constant_weight(tiny, one_thread):
    """Every id's logit from one product with the tied weight (int8: the embedding's one copy,
    transposed), then the targets' columns: no step gathers and dequantizes the weight's rows of
    the targets, which with every id as targets cost the whole matrix each step (chapter 13.2)."""
    import onnxruntime as ort

    model, tmp_path, _ = tiny
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


def test_int8_rows_of_2048_bytes_are_widened_with_the_same_outputs(tiny, tmp_path, one_thread):
    """The int8 layers whose weight rows are a multiple of 1024 bytes long (the feed-forward's first,
    d_ff wide) are stored 16 columns wider and cut back after their bias (``_unaliased_rows``): the page's
    product packs such rows several times faster, and every graph gives the unwidened graph's outputs, to
    the bit. Other layers are left as they are."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    _, folder, _ = tiny
    rng = np.random.default_rng(0)
    B, S, P = 2, 5, 3
    kv = lambda length: rng.standard_normal((2, B, 4, length, 8)).astype(np.float32)  # noqa: E731
    src = rng.integers(3, 40, (B, S))
    every_head = np.ones((3, 2, 4), np.float32)  # (kinds, N, h)
    feeds = {
        "encoder": {"src": src, "head_mask": every_head},
        "cross_kv": {"memory": rng.standard_normal((B, S, 32)).astype(np.float32)},
        "decoder": {"memory": rng.standard_normal((B, S, 32)).astype(np.float32), "src": src,
                    "prefix": rng.integers(3, 40, (B, 4))},
        "decoder_step": {"tokens": rng.integers(3, 40, (B, 2)), "src": src, "cross_k": kv(S), "cross_v": kv(S),
                         "past_k": kv(P), "past_v": kv(P), "targets": np.arange(40),
                         "head_mask": every_head},
    }  # fmt: skip
    for name in graphs.GRAPHS:
        plain = tmp_path / f"{name}.plain.onnx"  # what quantize_graphs wrote before widening
        quantize_dynamic(folder / graphs.graph_file(name, False), plain, weight_type=QuantType.QInt8)
        graphs._one_generator_copy(plain)
        wide = folder / graphs.graph_file(name, True)
        int8 = onnx.TensorProto.INT8
        weights = {
            path: sorted(tuple(t.dims) for t in onnx.load(path).graph.initializer if t.data_type == int8 and t.dims)
            for path in (plain, wide)
        }
        layers = {"encoder": 2, "cross_kv": 0, "decoder": 2, "decoder_step": 2}[name]  # one a layer, N = 2
        assert weights[plain].count((32, 1024)) == layers, (name, weights[plain])
        assert weights[wide].count((32, 1024 + graphs.ROW_PADDING)) == layers, (name, weights[wide])
        assert [w for w in weights[wide] if w[1] != 1024 + graphs.ROW_PADDING] == [
            w for w in weights[plain] if w[1] != 1024
        ], "the other layers are as they were"
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        got, want = (
            ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds[name])
            for path in (wide, plain)
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_widening_a_layer_adds_one_slice_and_keeps_its_numbers(tmp_path):
    """``_unaliased_rows`` on a graph of one linear layer whose nodes have no names (onnx allows it): one
    ``Slice`` after the bias, the same outputs; a row of another length is left as it is."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    K, N = 16, 64
    layer = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xW"]), helper.make_node("Add", ["xW", "b"], ["y"])], "layer",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", N])],
        [numpy_helper.from_array(rng.standard_normal((K, N)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b")],
    )  # fmt: skip
    model = helper.make_model(layer, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, tmp_path / "layer.onnx")
    plain, wide = tmp_path / "plain.onnx", tmp_path / "wide.onnx"
    quantize_dynamic(tmp_path / "layer.onnx", plain, weight_type=QuantType.QInt8)
    wide.write_bytes(plain.read_bytes())
    assert graphs._unaliased_rows(wide, row=3 * N) == 0  # rows of N bytes are no multiple of 3N
    assert wide.read_bytes() == plain.read_bytes()
    assert graphs._unaliased_rows(wide, row=N) == 1
    nodes = onnx.load(wide).graph.node
    assert [n.op_type for n in nodes].count("Slice") == 1 and nodes[-1].op_type == "Slice"
    x = {"x": rng.standard_normal((3, K)).astype(np.float32)}
    cpu = ["CPUExecutionProvider"]
    got, want = (ort.InferenceSession(str(p), providers=cpu).run(None, x)[0] for p in (wide, plain))
    assert got.shape == (3, N)
    np.testing.assert_array_equal(got, want)
