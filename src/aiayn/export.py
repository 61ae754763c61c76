"""``python -m aiayn.export [RUN] --out DIR``: the translator as ONNX files for onnxruntime and the book's page.

It exports the published model or any run folder; ``aiayn.onnx_graphs`` writes the files (its
docstring lists them). The command scores them on test 2016 with the search the page runs, written
once in Python (``greedy``, ``beam_search``, ``attention``, ``bpe_encode`` ...):
``aiayn/web/translator.mjs`` mirrors these functions one by one.
The tests hold the two equal token for token on the float32 files. On the int8 files they agree on
about 49 sentences in 50: onnxruntime's x86 kernels fuse the int8 products and add in another order
than its WebAssembly build, and activations quantized on the fly turn such differences into rounding
steps. Both are as far from float32; the manifest's BLEU is the Python one.

The command follows the rules of the others (``aiayn.cli``). ``--out`` is a new or empty folder,
or an earlier export, which is replaced as a whole (its manifest says ``"format":
"aiayn-export/1"``); a run folder, a folder of results or a folder with other files is refused.
RUN, ``--out``, ``--limit`` and the test data are checked before the model is loaded, and a wrong
one is one ``error: ...`` line with exit status 2. Everything is written into a sibling folder,
``DIR.unfinished-export-<random>``, renamed to DIR at the end: Ctrl-C or a crash leaves the old
DIR or none, never half an export, and the next export removes such a leftover. Each step says
what it does; on a terminal, progress bars show the export, the quantization and the scoring
(``--no-progress``: none).
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import glob
import importlib.util
import json
import math
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import cli
from .checks import atomic_write
from .onnx_graphs import (
    DECODER_OUTPUTS,
    ENCODER_OUTPUTS,
    EXPORT_FORMAT,
    GRAPHS,
    MANIFEST,
    SETTINGS_JSON,
    TOKENIZER_JSON,
    _bar,
    _sha256,
    export,
    graph_file,
)
from .runs import CHECKPOINT, CONFIG, RunFolder, RunFolderError, shown
from .translation import is_blank, normalise

BOUNDARY = "\u2581"  # "▁", sentencepiece's word boundary


# --- The search the page runs, in Python ------------------------------------------------------------
# Each function has a twin of the same name in aiayn/web/translator.mjs (camelCase there).


class OnnxModel:
    """The two graphs in onnxruntime sessions, one thread unless told otherwise."""

    def __init__(
        self, folder: str | os.PathLike, int8: bool = True, threads: int = 1
    ):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        folder = Path(folder)
        self.encoder, self.decoder = (
            ort.InferenceSession(
                str(folder / graph_file(name, int8)),
                options,
                providers=["CPUExecutionProvider"],
            )
            for name in GRAPHS
        )

    def encode(self, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``src (rows, S)`` -> ``memory`` and the encoder's attention."""
        return tuple(self.encoder.run(ENCODER_OUTPUTS, {"src": src}))

    def decode(self, memory, src, prefix) -> tuple[np.ndarray, ...]:
        """``log_probs (rows, V)``, ``cross_attention``, ``decoder_attention``."""
        feed = {"memory": memory, "src": src, "prefix": prefix}
        return tuple(self.decoder.run(DECODER_OUTPUTS, feed))


class Vocabulary:
    """``tokenizer.json`` read back: pieces, scores and the special ids."""

    def __init__(self, record: dict[str, Any]):
        self.pieces = [p for p, _ in record["pieces"]]
        self.scores = {p: s for p, s in record["pieces"]}
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.normal = {
            p
            for p, kind in zip(self.pieces, record["types"], strict=True)
            if kind in ("normal", "user")
        }
        self.pad_id, self.bos_id = record["pad_id"], record["bos_id"]
        self.eos_id, self.unk_id = record["eos_id"], record["unk_id"]
        self.add_dummy_prefix = record["add_dummy_prefix"]

    @classmethod
    def load(cls, folder: str | os.PathLike) -> Vocabulary:
        return cls(
            json.loads((Path(folder) / TOKENIZER_JSON).read_text("utf-8"))
        )


