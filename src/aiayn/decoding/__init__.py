"""Decoding: the searches (``search``: greedy, beam, sampling), what they share (``common``), the
pruned beam search (``pruned_beam``), draws a page can repeat (``seeded``) and ``translate``, which turns
sentences into sentences and is the one place that picks how a search runs.
"""

from pathlib import Path


def __getattr__(name: str):
    """The names of the former module ``aiayn.decoding``, now ``aiayn.decoding.search``."""
    if (Path(__file__).parent / f"{name}.py").exists():
        # a module of this folder: the import system loads it
        raise AttributeError(name)
    from . import search

    try:
        return getattr(search, name)
    except AttributeError:
        raise AttributeError(
            f"module 'aiayn.decoding' has no attribute {name!r}"
        ) from None
