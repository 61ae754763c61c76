"""The translator as ONNX graphs for onnxruntime and the book's page: the graphs (``graphs``), the
page's search in Python (``translator``, mirrored by ``aiayn/web/translator.mjs``), the shortlist
(``shortlist``), the tree of a beam search (``search_tree``), the whole-prefix reference
(``prefix``) and ``python -m aiayn.export`` (``command``).
"""

from pathlib import Path


def __getattr__(name: str):
    """The names of the former module ``aiayn.export``, now ``aiayn.export.command``."""
    if (Path(__file__).parent / f"{name}.py").exists():
        # a module of this folder: the import system loads it
        raise AttributeError(name)
    from . import command

    try:
        return getattr(command, name)
    except AttributeError:
        raise AttributeError(
            f"module 'aiayn.export' has no attribute {name!r}"
        ) from None