def bpe_encode(vocab: Vocabulary, text: str) -> list[int]:
    """sentencepiece's BPE: spaces become "▁", then merge the best-scoring neighbours until none is a piece."""
    text = text.replace(" ", BOUNDARY)
    if vocab.add_dummy_prefix and text:
        text = BOUNDARY + text
    symbols = list(text)  # one symbol per character (code point)
    while len(symbols) > 1:
        best, at = -math.inf, -1
        for i in range(len(symbols) - 1):
            pair = symbols[i] + symbols[i + 1]
            score = vocab.scores.get(pair, -math.inf)
            if (
                pair in vocab.normal and score > best
            ):  # the leftmost of equal scores
                best, at = score, i
        if at < 0:
            break
        symbols[at : at + 2] = [symbols[at] + symbols[at + 1]]
    ids = []
    for s in symbols:
        i = vocab.ids[s] if s in vocab.normal else vocab.unk_id
        if not (i == vocab.unk_id and ids and ids[-1] == vocab.unk_id):
            ids.append(i)  # a run of unknown characters is one <unk>
    return ids


def source_ids(
    vocab: Vocabulary, text: str, max_len: int
) -> list[int] | None:
    """The ids the encoder reads, ``<eos>`` last; ``None`` when there is nothing to translate.

    As ``aiayn.translation.source_ids``: the text is read as ``normalise`` gives it (NFC, whitespace
    collapsed and trimmed); a blank one (``is_blank``) or one with no known piece gives ``None``; a
    sentence too long for the model's positions is refused.
    """
    if is_blank(text):
        return None
    ids = bpe_encode(vocab, normalise(text))
    boundary = vocab.ids.get(BOUNDARY)
    if all(i in (vocab.unk_id, boundary) for i in ids):
        return None
    if len(ids) + 1 > max_len:
        raise ValueError(
            f"the sentence has {len(ids)} pieces + <eos>, the model reads at most {max_len}"
        )
    return ids + [vocab.eos_id]


def detokenize(vocab: Vocabulary, ids: Sequence[int]) -> str:
    """Pieces back to text, as sentencepiece decodes them (special ids dropped)."""
    specials = (vocab.pad_id, vocab.bos_id, vocab.eos_id)
    pieces = [
        " \u2047 " if i == vocab.unk_id else vocab.pieces[i]
        for i in ids
        if i not in specials
    ]
    text = "".join(pieces).replace(BOUNDARY, " ")
    return (
        text[1:] if vocab.add_dummy_prefix and text.startswith(" ") else text
    )


def output_limit(src_len: int, settings: dict[str, Any]) -> int:
    """Most columns of the output, ``<bos>`` included: ``min(int(a·S + b) + 1, max_len)``."""
    a, b = settings["max_len_a"], settings["max_len_b"]
    return min(int(a * src_len + b) + 1, settings["max_len"])


