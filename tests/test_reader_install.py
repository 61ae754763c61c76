"""tools/reader_install.py: the portable nbval pass lets a chapter import only what a reader's install has.

A reader runs ``pip install aiayn[book]`` (Colab's first cell, or a laptop); this environment also holds the
export's onnxruntime, pytest, jupyter-book and more. The guard blocks those in the chapters' kernels, so that
a chapter needing one fails in `make test` instead of on a reader's machine.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import reader_install as ri  # noqa: E402

# a clean kernel's names (IPython's own) and the module the notebook below imports
CLEAN_NAMESPACE = ["In", "Out", "exit", "get_ipython", "open", "pandas", "quit"]


def test_a_reader_gets_the_book_extra_its_requirements_and_the_kernel():
    reader = ri.reader_distributions()
    book = ast.literal_eval(re.search(r"^book = (\[.*\])$", (REPO / "pyproject.toml").read_text(), re.M)[1])
    listed = {ri._name(re.split(r"[<>=!~;\[ ]", req)[0]) for req in book}
    assert listed <= reader, f"pyproject.toml's book extra is not what the installed aiayn requires: {listed - reader}"
    # the runtime, what the extra's packages require in turn, and the kernel
    assert {"aiayn", "torch", "numpy", "jinja2", "narwhals", "ipykernel", "ipython", "pyzmq"} <= reader
    assert not {"onnx", "onnxruntime", "onnxscript", "pytest", "playwright", "jupyter-book", "nbval"} & reader


def test_every_module_outside_a_reader_s_install_is_blocked_and_none_inside():
    blocked = ri.blocked_modules()
    for module in ("onnx", "onnxruntime", "onnxscript", "pytest", "playwright", "jupyter_book", "nbval", "yaml"):
        assert module in blocked, module
    for module in ("aiayn", "torch", "numpy", "pandas", "altair", "matplotlib", "ipywidgets", "tqdm",
                   "sentencepiece", "sacrebleu", "IPython", "ipykernel", "zmq", "jinja2"):  # fmt: skip
        assert module not in blocked, module
    assert not set(blocked) & set(sys.stdlib_module_names)
    assert blocked["onnxruntime"] == "onnxruntime"  # named by the distribution that installs it


def test_a_chapter_s_kernel_imports_a_reader_s_modules_and_no_other(tmp_path):
    """nbval with --reader-install (the root conftest.py's kernels), as `make nbval-portable` runs a chapter."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import pandas"),
        nbformat.v4.new_code_cell("print(sorted(k for k in globals() if not k.startswith('_')))"),
        nbformat.v4.new_code_cell("import onnxruntime"),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"{CLEAN_NAMESPACE}\n")]
    for count, cell in enumerate(nb.cells, 1):
        cell.execution_count = count
    page = tmp_path / "page.ipynb"
    nbformat.write(nb, page)
    argv = [sys.executable, "-m", "pytest", "-p", "conftest", "--nbval", "--nbval-current-env", "--reader-install",
            "-p", "no:cacheprovider", "-q", "-rf", str(page)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    out = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout)
    # pandas imports; the guard leaves no name in the chapter's namespace; onnxruntime is not found
    assert done.returncode == 1 and "1 failed, 2 passed" in out, out
    assert "FAILED" in out and "page.ipynb::Cell 2" in out, out
    assert "ModuleNotFoundError: No module named 'onnxruntime'" in out, out


@pytest.mark.parametrize(("module", "missing"), [("onnxruntime", "onnxruntime"), ("onnx.helper", "onnx")])
def test_a_blocked_module_is_not_found_and_the_others_are(module, missing, monkeypatch):
    """What a machine without it says: ``ModuleNotFoundError`` naming it (a chapter's ``except ImportError``
    takes its fallback), and ``find_spec`` finds nothing (torch asks it which packages are installed)."""
    pd_version = metadata.version("pandas")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))  # the guard is gone after the test
    for name in (module, missing, "colorsys"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    ri.block_imports({"onnxruntime": "onnxruntime", "onnx": "onnx"})
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(module)
    assert raised.value.name == missing and str(raised.value) == f"No module named {missing!r}"
    assert importlib.util.find_spec(missing) is None
    assert importlib.import_module("colorsys").rgb_to_hsv(1, 0, 0) == (0, 1, 1)
    assert importlib.util.find_spec("pandas") is not None
    names = {dist.metadata["Name"].lower() for dist in metadata.distributions()}
    assert "pandas" in names and "onnx" not in names and "onnxruntime" not in names
    assert metadata.version("pandas") == pd_version
