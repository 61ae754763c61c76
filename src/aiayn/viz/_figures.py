"""What several chapters' figures share."""

from __future__ import annotations


def closed_figure(width: float, height: float):
    """A new matplotlib Figure, already closed: a notebook shows it once, as the cell's value."""
    import matplotlib.pyplot as plt  # also lets Jupyter's inline backend register its PNG formatter

    fig = plt.figure(figsize=(width, height), layout="constrained")
    plt.close(fig)
    return fig
