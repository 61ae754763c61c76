"""The published model stepped through: every number of one sentence's way through it.

    S  source length        T  target length        h  heads        d_k  query/key width per head
    d_model  model width        d_ff  feed-forward width        N  layers per stack

``step_through`` runs the published translator over one test sentence and its own translation
(teacher forcing, as ``aiayn.viz.translation.model_attention``), one step at a time with the
package's own modules (``attention``, ``layers``, ``model``): the embedding times sqrt(d_model)
and the positional encoding; in each encoder layer q, k and v of every head, the raw scores
q·k, the scores over sqrt(d_k), the softmax, the weights times V, the heads side by side and
W^O, the residual and LayerNorm, the feed-forward network (its top hidden units and how many
of d_ff fire) and the second residual and LayerNorm; in each decoder layer the masked
self-attention and the cross-attention to the German, with the same residual steps. Each step
is checked against the model's own forward pass as it goes.

The record is small enough to ship with the package (``results_dir()``), so chapters 5 to 7
show it on the static website, where no model runs. Vectors of width d_model are kept as their
first ``SHOWN`` dimensions and their norm; q, k, v and the heads' outputs whole; every number
to ``DIGITS`` significant digits (the scores,
which a softmax exponentiates, to one more). ``python -m aiayn.stepthrough write`` writes it.

The command follows the rules of the others (``aiayn.cli``): ``--out`` (default
``src/aiayn/results``) is a folder, created if it is new, and the command writes one file into
it, ``STEPTHROUGH``. A file of that name that is not a record of this command (a gzipped JSON
with its fields) is refused, unless ``--overwrite`` says to replace it; no other file is
touched. ``--out``, ``--line``, the model's folder (``$AIAYN_MODEL``, which must be the
published model's: nothing is downloaded, and a run folder is refused) and the test data
are checked before the model is loaded. The command holds an ``flock`` on ``--out`` while it
writes (a second one fails at once) and writes the file atomically: a failure, a full disk
included, leaves the old file. Every refusal is one ``error: ...`` line, status 2; another
failure is one line too, status 1. ``aiayn.pages.embedding_map`` writes its file the same way
(``results_file``, ``claimed``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .. import cli
from ..attention import scaled_dot_product_attention
from ..data.multi30k import BOS, EOS, load_multi30k
from ..files import read_json_gz, write_json_gz
from ..masks import decoder_mask, padding_mask

__all__ = [
    "STEPTHROUGH",
    "LINE",
    "SHOWN",
    "TOP_UNITS",
    "DIGITS",
    "step_through",
    "write_stepthrough",
    "load_stepthrough",
    "softmax_rows",
    "read_record",
    "results_file",
    "claimed",
    "check_inputs",
    "main",
]

STEPTHROUGH = "multi30k.stepthrough.json.gz"
LINE = 209  # test2016: "Zwei Bauarbeiter diskutieren auf einer Baustelle."
SHOWN = 32  # the first dimensions kept of a d_model vector
TOP_UNITS = 8  # the feed-forward units kept per token, largest first
DIGITS = 3  # significant digits of every stored number


def _round(t: torch.Tensor, digits: int = DIGITS) -> Any:
    """``t`` as nested lists of floats to ``digits`` significant digits."""
    flat = [
        None if math.isnan(x) else float(f"{x:.{digits}g}")
        for x in t.double().flatten().tolist()
    ]  # NaN (a masked score) as null
    if t.dim() == 0:
        return flat[0]
    out: Any = flat
    for size in reversed(t.shape[1:]):
        out = [out[i : i + size] for i in range(0, len(out), size)]
    return out


def _vectors(x: torch.Tensor) -> dict:
    """``(L, d_model)`` as the first ``SHOWN`` dimensions and the norm of each row."""
    return {"first": _round(x[:, :SHOWN]), "norm": _round(x.norm(dim=-1))}


def _attention(
    mha: nn.Module,
    query: torch.Tensor,
    memory: torch.Tensor,
    mask: torch.Tensor,
    whole: bool = True,
) -> tuple[dict, torch.Tensor]:
    """One multi-head attention taken apart: ``(steps, output)``.

    Args:
        mha: an ``aiayn.attention.MultiHeadAttention``.
        query: ``(1, L_q, d_model)``.
        memory: ``(1, L_k, d_model)``, where keys and values come from.
        mask: boolean ``(1, 1, L_q or 1, L_k)``, ``True`` = may attend.
        whole: keep q, k, v and the heads' outputs (else only the scores, weights and output).

    Returns:
        The steps (q, k, v, raw scores q·k with masked ones ``None``, softmax weights,
        heads, W^O output) and the output
        ``(1, L_q, d_model)``.
    """
    q, k, v = mha.projections(query, memory, memory)  # (1, h, L, d_k)
    raw = q @ k.transpose(-2, -1)  # (1, h, L_q, L_k): q·k
    scaled = raw / math.sqrt(mha.d_k)
    masked = scaled.masked_fill(~mask, torch.finfo(raw.dtype).min)
    weights = masked.softmax(dim=-1)  # (1, h, L_q, L_k)
    heads = weights @ v  # (1, h, L_q, d_v)
    # the package's equation 1 gives the same heads and weights
    ref, ref_w = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(heads, ref)
    torch.testing.assert_close(weights, ref_w)
    L_q = query.size(1)
    concat = heads.transpose(1, 2).reshape(1, L_q, -1)  # (1, L_q, h * d_v)
    out = mha.w_o(concat)  # (1, L_q, d_model)
    torch.testing.assert_close(out, mha(query, memory, memory, mask))
    allowed = mask.expand_as(raw)[0]  # (h, L_q, L_k)
    steps = {
        # one digit more: they are divided by 8 before an exponential
        "scores": _round(raw[0].where(allowed, torch.nan), DIGITS + 1),
        "weights": _round(weights[0]),
        "output": _vectors(out[0]),
    }
    if whole:
        steps |= {
            "q": _round(q[0]),
            "k": _round(k[0]),
            "v": _round(v[0]),
            "heads": _round(heads[0]),
        }
    return steps, out


def _add_and_norm(norm: nn.Module, x: torch.Tensor, sub: torch.Tensor):
    """Post-norm's residual and LayerNorm: ``(steps, LayerNorm(x + sub))``."""
    added = x + sub  # (1, L, d_model)
    normed = norm(added)
    return {"add": _vectors(added[0]), "norm": _vectors(normed[0])}, normed


