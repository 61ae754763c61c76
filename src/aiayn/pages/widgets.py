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
        from ..attention import MultiHeadAttention

        if not isinstance(layer, MultiHeadAttention):
            raise TypeError(
                f"layer: expected an aiayn MultiHeadAttention, got {type(layer).__name__}"
            )
        if x.dim() != 3 or x.size(0) != 1 or x.size(2) != layer.d_model:
            raise ValueError(
                f"x: expected shape (1, L, {layer.d_model}), got {tuple(x.shape)}"
            )
        if len(tokens) != x.size(1):
            raise ValueError(
                f"got {len(tokens)} tokens for a sequence of length {x.size(1)}"
            )
        if not 0 < t_min <= value <= t_max:
            raise ValueError(
                f"need 0 < t_min <= value <= t_max, got {t_min}, {value}, {t_max}"
            )
        self.layer, self.x, self.tokens, self.titles, self.ncols = (
            layer,
            x,
            list(tokens),
            titles,
            ncols,
        )
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
        self.image = ipywidgets.Image(
            format="png", layout=ipywidgets.Layout(max_width="100%")
        )  # fits a phone
        note = ipywidgets.HTML(
            "<b>T divides the scaled scores of every head</b> (needs a running kernel)"
        )
        super().__init__([note, self.slider, self.summary, self.image])
        self.slider.observe(self._on_change, names="value")
        self.redraw()

    def _on_change(self, change) -> None:
        self.redraw()

    def redraw(self) -> None:
        """Run the layer at the slider's temperature and redraw the heatmaps and the summary."""
        import torch

        from ..attention import set_fused
        from ..viz import attention_heads_figure, update_attention_heads

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
                self.weights,
                self.tokens,
                self.tokens,
                titles=self.titles,
                ncols=self.ncols,
            )
        else:
            update_attention_heads(self._figure, self.weights)
        buffer = io.BytesIO()
        self._figure.savefig(buffer, format="png", dpi=72)
        self._figure.set_layout_engine(
            "none"
        )  # keep the first layout: later redraws are faster
        self.image.value = buffer.getvalue()
        peaks = self.weights.max(dim=-1).values.mean(dim=-1)  # (h,)
        listed = ", ".join(f"{p:.2f}" for p in peaks.tolist())
        self.summary.value = f"T = {layer.temperature:.2f}; mean largest weight per head: {listed}"

    def __repr__(self) -> str:
        # short: the text a notebook stores next to the widget fits one line of the page
        return "AttentionTemperatureExplorer(a temperature slider and h heatmaps)"


__all__ += ["AttentionTemperatureExplorer"]


# --- Chapter 3, positional encoding: the table under three sliders --------------------------------


class _PositionalEncodingExplorer(ipywidgets.VBox):
    """The VBox that ``positional_encoding_explorer`` returns, with a one-line text form."""

    def __repr__(self) -> str:
        return "positional_encoding_explorer(three sliders and the table)"


def positional_encoding_explorer(
    max_len: int = 200, max_d_model: int = 512
) -> ipywidgets.VBox:
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

    from ..embeddings import sinusoidal_encoding
    from ..viz._figures import closed_figure

    if max_len < 10 or max_d_model < 8 or max_d_model % 8:
        raise ValueError(
            f"need max_len >= 10 and max_d_model a positive multiple of 8, got {max_len} and {max_d_model}"
        )
    style = {"description_width": "initial"}
    common = {"continuous_update": False, "style": style}
    d_model = ipywidgets.IntSlider(
        value=min(64, max_d_model),
        min=8,
        max=max_d_model,
        step=8,
        description="d_model",
        **common,
    )
    positions = ipywidgets.IntSlider(
        value=min(100, max_len),
        min=10,
        max=max_len,
        step=10,
        description="positions",
        **common,
    )
    column = ipywidgets.IntSlider(
        value=6,
        min=0,
        max=d_model.value - 1,
        description="dimension",
        **common,
    )
    image = ipywidgets.Image(format="png")

    def draw(_change=None) -> None:
        column.max = (
            d_model.value - 1
        )  # the column slider follows the width of the table
        n, d, dim = positions.value, d_model.value, column.value
        pe = sinusoidal_encoding(n, d).numpy()
        fig = closed_figure(10, 3.6)
        left, right = fig.subplots(1, 2, width_ratios=[1.2, 1])
        heat = left.imshow(
            pe,
            aspect="auto",
            cmap="RdBu_r",
            vmin=-1,
            vmax=1,
            interpolation="nearest",
        )
        left.add_patch(
            Rectangle(
                (dim - 0.5, -0.5),
                1,
                n,
                fill=False,
                edgecolor="black",
                linewidth=1.5,
            )
        )
        left.set(
            xlabel="dimension (column of the table)",
            ylabel="position in the sequence",
            title="PE table",
        )
        fig.colorbar(heat, ax=left, label="PE value")
        wavelength = 2 * math.pi * 10000 ** ((dim - dim % 2) / d)
        kind = "sin" if dim % 2 == 0 else "cos"
        right.plot(pe[:, dim], marker=".", linewidth=1)
        right.set(
            xlabel="position in the sequence",
            ylabel="PE value",
            ylim=(-1.1, 1.1),
        )
        right.set_title(
            f"dimension {dim} ({kind}): wavelength {wavelength:,.1f} positions",
            fontsize=10,
        )
        right.grid(alpha=0.3)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=72)
        image.value = buffer.getvalue()

    for slider in (d_model, positions, column):
        slider.observe(draw, names="value")
    draw()
    return _PositionalEncodingExplorer(
        [ipywidgets.HBox([d_model, positions, column]), image]
    )


