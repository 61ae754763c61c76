"""The search the page runs, in Python: ``aiayn/web/translator.mjs`` mirrors it function by function.

The page reads the files of an export (``aiayn.export.graphs``) and runs them with onnxruntime:
``OnnxModel`` holds the three graphs it downloads, ``Cache`` the keys and values a search keeps
between steps (both in ``onnx_model``), ``Vocabulary``, ``bpe_encode``, ``source_ids`` and ``detokenize`` are its
tokenizer, ``greedy``, ``beam_search`` and ``sample`` its search, ``SearchTree``
(``search_tree``) what a beam search did (the tree the page draws), ``attention`` the weights it draws.
The BLEU of the files (the manifest's, the head grid's) is ``aiayn.export.scores``'s. Each
function has a twin of the same name in translator.mjs, camelCase there (``beam_search`` is
``beamSearch``).

The head mask. The encoder and the step graph read a ``head_mask (3, N, h)`` of 0 and 1
(``aiayn.model.set_head_mask``'s layout); every search takes one (``None``: all ones, every head),
checked by ``check_head_mask`` and kept in the ``Cache`` so that each step reads the same.

The cache. A step runs ``decoder_step.onnx`` over the one new token, with the self-attention keys
and values of the tokens before it and the cross-attention ones of the source (computed once,
``cross_kv.onnx``), instead of the whole prefix again. ``aiayn.export.prefix.PrefixModel`` is the
whole-prefix decoder behind the same interface; the tests hold the translations of the two equal.

The shortlist. With the export's ``shortlist.json`` (``aiayn.export.shortlist``), greedy and beam search
score only the ids of the sentence's shortlist at each step (``targets``); sampling draws from every
id, as ``decoding.sample`` does.

A damaged file of the export is refused by name (``Vocabulary.load``, ``load_settings``,
``load_shortlist``, ``OnnxModel``), and so are a shortlist id outside the vocabulary (a negative
one would make the step graph score another id) and a shortlist with no id besides ``<eos>``
(every translation would be ``""``).

The tests hold Python and JavaScript equal token for token on the float32 files. On the int8 files they agree on
about 49 sentences in 50: onnxruntime's x86 kernels fuse the int8 products and add in another order
than its WebAssembly build, and activations quantized on the fly turn such differences into rounding
steps. Both are as far from float32; the manifest's BLEU is the Python one.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..decoding.search import check_sampling, sampling_probs
from ..decoding.seeded import Mulberry32, draw
from ..decoding.translate import is_blank, normalise
from .graphs import SETTINGS_JSON, TOKENIZER_JSON, _bar
from .onnx_model import AGAIN, Cache, OnnxModel, check_head_mask  # noqa: F401 (the page's API, in one place)
from .search_tree import SearchTree  # beam_search's trace=
from .shortlist import FILE as SHORTLIST_JSON
from .shortlist import FORMAT as SHORTLIST_FORMAT
from .shortlist import targets as shortlist_targets

BOUNDARY = "\u2581"  # "▁", sentencepiece's word boundary


def _read_json(path: Path) -> Any:
    """The JSON in ``path``; a damaged file is refused by name (a missing one: ``FileNotFoundError``)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} cannot be read as JSON ({err}): it is truncated or "
            f"damaged; {AGAIN}"
        ) from None


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
        """``folder``'s ``tokenizer.json``; a damaged one is refused by name."""
        path = Path(folder) / TOKENIZER_JSON
        record = _read_json(path)
        try:
            vocab = cls(record)
            V = len(vocab.pieces)
            for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
                if not (
                    isinstance(record[name], int) and 0 <= record[name] < V
                ):
                    raise ValueError(
                        f"{name} {record[name]!r} is not in [0, {V})"
                    )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            why = f"no {err}" if isinstance(err, KeyError) else str(err)
            raise ValueError(
                f"{path} is not a tokenizer record of aiayn.export.graphs: "
                "expected pieces, types, pad_id, bos_id, eos_id, unk_id and "
                f"add_dummy_prefix ({why}); {AGAIN}"
            ) from None
        return vocab


