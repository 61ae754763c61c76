"""Print the chapters given, the slowest to run first, for `make nbval`'s workers.

pytest-xdist hands each worker one chapter at a time in the order it gets them; run alphabetically (or
by number of cells, xdist's own order), a slow chapter left for the end keeps one worker busy while
the other waits. Started slowest first, the two workers finish within about one small chapter of each
other. A chapter's time is the sum of its cells' execution times, which `tools/execute.py` stores in
the notebook each time it runs it (only the order depends on them: nbval never compares them).

    python3 tools/heavy_first.py book/*.ipynb

Standard library only: make calls it before the virtual environment exists.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime


def stored_seconds(path: str) -> float:
    """The seconds a chapter's cells took when it was last executed (0 for a cell without times)."""
    with open(path, encoding="utf-8") as f:
        cells = json.load(f)["cells"]
    total = 0.0
    for cell in cells:
        times = cell.get("metadata", {}).get("execution", {})
        start, end = times.get("iopub.execute_input"), times.get("shell.execute_reply")
        if start and end:
            total += (_time(end) - _time(start)).total_seconds()
    return total


def _time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # Jupyter's "...Z", read before Python 3.11


def heavy_first(paths: list[str]) -> list[str]:
    """``paths`` by stored time, the longest first; ties (chapters never executed) keep their order."""
    return sorted(paths, key=lambda path: -stored_seconds(path))


if __name__ == "__main__":
    print(" ".join(heavy_first(sys.argv[1:])))
