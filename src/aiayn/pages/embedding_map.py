"""What the published model learned in its one embedding table: neighbours, analogies and a 2-D map.

The published model shares one table ``E`` of shape ``(V, d_model)`` between the German input, the
English input and the English output (``share_embeddings``, ``tie_output``). This module reads
it, for the most common whole-word pieces of the training text:

1. ``common_pieces``: the ``n`` word-start pieces (``▁`` and three letters or more) that occur
   most often in the training set, German and English counted apart, so each has a language;
2. ``nearest``: a piece's nearest pieces by cosine similarity;
3. ``analogy``: the piece nearest to ``b - a + c`` (unit vectors), e.g. man : woman :: boy : girl;
4. ``pca_2d``: the pieces projected on the two principal directions of their unit vectors;
5. ``PAIRS``: German words and their English translations. Is the English word among the German
   one's nearest pieces? (In the published table it is not: the languages are not aligned, so
   cross-attention must do that work.)

``python -m aiayn.embedding_map --out src/aiayn/results`` writes it all to
``multi30k.embeddings.json.gz``; chapter 2.3 draws it, and ``tests/test_results.py`` recomputes
it from the model. The command writes as ``python -m aiayn.stepthrough write`` does: ``--out`` is
a folder (created if new), locked while the command writes; a ``multi30k.embeddings.json.gz``
there that is not this command's record (a gzipped JSON whose ``"what"`` names the table) is
refused unless ``--overwrite`` says to replace it; the model (``$AIAYN_MODEL``, the published
model's folder or a release, never a run folder; nothing is downloaded) and the training text
(``--data``, else ``$AIAYN_DATA``) are checked first; every failure is one ``error: ...`` line.

    V  vocabulary size        d  d_model        n  pieces on the map        k  neighbours
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import torch

from .. import cli
from ..files import read_json_gz, write_json_gz

__all__ = [
    "PAIRS",
    "ANALOGIES",
    "FILE",
    "piece_counts",
    "common_pieces",
    "unit_table",
    "nearest",
    "rank_of",
    "analogy",
    "pca_2d",
    "embedding_map",
    "load_embedding_map",
]

FILE = "multi30k.embeddings.json.gz"
WHAT = "the published model's shared embedding table"  # how the record's "what" begins
BOUNDARY = "\u2581"  # sentencepiece's word start, "▁"
# German words of the captions and their English translations, each one piece
PAIRS = [
    ("Hund", "dog"), ("Mann", "man"), ("Frau", "woman"), ("Kind", "child"),
    ("Junge", "boy"), ("Mädchen", "girl"), ("Männer", "men"),
    ("Frauen", "women"), ("Menschen", "people"), ("Gruppe", "group"),
    ("Straße", "street"), ("Wasser", "water"), ("Strand", "beach"),
    ("Schnee", "snow"), ("Gras", "grass"), ("Baum", "tree"),
    ("Gebäude", "building"), ("Tisch", "table"), ("Ball", "ball"),
    ("Hemd", "shirt"), ("Hut", "hat"), ("Fahrrad", "bicycle"),
    ("Auto", "car"), ("spielt", "plays"), ("sitzt", "sitting"),
    ("steht", "standing"), ("rot", "red"), ("blau", "blue"),
    ("schwarz", "black"), ("weiß", "white"),
]  # fmt: skip
# a : b :: c : expected (the last two cross the languages)
ANALOGIES = [
    ("man", "woman", "boy", "girl"),
    ("Mann", "Frau", "Junge", "Mädchen"),
    ("dog", "dogs", "man", "men"),
    ("Mann", "Männer", "Frau", "Frauen"),
    ("walking", "walks", "sitting", "sits"),
    ("Mann", "man", "Frau", "woman"),
    ("Hund", "dog", "Frau", "woman"),
]


def _id(tokenizer, word: str) -> int:
    """The id of the piece ``▁word``; a ``ValueError`` when it is no single piece."""
    i = tokenizer.piece_to_id(BOUNDARY + word)
    if tokenizer.id_to_piece(i) != BOUNDARY + word:
        raise ValueError(f"{word!r} is not one piece of this vocabulary")
    return i


def piece_counts(
    tokenizer, pairs: Sequence[tuple[str, str]]
) -> tuple[Counter, Counter]:
    """How often each piece id occurs in the German and in the English sentences of ``pairs``."""
    de, en = Counter(), Counter()
    for ids in tokenizer.encode_batch([d for d, _ in pairs]):
        de.update(ids)
    for ids in tokenizer.encode_batch([e for _, e in pairs]):
        en.update(ids)
    return de, en


def common_pieces(tokenizer, de: Counter, en: Counter, n: int) -> list[int]:
    """The ``n`` most frequent whole-word pieces (``▁`` + 3 letters or more), most frequent first."""

    def is_word(i: int) -> bool:
        piece = tokenizer.id_to_piece(i)
        word = piece[1:]
        return (
            piece.startswith(BOUNDARY) and word.isalpha() and len(word) >= 3
        )

    total = Counter({i: de[i] + en[i] for i in de.keys() | en.keys()})
    ranked = sorted(total, key=lambda i: (-total[i], i))  # ties by id
    return [i for i in ranked if is_word(i)][:n]


def unit_table(model) -> torch.Tensor:
    """The shared embedding table of ``model``, each row scaled to length 1: ``(V, d)`` float32."""
    src, tgt = model.src_embed[0], model.tgt_embed[0]
    if src is not tgt:
        raise ValueError(
            "expected a model with one shared embedding table "
            "(share_embeddings=True), got separate source and target tables"
        )
    table = src.lut.weight.detach().float()  # (V, d)
    return torch.nn.functional.normalize(table, dim=1)


def nearest(
    unit: torch.Tensor,
    i: int,
    k: int,
    pool: Sequence[int] | None = None,
) -> list[tuple[int, float]]:
    """The ``k`` pieces most cosine-similar to piece ``i`` (itself left out), from ``pool`` or all.

    Args:
        unit: ``(V, d)`` unit rows (``unit_table``).
        i: the piece's id.
        k: how many.
        pool: the ids to choose from (default: the whole vocabulary).

    Returns:
        ``[(id, cosine), ...]``, most similar first.
    """
    sims = unit @ unit[i]  # (V,)
    allowed = torch.zeros_like(sims, dtype=torch.bool)
    allowed[list(pool) if pool is not None else slice(None)] = True
    allowed[i] = False
    sims = sims.masked_fill(~allowed, -2.0)
    values, ids = sims.topk(k)
    return list(zip(ids.tolist(), values.tolist(), strict=True))


def rank_of(unit: torch.Tensor, i: int, j: int) -> int:
    """Where piece ``j`` comes among piece ``i``'s neighbours in the whole table: 1 = nearest."""
    sims = unit @ unit[i]  # (V,)
    sims[i] = -2.0
    return int((sims > sims[j]).sum()) + 1


