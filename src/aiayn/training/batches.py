"""Batches for training: source, shifted target and masks together (``Batch``), the copy task's toy
batches, and the length-sorted batches of a corpus, epoch by epoch.

    B  batch        S  source length        T  target length
    n  pairs of the corpus                  L  the longest sentence's length, <eos> included
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace

import torch

from ..checks import check_positive, check_token_dtype
from ..data.multi30k import (
    BOS,
    EOS,
    PAD,
    make_batches,
)
from ..masks import decoder_mask, padding_mask, shift_right
from .distributed import shard

__all__ = [
    "Batch",
    "copy_task_batches",
    "EpochBatches",
    "eval_batches",
    "IdPairs",
    "PaddedPairs",
]


# --- Batches --------------------------------------------------------------------------------------


@dataclass
class Batch:
    """One training batch: the source, the decoder input and output, and their masks.

    ``tgt`` ``[A, B, <eos>, <pad>]`` becomes ``tgt_in`` ``[<bos>, A, B, <eos>]`` (the decoder input, shifted
    right) and ``tgt_out`` ``[A, B, <eos>, <pad>]`` (what each position must predict). The ``<eos>`` that
    moves into ``tgt_in`` sits where ``tgt_out`` is padding, so it is never used for the loss.

    Args:
        src: ``(B, S)`` source ids.
        src_mask: ``(B, 1, 1, S)`` boolean padding mask.
        tgt_in: ``(B, T)`` decoder input ids, ``<bos>`` first.
        tgt_out: ``(B, T)`` target ids, ending in ``<eos>`` then padding.
        tgt_mask: ``(B, 1, T, T)`` boolean: look-ahead and padding of ``tgt_in``.
        n_tokens: number of non-padding target tokens (those that count in the loss).
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor
    n_tokens: int

    @classmethod
    def make(
        cls, src: torch.Tensor, tgt: torch.Tensor, pad_id: int, bos_id: int
    ) -> Batch:
        """Build a batch from padded tensors.

        Args:
            src: ``(B, S)`` source ids, padded with ``pad_id``.
            tgt: ``(B, T)`` target ids, each ending in ``<eos>``, padded with ``pad_id``.
            pad_id: the padding id.
            bos_id: the beginning-of-sequence id, put first in ``tgt_in``; must differ from ``pad_id``.
        """
        check_token_dtype(src, "src")
        check_token_dtype(tgt, "tgt")
        if src.dim() != 2 or tgt.dim() != 2 or src.size(0) != tgt.size(0):
            raise ValueError(
                "expected src (B, S) and tgt (B, T) with the same B, "
                f"got src {tuple(src.shape)} and tgt {tuple(tgt.shape)}"
            )
        if bos_id == pad_id:
            raise ValueError(
                f"bos_id and pad_id must differ (the <bos> column would be masked), got both {pad_id}"
            )
        tgt_in = shift_right(tgt, bos_id)  # (B, T)
        return cls(
            src=src,
            src_mask=padding_mask(src, pad_id),  # (B, 1, 1, S)
            tgt_in=tgt_in,
            tgt_out=tgt,
            tgt_mask=decoder_mask(tgt_in, pad_id),  # (B, 1, T, T)
            n_tokens=int((tgt != pad_id).sum()),
        )

    @classmethod
    def from_pairs(
        cls,
        src: Sequence[Sequence[int]],
        tgt: Sequence[Sequence[int]],
        pad_id: int,
        bos_id: int,
    ) -> Batch:
        """Pad lists of id sequences and build a batch.

        Args:
            src: B source sequences of any lengths.
            tgt: B target sequences, each already ending in ``<eos>``.
            pad_id: the padding id.
            bos_id: the beginning-of-sequence id.
        """
        if len(src) != len(tgt) or len(src) == 0:
            raise ValueError(
                f"expected the same, non-zero number of sources and targets, got {len(src)} and {len(tgt)}"
            )
        return cls.make(_pad(src, pad_id), _pad(tgt, pad_id), pad_id, bos_id)

    def to(
        self, device: torch.device | str, non_blocking: bool = False
    ) -> Batch:
        """A copy of the batch with every tensor on ``device``."""
        moved = {
            f.name: getattr(self, f.name).to(
                device, non_blocking=non_blocking
            )
            for f in fields(self)
            if isinstance(getattr(self, f.name), torch.Tensor)
        }
        return replace(self, **moved)


