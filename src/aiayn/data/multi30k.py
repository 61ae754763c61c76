"""Multi30k German-English: loading the captions, and token-budget batching.

Three steps turn the raw captions into training batches:

1. ``load_multi30k("train")`` reads (German, English) sentence pairs from checked local files,
   downloading them once from the dataset's GitHub repository when they are missing.
2. ``train_tokenizer(pairs)`` (``aiayn.data.tokenizer``) learns one subword vocabulary for both
   languages, and ``encode_pairs`` turns the sentence pairs into id pairs.
3. ``make_batches`` groups pairs of similar length under a token budget and ``collate`` pads
   them into tensors.

The tokenizer's names (``Tokenizer``, ``train_tokenizer``, the special ids ``PAD``, ``BOS``,
``EOS``, ``UNK``) are importable from here too, as step 2 of this pipeline.

    B  batch        S  source length (with <eos>)        T  target length (with <eos>)
"""

from __future__ import annotations

import gzip
import os
import random
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from ..checks import UnusableInput
from .download import (
    DEADLINE_S,
    DOWNLOAD_ERRORS,
    ChecksumError,
    Downloader,
    check_file,
    download_file,
    user_cache_dir,
)
from .tokenizer import (
    BOS,
    DEFAULT_VOCAB_SIZE,
    EOS,
    PAD,
    UNK,
    Tokenizer,
    train_tokenizer,
)

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "UNK",
    "SPLITS",
    "LANGS",
    "BASE_URL",
    "SHA256",
    "DatasetUnavailable",
    "ChecksumError",
    "data_dir",
    "load_multi30k",
    "DEFAULT_VOCAB_SIZE",
    "Tokenizer",
    "train_tokenizer",
    "encode_pairs",
    "pair_lengths",
    "make_batches",
    "padding_fraction",
    "collate",
]

# Multi30k task 1, raw (untokenised) captions, byte-for-byte as published by Elliott et al. (2016).
BASE_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
SPLITS = {"train": "train", "val": "val", "test2016": "test_2016_flickr"}
LANGS = ("de", "en")
SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
}


class DatasetUnavailable(UnusableInput):
    """The data files are neither on disk nor downloadable."""


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def data_dir(root: str | os.PathLike | None = None) -> Path:
    """Where the Multi30k files live: ``root``, else ``$AIAYN_DATA``, else ``~/.cache/aiayn/multi30k``.

    The cache directory honours ``$XDG_CACHE_HOME``.
    """
    if root is not None:
        path = Path(root).expanduser()
        given, fix = f"{path}", "give --data (root= in Python) that folder"
    elif os.environ.get("AIAYN_DATA"):
        path = Path(os.environ["AIAYN_DATA"]).expanduser()
        given, fix = f"$AIAYN_DATA={path}", "set $AIAYN_DATA to that folder"
    else:
        return user_cache_dir("multi30k")
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(
            f"the Multi30k folder {given} is a file; expected the folder that "
            f"holds the six Multi30k files ({', '.join(SHA256)}): {fix}"
        )
    return path


def _unavailable_message(
    missing: list[str], directory: Path, reason: str
) -> str:
    lines = [
        f"Multi30k files are missing from {directory} and could not be downloaded ({reason}).",
        f"A run needs all six: {', '.join(SHA256)}; missing here:",
    ]
    absent = [
        n for n in SHA256 if n in missing or not (directory / n).is_file()
    ]
    lines += [f"  {name}  <-  {BASE_URL}{name}" for name in absent]
    lines.append(
        f"Download them by hand into {directory}, or point the AIAYN_DATA environment variable "
        "(or the root= argument) at a folder that holds them."
    )
    return "\n".join(lines)


