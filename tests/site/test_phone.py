"""Chapter 11.4's attention map on a phone: a long sentence's map keeps cells a finger can see and every label.

The map (src/aiayn/web/heatmap.mjs) never shrinks a cell below ``CELL.min`` pixels: a sentence too long for the
column draws wider than it, in a box of its own that scrolls sideways (with the arrow keys too, once it has the
focus), while the page itself stays as wide as the screen. Every piece labels its row and its column, and the axis
titles lie inside the drawing. A short sentence on a desktop screen keeps the largest cells, in a box that does not
scroll. The page is served without its model files, so it shows chapter 11.2's committed examples; the long
sentence is drawn by the page's own ``AttentionView`` into the same translator box.
"""

from __future__ import annotations

import pytest
import siteutil as su

DOC = "book/11_4_in_your_browser"
# each kind of map: the pieces down its rows, the pieces across its columns (as KINDS in heatmap.mjs)
KIND_AXES = {
    "cross": ("decoder_out", "source"),
    "encoder": ("source", "source"),
    "decoder_self": ("decoder_out", "decoder_in"),
}
KINDS = tuple(KIND_AXES)
# 30 German words, 31 English ones: a sentence a reader may well type, with long pieces among short ones
GERMAN = (
    "Ein Mann mit einem roten Hut und eine Frau mit einer blauen Jacke sitzen auf einer Bank im Park, "
    "während zwei kleine Kinder mit einem Hund auf der Wiese spielen."
)
ENGLISH = (
    "A man in a red hat and a woman in a blue jacket are sitting on a bench in the park "
    "while two small children are playing with a dog on the meadow."
)

# the page's own module draws a sentence into the translator's box: pieces as SentencePiece writes them
# (▁ starts a word), one layer and one head, each row's weights a softmax that peaks near the diagonal
DRAW_JS = """async ([german, english]) => {
  const {AttentionView, CELL} = await import('/_static/translator/heatmap.mjs');
  const pieces = text => text.split(' ').map(w => '▁' + w);
  const source = [...pieces(german), '</s>'];
  const out = [...pieces(english), '</s>'];
  const tokens = {source, decoder_out: out, decoder_in: ['<s>', ...out.slice(0, -1)]};
  const map = (rows, cols) => [[rows.map((_, r) => {
    const e = cols.map((_, c) => Math.exp(-Math.abs(c - r * cols.length / rows.length)));
    const sum = e.reduce((a, b) => a + b, 0);
    return e.map(x => x / sum);
  })]];
  const root = document.querySelector('.aiayn-translator');
  root.querySelectorAll('.aiayn-attention').forEach(el => { el.hidden = true; });  // the example's view
  const view = new AttentionView(root);
  view.show(tokens, {cross: map(out, source), encoder: map(source, source), decoder_self: map(out, out)});
  view.root.id = 'aiayn-drawn';
  return {tokens, min: CELL.min};
}"""

# what a test needs of the shown map: its cells' sides, its labels and titles, where each lies, its box
MAP_JS = """(id) => {
  const view = id ? document.getElementById(id)
    : Array.from(document.querySelectorAll('.aiayn-attention')).find(v => !v.hidden);
  const box = view.querySelector('.aiayn-heatmap'), svg = box.querySelector('svg');
  const rect = el => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height}; };
  const texts = sel => Array.from(svg.querySelectorAll(sel)).map(t => ({text: t.textContent, ...rect(t)}));
  const cells = Array.from(svg.querySelectorAll('g.cells rect'));
  return {
    sides: cells.map(c => Math.min(Number(c.getAttribute('width')), Number(c.getAttribute('height')))),
    labels: texts('g.labels text'), titles: texts('g.titles text'), svg: rect(svg), box: rect(box),
    scroll: {width: box.scrollWidth, client: box.clientWidth, height: box.scrollHeight,
             clientHeight: box.clientHeight},
    tabindex: box.getAttribute('tabindex'), label: box.getAttribute('aria-label') || '',
    page: {scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth},
  };
}"""
MIN_JS = "async () => (await import('/_static/translator/heatmap.mjs')).CELL"


@pytest.fixture
def examples(browser, base_url, request):
    """Page 11.4 without its model at a viewport (the test's parameter), its first example's map drawn."""
    context = su.new_context(browser, base_url, viewport=request.param)
    su.without_model(context)
    page, _ = su.open_page(context, base_url, su.html_path(DOC))
    page.wait_for_selector(".aiayn-heatmap g.cells rect", timeout=20_000)
    yield page
    context.close()


def _inside(inner: dict, outer: dict, slack: float = 0.5) -> bool:
    return (inner["left"] >= outer["left"] - slack and inner["right"] <= outer["right"] + slack
            and inner["top"] >= outer["top"] - slack and inner["bottom"] <= outer["bottom"] + slack)  # fmt: skip


def _overlap(a: dict, b: dict, slack: float = 0.5) -> bool:
    return (min(a["right"], b["right"]) - max(a["left"], b["left"]) > slack
            and min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > slack)  # fmt: skip