def greedy(
    model: OnnxModel, vocab: Vocabulary, src_ids: list[int], limit: int
) -> list[int]:
    """The most probable token at every step: ``<bos>`` first, ``<eos>`` last (unless cut at ``limit``)."""
    src = np.array([src_ids], dtype=np.int64)  # (1, S)
    memory, _ = model.encode(src)
    ys = [vocab.bos_id]
    while len(ys) < limit:
        log_probs = model.decode(
            memory, src, np.array([ys], dtype=np.int64)
        )[0]
        token = int(np.argmax(log_probs[0]))  # the first of equal maxima
        ys.append(token)
        if token == vocab.eos_id:
            break
    return ys


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^α, |Y| counting generated tokens."""
    return ((5 + length) / 6) ** alpha


def beam_search(
    model: OnnxModel,
    vocab: Vocabulary,
    src_ids: list[int],
    limit: int,
    beam: int = 4,
    alpha: float = 0.6,
) -> list[int]:
    """``aiayn.decoding.beam_search`` for one sentence: K prefixes ranked by log P / lp.

    A beam that wrote ``<eos>`` keeps its score and competes with the live ones; the search ends
    when every beam has finished or the prefixes reach ``limit`` columns. Sums are in float64.
    """
    src = np.array([src_ids] * beam, dtype=np.int64)  # (K, S)
    memory, _ = model.encode(src[:1])
    memory = np.repeat(memory, beam, axis=0)  # (K, S, d_model)
    beams = [[vocab.bos_id] for _ in range(beam)]
    log_p = [0.0] + [-math.inf] * (
        beam - 1
    )  # only the first may expand at first
    lengths = [0] * beam
    finished = [limit <= 1] * beam
    while not all(finished):
        token_log_p = model.decode(
            memory, src, np.array(beams, dtype=np.int64)
        )[0]
        candidates = []  # (score, log P, length, beam, token)
        for k in range(beam):
            if finished[k]:  # one continuation: padding, which costs nothing
                score = log_p[k] / length_penalty(lengths[k], alpha)
                candidates.append(
                    (score, log_p[k], lengths[k], k, vocab.pad_id)
                )
                continue
            total = log_p[k] + token_log_p[k].astype(np.float64)  # (V,)
            scores = total / length_penalty(lengths[k] + 1, alpha)
            for v in np.argsort(-scores, kind="stable")[:beam]:
                candidates.append(
                    (scores[v], total[v], lengths[k] + 1, k, int(v))
                )
        candidates.sort(
            key=lambda c: -c[0]
        )  # stable: equal scores keep beam order
        chosen = candidates[:beam]
        beams = [beams[k] + [token] for _, _, _, k, token in chosen]
        finished = [
            finished[k] or token == vocab.eos_id
            for _, _, _, k, token in chosen
        ]
        log_p = [c[1] for c in chosen]
        lengths = [c[2] for c in chosen]
        if len(beams[0]) >= limit:
            finished = [True] * beam
    scores = [
        lp / length_penalty(n, alpha)
        for lp, n in zip(log_p, lengths, strict=True)
    ]
    best = beams[scores.index(max(scores))]
    while best[-1] == vocab.pad_id:
        best.pop()
    return best


def attention(
    model: OnnxModel, src_ids: list[int], ys: list[int]
) -> dict[str, np.ndarray]:
    """The attention of a translation ``ys`` (``<bos>`` first), re-read with teacher forcing.

    Returns ``{"encoder": (N, h, S, S), "cross": (N, h, T, S), "decoder_self": (N, h, T, T)}``
    with T = ``len(ys) - 1``: row t is the step that wrote ``ys[t + 1]``.
    """
    src = np.array([src_ids], dtype=np.int64)
    memory, encoder = model.encode(src)
    _, cross, self_attn = model.decode(
        memory, src, np.array([ys[:-1]], dtype=np.int64)
    )
    return {
        "encoder": encoder[:, 0],
        "cross": cross[:, 0],
        "decoder_self": self_attn[:, 0],
    }


def translate_ids(
    model: OnnxModel,
    vocab: Vocabulary,
    src_ids: list[int],
    settings: dict[str, Any],
    beam: int | None = None,
) -> list[int]:
    """Greedy (``beam=1``) or beam search with the run's settings; ``<bos>`` first."""
    beam = settings["beam"] if beam is None else beam
    limit = output_limit(len(src_ids), settings)
    if beam == 1:
        return greedy(model, vocab, src_ids, limit)
    return beam_search(
        model, vocab, src_ids, limit, beam, settings["length_penalty"]
    )


def translate(
    model: OnnxModel,
    vocab: Vocabulary,
    sentences: Sequence[str],
    settings: dict[str, Any],
    beam: int | None = None,
    workers: int = 1,
    progress: bool = False,
    desc: str = "translate",
) -> list[str]:
    """Translate ``sentences`` one by one (``workers`` at a time); a sentence with no known piece gives ``""``.

    ``progress``: a bar over the sentences, named ``desc``.
    """
    from concurrent.futures import ThreadPoolExecutor

    def one(text: str) -> str:
        ids = source_ids(vocab, text, settings["max_len"])
        if ids is None:
            return ""
        return detokenize(
            vocab, translate_ids(model, vocab, ids, settings, beam)
        )

    pool = ThreadPoolExecutor(workers)  # onnxruntime releases the GIL
    outputs = []
    try:
        with _bar(len(sentences), desc, "sentence", progress) as bar:
            for text in pool.map(one, sentences):
                outputs.append(text)
                bar.update()
    finally:  # on Ctrl-C, the sentences not started are dropped
        pool.shutdown(wait=True, cancel_futures=True)
    return outputs


