"""Re-run chapters top to bottom in place, storing their outputs (the website shows them, nbval proves them).

Usage: python tools/execute.py book/01_why_attention.ipynb [...]
Prints the wall time of each chapter.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        store_widget_state=False,  # widgets need a live kernel: the website hides them
    )
    nb.metadata.pop("widgets", None)  # no stored widget state: the website shows no dead controls
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    if not paths:
        raise SystemExit("usage: python tools/execute.py NOTEBOOK.ipynb [...]")
    for name in paths:
        seconds = execute(Path(name))
        print(f"{name}: executed in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
