"""Tests for the chapter 11 (translating Multi30k) helpers: aiayn.viz's figures, attention-map chart and
published results, and aiayn.pages.widgets.Translator. Nothing is drawn to the screen and no data set is needed."""


import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from aiayn import viz  # noqa: E402
from aiayn.attention import set_fused  # noqa: E402
from aiayn.bleu import corpus_bleu  # noqa: E402
from aiayn.data.multi30k import BOS, PAD, train_tokenizer  # noqa: E402
from aiayn.model import Transformer, TransformerConfig  # noqa: E402
from aiayn.pages.widgets import Translator  # noqa: E402
from aiayn.runs.recipes import translate  # noqa: E402

PAIRS = [
    ("ein hund läuft im schnee", "a dog runs in the snow"),
    ("zwei kinder spielen im park", "two children play in the park"),
    ("eine frau liest ein buch", "a woman reads a book"),
    ("ein mann fährt rad", "a man rides a bike"),
] * 5


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(
        PAIRS, 60, cache_dir=tmp_path_factory.mktemp("tokenizers")
    )


def tiny_model(vocab_size: int, N: int = 2, h: int = 4) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size, vocab_size, d_model=16, d_ff=32, h=h, N=N, dropout=0.0, max_len=16,
                               share_embeddings=True, pad_id=PAD)  # fmt: skip
    return Transformer(config).eval()


def maps_of_one_sentence(model, S: int = 5, T: int = 4):
    src = torch.randint(4, model.config.src_vocab_size, (1, S))
    tgt = torch.cat(
        [
            torch.tensor([[BOS]]),
            torch.randint(4, model.config.tgt_vocab_size, (1, T - 1)),
        ],
        dim=1,
    )
    with torch.no_grad(), set_fused(model, False):
        model(src, tgt)
    return model.attention_maps()


# --- Lengths and a run's curves ---------------------------------------------------------------------


# --- Attention maps ----------------------------------------------------------------------------------


# --- Published results ------------------------------------------------------------------------------


# --- The translator widget --------------------------------------------------------------------------


def test_translator_decodes_as_recipes_translate_and_maps_its_output(
    tokenizer,
):
    model = tiny_model(tokenizer.vocab_size)
    text = "ein hund spielt im park"
    widget = Translator(
        model, tokenizer, text=text, beam=2, max_len_a=1.0, max_len_b=3
    )
    for beam in (1, 2, 3):
        expected = translate(
            model, tokenizer, [text], beam=beam, max_len_a=1.0, max_len_b=3
        )[0]
        assert (
            widget.translate(text, beam=beam, temperature=0.0)[0] == expected
        )
    assert (
        widget.translation
        == translate(
            model, tokenizer, [text], beam=2, max_len_a=1.0, max_len_b=3
        )[0]
    )
    assert (
        "beam search, K = 2" in widget.output.value
        and widget.image.value[:4] == b"\x89PNG"
    )

    S = len(tokenizer.encode(text)) + 1
    assert widget.src_pieces[-1] == "</s>" and len(widget.src_pieces) == S
    assert widget.weights.shape == (len(widget.out_pieces), S)
    torch.testing.assert_close(
        widget.weights.sum(dim=-1), torch.ones(len(widget.out_pieces))
    )
    last = widget.weights.clone()
    widget.layer.value = 1
    assert not torch.allclose(widget.weights, last)


def test_translator_cross_attention_is_what_the_decoder_saw_while_writing(
    tokenizer,
):
    model = tiny_model(tokenizer.vocab_size)
    widget = Translator(model, tokenizer, beam=1, max_len_b=3)
    _, src, out = widget.translate("zwei kinder lesen", beam=1)
    maps, targets = widget.cross_attention(src, out)
    assert maps.shape[:3] == (2, 4, len(targets))
    k = (
        len(targets) - 1
    )  # the step that wrote the last token saw the prefix out[:, :k + 1]
    with torch.no_grad(), set_fused(model, False):
        model(src, out[:, : k + 1])
        torch.testing.assert_close(
            maps[:, :, k],
            torch.stack(
                [m[0, :, -1] for m in model.attention_maps()["cross"]]
            ),
        )


