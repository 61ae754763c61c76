"""Chapter 11 where the published model cannot be had: every cell of every page still runs, none shows an error.

Each page of the chapter is executed as Colab would open it, alone in an empty folder, with no
``$AIAYN_MODEL``, an empty cache and every download refused (a proxy that nothing answers), so
``load_published`` fails as it does for a reader without the release. Each page's model cell must print
its paragraph on how to get the model (once), the cells that need the model one line each, and nothing may
end in an error or a traceback. (11.4 and 11.5 have no model cell: 11.4's translator runs in the
reader's browser, 11.5 trains its own small model.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"

# per page: how many cells say "skipped: ...", the lines that show the shipped figures, the charts, and whether
# it has a model cell (every page but the one whose translator runs in the browser)
PAGES = {
    "11_translate_multi30k.ipynb": {"skipped": 1, "lines": [], "charts": 1},  # the curves
    "11_2_heads_and_errors.ipynb": {
        "skipped": 3,
        "lines": ["no model here: these maps were computed with it, to 0.001"],
        # the attention explorer, the heads' BLEU costs, the BLEU histogram and the length bands
        "charts": 4,
    },
    "11_3_decoding_and_your_own_model.ipynb": {
        "skipped": 3,
        "lines": ["no model here: the published beam-search lines, no greedy ones"],
        "charts": 0,
    },
    # the translator runs in the reader's browser: the page loads no model, and prints the shipped figures
    "11_4_in_your_browser.ipynb": {
        "skipped": 0,
        "lines": ["BLEU of the int8 graphs on test2016, beam search, K = 4: "],
        "charts": 0,
        "model_cell": False,
    },
    # more than one GPU: no model; two CPU processes trained live, and the H100's shipped figures
    "11_5_more_than_one_gpu.ipynb": {
        "skipped": 0,
        "lines": ["2 processes, 1 GPU: error: torchrun started 2 processes"],
        "charts": 0,
        "model_cell": False,
    },
}


def _outputs(nb, kind: str):
    return [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == kind]  # fmt: skip


def _printed(nb) -> str:
    return "".join(o.get("text", "") for _, o in _outputs(nb, "stream"))


def test_every_page_of_the_chapter_is_checked():
    assert sorted(p.name for p in BOOK.glob("11_*.ipynb")) == sorted(PAGES)


@pytest.fixture(scope="module", params=sorted(PAGES))
def executed(request, tmp_path_factory):
    chapter = BOOK / request.param
    data = Path(os.environ.get("AIAYN_DATA") or ROOT.parent / "shared/data/multi30k")
    alone = tmp_path_factory.mktemp("alone")
    page = shutil.copy(chapter, alone / chapter.name)  # nothing beside it, as on Colab
    cache = tmp_path_factory.mktemp("empty-cache")
    env = {k: v for k, v in os.environ.items() if k not in ("AIAYN_MODEL",)}
    dead = "http://127.0.0.1:9"  # nothing listens: every download is refused at once
    env |= {"AIAYN_DATA": str(data), "XDG_CACHE_HOME": str(cache), "HOME": str(cache),
            "http_proxy": dead, "https_proxy": dead, "HTTP_PROXY": dead, "HTTPS_PROXY": dead,
            "no_proxy": "", "NO_PROXY": ""}  # fmt: skip
    nb = nbformat.read(page, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(alone)}})  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:  # the kernel inherits this process's environment
        for key in ("AIAYN_MODEL",):
            mp.delenv(key, raising=False)
        for key, value in env.items():
            mp.setenv(key, value)
        client.execute()
    return request.param, nb


def test_no_cell_ends_in_an_error(executed):
    _, nb = executed
    errors = [(i, f"{o['ename']}: {o['evalue']}") for i, o in _outputs(nb, "error")]
    assert not errors, errors
    stderr = [(i, o["text"][:300]) for i, o in _outputs(nb, "stream") if o["name"] == "stderr"]
    assert not [e for e in stderr if "Traceback" in e[1] or "Error" in e[1]], stderr


def test_the_model_cell_says_how_to_get_the_model_once(executed):
    name, nb = executed
    text = _printed(nb)
    if not PAGES[name].get("model_cell", True):  # a page that never loads the model has nothing to explain
        assert "The published model cannot be loaded here" not in text
        return
    assert text.count("The published model cannot be loaded here") == 1
    ways = ("multi30k-averaged-fp16.pt", "$AIAYN_MODEL", "--preset laptop --out runs/laptop", 'RUN = "runs/laptop"')
    for way in ways:
        assert way in " ".join(text.split()), way


def test_cells_that_need_the_model_say_so_in_one_line(executed):
    name, nb = executed
    expect = PAGES[name]
    lines = _printed(nb).splitlines()
    skipped = [line for line in lines if line.startswith("skipped: ")]
    assert len(skipped) >= expect["skipped"], skipped
    for line in expect["lines"]:
        assert any(line in printed for printed in lines), line


def test_the_shipped_figures_still_draw_the_charts(executed):
    name, nb = executed
    charts = [c for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if any("vegalite" in m for m in o.get("data", {}))]  # fmt: skip
    assert len(charts) >= PAGES[name]["charts"]
