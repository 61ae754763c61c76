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
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import cli
from .attention import scaled_dot_product_attention
from .checks import read_json_gz, write_json_gz
from .data import BOS, EOS, load_multi30k
from .masks import decoder_mask, padding_mask

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
    q, k, v = mha._projections(query, memory, memory)  # (1, h, L, d_k)
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
        tokenizer: its ``aiayn.tokenizer.Tokenizer``.
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
        model, tokenizer: the published model (``aiayn.published.load_published``).
        out: the folder to write into.
        results: the book's results, which hold the record ``multi30k.json`` and the
            translations it names (``aiayn.published.results_dir()``).
        line: the test2016 line (from 0).
        root: the Multi30k folder (``aiayn.data.data_dir``).

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
        from .published import results_dir

        path = results_dir() / STEPTHROUGH
    return read_json_gz(path)


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
    w.add_argument("--out", default="src/aiayn/results")
    w.add_argument("--data", default=None, help="the Multi30k folder")
    w.add_argument("--debug", action="store_true",
                   help="show the traceback of an error")  # fmt: skip
    return parser


def _command(args: argparse.Namespace) -> int:
    from .published import load_published, results_dir

    _, tokenizer, model, _ = load_published()
    path = write_stepthrough(model, tokenizer, args.out, line=args.line,
                             results=results_dir(), root=args.data)  # fmt: skip
    print(f"{path}: {path.stat().st_size:,} bytes")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiayn.stepthrough write [--line N] [--out DIR]``."""
    return cli.run(_parser(), argv, _command)


if __name__ == "__main__":
    raise SystemExit(main())