def analogy(
    unit: torch.Tensor, a: int, b: int, c: int, k: int = 3
) -> list[int]:
    """The ``k`` pieces nearest to ``b - a + c`` (unit rows), leaving out ``a``, ``b`` and ``c``."""
    query = torch.nn.functional.normalize(unit[b] - unit[a] + unit[c], dim=0)
    sims = unit @ query  # (V,)
    sims[[a, b, c]] = -2.0
    return sims.topk(k).indices.tolist()


def pca_2d(vectors: torch.Tensor) -> tuple[torch.Tensor, list[float]]:
    """Project ``(n, d)`` vectors on their two principal directions (PCA by SVD, in float64).

    Each direction's sign is fixed so that its largest coordinate is positive, so the map does
    not flip from one run to the next.

    Returns:
        ``(n, 2)`` coordinates and the share of the variance each direction holds.
    """
    centred = vectors.double() - vectors.double().mean(0)  # (n, d)
    U, S, _ = torch.linalg.svd(centred, full_matrices=False)
    xy = U[:, :2] * S[:2]  # (n, 2)
    biggest = xy.abs().argmax(0)  # (2,)
    xy = xy * torch.sign(xy[biggest, torch.arange(2)])
    share = (S[:2] ** 2 / (S**2).sum()).tolist()
    return xy, share


def _language(de: Counter, en: Counter, i: int) -> str:
    """``de`` or ``en``: the side of the training text where piece ``i`` occurs more often."""
    if de[i] == en[i]:
        return "both" if de[i] else "neither"
    return "de" if de[i] > en[i] else "en"


