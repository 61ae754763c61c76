"""``python -m aiayn.equivalence``: do N processes train as one?

The code is ``aiayn.training.equivalence``; this module is its command, and its old import path.
"""

from .training.equivalence import main

__all__ = ["main"]


def __getattr__(name: str):
    """The names of ``aiayn.training.equivalence``, where they were before it moved."""
    from .training import equivalence

    return getattr(equivalence, name)


if __name__ == "__main__":
    main()
