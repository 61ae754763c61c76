"""``python -m aiayn.embedding_map``: what the published model learned in its embedding table.

The code is ``aiayn.pages.embedding_map``; this module is its command, and its old import path.
"""

from .pages.embedding_map import main

__all__ = ["main"]


def __getattr__(name: str):
    """The names of ``aiayn.pages.embedding_map``, where they were before it moved."""
    from .pages import embedding_map

    return getattr(embedding_map, name)


if __name__ == "__main__":
    raise SystemExit(main())