def load_settings(folder: str | os.PathLike) -> dict[str, Any]:
    """``folder``'s ``translator.json``: the run's decoding settings; a damaged one is refused by name."""
    path = Path(folder) / SETTINGS_JSON
    settings = _read_json(path)
    wanted = ("beam", "length_penalty", "max_len_a", "max_len_b", "max_len")
    missing = [
        k
        for k in wanted
        if not isinstance(settings, dict) or k not in settings
    ]
    if missing:
        raise ValueError(
            f"{path} holds no {', '.join(missing)}: expected the settings "
            f"{', '.join(wanted)}; {AGAIN}"
        )
    return settings


def load_shortlist(
    folder: str | os.PathLike, vocab: Vocabulary | None = None
) -> dict[str, Any] | None:
    """``folder``'s ``shortlist.json`` (``aiayn.export.shortlist``), checked; ``None`` when it has none.

    Every id must be one of the vocabulary's (a negative id would make the step graph score
    another), and the record must offer some id besides ``<eos>`` (else every translation
    would be ``""``); a file that breaks either rule is refused by name.

    Args:
        folder: an export.
        vocab: its ``Vocabulary`` (default: read from ``folder``).
    """
    path = Path(folder) / SHORTLIST_JSON
    if not path.exists():
        return None
    record = _read_json(path)
    vocab = Vocabulary.load(folder) if vocab is None else vocab
    try:
        check_shortlist(record, vocab)
    except ValueError as err:
        raise ValueError(f"{path}: {err}; {AGAIN}") from None
    return record


def check_shortlist(record: Any, vocab: Vocabulary) -> None:
    """Raise a ``ValueError`` unless ``record`` is a shortlist of ``vocab``'s ids that offers some
    id besides ``<eos>``."""
    V = len(vocab.pieces)
    if (
        not isinstance(record, dict)
        or record.get("format") != SHORTLIST_FORMAT
    ):
        got = record.get("format") if isinstance(record, dict) else record
        raise ValueError(
            f"expected a shortlist of format {SHORTLIST_FORMAT!r}, got "
            f"{str(got)[:60]!r}"
        )
    frequent, pieces = record.get("frequent"), record.get("pieces")
    if not isinstance(frequent, list) or not isinstance(pieces, dict):
        raise ValueError(
            "expected 'frequent', a list of ids, and 'pieces', an object of "
            f"id lists, got {type(frequent).__name__} and "
            f"{type(pieces).__name__}"
        )
    lists = [("frequent", frequent)]
    lists += [(f"pieces[{k!r}]", ids) for k, ids in pieces.items()]
    offered = False
    for where, ids in lists:
        if not isinstance(ids, list):
            raise ValueError(
                f"{where} is {type(ids).__name__}: expected a list of ids"
            )
        bad = [i for i in ids if not _is_id(i, V)]
        if bad:
            raise ValueError(
                f"{where} holds {str(bad[:3])[:60]}: expected token ids in "
                f"[0, {V})"
            )
        offered = offered or any(i != vocab.eos_id for i in ids)
    if not offered:
        raise ValueError(
            "the shortlist is empty: it offers no id besides <eos>, so every "
            "translation would be ''"
        )


def _is_id(i: object, V: int) -> bool:
    """An integer in [0, V) (numpy's too), not a bool."""
    is_int = isinstance(i, numbers.Integral) and not isinstance(i, bool)
    return is_int and 0 <= i < V


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

    As ``aiayn.decoding.translate.source_ids``: the text is read as ``normalise`` gives it (NFKC,
    whitespace collapsed and trimmed); a blank one (``is_blank``) or one with no known piece gives ``None``; a
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


def scored(vocab: Vocabulary, targets: Sequence[int] | None) -> np.ndarray:
    """The ids a step scores: ``targets`` (a shortlist, sorted), or every id.

    ``targets`` must hold ids of the vocabulary, and some id besides ``<eos>``: a negative id
    would make the step graph score another one (counted from the end), and ``<eos>`` alone
    could only give ``""``.
    """
    V = len(vocab.pieces)
    if targets is None:
        return np.arange(V, dtype=np.int64)
    bad = [i for i in targets if not _is_id(i, V)]
    if bad:
        raise ValueError(
            f"targets: expected token ids in [0, {V}), got {bad[:3]}"
        )
    if all(i == vocab.eos_id for i in targets):
        raise ValueError(
            f"targets: expected some id besides <eos> ({vocab.eos_id}), got "
            f"{list(targets)}: the shortlist is empty, so the translation "
            "would be ''"
        )
    return np.array(targets, dtype=np.int64)