def score_files(
    folder: str | os.PathLike,
    pairs: Sequence[tuple[str, str]],
    int8: bool = True,
    beams: Sequence[int] = (1, 4),
    workers: int = 2,
    progress: bool = False,
) -> dict[str, Any]:
    """sacreBLEU of the graphs in ``folder`` on ``pairs``, for each beam size; and the outputs.

    ``progress``: a bar over the sentences of each beam size.
    """
    from sacrebleu.metrics import BLEU

    folder = Path(folder)
    settings = json.loads((folder / SETTINGS_JSON).read_text())
    model, vocab = OnnxModel(folder, int8), Vocabulary.load(folder)
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    scores = {}
    for beam in beams:
        started = time.perf_counter()
        name = f"{'int8' if int8 else 'fp32'} beam{beam}"
        hypotheses = translate(
            model, vocab, sources, settings, beam, workers, progress, name
        )
        bleu = BLEU()
        scores[f"beam{beam}"] = {
            "bleu": round(
                bleu.corpus_score(hypotheses, [references]).score, 2
            ),
            "signature": str(bleu.get_signature()),
            "sentences": len(pairs),
            "length_penalty": settings["length_penalty"]
            if beam > 1
            else None,
            "decode_s": round(time.perf_counter() - started, 1),
            "hypotheses": hypotheses,
        }
    return scores


# --- The command ----------------------------------------------------------------------------------

# DIR.unfinished-export-<random>: the folder an export writes, renamed to DIR when it is finished
UNFINISHED = ".unfinished-export-"
# DIR.replaced-export-<random>: an earlier export, moved aside while the new one takes its place
REPLACED = ".replaced-export-"
# what an export holds besides the files its manifest lists: the translations it scored
HYPOTHESES = re.compile(r"test2016\.(int8|fp32)\.beam\d+\.hyp\.en")
_EXPECTED_OUT = (
    "expected a new or empty folder, or an earlier export (replaced whole)"
)
_EXPECTED_RUN = (
    "expected a run folder written by python -m aiayn.train (config.json, "
    "checkpoint.pt) or the published model's folder (config.json, "
    "tokenizer.model, *-averaged-fp16.pt)"
)


class ExportInterrupted(Exception):
    """Ctrl-C stopped the command; the message says that ``--out`` is as it was."""


def is_export(manifest: Any) -> bool:
    """Whether a ``manifest.json`` (parsed) is an export's: ``"format": "aiayn-export/1"``.

    Exports written before the field existed are known by their ``"what"``.
    """
    if not isinstance(manifest, dict) or not isinstance(
        manifest.get("files"), dict
    ):
        return False
    what = str(manifest.get("what", ""))
    return manifest.get("format") == EXPORT_FORMAT or what.startswith(
        "the translator as ONNX graphs (aiayn.export)"
    )


