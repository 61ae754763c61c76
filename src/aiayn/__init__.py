"""aiayn: the code of the book "Attention Is All You Need", one small module per idea.

The model: ``embeddings``, ``masks``, ``attention``, ``layers``, ``model``. Learning:
``schedule``, ``loss``, ``batches``, ``training``, ``checkpoints``, ``decoding``, ``bleu``,
``calibration``. A real run: ``data``, ``presets``, ``runs``, ``recipes``, ``translation``,
``published``, ``bench`` and the commands ``train``, ``evaluate``. For the pages: ``source``,
``viz``, ``widgets``. Import what a chapter needs, e.g. ``from aiayn.masks import padding_mask``.
"""

from .checks import check_shape

__all__ = ["check_shape"]
__version__ = "0.1.0"