def _read_lines(path: Path) -> list[str]:
    text = gzip.decompress(path.read_bytes()).decode("utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the file's final newline; nothing else is stripped
    return lines


def load_multi30k(
    split: str,
    root: str | os.PathLike | None = None,
    src_lang: str = "de",
    tgt_lang: str = "en",
    *,
    download: bool = True,
    downloader: Downloader | None = None,
    deadline_s: float = DEADLINE_S,
) -> list[tuple[str, str]]:
    """Read one split of Multi30k (task 1) as ``(source, target)`` sentence pairs.

    Files are looked up in ``data_dir(root)``. Missing ones are downloaded from ``BASE_URL``, checked
    against ``SHA256`` and only then renamed into place. A file with the wrong checksum is never used.
    Each line keeps its text exactly; only the newline at its end is removed.

    Args:
        split: ``"train"`` (29,000 pairs), ``"val"`` (1,014) or ``"test2016"`` (1,000).
        root: folder holding ``<split>.<lang>.gz``; defaults to ``$AIAYN_DATA`` or ``~/.cache/aiayn/multi30k``.
        src_lang: ``"de"`` or ``"en"``.
        tgt_lang: the other one.
        download: whether to fetch missing files.
        downloader: ``(url, deadline) -> byte pieces``; default ``aiayn.data.download.urlopen_pieces``
            (tests pass a fake).
        deadline_s: seconds allowed for downloading the missing files together.

    Returns:
        A list of ``(source sentence, target sentence)`` string pairs, in file order.
    """
    if split not in SPLITS:
        raise ValueError(
            f"split must be one of {sorted(SPLITS)}, got {split!r}"
        )
    for name, lang in (("src_lang", src_lang), ("tgt_lang", tgt_lang)):
        if lang not in LANGS:
            raise ValueError(
                f"{name} must be one of {list(LANGS)}, got {lang!r}"
            )
    if src_lang == tgt_lang:
        raise ValueError(
            f"src_lang and tgt_lang must differ, got {src_lang!r} for both"
        )

    directory = data_dir(root)
    names = [f"{SPLITS[split]}.{lang}.gz" for lang in (src_lang, tgt_lang)]
    missing = [name for name in names if not (directory / name).is_file()]
    if missing and not download:
        raise DatasetUnavailable(
            _unavailable_message(missing, directory, "download=False")
        )
    deadline = time.monotonic() + deadline_s
    for name in missing:
        try:
            download_file(
                BASE_URL + name,
                directory / name,
                SHA256[name],
                deadline,
                downloader,
            )
        except DOWNLOAD_ERRORS as err:
            raise DatasetUnavailable(
                _unavailable_message(
                    missing, directory, f"{type(err).__name__}: {err}"
                )
            ) from err
    for name in names:
        check_file(
            directory / name,
            SHA256[name],
            "The file is damaged or a different version; delete it to "
            "download it again.",
        )
    src, tgt = (_read_lines(directory / name) for name in names)
    if len(src) != len(tgt):
        raise ValueError(
            f"{names[0]} has {len(src)} lines but {names[1]} has {len(tgt)}; they must align"
        )
    return list(zip(src, tgt, strict=True))


# ---------------------------------------------------------------------------------------------
# Encoding (the tokenizer itself is aiayn.data.tokenizer)
# ---------------------------------------------------------------------------------------------


def encode_pairs(
    tokenizer: Tokenizer, pairs: Sequence[tuple[str, str]]
) -> list[tuple[list[int], list[int]]]:
    """Encode ``(source, target)`` sentences into ``(source ids, target ids)``, without special tokens."""
    src = tokenizer.encode_batch([s for s, _ in pairs])
    tgt = tokenizer.encode_batch([t for _, t in pairs])
    return list(zip(src, tgt, strict=True))


# ---------------------------------------------------------------------------------------------
# Batching
# ---------------------------------------------------------------------------------------------


def pair_lengths(
    encoded_pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
) -> list[tuple[int, int]]:
    """Lengths ``(S_i, T_i)`` of each pair as ``collate`` will pad it: the ids plus one ``<eos>`` on each side."""
    return [(len(src) + 1, len(tgt) + 1) for src, tgt in encoded_pairs]


def make_batches(
    encoded_pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_tokens: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    sort: bool = True,
) -> list[list[int]]:
    """Group pair indices into batches whose padded size ``B * (S + T)`` stays within ``max_tokens``.

    Pairs are sorted by source length, then by target length (rising for odd, falling for even source
    lengths, so neighbours differ little on both sides), and packed greedily in that order. With
    ``shuffle``, pairs of equal lengths are ordered at random before the sort and the batches are
    returned in random order, both drawn from ``(seed, epoch)``: each epoch sees other batches in
    another order, and the same ``(seed, epoch)`` always gives the same ones. Every pair appears exactly
    once. A pair that alone exceeds the budget becomes a batch of one (it is never dropped); no other
    batch exceeds it.

    Unlike the paper's "approximately 25000 source tokens and 25000 target tokens" (real tokens per
    side), the budget here counts padded positions of both sides together: what the memory sees.

    On the Multi30k training split (8k BPE), ``<pad>`` fills 2.9% of the positions at 4,096 tokens and
    5.0% at 8,192; packing the same pairs in random order (``sort=False``) wastes 51% and 54%.

    Args:
        encoded_pairs: ``(source ids, target ids)`` per pair, without ``<eos>`` (``collate`` adds it).
        max_tokens: budget of padded source plus target positions per batch.
        shuffle: randomise ties and the batch order; ``False`` gives a fixed order (for evaluation).
        seed: random seed.
        epoch: the epoch number, mixed into the seed.
        sort: ``False`` packs pairs in (shuffled) input order instead: the baseline without bucketing.

    Returns:
        A list of batches, each a list of indices into ``encoded_pairs``.
    """
    if (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or max_tokens <= 0
    ):
        raise ValueError(
            f"max_tokens must be a positive integer, got {max_tokens!r}"
        )
    lengths = pair_lengths(encoded_pairs)
    rng = random.Random(f"aiayn-batches-{seed}-{epoch}")
    order = list(range(len(lengths)))
    if shuffle:
        rng.shuffle(order)
    if sort:
        # By source length; within one source length by target length, rising and falling in turn, so that
        # a batch crossing from one source length to the next meets similar target lengths on both sides.
        # The sort is stable: equal keys keep their shuffled order.
        order.sort(
            key=lambda i: (
                lengths[i][0],
                lengths[i][1] if lengths[i][0] % 2 else -lengths[i][1],
            )
        )

    batches: list[list[int]] = []
    batch: list[int] = []
    max_s = max_t = 0
    for i in order:
        s, t = lengths[i]
        new_s, new_t = max(max_s, s), max(max_t, t)
        if batch and (len(batch) + 1) * (new_s + new_t) > max_tokens:
            batches.append(batch)
            batch, (new_s, new_t) = [], (s, t)
        batch.append(i)
        max_s, max_t = new_s, new_t
    if batch:
        batches.append(batch)
    if shuffle:
        rng.shuffle(batches)
    return batches


def padding_fraction(
    batches: Iterable[Sequence[int]], lengths: Sequence[tuple[int, int]]
) -> float:
    """Share of padded positions that hold ``<pad>``: ``1 - real tokens / sum of B * (S + T)``.

    Args:
        batches: lists of pair indices, as from ``make_batches``.
        lengths: ``(S_i, T_i)`` per pair, as from ``pair_lengths``.
    """
    real = padded = 0
    for batch in batches:
        if not batch:
            continue
        src = [lengths[i][0] for i in batch]
        tgt = [lengths[i][1] for i in batch]
        real += sum(src) + sum(tgt)
        padded += len(batch) * (max(src) + max(tgt))
    if padded == 0:
        raise ValueError("padding_fraction: no tokens in the given batches")
    return 1.0 - real / padded


def collate(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
    pad_id: int = PAD,
    eos_id: int = EOS,
    pin_memory: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad a batch of id pairs into two tensors, appending ``<eos>`` to every sentence.

    The source ends in ``<eos>`` so the encoder sees where the sentence stops, as the target does.
    The target has no ``<bos>``: the decoder input is ``aiayn.masks.shift_right(tgt, BOS)``, and
    ``tgt`` itself is what the model must predict, ending with ``<eos>``.

    Args:
        pairs: ``(source ids, target ids)`` per sentence, without special tokens.
        pad_id: id written after each sentence's ``<eos>``.
        eos_id: id appended to each sentence.
        pin_memory: pin the tensors in page-locked memory (faster copies to the GPU); ignored without CUDA.

    Returns:
        ``src`` of shape ``(B, S)`` and ``tgt`` of shape ``(B, T)``, both ``torch.long``.
    """
    if len(pairs) == 0:
        raise ValueError(
            "collate: expected at least one (source ids, target ids) pair, got an empty batch"
        )
    sides = []
    for k in (0, 1):  # source, then target
        seqs = [list(map(int, pair[k])) + [eos_id] for pair in pairs]
        out = torch.full(
            (len(seqs), max(map(len, seqs))), pad_id, dtype=torch.long
        )  # (B, S) or (B, T)
        for row, seq in enumerate(seqs):
            out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
        sides.append(
            out.pin_memory()
            if pin_memory and torch.cuda.is_available()
            else out
        )
    return sides[0], sides[1]