def _feed_forward(ffn: nn.Module, x: torch.Tensor):
    """The feed-forward network's hidden units (the top ones, how many fire) and its output."""
    hidden = ffn.w_1(x).relu()  # (1, L, d_ff)
    out = ffn.w_2(hidden)  # (1, L, d_model)
    torch.testing.assert_close(out, ffn(x))
    top = hidden[0].topk(TOP_UNITS, dim=-1)  # (L, TOP_UNITS)
    steps = {
        "units": top.indices.tolist(),
        "activations": _round(top.values),
        "active": (hidden[0] > 0).sum(-1).tolist(),
        "output": _vectors(out[0]),
    }
    return steps, out


def _embed(embed: nn.Sequential, ids: torch.Tensor):
    """Embedding times sqrt(d_model), plus the positional encoding: ``(steps, x)``."""
    tokens = embed[0](ids)  # (1, L, d_model), already times sqrt(d_model)
    pe = embed[1].pe[: ids.size(1)]  # (L, d_model)
    x = tokens + pe
    torch.testing.assert_close(x, embed(ids))
    steps = {
        "token": _vectors(tokens[0]),
        "position": _vectors(pe),
        "sum": _vectors(x[0]),
    }
    return steps, x


def step_through(
    model: nn.Module, tokenizer: Any, source: str, translation: str
) -> dict:
    """Every step of ``model`` reading ``source`` and re-reading its ``translation``.

    Args:
        model: an ``aiayn.model.Transformer`` in post-norm (the published one).
        tokenizer: its ``aiayn.data.tokenizer.Tokenizer``.
        source: the German sentence.
        translation: the model's English for it (fed to the decoder shifted right).

    Returns:
        A record of plain lists: ``tokens``, ``sizes``, ``encoder`` (``embed`` and ``layers``,
        each with ``input``, ``attention``, ``add_norm_1``, ``feed_forward``, ``add_norm_2``)
        and ``decoder`` (the same, with ``self_attention`` and ``cross_attention``), and the
        model's top next pieces at each target position.
    """
    c = model.config
    if c.norm_first:
        raise ValueError(
            "step_through follows the paper's post-norm layers; got a "
            "model with norm_first=True"
        )
    src = torch.tensor([tokenizer.encode(source) + [EOS]])  # (1, S)
    out_ids = tokenizer.encode(translation) + [EOS]
    tgt = torch.tensor([[BOS] + out_ids[:-1]])  # (1, T), shifted right
    src_mask = padding_mask(src, c.pad_id)  # (1, 1, 1, S)
    tgt_mask = decoder_mask(tgt, c.pad_id)  # (1, 1, T, T)
    piece = tokenizer.id_to_piece
    record: dict[str, Any] = {
        "tokens": {
            "source": [piece(i) for i in src[0].tolist()],
            "decoder_in": [piece(i) for i in tgt[0].tolist()],
            "decoder_out": [piece(i) for i in out_ids],
        },
        "sizes": {
            "d_model": c.d_model, "d_ff": c.d_ff, "h": c.h, "N": c.N,
            "d_k": model.encoder.layers[0].self_attn.d_k,
            "shown": SHOWN, "top_units": TOP_UNITS, "digits": DIGITS,
        },
    }  # fmt: skip
    was_training = model.training
    model.eval()
    with torch.no_grad():
        record["encoder"], memory = _encoder(model, src, src_mask)
        record["decoder"], y = _decoder(
            model, tgt, memory, src_mask, tgt_mask
        )
        logits = model.generator(y)  # (1, T, V)
        torch.testing.assert_close(logits, model(src, tgt))
        probs = logits[0].softmax(-1).topk(5, dim=-1)  # (T, 5)
    model.train(was_training)
    record["next"] = {
        "pieces": [
            [piece(i) for i in row] for row in probs.indices.tolist()
        ],
        "p": _round(probs.values),
    }
    return record


