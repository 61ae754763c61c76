"""Decoding: the searches (``search``: greedy, beam, sampling), what they share (``common``), the
pruned beam search (``pruned_beam``), draws a page can repeat (``seeded``), the searches by name
(``strategies``) and ``translate``, which turns sentences into sentences. ``strategies.pick`` is the
one place that picks the search; ``translate``'s options pick the engine it runs on.

To add a strategy, write one function that decodes a padded batch, ``(model, src, src_mask, limits,
bos_id, eos_id, options)`` to ``(B, L)`` ids, and register it under a name with
``@strategies.register("name", options=...)``, naming the ``SearchOptions`` fields it reads. Once
its module is imported, ``translate(..., strategy="name")`` and ``decode_sorted(..., strategy="name")``
run it; ``tests/test_decoding_strategies.py`` adds one in the test file alone.
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
