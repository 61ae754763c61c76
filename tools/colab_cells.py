"""Write the Colab set-up cell at the top of each chapter, from the repository URL in _config.yml.

The cell installs the package only when the notebook runs on Colab; elsewhere it does nothing visible.
Usage: python tools/colab_cells.py book/*.ipynb
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
TAG = "colab-setup"

TEMPLATE = '''\
# On Colab, install the book's package from its repository; elsewhere this cell does nothing.
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "aiayn[book] @ git+{url}"], check=True)'''


def setup_source() -> str:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"].rstrip("/")
    return TEMPLATE.format(url=url)


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
    source = setup_source()
    for name in paths:
        if refresh(Path(name), source):
            print(f"{name}: Colab cell written")


if __name__ == "__main__":
    main(sys.argv[1:])