def _read_manifest(folder: Path) -> Any:
    """``folder/manifest.json`` parsed, ``None`` when it is missing or not JSON."""
    try:
        return json.loads((folder / MANIFEST).read_text("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def _is_run_folder(folder: Path, names: list[str]) -> str:
    """What makes ``folder`` a folder of ``train`` or ``evaluate`` (``aiayn.runs``), ``""`` if nothing."""
    weights = [n for n in names if fnmatch.fnmatch(n, "*averaged*.pt")]
    found = [n for n in (CONFIG, CHECKPOINT) if n in names]
    if weights:
        return f"a model's folder (it has {', '.join(found + weights)})"
    if found:
        return f"a run folder (it has {', '.join(found)})"
    run = RunFolder(folder)
    try:
        run.manifest()  # refuses a manifest that is not a run's
    except RunFolderError:
        return ""
    if run.has_manifest():
        return "a folder of python -m aiayn.evaluate's results (its manifest.json is a run's)"
    return ""


def check_out(out: Path) -> str:
    """What ``--out`` is, before anything is loaded: ``"new"``, ``"empty"`` or ``"export"``.

    Raises ``ValueError`` naming what was found instead: a file, a link, a run folder or a folder
    of results (writing into them would replace their ``manifest.json``, after which ``train``
    would not resume the run and ``evaluate`` would not read it), an earlier export that holds
    files it did not write, or another folder that is not empty.
    """
    blocking = next(
        (p for p in out.parents if p.exists() and not p.is_dir()), None
    )
    if blocking is not None:
        raise ValueError(
            f"--out {out}: {blocking} is a file, not a folder; {_EXPECTED_OUT}"
        )
    if out.is_symlink():
        raise ValueError(
            f"--out {out} is a symbolic link, which the export would replace by "
            f"a folder; {_EXPECTED_OUT}, named by its own path"
        )
    if not out.exists():
        return "new"
    if not out.is_dir():
        raise ValueError(f"--out {out} is a file; {_EXPECTED_OUT}")
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return "empty"
    run = _is_run_folder(out, names)
    if run:
        raise ValueError(
            f"--out {out} is {run}, which an export never writes into (its "
            f"{MANIFEST} would stop python -m aiayn.train resuming a run and "
            f"python -m aiayn.evaluate reading it); {_EXPECTED_OUT}, e.g. "
            f"--out {out.parent / (out.name + '-onnx')}"
        )
    manifest = _read_manifest(out)
    if is_export(manifest):
        ours = {*manifest["files"], MANIFEST}
        foreign = [
            n for n in names if n not in ours and not HYPOTHESES.fullmatch(n)
        ]
        if foreign:
            raise ValueError(
                f"--out {out} is an earlier export, but it also holds "
                f"{shown(foreign)}, which the export did not write and "
                "replacing it would delete; move them out, or choose "
                "another --out"
            )
        return "export"
    raise ValueError(
        f"--out {out} is not empty ({shown(names)}) and is not an export "
        f"(no {MANIFEST} of python -m aiayn.export), so its files would be "
        f"overwritten; {_EXPECTED_OUT}"
    )


def check_run(run: str | None) -> tuple[str, Path]:
    """What RUN names, before anything is loaded: ``("run", folder)`` or ``("published", folder)``.

    A folder with a ``*averaged*.pt`` is the published model (or a release of a run); one with
    ``config.json`` and ``checkpoint.pt`` is a run folder. Anything else is refused by name.
    Without RUN: the published model's folder (``$AIAYN_MODEL``, else the user cache).
    """
    from .published import model_dir

    if run is None:
        return "published", model_dir()
    path = Path(run)
    if not run.strip():
        raise cli.UsageError(
            f"RUN must name a folder, got an empty string; {_EXPECTED_RUN}"
        )
    if not path.exists():
        raise FileNotFoundError(
            f"the run folder {path} does not exist; {_EXPECTED_RUN}"
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"the run folder {path} is a file; {_EXPECTED_RUN}"
        )
    if list(path.glob("*averaged*.pt")):  # as translation.load_run
        return "published", path
    if (path / CONFIG).is_file() and (path / CHECKPOINT).is_file():
        return "run", path
    if (path / CONFIG).is_file():
        raise RunFolderError(
            f"the run folder {path} has {CONFIG} but no {CHECKPOINT}: the "
            "run has not saved its first checkpoint (python -m aiayn.train "
            f"--out {path} goes on); {_EXPECTED_RUN}"
        )
    names = sorted(p.name for p in path.iterdir())
    holds = f"it holds {shown(names)}" if names else "it is empty"
    raise RunFolderError(
        f"{path} is neither a run folder nor the published model's folder "
        f"({holds}); {_EXPECTED_RUN}"
    )


def _check_modules(bleu: bool) -> None:
    """The packages of the ``export`` extra, before the model is loaded."""
    needed = ["onnx", "onnxscript", "onnxruntime", "sentencepiece"]
    needed += ["sacrebleu"] if bleu else []
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"python -m aiayn.export needs {', '.join(missing)}, which are not "
            "installed: pip install 'aiayn[export]' (or pip install "
            f"{' '.join(missing)})"
        )


def _load(kind: str, path: Path, default: bool):
    """``(config, tokenizer, model, source)`` of a run folder, or of the published model.

    ``source`` names the weights without a path of this machine: the run folder's name, its id
    and checkpoints, or the published weights' file name and SHA-256.
    """
    from .published import _weights_file, load_published
    from .translation import load_run

    if kind == "run":
        cfg, tokenizer, model, sources = load_run(path, "cpu")
        source = {"run": path.resolve().name, "checkpoints": sources}
        run_id = RunFolder(path).run_id()
        if run_id is not None:
            source["run_id"] = run_id
        return cfg, tokenizer, model, source
    published = load_published(None if default else path, download=default)
    weights = _weights_file(path)
    return (
        published.config,
        published.tokenizer,
        published.model,
        {"weights": weights.name, "sha256": _sha256(weights)},
    )


def _hold(folder: Path) -> int | None:
    """An open descriptor of ``folder`` holding an exclusive ``flock``: an export is writing it."""
    try:
        import fcntl
    except ImportError:  # not on Windows: leftovers are kept
        return None
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def remove_leftovers(out: Path) -> list[Path]:
    """Delete ``DIR.unfinished-export-*`` and ``DIR.replaced-export-*`` that no running export holds.

    A killed export (SIGKILL, a lost machine) leaves them beside DIR; another export that is
    still writing holds its folder's ``flock``, and its folder is kept.
    """
    try:
        import fcntl
    except ImportError:
        return []
    removed = []
    for kind in (UNFINISHED, REPLACED):
        for path in sorted(
            out.parent.glob(f"{glob.escape(out.name)}{kind}*")
        ):
            if path.is_symlink() or not path.is_dir():
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:  # not ours to read: left alone
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # an export is writing it
                continue
            else:
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            finally:
                os.close(fd)
    return removed


@contextlib.contextmanager
def staged(
    out: Path, log: Callable[[str], None] | None = None
) -> Iterator[Path]:
    """A new folder beside ``out`` to write into, renamed to ``out`` when the block succeeds.

    ``out`` is checked again at the end (``check_out``); an earlier export there is moved aside,
    replaced and then deleted, so that its files never mix with the new ones. On an error or
    Ctrl-C the new folder is deleted and ``out`` stays as it was.
    """
    say = log or (lambda line: None)
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in remove_leftovers(out):
        say(f"removed {path}, left by an export that was killed")
    tmp = out.parent / f"{out.name}{UNFINISHED}{secrets.token_hex(4)}"
    try:
        tmp.mkdir()
    except PermissionError as err:
        raise PermissionError(
            f"--out {out}: cannot create a folder in {out.parent} "
            f"({err.strerror}); choose a folder you can write to"
        ) from None
    fd = _hold(tmp)
    try:
        yield tmp
        kind = check_out(out)  # it may have changed since the start
        if kind == "empty":
            out.rmdir()
        if kind != "export":
            tmp.rename(out)
            return
        old = out.parent / f"{out.name}{REPLACED}{secrets.token_hex(4)}"
        out.rename(old)
        try:
            tmp.rename(out)
        except BaseException:
            old.rename(out)
            raise
        shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def _noting_ctrl_c() -> Iterator[list[int]]:
    """Note each Ctrl-C in the list it gives (then raise ``KeyboardInterrupt``, as Python does).

    ``torch.onnx.export`` can turn the ``KeyboardInterrupt`` into an error of its own; the note
    tells that it was a Ctrl-C all the same. Outside the main thread nothing is noted.
    """
    stopped: list[int] = []

    def note(signum, frame):
        stopped.append(signum)
        signal.default_int_handler(signum, frame)

    try:
        before = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield stopped
        return
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, before)


