"""The self-check questions that end every chapter (assets/quiz.mjs, assets/quizzes.json), answered without a kernel.

The first tests read the quiz data alone: one quiz on the last page of each of chapters 1-12, every question with
exactly one right choice and an explanation for each choice, or a number with a tolerance. The others drive the
built website in Chromium: each quiz is there, folded, before the page's "Next:" paragraph; every choice and number
gets its verdict; the keyboard alone can answer; the verdicts are readable in the light and the dark theme.
"""

from __future__ import annotations

import json
import math
import re

import pytest
import siteutil as su

DATA = su.ROOT / "assets" / "quizzes.json"
CHAPTERS = range(1, 13)
MIN_CONTRAST = 4.5  # WCAG AA for text of normal size


def quizzes() -> dict:
    return json.loads(DATA.read_text(encoding="utf-8"))


def last_pages() -> dict[int, str]:
    """chapter number -> the last page of that chapter in _toc.yml (its last section, or the chapter alone)."""
    last = {}
    for docname in su.toc_docnames():
        match = re.match(r"book/(\d\d)_", docname)
        if match:
            last[int(match.group(1))] = docname  # toc_docnames lists a chapter's sections in reading order
    return last


def choice_questions():
    return [(doc, q) for doc, quiz in quizzes().items() for q in quiz["questions"] if "choices" in q]


def number_questions():
    return [(doc, q) for doc, quiz in quizzes().items() for q in quiz["questions"] if "choices" not in q]


# --- the data ----------------------------------------------------------------------------------------------


def test_one_quiz_on_the_last_page_of_every_chapter():
    data, last = quizzes(), last_pages()
    assert set(CHAPTERS) <= set(last), f"_toc.yml lists chapters {sorted(last)}"  # the engine's part (13) has none
    assert set(data) == {last[n] for n in CHAPTERS}, (
        f"quizzes.json names {sorted(data)}; the last pages of chapters 1-12 are {[last[n] for n in CHAPTERS]}"
    )
    for chapter in CHAPTERS:
        quiz = data[last[chapter]]
        assert quiz["chapter"] == chapter, f"{last[chapter]} is the last page of chapter {chapter}: {quiz['chapter']}"
        assert 3 <= len(quiz["questions"]) <= 4, f"chapter {chapter} has {len(quiz['questions'])} questions"


def test_every_choice_question_has_one_right_choice_and_says_why_for_each():
    questions = choice_questions()
    assert len(questions) >= 24
    for doc, q in questions:
        rights = [c["text"] for c in q["choices"] if c["right"] is True]
        assert len(rights) == 1, f"{doc}: {q['prompt']!r} has {len(rights)} right choices: {rights}"
        assert 3 <= len(q["choices"]) <= 4, f"{doc}: {q['prompt']!r} has {len(q['choices'])} choices"
        assert all(c["right"] in (True, False) for c in q["choices"]), f"{doc}: {q['prompt']!r}: right is a bool"
        texts = [c["text"] for c in q["choices"]]
        assert len(set(texts)) == len(texts), f"{doc}: {q['prompt']!r} repeats a choice"
        for c in q["choices"]:
            assert len(c["why"].split()) >= 5, f"{doc}: {q['prompt']!r}: choice {c['text']!r} says too little why"


def test_every_number_question_has_an_answer_a_tolerance_and_two_explanations():
    questions = number_questions()
    assert len(questions) >= 8
    for doc, q in questions:
        assert isinstance(q["answer"], int | float) and math.isfinite(q["answer"]), f"{doc}: {q['prompt']!r}"
        assert 0 <= q["tolerance"] < max(abs(q["answer"]), 1e-9) * 0.05, f"{doc}: {q['prompt']!r}: tolerance"
        assert len(q["why"].split()) >= 5 and len(q["wrong"].split()) >= 5, f"{doc}: {q['prompt']!r}"
        example = float(q["example"])  # the hint for a text that is not a number must not give the answer away
        assert abs(example - q["answer"]) > q["tolerance"], f"{doc}: {q['prompt']!r}: the example is the answer"


def test_no_text_is_left_for_mathjax():
    """The quiz is added after MathJax ran: TeX in it would stay raw (and fail test_math_is_typeset)."""
    raw = [
        text
        for quiz in quizzes().values()
        for q in quiz["questions"]
        for text in [q["prompt"], q.get("why", ""), q.get("wrong", "")]
        + [part for c in q.get("choices", []) for part in (c["text"], c["why"])]
        if re.search(r"[$\\]", text)
    ]
    assert not raw, f"TeX in the quiz text: {raw[:5]}"


# --- in the browser ----------------------------------------------------------------------------------------


