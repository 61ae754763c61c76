"""The page's translator, aiayn/web/translator.mjs, is aiayn.export.translator: Node runs it on the same files.

Python writes what it gets to a JSON file (sentencepiece's ids and texts; ``greedy``, ``beam_search`` and
``attention`` over the float32 and the int8 graphs, and the trees ``SearchTree`` records of a few beam
searches), then ``node --test`` runs tests/js/*.test.mjs against it: the same tokens on float32, the same on
nearly every sentence on int8 (tests/js/translator.int8.test.mjs says why not on every one); the same trees
(tests/js/search_tree.test.mjs).

How a sentence is read before it is split (``translation.normalise`` and ``is_blank``) needs no model: its
cases are committed, tests/js/normalise.cases.json (``python tests/test_web_js.py`` writes them again), and
tests/js/normalise.test.mjs holds ``normalise`` and ``isBlank`` to them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aiayn.data.multi30k import Tokenizer, load_multi30k
from aiayn.decoding.translate import ZERO_WIDTH, is_blank, normalise
from aiayn.export import scores
from aiayn.export import translator as tr
from aiayn.export.graphs import SETTINGS_JSON
from aiayn.export.shortlist import load as load_shortlist
from aiayn.export.shortlist import targets as shortlist_targets
from conftest import PUBLISHED

REPO = Path(__file__).resolve().parents[1]
# text the tokenizer must split as sentencepiece does: blanks, emoji, specials written out, umlauts
ODD = [
    "", " ", "  ", "\t", "\t\n", "\U0001f600", "\U0001f600\U0001f389", "ab\U0001f600\U0001f600cd",
    "<unk>", "<s>", "</s>", "Straße über Öl", "ÄÖÜäöüß", " führt", "x  y", "Ein Hund \U0001f436 läuft.",
    "a\u2581b", "\u2581", "Cafe\u0301", "日本語", "Mann\tFrau", "  vorne und hinten  ", "\u00a0",
    "123 456", "ＡＢＣ", "ﬁ",
]  # fmt: skip
# text as readers type or paste it: umlauts decomposed (a + U+0308, as some macOS pastes give), runs of
# spaces, tabs and newlines, non-breaking and other Unicode spaces, zero-width characters alone or inside,
# fullwidth letters and ligatures (NFKC makes them plain letters)
ODD_INPUT = [
    "Zwei Ma\u0308dchen u\u0308berqueren die Bru\u0308cke.", "  Ein  Mann\tfährt\n\n Fahrrad.  ",
    "Ein\u00a0Mann\u2009fährt\u3000Fahrrad.", "\u00a0", "\u200b", "\u200b\u2060\ufeff", " \u200c \u200d\t",
    "Ein\u200bMann.", "\ufeffEin Mann.", "Ein\x1cMann\x85fährt.", "Cafe\u0301", "\u212b", "ﬁ", "\u1100\u1161",
    "a\u0323\u0307", "\r\n", "", "Ｅｉｎ Ｈｕｎｄ ｌäｕｆｔ．", "Zwei Männer auf einem Schiﬀ.", "ﬂach ﬁnden",
]  # fmt: skip
NORMALISE_CASES = REPO / "tests/js/normalise.cases.json"
# sentences searched on each kind of graph, from the end of test 2016 (other tests read its start)
SENTENCES = {"fp32": 50, "int8": 50}
# the first sentences are also sampled, with each of these settings and seeds
SAMPLED = 6
SHORTLISTED = 12  # sentences also searched with the shortlist
TRACED = 4  # sentences whose beam search is also recorded as a tree (SearchTree), every id and the shortlist
# the page's head grid (issue 44) scores the first 100 sentences of test 2016 (heads.json): the first 25 hold
# maskedBleu to Python's English and BLEU here (tests/site/test_head_mask.py checks the page's 100 in Chromium)
MASKED = 25
# masks the page cannot use, written as JSON can (NaN and infinity: tests/js/head_mask.test.mjs)
BAD_MASKS = (
    [[1, 0], [1]], [[1] * 8] * 3, "all", [[[0.5] * 8] * 3] * 3,
    [[[1] * 8] * 3] * 2 + [[[1] * 8] * 2 + [[1] * 7 + [2]]],  # a 2 in the last head
)  # fmt: skip
SAMPLINGS = [
    {"temperature": 1.0, "top_k": None, "top_p": None, "seed": 1},
    {"temperature": 1.5, "top_k": 40, "top_p": 0.9, "seed": 2026},
]


def normalise_cases() -> dict:
    """What tests/js/normalise.cases.json holds: Python's whitespace, zero-width characters, and what
    ``normalise`` and ``is_blank`` make of ODD_INPUT."""
    return {
        "what": "aiayn.decoding.translate.normalise and is_blank on odd input (tests/test_web_js.py writes this file)",
        "whitespace": [c for c in range(0x110000) if chr(c).isspace()],
        "zero_width": sorted(map(ord, ZERO_WIDTH)),
        "texts": [{"text": t, "normalised": normalise(t), "blank": is_blank(t)} for t in ODD_INPUT],
    }


def _source_case(vocab: tr.Vocabulary, text: str, max_len: int) -> dict:
    case = {"text": text, "max_len": max_len}
    try:
        return {**case, "ids": tr.source_ids(vocab, text, max_len)}
    except ValueError as err:
        return {**case, "error": str(err)}


def _searched(folder: Path, kind: str, sentences: list[dict]):
    """Greedy and beam search of the sentences on one kind of graph, and the attention of two."""
    settings = json.loads((folder / SETTINGS_JSON).read_text())
    vocab = tr.Vocabulary.load(folder)
    model = tr.OnnxModel(folder, int8=kind == "int8", threads=1)
    shortlist = load_shortlist(folder)
    beam, alpha = settings["beam"], settings["length_penalty"]
    found, maps = [], []
    for s in sentences[: SENTENCES[kind]]:
        src, limit = s["src"], s["limit"]
        ys = tr.beam_search(model, vocab, src, limit, beam, alpha)
        found.append(
            {
                "greedy": tr.greedy(model, vocab, src, limit),
                "beam": ys,
                "beam_text": tr.detokenize(vocab, ys),
            }
        )
        if len(found) <= TRACED:  # the tree the page draws, searched again with a trace
            found[-1]["tree"] = _traced(model, vocab, src, limit, beam, alpha)
        if len(maps) < 2:
            weights = tr.attention(model, src, ys)
            maps.append({"src": src, "ys": ys} | _lists(weights))
        if len(found) <= SAMPLED:  # the page's draws, with a seed
            found[-1]["sampled"] = [
                {"sampling": how, "ids": tr.sample(model, vocab, src, limit, how)}
                for how in SAMPLINGS
            ]
        if len(found) <= SHORTLISTED:  # the page's searches: the export's shortlist
            targets = shortlist_targets(shortlist, src, vocab.eos_id)
            found[-1]["shortlisted"] = {
                "targets": targets,
                "greedy": tr.greedy(model, vocab, src, limit, targets),
                "beam": tr.beam_search(model, vocab, src, limit, beam, alpha, targets),
            }
            if len(found) <= TRACED:
                found[-1]["shortlisted"]["tree"] = _traced(model, vocab, src, limit, beam, alpha, targets)
    return found, maps


def _traced(model, vocab, src, limit, beam, alpha, targets=None) -> dict:
    """``beam_search(..., trace=SearchTree())``'s tree; the search's output must be the same as without."""
    trace = tr.SearchTree()
    ys = tr.beam_search(model, vocab, src, limit, beam, alpha, targets, trace)
    assert ys == tr.beam_search(model, vocab, src, limit, beam, alpha, targets)
    return trace.tree


def head_masks(shape) -> dict:
    """All ones and a seeded mask with a quarter of the heads off, of every kind and layer (the layout
    [kind][layer][head] read the same way in both languages), as nested lists (the page's)."""
    import numpy as np

    rng = np.random.default_rng(44)
    random = (rng.random(shape) > 0.25).astype(float)
    return {"all ones": np.ones(shape).tolist(), "random": random.tolist()}


def _masked(folder: Path, pairs: list) -> dict:
    """``masked_bleu`` of ``pairs`` on the float32 graphs with each of ``head_masks``; and the refusals."""
    vocab, settings = tr.Vocabulary.load(folder), tr.load_settings(folder)
    model = tr.OnnxModel(folder, int8=False, threads=1)
    masks = head_masks(model.head_mask_shape)
    bleus = {name: scores.masked_bleu(model, vocab, settings, pairs, mask) for name, mask in masks.items()}
    bad = []
    for mask in BAD_MASKS:
        try:
            tr.check_head_mask(mask, model.head_mask_shape)
        except ValueError as err:
            bad.append({"mask": mask, "error": str(err)})
    assert len(bad) == len(BAD_MASKS)
    return {"shape": list(model.head_mask_shape), "pairs": pairs, "masks": masks, "fp32": bleus, "bad": bad}


def _lists(weights: dict) -> dict:
    return {kind: w.tolist() for kind, w in weights.items()}


# what a step may score: a shortlist, ids outside the vocabulary, <eos> alone, nothing
SCORED_TARGETS = ([2, 5, 9], [-1, 5], [5, 99999], "eos", [])


def _scored_case(vocab: tr.Vocabulary, targets) -> dict:
    """``scored``'s ids, or its refusal, for the Node tests."""
    targets = [vocab.eos_id] if targets == "eos" else targets
    try:
        return {"targets": targets, "ids": tr.scored(vocab, targets).tolist()}
    except ValueError as err:
        return {"targets": targets, "error": str(err)}


@pytest.fixture(scope="module")
def cases(exported, root, tmp_path_factory) -> Path:
    """Python's outputs for the Node tests, in ``cases.json`` in a temporary folder."""
    tokenizer = Tokenizer(PUBLISHED / "tokenizer.model")
    vocab = tr.Vocabulary.load(exported)
    settings = json.loads((exported / SETTINGS_JSON).read_text())
    val, test = (load_multi30k(s, root) for s in ("val", "test2016"))
    tokens = []
    for text in [text for pair in val + test for text in pair] + ODD:
        ids = tokenizer.encode(text)
        decoded = tokenizer.decode(ids)
        tokens.append({"text": text, "ids": ids, "decoded": decoded})
    blank = ("", "\U0001f600 \U0001f389", " \t", "Ein Mann.", *ODD_INPUT)
    sources = [_source_case(vocab, t, settings["max_len"]) for t in blank]
    sources.append(_source_case(vocab, "Hund " * 300, 256))
    sources.append(_source_case(vocab, "Ein Mann auf einem Pferd.", 4))
    sentences = []
    for text, _ in test[-max(SENTENCES.values()) :]:
        src = tokenizer.encode(text) + [vocab.eos_id]
        limit = tr.output_limit(len(src), settings)
        sentences.append({"text": text, "src": src, "limit": limit})
    record = {"tokens": tokens, "sources": sources, "sentences": sentences,
              "scored": [_scored_case(vocab, t) for t in SCORED_TARGETS]}  # fmt: skip
    runs, record["attention"] = {}, {}
    with ThreadPoolExecutor(2) as pool:  # onnxruntime releases the GIL
        for kind in SENTENCES:
            runs[kind] = pool.submit(_searched, exported, kind, sentences)
        masked = pool.submit(_masked, exported, [list(p) for p in test[:MASKED]])
    for kind, run in runs.items():
        record[kind], record["attention"][kind] = run.result()
    record["head_masks"] = masked.result()
    path = tmp_path_factory.mktemp("js") / "cases.json"
    path.write_text(json.dumps(record, ensure_ascii=False), "utf-8")
    return path


def test_the_javascript_translator_gives_python_s_results(exported, cases):
    node = _node()
    if not (REPO / "node_modules/onnxruntime-web").is_dir():
        pytest.fail(f"onnxruntime-web is missing: run `npm ci` in {REPO}")
    env = os.environ | {"AIAYN_EXPORT": str(exported)}
    env["AIAYN_JS_CASES"] = str(cases)
    tests = sorted((REPO / "tests/js").glob("*.test.mjs"))
    # the float32 and the int8 file side by side, one WebAssembly thread each
    command = [node, "--test", "--test-concurrency=2", *map(str, tests)]
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    assert run.returncode == 0, f"node failed:\n{run.stdout}\n{run.stderr}"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not on PATH: these tests need Node 20.10+")
    return node


def test_the_page_s_sampler_draws_what_decoding_sample_draws(exported, published, root):
    """A seed on the page (onnx_translator.sample, translator.mjs's twin) writes the sentence that
    chapter 8's ``decoding.sample(..., seed=)`` writes with the PyTorch model: float32 graphs."""
    import torch

    from aiayn.decoding.search import sample

    model, tokenizer = published
    vocab = tr.Vocabulary.load(exported)
    settings = json.loads((exported / SETTINGS_JSON).read_text())
    graphs = tr.OnnxModel(exported, int8=False, threads=1)
    test = load_multi30k("test2016", root)
    for (text, _), how in zip(test[:6], SAMPLINGS * 3, strict=False):
        src = tokenizer.encode(text) + [vocab.eos_id]
        limit = tr.output_limit(len(src), settings)
        page = tr.sample(graphs, vocab, src, limit, how)
        keywords = {k: how[k] for k in ("temperature", "top_k", "top_p", "seed")}
        ours = sample(model, torch.tensor([src]), None, limit, vocab.bos_id, vocab.eos_id, **keywords)
        assert page == ours[0].tolist()[: len(page)], text
        assert all(i == vocab.pad_id for i in ours[0].tolist()[len(page) :])


def test_the_committed_normalisation_cases_are_python_s():
    committed = json.loads(NORMALISE_CASES.read_text("utf-8"))
    assert committed == normalise_cases(), f"{NORMALISE_CASES} is out of date: `python tests/test_web_js.py`"


def nfkc_cases() -> dict:
    """What ``normalise`` makes of each code point that Python's Unicode assigns, where it changes it
    (NFKC: fullwidth letters, ligatures, ...), and the code points it does not assign (newer Unicode
    versions may give them decompositions; assigned ones keep theirs, by Unicode's stability policy)."""
    changed, unassigned = {}, []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates: no character
            continue
        c = chr(cp)
        if unicodedata.category(c) == "Cn":
            if unassigned and unassigned[-1][1] == cp - 1:
                unassigned[-1][1] = cp
            else:
                unassigned.append([cp, cp])
        elif normalise(c) != c:
            changed[cp] = normalise(c)
    return {"unicode": unicodedata.unidata_version, "changed": changed, "unassigned": unassigned}


def test_normalise_and_is_blank_in_javascript_are_python_s(tmp_path):
    """No model needed: the committed cases, every code point's whitespace, and NFKC code point by
    code point (Python's table, written for this run)."""
    cases = nfkc_cases()
    assert cases["changed"][ord("Ａ")] == "A" and cases["changed"][ord("ﬁ")] == "fi"
    path = tmp_path / "nfkc.json"
    path.write_text(json.dumps(cases, ensure_ascii=False), "utf-8")
    command = [_node(), "--test", str(REPO / "tests/js/normalise.test.mjs")]
    run = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"AIAYN_NFKC_CASES": str(path)})
    assert run.returncode == 0, f"node failed:\n{run.stdout}\n{run.stderr}"
    assert "# skipped 0" in run.stdout, run.stdout


def test_fullwidth_letters_and_ligatures_are_read_as_plain_letters():
    """NFKC, as the page's normalise (String.prototype.normalize('NFKC')); German captions stay as they are."""
    assert normalise("Ｅｉｎ Ｈｕｎｄ ｌäｕｆｔ．") == "Ein Hund läuft."
    assert normalise("Zwei Männer auf einem Schiﬀ.") == "Zwei Männer auf einem Schiff."
    assert normalise("ﬂach ﬁnden") == "flach finden"
    assert normalise("Straße über Öl, 3 Äpfel") == "Straße über Öl, 3 Äpfel"


if __name__ == "__main__":
    NORMALISE_CASES.write_text(json.dumps(normalise_cases(), indent=1) + "\n")
    print(f"wrote {NORMALISE_CASES}")