def _encoder(model: nn.Module, src: torch.Tensor, mask: torch.Tensor):
    embed, x = _embed(model.src_embed, src)
    layers = []
    for layer in model.encoder.layers:
        steps = {"input": _vectors(x[0])}
        steps["attention"], a = _attention(layer.self_attn, x, x, mask)
        steps["add_norm_1"], y = _add_and_norm(layer.sublayers[0].norm, x, a)
        steps["feed_forward"], f = _feed_forward(layer.feed_forward, y)
        steps["add_norm_2"], out = _add_and_norm(
            layer.sublayers[1].norm, y, f
        )
        torch.testing.assert_close(out, layer(x, mask))
        layers.append(steps)
        x = out
    torch.testing.assert_close(x, model.encode(src, mask))
    return {"embed": embed, "layers": layers}, x


def _decoder(
    model: nn.Module,
    tgt: torch.Tensor,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    tgt_mask: torch.Tensor,
):
    embed, x = _embed(model.tgt_embed, tgt)
    layers = []
    for layer in model.decoder.layers:
        steps = {"input": _vectors(x[0])}
        steps["self_attention"], a = _attention(
            layer.self_attn, x, x, tgt_mask, whole=False
        )
        steps["add_norm_1"], y = _add_and_norm(layer.sublayers[0].norm, x, a)
        steps["cross_attention"], b = _attention(
            layer.cross_attn, y, memory, src_mask, whole=False
        )
        steps["add_norm_2"], z = _add_and_norm(layer.sublayers[1].norm, y, b)
        steps["feed_forward"], f = _feed_forward(layer.feed_forward, z)
        steps["add_norm_3"], out = _add_and_norm(
            layer.sublayers[2].norm, z, f
        )
        torch.testing.assert_close(out, layer(x, memory, src_mask, tgt_mask))
        layers.append(steps)
        x = out
    return {"embed": embed, "layers": layers}, x


def softmax_rows(scores: list, d_k: int) -> torch.Tensor:
    """The softmax of stored raw scores over sqrt(d_k), masked ones (``None``) left out.

    Args:
        scores: nested lists ``(..., L_q, L_k)`` of q·k, ``None`` where masked.
        d_k: the query/key width per head.

    Returns:
        The weights, ``(..., L_q, L_k)``, 0 where masked.
    """
    raw = torch.tensor(
        json.loads(json.dumps(scores).replace("null", "NaN")),
        dtype=torch.float64,
    )
    scaled = raw / math.sqrt(d_k)
    return scaled.masked_fill(raw.isnan(), -math.inf).softmax(dim=-1)


