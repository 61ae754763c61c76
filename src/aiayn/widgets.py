"""ipywidgets explorers for live kernels (Jupyter, Colab).

On the website they show as controls drawn from the stored widget state; moving them needs a
running kernel. The static, in-browser interactivity of the website comes from the Altair charts
in ``aiayn.viz``.
"""

from __future__ import annotations

import io

import ipywidgets

__all__: list[str] = []


# --- Chapter 5, attention: the temperature of a real layer ---------------------------------------


class AttentionTemperatureExplorer(ipywidgets.VBox):
    """A slider for the temperature T of a real ``MultiHeadAttention`` layer, and its heads' weights.

    Each move of the slider sets ``layer.temperature`` (the layer is changed in place: set it back
    to 1.0 when done), runs the layer on ``x`` as self-attention through the explicit path (which
    keeps the weights), and redraws one heatmap per head from ``layer.attn``.

    Args:
        layer: an ``aiayn.attention.MultiHeadAttention``.
        x: ``(1, L, d_model)``, one sentence.
        tokens: the L tokens of the sentence, for the axes.
        titles: optional h titles for the panels.
        ncols: panels per row.
        t_min, t_max, value, step: range, start value and step of the slider.

    Attributes:
        slider: the ``FloatSlider`` named "T".
        image: the ``Image`` widget holding the PNG of the heatmaps.
        summary: an ``HTML`` line with, per head, the mean over queries of the largest weight.
        weights: the ``(h, L, L)`` weights drawn last.
    """

    def __init__(
        self,
        layer,
        x,
        tokens,
        titles=None,
        ncols: int = 4,
        t_min: float = 0.1,
        t_max: float = 5.0,
        value: float = 1.0,
        step: float = 0.05,
    ):
        from .attention import MultiHeadAttention

        if not isinstance(layer, MultiHeadAttention):
            raise TypeError(f"layer: expected an aiayn MultiHeadAttention, got {type(layer).__name__}")
        if x.dim() != 3 or x.size(0) != 1 or x.size(2) != layer.d_model:
            raise ValueError(f"x: expected shape (1, L, {layer.d_model}), got {tuple(x.shape)}")
        if len(tokens) != x.size(1):
            raise ValueError(f"got {len(tokens)} tokens for a sequence of length {x.size(1)}")
        if not 0 < t_min <= value <= t_max:
            raise ValueError(f"need 0 < t_min <= value <= t_max, got {t_min}, {value}, {t_max}")
        self.layer, self.x, self.tokens, self.titles, self.ncols = layer, x, list(tokens), titles, ncols
        self.weights = None
        self._figure = None
        self.slider = ipywidgets.FloatSlider(
            value=value,
            min=t_min,
            max=t_max,
            step=step,
            description="T",
            continuous_update=False,
            readout_format=".2f",
        )
        self.summary = ipywidgets.HTML()
        self.image = ipywidgets.Image(format="png", layout=ipywidgets.Layout(max_width="100%"))  # fits a phone
        note = ipywidgets.HTML("<b>T divides the scaled scores of every head</b> (needs a running kernel)")
        super().__init__([note, self.slider, self.summary, self.image])
        self.slider.observe(self._on_change, names="value")
        self.redraw()

    def _on_change(self, change) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Run the layer at the slider's temperature and redraw the heatmaps and the summary."""
        import torch

        from .attention import set_fused
        from .viz import attention_heads_figure, update_attention_heads

        layer = self.layer
        layer.temperature = float(self.slider.value)
        was_training = layer.training
        layer.eval()
        with torch.no_grad(), set_fused(layer, False):
            layer(self.x, self.x, self.x)
        layer.train(was_training)
        self.weights = layer.attn[0].clone()  # (h, L, L)
        if self._figure is None:
            self._figure = attention_heads_figure(
                self.weights, self.tokens, self.tokens, titles=self.titles, ncols=self.ncols
            )
        else:
            update_attention_heads(self._figure, self.weights)
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=72)
        self._figure.set_layout_engine("none")  # keep the first layout: later redraws are faster
        self.image.value = buffer.getvalue()
        peaks = self.weights.max(dim=-1).values.mean(dim=-1)  # (h,)
        listed = ", ".join(f"{p:.2f}" for p in peaks.tolist())
        self.summary.value = f"T = {layer.temperature:.2f}; mean largest weight per head: {listed}"


__all__ += ["AttentionTemperatureExplorer"]


# --- Chapter 3, positional encoding: the table under three sliders --------------------------------


def positional_encoding_explorer(max_len: int = 200, max_d_model: int = 512) -> ipywidgets.VBox:
    """Sliders for ``d_model``, the number of positions and one column, redrawing the sinusoidal table.

    Left: the table as a heatmap (positions down, dimensions across), the chosen column outlined.
    Right: that column against the position, with its wavelength in the title. The drawing is a PNG
    in an ``Image`` widget, redrawn by Python when a slider moves, so it needs a live kernel.

    Args:
        max_len: largest number of positions the slider offers (at least 10).
        max_d_model: largest ``d_model`` the slider offers (a multiple of 8).

    Returns:
        an ``ipywidgets.VBox``: a row of three ``IntSlider`` (d_model, positions, dimension), then the image.
    """
    import math

    from matplotlib.patches import Rectangle

    from .embeddings import sinusoidal_encoding
    from .viz import _closed_figure

    if max_len < 10 or max_d_model < 8 or max_d_model % 8:
        raise ValueError(
            f"need max_len >= 10 and max_d_model a positive multiple of 8, got {max_len} and {max_d_model}"
        )
    style = {"description_width": "initial"}
    common = {"continuous_update": False, "style": style}
    d_model = ipywidgets.IntSlider(
        value=min(64, max_d_model), min=8, max=max_d_model, step=8, description="d_model", **common
    )
    positions = ipywidgets.IntSlider(
        value=min(100, max_len), min=10, max=max_len, step=10, description="positions", **common
    )
    column = ipywidgets.IntSlider(value=6, min=0, max=d_model.value - 1, description="dimension", **common)
    image = ipywidgets.Image(format="png")

    def draw(_change=None) -> None:
        column.max = d_model.value - 1  # the column slider follows the width of the table
        n, d, dim = positions.value, d_model.value, column.value
        pe = sinusoidal_encoding(n, d).numpy()
        fig = _closed_figure(10, 3.6)
        left, right = fig.subplots(1, 2, width_ratios=[1.2, 1])
        heat = left.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        left.add_patch(Rectangle((dim - 0.5, -0.5), 1, n, fill=False, edgecolor="black", linewidth=1.5))
        left.set(xlabel="dimension (column of the table)", ylabel="position in the sequence", title="PE table")
        fig.colorbar(heat, ax=left, label="PE value")
        wavelength = 2 * math.pi * 10000 ** ((dim - dim % 2) / d)
        kind = "sin" if dim % 2 == 0 else "cos"
        right.plot(pe[:, dim], marker=".", linewidth=1)
        right.set(xlabel="position in the sequence", ylabel="PE value", ylim=(-1.1, 1.1))
        right.set_title(f"dimension {dim} ({kind}): wavelength {wavelength:,.1f} positions", fontsize=10)
        right.grid(alpha=0.3)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=72)
        image.value = buffer.getvalue()

    for slider in (d_model, positions, column):
        slider.observe(draw, names="value")
    draw()
    return ipywidgets.VBox([ipywidgets.HBox([d_model, positions, column]), image])


__all__ += ["positional_encoding_explorer"]
