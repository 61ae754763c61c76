"""Copy the JavaScript the website needs from node_modules (pinned in package-lock.json) into the site.

Files land in _site_assets/vendor (served as _static/vendor) and _site_extra (copied to the site root).

The in-browser translator (chapter 11.4) gets _site_assets/translator (served as _static/translator): the page's
modules from src/aiayn/web, the committed attention examples (what the page shows without a model), ``site.json``
(what this build holds, and how many bytes the page downloads when the reader asks) and, when the published model
is on this machine ($AIAYN_MODEL, else the user cache; never downloaded here), its int8 ONNX graphs, tokenizer and
manifest in translator/model, and ``heads.json`` beside them: what the head grid needs (the first 100 sentences
of test 2016, read from $AIAYN_DATA at build time and never committed, and the heads chapter 11.2's record names).
The export (``python -m aiayn.export --bleu int8 --limit 100``: its int8 files scored on the first 100 sentences of
test 2016, a check of what the page serves; all 1,000 are scored once, in results/multi30k.translator.json) is kept in
_build/translator-export/<key>, the key naming the weights and the exporter, so a second build copies it instead of
exporting again. Weights and graphs stay out of git (both folders are ignored).

Run by `make book` and `make test` before the site build, so no page loads anything from a CDN.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NODE = ROOT / "node_modules"
VENDOR = ROOT / "_site_assets" / "vendor"  # html_static_path: served as _static/vendor
EXTRA = ROOT / "_site_extra"  # html_extra_path: copied to the site's root as it is
TRANSLATOR = ROOT / "_site_assets" / "translator"  # served as _static/translator
PACKAGE = ROOT / "src" / "aiayn"
EXPORTS = ROOT / "_build" / "translator-export"  # one folder per (weights, exporter)
EXPORTER = sorted(p.name for p in (PACKAGE / "export").glob("*.py"))  # the export folder: a change to one exports again

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
    # onnxruntime-web, WebAssembly only: the module the page imports, the Emscripten glue it imports and the
    # runtime itself (the page fetches the .wasm, counting its bytes, and hands it over)
    "onnxruntime-web": [
        "onnxruntime-web/dist/ort.wasm.min.mjs",
        "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs",
        "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
    ],
}
RUNTIME = "onnxruntime-web/ort-wasm-simd-threaded.wasm"  # relative to _static/vendor

# what the page downloads from an export (aiayn.export.command writes them)
# (not decoder.int8.onnx: the page decodes with the key/value cache of decoder_step.int8.onnx)
MODEL_FILES = (
    "encoder.int8.onnx",
    "cross_kv.int8.onnx",
    "decoder_step.int8.onnx",
    "tokenizer.json",
    "translator.json",
    "shortlist.json",  # absent from an export made without the training pairs
    "manifest.json",
)
# what --bleu int8 reads, and the training pairs the shortlist is learned from
DATA_FILES = ("test_2016_flickr.de.gz", "test_2016_flickr.en.gz", "train.de.gz", "train.en.gz")
# the test sentences the build scores its int8 files on: enough to catch a broken export in a few seconds
SCORED = 100


def download_bytes(page_bytes: int, runtime_bytes: int) -> int:
    """What the translator's page downloads when the reader asks: the model's files (the export's
    ``page_bytes``: int8 graphs, tokenizer, settings) and onnxruntime-web's WebAssembly runtime.

    The one sum behind both figures a reader sees: the page's button (``site.json``) and the chapter's
    prose (``multi30k.translator.json``, from tools/translator_figures.py).
    """
    return page_bytes + runtime_bytes


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def copy_vendor() -> None:
    for dest, patterns in ASSETS.items():
        folder = VENDOR / dest
        folder.mkdir(parents=True, exist_ok=True)
        for pattern in patterns:
            matches = sorted(NODE.glob(pattern))
            if not matches:
                raise SystemExit(f"site assets: nothing in node_modules matches {pattern}; run `npm ci`")
            for src in matches:
                shutil.copy2(src, folder / src.name)


# --- the translator's page -------------------------------------------------------------------------------


def published_folder() -> tuple[Path | None, str]:
    """The folder of the published model on this machine and its weights, or None and why not (no download)."""
    from aiayn.runs.published import (
        ModelUnavailable,
        model_dir,
        weights_file,
    )

    given = os.environ.get("AIAYN_MODEL")
    folder = model_dir()
    try:
        weights = weights_file(folder)
    except ModelUnavailable as err:
        weights, problem = None, str(err)
    else:
        missing = [p.name for p in (weights, folder / "config.json", folder / "tokenizer.model") if not p.is_file()]
        problem = f"{folder} lacks {', '.join(missing)}" if missing else ""
    if not problem:
        return weights, ""
    if given:  # asked for, and not there: a site built without it would hide the mistake
        raise SystemExit(f"site assets: $AIAYN_MODEL={given}, but {problem}")
    return None, f"no published model in {folder} ($AIAYN_MODEL unset)"


def test_data() -> Path | None:
    """The folder with the test 2016 files that ``--bleu int8`` scores and the training pairs of the
    shortlist, if they are on this machine."""
    from aiayn.data.multi30k import data_dir

    folder = data_dir()
    return folder if all((folder / name).is_file() for name in DATA_FILES) else None


def model_files(manifest: dict) -> list[str]:
    """The MODEL_FILES an export holds (the shortlist only where it was made with one)."""
    return [n for n in MODEL_FILES if n in manifest["files"] or n == "manifest.json"]


def complete(folder: Path) -> bool:
    """Whether an export folder holds every file the page needs, as big as its manifest says."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        return all((folder / n).stat().st_size == manifest["files"][n]["bytes"] for n in model_files(manifest)[:-1])
    except (OSError, KeyError, ValueError):
        return False


