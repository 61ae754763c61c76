"""The page's three graphs in onnxruntime: ``OnnxModel``, and ``Cache``, what a search keeps between steps.

``aiayn.export.translator`` searches with them; ``aiayn/web/translator.mjs`` has the same two classes
(``OnnxModel``, ``Cache``) and ``checkHeadMask``, the twin of ``check_head_mask``. A missing or damaged
graph is refused by name, and so is a graph exported before the head mask was one of its inputs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .graphs import (
    CROSS_KV_OUTPUTS,
    ENCODER_OUTPUTS,
    HEAD_MASK,
    PAGE_GRAPHS,
    STEP_OUTPUTS,
    graph_file,
)

__all__ = ["OnnxModel", "Cache", "check_head_mask", "session_options"]

AGAIN = "export the run again (python -m aiayn.export)"


class OnnxModel:
    """The page's three graphs in onnxruntime sessions, one thread unless told otherwise.

    ``encoder``, ``cross_kv`` and ``decoder_step`` (``aiayn.export.graphs``): the search keeps a
    ``Cache`` of keys and values, so that each step runs the decoder over one new position.
    """

    def __init__(
        self, folder: str | os.PathLike, int8: bool = True, threads: int = 1
    ):
        import onnxruntime as ort

        options = session_options(ort, threads)
        folder = Path(folder)
        self.encoder, self.cross_kv, self.decoder_step = (
            _session(ort, folder / graph_file(name, int8), options)
            for name in PAGE_GRAPHS
        )

        # (3, N, h), as the graphs declare it
        inputs = {i.name: i.shape for i in self.encoder.get_inputs()}
        if HEAD_MASK not in inputs:
            raise ValueError(
                f"{folder / graph_file('encoder', int8)} takes no {HEAD_MASK}: "
                f"it was exported before the page could switch heads off; "
                f"{AGAIN}"
            )
        self.head_mask_shape = tuple(inputs[HEAD_MASK])

    def heads(self, head_mask: Any = None) -> np.ndarray:
        """``head_mask`` checked (``check_head_mask``) as float32 ``(3, N, h)``; ``None``: all ones."""
        if head_mask is None:
            return np.ones(self.head_mask_shape, np.float32)
        return check_head_mask(head_mask, self.head_mask_shape)

    def encode(
        self, src: np.ndarray, head_mask: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``src (rows, S)`` and a ``head_mask (3, N, h)`` (checked by ``heads``; ``None``: every
        head) -> ``memory`` and the encoder's attention."""
        feed = {"src": src, HEAD_MASK: self.heads(head_mask)}
        return tuple(self.encoder.run(ENCODER_OUTPUTS, feed))

    def start(
        self,
        memory: np.ndarray,
        src: np.ndarray,
        targets: np.ndarray,
        head_mask: Any = None,
    ) -> Cache:
        """The cache before the first step: the cross-attention's keys and values, no position,
        the ids every step scores, ``targets (K,)`` (``scored``), and ``head_mask`` (``heads``)."""
        cross_k, cross_v = self.cross_kv.run(
            CROSS_KV_OUTPUTS, {"memory": memory}
        )  # (N, rows, h, S, d_k)
        N, rows, h, _, d_k = cross_k.shape
        empty = np.zeros((N, rows, h, 0, d_k), np.float32)  # P = 0
        mask = self.heads(head_mask)  # (3, N, h)
        return Cache(src, cross_k, cross_v, empty, empty, targets, mask)

    def step(self, cache: Cache, tokens: np.ndarray) -> tuple[Any, ...]:
        """``tokens (rows, L)`` after the cache's positions -> ``log_probs (rows, K)`` of the next
        token, column j for the id ``cache.targets[j]``, the cache L positions longer,
        ``cross_attention (N, rows, h, L, S)`` and ``decoder_attention (N, rows, h, L, P + L)``."""
        feed = {
            "tokens": tokens,
            "src": cache.src,
            "cross_k": cache.cross_k,
            "cross_v": cache.cross_v,
            "past_k": cache.past_k,
            "past_v": cache.past_v,
            "targets": cache.targets,
            HEAD_MASK: cache.heads,
        }
        log_probs, k, v, cross, self_attn = self.decoder_step.run(
            STEP_OUTPUTS, feed
        )
        grown = Cache(
            cache.src, cache.cross_k, cache.cross_v, k, v, cache.targets,
            cache.heads,
        )  # fmt: skip
        return log_probs, grown, cross, self_attn


