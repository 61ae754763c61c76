"""aiayn: the code of the book "Attention Is All You Need", one small module per idea.

Modules: ``embeddings``, ``masks``, ``attention``, ``layers``, ``model``, ``training``,
``decoding``, ``bleu``, ``data``, ``viz``, ``widgets``. Import what a chapter needs, e.g.
``from aiayn.masks import padding_mask``.
"""

from .checks import check_shape

__all__ = ["check_shape"]
__version__ = "0.1.0"
