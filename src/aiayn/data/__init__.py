"""The data: Multi30k's captions (``multi30k``), the joint subword tokenizer (``tokenizer``), downloads
checked by SHA-256 (``download``).
"""

from pathlib import Path


def __getattr__(name: str):
    """The names of the former module ``aiayn.data``, now ``aiayn.data.multi30k``."""
    if (Path(__file__).parent / f"{name}.py").exists():
        # a module of this folder: the import system loads it
        raise AttributeError(name)
    from . import multi30k

    try:
        return getattr(multi30k, name)
    except AttributeError:
        raise AttributeError(
            f"module 'aiayn.data' has no attribute {name!r}"
        ) from None