def write_stepthrough(
    model: nn.Module,
    tokenizer: Any,
    out: str | os.PathLike,
    *,
    results: str | os.PathLike,
    line: int = LINE,
    root: str | os.PathLike | None = None,
) -> Path:
    """Step ``model`` through test2016 line ``line`` and its translation; write ``STEPTHROUGH``.

    Args:
        model, tokenizer: the published model (``aiayn.runs.published.load_published``).
        out: the folder to write into.
        results: the book's results, which hold the record ``multi30k.json`` and the
            translations it names (``aiayn.runs.published.results_dir()``).
        line: the test2016 line (from 0).
        root: the Multi30k folder (``aiayn.data.multi30k.data_dir``).

    Returns:
        The file written.
    """
    results = Path(results)
    record = json.loads((results / "multi30k.json").read_text())
    hypotheses = (results / record["hypotheses"]).read_text().splitlines()
    sources = [de for de, _ in load_multi30k("test2016", root)]
    if not 0 <= line < len(sources):
        raise ValueError(
            f"line must be in [0, {len(sources)}) for test2016, got {line}"
        )
    steps = step_through(model, tokenizer, sources[line], hypotheses[line])
    steps = {"line": line, "source": sources[line],
             "translation": hypotheses[line]} | steps  # fmt: skip
    path = Path(out) / STEPTHROUGH
    write_json_gz(path, steps)
    return path


def load_stepthrough(path: str | os.PathLike | None = None) -> dict:
    """The record ``write_stepthrough`` wrote (default: the one shipped with the package)."""
    if path is None:
        from ..runs.published import results_dir

        path = results_dir() / STEPTHROUGH
    return read_json_gz(path)


# --- The command: a file written into a folder, never over someone else's -------------------------

_MOST = 64 << 20  # bytes: a larger file is no record of these commands


def read_record(path: Path, fields: Sequence[str]) -> dict | None:
    """The gzipped JSON record at ``path`` when it is one with all of ``fields``, else ``None``."""
    try:
        if path.stat().st_size > _MOST:
            return None
        record = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, EOFError, ValueError):  # not gzip, not JSON, not UTF-8
        return None
    if not isinstance(record, dict) or not all(f in record for f in fields):
        return None
    return record


def _is_stepthrough(path: Path) -> bool:
    fields = ("line", "source", "translation", "tokens", "sizes", "encoder",
              "decoder", "next")  # fmt: skip
    return read_record(path, fields) is not None


def results_file(
    out: str,
    name: str,
    ours: Callable[[Path], bool],
    overwrite: bool = False,
    what: str = "this command",
) -> Path:
    """``out/name``, the one file a command writes into the folder ``--out``, checked before any work.

    Args:
        out: ``--out`` as given: a folder, new (created later, by ``claimed``) or existing.
        name: the file's name.
        ours: whether an existing file of that name is the command's own output.
        overwrite: replace an existing file that is not (``--overwrite``).
        what: the command, for the messages.

    Raises:
        cli.UsageError, NotADirectoryError, PermissionError, ValueError: one line naming the
        path and what to do: an empty ``--out``, a file or a link, a folder that cannot be
        written, or a file of that name that ``ours`` does not recognise.
    """
    expected = f"expected a folder to write {name} into"
    if not out.strip():
        raise cli.UsageError(
            f"--out must name a folder, got an empty string; {expected}"
        )
    folder = Path(out)
    blocking = next(
        (p for p in folder.parents if p.exists() and not p.is_dir()), None
    )
    if blocking is not None:
        raise NotADirectoryError(
            f"--out {folder}: {blocking} is a file, not a folder; {expected}"
        )
    if folder.is_symlink():
        raise ValueError(
            f"--out {folder} is a symbolic link; name the folder by its own path"
        )
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"--out {folder} is a file; {expected}")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(
            f"--out {folder}: {existing} is not a folder you can write into; "
            "choose another --out"
        )
    path = folder / name
    if path.is_symlink() or (path.exists() and not path.is_file()):
        kind = "a symbolic link" if path.is_symlink() else "not a file"
        raise ValueError(
            f"{path} is {kind}, which {what} would replace; move it away, "
            "or choose another --out"
        )
    if path.exists() and not overwrite and not ours(path):
        raise ValueError(
            f"{path} is not a file {what} wrote (not its gzipped JSON record), "
            "and writing would replace it; move it away, choose another --out, "
            "or add --overwrite to replace it"
        )
    return path