def _check_readable(drawn: dict, rows: list[str], cols: list[str], cell_min: float, what: str) -> None:
    """Cells at least cell_min, every piece a label, labels and titles inside the drawing, the drawing all
    reachable in its box, the page no wider than the screen."""
    assert drawn["sides"] and min(drawn["sides"]) >= cell_min, f"{what}: cells of {drawn['sides'][:3]}… px"
    assert [t["text"] for t in drawn["labels"]] == rows + cols, f"{what}: the labels are not every piece"
    assert all(t["width"] > 0 and t["height"] > 0 for t in drawn["labels"]), f"{what}: a label is not shown"
    for t in drawn["labels"] + drawn["titles"]:
        assert _inside(t, drawn["svg"]), f"{what}: {t['text']!r} at {t} reaches out of the map's box {drawn['svg']}"
    assert len(drawn["titles"]) == 2 and all(t["width"] > 0 for t in drawn["titles"])
    row_title, col_title = drawn["titles"]
    for t in [col_title] + drawn["labels"]:  # boxes: a slanted label's box is wider than its letters
        assert not _overlap(row_title, t), f"{what}: the row title runs into {t['text']!r}"
    # the box scrolls to all of the drawing, sideways only
    assert drawn["scroll"]["width"] >= drawn["svg"]["width"] - 1, f"{what}: the box cannot show all the map"
    assert drawn["scroll"]["height"] <= drawn["scroll"]["clientHeight"] + 1, f"{what}: the box cuts the map's foot"
    assert drawn["tabindex"] == "0" and drawn["label"], f"{what}: the box cannot be scrolled with the keyboard"
    page = drawn["page"]
    assert page["scrollWidth"] <= page["innerWidth"], f"{what}: the page is wider than the screen: {page}"


@pytest.mark.parametrize("examples", [su.PHONE], indirect=True, ids=["phone"])
def test_a_long_sentence_keeps_its_cells_and_labels_on_a_phone(examples):
    page = examples
    long = page.evaluate(DRAW_JS, [GERMAN, ENGLISH])
    tokens = long["tokens"]
    assert len(tokens["source"]) > 30 and len(tokens["decoder_out"]) > 30  # a long sentence, both ways
    for kind, (rows, cols) in KIND_AXES.items():
        page.select_option("#aiayn-drawn .aiayn-kind", kind)
        drawn = page.evaluate(MAP_JS, "aiayn-drawn")
        _check_readable(drawn, tokens[rows], tokens[cols], long["min"], f"the long sentence's {kind} map")
        assert drawn["scroll"]["width"] > drawn["scroll"]["client"], f"{kind}: a long map that needs no scrolling?"
    # the arrow keys scroll the box once it has the focus
    page.focus("#aiayn-drawn .aiayn-heatmap")
    before = page.eval_on_selector("#aiayn-drawn .aiayn-heatmap", "b => b.scrollLeft")
    page.keyboard.press("ArrowRight")
    page.wait_for_timeout(300)  # a smooth scroll takes a few frames
    after = page.eval_on_selector("#aiayn-drawn .aiayn-heatmap", "b => b.scrollLeft")
    assert after > before, f"ArrowRight in the focused map's box left it at scrollLeft {after}"


@pytest.mark.parametrize("examples", [su.PHONE, su.DESKTOP], indirect=True, ids=["phone", "desktop"])
def test_a_short_sentence_keeps_its_titles_whole(examples):
    """Three rows are shorter than the row title 'English piece being written': it moves down, not off the map."""
    page = examples
    drawn = page.evaluate(DRAW_JS, ["Ein Hund.", "A dog."])
    for kind, (rows, cols) in KIND_AXES.items():
        page.select_option("#aiayn-drawn .aiayn-kind", kind)
        shown = page.evaluate(MAP_JS, "aiayn-drawn")
        _check_readable(shown, drawn["tokens"][rows], drawn["tokens"][cols], drawn["min"], f"'Ein Hund.', {kind}")


@pytest.mark.parametrize("examples", [su.PHONE], indirect=True, ids=["phone"])
def test_the_longest_example_keeps_its_cells_and_labels_on_a_phone(examples):
    page = examples
    cell = page.evaluate(MIN_JS)
    record = page.evaluate("async () => (await fetch('/_static/translator/examples.json')).json()")
    shown = page.eval_on_selector_all(".aiayn-example option", "os => os.map(o => o.value)")
    assert sorted(shown) == sorted(record["lines"])
    tokens = {line: record["lines"][line]["tokens"] for line in shown}
    longest = max(shown, key=lambda line: len(tokens[line]["source"]) + len(tokens[line]["decoder_out"]))
    page.select_option(".aiayn-example", longest)
    for kind in KINDS:
        page.select_option(".aiayn-kind", kind)
        rows, cols = (tokens[longest][KIND_AXES[kind][0]], tokens[longest][KIND_AXES[kind][1]])
        drawn = page.evaluate(MAP_JS, None)
        _check_readable(drawn, rows, cols, cell["min"], f"test line {longest}, {kind}")


@pytest.mark.parametrize("examples", [su.DESKTOP], indirect=True, ids=["desktop"])
def test_a_short_sentence_keeps_the_largest_cells_on_a_desktop(examples):
    page = examples
    cell = page.evaluate(MIN_JS)
    for kind in KINDS:
        page.select_option(".aiayn-kind", kind)
        drawn = page.evaluate(MAP_JS, None)
        assert set(drawn["sides"]) == {cell["max"]}, f"{kind}: cells of {sorted(set(drawn['sides']))} px"
        assert drawn["scroll"]["width"] <= drawn["scroll"]["client"], f"{kind}: a short sentence's map scrolls"
        for t in drawn["labels"] + drawn["titles"]:
            assert _inside(t, drawn["svg"]), f"{kind}: {t['text']!r} is cut"
