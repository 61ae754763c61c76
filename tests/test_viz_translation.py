"""Tests for the chapter 11 (translating Multi30k) helpers: aiayn.viz's figures, attention-map chart and
published results, and aiayn.widgets.Translator. Nothing is drawn to the screen and no data set is needed."""

import json

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from aiayn import viz  # noqa: E402
from aiayn.attention import set_fused  # noqa: E402
from aiayn.bleu import corpus_bleu  # noqa: E402
from aiayn.data import BOS, PAD, train_tokenizer  # noqa: E402
from aiayn.model import Transformer, TransformerConfig  # noqa: E402
from aiayn.recipes import translate  # noqa: E402
from aiayn.widgets import Translator  # noqa: E402

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


def test_length_histograms_figure_has_one_panel_per_unit_and_the_means():
    fig = viz.length_histograms_figure(
        {
            "words": {"German": [3, 4, 5], "English": [4, 4]},
            "BPE pieces": {"German": [6, 8], "English": [5]},
        }
    )
    assert len(fig.axes) == 2
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["German (mean 4.0)", "English (mean 4.0)"]
    assert fig.axes[1].get_xlabel() == "BPE pieces per sentence"
    with pytest.raises(ValueError, match="no lengths for 'English'"):
        viz.length_histograms_figure(
            {"words": {"German": [3], "English": []}}
        )
    with pytest.raises(ValueError, match="at least one label"):
        viz.length_histograms_figure({})


def test_run_curves_figure_draws_the_steps_and_the_evaluations():
    records = [
        {"event": "step", "step": s, "loss": 7.0 - s / 10}
        for s in range(1, 11)
    ]
    records += [{"event": "eval", "step": 5, "val_loss": 6.0, "val_ppl": 403.4},
                {"event": "eval", "step": 10, "val_loss": 5.0, "val_ppl": 148.4}]  # fmt: skip
    fig = viz.run_curves_figure(records, title="smoke")
    top, bottom = fig.axes
    assert [len(line.get_xdata()) for line in top.lines] == [10, 2]
    assert (
        list(bottom.lines[0].get_ydata()) == [403.4, 148.4]
        and bottom.get_yscale() == "log"
    )
    assert [t.get_text() for t in bottom.texts] == ["403.4", "148.4"]
    long_run = records[:10] + [
        {"event": "eval", "step": s, "val_loss": 1.0, "val_ppl": 1 + s}
        for s in range(1, 11)
    ]
    assert [
        t.get_text() for t in viz.run_curves_figure(long_run).axes[1].texts
    ] == ["2.0", "11.0"]  # first, last
    with pytest.raises(ValueError, match="no training steps"):
        viz.run_curves_figure(
            [{"event": "eval", "step": 1, "val_loss": 1.0, "val_ppl": 2.7}]
        )


# --- Attention maps ----------------------------------------------------------------------------------