def open_quiz_page(reader, base_url, docname: str, theme: str | None = None):
    """A page of the reader's profile, loaded like test_pages does; returns (page, report, log). Close it with
    ``su.close_tab``.

    The log holds every console error, and the warnings that come from the quiz's module (a chart's Vega may warn
    about its own spec: that is test_charts' business).
    """
    page = reader.new_page()
    if theme:  # the reader's choice, stored before the page's scripts read it
        page.add_init_script(f"localStorage.setItem('theme', '{theme}'); localStorage.setItem('mode', '{theme}');")
    log: list[str] = []

    def on_console(message):
        where = (message.location or {}).get("url", "")
        if message.type == "error" or (message.type == "warning" and "quiz" in where):
            log.append(f"{message.type}: {message.text} ({where})")

    page.on("console", on_console)
    report = su.watch(page, base_url)
    page.goto(f"{base_url}/{su.html_path(docname)}", wait_until="load")
    page.wait_for_selector("section.aiayn-quiz", state="attached", timeout=15_000)
    return page, report, log


def feedback(page, fieldset) -> str:
    box = fieldset.locator(".aiayn-quiz-feedback")
    page.wait_for_function("el => el.textContent.length > 0", arg=box.element_handle(), timeout=5_000)
    return box.inner_text().strip()


PLACE_JS = """() => {
  const art = document.querySelector('article.bd-article');
  const quiz = art.querySelector('section.aiayn-quiz');
  const next = Array.from(art.querySelectorAll('p')).filter(p => /^\\s*Next:/.test(p.textContent)).pop();
  const details = quiz.querySelector('details');
  return {hasNext: !!next, beforeNext: !!next && quiz.nextElementSibling === next,
          followedBy: next ? !!(quiz.compareDocumentPosition(next) & Node.DOCUMENT_POSITION_FOLLOWING) : null,
          open: details.open, summary: details.querySelector('summary').textContent,
          live: quiz.hasAttribute('data-aiayn-live'),
          fieldsets: Array.from(quiz.querySelectorAll('fieldset')).map(f => ({
            legend: f.querySelector(':scope > legend') ? f.querySelector(':scope > legend').textContent : null,
            live: (f.querySelector('.aiayn-quiz-feedback') || {}).getAttribute?.('aria-live') || null,
            radios: f.querySelectorAll('input[type=radio]').length,
            labels: Array.from(f.querySelectorAll('.aiayn-quiz-choices label')).map(l => l.textContent.trim()),
          }))};
}"""


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda n: f"chapter-{n}")
def test_each_chapter_ends_with_a_quiz_that_answers(chapter, reader, base_url, site):
    docname = last_pages()[chapter]
    quiz = quizzes()[docname]
    page, report, log = open_quiz_page(reader, base_url, docname)
    try:
        shown = page.evaluate(PLACE_JS)
        assert f"Check yourself: chapter {chapter}" in shown["summary"]
        assert not shown["open"], f"{docname}: the quiz should start folded, to keep the page short"
        assert shown["live"], "the quiz answers in the browser: data-aiayn-live (test_pages' dead controls)"
        if shown["hasNext"]:
            assert shown["beforeNext"], f"{docname}: the quiz is not right before the page's Next: paragraph"
        assert len(shown["fieldsets"]) == len(quiz["questions"]) >= 3
        page.locator("section.aiayn-quiz summary").click()
        fieldsets = page.locator("section.aiayn-quiz fieldset")
        for index, (q, view) in enumerate(zip(quiz["questions"], shown["fieldsets"], strict=True)):
            assert view["legend"] == q["prompt"], f"{docname}: question {index + 1} has no legend or another"
            assert view["live"] == "polite", f"{docname}: question {index + 1}'s feedback is not a live region"
            fieldset = fieldsets.nth(index)
            if "choices" in q:
                assert view["labels"] == [c["text"] for c in q["choices"]]
                # every wrong choice first, then the right one: each says its own why
                order = [i for i, c in enumerate(q["choices"]) if not c["right"]]
                order += [i for i, c in enumerate(q["choices"]) if c["right"]]
                for i in order:
                    fieldset.locator("input[type=radio]").nth(i).check()
                    said = feedback(page, fieldset)
                    verdict = "Right." if q["choices"][i]["right"] else "Not quite."
                    assert said == f"{verdict} {q['choices'][i]['why']}", f"{docname} q{index + 1} choice {i}"
            else:
                field, check = fieldset.locator("input[type=text]"), fieldset.get_by_role("button", name="Check")
                answer, tolerance = q["answer"], q["tolerance"]
                tries = [
                    (f"{answer + tolerance * 0.9:.12g}", "Right.", q["why"]),
                    (f"{answer - tolerance * 0.9:.12g}", "Right.", q["why"]),
                    (f"{answer + 2 * tolerance + max(abs(answer) * 0.01, 0.01):.12g}", "Not quite.", q["wrong"]),
                    (f"{answer - 2 * tolerance - max(abs(answer) * 0.01, 0.01):.12g}", "Not quite.", q["wrong"]),
                    ("about a half", "A number, please.", f"Type a number, such as {q['example']}."),
                ]
                for text, verdict, why in tries:
                    field.fill(text)
                    check.click()
                    said = feedback(page, fieldset)
                    assert said == f"{verdict} {why}", f"{docname} q{index + 1}: typed {text!r}"
        problems = log + report.page_errors + report.failed_local
        assert not problems, f"{docname}: {problems}"
    finally:
        su.close_tab(page)