@contextlib.contextmanager
def claimed(folder: Path) -> Iterator[Path]:
    """Create ``folder`` if it is new and hold its ``flock`` for the block: one writer at a time.

    A second command fails at once (``aiayn.export.folders.FolderInUse``). When the block fails, the
    folders this created are removed again (only while they are empty).
    """
    from ..export.folders import hold_folder

    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PermissionError(
            f"--out {folder}: cannot create {err.filename or folder} "
            f"({err.strerror}); choose a folder you can write to"
        ) from None
    done, fd = False, None
    try:
        fd = hold_folder(folder)
        yield folder
        done = True
    finally:
        if fd is not None:
            os.close(fd)
        if not done:
            for p in created:  # the deepest first
                with contextlib.suppress(OSError):
                    p.rmdir()


def check_inputs(
    what: str, root: str | None, splits: Sequence[str], instead: str = ""
) -> None:
    """Refuse, before any work, a model folder or Multi30k files that cannot be read; nothing is downloaded.

    Args:
        what: the command, for the messages.
        root: ``--data`` (default ``$AIAYN_DATA``, else the user cache).
        splits: the Multi30k splits the command reads.
        instead: what the message adds to a run folder's refusal.
    """
    from ..data.multi30k import BASE_URL, SPLITS, data_dir
    from ..export.folders import check_model_folder
    from ..runs.published import model_dir

    check_model_folder(model_dir(), what, instead, offline=True)
    folder = data_dir(root)
    names = [
        f"{SPLITS[s]}.{lang}.gz" for s in splits for lang in ("de", "en")
    ]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        where = (
            "--data"
            if root is not None
            else "$AIAYN_DATA, else the user cache"
        )
        raise FileNotFoundError(
            f"the Multi30k folder {folder} (from {where}) lacks "
            f"{', '.join(missing)}, which {what} reads: point --data or "
            f"AIAYN_DATA at the folder that holds them, or download them "
            f"from {BASE_URL}"
        )


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser(
        "python -m aiayn.stepthrough", __doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser(
        "write", help=f"step the published model through a test line "
        f"and write {STEPTHROUGH}"
    )  # fmt: skip
    w.add_argument("--line", type=int, default=LINE)
    w.add_argument(
        "--out",
        default="src/aiayn/results",
        help=f"the folder to write {STEPTHROUGH} into "
        "(default src/aiayn/results)",
    )
    w.add_argument(
        "--overwrite",
        action="store_true",
        help=f"replace a {STEPTHROUGH} there that this command did not write",
    )
    w.add_argument("--data", default=None, help="the Multi30k folder")
    w.add_argument("--debug", action="store_true",
                   help="show the traceback of an error")  # fmt: skip
    return parser


def _command(args: argparse.Namespace) -> int:
    from ..runs.published import load_published, results_dir

    what = "python -m aiayn.stepthrough write"
    path = results_file(
        args.out, STEPTHROUGH, _is_stepthrough, args.overwrite, what
    )
    check_inputs(what, args.data, ["test2016"])
    count = len(load_multi30k("test2016", args.data, download=False))
    if not 0 <= args.line < count:
        raise cli.UsageError(
            f"--line must be in [0, {count}) for test2016, got {args.line}"
        )
    with claimed(path.parent):
        # again under the lock: another command may have written it meanwhile
        results_file(
            args.out, STEPTHROUGH, _is_stepthrough, args.overwrite, what
        )
        _, tokenizer, model, _ = load_published(download=False)
        path = write_stepthrough(model, tokenizer, path.parent, line=args.line,
                                 results=results_dir(), root=args.data)  # fmt: skip
    print(f"{path}: {path.stat().st_size:,} bytes")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiayn.stepthrough write [--line N] [--out DIR] [--overwrite]``.

    A wrong argument, folder or input prints one ``error: ...`` line and exits with status 2,
    another failure (a full disk) one line with status 1 (``aiayn.cli.run``).
    """
    return cli.run(_parser(), argv, _command)


if __name__ == "__main__":
    raise SystemExit(main())
