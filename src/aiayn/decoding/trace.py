"""Beam search as a tree: ``BeamTrace`` records every hypothesis a beam search kept, and the ones it pruned.

    B  batch        K  beam size        V  target vocabulary size        S  source length

Pass one to the search, ``beam_search(..., trace=BeamTrace())``; the output is unchanged, and
afterwards ``trace.trees`` holds one tree per sentence, in input order. Both searches fill it
(``prune=True``, the default, and the reference ``prune=False``) from their own tensors, so the
tree is what the search did: the winner's pieces are the output's tokens and its score is the
output's score, bit for bit.

A tree is a dict:

- ``nodes``: node ``i`` is ``nodes[i]``, the hypothesis of ``step`` generated pieces that ends in
  ``piece`` (an id), grown from node ``parent``. Node 0 is ``<bos>`` (step 0, parent ``None``).
  ``log_p`` is its cumulative log-probability, ``score`` that divided by the GNMT length
  penalty of its length (what the search ranked by), ``finished`` whether it ends in ``<eos>``.
  ``top`` holds the ``top`` most probable next pieces as ``[piece, probability]`` pairs (empty for
  a finished node and for one the search never extended), and with ``BeamTrace(attention=True)``
  ``attention`` holds the cross-attention of the decoder's last layer, averaged over heads, of
  the node's last position over the source (``S`` weights, what the model looked at to choose
  the next piece), to ``digits`` decimals; ``None`` for a finished node. It is computed after the
  search, by running each prefix again on the explicit attention path (the search's fused and
  cached attention keeps no weights); the same model, so the same weights up to float rounding.
- ``steps``: entry ``t - 1`` is step ``t``: ``kept``, the node of each of the K beams after the step
  (a finished node, or one at its sentence's ``max_len``, stays in its beam with its score until
  a better hypothesis pushes it out, so a node may appear at several steps), and ``pruned``,
  the best candidates of the step that were not kept, up to ``pruned`` of them:
  ``{"parent", "piece", "log_p", "score"}``. The finished beams' one continuation (padding) is
  not listed. A beam whose log P is -inf (at the first step, when
  fewer than K candidates are possible) holds ``None``.
- ``winner``: the node the search returned.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .common import gnmt_length_penalty

__all__ = ["BeamTrace", "path", "readable"]


class BeamTrace:
    """Collects the tree of each sentence a beam search decodes.

    Args:
        attention: also keep each node's cross-attention over the source (see the module).
        pruned: how many pruned candidates to keep per step and sentence (``None``: K).
        top: how many most probable next pieces to keep per node.
        digits: decimals of the stored attention weights.
    """

    def __init__(
        self,
        attention: bool = False,
        pruned: int | None = None,
        top: int = 5,
        digits: int = 3,
    ) -> None:
        self.attention, self.pruned, self.top = attention, pruned, top
        self.digits = digits
        self.trees: list[dict] = []

    # --- called by the searches ------------------------------------------------------------------

    def start(self, B: int, K: int, alpha: float, bos_id: int, eos_id: int):
        """A root per sentence; every beam holds it (only beam 0 may grow)."""
        self.K, self.alpha, self.eos_id = K, alpha, eos_id
        root = {"id": 0, "parent": None, "step": 0, "piece": bos_id}
        root |= {"log_p": 0.0, "score": 0.0, "finished": False, "top": []}
        self.trees = [
            {"nodes": [dict(root)], "steps": [], "winner": None}
            for _ in range(B)
        ]
        # the node each beam of each sentence holds
        self._beams = [[0] + [None] * (K - 1) for _ in range(B)]

    def step(
        self,
        live: torch.Tensor,
        done: torch.Tensor,
        old_log_p: torch.Tensor,
        token_log_p: torch.Tensor,
        cand_score: torch.Tensor,
        kept_score: torch.Tensor,
        best: torch.Tensor,
        log_p: torch.Tensor,
    ) -> None:
        """Record one step of the sentences ``live`` ``(B,)``.

        Args:
            done: ``(B, K)`` the beams finished before the step (``<eos>`` or the limit): they
                grow by padding alone.
            old_log_p: ``(B, K)`` log P of the beams before the step.
            token_log_p: ``(B, K, V)`` log P of each next piece.
            cand_score: ``(B, K, V)`` each candidate's score.
            kept_score, best: ``(B, K)`` the kept candidates' scores and flat indices in K·V.
            log_p: ``(B, K)`` log P of the kept candidates, as the search summed it.
        """
        B, K, V = token_log_p.shape
        n_pruned = K if self.pruned is None else self.pruned
        top = token_log_p.topk(min(self.top, V), dim=-1)  # (B, K, top)
        wide = min(K + n_pruned, K * V)
        ranked = cand_score.view(B, K * V).topk(wide, dim=-1)  # (B, wide)
        # (B, wide): their log P, summed in float32 as the search sums it
        ranked_lp = token_log_p.view(B, K * V).gather(1, ranked.indices)
        ranked_lp = old_log_p.gather(1, ranked.indices // V) + ranked_lp
        kept = zip(
            best.tolist(), kept_score.tolist(), log_p.tolist(), strict=True
        )
        candidates = zip(
            ranked.indices.tolist(),
            ranked.values.tolist(),
            ranked_lp.tolist(),
            strict=True,
        )
        nexts = zip(
            top.indices.tolist(), top.values.exp().tolist(), strict=True
        )
        rows = zip(
            live.tolist(),
            done.tolist(),
            kept,
            candidates,
            nexts,
            strict=True,
        )
        for s, done_s, kept_s, candidates_s, next_s in rows:
            self._grow(s, V, n_pruned, done_s, kept_s, candidates_s, next_s)

    def _grow(self, s, V, n_pruned, done, kept, candidates, nexts) -> None:
        """One step of sentence ``s``, from its rows of ``step``'s tensors, as lists."""
        tree, beams = self.trees[s], self._beams[s]
        nodes = tree["nodes"]
        for node, ended, ids, probs in zip(beams, done, *nexts, strict=True):
            if node is not None and not ended:
                nodes[node]["top"] = [
                    list(x) for x in zip(ids, probs, strict=True)
                ]
        new = []  # the node of each beam after the step
        for index, score, total in zip(*kept, strict=True):
            beam, piece = divmod(index, V)
            new.append(
                keep(tree, beams[beam], done[beam], piece, total, score,
                     self.eos_id)
            )  # fmt: skip
        pruned = []
        for index, score, total in zip(*candidates, strict=True):
            beam, piece = divmod(index, V)
            parent = beams[beam]
            if len(pruned) == n_pruned or index in kept[0]:
                continue
            if parent is None or score == -math.inf:
                continue
            if done[beam]:  # its padding, not a piece
                continue
            pruned.append({
                "parent": parent, "piece": piece,
                "log_p": total, "score": score,
            })  # fmt: skip
        tree["steps"].append({"kept": new, "pruned": pruned})
        self._beams[s] = new

    def end(
        self,
        sentences: torch.Tensor,
        log_p: torch.Tensor,
        lengths: torch.Tensor,
    ) -> None:
        """The sentences ``sentences`` ``(n,)`` are done: their winner is their best beam.

        ``log_p`` and ``lengths`` ``(n, K)`` as the search holds them; the beam is picked as
        ``common._best_beams`` picks it.
        """
        scores = log_p / gnmt_length_penalty(lengths, self.alpha)  # (n, K)
        for s, beam in zip(
            sentences.tolist(), scores.argmax(dim=-1).tolist(), strict=True
        ):
            self.trees[s]["winner"] = self._beams[s][beam]

    # --- afterwards ------------------------------------------------------------------------------

    def add_attention(
        self, model: nn.Module, src: torch.Tensor, src_mask: torch.Tensor
    ) -> None:
        """Each node's cross-attention over its source, by teacher forcing its prefix.

        Args:
            src: ``(B, S)`` the sources the search decoded; ``src_mask`` ``(B, 1, 1, S)``.
        """
        from ..attention import set_fused

        for s, tree in enumerate(self.trees):
            nodes = tree["nodes"]
            S = int(src_mask[s].sum())  # the source's own pieces
            by_step: dict[int, list[dict]] = {}
            for node in nodes:
                node["attention"] = None
                if not node["finished"]:
                    by_step.setdefault(node["step"], []).append(node)
            for nodes_t in by_step.values():
                prefix = torch.tensor(
                    [path(tree, n["id"]) for n in nodes_t], device=src.device
                )  # (n, T)
                n = prefix.size(0)
                with set_fused(model, False):
                    memory = model.encode(
                        src[s : s + 1], src_mask[s : s + 1]
                    )
                    model.decode(
                        memory.expand(n, -1, -1),
                        src_mask[s : s + 1].expand(n, -1, -1, -1),
                        prefix,
                    )
                    # (n, h, T, S): the last layer's cross-attention
                    weights = model.decoder.layers[-1].cross_attn.attn
                rows = weights[:, :, -1, :S].mean(dim=1)  # (n, S)
                for node, row in zip(nodes_t, rows.tolist(), strict=True):
                    node["attention"] = [round(w, self.digits) for w in row]