__all__ += ["positional_encoding_explorer"]


# --- Chapter 9, BLEU: a calculator with the n-gram matches highlighted -----------------------------


class BleuCalculator(ipywidgets.VBox):
    """Type a hypothesis and its reference(s); see every n-gram match and each factor of BLEU.

    Each change redraws ``aiayn.viz.bleu_match_html``: the hypothesis n-grams coloured by whether a
    reference has them (clipped ones marked), the modified precisions, c, r, the brevity penalty and
    the sentence BLEU of ``aiayn.bleu.sentence_bleu``.

    Args:
        hypothesis: the initial hypothesis.
        reference: the initial reference; several references go on separate lines.
        lowercase: whether the "lowercase" box starts ticked.

    Attributes:
        hypothesis, reference: the ``Text`` and ``Textarea`` widgets.
        lowercase: the ``Checkbox``.
        html: the ``HTML`` widget with the matches and factors.
        result: the ``BLEUResult`` drawn last (``None`` while a box is empty).
    """

    def __init__(
        self,
        hypothesis: str = "",
        reference: str = "",
        lowercase: bool = False,
    ):
        if not isinstance(hypothesis, str) or not isinstance(reference, str):
            raise TypeError(
                f"hypothesis and reference must be str, got {type(hypothesis).__name__} and {type(reference).__name__}"
            )
        wide = ipywidgets.Layout(width="95%")
        style = {"description_width": "initial"}
        self.hypothesis = ipywidgets.Text(
            value=hypothesis,
            description="hypothesis",
            layout=wide,
            style=style,
        )
        self.reference = ipywidgets.Textarea(
            value=reference,
            description="reference(s), one per line",
            layout=ipywidgets.Layout(width="95%", height="4.5em"),
            style=style,
        )
        self.lowercase = ipywidgets.Checkbox(
            value=lowercase, description="lowercase both sides", indent=False
        )
        self.html = ipywidgets.HTML()
        self.result = None
        super().__init__(
            [self.hypothesis, self.reference, self.lowercase, self.html]
        )
        for control in (self.hypothesis, self.reference, self.lowercase):
            control.observe(self._on_change, names="value")
        self.redraw()

    def _on_change(self, change) -> None:
        self.redraw()

    def __repr__(self) -> str:
        # the text a notebook stores beside the widget: short, and the same
        # on every machine
        score = "-" if self.result is None else f"{self.result.score:.2f}"
        return f"BleuCalculator(sentence BLEU = {score})"

    @property
    def references(self) -> list[str]:
        """The non-empty lines of the reference box."""
        return [
            line
            for line in self.reference.value.splitlines()
            if line.strip()
        ]

    def redraw(self) -> None:
        """Score the current texts and redraw the matches and factors."""
        from ..bleu import sentence_bleu
        from ..viz import bleu_match_html

        refs, hyp = self.references, self.hypothesis.value
        if not refs or not hyp.strip():
            self.result = None
            self.html.value = (
                "<i>Type a hypothesis and at least one reference.</i>"
            )
            return
        self.result = sentence_bleu(
            hyp, refs, lowercase=self.lowercase.value
        )
        self.html.value = bleu_match_html(
            hyp, refs, lowercase=self.lowercase.value
        )


__all__ += ["BleuCalculator"]


# --- Chapter 11, translating Multi30k: a translator with its cross-attention ----------------------


