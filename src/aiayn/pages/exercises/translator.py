"""Exercises of chapters 11-12: the trained translator and after the paper.

Each function computes one exercise's truths from the package; ``TRUTHS`` maps the exercise's id
(section.number, as the page names it) to it.
"""

from __future__ import annotations

from collections.abc import Callable

from .truth import Truth

TRUTHS: dict[str, Callable[[], dict[str, Truth]]] = {}
