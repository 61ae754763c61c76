"""What did ``torch.compile`` warn of? Its warnings, collected in one short line each.

torch._dynamo and torch._inductor write each warning (a graph break: part of a step run eagerly; a
recompilation limit; a fallback to eager) as a block of a dozen lines to stderr, in the middle of the
benchmark's output. ``collect_compile_warnings`` keeps the first line of each instead, and
``compile_note`` reports them in one line under the table, naming the contenders they came from.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["COMPILE_LOGGERS", "collect_compile_warnings", "compile_note"]

# The loggers torch.compile reports through: graph breaks, recompilations, fallbacks to eager.
COMPILE_LOGGERS = ("torch._dynamo", "torch._inductor")


class _Collect(logging.Handler):
    """Keeps the first line of each warning (without torch's advice), once."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.notes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        lines = record.getMessage().strip().splitlines() or [""]
        note = lines[0].split(", consider setting")[0].rstrip(" :")
        if note and note not in self.notes:
            self.notes.append(note)


@contextlib.contextmanager
def collect_compile_warnings(enabled: bool = True) -> Iterator[list[str]]:
    """Collect what ``torch.compile`` logs inside the block instead of printing it.

    torch._dynamo and torch._inductor write each warning (a graph break, a recompilation limit,
    a fallback to eager) as a block of a dozen lines to stderr. Inside the block they go to the
    list this yields instead, one short line each, without repeats; the caller reports them in
    one line. With ``TORCH_LOGS`` set (``TORCH_LOGS=graph_breaks`` shows where a graph broke)
    nothing is collected: the logs print as the variable asks; with ``enabled=False`` (an eager
    contender) neither, and the loggers are left alone.

        with collect_compile_warnings() as notes:
            step(batch)  # compiles
        notes            # ["Graph break from `Tensor.item()`"]
    """
    collect = _Collect()
    if not enabled or os.environ.get("TORCH_LOGS"):
        yield collect.notes
        return
    loggers = [logging.getLogger(name) for name in COMPILE_LOGGERS]
    saved = [(lg.handlers, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers, lg.propagate = [collect], False
    try:
        yield collect.notes
    finally:
        for lg, (handlers, propagate) in zip(loggers, saved, strict=True):
            lg.handlers, lg.propagate = handlers, propagate


def compile_note(rows: Sequence[dict[str, Any]]) -> str | None:
    """One line naming the compiled contenders that fell back to eager for part of a step, or ``None``."""
    hit = [r for r in rows if r.get("compile_warnings")]
    if not hit:
        return None
    names = ", ".join(r["name"] for r in hit)
    notes = "; ".join(
        dict.fromkeys(
            n[:1].lower() + n[1:] for r in hit for n in r["compile_warnings"]
        )
    )
    return (
        f"note: torch.compile ran part of {names} eagerly ({notes}); "
        "TORCH_LOGS=graph_breaks shows where"
    )
