"""The reference the page's key/value cache is held to: ``decoder.onnx`` over the whole prefix.

``aiayn.export.translator`` searches with ``OnnxModel``, whose step runs the decoder over the new
position only, with the keys and values of the earlier ones (``decoder_step.onnx``).
``PrefixModel`` offers the same ``encode``, ``start`` and ``step``, but its step reruns
``decoder.onnx`` over every position so far, as the page did before it had the cache: simple,
and slower by the length of the prefix. The same ``greedy`` and ``beam_search`` run over
either; ``tests/test_export.py`` holds their translations equal.

    rows  sentences or beams        S  source length        P  positions so far
    L  new positions        N  layers        h  heads        V  vocabulary
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .graphs import DECODER_OUTPUTS, ENCODER_OUTPUTS, HEAD_MASK, graph_file
from .onnx_model import session_options


@dataclass(frozen=True)
class Prefix:
    """What ``PrefixModel`` keeps between steps: ``memory (rows, S, d_model)``, ``src (rows, S)``,
    the ``prefix (rows, P)`` so far and the ids scored, ``targets (K,)``."""

    memory: np.ndarray
    src: np.ndarray
    prefix: np.ndarray
    targets: np.ndarray

    def rows(self, index: Sequence[int]) -> Prefix:
        """The rows ``index``, as ``onnx_model.Cache.rows``."""
        index = np.asarray(index)
        return Prefix(
            self.memory[index],
            self.src[index],
            self.prefix[index],
            self.targets,
        )


class PrefixModel:
    """``encoder`` and the whole-prefix ``decoder`` graph, behind ``OnnxModel``'s interface."""

    def __init__(
        self, folder: str | os.PathLike, int8: bool = True, threads: int = 1
    ):
        import onnxruntime as ort

        options = session_options(ort, threads)
        self.encoder, self.decoder = (
            ort.InferenceSession(
                str(Path(folder) / graph_file(name, int8)),
                options,
                providers=["CPUExecutionProvider"],
            )
            for name in ("encoder", "decoder")
        )
        inputs = {i.name: i.shape for i in self.encoder.get_inputs()}
        self.head_mask_shape = tuple(inputs[HEAD_MASK])

    def heads(self, head_mask: Any = None) -> np.ndarray:
        """All ones: ``decoder.onnx`` takes no head mask, so a mask is refused."""
        if head_mask is not None:
            raise ValueError(
                "PrefixModel runs every head: decoder.onnx, the reference, "
                "takes no head_mask (OnnxModel's step graph does)"
            )
        return np.ones(self.head_mask_shape, np.float32)

    def encode(
        self, src: np.ndarray, head_mask: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``src (rows, S)`` -> ``memory`` and the encoder's attention (every head)."""
        feed = {"src": src, HEAD_MASK: self.heads(head_mask)}
        return tuple(self.encoder.run(ENCODER_OUTPUTS, feed))

    def start(
        self,
        memory: np.ndarray,
        src: np.ndarray,
        targets: np.ndarray,
        head_mask: Any = None,
    ) -> Prefix:
        """No position yet: an empty prefix (``head_mask``: none, ``heads``)."""
        self.heads(head_mask)
        empty = np.zeros((src.shape[0], 0), np.int64)  # (rows, 0)
        return Prefix(memory, src, empty, targets)

    def step(self, state: Prefix, tokens: np.ndarray) -> tuple[Any, ...]:
        """As ``OnnxModel.step``, by running the decoder over the prefix and ``tokens (rows, L)``."""
        prefix = np.concatenate([state.prefix, tokens], 1)  # (rows, P + L)
        feed = {"memory": state.memory, "src": state.src, "prefix": prefix}
        log_probs, cross, self_attn = self.decoder.run(DECODER_OUTPUTS, feed)
        if len(state.targets) < log_probs.shape[1]:  # the targets' softmax
            log_probs = log_probs[:, state.targets]  # (rows, K)
            log_probs -= np.logaddexp.reduce(
                log_probs, axis=1, keepdims=True
            )
        L = tokens.shape[1]  # the rows of the new positions
        return (
            log_probs,  # (rows, K)
            Prefix(state.memory, state.src, prefix, state.targets),
            cross[:, :, :, -L:],  # (N, rows, h, L, S)
            self_attn[:, :, :, -L:],  # (N, rows, h, L, P + L)
        )