def session_options(ort, threads: int) -> Any:
    """onnxruntime's options for the page's graphs: ``threads`` threads, and int8 products summed in 32 bits.

    On an x86 CPU without VNNI (AVX2 or AVX-512 alone, as this book's AMD EPYC build machine), onnxruntime
    multiplies uint8 activations by int8 weights with VPMADDUBSW, which adds pairs of products into 16 bits
    and clips what does not fit; ``session.x64quantprecision`` makes it sum without clipping, as VNNI and the
    page's WebAssembly build do. Without it, on that machine, the int8 log-probabilities of a step moved by
    up to 0.03 from the page's, enough to swap two near-equal beams; with it, most steps were the page's to
    the last bit.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.x64quantprecision", "1")
    return options


def _session(ort, path: Path, options) -> Any:
    """An onnxruntime session of the graph in ``path``; a missing or damaged one is named."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the page's graphs are "
            f"{', '.join(graph_file(n, True) for n in PAGE_GRAPHS)} (and "
            f"the float32 ones without .int8); {AGAIN}"
        )
    try:
        return ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
    except Exception as err:  # onnxruntime's Fail, InvalidProtobuf, ...
        why = " ".join(str(err).split())[:200]
        raise ValueError(
            f"{path} cannot be read as an ONNX graph ({why}): it is "
            f"truncated or damaged; {AGAIN}"
        ) from None


@dataclass(frozen=True)
class Cache:
    """What the decoder keeps between steps, for each row (a sentence, or a beam of one).

    ``src (rows, S)``; ``cross_k``, ``cross_v (N, rows, h, S, d_k)``, computed once from the
    memory; ``past_k``, ``past_v (N, rows, h, P, d_k)``, the self-attention keys and values
    of the P positions decoded so far; ``targets (K,)``, the ids each step scores (all rows);
    ``heads (3, N, h)``, the head mask each step reads (all rows).
    """

    src: np.ndarray
    cross_k: np.ndarray
    cross_v: np.ndarray
    past_k: np.ndarray
    past_v: np.ndarray
    targets: np.ndarray
    heads: np.ndarray

    def rows(self, index: Sequence[int]) -> Cache:
        """The cache of rows ``index`` (repeated or reordered): beam search keeps its beams'."""
        index = np.asarray(index)
        return Cache(
            self.src[index],
            *(t[:, index] for t in (self.cross_k, self.cross_v)),
            *(t[:, index] for t in (self.past_k, self.past_v)),
            self.targets,
            self.heads,
        )


def check_head_mask(mask: Any, shape: Sequence[int]) -> np.ndarray:
    """``mask`` as float32 ``shape`` (``(3, N, h)``) if it holds only 0 and 1, else a ``ValueError``.

    ``aiayn.attention.check_head_mask`` for the graphs: a numpy array, a tensor or nested lists of
    numbers (the page's grid); anything else, another shape, a value that is not finite or neither
    0 nor 1 is refused with what was expected.
    """
    want = f"{_shape(shape)} numbers 0 and 1"
    try:
        values = np.asarray(mask)
    except (TypeError, ValueError):  # ragged lists
        values = np.asarray(None)
    if values.dtype == object or values.dtype.kind not in "iuf":
        raise ValueError(
            f"head_mask: expected {want}, got {type(mask).__name__} "
            f"{str(mask)[:40]}"
        )
    if values.shape != tuple(shape):
        raise ValueError(
            f"head_mask: expected {want}, got shape {_shape(values.shape)}"
        )
    if not np.isfinite(values).all():
        raise ValueError(
            f"head_mask: expected {want}, got a value that is not finite"
        )
    other = values[(values != 0) & (values != 1)]
    if other.size:
        raise ValueError(
            f"head_mask: expected {want}, got the value {other[0]:g}"
        )
    return values.astype(np.float32)


def _shape(shape: Sequence[int]) -> str:
    """``(3, 3, 8)``, ``(3,)`` and ``()`` written the same in Python and JavaScript."""
    return f"({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''})"
