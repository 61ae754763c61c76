"""Copy the JavaScript the website needs from node_modules (pinned in package-lock.json) into the site.

Files land in _site_assets/vendor (served as _static/vendor) and _site_extra (copied to the site root).

Run by `make book` and `make test` before the site build, so no page loads anything from a CDN.
"""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules"
VENDOR = ROOT / "_site_assets" / "vendor"  # html_static_path: served as _static/vendor
EXTRA = ROOT / "_site_extra"  # html_extra_path: copied to the site's root as it is

# destination folder (relative to _static/vendor) -> glob patterns (relative to node_modules)
ASSETS = {
    ".": [
        "vega/build/vega.min.js",
        "vega-lite/build/vega-lite.min.js",
        "vega-embed/build/vega-embed.min.js",
        "requirejs/require.js",
    ],
    # MathJax 3: the TeX-to-HTML bundle and the fonts it loads relative to itself
    "mathjax": ["mathjax/es5/tex-chtml.js"],
    "mathjax/output/chtml/fonts/woff-v2": ["mathjax/es5/output/chtml/fonts/woff-v2/*.woff"],
    "mathjax/input/tex/extensions": ["mathjax/es5/input/tex/extensions/*.js"],
    # the ipywidgets HTML manager (RequireJS flavour) and the icon fonts its CSS points at
    "html-manager": ["@jupyter-widgets/html-manager/dist/embed-amd.js"],
    # it asks for its icon fonts relative to the page (every page lives in book/): html_extra_path
    "../../_site_extra/book/@jupyter-widgets/html-manager/dist": [
        "@jupyter-widgets/html-manager/dist/*.woff2",
        "@jupyter-widgets/html-manager/dist/*.woff",
        "@jupyter-widgets/html-manager/dist/*.ttf",
    ],
    # ... and now and then one folder higher
    "../../_site_extra/book/@jupyter-widgets": [
        "@jupyter-widgets/html-manager/dist/*.woff2",
        "@jupyter-widgets/html-manager/dist/*.woff",
        "@jupyter-widgets/html-manager/dist/*.ttf",
    ],
}


def main() -> None:
    if not NODE.is_dir():
        raise SystemExit("node_modules is missing: run `npm ci` first (make does this)")
    for folder in (VENDOR, EXTRA):
        if folder.exists():
            shutil.rmtree(folder)
    VENDOR.mkdir(parents=True)
    for dest, patterns in ASSETS.items():
        folder = VENDOR / dest
        folder.mkdir(parents=True, exist_ok=True)
        for pattern in patterns:
            matches = sorted(NODE.glob(pattern))
            if not matches:
                raise SystemExit(f"site assets: nothing in node_modules matches {pattern}; run `npm ci`")
            for src in matches:
                shutil.copy2(src, folder / src.name)
    files = [p for folder in (VENDOR, EXTRA) for p in folder.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"site assets: {len(files)} files, {size / 1e6:.1f} MB in _site_assets/ and _site_extra/")


if __name__ == "__main__":
    main()