def greedy(
    model: OnnxModel,
    vocab: Vocabulary,
    src_ids: list[int],
    limit: int,
    targets: Sequence[int] | None = None,
    head_mask: Any = None,
) -> list[int]:
    """The most probable token at every step: ``<bos>`` first, ``<eos>`` last (unless cut at ``limit``).

    ``targets``: the ids to score (a shortlist), else all. ``head_mask``: ``(3, N, h)`` of 0 and
    1, the heads switched off (at 0); ``None``: every head."""
    src = np.array([src_ids], dtype=np.int64)  # (1, S)
    memory, _ = model.encode(src, head_mask)
    cache = model.start(memory, src, scored(vocab, targets), head_mask)
    ys = [vocab.bos_id]
    while len(ys) < limit:
        last = np.array([ys[-1:]], dtype=np.int64)  # (1, 1)
        log_probs, cache = model.step(cache, last)[:2]
        best = np.argmax(log_probs[0])  # the first of equal maxima
        token = int(cache.targets[best])
        ys.append(token)
        if token == vocab.eos_id:
            break
    return ys


def sample(
    model: OnnxModel,
    vocab: Vocabulary,
    src_ids: list[int],
    limit: int,
    sampling: dict[str, Any],
    on_step: Callable[[int, np.ndarray], None] | None = None,
    head_mask: Any = None,
) -> list[int]:
    """Draw every token as ``aiayn.decoding.search.sample(..., seed=)`` does; ``<bos>`` first.

    Args:
        sampling: ``{"temperature", "top_k", "top_p", "seed"}``; ``top_k`` and ``top_p``
            may be ``None`` (keep all).
        on_step: told each token drawn and the ``(V,)`` probabilities it was drawn from.
        head_mask: as ``greedy``'s.

    Every id can be drawn: no shortlist, so that a seed draws what ``decoding.sample`` draws.
    """
    temperature, top_k = sampling["temperature"], sampling["top_k"]
    top_p = sampling["top_p"]
    check_sampling(temperature, top_k, top_p)
    random = Mulberry32(sampling["seed"])
    src = np.array([src_ids], dtype=np.int64)  # (1, S)
    memory, _ = model.encode(src, head_mask)
    cache = model.start(memory, src, scored(vocab, None), head_mask)
    ys = [vocab.bos_id]
    while len(ys) < limit:
        last = np.array([ys[-1:]], dtype=np.int64)  # (1, 1)
        log_probs, cache = model.step(cache, last)[:2]
        logits = torch.from_numpy(log_probs)  # (1, V)
        probs = sampling_probs(logits, temperature, top_k, top_p)  # (1, V)
        token = int(draw(probs, random)[0])
        if on_step is not None:
            on_step(token, probs[0].numpy())
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
    targets: Sequence[int] | None = None,
    trace: SearchTree | None = None,
    head_mask: Any = None,
) -> list[int]:
    """``aiayn.decoding.search.beam_search`` for one sentence: K prefixes ranked by log P / lp.

    A beam that wrote ``<eos>`` keeps its score and competes with the live ones; the search ends
    when every beam has finished or the prefixes reach ``limit`` columns. Sums are in float64.
    ``targets``: the ids to score (a shortlist), else all. ``trace``: a ``SearchTree`` that
    records what the search did (the output is the same with or without one). ``head_mask``: as
    ``greedy``'s.
    """
    src = np.array([src_ids], dtype=np.int64)  # (1, S)
    memory, _ = model.encode(src, head_mask)
    cache = model.start(memory, src, scored(vocab, targets), head_mask)
    cache = cache.rows([0] * beam)  # K rows
    beams = [[vocab.bos_id] for _ in range(beam)]
    log_p = [0.0] + [-math.inf] * (
        beam - 1
    )  # only the first may expand at first
    lengths = [0] * beam
    finished = [limit <= 1] * beam
    if trace is not None:
        trace.start(vocab.bos_id, beam)
    while not all(finished):
        last = np.array([b[-1:] for b in beams], dtype=np.int64)  # (K, 1)
        token_log_p, cache, cross = model.step(cache, last)[:3]
        candidates = []  # (score, log P, length, beam, token)
        for k in range(beam):
            if finished[k]:  # one continuation: padding, which costs nothing
                score = log_p[k] / length_penalty(lengths[k], alpha)
                candidates.append(
                    (score, log_p[k], lengths[k], k, vocab.pad_id)
                )
                continue
            total = log_p[k] + token_log_p[k].astype(np.float64)  # (K,)
            scores = total / length_penalty(lengths[k] + 1, alpha)
            for j in np.argsort(-scores, kind="stable")[:beam]:
                token = int(cache.targets[j])
                candidates.append(
                    (scores[j], total[j], lengths[k] + 1, k, token)
                )
        candidates.sort(
            key=lambda c: -c[0]
        )  # stable: equal scores keep beam order
        chosen = candidates[:beam]
        if trace is not None:
            trace.grow(token_log_p, cross, cache.targets, finished, candidates,
                       vocab.eos_id)  # fmt: skip
        cache = cache.rows([k for _, _, _, k, _ in chosen])
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
    if trace is not None:
        trace.end(scores.index(max(scores)))
    while best[-1] == vocab.pad_id:
        best.pop()
    return best


