"""What a run records and tells: the ``History`` that ``fit`` returns, the ``FitState`` its hook hears.

``History`` holds one entry per optimizer step and one dict per evaluation; checkpoints store it,
so a resumed run's history is the whole run's. ``FitState`` is one event (a step, an epoch's end,
an evaluation, a save) and where training stood.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from torch import nn

from ..files import WrittenFile

__all__ = ["History", "FitState"]


@dataclass
class History:
    """What happened during ``fit``: one entry per optimizer step, and one dict per evaluation.

    Args:
        step: the step number (1-based, counting across epochs).
        epoch: the epoch of each step (0-based).
        loss: the training loss of each step.
        lr: the learning rate used by each step.
        tokens: target tokens in each step's batch.
        seconds: wall-clock time of each step.
        evals: ``{"step": ..., "epoch": ..., **metrics}`` for each evaluation.
    """

    step: list[int] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    evals: list[dict[str, float]] = field(default_factory=list)

    def state_dict(self) -> dict[str, list]:
        """The history as plain lists (stored in checkpoints)."""
        return {f.name: list(getattr(self, f.name)) for f in fields(self)}

    def record(
        self,
        step: int,
        epoch: int,
        loss: float,
        lr: float,
        tokens: int,
        seconds: float,
    ) -> None:
        """Append one step."""
        self.step.append(step)
        self.epoch.append(epoch)
        self.loss.append(loss)
        self.lr.append(lr)
        self.tokens.append(tokens)
        self.seconds.append(seconds)

    @classmethod
    def from_state_dict(cls, state: dict[str, list]) -> History:
        return cls(
            **{f.name: list(state.get(f.name, [])) for f in fields(cls)}
        )

    @property
    def tokens_per_second(self) -> float:
        """Mean training throughput over all recorded steps."""
        total = sum(self.seconds)
        return sum(self.tokens) / total if total > 0 else 0.0


@dataclass(frozen=True)
class FitState:
    """What ``fit`` tells its ``hook``: one event and where training stands.

    Args:
        event: ``"step"`` (after an optimizer step), ``"epoch_end"`` (an epoch's batches are done,
            before its evaluation), ``"eval"`` (after an evaluation; ``metrics`` holds it) or
            ``"saving"`` (a checkpoint is written but not yet renamed into place: ``saved`` holds
            its hash) and ``"checkpoint"`` (``saved`` is the file now in place).
        step: optimizer steps done (counting steps before a resume).
        epoch: the current epoch (0-based).
        batches_done: batches of this epoch done.
        loss, lr, tokens, seconds: of the last step (``"step"`` events).
        metrics: the evaluation's numbers (``"eval"`` events): ``val_loss``, ``val_ppl``,
            ``epoch_done`` and whatever ``eval_fn`` returned.
        saved: the checkpoint written (``"checkpoint"`` events).
        model: the model being trained.
    """

    event: str
    step: int
    epoch: int
    batches_done: int
    loss: float | None = None
    lr: float | None = None
    tokens: int | None = None
    seconds: float | None = None
    metrics: dict[str, Any] | None = None
    saved: WrittenFile | None = None
    model: nn.Module | None = None
