"""aiayn: the code of the book "Attention Is All You Need".

The paper's modules stand at the top, under their names: ``embeddings``, ``masks``, ``attention``,
``layers``, ``model``, ``schedule``, ``loss``, ``bleu`` (with ``calibration`` and ``compare``,
which holds them against PyTorch's own). Everything else lives in a folder named for what it is.
The layers, from the ground up; a module imports only from its own layer and the layers under it
(``tests/test_layering.py`` holds the package to this list; ``docs/architecture.md`` draws it):

    base       checks files cli
    paper      embeddings masks attention layers model schedule loss bleu calibration compare
    baselines/ the recurrent translator the paper replaced (RNNsearch), in the model's interface
    engine/    the fast twins of the paper's modules and the one switch, set_fast
    data/      Multi30k, the tokenizer, downloads
    decoding/  the searches, their fast twins, seeded draws, translate
    training/  batches, the step, the loop, checkpoints, history, several processes
    runs/      presets, the run folder and its record, scoring, loading a run, the published model
    export/    the page's ONNX graphs and their Python twin
    viz/       the charts
    pages/     what only the pages use: shown code, widgets, the step-through, the embedding map
    bench/     how fast it trains, and the estimate for a GPU
    commands   train evaluate published stepthrough embedding_map equivalence

The commands run as ``python -m aiayn.train``, ``aiayn.evaluate``, ``aiayn.published``,
``aiayn.export``, ``aiayn.bench``, ``aiayn.stepthrough``, ``aiayn.embedding_map`` and
``aiayn.equivalence``. Import what a chapter needs, e.g. ``from aiayn.masks import padding_mask``.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from .checks import check_shape

__all__ = ["check_shape"]
__version__ = "0.1.0"

# Where the modules that stood at the top before the folders (2026-11) are now. Importing an old
# path still works: it warns and gives the module at its new place.
MOVED = {
    "fast_attention": "engine.fast_attention",
    "kv_cache": "engine.kv_cache",
    "onednn": "engine.onednn",
    "cuda_graphs": "engine.cuda_graphs",
    "download": "data.download",
    "tokenizer": "data.tokenizer",
    "decoding_common": "decoding.common",
    "pruned_beam": "decoding.pruned_beam",
    "seeded": "decoding.seeded",
    "translation": "decoding.translate",
    "batches": "training.batches",
    "step": "training.step",
    "loop_pieces": "training.loop_pieces",
    "checkpoints": "training.checkpoints",
    "history": "training.history",
    "distributed": "training.distributed",
    "presets": "runs.presets",
    "run_log": "runs.run_log",
    "recipes": "runs.recipes",
    "scoring": "runs.scoring",
    "release": "runs.release",
    "weights_files": "runs.weights_files",
    "onnx_graphs": "export.graphs",
    "onnx_prefix": "export.prefix",
    "onnx_translator": "export.translator",
    "shortlist": "export.shortlist",
    "widgets": "pages.widgets",
    "source": "pages.source",
    "book_results": "pages.book_results",
    "estimate": "bench.estimate",
}


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``aiayn.<old name>`` and hands over the module at its new place, with a warning."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname.partition("aiayn.")[2]
        if fullname.startswith("aiayn.") and old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = f"aiayn.{MOVED[spec.name.partition('aiayn.')[2]]}"
        warnings.warn(
            f"{spec.name} has moved to {new}: import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(new)
        self._specs = getattr(self, "_specs", {})
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):
        # the import system set the old name's spec on the module: give it back its own
        module.__spec__ = self._specs.pop(
            module.__spec__.name, module.__spec__
        )


if not any(isinstance(f, _Moved) for f in sys.meta_path):
    sys.meta_path.append(_Moved())
