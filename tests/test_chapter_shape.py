"""The chapters teach the paper: each page of chapters 1-12 shows the reader's version of its code, short enough to
read whole, and asks at least one exercise whose check the reader runs."""

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
CHAPTER_PAGES = sorted(p for p in BOOK.glob("*.ipynb") if re.match(r"(0[1-9]|1[0-2])_", p.name))
LONGEST = 40  # lines: the Annotated Transformer's pieces are 10-52 lines; ours stay under 40
CHECK = re.compile(r"""check\(\s*["']\d+\.\d+\.\d+["']""")
HIDDEN = {"remove-cell", "remove-input"}
HEADER = re.compile(r"# (\S+, from \S+|\S+|from \S+)$")  # SourceBlock's first line(s): what and where


def _cells(path):
    return json.loads(path.read_text())["cells"]


def blocks_shown(path):
    """``[(where, lines)]`` of every code block the page shows: visible code cells and listings they print."""
    shown = []
    for i, cell in enumerate(_cells(path)):
        if cell["cell_type"] != "code" or HIDDEN & set(cell["metadata"].get("tags", [])):
            continue
        shown.append((f"cell {i}", len("".join(cell["source"]).splitlines())))
        for out in cell.get("outputs", []):
            if "text/markdown" in out.get("data", {}) and "```" in "".join(out["data"]["text/markdown"]):
                lines = "".join(out["data"]["text/plain"]).splitlines()
                code = [ln for ln in lines[:2] if not HEADER.match(ln)] + lines[2:]  # the listing's name is no code
                shown.append((f"cell {i}'s listing", len(code)))
    return shown


def test_there_are_chapter_pages():
    assert len(CHAPTER_PAGES) >= 30


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=lambda p: p.name)
def test_no_block_a_chapter_shows_is_over_40_lines(path):
    long = [f"{where}: {n} lines" for where, n in blocks_shown(path) if n > LONGEST]
    assert not long, f"{path.name} shows blocks over {LONGEST} lines: " + "; ".join(long)


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=lambda p: p.name)
def test_every_chapter_page_asks_an_exercise_that_answers_back(path):
    cells = _cells(path)
    asked = [
        c for c in cells
        if c["cell_type"] == "code" and not HIDDEN & set(c["metadata"].get("tags", []))
        and CHECK.search("".join(c["source"]))
    ]
    solved = [
        c for c in cells
        if c["cell_type"] == "code" and CHECK.search("".join(c["source"]))
        and any("all right." in "".join(o.get("text", "")) for o in c.get("outputs", []))
    ]
    assert asked, f"{path.name} asks no exercise the reader checks with check(...)"
    assert solved, f"{path.name}: no solution runs through its check"


# the engine's vocabulary: chapters name it only in a sentence that points to the engine's pages (13.x), and their
# code never switches the engine on (8.3 teaches the key/value cache; 11 prints a run's estimated cost; 11.4 the
# page's measured fidelity)
ENGINE_WORDS = re.compile(
    r"onednn|cuda[ _-]?graphs?|make_graphed_callables|\bATen\b|\bMFU\b|cudnn|GradScaler|pruned beams?|"
    r"pruning|quantis|quantiz|\bint8\b|shortlist|kernel launch",
    re.I,
)
ENGINE_CODE = re.compile(
    r"\b(onednn|quantize|amp_dtype|prune)\s*=|set_fast\(|GraphedShapes|make_graphed_callables|CountOps|GradScaler|"
    r"(from|import) aiayn\.(engine(?!\.kv_cache)|export|bench(?!\.estimate))\b"
)
POINTER = re.compile(r"\]\((13_[a-z0-9_]+\.ipynb)")


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=lambda p: p.name)
def test_a_chapter_names_the_engine_only_to_point_at_its_pages(path):
    cells = _cells(path)
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and ENGINE_CODE.search("".join(c["source"]))]
    named = [
        (i, "".join(c["source"]))
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and ENGINE_WORDS.search("".join(c["source"]))
    ]
    unpointed = [i for i, text in named if not POINTER.search(text)]
    assert not code, f"{path.name}: code cells {code} switch the engine on; its pages (13.x) show it"
    assert not unpointed, f"{path.name}: cells {unpointed} name the engine without a link to its pages (13.x)"
    assert len(named) <= 3, f"{path.name}: {len(named)} cells name the engine; a pointer sentence or two is enough"
    for target in {t for _, text in named for t in POINTER.findall(text)}:
        assert (BOOK / target).is_file(), f"{path.name} points at {target}, which does not exist"
