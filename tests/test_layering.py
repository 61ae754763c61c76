"""The package's shape: the layers written in ``aiayn/__init__.py``'s docstring hold for every import.

Each module belongs to one layer: a top-level module to the layer that lists it, a folder's modules to
the folder's layer. A module imports only from its own layer and the layers under it (function-level
imports count too), the paper's modules know nothing of the engine, and the top level keeps at most
20 modules; ``tests/test_imports.py`` holds the same graph free of cycles. Old import paths still
reach the moved modules, and every command keeps its name.
"""

import ast
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from test_imports import import_graph

import aiayn

SRC = Path(aiayn.__file__).resolve().parent
DOCS = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def layers() -> list[tuple[str, list[str]]]:
    """``[(layer, top-level modules or [] for a folder)]`` from the ground up, read from the docstring."""
    block = aiayn.__doc__.split("(``tests/test_layering.py``", 1)[1].split("\n\n")[1]
    found = []
    for line in block.splitlines():
        name, _, rest = line.strip().partition(" ")
        found.append((name, [] if name.endswith("/") else rest.split()))
    return found


def layer_of(module: str) -> int:
    first = module.removeprefix("aiayn.").split(".")[0]
    for i, (name, members) in enumerate(layers()):
        if name == f"{first}/" if first in _folders() else first in members:
            return i
    raise AssertionError(f"{module} is in no layer: add it to the list in aiayn/__init__.py's docstring")


def _folders() -> set[str]:
    return {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}


# every import of the package, function-level ones too (the graph of tests/test_imports.py, which
# also holds it free of cycles)
GRAPH = {m: targets - {"aiayn"} for m, targets in import_graph().items() if m != "aiayn"}


def test_the_docstring_lists_every_folder_and_top_level_module_once():
    names = [name for name, _ in layers()]
    members = [m for _, ms in layers() for m in ms]
    assert len(names) == len(set(names)) and len(members) == len(set(members))
    assert {n.rstrip("/") for n in names if n.endswith("/")} == _folders()
    top = {p.stem for p in SRC.glob("*.py")} - {"__init__"}
    assert set(members) == top, f"listed but absent: {set(members) - top}; present but unlisted: {top - set(members)}"


def test_no_import_runs_up_a_layer():
    upward = [
        f"{a} ({layers()[layer_of(a)][0]}) imports {b} ({layers()[layer_of(b)][0]})"
        for a, targets in GRAPH.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    ]
    assert upward == []


def test_the_paper_imports_nothing_from_the_engine():
    paper = dict(layers())["paper"]
    reached = {f"aiayn.{m}": sorted(t for t in GRAPH[f"aiayn.{m}"] if t.startswith("aiayn.engine")) for m in paper}
    assert all(v == [] for v in reached.values()), reached


def test_the_top_level_holds_at_most_20_modules_besides_its_folders():
    top = sorted(p.name for p in SRC.glob("*.py"))
    assert len(top) <= 20, top


def test_an_upward_import_would_be_caught(monkeypatch):
    """The check itself: a paper module that imported the engine is reported."""
    monkeypatch.setitem(GRAPH, "aiayn.layers", GRAPH["aiayn.layers"] | {"aiayn.engine.fast_attention"})
    with pytest.raises(AssertionError, match=r"aiayn.layers \(paper\) imports aiayn.engine.fast_attention"):
        test_no_import_runs_up_a_layer()


def test_the_docs_page_draws_the_same_layers_in_the_same_order():
    drawn = re.findall(r"^\s*│?\s*([a-z]+/?)\s+│", DOCS.read_text(), re.M)
    assert [n for n in drawn if n.rstrip("/") in {x.rstrip("/") for x, _ in layers()}] == [
        name for name, _ in reversed(layers())
    ]


@pytest.mark.parametrize("old, new", sorted(aiayn.MOVED.items()))
def test_an_old_import_path_still_works_and_names_the_new_one(old, new):
    sys.modules.pop(f"aiayn.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = __import__(f"aiayn.{old}", fromlist=["_"])
    assert module is sys.modules[f"aiayn.{new}"]
    assert module.__spec__.name == f"aiayn.{new}"  # the module keeps its own name
    assert any(f"aiayn.{new}" in str(w.message) for w in caught)


def test_the_old_names_of_modules_that_became_folders_still_reach_their_code():
    from aiayn.decoding import beam_search
    from aiayn.decoding.search import beam_search as moved

    assert beam_search is moved
    from aiayn.published import load_published
    from aiayn.runs.published import load_published as loader

    assert load_published is loader
    with pytest.raises(AttributeError, match="aiayn.decoding' has no attribute 'no_such_search'"):
        from aiayn import decoding

        decoding.no_such_search  # noqa: B018


@pytest.mark.parametrize("command", ["train", "evaluate", "published", "export", "bench", "stepthrough",
                                     "embedding_map", "equivalence"])  # fmt: skip
def test_every_command_keeps_its_name(command):
    done = subprocess.run([sys.executable, "-m", f"aiayn.{command}", "--help"], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"aiayn.{command}" in done.stdout


def _private_imports() -> list[str]:
    """``from X import _name`` where X lies in another folder than the importer (the top level is one place)."""

    def place(module: str) -> str:  # the folder a module lies in, or the top level
        parts = module.split(".")
        return parts[1] if len(parts) > 2 or (SRC / parts[-1]).is_dir() else "<top>"

    found = []
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
                for alias in node.names:
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and place(target) != place(module):
                        found.append(f"{module} imports {target}.{alias.name}")
    return found


def test_no_private_name_crosses_a_folder():
    assert _private_imports() == []


def test_a_private_name_that_crosses_a_folder_would_be_caught(tmp_path, monkeypatch):
    (tmp_path / "aiayn" / "pages").mkdir(parents=True)
    (tmp_path / "aiayn" / "pages" / "leak.py").write_text("from ..decoding.search import _generate\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "aiayn")
    assert _private_imports() == ["aiayn.pages.leak imports aiayn.decoding.search._generate"]
