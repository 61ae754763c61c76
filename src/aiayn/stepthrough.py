"""``python -m aiayn.stepthrough``: every number of one sentence's way through the published model.

The code is ``aiayn.pages.stepthrough``; this module is its command, and its old import path.
"""

from .pages.stepthrough import main

__all__ = ["main"]


def __getattr__(name: str):
    """The names of ``aiayn.pages.stepthrough``, where they were before it moved."""
    from .pages import stepthrough

    return getattr(stepthrough, name)


if __name__ == "__main__":
    raise SystemExit(main())
