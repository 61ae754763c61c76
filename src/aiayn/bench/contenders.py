"""Who races? Our model, explicit to compiled, and ``nn.Transformer``, each from the same weights.

Every contender runs the same training loop (``step.train_step``: autocast on CUDA, Adam,
clipping) on the same batches, from the same weights, with the same dropout draws:

* ``ours (explicit)``: ``aiayn.model.Transformer`` computing softmax(QKᵀ/√d_k)V step by step,
  the LayerNorm written out, as the chapters explain it;
* ``ours (fused)``: the same model on ``F.scaled_dot_product_attention`` (``set_fused``), as the
  ``multi30k`` preset trains;
* ``ours (set_fast)``: every fast path (``engine.switch.set_fast``: fused attention, packed q/k/v,
  ``F.layer_norm``, masks prepared once);
* ``ours (set_fast, compiled)``: that model under ``torch.compile(dynamic=True)``;
* ``nn.Transformer``: PyTorch's stacks between the same embeddings, positional encoding and tied
  generator (``TorchTransformer``; the masks are the same masks in PyTorch's convention), and
  ``nn.Transformer (compiled)``, compiled the same way.

``CONTENDERS`` (the default of ``run_bench``) are the first two and ``nn.Transformer``'s eager run;
``ALL_CONTENDERS`` (the command's default) adds ``set_fast`` and the compiled ones.

``make_contender`` makes each from the same weights; ``Trainer`` holds its training state and takes
its steps.

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..attention import set_fused
from ..compare import to_torch_transformer, torch_masks
from ..data.multi30k import PAD
from ..engine.switch import set_fast
from ..loss import LabelSmoothingLoss
from ..model import Transformer
from ..schedule import make_optimizer
from ..training.batches import Batch
from ..training.step import make_grad_scaler, train_step

__all__ = [
    "CONTENDERS",
    "ALL_CONTENDERS",
    "TorchTransformer",
    "make_contender",
    "Trainer",
]

CONTENDERS = ("ours (explicit)", "ours (fused)", "nn.Transformer")
ALL_CONTENDERS = (
    "ours (explicit)",
    "ours (fused)",
    "ours (set_fast)",
    "ours (set_fast, compiled)",
    "nn.Transformer",
    "nn.Transformer (compiled)",
)


class TorchTransformer(nn.Module):
    """``nn.Transformer`` between copies of ``model``'s embeddings, positional encoding and generator.

    It starts from a copy of all of ``model``'s weights (``compare.to_torch_transformer``, without the final
    LayerNorms that ``nn.Transformer`` adds in post-norm mode), so both have the same parameter count and,
    without dropout, the same outputs. Called like ``Transformer``; the masks are rebuilt from the ids
    in PyTorch's convention (``compare.torch_masks``), so the ``src_mask``/``tgt_mask`` given are ignored.

    Args:
        model: an ``aiayn`` ``Transformer`` with ``d_k = d_v = d_model / h``.
    """

    def __init__(self, model: Transformer):
        super().__init__()
        self.config = model.config
        # deepcopy keeps shared (tied) parameters shared
        ours = copy.deepcopy(model)
        self.src_embed, self.tgt_embed, self.generator = (
            ours.src_embed,
            ours.tgt_embed,
            ours.generator,
        )
        self.transformer = to_torch_transformer(model).train()
        # to_torch_transformer builds with dropout 0
        for m in self.transformer.modules():
            if isinstance(m, nn.Dropout):
                m.p = self.config.dropout
            elif isinstance(m, nn.MultiheadAttention):
                m.dropout = self.config.dropout

    def forward(
        self,
        src: torch.Tensor,
        tgt: torch.Tensor,
        src_mask: torch.Tensor | None = None,
        tgt_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``(B, S)`` source and ``(B, T)`` decoder input ids to ``(B, T, V)`` logits."""
        masks = torch_masks(src, tgt, self.config.pad_id)
        src_x = self.src_embed(src)  # (B, S, d_model)
        tgt_x = self.tgt_embed(tgt)  # (B, T, d_model)
        out = self.transformer(src_x, tgt_x, **masks)  # (B, T, d_model)
        return self.generator(out)  # (B, T, V)


class Trainer:
    """One contender's training state: its model, Adam, gradient scaler and loss.

    ``trainer(batch)`` takes one step: ``step.train_step``, the step ``fit`` takes, without its
    per-step finiteness check (a device synchronisation that ``fit`` pays and a benchmark should
    not).
    """

    def __init__(
        self,
        name: str,
        model: nn.Module,
        amp: torch.dtype | None,
        device: torch.device,
    ):
        self.name, self.model, self.amp = name, model.train(), amp
        # fused Adam on CUDA; a constant rate is enough
        self.optimizer = make_optimizer(model, lr=1e-4)
        self.scaler = make_grad_scaler(amp, device)
        self.loss_fn = LabelSmoothingLoss(0.1, ignore_index=PAD)

    def __call__(self, batch: Batch) -> torch.Tensor:
        return train_step(self.model, batch, self.optimizer, self.loss_fn, clip_norm=1.0,
                          amp_dtype=self.amp, check_finite=False, scaler=self.scaler)  # fmt: skip


def make_contender(name: str, base: Transformer, backend: str) -> nn.Module:
    """A fresh copy of ``base`` as contender ``name`` (on the CPU)."""
    if name.startswith("nn.Transformer"):
        model = TorchTransformer(base)
    else:
        model = copy.deepcopy(base)
        set_fused(model, name == "ours (fused)")
        if "set_fast" in name:
            set_fast(model)
    return model
