"""Show the package's own code on the page: the source of a function, class or method, as it is installed.

A chapter calls ``show_source(MultiHeadAttention.forward)``; the notebook stores the code as a highlighted
Markdown block, so the website shows exactly what ``aiayn`` runs. nbval re-runs the cell, and a test in
``tests/test_book.py`` re-reads every shown block, so a block that no longer matches the package fails.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

__all__ = ["SourceBlock", "show_source", "source_of", "WIDTH"]

WIDTH = 77
"""The widest line a code box on the website holds at 1280 px (the theme's font): shown code must fit."""

_PACKAGE_ROOT = Path(__file__).resolve().parent


def _qualified_name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not module or not qualname or not module.startswith("aiayn"):
        raise TypeError(
            f"show_source: expected a function, class or method of the aiayn package, got {obj!r}"
        )
    return f"{module}.{qualname}"


def _strip_docstring(source: str) -> str:
    """Drop the docstring of the function or class that ``source`` defines (the page's prose explains it)."""
    lines = source.splitlines(keepends=True)
    body_start = None
    for i, line in enumerate(
        lines
    ):  # the end of the signature: the first line ending in ':' at depth 0
        if line.rstrip().endswith(":") and not line.lstrip().startswith(
            ("@", "#")
        ):
            depth = sum(
                part.count("(") - part.count(")") for part in lines[: i + 1]
            )
            if depth == 0:
                body_start = i + 1
                break
    if body_start is None or body_start >= len(lines):
        return source
    first = lines[body_start].lstrip()
    quote = first[:3]
    if quote not in ('"""', "'''"):
        return source
    end = body_start
    rest = first[3:]
    if quote not in rest:
        end += 1
        while end < len(lines) and quote not in lines[end]:
            end += 1
    return "".join(lines[:body_start] + lines[end + 1 :])


def source_of(obj: object, docstring: bool = False) -> str:
    """The source of ``obj`` as installed, dedented, without its docstring unless ``docstring=True``."""
    _qualified_name(obj)
    source = textwrap.dedent(inspect.getsource(obj))
    if not docstring:
        source = _strip_docstring(source)
    return source.rstrip("\n") + "\n"


@dataclass(frozen=True)
class SourceBlock:
    """A block of package code: its qualified name, its file inside the package, its text."""

    name: str
    path: str
    code: str

    def _repr_markdown_(self) -> str:
        return f"`{self.name}`, from `{self.path}`:\n\n```python\n{self.code}```\n"

    def __repr__(self) -> str:
        return f"# {self.name}, from {self.path}\n{self.code}"


def show_source(obj: object, docstring: bool = False) -> SourceBlock:
    """Return ``obj``'s installed source as a block that notebooks render as highlighted code.

    Args:
        obj: a function, class or method defined in ``aiayn``.
        docstring: keep the docstring (default: drop it; the page's prose explains the code).

    Raises:
        TypeError: ``obj`` is not defined in the aiayn package.
        ValueError: a line is wider than ``WIDTH`` characters, so it would be cut off on the website.
    """
    name = _qualified_name(obj)
    code = source_of(obj, docstring=docstring)
    wide = [
        (i, len(line))
        for i, line in enumerate(code.splitlines(), 1)
        if len(line) > WIDTH
    ]
    if wide:
        where = ", ".join(f"line {i} ({n} chars)" for i, n in wide[:5])
        raise ValueError(
            f"show_source({name}): lines must fit {WIDTH} characters to show on the website; {where}"
        )
    path = Path(inspect.getsourcefile(obj)).resolve()
    try:
        rel = f"aiayn/{path.relative_to(_PACKAGE_ROOT).as_posix()}"
    except ValueError:
        rel = path.name
    return SourceBlock(name=name, path=rel, code=code)
