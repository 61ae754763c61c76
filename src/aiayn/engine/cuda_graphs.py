"""The model's training forward and backward passes replayed as CUDA graphs, one pair per batch shape.

A training step of the ``multi30k`` preset launches 1,326 ATen ops on the train command's fast
paths (``bench.count_step_ops`` on an H100), and on an H100-class GPU the host's launches, not the
arithmetic, set its time (25 ms a step on an H200, ``results/gpu_check.h200.json``). A CUDA graph
records the kernels of a pass once and launches all of them again with one call. It needs fixed
shapes and addresses, so ``GraphedShapes`` captures the model's forward and backward
(``torch.cuda.make_graphed_callables``) the first time a batch shape comes, and for every later
batch of that shape copies the batch into the graph's own input tensors and replays the pair.
The first batch of each shape costs three warm-up passes and the capture. An epoch's batch shapes
come again every epoch (``data.make_batches`` redraws only ties in length), so each is captured
once a run: 108 for ``multi30k`` as it is; ``TrainConfig.pad_to`` and ``pad_rows``
(``batches.PaddedPairs``) make them 28 with 8 and 32, at 31 % more padded positions a step.

All the graphs share one memory pool, so that memory does not grow with the shapes. That is safe
here because a step uses everything its graphs write before the next step replays another: the
forward's output (the logits) goes into the loss, the saved activations into the backward, the
gradients into Adam; a later graph may overwrite that memory, and each replay writes its own
inputs, activations and gradients afresh.

The loss, the clipping and Adam stay outside the graphs (fused Adam is a few kernels), so
``step.train_step`` is unchanged: it calls ``GraphedShapes`` as it calls the model.

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["GraphedShapes", "check_cuda_graphs"]

Capture = Callable[[nn.Module, tuple[torch.Tensor, ...]], Callable]


class _Forward(nn.Module):
    """The model's forward as a module of its own: one is captured per shape (capturing the model
    itself would replace its ``forward``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(*args)


class GraphedShapes(nn.Module):
    """``model``'s training passes, captured per batch shape and replayed; called as the model is.

    ``(src (B, S), tgt_in (B, T), src_mask (B, 1, 1, S), tgt_mask (B, 1, T, T)) -> logits (B, T, V)``.
    While the model is in eval mode it runs as it is. Dropout in a replayed graph draws from
    PyTorch's graph-safe generator: the same distribution as an eager step's, other numbers, and
    the warm-up passes of each capture draw too, so a resumed run is not the uninterrupted one
    to the last digit, as it is without graphs.

    Args:
        model: the model to train; the graphs update its parameters' gradients.
        capture: ``(module, sample_args) -> callable``; default
            ``torch.cuda.make_graphed_callables`` in the shared pool (the tests pass one that runs
            eagerly and checks its preconditions, to test the rest on a CPU).
    """

    def __init__(self, model: nn.Module, capture: Capture | None = None):
        super().__init__()
        self.model = model
        self.capture = capture or self._capture_on_gpu
        self.pool = None  # one memory pool for every shape's graphs
        self.graphed: dict[tuple[tuple[int, ...], ...], Callable] = {}

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor,
    ) -> torch.Tensor:
        args = (src, tgt_in, src_mask, tgt_mask)
        if not self.model.training:
            return self.model(*args)
        shape = tuple(tuple(a.shape) for a in args)
        if shape not in self.graphed:
            self.graphed[shape] = self.capture(_Forward(self.model), args)
        return self.graphed[shape](*args)  # (B, T, V)

    def _capture_on_gpu(
        self, module: nn.Module, args: tuple[torch.Tensor, ...]
    ) -> Callable:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        return torch.cuda.make_graphed_callables(
            module, args, pool=self.pool
        )


def check_cuda_graphs(device: torch.device, world: int) -> None:
    """Refuse to capture where CUDA graphs cannot work, naming what they need.

    ``TrainConfig`` refuses the rest: ``cuda_graphs`` with ``compile``.
    """
    if device.type != "cuda":
        raise ValueError(
            f"cuda_graphs: CUDA graphs need a CUDA device, got {device}"
        )
    if world > 1:
        raise ValueError(
            "cuda_graphs: one process only, got a torchrun world of "
            f"{world} (DDP reduces gradients in hooks the graphs would skip)"
        )