def embedding_map(
    model,
    tokenizer,
    train: Sequence[tuple[str, str]],
    n: int = 300,
    k: int = 10,
) -> dict:
    """Everything chapter 2.3 shows about the table, as one JSON-ready record (see the module).

    Args:
        model: the published ``Transformer`` (one shared table).
        tokenizer: its ``Tokenizer``.
        train: the training pairs ``(German, English)``, for the counts.
        n: the pieces on the map.
        k: the neighbours kept for each piece and each pair.
    """
    unit = unit_table(model)
    de, en = piece_counts(tokenizer, train)
    pool = common_pieces(tokenizer, de, en, n)
    xy, share = pca_2d(unit[pool])
    piece = tokenizer.id_to_piece

    def rounded(pairs) -> list:
        return [[piece(j), round(s, 3)] for j, s in pairs]

    pieces = [
        {
            "piece": piece(i),
            "lang": _language(de, en, i),
            "de": de[i],
            "en": en[i],
            "x": round(x, 3),
            "y": round(y, 3),
            "neighbours": rounded(nearest(unit, i, k, pool)),
        }
        for i, (x, y) in zip(pool, xy.tolist(), strict=True)
    ]
    pairs = []
    for german, english in PAIRS:
        i, j = _id(tokenizer, german), _id(tokenizer, english)
        near = nearest(unit, i, k)
        pairs.append(
            {
                "de": piece(i),
                "en": piece(j),
                "rank": rank_of(unit, i, j),
                "cosine": round(float(unit[i] @ unit[j]), 3),
                "nearest": [
                    [*row, _language(de, en, m)]
                    for (m, _), row in zip(near, rounded(near), strict=True)
                ],
            }
        )
    analogies = []
    for a, b, c, expected in ANALOGIES:
        ids = [_id(tokenizer, w) for w in (a, b, c)]
        found = [piece(j) for j in analogy(unit, *ids)]
        analogies.append(
            {"a": a, "b": b, "c": c, "expected": expected, "found": found}
        )
    return {
        "what": (
            f"{WHAT}: the most "
            "common whole-word pieces of the training set, their nearest "
            "pieces among them, a 2-D PCA map, German/English pairs and "
            "analogies (python -m aiayn.embedding_map)"
        ),
        "command": "python -m aiayn.embedding_map --out src/aiayn/results",
        "n": n,
        "k": k,
        "vocab_size": unit.shape[0],
        "explained": [round(s, 4) for s in share],
        "pieces": pieces,
        "pairs": pairs,
        "analogies": analogies,
    }


def load_embedding_map(path: str | Path | None = None) -> dict:
    """The committed record (``results/multi30k.embeddings.json.gz``), or the one at ``path``."""
    if path is None:
        from ..runs.published import results_dir

        path = results_dir() / FILE
    return read_json_gz(path)


def _is_ours(path: Path) -> bool:
    """Whether ``path`` is a record this command wrote (``"what"`` names the table)."""
    from .stepthrough import read_record

    record = read_record(path, ("what", "pieces", "pairs", "analogies"))
    return record is not None and str(record["what"]).startswith(WHAT)


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser(
        "python -m aiayn.embedding_map",
        "Write what the published model's shared embedding table holds into "
        f"OUT/{FILE} (the model from $AIAYN_MODEL, the training text from "
        "--data or $AIAYN_DATA).",
    )
    parser.add_argument(
        "--out",
        required=True,
        help=f"the folder to write {FILE} into (e.g. src/aiayn/results)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace a {FILE} there that this command did not write",
    )
    parser.add_argument("--data", default=None, help="the Multi30k folder")
    return parser


def _command(args: argparse.Namespace) -> int:
    from ..data.multi30k import load_multi30k
    from ..runs.published import load_published
    from .stepthrough import check_inputs, claimed, results_file

    what = "python -m aiayn.embedding_map"
    path = results_file(args.out, FILE, _is_ours, args.overwrite, what)
    release = (
        "; or at a release of a run (python -m aiayn.published release RUN "
        "--out DIR)"
    )
    check_inputs(what, args.data, ["train"], release)
    with claimed(path.parent):
        # again under the lock: another command may have written it meanwhile
        results_file(args.out, FILE, _is_ours, args.overwrite, what)
        train = load_multi30k("train", args.data, download=False)
        _, tokenizer, model, _ = load_published(download=False)
        record = embedding_map(model, tokenizer, train)
        write_json_gz(path, record)
    print(f"wrote {path}: {len(record['pieces'])} pieces")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiayn.embedding_map --out DIR [--overwrite] [--data DIR]``.

    A wrong argument, folder or input prints one ``error: ...`` line and exits with status 2,
    another failure (a full disk) one line with status 1 (``aiayn.cli.run``).
    """
    return cli.run(_parser(), argv, _command)


if __name__ == "__main__":
    raise SystemExit(main())
