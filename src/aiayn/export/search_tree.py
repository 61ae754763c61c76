"""The tree the page's beam search draws, recorded as it runs: ``translator.beam_search(...,
trace=SearchTree())``, mirrored by ``SearchTree`` in ``aiayn/web/translator.mjs``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..decoding.trace import keep


class SearchTree:
    """What ``beam_search(..., trace=SearchTree())`` did, as the tree the page draws.

    ``tree`` has the layout of ``aiayn.decoding.trace.BeamTrace``'s trees, for one sentence:
    ``{"nodes", "steps", "winner"}``, each node ``{"id", "parent", "step", "piece", "log_p",
    "score", "finished", "top", "attention"}``, each step ``{"kept", "pruned"}``. Where this
    search differs:

    - ``top`` holds the ``top`` most probable next pieces among the ids the step scored (the
      shortlist, when there is one), ``[piece, probability]``;
    - ``attention`` is the cross-attention of the decoder's last layer, averaged over heads, of the
      node's last position over the ``S`` source ids: the step's own weights, as the search ran it
      (``BeamTrace`` reruns each prefix), unrounded; ``None`` for a node never extended (finished,
      or at the output limit);
    - ``pruned``: the best candidates the search ranked and did not keep, up to K. The search ranks
      the K best of each beam, so this is the K best not kept among those, not among all K·V.

    ``log_p`` and ``score`` are the search's own float64 numbers.
    """

    def __init__(self, top: int = 5):
        self.top = top
        self.tree: dict[str, Any] = {
            "nodes": [],
            "steps": [],
            "winner": None,
        }

    def start(self, bos_id: int, beam: int) -> None:
        """The root, ``<bos>``, held by every beam (only beam 0 may grow)."""
        root = {"id": 0, "parent": None, "step": 0, "piece": bos_id}
        root |= {"log_p": 0.0, "score": 0.0, "finished": False}
        root |= {"top": [], "attention": None}
        self.tree = {"nodes": [root], "steps": [], "winner": None}
        self.beams: list[int | None] = [0] + [None] * (beam - 1)

    def grow(
        self,
        token_log_p: np.ndarray,
        cross: np.ndarray,
        targets: np.ndarray,
        finished: list[bool],
        candidates: list[tuple],
        eos_id: int,
    ) -> None:
        """One step: each live beam's next pieces and attention, then the K kept candidates.

        Args:
            token_log_p: ``(K, targets)`` the step's log P; ``cross`` ``(N, K, h, 1, S)``.
            finished: the beams finished before the step.
            candidates: ``beam_search``'s ``(score, log P, length, beam, token)``, best first.
        """
        nodes, K = self.tree["nodes"], len(self.beams)
        for k, node in enumerate(self.beams):
            if node is None or finished[k]:
                continue
            row = token_log_p[k]  # (targets,)
            best = np.argsort(-row, kind="stable")[: self.top]
            top = [[int(targets[j]), math.exp(float(row[j]))] for j in best]
            heads = cross[-1, k, :, -1].astype(np.float64)  # (h, S)
            attention = (heads.sum(axis=0) / heads.shape[0]).tolist()
            nodes[node] |= {"top": top, "attention": attention}
        kept = [
            keep(self.tree, self.beams[k], finished[k], token, float(total),
                 float(score), eos_id, attention=None)
            for score, total, _, k, token in candidates[:K]
        ]  # fmt: skip
        pruned = [
            {"parent": self.beams[k], "piece": token,
             "log_p": float(total), "score": float(score)}
            for score, total, _, k, token in candidates[K:]
            if self.beams[k] is not None and not finished[k]
            and score != -math.inf
        ][:K]  # fmt: skip
        self.tree["steps"].append({"kept": kept, "pruned": pruned})
        self.beams = kept

    def end(self, beam: int) -> None:
        """The search returned beam ``beam``: its node is the winner."""
        self.tree["winner"] = self.beams[beam]
