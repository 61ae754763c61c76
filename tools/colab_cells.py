"""Write the Colab set-up cell at the top of each chapter, from the repository URL in _config.yml.

The cell installs the package only when the notebook runs on Colab; elsewhere it does nothing visible.
It installs the package at the commit that last changed it (``src/``, ``pyproject.toml``), the code
the stored outputs were executed with, not the moving ``main``: a reader on Colab runs what the page
shows. Commit package changes first, then run this, re-execute and commit the chapters.
Usage: python tools/colab_cells.py book/*.ipynb
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
TAG = "colab-setup"

TEMPLATE = '''\
# On Colab, install the book's package at the commit these outputs were
# made with; elsewhere this cell does nothing.
import subprocess
import sys

REPO = "{url}"
COMMIT = "{commit}"
if "google.colab" in sys.modules:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q",
         f"aiayn[book] @ git+{{REPO}}@{{COMMIT}}"],
        check=True,
    )'''


PACKAGE_PATHS = ("src", "pyproject.toml")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def package_commit(require_clean: bool = False) -> str:
    """The commit that last changed the package; with ``require_clean``, refuse uncommitted package edits."""
    if require_clean and _git("status", "--porcelain", "--", *PACKAGE_PATHS):
        raise SystemExit(
            "error: the package has uncommitted changes (git status src pyproject.toml): commit them first, "
            "so the Colab cell can name the commit the chapters run with"
        )
    commit = _git("log", "-1", "--format=%H", "--", *PACKAGE_PATHS)
    if not commit:
        raise SystemExit("error: no commit changes src/ or pyproject.toml: commit the package first")
    return commit


def setup_source(commit: str | None = None) -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"].rstrip("/")
    return TEMPLATE.format(url=url, commit=commit or package_commit())


def refresh(path: Path, source: str) -> bool:
    """Put the set-up cell first in ``path``; return True when the file changed."""
    nb = nbformat.read(path, as_version=4)
    cells = nb.cells
    first_code = next((c for c in cells if c.cell_type == "code"), None)
    if first_code is not None and TAG in first_code.metadata.get("tags", []):
        if first_code.source == source:
            return False
        first_code.source = source
    else:
        cell = nbformat.v4.new_code_cell(source, metadata={"tags": [TAG, "hide-cell"]})
        index = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
        cells.insert(index, cell)
    nbformat.write(nb, path)
    return True


def main(paths: list[str]) -> None:
    source = setup_source(package_commit(require_clean=True))
    for name in paths:
        if refresh(Path(name), source):
            print(f"{name}: Colab cell written")


if __name__ == "__main__":
    main(sys.argv[1:])