def attention(
    model: OnnxModel,
    src_ids: list[int],
    ys: list[int],
    head_mask: Any = None,
) -> dict[str, np.ndarray]:
    """The attention of a translation ``ys`` (``<bos>`` first), re-read with teacher forcing
    (``head_mask``: as ``greedy``'s).

    Returns ``{"encoder": (N, h, S, S), "cross": (N, h, T, S), "decoder_self": (N, h, T, T)}``
    with T = ``len(ys) - 1``: row t is the step that wrote ``ys[t + 1]``.
    """
    src = np.array([src_ids], dtype=np.int64)
    memory, encoder = model.encode(src, head_mask)
    unread = np.zeros(1, dtype=np.int64)  # log_probs unread: one id scored
    cache = model.start(memory, src, unread, head_mask)
    prefix = np.array([ys[:-1]], dtype=np.int64)  # (1, T): all at once
    _, _, cross, self_attn = model.step(cache, prefix)
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
    shortlist: dict[str, Any] | None = None,
    trace: SearchTree | None = None,
    head_mask: Any = None,
) -> list[int]:
    """Greedy (``beam=1``) or beam search with the run's settings; ``<bos>`` first.

    ``shortlist``: ``aiayn.export.shortlist``'s record; each step scores the sentence's targets only.
    ``trace``: a ``SearchTree`` that a beam search fills (greedy leaves it as it is). ``head_mask``:
    as ``greedy``'s."""
    beam = settings["beam"] if beam is None else beam
    limit = output_limit(len(src_ids), settings)
    targets = None
    if shortlist is not None:
        targets = shortlist_targets(shortlist, src_ids, vocab.eos_id)
    if beam == 1:
        return greedy(model, vocab, src_ids, limit, targets, head_mask)
    return beam_search(
        model, vocab, src_ids, limit, beam, settings["length_penalty"],
        targets, trace, head_mask,
    )  # fmt: skip


def translate(
    model: OnnxModel,
    vocab: Vocabulary,
    sentences: Sequence[str],
    settings: dict[str, Any],
    beam: int | None = None,
    workers: int = 1,
    progress: bool = False,
    desc: str = "translate",
    shortlist: dict[str, Any] | None = None,
    head_mask: Any = None,
) -> list[str]:
    """Translate ``sentences`` one by one (``workers`` at a time); a sentence with no known piece gives ``""``.

    ``progress``: a bar over the sentences, named ``desc``. ``shortlist`` and ``head_mask``: as
    ``translate_ids``.
    """
    from concurrent.futures import ThreadPoolExecutor

    head_mask = model.heads(head_mask)  # refused before any sentence

    def one(text: str) -> str:
        ids = source_ids(vocab, text, settings["max_len"])
        if ids is None:
            return ""
        ys = translate_ids(
            model, vocab, ids, settings, beam, shortlist, None, head_mask
        )
        return detokenize(vocab, ys)

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