def keep(
    tree: dict,
    parent: int | None,
    done: bool,
    piece: int,
    log_p: float,
    score: float,
    eos_id: int,
    **extra,
) -> int | None:
    """The node a kept candidate is after a step of ``tree``: none (no parent, or log P = -inf),
    its parent (the beam had finished: it stays, with its score), or a new node, appended, with
    the fields of ``extra`` (the page's tree adds ``attention``)."""
    if parent is None or log_p == -math.inf:
        return None
    if done:
        return parent
    nodes = tree["nodes"]
    nodes.append({
        "id": len(nodes), "parent": parent, "step": len(tree["steps"]) + 1,
        "piece": piece, "log_p": log_p, "score": score,
        "finished": piece == eos_id, "top": [], **extra,
    })  # fmt: skip
    return len(nodes) - 1


def path(tree: dict, node: int) -> list[int]:
    """The pieces of node ``node`` of ``tree``, from ``<bos>`` on."""
    pieces = []
    while node is not None:
        pieces.append(tree["nodes"][node]["piece"])
        node = tree["nodes"][node]["parent"]
    return pieces[::-1]


def readable(
    tree: dict, piece: Callable[[int], str], digits: int = 4
) -> dict:
    """``tree`` for a JSON file: each piece id as its text (``piece``), numbers to ``digits`` decimals.

    The node ids, parents, steps and the winner stay as they are; attention keeps its rounding.
    """

    def r(x: float) -> float:
        return round(x, digits)

    nodes = []
    for node in tree["nodes"]:
        out = dict(node, piece=piece(node["piece"]))
        out |= {"log_p": r(node["log_p"]), "score": r(node["score"])}
        out["top"] = [[piece(i), r(p)] for i, p in node["top"]]
        nodes.append(out)
    steps = [
        {
            "kept": step["kept"],
            "pruned": [
                dict(
                    c,
                    piece=piece(c["piece"]),
                    log_p=r(c["log_p"]),
                    score=r(c["score"]),
                )  # fmt: skip
                for c in step["pruned"]
            ],
        }
        for step in tree["steps"]
    ]
    return {"nodes": nodes, "steps": steps, "winner": tree["winner"]}
