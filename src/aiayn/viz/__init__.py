"""Charts for the chapters: Altair for interactive figures, matplotlib for static ones.

Importing this module switches Altair to the book's renderer. A chart's output then carries both
the Vega-Lite spec (which Jupyter and Colab draw themselves) and an HTML snippet that draws it with
the website's own copies of Vega, Vega-Lite and vega-embed, loaded once per page from ``_static``.
On Colab, Altair's default renderer is kept.

Each chart helper returns a chart so that a chapter's plot cell is one line.
"""

from __future__ import annotations

import hashlib
import json
import sys

import altair as alt

__all__ = ["enable_book_renderer", "book_renderer"]

_EMBED_OPTIONS = {"actions": False, "renderer": "svg"}


def book_renderer(spec: dict, **metadata) -> dict:
    """Altair renderer: the Vega-Lite mimetype for notebooks plus HTML for the static website.

    The HTML has no ``<script src>``: the page provides ``vegaEmbed``. Element ids are derived from
    the spec, so re-running a notebook stores the same output.
    """
    spec_json = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    chart_id = (
        "aiayn-chart-" + hashlib.sha1(spec_json.encode()).hexdigest()[:12]
    )
    options = json.dumps(_EMBED_OPTIONS, sort_keys=True)
    html = (
        f'<div id="{chart_id}" class="aiayn-chart"></div>\n'
        "<script>\n"
        "(function () {\n"
        f"  var spec = {spec_json};\n"
        "  function draw() {\n"
        f'    vegaEmbed("#{chart_id}", spec, {options}).catch(function (e) {{ console.error(e); }});\n'
        "  }\n"
        '  if (window.vegaEmbed) { draw(); } else { window.addEventListener("load", draw); }\n'
        "})();\n"
        "</script>"
    )
    return {
        _vegalite_mime(): spec,
        "text/html": html,
        "text/plain": f"<{spec.get('$schema', 'Vega-Lite').rsplit('/', 1)[-1]} chart {chart_id}>",
    }


def _vegalite_mime() -> str:
    major = alt.SCHEMA_VERSION.lstrip("v").split(".")[0]
    return f"application/vnd.vegalite.v{major}+json"


def enable_book_renderer() -> None:
    """Use the book's renderer, except on Colab where Altair's default already works."""
    if "google.colab" in sys.modules:
        alt.renderers.enable("default")
        return
    if "aiayn" not in alt.renderers.names():
        alt.renderers.register("aiayn", book_renderer)
    alt.renderers.enable("aiayn")


enable_book_renderer()

# Each chapter's chart helpers live in a module of their own; ``aiayn.viz.NAME`` reaches all of them.
from . import (  # noqa: E402
    attention,
    evaluation,
    foundations,
    heads,
    model,
    positions,
    stepthrough,
    training,
    translation,
)
from .attention import *  # noqa: E402, F403
from .beam import beam_tree_figure, beam_tree_frames  # noqa: E402, F401
from .evaluation import *  # noqa: E402, F403
from .foundations import *  # noqa: E402, F403
from .heads import *  # noqa: E402, F403
from .model import *  # noqa: E402, F403
from .positions import *  # noqa: E402, F403
from .stepthrough import *  # noqa: E402, F403
from .training import *  # noqa: E402, F403
from .translation import *  # noqa: E402, F403

__all__ += (
    attention.__all__
    + evaluation.__all__
    + foundations.__all__
    + model.__all__
)  # noqa: F405
__all__ += positions.__all__ + training.__all__ + translation.__all__  # noqa: F405
__all__ += stepthrough.__all__ + heads.__all__  # noqa: F405