def _command_line(args: argparse.Namespace) -> str:
    """The command as the manifest records it: RUN and DIR instead of this machine's paths."""
    words = ["python", "-m", "aiayn.export"]
    words += [] if args.run is None else ["RUN"]
    words += ["--out", "DIR", "--bleu", args.bleu]
    words += [] if args.limit is None else ["--limit", str(args.limit)]
    return " ".join(words)


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.export",
        "Export a translator to ONNX (float32 and int8) for onnxruntime and "
        "the book's page, and score the files on test 2016.",
    )
    p.add_argument(
        "run",
        nargs="?",
        help="a run folder or a published model's folder "
        "(default: $AIAYN_MODEL, else the user cache)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="the folder to write: new, empty, or an earlier export "
        "(replaced whole)",
    )
    p.add_argument(
        "--bleu",
        choices=("none", "int8", "all"),
        default="int8",
        help="score which graphs on test 2016, greedy and beam "
        "(default int8: the files the page uses)",
    )
    p.add_argument(
        "--limit",
        type=cli.positive_int,
        default=None,
        help="score only the first N sentences",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (they show only on a terminal)",
    )
    return p


def _export(args: argparse.Namespace) -> int:
    """Check everything, then export and score into a staged folder, renamed to ``--out`` at the end."""
    from .data import load_multi30k

    if not args.out.strip():
        raise cli.UsageError(
            "--out must name a folder, got an empty string; "
            "e.g. --out runs/export"
        )
    if args.limit is not None and args.bleu == "none":
        raise cli.UsageError(
            f"--limit {args.limit} chooses the sentences to score, and "
            "--bleu none scores none; drop one of them"
        )
    out = Path(args.out)
    before = check_out(out)
    kind, run = check_run(args.run)
    if run.resolve() == out.resolve():
        raise cli.UsageError(
            f"--out {out} is the folder of the model it exports; "
            f"{_EXPECTED_OUT} elsewhere"
        )
    _check_modules(args.bleu != "none")
    kinds = {"none": (), "int8": (True,), "all": (True, False)}[args.bleu]
    pairs = load_multi30k("test2016")[: args.limit] if kinds else []
    progress = not args.no_progress

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        with _noting_ctrl_c() as stopped, staged(out, say) as tmp:
            say(f"loading the model from {run} ...")
            cfg, tokenizer, model, source = _load(
                kind, run, args.run is None
            )
            settings = {
                "beam": cfg.beam,
                "length_penalty": cfg.length_penalty,
                "max_len_a": cfg.max_len_a,
                "max_len_b": cfg.max_len_b,
                "max_len": cfg.max_len,
            }
            manifest = export(
                model, tokenizer, settings, tmp, source, progress, say
            )
            for int8 in kinds:
                name = "int8" if int8 else "fp32"
                say(
                    f"scoring the {name} graphs on {len(pairs)} sentences of "
                    f"test2016, beam 1 and {cfg.beam} ..."
                )
                scores = score_files(
                    tmp, pairs, int8, (1, cfg.beam), progress=progress
                )
                for key, entry in scores.items():
                    hypotheses = entry.pop("hypotheses")
                    atomic_write(
                        tmp / f"test2016.{name}.{key}.hyp.en",
                        ("\n".join(hypotheses) + "\n").encode(),
                    )
                    entry["command"] = _command_line(args)
                    manifest["bleu"][f"{name}.{key}"] = entry
                    say(
                        f"test2016 {name} {key}: BLEU {entry['bleu']} "
                        f"({entry['decode_s']} s)"
                    )
                atomic_write(
                    tmp / MANIFEST, json.dumps(manifest, indent=1).encode()
                )
    except BaseException as err:
        # the exporter may turn the KeyboardInterrupt into an error of its own
        if not (isinstance(err, KeyboardInterrupt) or stopped):
            raise
        state = "is as it was" if before != "new" else "was not created"
        raise ExportInterrupted(
            f"error: interrupted (Ctrl-C) before the export was finished: "
            f"{out} {state}"
        ) from None
    replaced = " (the earlier export replaced)" if before == "export" else ""
    say(
        f"exported to {out}{replaced}: the page downloads "
        f"{manifest['page_bytes'] / 1e6:.1f} MB"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), export and score; a failure is one ``error:`` line.

    A wrong argument or folder exits with status 2, Ctrl-C with 130, any other failure with 1.
    """
    return cli.run(
        _parser(), argv, _export, interrupted=(ExportInterrupted,)
    )


if __name__ == "__main__":
    raise SystemExit(main())