def export(weights: Path, data: Path | None) -> tuple[Path, str]:
    """The export of these weights by this exporter: reused from _build/translator-export, else made there.

    Returns the folder and what happened ("reused ...", "exported ...").
    """
    exporter = hashlib.sha256("".join(sha256(PACKAGE / "export" / name) for name in EXPORTER).encode()).hexdigest()
    key = f"{sha256(weights)[:16]}-{exporter[:16]}"
    out = EXPORTS / key
    if complete(out) and (json.loads((out / "manifest.json").read_text())["bleu"] or data is None):
        return out, f"reused the export of {weights} in {out.relative_to(ROOT)}"
    partial = EXPORTS / f"{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    scoring = ["--bleu", "int8", "--limit", str(SCORED), "--shortlist", "train"]
    command = [sys.executable, "-m", "aiayn.export", str(weights.parent), "--out", str(partial),
               *(scoring if data is not None else ["--bleu", "none", "--shortlist", "none"])]
    log = EXPORTS / f"{key}.log"
    started = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, check=False)
    if done.returncode != 0 or not complete(partial):
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-15:])
        raise SystemExit(f"site assets: `{' '.join(command)}` failed (log: {log}):\n{tail}")
    for old in EXPORTS.iterdir():  # one export at a time: an older one is 250 MB of graphs
        if old.is_dir() and old.name != key and old != partial:
            shutil.rmtree(old)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    seconds = time.perf_counter() - started
    return out, f"exported {weights} into {out.relative_to(ROOT)} in {seconds:.0f} s"


HEADS_JSON = "heads.json"  # the head grid's sentences and presets, beside the model's files
HEAD_SENTENCES = 100  # the first of test 2016, scored greedily when the reader asks


