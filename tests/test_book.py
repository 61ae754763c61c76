"""The chapters as files: each one is listed, starts with the Colab cell, and stores clean outputs."""

from __future__ import annotations

import configparser
import importlib
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cells  # noqa: E402
import heavy_first  # noqa: E402

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        for chapter in part["chapters"]:  # a chapter, then its sections
            files.append(chapter["file"])
            files += [section["file"] for section in chapter.get("sections", [])]
    return files


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found in book/"


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(toc_files())
    missing = [
        nb.name for nb in NOTEBOOKS if f"book/{nb.stem}" not in listed
    ]
    assert not missing, f"notebooks missing from _toc.yml: {missing}"


def test_every_toc_entry_exists():
    for entry in toc_files():
        candidates = [ROOT / f"{entry}.ipynb", ROOT / f"{entry}.md"]
        assert any(c.exists() for c in candidates), (
            f"_toc.yml lists {entry}, which has no .ipynb or .md file"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_colab_setup(path):
    nb = json.loads(path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert colab_cells.TAG in first["metadata"].get("tags", []), (
        "run `make colab-cells`"
    )
    assert "".join(first["source"]) == colab_cells.setup_source(), (
        "Colab cell is stale: run `make colab-cells`"
    )
    assert not first.get("outputs"), (
        "the Colab cell must print nothing outside Colab"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stored_in_order_and_without_errors(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert any(c.get("outputs") for c in code), (
        f"{path.name} has no stored outputs: run `make execute`"
    )
    counts = [c["execution_count"] for c in code]
    assert all(isinstance(n, int) for n in counts), (
        f"{path.name} has cells that were not executed"
    )
    assert counts == list(range(1, len(code) + 1)), (
        f"{path.name} was not executed top to bottom in one run"
    )
    errors = [
        o
        for c in code
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name} stores an error output"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


# --- outputs that hold on every machine, and pages that read well -------------------------------------------

WIDTH = 77  # characters a code box holds at 1280 px in the theme's font (aiayn.pages.source.WIDTH)
IGNORE_BUDGET = 16  # every way of not comparing an output, in the whole book
IGNORE_TAGS = {"nbval-ignore-output", "nbval-skip"}
NBVAL_COMMENT = re.compile(r"^\s*#\s*NBVAL_(IGNORE_OUTPUT|SKIP)\b", re.M)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
IMAGE = "image/png"
CHART = "application/vnd.vegalite.v6+json"
SEED_NOTES = re.compile(
    r"\bseed notes?\b|\bthe seeds\b|\bseeds'|\bone of the seeds\b", re.I
)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _mimes(cell: dict) -> set[str]:
    return {
        mime
        for out in cell.get("outputs", [])
        for mime in out.get("data", {})
    }


def ignored_outputs() -> list[str]:
    """Every place where nbval does not compare an output: tags, NBVAL comments, digit rules, lax mode."""
    found = []
    for path in NOTEBOOKS:
        for i, cell in enumerate(_cells(path)):
            if cell["cell_type"] != "code":
                continue
            found += [
                f"{path.name} cell {i}: tag {t}"
                for t in cell["metadata"].get("tags", [])
                if t in IGNORE_TAGS
            ]
            found += [
                f"{path.name} cell {i}: {m.group(0).strip()}"
                for m in NBVAL_COMMENT.finditer(_source(cell))
            ]
    sanitize = configparser.ConfigParser()
    sanitize.read(ROOT / "nbval_sanitize.cfg")
    for section in sanitize.sections():
        regex = sanitize[section]["regex"]
        if any(re.search(regex, sample) for sample in DIGIT_SAMPLES):
            found.append(f"nbval_sanitize.cfg [{section}] rewrites digits")
    makefile = (ROOT / "Makefile").read_text()
    if "--nbval-lax" in makefile:
        found += [f"{path.name}: lax mode" for path in NOTEBOOKS]
    return found


# strings a digit-matching sanitize rule would rewrite: a loss, an address, a count, a rate, an id
DIGIT_SAMPLES = [
    "loss 0.1506",
    "at 0x7f3a2c1b9d40",
    "step 150 of 400",
    "12.5it/s",
    '"model_id": "' + "a1" * 16 + '"',
    "altair-viz-3f2a9c",
]


def test_nbval_runs_every_chapter_slowest_first():
    """`make nbval` and `make nbval-portable` start the chapters by their stored times, the longest first
    (tools/heavy_first.py), so that neither worker is left with a slow chapter at the end."""
    order = heavy_first.heavy_first([str(p.relative_to(ROOT)) for p in NOTEBOOKS])
    seconds = [heavy_first.stored_seconds(ROOT / p) for p in order]
    assert all(s > 0 for s in seconds), "a chapter has no stored cell times: run tools/execute.py on it"
    assert seconds == sorted(seconds, reverse=True)
    import subprocess

    for target, path in (("nbval", "{}"), ("nbval-portable", "_build/alone/{stem}/{name}")):
        printed = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        lines = printed.replace("\\\n", " ").splitlines()  # a command continued over lines is one
        run = next(line for line in lines if "--nbval " in line and ".ipynb" in line)
        named = [path.format(p, stem=Path(p).stem, name=Path(p).name) for p in order]
        assert run.split()[-len(named) :] == named, target


def test_the_chapters_kernels_talk_over_unix_sockets(tmp_path):
    """conftest.py gives nbval's kernels IPC instead of TCP ports (two workers' kernels once lost a port
    to each other in CI): a notebook whose stored output is its kernel's transport passes, under
    xdist as `make nbval` runs it, where the chapters lie and where the portable pass copies them."""
    import shutil
    import subprocess
    import tempfile

    import nbformat

    nb = nbformat.v4.new_notebook()
    code = "from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().transport)"
    cell = nbformat.v4.new_code_cell(code, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ipc\n")]
    nb.cells = [cell]
    (ROOT / "_build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="kernels-", dir=ROOT / "_build"))  # under conftest.py, as _build/alone
    try:
        names = [folder / f"{n}/transport.ipynb" for n in "ab"]
        for name in names:
            name.parent.mkdir()
            nbformat.write(nb, name)
        command = [sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-p", "no:cacheprovider",
                   "-n", "2", "--dist", "loadscope", "-q", *map(str, names)]  # fmt: skip
        run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(folder)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout


def test_sanitize_samples_are_what_the_rules_see():
    # the samples must be able to trip a rule at all: each one holds a digit
    assert all(re.search(r"\d", s) for s in DIGIT_SAMPLES)


def test_ignored_outputs_stay_within_the_budget():
    found = ignored_outputs()
    assert len(found) <= IGNORE_BUDGET, (
        f"{len(found)} outputs are not compared (budget {IGNORE_BUDGET}): make them exact or assert them "
        "with a margin instead:\n" + "\n".join(found)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_code_box(path):
    wide = [
        f"cell {i} line {n}: {len(line)} chars: {line[:40]}..."
        for i, cell in enumerate(_cells(path))
        if cell["cell_type"] == "code"
        for n, line in enumerate(_source(cell).splitlines(), 1)
        if len(line) > WIDTH
    ]
    assert not wide, (
        f"{path.name}: code lines wider than {WIDTH} characters scroll sideways:\n"
        + "\n".join(wide)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_printed_outputs_fit_the_code_box(path):
    wide = []
    for i, cell in enumerate(_cells(path)):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = "".join(out["text"])
            elif "text/html" in out.get("data", {}) or CHART in out.get(
                "data", {}
            ):
                continue  # HTML tables and charts are laid out by the browser (the site tests check them)
            else:
                text = "".join(out.get("data", {}).get("text/plain", ""))
            wide += [
                f"cell {i}: {len(line)} chars: {line[:40]}..."
                for line in text.splitlines()
                if len(line) > WIDTH
            ]
    assert not wide, (
        f"{path.name}: printed lines wider than {WIDTH} characters:\n"
        + "\n".join(wide)
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_widgets_are_shown_only_where_a_kernel_runs_them(path):
    cells = _cells(path)
    shown = [
        i
        for i, c in enumerate(cells)
        if WIDGET_VIEW in _mimes(c)
        and "remove-output" not in c["metadata"].get("tags", [])
    ]
    assert not shown, (
        f"{path.name}: cells {shown} show ipywidgets on the static page, where nothing redraws them: "
        "tag them remove-output and say on the page that they need a live kernel"
    )
    if any(WIDGET_VIEW in _mimes(c) for c in cells):
        prose = " ".join(
            _source(c) for c in cells if c["cell_type"] == "markdown"
        )
        assert re.search(r"live kernel", prose, re.I), (
            f"{path.name} has a live-only widget but never says so"
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_figures_have_captions_and_alt_text(path):
    cells = _cells(path)
    problems = []
    for i, cell in enumerate(cells):
        mimes = _mimes(cell)
        if IMAGE in mimes and "remove-output" not in cell["metadata"].get(
            "tags", []
        ):
            meta = cell["metadata"].get("mystnb", {})
            caption = meta.get("figure", {}).get("caption", "")
            alt = meta.get("image", {}).get("alt", "")
            if len(caption.split()) < 4 or len(alt.split()) < 4:
                problems.append(
                    f"cell {i}: a PNG without mystnb figure.caption and image.alt"
                )
        if CHART in mimes:
            following = next(
                (
                    c
                    for c in cells[i + 1 :]
                    if c["cell_type"] != "code" or c.get("outputs")
                ),
                None,
            )
            if (
                following is None
                or "figure-caption"
                not in _source(following).split("\n", 1)[0]
            ):
                problems.append(
                    f"cell {i}: a chart not followed by a ':::{{div}} figure-caption' cell"
                )
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_the_book_speaks_for_itself(path):
    hits = [
        f"cell {i}: {m.group(0)!r}"
        for i, c in enumerate(_cells(path))
        for m in SEED_NOTES.finditer(_source(c))
    ]
    assert not hits, (
        f"{path.name} points readers at the notes it was planned from:\n"
        + "\n".join(hits)
    )


def test_the_paper_map_names_code_that_exists():
    text = (ROOT / "book" / "paper_map.md").read_text()
    names = sorted(set(re.findall(r"`(aiayn(?:\.\w+)+)`", text)))
    assert len(names) > 20, "the map should name the package code of every section"
    missing = []
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 1, -1):  # the longest importable module, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert not missing, f"book/paper_map.md names code that does not exist: {missing}"