def test_translator_samples_reproducibly_above_temperature_zero(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    widget = Translator(
        model, tokenizer, text="eine frau fährt rad", beam=3, seed=5
    )
    widget.temperature.value = 1.5
    first = widget.translation
    assert (
        widget.beam.disabled and "sampled at T = 1.5" in widget.output.value
    )
    assert (
        widget.translate("eine frau fährt rad")[0] == first
    )  # the same seed draws the same sample
    widget.temperature.value = 0.0
    assert (
        not widget.beam.disabled
        and "beam search, K = 3" in widget.output.value
    )
    widget.text.value = "  "
    assert "type a German sentence" in widget.output.value


def test_translator_rejects_bad_arguments(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    with pytest.raises(
        ValueError,
        match="need 1 <= beam <= max_beam, got beam=9, max_beam=8",
    ):
        Translator(model, tokenizer, beam=9)
    with pytest.raises(
        TypeError,
        match="expected an aiayn Transformer and Tokenizer, got Linear and Tokenizer",
    ):
        Translator(torch.nn.Linear(2, 2), tokenizer)


# --- The published run: curves, the attention explorer, the error analysis ----------------------------


def test_published_curves_chart_has_three_zoomable_panels():
    train = [
        {"step": s, "loss": 9 - s / 100, "lr": s * 1e-6}
        for s in range(10, 110, 10)
    ]
    val = [
        {"step": 50, "val_loss": 5.0, "val_ppl": 148.4},
        {"step": 100, "val_loss": 4.0, "val_ppl": 54.6},
    ]
    spec = viz.published_curves_chart(train, val, title="run").to_dict()
    panels = spec["vconcat"]
    assert len(panels) == 3 and spec["description"]
    zooms = {p["name"]: p for p in spec["params"]}
    assert sorted(zooms) == ["zoom_loss", "zoom_lr", "zoom_ppl"]
    views = [p["name"] for p in panels]
    for zoom in zooms.values():  # each panel pans and zooms its own steps
        assert zoom["bind"] == "scales" and zoom["select"]["encodings"] == [
            "x"
        ]
        assert len(zoom["views"]) == 1 and zoom["views"][0] in views
    assert panels[1]["encoding"]["y"]["scale"] == {"type": "log"}
    sizes = sorted(len(rows) for rows in spec["datasets"].values())
    assert sizes == [2, 10, 12]  # validation; training; both losses together
    with pytest.raises(ValueError, match="expected columns"):
        viz.published_curves_chart([{"step": 1}], val)


def explorer_inputs():
    model = tiny_model(30, N=2, h=2)
    examples, tokens = [], []
    for seed, (S, T) in enumerate([(5, 4), (3, 3)]):
        torch.manual_seed(seed)
        examples.append(maps_of_one_sentence(model, S=S, T=T))
        tokens.append({"source": [f"s{i}" for i in range(S)], "decoder_in": [f"i{i}" for i in range(T)],
                       "decoder_out": [f"o{i}" for i in range(T)]})  # fmt: skip
    return examples, tokens


def test_attention_explorer_frame_stores_each_row_in_percent_and_masks_as_minus_one():
    examples, _ = explorer_inputs()
    frame = viz.attention_explorer_frame(examples)
    # sentences x (encoder S + decoder self T + cross T queries) x layers x heads
    assert len(frame) == (5 + 4 + 4) * 2 * 2 + (3 + 3 + 3) * 2 * 2
    row = frame[
        (frame.kind == "decoder_self")
        & (frame.sentence == 0)
        & (frame.layer == 1)
    ]
    first = row[(row["head"] == 1) & (row["query"] == 0)]["w"].iloc[0]
    assert first == [
        100,
        -1,
        -1,
        -1,
    ]  # the first piece sees only itself; the future is masked
    enc = examples[0]["encoder"][1][0, 1, 2]  # layer 2, head 2, query 2
    got = frame[
        (frame.kind == "encoder")
        & (frame.sentence == 0)
        & (frame.layer == 2)
        & (frame["head"] == 2)
    ]
    assert got[got["query"] == 2]["w"].iloc[0] == [
        round(100 * float(v)) for v in enc
    ]
    with pytest.raises(ValueError, match="expected \\(1, h, L_q, L_k\\)"):
        viz.attention_explorer_frame([{"encoder": [torch.ones(2, 1, 3, 3)]}])


def test_attention_explorer_chart_picks_sentence_layer_and_head_in_the_browser():
    from vega_runner import vega_data

    examples, tokens = explorer_inputs()
    frame = viz.attention_explorer_frame(examples)
    chart = viz.attention_explorer_chart(frame, tokens, ["first", "second"])
    spec = chart.to_dict()
    params = {p["name"]: p for p in spec["params"]}
    assert params["sentence"]["bind"]["options"] == [0, 1] and params["sentence"]["bind"]["labels"] == [
        "first", "second"]  # fmt: skip
    assert (
        params["layer"]["bind"]["max"] == 2
        and params["head"]["bind"]["max"] == 2
    )
    assert (
        len(spec["datasets"]) == 1
    )  # the three panels share one embedded table
    # two panels a row: three side by side are wider than the book's column
    assert spec["columns"] == 2 and len(spec["concat"]) == 3

    data = vega_data(chart, sentence=1, layer=2, head=2)
    cells = [
        r
        for rows in data.values()
        for r in rows
        if "weight" in r and "key_token" in r
    ]
    cross = examples[1]["cross"][1][
        0, 1
    ]  # (T, S) of sentence 1, layer 2, head 2
    got = {
        (r["query_token"], r["key_token"]): r["weight"]
        for r in cells
        if r["kind"] == "cross"
    }
    want = {
        (f"o{q}", f"s{k}"): round(float(cross[q, k]), 2)
        for q in range(3)
        for k in range(3)
    }
    assert got == pytest.approx(want, abs=1e-9)
    selfs = [r for r in cells if r["kind"] == "decoder_self"]
    assert len(selfs) == 3 * 4 // 2  # the masked cells are left out
    with pytest.raises(ValueError, match="2 sentences, but 1 token sets"):
        viz.attention_explorer_chart(frame, tokens[:1], ["first"])


def test_sentence_bleu_frame_and_its_charts():
    from sacrebleu.metrics import BLEU

    hyps = [
        "a dog runs in the snow",
        "two children play",
        "a woman reads a book",
    ]
    refs = [
        "a dog runs in the snow",
        "two kids play in the park",
        "a man rides a bike",
    ]
    frame = viz.sentence_bleu_frame(["x y z", "x y", "x"], hyps, refs)
    sacre = BLEU(effective_order=True)
    assert frame["bleu"].tolist() == pytest.approx(
        [
            sacre.sentence_score(h, [r]).score
            for h, r in zip(hyps, refs, strict=True)
        ]
    )
    assert frame["words"].tolist() == [3, 2, 1]
    spec = viz.bleu_histogram_chart(frame["bleu"], bin_width=25).to_dict()
    [rows] = spec["datasets"].values()
    assert [r["sentences"] for r in rows] == [2, 0, 0, 1] and spec[
        "description"
    ]
    bars = viz.bleu_by_length_chart(
        [{"band": "1-8", "bleu": 30.0, "sentences": 2}]
    ).to_dict()
    assert bars["encoding"]["x"]["sort"] == ["1-8"]
    with pytest.raises(ValueError, match="3 sources, 2 translations"):
        viz.sentence_bleu_frame(["a", "b", "c"], hyps[:2], refs)


def test_translator_text_form_fits_a_code_box(tokenizer):
    model = tiny_model(tokenizer.vocab_size)
    translator = Translator(model, tokenizer, text="ein hund", beam=2)
    assert repr(translator) == "Translator(text='ein hund', beam=2)"


def test_rescore_hypotheses_scores_a_translations_file(tmp_path):
    hypotheses = ["A dog runs in the snow.", "Two children play.", ""]
    references = [
        "A dog is running in the snow.",
        "Two kids play in a park.",
        "A woman reads.",
    ]
    path = tmp_path / "test2016.hyp.en"
    path.write_text("".join(h + "\n" for h in hypotheses))
    scores = viz.rescore_hypotheses(path, references)
    assert scores["sentences"] == 3
    assert scores["bleu"] == pytest.approx(
        corpus_bleu(hypotheses, references).score
    )
    assert scores["sacrebleu"] == pytest.approx(scores["bleu"], abs=1e-9)
    assert scores["signature"].startswith(
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
    )
    with pytest.raises(ValueError, match="has 3 lines but 2 references"):
        viz.rescore_hypotheses(path, references[:2])
