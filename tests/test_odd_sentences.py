"""Sentences the published model cannot translate honestly get an answer that says so.

Blank input, or input with no piece the model knows, translates to "" (not a sentence the model
invents); input longer than the model's positions is refused with its length and the limit, or cut
with a warning that says how much was cut. The same holds in ``translate`` and the chapter's widget.
"""

from __future__ import annotations

import unicodedata
import warnings

import matplotlib
import pytest

matplotlib.use("Agg")

from aiayn.data.multi30k import load_multi30k  # noqa: E402
from aiayn.decoding.translate import normalise, source_ids, translate  # noqa: E402
from aiayn.pages.widgets import Translator  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

LONG = " ".join(["Ein Hund läuft über die Wiese."] * 40)  # about 280 pieces


def test_blank_and_unknown_sentences_translate_to_nothing(published):
    model, tokenizer = published
    odd = ["", "   ", "\t\n", "😀🎉"]
    got = translate(model, tokenizer, ["Ein Hund.", *odd, "Zwei Männer."], beam=2)
    assert got[1:5] == ["", "", "", ""]
    assert got[0] and got[5]  # the others are translated as they would be alone
    assert got[0] == translate(model, tokenizer, ["Ein Hund."], beam=2)[0]
    assert translate(model, tokenizer, odd, beam=1) == ["", "", "", ""]


def test_a_sentence_longer_than_the_positions_is_refused_or_cut_with_a_warning(published):
    model, tokenizer = published
    n = len(tokenizer.encode(LONG))
    assert n + 1 > model.config.max_len == 256
    with pytest.raises(ValueError, match=rf"sentence 1 has {n} pieces \+ <eos>, the model reads at most 256: shorten"):
        translate(model, tokenizer, ["Ein Hund.", LONG], beam=1)
    with pytest.warns(UserWarning, match=rf"sentence 0 has {n} pieces .*its last {n + 1 - 256} pieces are cut off"):
        ids = source_ids(tokenizer, [LONG], model.config.max_len, cut_long=True)
    assert len(ids[0]) == 256
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert translate(model, tokenizer, [LONG], beam=1, cut_long=True)[0]
    assert len(caught) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_len_a": -5, "max_len_b": -5}, r"max_len_a: expected a finite number >= 0, got -5"),
        ({"max_len_a": float("inf")}, r"max_len_a: expected a finite number >= 0, got inf"),
        ({"max_len_b": 0}, r"max_len_b must be an integer >= 1, got 0|max_len_b.*>= 1.*0"),
    ],
)
def test_output_limits_that_give_no_token_are_refused_by_name(published, kwargs, message):
    model, tokenizer = published
    with pytest.raises(ValueError, match=message):
        translate(model, tokenizer, ["Ein Hund."], **kwargs)


def test_wrong_types_are_named(published):
    model, tokenizer = published
    with pytest.raises(TypeError, match="expected a list of str, got one str"):
        translate(model, tokenizer, "Ein Hund.")
    with pytest.raises(TypeError, match="expected a list of str, got NoneType, int items"):
        translate(model, tokenizer, ["Ein Hund.", None, 3])


def test_the_widget_says_when_there_is_nothing_to_translate_or_too_much(published):
    model, tokenizer = published
    widget = Translator(model, tokenizer, text="😀🎉", beam=1)
    assert widget.translation == "" and "nothing to translate" in widget.output.value
    assert widget.weights is None and widget.image.value == b""
    widget.text.value = LONG
    assert "the model reads at most 256: shorten it" in widget.output.value and widget.translation == ""
    widget.text.value = "Ein Hund läuft."
    assert widget.translation and widget.weights is not None


# fullwidth letters (and a fullwidth full stop) and ligatures, with the captions they spell
COMPATIBLE = {
    "Ｅｉｎ Ｈｕｎｄ ｌäｕｆｔ ａｕｆ ｄｅｒ Ｗｉｅｓｅ．": "Ein Hund läuft auf der Wiese.",
    "Zwei Männer auf einem Schiﬀ.": "Zwei Männer auf einem Schiff.",
    "Ein Mann mit einem ﬂachen Hut.": "Ein Mann mit einem flachen Hut.",
    "Ein Kind ﬁndet einen Ball.": "Ein Kind findet einen Ball.",
}


def test_fullwidth_letters_and_ligatures_translate_as_the_plain_letters_do(published):
    """NFKC (translation.normalise): the model reads the letters it learned, not pieces it never saw."""
    model, tokenizer = published
    odd, plain = list(COMPATIBLE), list(COMPATIBLE.values())
    assert source_ids(tokenizer, odd, 256) == source_ids(tokenizer, plain, 256)
    assert translate(model, tokenizer, odd, beam=2) == translate(model, tokenizer, plain, beam=2)


def test_nfkc_leaves_the_multi30k_sources_as_nfc_did(root):
    """No German caption changes: the BLEU of test2016 stays what it was. Only non-breaking spaces
    differ between NFKC and NFC in the sources (44 training sentences, 1 of val), and normalise
    makes them one space either way."""
    changed, nbsp = {}, {}
    for split in ("train", "val", "test2016"):
        sources = [s for s, _ in load_multi30k(split, root)]
        nfc = [" ".join(unicodedata.normalize("NFC", s).split()) for s in sources]
        changed[split] = sum(normalise(s) != n for s, n in zip(sources, nfc, strict=True))
        nbsp[split] = sum(unicodedata.normalize("NFKC", s) != unicodedata.normalize("NFC", s) for s in sources)
    assert changed == {"train": 0, "val": 0, "test2016": 0}
    assert nbsp == {"train": 44, "val": 1, "test2016": 0}