class Translator(ipywidgets.VBox):
    """Type German, get English from a trained model, and see where each output token looked in the source.

    With temperature 0 the output is beam search with the beam slider's K (K = 1: greedy decoding), as in
    ``aiayn.runs.recipes.translate``; with a temperature above 0 each token is sampled from
    softmax(logits / T) (``aiayn.decoding.search.sample``) with a generator seeded by ``seed``, so the same
    settings give the same sample. The picture is the cross-attention of the chosen decoder layer,
    averaged over its heads, when the model reads its own output back (teacher forcing on the explicit
    attention path): row i is where the decoder looked in the source while writing output token i.

    Args:
        model: a trained ``aiayn.model.Transformer`` (its device is used).
        tokenizer: the run's ``aiayn.data.multi30k.Tokenizer``.
        text: the German sentence shown first.
        beam: the beam size shown first; ``max_beam`` is the slider's end.
        length_penalty: α of beam search.
        max_len_a, max_len_b: outputs stop after ``a · S + b`` tokens (capped at the model's ``max_len``).
        seed: seeds the sampler.

    Attributes:
        text, beam, temperature, layer: the controls (``Text``, ``IntSlider``, ``FloatSlider``, ``IntSlider``).
        output: an ``HTML`` line with the translation.
        image: the ``Image`` widget holding the PNG of the cross-attention map.
        translation: the last translation (a string); ``weights`` its ``(T, S)`` map, ``src_pieces`` and
            ``out_pieces`` the labels of its columns and rows.
    """

    def __init__(
        self,
        model,
        tokenizer,
        text: str = "Zwei Hunde spielen im Schnee.",
        beam: int = 4,
        max_beam: int = 8,
        length_penalty: float = 0.6,
        max_len_a: float = 1.0,
        max_len_b: int = 50,
        seed: int = 0,
    ):
        if not 1 <= beam <= max_beam:
            raise ValueError(
                f"need 1 <= beam <= max_beam, got beam={beam}, max_beam={max_beam}"
            )
        if not hasattr(model, "attention_maps") or not hasattr(
            tokenizer, "encode"
        ):
            raise TypeError(
                "expected an aiayn Transformer and Tokenizer, "
                f"got {type(model).__name__} and {type(tokenizer).__name__}"
            )
        self.model, self.tokenizer = model, tokenizer
        self.length_penalty, self.max_len_a, self.max_len_b, self.seed = (
            length_penalty,
            max_len_a,
            max_len_b,
            seed,
        )
        self.translation, self.weights, self.src_pieces, self.out_pieces = (
            "",
            None,
            [],
            [],
        )
        common = {
            "continuous_update": False,
            "style": {"description_width": "initial"},
        }
        self.text = ipywidgets.Text(
            value=text,
            description="German",
            layout=ipywidgets.Layout(width="100%"),
            **common,
        )
        self.beam = ipywidgets.IntSlider(
            value=beam,
            min=1,
            max=max_beam,
            description="beam size K",
            **common,
        )
        self.temperature = ipywidgets.FloatSlider(
            value=0.0,
            min=0.0,
            max=2.0,
            step=0.1,
            description="temperature T",
            readout_format=".1f",
            **common,
        )
        N = model.config.N
        self.layer = ipywidgets.IntSlider(
            value=N, min=1, max=N, description="decoder layer", **common
        )
        self.output = ipywidgets.HTML()
        self.image = ipywidgets.Image(
            format="png", layout=ipywidgets.Layout(max_width="100%")
        )
        note = ipywidgets.HTML(
            "<b>T = 0: beam search (K = 1 is greedy); T &gt; 0: sampling</b> (needs a running kernel)"
        )
        wrap = ipywidgets.Layout(flex_flow="row wrap")
        controls = ipywidgets.HBox(
            [self.beam, self.temperature, self.layer], layout=wrap
        )
        super().__init__(
            [note, self.text, controls, self.output, self.image]
        )
        for control in (self.text, self.beam, self.temperature, self.layer):
            control.observe(self._on_change, names="value")
        self.redraw()

    def __repr__(self) -> str:
        # the text form of the widget in a notebook: short, to fit a code box
        return (
            f"Translator(text={self.text.value!r}, beam={self.beam.value})"
        )

    def _on_change(self, change) -> None:
        self.redraw()

    def translate(
        self,
        text: str,
        beam: int | None = None,
        temperature: float | None = None,
    ):
        """Translate one sentence; ``beam`` and ``temperature`` default to the controls' values.

        Returns:
            ``(translation, src, out)``: the English string, the ``(1, S)`` source ids (``<eos>`` last) and
            the ``(1, L)`` output ids (``<bos>`` first); ``("", None, None)`` for a sentence with
            nothing the model knows (``decoding.translate.source_ids``).

        Raises:
            ValueError: the sentence is longer than the model's positions (its length and the limit).
        """
        import torch

        from ..data.multi30k import BOS, EOS
        from ..decoding.search import sample
        from ..decoding.strategies import SearchOptions, pick
        from ..decoding.translate import source_ids

        beam = self.beam.value if beam is None else beam
        temperature = (
            self.temperature.value if temperature is None else temperature
        )
        device = next(self.model.parameters()).device
        max_len = self.model.config.max_len
        ids = source_ids(self.tokenizer, [text], max_len)[0]
        if ids is None:
            return "", None, None
        src = torch.tensor([ids], dtype=torch.long, device=device)  # (1, S)
        limit = min(
            int(self.max_len_a * len(ids) + self.max_len_b) + 1, max_len
        )  # + 1 for <bos>
        if temperature > 0:
            generator = torch.Generator(device=device).manual_seed(self.seed)
            out = sample(
                self.model,
                src,
                None,
                limit,
                BOS,
                EOS,
                temperature=temperature,
                generator=generator,
            )
        else:  # greedy for K = 1, else beam search
            search = pick(None, beam)
            options = SearchOptions(beam, self.length_penalty)
            args = (self.model, src, None, limit, BOS, EOS, options)
            out = search(*args)  # (1, L)
        return self.tokenizer.decode(out[0].cpu()), src, out

    def cross_attention(self, src, out):
        """The ``(N, h, T, S)`` cross-attention of ``model`` reading ``out`` back, and the T output tokens it predicts.

        Args:
            src: ``(1, S)`` source ids.
            out: ``(1, L)`` output ids from a decoder, ``<bos>`` first.
        """
        import torch

        from ..attention import set_fused
        from ..data.multi30k import EOS

        row = out[0].tolist()
        end = row.index(EOS) + 1 if EOS in row else len(row)
        targets = row[
            1:end
        ]  # what the decoder wrote, <eos> included when it got there
        tgt_in = out[
            :, : len(targets)
        ]  # (1, T): <bos> and every written token but the last
        was_training = self.model.training
        self.model.eval()
        with torch.no_grad(), set_fused(self.model, False):
            self.model(src, tgt_in)
            maps = torch.stack(
                [m[0] for m in self.model.attention_maps()["cross"]]
            )  # (N, h, T, S)
        self.model.train(was_training)
        return maps, targets

    def _clear(self, message: str) -> None:
        """Show ``message`` instead of a translation, and no map."""
        self.output.value = message
        self.src_pieces, self.out_pieces, self.weights = [], [], None
        self.image.value = b""

    def redraw(self) -> None:
        """Translate the text with the controls' settings and redraw the line and the map."""
        import html

        from ..viz import attention_heatmap

        self.beam.disabled = self.temperature.value > 0
        text = self.text.value.strip()
        if not text:
            self.output.value = "<i>type a German sentence</i>"
            return
        try:
            self.translation, src, out = self.translate(text)
        except ValueError as err:  # longer than the model's positions
            self.translation = ""
            return self._clear(f"<i>{html.escape(str(err))}</i>")
        if src is None:  # blank, or no piece the model knows
            return self._clear(
                "<i>nothing to translate: the sentence holds no word "
                "piece the model knows</i>"
            )
        maps, targets = self.cross_attention(src, out)
        how = f"sampled at T = {self.temperature.value:.1f}" if self.temperature.value > 0 else (
            "greedy" if self.beam.value == 1 else f"beam search, K = {self.beam.value}")  # fmt: skip
        self.output.value = f"<b>English</b> ({how}): {html.escape(self.translation) or '<i>(empty)</i>'}"
        self.src_pieces = [
            self.tokenizer.id_to_piece(i) for i in src[0].tolist()
        ]
        self.out_pieces = [self.tokenizer.id_to_piece(i) for i in targets]
        if not targets:
            self.weights = None
            self.image.value = b""
            return
        self.weights = (
            maps[self.layer.value - 1].mean(dim=0).cpu()
        )  # (T, S), averaged over heads
        title = f"cross-attention, decoder layer {self.layer.value}, mean of {maps.size(1)} heads"
        ax = attention_heatmap(self.weights, self.out_pieces, self.src_pieces, title=title,
                               annotate=self.weights.numel() <= 150)  # fmt: skip
        ax.set_xlabel("source piece (attended to)")
        ax.set_ylabel("output piece (being written)")
        buffer = io.BytesIO()
        ax.figure.savefig(buffer, format="png", dpi=72, bbox_inches="tight")
        self.image.value = buffer.getvalue()


__all__ += ["Translator"]
