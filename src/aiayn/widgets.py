"""ipywidgets explorers for live kernels (Jupyter, Colab).

On the website they show as controls drawn from the stored widget state; moving them needs a
running kernel. The static, in-browser interactivity of the website comes from the Altair charts
in ``aiayn.viz``.
"""

from __future__ import annotations
