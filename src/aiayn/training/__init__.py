"""Training: batches (``batches``), one step (``step``), the loop (``loop``, ``loop_pieces``), checkpoints
(``checkpoints``), what a run records (``history``), several processes (``distributed``) and the check
that they train as one (``equivalence``).
"""

from pathlib import Path


def __getattr__(name: str):
    """The names of the former module ``aiayn.training``, now ``aiayn.training.loop``."""
    if (Path(__file__).parent / f"{name}.py").exists():
        # a module of this folder: the import system loads it
        raise AttributeError(name)
    from . import loop

    try:
        return getattr(loop, name)
    except AttributeError:
        raise AttributeError(
            f"module 'aiayn.training' has no attribute {name!r}"
        ) from None
