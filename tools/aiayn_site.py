"""Sphinx extension for the book's website (registered in _config.yml under local_extensions).

- Loads the site's own Vega, Vega-Lite and vega-embed on the pages that draw a chart (their body
  calls ``vegaEmbed``), with a priority below the default (500) so they come before RequireJS
  (which myst-nb adds on pages with ipywidgets): loaded after RequireJS, Vega's UMD bundles would
  register as anonymous AMD modules instead of the globals the charts call. The other pages, 27 of
  44, do not load them: 0.8 MB of scripts that block the page in its head.
- Gives the ipywidgets HTML manager, written for MathJax 2, the one MathJax 2 call it makes
  (``MathJax.Hub.Queue``), answered by MathJax 3's ``typesetPromise``.
- Keeps inline scripts from appearing twice on a page (a second ``const THEBE_JS_URL`` of
  sphinx-thebe is a page error).
- Copies the site's assets again when ``tools/site_assets.py`` changed them: Sphinx copies static files
  only when it writes a page, so it rewrites the first page when an asset is newer than it (the
  translator's model, present in one build and not the next, would otherwise stay as it was).
"""

from __future__ import annotations

from pathlib import Path

VEGA_SCRIPTS = ["vendor/vega.min.js", "vendor/vega-lite.min.js", "vendor/vega-embed.min.js"]

MATHJAX2_SHIM = """\
if (window.MathJax && !window.MathJax.Hub) {
  window.MathJax.Hub = {
    Queue: function (job) {
      var el = Array.isArray(job) ? job[2] : undefined;
      if (window.MathJax.typesetPromise) { window.MathJax.typesetPromise(el ? [el] : undefined).catch(function () {}); }
    }
  };
}"""


def _drop_duplicate_scripts(app, env):
    """Name inline scripts ``""`` rather than ``None``, so Sphinx sees them when it re-adds them.

    Sphinx 7.4 registers an inline script (``add_js_file(None, body=...)``) under the name
    ``None`` and re-adds it before writing under the name ``""``; the two do not compare equal,
    so every inline script of an extension would appear twice on each page.
    """
    scripts = getattr(app.builder, "_js_files", None)
    for script in scripts or []:
        if script.filename is None:
            object.__setattr__(script, "filename", "")


def _assets_changed(app, env, added, changed, removed):
    """The root page, when a file of _site_assets is newer than its HTML: writing it copies them again."""
    built = Path(app.outdir) / f"{app.config.root_doc}.html"
    assets = Path(app.confdir) / "_site_assets"
    if not built.is_file() or not assets.is_dir():
        return []
    newest = max((f.stat().st_mtime for f in assets.rglob("*") if f.is_file()), default=0)
    return [app.config.root_doc] if newest > built.stat().st_mtime else []


def _vega_where_charts(app, pagename, templatename, context, doctree):
    """Vega's three scripts on this page only, when its body draws a chart (added here, they are the page's)."""
    if "vegaEmbed(" in context.get("body", ""):
        for script in VEGA_SCRIPTS:
            app.add_js_file(script, priority=200)


def setup(app):
    app.connect("html-page-context", _vega_where_charts)
    # deferred like MathJax itself, and later in the page, so it runs after MathJax has loaded
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=900, type="module")
    app.connect("env-updated", _drop_duplicate_scripts)
    app.connect("env-get-outdated", _assets_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
