"""Chapter 9's BLEU calculator on the built site, in Chromium: what the reader types is scored as aiayn.bleu scores it.

The page (aiayn/web/bleu_page.mjs over bleu.mjs) keeps each number it shows in an element with ``data-bleu`` and
its unrounded value in ``data-value``; the test types into the page and compares them with ``sentence_bleu``.
"""

from __future__ import annotations

import pytest
import siteutil as su

from aiayn.bleu import sentence_bleu

DOC = "book/09_bleu"
ROOT = "#aiayn-bleu"
START = ("A man is sleeping on a green couch.", "A man sleeping in a green room on a couch.")  # bleu_page.mjs
NUMBERS_JS = """() => Object.fromEntries(Array.from(document.querySelectorAll('#aiayn-bleu [data-bleu]'))
  .map(e => [e.dataset.bleu, [Number(e.dataset.value), e.textContent]]))"""


@pytest.fixture(scope="module")
def page(browser, base_url, site):
    context = su.new_context(browser, base_url)
    page, _ = su.open_page(context, base_url, su.html_path(DOC))
    page.wait_for_selector(f"{ROOT}[data-aiayn-live] [data-bleu='score']", timeout=10_000)
    yield page
    context.close()


def shown(page) -> dict[str, float]:
    return {name: value for name, (value, _) in page.evaluate(NUMBERS_JS).items()}


def python(hypothesis: str, references: list[str], lowercase: bool = False) -> dict[str, float]:
    r = sentence_bleu(hypothesis, references, lowercase=lowercase)
    numbers = {"c": r.hyp_len, "r": r.ref_len, "bp": r.brevity_penalty, "score": r.score}
    for n in range(1, 5):
        numbers |= {f"m{n}": r.counts[n - 1], f"t{n}": r.totals[n - 1], f"p{n}": r.precisions[n - 1]}
    return numbers


def assert_same(page, expected: dict[str, float]) -> None:
    got = shown(page)
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), (name, got, expected)


def test_the_calculator_starts_with_python_s_numbers(page):
    assert page.input_value(f"{ROOT} input[name=hypothesis]") == START[0]
    assert_same(page, python(START[0], [START[1]]))
    texts = {name: text for name, (_, text) in page.evaluate(NUMBERS_JS).items()}
    assert texts["score"] == f"{sentence_bleu(*START).score:.2f}"  # what the chapter prints beside it


def test_typing_rescores_as_python_does(page):
    hyp = page.locator(f"{ROOT} input[name=hypothesis]")
    before = shown(page)["score"]
    hyp.fill("")
    typed = "A man sleeping in a green room on a sofa."
    hyp.press_sequentially(typed, delay=5)  # key by key, each an input event
    assert_same(page, python(typed, [START[1]]))
    assert shown(page)["score"] != before
    for text in ["", "couch couch couch", "A man on a couch sleeping in a green room.", "green room"]:
        hyp.fill(text)  # empty, clipped, no 4-gram match, short (BP)
        assert_same(page, python(text, [START[1]]))


def test_two_references_and_lowercase(page):
    refs = ["the cat is on the mat", "there is a cat on the mat"]
    page.fill(f"{ROOT} input[name=hypothesis]", "The the the cat")
    page.fill(f"{ROOT} textarea[name=references]", "\n".join(refs))
    assert_same(page, python("The the the cat", refs))
    page.check(f"{ROOT} input[name=lowercase]")
    assert_same(page, python("The the the cat", refs, lowercase=True))
    page.fill(f"{ROOT} textarea[name=references]", "  ")
    assert page.locator(f"{ROOT} [data-bleu]").count() == 0
    assert "at least one reference" in page.inner_text(ROOT)
