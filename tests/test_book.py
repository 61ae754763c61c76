"""The chapters as files: each one is listed, starts with the Colab cell, and stores clean outputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import colab_cells  # noqa: E402

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def test_there_are_chapters():
    assert NOTEBOOKS, "no notebooks found in book/"


def test_every_notebook_is_in_the_table_of_contents():
    listed = set(toc_files())
    missing = [nb.name for nb in NOTEBOOKS if f"book/{nb.stem}" not in listed]
    assert not missing, f"notebooks missing from _toc.yml: {missing}"


def test_every_toc_entry_exists():
    for entry in toc_files():
        candidates = [ROOT / f"{entry}.ipynb", ROOT / f"{entry}.md"]
        assert any(c.exists() for c in candidates), f"_toc.yml lists {entry}, which has no .ipynb or .md file"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_code_cell_is_the_colab_setup(path):
    nb = json.loads(path.read_text())
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    assert colab_cells.TAG in first["metadata"].get("tags", []), "run `make colab-cells`"
    assert "".join(first["source"]) == colab_cells.setup_source(), "Colab cell is stale: run `make colab-cells`"
    assert not first.get("outputs"), "the Colab cell must print nothing outside Colab"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_outputs_are_stored_in_order_and_without_errors(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert any(c.get("outputs") for c in code), f"{path.name} has no stored outputs: run `make execute`"
    counts = [c["execution_count"] for c in code]
    assert all(isinstance(n, int) for n in counts), f"{path.name} has cells that were not executed"
    assert counts == list(range(1, len(code) + 1)), f"{path.name} was not executed top to bottom in one run"
    errors = [o for c in code for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name} stores an error output"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