def _pad(seqs: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    out = torch.full(
        (len(seqs), max(len(s) for s in seqs)), pad_id, dtype=torch.long
    )  # (B, L)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    return out


def copy_task_batches(
    n_batches: int,
    batch_size: int,
    seq_len: int,
    vocab_size: int,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    seed: int = 0,
    reverse: bool = False,
    min_len: int | None = None,
) -> list[Batch]:
    """Synthetic batches for the copy task: the target is the source (or the source reversed), then ``<eos>``.

    Tokens are drawn uniformly from the ids above the special ones, ``max(pad, bos, eos) + 1 .. vocab_size - 1``.

    Args:
        n_batches: number of batches.
        batch_size: sentences per batch.
        seq_len: longest source length.
        vocab_size: number of ids, special ones included.
        pad_id, bos_id, eos_id: the special ids.
        seed: seed of the private generator (the global RNG is not touched).
        reverse: ask for the source reversed instead of copied.
        min_len: shortest source length; lengths are drawn from ``min_len..seq_len`` and shorter
            sentences are padded. ``None`` makes every sentence ``seq_len`` long.

    Returns:
        A list of ``n_batches`` ``Batch`` objects with ``src`` ``(batch_size, ≤ seq_len)`` and
        ``tgt_out`` ``(batch_size, ≤ seq_len + 1)``.
    """
    check_positive(
        n_batches=n_batches,
        batch_size=batch_size,
        seq_len=seq_len,
        vocab_size=vocab_size,
    )
    for name, value in (
        ("pad_id", pad_id),
        ("bos_id", bos_id),
        ("eos_id", eos_id),
    ):
        if not 0 <= value < vocab_size:
            raise ValueError(
                f"{name} must be an id in [0, vocab_size={vocab_size}), got {value}"
            )
    first = max(pad_id, bos_id, eos_id) + 1
    if vocab_size <= first:
        raise ValueError(
            f"vocab_size must leave ids for ordinary tokens above {first - 1}, got {vocab_size}"
        )
    min_len = seq_len if min_len is None else min_len
    if not 1 <= min_len <= seq_len:
        raise ValueError(
            f"min_len must be in [1, seq_len={seq_len}], got {min_len}"
        )
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        tokens = torch.randint(
            first, vocab_size, (batch_size, seq_len), generator=g
        )  # (B, S)
        lengths = torch.randint(
            min_len, seq_len + 1, (batch_size,), generator=g
        ).tolist()
        src = [
            row[:n].tolist() for row, n in zip(tokens, lengths, strict=True)
        ]
        tgt = [(s[::-1] if reverse else s) + [eos_id] for s in src]
        batches.append(Batch.from_pairs(src, tgt, pad_id, bos_id))
    return batches


# --- Batches of a corpus ---------------------------------------------------------------------------


IdPairs = Sequence[tuple[Sequence[int], Sequence[int]]]


def _round_up(n: int, multiple: int | None) -> int:
    return n if multiple is None else -(-n // multiple) * multiple


def _padded_table(
    seqs: Sequence[Sequence[int]], width: int
) -> tuple[torch.Tensor, list[int]]:
    """Every sequence, then ``<eos>``, then ``<pad>`` up to ``width``, one row each; and the
    rows' lengths (``<eos>`` included). One ``torch.tensor`` for all the ids, not one per row."""
    lengths = [len(s) + 1 for s in seqs]
    ids = torch.tensor(
        list(itertools.chain.from_iterable(seqs)), dtype=torch.long
    )  # (sum of lengths - n,)
    n_ids = torch.tensor(lengths, dtype=torch.long) - 1  # (n,)
    table = torch.full((len(seqs), width), PAD, dtype=torch.long)  # (n, L)
    # the ids fill each row from the left, row by row (a boolean mask takes them in that order)
    table[torch.arange(width) < n_ids[:, None]] = ids
    table[torch.arange(len(seqs)), n_ids] = EOS
    return table, lengths


class PaddedPairs:
    """Every pair's source and target padded once, ``<eos>`` appended: a batch is a gather of rows.

    ``batch(indices)`` gives what ``Batch.make(*data.collate(...), PAD, BOS)`` gives for those
    pairs, the same tensors (``tests/test_batches.py``), without a ``torch.tensor`` per sentence.
    With ``pad_to``, each batch's S and T are rounded up to a multiple of it: fewer shapes, the
    same loss (the masks hide the extra ``<pad>`` positions), more padded positions per batch.
    With ``pad_rows``, its number of sentences B is rounded up to a multiple of it by rows of
    ``<pad>`` only. Such a row adds no target token, so the loss and the gradients stay those of
    the real rows (its queries find no key, and ``attention`` gives them zero weights, not NaN).

    Args:
        pairs: ``(source ids, target ids)`` per pair, without ``<eos>``.
        pad_to: round S and T up to a multiple of this (``None``: the longest sentence's length).
        pad_rows: round B up to a multiple of this (``None``: the batch's own pairs).
    """

    def __init__(
        self,
        pairs: IdPairs,
        pad_to: int | None = None,
        pad_rows: int | None = None,
    ):
        for name, value in (("pad_to", pad_to), ("pad_rows", pad_rows)):
            if value is not None:
                check_positive(**{name: value})
        if len(pairs) == 0:
            raise ValueError(
                "expected at least one (source ids, target ids) pair, got none"
            )
        self.pad_to, self.pad_rows = pad_to, pad_rows
        sides = []
        for k in (0, 1):  # source, then target
            seqs = [pair[k] for pair in pairs]
            width = _round_up(max(map(len, seqs)) + 1, pad_to)
            sides.append(_padded_table(seqs, width))
        (self.src, self.src_lengths), (self.tgt, self.tgt_lengths) = sides

    def __len__(self) -> int:
        return len(self.src_lengths)

    def batch(self, indices: Sequence[int]) -> Batch:
        """The ``Batch`` of the pairs at ``indices``, in that order."""
        if len(indices) == 0:
            raise ValueError(
                "expected at least one pair index, got an empty batch"
            )
        rows = torch.tensor(indices, dtype=torch.long)  # (B,)
        S = _round_up(max(self.src_lengths[i] for i in indices), self.pad_to)
        T = _round_up(max(self.tgt_lengths[i] for i in indices), self.pad_to)
        src = self.src[:, :S].index_select(0, rows)  # (B, S)
        tgt = self.tgt[:, :T].index_select(0, rows)  # (B, T)
        extra = _round_up(len(indices), self.pad_rows) - len(indices)
        if extra:  # (B + extra, S) and (B + extra, T)
            src = torch.cat(
                [src, torch.full((extra, S), PAD, dtype=torch.long)]
            )
            tgt = torch.cat(
                [tgt, torch.full((extra, T), PAD, dtype=torch.long)]
            )
        return Batch.make(src, tgt, PAD, BOS)


def _pinned(batch: Batch) -> Batch:
    tensors = {
        f.name: getattr(batch, f.name).pin_memory()
        for f in fields(batch)
        if f.name != "n_tokens"
    }
    return replace(batch, **tensors)


def _ahead(
    batches: Iterable[Batch], device: torch.device
) -> Iterator[Batch]:
    """``batches`` on ``device``, each copy issued one batch ahead: before the step that precedes its own."""
    waiting = None
    for batch in batches:
        moved = batch.to(device, non_blocking=True)
        if waiting is not None:
            yield waiting
        waiting = moved
    if waiting is not None:
        yield waiting


class EpochBatches:
    """The training batches of each epoch, for ``fit``: called with an epoch, it yields its ``Batch``es.

    ``make_batches`` draws the order from ``(seed, epoch)``, so iterating an epoch again gives the
    same batches, which ``fit`` needs to resume in the middle of one. ``len()`` (epoch 0's count)
    sizes the progress bar. Under torchrun every rank builds the same list and keeps its share
    (``distributed.shard``: every ``world``-th batch, the remainder of fewer than ``world``
    batches dropped, so that all ranks take the same number of steps).

    The ids are padded into tensors once a run (``PaddedPairs``); an epoch gathers its batches'
    rows from them. Each epoch's batches are the pairs ``make_batches`` groups for it (ties in
    length are drawn anew each epoch, so the groups differ from epoch to epoch), as
    ``data.collate`` pads them.

    Args:
        pairs: ``(source ids, target ids)`` per pair, without ``<eos>``.
        max_tokens: padded positions per batch.
        seed: the batch-order seed.
        pin_memory: pin each batch's tensors (only when CUDA is available).
        rank, world: this process's share of the batches (default: all of them).
        device: copy each batch there (``non_blocking``) one batch ahead of the step that uses it;
            ``None`` leaves them on the CPU.
        pad_to: round each batch's S and T up to a multiple of this (``PaddedPairs``).
        pad_rows: round each batch's number of sentences up to a multiple of this, with rows that
            hold nothing to predict (``PaddedPairs``).
    """

    def __init__(
        self,
        pairs: IdPairs,
        max_tokens: int,
        seed: int = 0,
        pin_memory: bool = False,
        rank: int = 0,
        world: int = 1,
        device: torch.device | str | None = None,
        pad_to: int | None = None,
        pad_rows: int | None = None,
    ):
        self.pairs, self.max_tokens, self.seed = pairs, max_tokens, seed
        self.rank, self.world = rank, world
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self.device = None if device is None else torch.device(device)
        self.padded = PaddedPairs(pairs, pad_to, pad_rows)  # once a run
        self._indices: dict[int, list[list[int]]] = {}

    def indices(self, epoch: int) -> list[list[int]]:
        """Pair indices of each batch of ``epoch`` (this rank's share under torchrun)."""
        if epoch not in self._indices:
            batches = make_batches(
                self.pairs, self.max_tokens, seed=self.seed, epoch=epoch
            )
            if self.world > 1:
                batches = shard(batches, self.rank, self.world)
            self._indices[epoch] = batches
        return self._indices[epoch]

    def __len__(self) -> int:
        return len(self.indices(0))

    def __call__(self, epoch: int) -> Iterator[Batch]:
        batches = (self.padded.batch(rows) for rows in self.indices(epoch))
        if self.pin_memory:
            batches = map(_pinned, batches)
        if self.device is None:
            return iter(batches)
        return _ahead(batches, self.device)


def eval_batches(
    pairs: IdPairs, max_tokens: int, pad_to: int | None = None
) -> list[Batch]:
    """The pairs in batches of at most ``max_tokens`` padded positions, in a fixed order."""
    batches = make_batches(pairs, max_tokens, shuffle=False)
    if not batches:
        return []
    padded = PaddedPairs(pairs, pad_to)
    return [padded.batch(rows) for rows in batches]
