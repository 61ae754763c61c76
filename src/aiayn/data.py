"""Multi30k German-English: loading, a joint sentencepiece tokenizer, and token-budget batching.

Three steps turn the raw captions into training batches:

1. ``load_multi30k("train")`` reads (German, English) sentence pairs from checked local files,
   downloading them once from the dataset's GitHub repository when they are missing.
2. ``train_tokenizer(pairs)`` learns one subword vocabulary for both languages, as the paper
   does ("a shared source-target vocabulary", section 5.1), and caches it on disk.
3. ``make_batches`` groups pairs of similar length under a token budget and ``collate`` pads
   them into tensors.

    B  batch        S  source length (with <eos>)        T  target length (with <eos>)
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from .checks import atomic_write, sha256_file
from .download import (
    DEADLINE_S,
    DOWNLOAD_ERRORS,
    ChecksumError,
    Downloader,
    check_file,
    download_file,
    user_cache_dir,
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

PAD, BOS, EOS, UNK = 0, 1, 2, 3

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


class DatasetUnavailable(RuntimeError):
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
        downloader: ``(url, deadline) -> byte pieces``; default ``aiayn.download.urlopen_pieces``
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
# Tokenizer
# ---------------------------------------------------------------------------------------------

DEFAULT_VOCAB_SIZE = 8000


def _spm():
    try:
        import sentencepiece
    except ImportError as err:  # an optional dependency (the "book" extra)
        raise ImportError(
            "the tokenizer needs sentencepiece: pip install 'sentencepiece>=0.2'"
        ) from err
    return sentencepiece


def _check_text(name: str, text: str) -> None:
    """Refuse a str that is not Unicode text (a lone surrogate), naming where it is."""
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(
            f"{name}: character {err.start} ({text[err.start]!r}) is not valid "
            "Unicode text (a lone surrogate, as decoding bytes with "
            "errors='surrogateescape' leaves); expected a str of text: decode "
            "the source with errors='replace', or fix or drop the sentence"
        ) from None


class Tokenizer:
    """A sentencepiece subword model with fixed special ids: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3.

    Args:
        model_file: path to a sentencepiece ``.model`` file (as written by ``train_tokenizer``).
    """

    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(self, model_file: str | os.PathLike):
        self.model_file = Path(model_file)
        if not self.model_file.is_file():
            raise FileNotFoundError(
                f"{self.model_file}: no such tokenizer model file"
            )
        try:
            self.sp = _spm().SentencePieceProcessor(
                model_file=str(self.model_file)
            )
        except (RuntimeError, OSError) as err:
            raise ValueError(
                f"{self.model_file} is not a sentencepiece model (damaged or truncated: "
                f"{str(err).splitlines()[0] if str(err) else type(err).__name__})"
            ) from None
        got = (
            self.sp.pad_id(),
            self.sp.bos_id(),
            self.sp.eos_id(),
            self.sp.unk_id(),
        )
        if got != (PAD, BOS, EOS, UNK):
            raise ValueError(
                f"{self.model_file}: expected special ids (pad, bos, eos, unk) = (0, 1, 2, 3), got {got}"
            )

    @property
    def vocab_size(self) -> int:
        """Number of ids, special ones included."""
        return self.sp.get_piece_size()

    def __len__(self) -> int:
        return self.vocab_size

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size}, model_file='{self.model_file}')"

    def encode(
        self, text: str, add_bos: bool = False, add_eos: bool = False
    ) -> list[int]:
        """Split ``text`` into subword ids, optionally framed by ``<s>`` and ``</s>``."""
        if not isinstance(text, str):
            raise TypeError(
                f"text: expected a str, got {type(text).__name__}"
            )
        _check_text("text", text)
        return self.sp.encode(
            text, out_type=int, add_bos=add_bos, add_eos=add_eos
        )

    def encode_batch(
        self,
        texts: Sequence[str],
        add_bos: bool = False,
        add_eos: bool = False,
    ) -> list[list[int]]:
        """``encode`` for a list of sentences."""
        if isinstance(texts, str) or not all(
            isinstance(t, str) for t in texts
        ):
            raise TypeError("texts: expected a list of str")
        texts = list(texts)
        for i, text in enumerate(texts):
            _check_text(f"texts[{i}]", text)
        return self.sp.encode(
            texts, out_type=int, add_bos=add_bos, add_eos=add_eos
        )

    def decode(self, ids: Sequence[int] | torch.Tensor) -> str:
        """Turn ids back into text, leaving out ``<pad>``, ``<s>`` and ``</s>`` wherever they are."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(
                    f"ids: expected a 1-D tensor, got shape {tuple(ids.shape)}; use decode_batch"
                )
            ids = ids.tolist()
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"ids must be in [0, {self.vocab_size}), got {bad[:5]}"
            )
        return self.sp.decode([i for i in ids if i not in (PAD, BOS, EOS)])

    def decode_batch(
        self, batch: Sequence[Sequence[int]] | torch.Tensor
    ) -> list[str]:
        """``decode`` for each row of a ``(B, L)`` tensor or a list of id lists."""
        return [self.decode(row) for row in batch]

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of ``text``, with ``▁`` marking a preceding space: ``['▁Ein', '▁Hund', '.']``."""
        return [self.id_to_piece(i) for i in self.encode(text)]

    def id_to_piece(self, i: int) -> str:
        """The piece string for id ``i``."""
        if not 0 <= int(i) < self.vocab_size:
            raise ValueError(
                f"id must be in [0, {self.vocab_size}), got {i}"
            )
        return self.sp.id_to_piece(int(i))

    def piece_to_id(self, piece: str) -> int:
        """The id of ``piece`` (``UNK`` if the vocabulary lacks it)."""
        return self.sp.piece_to_id(piece)


def train_tokenizer(
    pairs: Sequence[tuple[str, str]],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    cache_dir: str | os.PathLike | None = None,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
) -> Tokenizer:
    """Learn one subword vocabulary from both sides of ``pairs``, or load it from the cache.

    Choices, measured on the Multi30k training split (58,000 sentences; 2 CPU cores):

    - **BPE by default**, as in the paper (section 5.1: "byte-pair encoding ... shared source-target
      vocabulary"). It trains in about 0.4 s; ``model_type="unigram"`` trains in about 3 s and gives
      nearly the same lengths (15.2 vs 14.8 German pieces per sentence at 8k).
    - **8,000 pieces by default.** Pieces per sentence (German / English; whitespace-separated words are
      11.1 / 11.9) and pieces seen fewer than 10 times in training:

      ======  =========  =========  ==========
      vocab   de pieces  en pieces  rare (<10)
      ======  =========  =========  ==========
      4,000   16.5       15.5              271
      8,000   14.8       14.3            1,248
      12,000  14.1       13.8            5,357
      16,000  13.7       13.6           10,171
      ======  =========  =========  ==========

      Beyond 8k the sentences barely shorten (-4% at 12k) while the share of pieces the model can
      hardly learn (few training examples) grows fourfold; below it sentences lengthen quickly.
      The paper's 37,000 suits WMT's 4.5 million pairs, not 29,000 captions.
    - **Lossless text.** ``normalization_rule_name="identity"`` and ``remove_extra_whitespaces=False``
      leave the text untouched, so ``decode(encode(s)) == s`` for every line of Multi30k;
      ``character_coverage=1.0`` keeps every character of the training text (no ``<unk>`` for ``ß``).
      Characters never seen in training still become ``<unk>`` (decoded as `` ⁇ ``).
    - **Deterministic.** Training uses ``num_threads=1``: sentencepiece's unigram trainer gives a
      different vocabulary for each thread count (BPE does not, but the saved model records the count).

    The model is stored as ``<cache_dir>/spm-<model_type>-<vocab_size>-<hash>.model``, where the hash
    covers the sentences, these settings and the sentencepiece version, with its own SHA-256 beside
    it (``.model.sha256``); a second call loads it. A cached model whose SHA-256 or size differs
    (cut off by a full disk, say: it may still parse, as a smaller model) is learned again, with a
    warning; one cached before sums were kept is checked by its size and gets its sum.

    Args:
        pairs: ``(source, target)`` sentences, e.g. ``load_multi30k("train")``.
        vocab_size: number of ids, including the 4 special ones.
        cache_dir: where models are kept; defaults to ``~/.cache/aiayn/tokenizers``.
        model_type: ``"bpe"`` or ``"unigram"``.
        character_coverage: share of characters the vocabulary must cover (1.0: all).

    Returns:
        A ``Tokenizer``.
    """
    spm = _spm()
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or vocab_size < 8
    ):
        raise ValueError(
            f"vocab_size must be an integer >= 8, got {vocab_size!r}"
        )
    if model_type not in ("bpe", "unigram"):
        raise ValueError(
            f"model_type must be 'bpe' or 'unigram', got {model_type!r}"
        )
    if not 0.0 < character_coverage <= 1.0:
        raise ValueError(
            f"character_coverage must be in (0, 1], got {character_coverage!r}"
        )
    sentences = [s for pair in pairs for s in pair]
    if not sentences or not all(isinstance(s, str) for s in sentences):
        raise ValueError(
            "pairs: expected a non-empty list of (source, target) string pairs"
        )

    settings = dict(
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        pad_id=PAD,
        bos_id=BOS,
        eos_id=EOS,
        unk_id=UNK,
        num_threads=1,
    )
    h = hashlib.sha256(
        json.dumps([settings, spm.__version__], sort_keys=True).encode()
    )
    for s in sentences:
        h.update(s.encode("utf-8") + b"\n")
    directory = (
        Path(cache_dir).expanduser()
        if cache_dir is not None
        else user_cache_dir("tokenizers")
    )
    path = (
        directory
        / f"spm-{model_type}-{vocab_size}-{h.hexdigest()[:16]}.model"
    )
    sums = path.with_name(path.name + ".sha256")
    if path.is_file():
        problem = _cache_problem(path, sums, vocab_size)
        if problem is None:
            return Tokenizer(path)
        warnings.warn(
            f"the cached tokenizer {path} {problem}: learning it again",
            stacklevel=2,
        )

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        minloglevel=2,
        **settings,
    )
    directory.mkdir(parents=True, exist_ok=True)
    # the model, then its SHA-256 beside it: a model without a matching sum is never used
    written = atomic_write(path, model.getvalue())
    atomic_write(sums, f"{written.sha256}  {path.name}\n")
    return Tokenizer(path)


def _cache_problem(path: Path, sums: Path, vocab_size: int) -> str | None:
    """What is wrong with a cached tokenizer (cut off, changed, another size); ``None``: nothing."""
    try:
        expected = sums.read_text().split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        expected = None  # cached by an older version: its size decides, then it gets a sum
    _, actual = sha256_file(path)
    if expected is not None and actual != expected:
        return (
            f"has SHA-256 {actual[:12]}…, not the {expected[:12]}… it was "
            "written with (cut off or changed)"
        )
    try:
        size = Tokenizer(path).vocab_size
    except ValueError as err:
        return f"cannot be read ({err})"
    if size != vocab_size:
        return f"has {size} pieces, not the {vocab_size} asked for"
    if expected is None:
        atomic_write(sums, f"{actual}  {path.name}\n")
    return None


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