def test_attention_maps_frame_holds_every_weight_once_and_drops_the_masked_cells():
    model = tiny_model(30)
    torch.manual_seed(1)
    maps = maps_of_one_sentence(model, S=5, T=4)
    full = viz.attention_maps_frame(maps, drop_masked=False, decimals=6)
    assert list(full.columns) == [
        "kind",
        "layer",
        "head",
        "query",
        "key",
        "weight",
    ]
    sizes = full.groupby("kind").size().to_dict()
    assert sizes == {
        "encoder": 2 * 4 * 25,
        "decoder_self": 2 * 4 * 16,
        "cross": 2 * 4 * 20,
    }
    cell = (
        (full["kind"] == "cross")
        & (full["layer"] == 2)
        & (full["head"] == 3)
        & (full["query"] == 1)
    )
    row = full[cell & (full["key"] == 4)]
    assert row["weight"].item() == pytest.approx(
        maps["cross"][1][0, 2, 1, 4].item(), abs=1e-6
    )

    kept = viz.attention_maps_frame(
        maps
    )  # the look-ahead mask's cells (key after query) are left out
    decoder = kept[kept["kind"] == "decoder_self"]
    assert (
        len(decoder) == 2 * 4 * (4 * 5 // 2)
        and (decoder["key"] <= decoder["query"]).all()
    )
    assert len(kept[kept["kind"] == "encoder"]) == 2 * 4 * 25
    with pytest.raises(ValueError, match=r"unknown kinds \['self'\]"):
        viz.attention_maps_frame({"self": maps["encoder"]})


def test_attention_maps_chart_filters_layer_and_head_in_the_browser():
    model = tiny_model(30, N=3, h=2)
    torch.manual_seed(2)
    frame = viz.attention_maps_frame(maps_of_one_sentence(model, S=5, T=4))
    src, tgt = ["a", "b", "c", "d", "</s>"], ["<s>", "x", "y", "z"]
    spec = viz.attention_maps_chart(
        frame, src, tgt, title="one sentence"
    ).to_dict()

    params = {p["name"]: p for p in spec["params"]}
    assert params["layer"]["bind"] == {
        "input": "range",
        "min": 1,
        "max": 3,
        "step": 1,
        "name": "layer ",
    }
    assert (
        params["head"]["bind"]["max"] == 2
        and params["head"]["value"] == 1
        and params["layer"]["value"] == 3
    )
    panels = spec["hconcat"]
    assert [p["title"] for p in panels] == [
        "encoder self-attention",
        "decoder self-attention",
        "cross-attention",
    ]
    sizes = [len(spec["datasets"][p["data"]["name"]]) for p in panels]
    assert sizes == [
        3 * 2 * 25,
        3 * 2 * 10,
        3 * 2 * 20,
    ]  # each panel embeds only its own rows
    for panel in panels:
        assert {
            "filter": "datum.layer == layer && datum.head == head"
        } in panel["transform"]
    cross = panels[2]
    assert cross["width"] == 13 * 5 and cross["height"] == 13 * 4
    assert json.dumps(src) in cross["encoding"]["x"]["axis"]["labelExpr"]
    assert cross["encoding"]["color"]["scale"] == {
        "type": "sqrt",
        "domain": [0, 1],
        "scheme": "blues",
    }

    with pytest.raises(
        ValueError,
        match="encoder: the weights reach 5 × 5 cells, but 4 query and 4 key tokens",
    ):
        viz.attention_maps_chart(frame, src[:4], tgt)
    with pytest.raises(
        ValueError, match="exceed max_rows=100; choose a shorter sentence"
    ):
        viz.attention_maps_chart(frame, src, tgt, max_rows=100)


# --- Published results ------------------------------------------------------------------------------


def fake_run(folder, hypotheses):
    folder.mkdir()
    config = {"name": "multi30k", "N": 3, "d_model": 512, "d_ff": 2048, "h": 8, "dropout": 0.3, "vocab_size": 8000,
              "max_tokens": 8192, "epochs": 40, "warmup": 1000, "lr_factor": 0.5, "label_smoothing": 0.1}  # fmt: skip
    summary = {"out_dir": "/home/someone/runs/multi30k", "device_name": "NVIDIA H100 80GB HBM3", "torch": "2.13.0",
               "parameters": 26173248, "steps": 5000, "epochs_done": 40, "wall_s": 420.0, "tokens_per_s": 250000.0,
               "amp": "bfloat16", "compile": False, "val_loss": 1.3, "val_ppl": 3.67}  # fmt: skip
    test = {"sentences": len(hypotheses), "beam": 4, "length_penalty": 0.6, "checkpoints": ["epoch-039.pt"],
            "bleu": 12.5, "sacrebleu": 12.5, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2",
            "loss": 1.4, "ppl": 4.06}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "results.json").write_text(json.dumps({"test2016": test}))
    (folder / "test2016.hyp.en").write_text(
        "".join(h + "\n" for h in hypotheses)
    )


def test_published_results_round_trip_and_rescore(tmp_path):
    hypotheses = ["A dog runs in the snow.", "Two children play.", ""]
    references = [
        "A dog is running in the snow.",
        "Two kids play in a park.",
        "A woman reads.",
    ]
    fake_run(tmp_path / "run", hypotheses)
    results = tmp_path / "results"
    assert (
        viz.load_published_results(results / "multi30k.json") is None
    )  # not published yet

    path = viz.write_published_results(
        tmp_path / "run", results, measured_at="2026-11-22T10:00:00+00:00"
    )
    assert path == results / "multi30k.json"
    record = viz.load_published_results(path)
    assert (
        record["measured_at"] == "2026-11-22T10:00:00+00:00"
        and record["device_name"] == "NVIDIA H100 80GB HBM3"
    )
    assert (
        "out_dir" not in record["train"] and record["test"]["bleu"] == 12.5
    )
    assert (
        results / record["hypotheses"]
    ).read_text() == "A dog runs in the snow.\nTwo children play.\n\n"

    table = viz.published_results_frame(record)
    assert table.loc["device", "value"] == "NVIDIA H100 80GB HBM3"
    assert table.loc["test2016: sacreBLEU", "value"] == "12.50"
    assert table.loc["parameters", "value"] == "26,173,248"
    assert table.loc["sacreBLEU signature", "value"].startswith(
        "nrefs:1|case:mixed"
    )

    scores = viz.rescore_hypotheses(
        results / record["hypotheses"], references
    )
    assert scores["sentences"] == 3
    assert scores["bleu"] == pytest.approx(
        corpus_bleu(hypotheses, references).score
    )
    assert scores["sacrebleu"] == pytest.approx(scores["bleu"], abs=1e-9)
    assert scores["signature"].startswith(
        "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:"
    )
    with pytest.raises(ValueError, match="has 3 lines but 2 references"):
        viz.rescore_hypotheses(
            results / record["hypotheses"], references[:2]
        )


def test_published_results_explain_what_is_missing(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"lacks \['config.json', .*python -m aiayn.evaluate",
    ):
        viz.write_published_results(tmp_path, tmp_path / "results")
    (tmp_path / "bad.json").write_text(json.dumps({"name": "multi30k"}))
    with pytest.raises(
        ValueError, match="lacks .*'measured_at'.*write_published_results"
    ):
        viz.load_published_results(tmp_path / "bad.json")


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