def test_a_keyboard_alone_answers(reader, base_url, site):
    """Tab to the fold and open it with Enter, Tab to a radio, move with an arrow key, type a number and press Enter."""
    docname = last_pages()[1]
    quiz = quizzes()[docname]
    assert "choices" in quiz["questions"][0], f"{docname}: the keyboard test starts with a choice question"
    number = next(i for i, q in enumerate(quiz["questions"]) if "choices" not in q)
    page, _, log = open_quiz_page(reader, base_url, docname)
    try:
        page.locator("section.aiayn-quiz summary").focus()
        page.keyboard.press("Enter")
        assert page.evaluate("() => document.querySelector('section.aiayn-quiz details').open")
        fieldsets = page.locator("section.aiayn-quiz fieldset")
        page.keyboard.press("Tab")  # to the first question's radios: the first one, none being checked yet
        focused = page.evaluate("() => [document.activeElement.type, document.activeElement.value]")
        assert focused == ["radio", "0"], f"Tab went to {focused}"
        page.keyboard.press("ArrowDown")  # checks the second choice, and answers at once
        choice = quiz["questions"][0]["choices"][1]
        said = feedback(page, fieldsets.nth(0))
        assert said == ("Right. " if choice["right"] else "Not quite. ") + choice["why"]
        q = quiz["questions"][number]
        field = fieldsets.nth(number).locator("input[type=text]")
        field.focus()
        page.keyboard.type(f"{q['answer']:.12g}")
        page.keyboard.press("Enter")  # Enter in the field checks it
        assert feedback(page, fieldsets.nth(number)) == f"Right. {q['why']}"
        page.keyboard.press("Control+A")
        page.keyboard.type("twelve")
        page.keyboard.press("Tab")  # to the Check button, and Enter presses it
        assert page.evaluate("() => document.activeElement.textContent") == "Check"
        page.keyboard.press("Enter")
        assert feedback(page, fieldsets.nth(number)) == f"A number, please. Type a number, such as {q['example']}."
        assert not log, log
    finally:
        su.close_tab(page)


# The contrast of a verdict's word and of its explanation against what is behind them (WCAG 2 relative luminance).
CONTRAST_JS = """(sel) => {
  const rgb = c => (c.match(/[\\d.]+/g) || []).map(Number);
  const linear = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = ([r, g, b]) => 0.2126 * linear(r) + 0.7152 * linear(g) + 0.0722 * linear(b);
  const behind = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0)) return c;
    }
    return [255, 255, 255];
  };
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const box = document.querySelector(sel);
  return [box.querySelector('strong'), box].map(el => ({
    color: getComputedStyle(el).color, background: behind(el).join(','),
    ratio: ratio(rgb(getComputedStyle(el).color), behind(el)),
  }));
}"""


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_verdicts_are_readable_in_both_themes(theme, reader, base_url, site):
    docname = last_pages()[1]
    quiz = quizzes()[docname]
    index = next(i for i, q in enumerate(quiz["questions"]) if "choices" in q)
    right = next(i for i, c in enumerate(quiz["questions"][index]["choices"]) if c["right"])
    wrong = next(i for i, c in enumerate(quiz["questions"][index]["choices"]) if not c["right"])
    page, _, log = open_quiz_page(reader, base_url, docname, theme=theme)
    try:
        assert page.evaluate("() => document.documentElement.dataset.theme") == theme
        page.locator("section.aiayn-quiz summary").click()
        fieldset = page.locator("section.aiayn-quiz fieldset").nth(index)
        selector = f"#{fieldset.get_attribute('aria-describedby')}"
        for choice in (right, wrong):
            fieldset.locator("input[type=radio]").nth(choice).check()
            feedback(page, fieldset)
            for part, measured in zip(("verdict", "explanation"), page.evaluate(CONTRAST_JS, selector), strict=True):
                print(f"{theme} {'right' if choice == right else 'wrong'} {part}: {measured}")
                assert measured["ratio"] >= MIN_CONTRAST, f"{theme}: the {part} is hard to read: {measured}"
        assert not log, log
    finally:
        su.close_tab(page)