def heads_record(data: Path) -> dict:
    """What the page's head grid reads: the first HEAD_SENTENCES pairs of test 2016 and, from chapter
    11.2's record (multi30k.head_ablation.json), the head each layer keeps in its "one head" run and the
    heads whose removal alone cost BLEU beyond the noise (the whole 95 % interval below 0)."""
    from aiayn.data.multi30k import load_multi30k
    from aiayn.model import HEAD_KINDS
    from aiayn.runs.published import results_dir

    ablation = json.loads((results_dir() / "multi30k.head_ablation.json").read_text())
    N, h, results = ablation["N"], ablation["h"], ablation["results"]
    kept = [[results[f"keep_one:{kind}:{n}"]["kept"] for n in range(N)] for kind in HEAD_KINDS]
    costly = [[k, n, i] for k, kind in enumerate(HEAD_KINDS) for n in range(N) for i in range(h)
              if results[f"head:{kind}:{n}:{i}"]["high"] < 0]  # fmt: skip
    pairs = load_multi30k("test2016", data)[:HEAD_SENTENCES]
    return {
        "what": f"the first {HEAD_SENTENCES} sentences of Multi30k's test 2016 (German, English reference), which "
        "the page translates greedily with the reader's head mask and scores with sacreBLEU; and, from chapter "
        "11.2's head ablation (results/multi30k.head_ablation.json): kept[kind][layer], the head kept in its run "
        "with one head a layer, and costly, the [kind, layer, head] whose removal alone cost BLEU beyond the "
        "noise (tools/site_assets.py)",
        "kinds": list(HEAD_KINDS),
        "shape": [len(HEAD_KINDS), N, h],
        "pairs": [list(pair) for pair in pairs],
        "kept": kept,
        "costly": costly,
    }


def copy_translator() -> str:
    """Fill _site_assets/translator; returns the line that says what happened to the model."""
    TRANSLATOR.mkdir(parents=True)
    for src in sorted((PACKAGE / "web").glob("*.mjs")) + sorted((PACKAGE / "web").glob("*.css")):
        shutil.copy2(src, TRANSLATOR / src.name)
    with gzip.open(PACKAGE / "results" / "multi30k.attention.json.gz", "rb") as f:
        (TRANSLATOR / "examples.json").write_bytes(f.read())  # the explorer of chapter 11.2, for the fallback
    runtime = VENDOR / RUNTIME
    site = {
        "what": "the in-browser translator of this build (tools/site_assets.py)",
        "model": None,
        "examples": "examples.json",
        "runtime": {"path": f"../vendor/{RUNTIME}", "bytes": runtime.stat().st_size, "sha256": sha256(runtime)},
        "download": None,  # {"bytes": ...} where the build holds the model
        "heads": None,  # {"path", "bytes", "sha256"} of heads.json where the build holds the test sentences
    }
    weights, why = published_folder()
    if weights is None:
        line = f"translator: {why}: the page will show the committed examples"
    else:
        data = test_data()
        out, what = export(weights, data)
        (TRANSLATOR / "model").mkdir()
        manifest = json.loads((out / "manifest.json").read_text())
        for name in model_files(manifest):
            shutil.copy2(out / name, TRANSLATOR / "model" / name)
        site["model"] = "model/manifest.json"
        site["download"] = {"bytes": download_bytes(manifest["page_bytes"], site["runtime"]["bytes"])}
        if data is not None:  # the head grid scores test sentences: only where they are here
            heads = TRANSLATOR / "model" / HEADS_JSON
            heads.write_text(json.dumps(heads_record(data), ensure_ascii=False))
            site["heads"] = {"path": f"model/{HEADS_JSON}", "bytes": heads.stat().st_size, "sha256": sha256(heads)}
        bleu = manifest["bleu"]
        scores = (
            f"BLEU of the int8 files on the first {bleu['int8.beam1']['sentences']} sentences of test2016: "
            f"greedy {bleu['int8.beam1']['bleu']:.2f}, beam 4 {bleu['int8.beam4']['bleu']:.2f}"
            if bleu
            else "no BLEU: the test2016 files are not here (set $AIAYN_DATA)"
        )
        line = f"translator: {what}; {scores}; the page downloads {site['download']['bytes'] / 1e6:.1f} MB"
    (TRANSLATOR / "site.json").write_text(json.dumps(site, indent=1) + "\n")
    return line


def main() -> None:
    if not NODE.is_dir():
        raise SystemExit("node_modules is missing: run `npm ci` first (make does this)")
    for folder in (VENDOR, EXTRA, TRANSLATOR):
        if folder.exists():
            shutil.rmtree(folder)
    VENDOR.mkdir(parents=True)
    copy_vendor()
    line = copy_translator()
    files = [p for folder in (VENDOR, EXTRA, TRANSLATOR) for p in folder.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"site assets: {len(files)} files, {size / 1e6:.1f} MB in _site_assets/ and _site_extra/")
    print(line)


if __name__ == "__main__":
    main()
