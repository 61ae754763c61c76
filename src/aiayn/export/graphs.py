"""The translator as ONNX graphs: what ``python -m aiayn.export`` writes, and how.

An export of the published model or any run folder is a folder of:

- ``encoder.onnx``: source ids ``src (batch, src_len)`` and a ``head_mask (3, N, h)`` ->
  ``memory (batch, src_len, d_model)`` and ``encoder_attention (N, batch, h, src_len, src_len)``,
  the weights of every layer and head;
- ``decoder.onnx``: ``memory``, ``src`` and a ``prefix (batch, tgt_len)`` that starts with ``<bos>``
  -> ``log_probs (batch, V)`` of the token after the prefix, ``cross_attention
  (N, batch, h, tgt_len, src_len)`` and ``decoder_attention (N, batch, h, tgt_len, tgt_len)``. It
  reruns the whole prefix at every step: the simple reference the cached graphs are held to;
- ``cross_kv.onnx``: ``memory`` -> ``cross_k``, ``cross_v (N, batch, h, src_len, d_k)``, the
  keys and values every decoder layer's cross-attention reads, computed once a sentence;
- ``decoder_step.onnx``: the decoder over new positions only, ``tokens (batch, new_len)``, with
  ``src``, ``cross_k``, ``cross_v``, the key/value cache of the earlier positions ``past_k``,
  ``past_v (N, batch, h, past_len, d_k)``, the ids to score, ``targets (K,)`` (all V, or a
  sentence's shortlist, ``aiayn.export.shortlist``) and the ``head_mask`` -> ``log_probs (batch, K)`` over those ids,
  ``present_k``, ``present_v`` (the cache one step longer) and the new positions'
  ``cross_attention`` and ``decoder_attention``. A step costs one position, not the whole prefix;
- the ``head_mask (3, N, h)`` of the encoder and the step graph: float32 0 and 1, kind
  (``aiayn.model.HEAD_KINDS``: encoder, decoder self, cross) × layer × head, each head's output
  times its number before W^O as ``MultiHeadAttention.attend`` does (``set_head_mask``); all ones
  changes no bit. ``decoder.onnx``, the reference, has none;
- ``*.int8.onnx``: the same graphs with int8 weights
  (``onnxruntime.quantization.quantize_dynamic``); the book's page downloads the encoder,
  ``cross_kv`` and ``decoder_step`` ones (``PAGE_GRAPHS``);
- ``tokenizer.json``: the sentencepiece pieces and scores, for the tokenizer the page runs;
- ``translator.json``: the decoding settings of the run (beam, alpha, output limit);
- ``shortlist.json`` (when the export is given training pairs): the lexical shortlist the page
  scores (``aiayn.export.shortlist``);
- ``manifest.json``: every file's SHA-256 and size, and the BLEU on test 2016 of these exact files
  (the command adds it). The manifest names no path of the machine that wrote it.

``export`` writes them into a new or empty folder. The command (``aiayn.export.command``) checks its
arguments first, writes into a staged folder and scores the files with the search the page runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..attention import set_fused
from ..files import atomic_write, sha256_file
from ..runs.folder import shown
from .shortlist import FILE as SHORTLIST_JSON

# every graph an export writes; the page and onnx_translator run PAGE_GRAPHS
GRAPHS = ("encoder", "decoder", "cross_kv", "decoder_step")
PAGE_GRAPHS = ("encoder", "cross_kv", "decoder_step")
HEAD_MASK = "head_mask"  # an input of the encoder and the step graph
ENCODER_INPUTS = ["src", HEAD_MASK]
ENCODER_OUTPUTS = ["memory", "encoder_attention"]
DECODER_INPUTS = ["memory", "src", "prefix"]
DECODER_OUTPUTS = ["log_probs", "cross_attention", "decoder_attention"]
CROSS_KV_OUTPUTS = ["cross_k", "cross_v"]
STEP_INPUTS = [
    "tokens",
    "src",
    "cross_k",
    "cross_v",
    "past_k",
    "past_v",
    "targets",
    HEAD_MASK,
]
STEP_OUTPUTS = [
    "log_probs",
    "present_k",
    "present_v",
    "cross_attention",
    "decoder_attention",
]
MANIFEST = "manifest.json"
EXPORT_FORMAT = "aiayn-export/1"  # the manifest's "format": how an export is told from others
TOKENIZER_JSON = "tokenizer.json"
SETTINGS_JSON = "translator.json"


def graph_file(name: str, int8: bool) -> str:
    """``encoder.onnx``, ``decoder.int8.onnx`` ..."""
    return f"{name}.int8.onnx" if int8 else f"{name}.onnx"


class _NoBar:
    """What ``_bar`` gives when no bar is shown."""

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *error) -> None:
        pass


def _bar(total: int, desc: str, unit: str, progress: bool):
    """A tqdm bar on a terminal; none with ``progress=False``, off a terminal or without tqdm."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with the book's extras
        return _NoBar()
    if not progress:
        return _NoBar()
    # disable=None: no bar when stderr is not a terminal (a log file, a pipe)
    return tqdm(total=total, desc=desc, unit=unit, disable=None,
                dynamic_ncols=True, leave=False)  # fmt: skip


@contextlib.contextmanager
def _quiet(*names: str) -> Iterator[None]:
    """Hold the loggers ``names`` (``""``: the root) to errors: the exporters' notes are not ours."""
    loggers = [logging.getLogger(n or None) for n in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


# --- The graphs -----------------------------------------------------------------------------------


class EncoderGraph(nn.Module):
    """``src`` -> ``memory`` and the encoder's attention weights, the masks built inside.

    The model's own ``encode`` checks shapes in Python, which tracing cannot follow; here the
    padding mask is one tensor expression. The explicit attention path keeps every layer's weights.
    ``head_mask (3, N, h)``: the encoder's heads are ``head_mask[0]``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, head_mask: torch.Tensor):
        m = self.model
        src_mask = (src != m.config.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        with _heads(m, head_mask):
            memory = m.encoder(m.src_embed(src), src_mask)  # (B, S, d_model)
        weights = [layer.self_attn.attn for layer in m.encoder.layers]
        return memory, torch.stack(weights)  # (N, B, h, S, S)


class DecoderGraph(nn.Module):
    """``memory, src, prefix`` -> log-probabilities of the next token and the decoder's attention."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self, memory: torch.Tensor, src: torch.Tensor, prefix: torch.Tensor
    ):
        m = self.model
        src_mask = (src != m.config.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        T = prefix.size(1)
        causal = torch.ones(
            T, T, dtype=torch.bool, device=prefix.device
        ).tril()
        tgt_mask = (prefix != m.config.pad_id)[:, None, None, :] & causal
        x = m.decoder(m.tgt_embed(prefix), memory, src_mask, tgt_mask)
        log_probs = m.generator(x[:, -1]).float().log_softmax(-1)  # (B, V)
        layers = m.decoder.layers
        cross = torch.stack([layer.cross_attn.attn for layer in layers])
        self_attn = torch.stack([layer.self_attn.attn for layer in layers])
        # (B, V), (N, B, h, T, S), (N, B, h, T, T)
        return log_probs, cross, self_attn


class CrossKVGraph(nn.Module):
    """``memory`` -> every decoder layer's cross-attention keys and values, computed once a sentence.

    They depend on the source only, so the step graph reads them instead of projecting the
    memory again at every step.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, memory: torch.Tensor):
        B, S = memory.size(0), memory.size(1)
        ks, vs = [], []
        for layer in self.model.decoder.layers:
            a = layer.cross_attn
            k = a.w_k(memory).view(B, S, a.h, a.d_k)  # (B, S, h, d_k)
            v = a.w_v(memory).view(B, S, a.h, a.d_v)  # (B, S, h, d_v)
            ks.append(k.transpose(1, 2))  # (B, h, S, d_k)
            vs.append(v.transpose(1, 2))  # (B, h, S, d_v)
        return torch.stack(ks), torch.stack(vs)  # (N, B, h, S, d_k)


class DecoderStepGraph(nn.Module):
    """The decoder over new positions only, with the keys and values of the earlier ones.

    ``tokens (B, L)`` are positions ``P .. P + L - 1`` (no padding among them), ``past_k`` and
    ``past_v (N, B, h, P, d_k)`` the self-attention keys and values of positions ``0 .. P - 1``
    (``P = 0``: none yet), ``cross_k`` and ``cross_v`` what ``CrossKVGraph`` gives, ``targets
    (K,)`` the ids to score: the output layer gives every id's logit (one product with the constant
    weight, int8 in the int8 graph), then picks the targets' columns and takes the log-softmax over
    them. Returns the log-probabilities of the token after the last one over the targets
    ``(B, K)``, ``present_k`` and ``present_v`` (the cache grown by L positions), and the attention
    weights of the new positions. Searching, L is 1; with ``P = 0``, the whole prefix and every id
    as targets it is ``DecoderGraph``. ``head_mask (3, N, h)``: the decoder's heads are
    ``head_mask[1]`` (self-attention) and ``head_mask[2]`` (cross-attention).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self, tokens, src, cross_k, cross_v, past_k, past_v, targets,
        head_mask,
    ):  # fmt: skip
        with _heads(self.model, head_mask):
            return self._step(
                tokens, src, cross_k, cross_v, past_k, past_v, targets
            )

    def _step(self, tokens, src, cross_k, cross_v, past_k, past_v, targets):
        m = self.model
        B, L, P = tokens.size(0), tokens.size(1), past_k.size(3)
        src_mask = (src != m.config.pad_id)[:, None, None, :]  # (B, 1, 1, S)
        # query i (position P + i) sees the keys of positions 0 .. P + i
        keys = torch.arange(P + L, device=tokens.device)
        causal = keys[None, :] <= keys[P:, None]  # (L, P + L)
        x = m.tgt_embed[0](tokens)  # (B, L, d_model)
        x = m.tgt_embed[1](x, P)  # positions P .. P + L - 1
        present_k, present_v, crosses, selves = [], [], [], []
        for n, layer in enumerate(m.decoder.layers):

            def attend_self(y, a=layer.self_attn, n=n):
                q, k, v = a.projections(y, y, y)  # (B, h, L, d_k)
                k = torch.cat([past_k[n], k], 2)  # (B, h, P + L, d_k)
                v = torch.cat([past_v[n], v], 2)  # (B, h, P + L, d_v)
                present_k.append(k)
                present_v.append(v)
                heads = a.attend(q, k, v, causal, fused=False)
                selves.append(a.attn)  # (B, h, L, P + L)
                return _merged(a, heads)

            def attend_source(y, a=layer.cross_attn, n=n):
                q = a.w_q(y).view(B, L, a.h, a.d_k).transpose(1, 2)
                heads = a.attend(q, cross_k[n], cross_v[n], src_mask, False)
                crosses.append(a.attn)  # (B, h, L, S)
                return _merged(a, heads)

            x = layer.sublayers[0](x, attend_self)
            x = layer.sublayers[1](x, attend_source)
            x = layer.sublayers[2](x, layer.feed_forward)
        x = m.decoder.norm(x)
        # every id's logit, a product with the constant (int8) weight, then
        # the targets' columns: (B, V) -> (B, K)
        logits = m.generator(x[:, -1]).index_select(1, targets)
        log_probs = logits.float().log_softmax(-1)  # (B, K)
        # (B, K), (N, B, h, P + L, d_k) twice, (N, B, h, L, S), (N, B, h, L, P + L)
        return (
            log_probs,
            torch.stack(present_k),
            torch.stack(present_v),
            torch.stack(crosses),
            torch.stack(selves),
        )


@contextlib.contextmanager
def _heads(model: nn.Module, head_mask: torch.Tensor) -> Iterator[None]:
    """``set_head_mask`` for a graph's input: each module's ``head_mask[kind, layer] (h,)``.

    Unchecked (an exported graph cannot branch on the values): the translator checks a mask
    before it runs one (``aiayn.export.onnx_model.check_head_mask``).
    """
    grid = model.attention_grid()  # (3, N) modules
    previous = [(a, a.head_mask) for row in grid for a in row]
    for k, row in enumerate(grid):
        for n, a in enumerate(row):
            a.head_mask = head_mask[k, n]  # (h,)
    try:
        yield
    finally:
        for a, was in previous:
            a.head_mask = was


def _merged(attention: nn.Module, heads: torch.Tensor) -> torch.Tensor:
    """``(B, h, L, d_v)`` heads side by side, through ``W^O``: ``(B, L, d_model)``."""
    B, h, L, d_v = heads.shape
    concat = heads.transpose(1, 2).reshape(B, L, h * d_v)  # (B, L, h * d_v)
    return attention.w_o(concat)


def _save_graph(graph: nn.Module, args, names, outputs, shapes, path: Path):
    """``torch.onnx.export`` of one graph (the dynamo exporter), inputs named and sized."""
    program = torch.onnx.export(
        graph,
        args,
        dynamo=True,
        input_names=names,
        output_names=outputs,
        dynamic_shapes=dict(zip(names, shapes, strict=True)),
        verbose=False,
    )
    # torch.onnx keeps each node's Python stack trace, which names this machine's
    # files; the published graphs carry none (and their bytes do not depend on it)
    for node in program.model.graph.all_nodes():
        node.metadata_props.pop("pkg.torch.onnx.stack_trace", None)
    program.save(str(path))


def export_graphs(
    model: nn.Module, out: Path, progress: bool = False
) -> list[Path]:
    """Write the four float32 graphs (``GRAPHS``) with symbolic batch and lengths.

    The examples have batch 2 and lengths above 1, so that no dimension is specialised to 0 or 1.
    The model is left in eval mode (dropout off), with the attention path it had. ``progress``:
    a bar over the graphs.
    """
    import warnings

    model = model.float().eval()
    max_len = model.config.max_len
    batch = torch.export.Dim("batch", min=1, max=1024)
    S = torch.export.Dim("src_len", min=1, max=max_len)
    T = torch.export.Dim("tgt_len", min=1, max=max_len)
    L = torch.export.Dim("new_len", min=1, max=max_len)
    P = torch.export.Dim("past_len", min=0, max=max_len - 1)
    K = torch.export.Dim("targets", min=1, max=model.config.tgt_vocab_size)
    targets = torch.arange(2, 13)  # (11,): K unlike every other example size
    src = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 6, 7, 2, 0, 0]])  # (2, 6)
    prefix = torch.tensor([[1, 5, 6], [1, 7, 8]])  # (2, 3)
    ones = torch.ones(model.head_mask_shape)  # (3, N, h): every head
    paths = [out / graph_file(n, False) for n in GRAPHS]
    with (
        set_fused(model, False),  # the explicit path keeps the weights
        torch.no_grad(),
        warnings.catch_warnings(),
        _quiet("torch.onnx"),
        _bar(len(GRAPHS), "ONNX export", "graph", progress) as bar,
    ):
        warnings.simplefilter("ignore")  # the exporter's notes
        memory = EncoderGraph(model)(src, ones)[0]
        cross_k, cross_v = CrossKVGraph(model)(memory)  # (N, 2, h, 6, d_k)
        # the cache after the first two positions, fed the next two
        past = DecoderStepGraph(model)(
            prefix[:, :2], src, cross_k, cross_v,
            *(cross_k[:, :, :, :0],) * 2, targets, ones,
        )[1:3]  # fmt: skip
        rows_and_src = {1: batch, 3: S}
        rows_and_past = {1: batch, 3: P}
        graphs = [
            (EncoderGraph, (src, ones), ENCODER_INPUTS, ENCODER_OUTPUTS,
             [{0: batch, 1: S}, None]),
            (DecoderGraph, (memory, src, prefix), DECODER_INPUTS,
             DECODER_OUTPUTS, [{0: batch, 1: S}, {0: batch, 1: S},
                               {0: batch, 1: T}]),
            (CrossKVGraph, (memory,), ["memory"], CROSS_KV_OUTPUTS,
             [{0: batch, 1: S}]),
            (DecoderStepGraph,
             (prefix[:, 1:], src, cross_k, cross_v, *past, targets, ones),
             STEP_INPUTS, STEP_OUTPUTS,
             [{0: batch, 1: L}, {0: batch, 1: S}, rows_and_src,
              rows_and_src, rows_and_past, rows_and_past, {0: K}, None]),
        ]  # fmt: skip
        for path, (graph, args, names, outputs, shapes) in zip(
            paths, graphs, strict=True
        ):
            bar.set_postfix_str(path.name)
            _save_graph(graph(model), args, names, outputs, shapes, path)
            bar.update()
    model.eval()
    return paths


# the output layer's weight, tied to the target embeddings
GENERATOR = "model.generator.weight"


def _one_generator_copy(path: Path) -> None:
    """One int8 copy of the tied weight ``W (V, d_model)``, read by the embedding and the output layer.

    ``quantize_dynamic`` quantizes it twice: ``W`` for the embedding's Gather and ``W^T (d_model, V)``
    for the output layer's product, another 4 MB to download. The product reads
    ``Transpose(W_quantized)`` with ``W``'s scale and zero point instead: the same int8 values
    transposed, which onnxruntime folds into a constant when it loads the graph. A graph without both
    copies is left as it is.
    """
    import onnx

    model = onnx.load(str(path))
    graph = model.graph
    # (V, d_model) and (d_model, V), each with a _scale and a _zero_point
    first, second = f"{GENERATOR}_quantized", f"{GENERATOR}_Transposed"
    dims = {t.name: list(t.dims) for t in graph.initializer}
    if not {first, f"{second}_quantized"} <= dims.keys():
        return
    if dims[first][::-1] != dims[f"{second}_quantized"]:
        raise ValueError(
            f"{path.name}: expected {second}_quantized to be {first} "
            f"transposed, got shapes {dims[f'{second}_quantized']} and "
            f"{dims[first]}"
        )
    renamed = {
        f"{second}_scale": f"{GENERATOR}_scale",
        f"{second}_zero_point": f"{GENERATOR}_zero_point",
    }
    for node in graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    for t in [t for t in graph.initializer if t.name.startswith(second)]:
        graph.initializer.remove(t)
    transpose = onnx.helper.make_node(
        "Transpose", [first], [f"{second}_quantized"], perm=[1, 0],
        name="generator_weight_transposed",
    )  # fmt: skip
    graph.node.insert(0, transpose)
    onnx.save(model, str(path))


# onnxruntime-web's int8 product (MLAS's WebAssembly kernel) packs its
# weight again at every run, reading 8 bytes of each of 128 rows at a time:
# rows 2048 bytes apart fall into a few sets of the CPU's L1 cache, and a
# step's 512 x 2048 products took over twice the time they take 16 columns
# wider (tools/product_timing.py, results/product_timing.json); widening
# the rows 512 bytes long as well made the page's step no faster, so only
# rows a multiple of ALIASED_ROW long are widened
ALIASED_ROW = 1024  # bytes of one int8 weight row
ROW_PADDING = 16  # zero columns added: rows stay 16-byte aligned


def _biased_product(node, readers: dict, tables: dict):
    """``MatMulInteger(x, W)`` -> ``Cast`` -> ``Mul`` -> ``Add(bias)``, as
    ``quantize_dynamic`` writes a linear layer: ``(cast, mul, add, bias)``,
    or None for a product of another form."""

    def only(name: str, op_type: str):
        found = readers.get(name, [])
        if len(found) == 1 and found[0].op_type == op_type:
            return found[0]
        return None

    cast = only(node.output[0], "Cast")
    mul = cast and only(cast.output[0], "Mul")
    add = mul and only(mul.output[0], "Add")
    if add is None:
        return None
    other = [i for i in add.input if i != mul.output[0]]
    bias = tables.get(other[0]) if len(other) == 1 else None
    return None if bias is None else (cast, mul, add, bias)


def _unaliased_rows(path: Path, row: int = ALIASED_ROW) -> int:
    """Widen the int8 weights whose rows are a multiple of ``row`` bytes
    long by ``ROW_PADDING`` columns.

    In each such linear layer (``_biased_product``) W ``(K, N)`` gets
    ``ROW_PADDING`` columns of its zero point, the bias as many zeros, and
    a ``Slice`` after the ``Add`` keeps the first N columns: the same
    numbers, since each column of the product reads its own column of W
    (``tests/test_export.py``). Returns how many layers it widened.
    """
    import numpy as np
    import onnx
    from onnx.numpy_helper import from_array, to_array

    model = onnx.load(str(path))
    graph = model.graph
    tables = {t.name: t for t in graph.initializer}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    start, axis = "unaliased_rows_start", "unaliased_rows_axis"
    cuts, stale = {}, set()  # Add's output -> its Slice; tensors grown
    for node in graph.node:
        if node.op_type != "MatMulInteger" or len(node.input) < 4:
            continue
        weight, zero = (tables.get(i) for i in node.input[1::2])
        layer = _biased_product(node, readers, tables)
        if None in (weight, zero, layer) or len(weight.dims) != 2:
            continue
        cast, mul, add, bias = layer
        K, N = weight.dims
        if N % row or list(bias.dims) != [N]:
            continue
        zero = to_array(zero)  # W's zero point
        pad = np.full((K, ROW_PADDING), zero, zero.dtype)
        wide = np.concatenate([to_array(weight), pad], 1)
        weight.CopyFrom(from_array(wide, weight.name))  # (K, N + pad)
        b = to_array(bias)  # (N,)
        b = np.concatenate([b, np.zeros(ROW_PADDING, b.dtype)])
        bias.CopyFrom(from_array(b, bias.name))  # (N + pad,)
        end = f"unaliased_rows_end_{N}"
        if end not in tables:
            tables[end] = from_array(np.array([N], np.int64), end)
            graph.initializer.append(tables[end])
        summed = add.output[0]
        add.output[0] = f"{summed}_wide"
        cuts[add.output[0]] = onnx.helper.make_node(
            "Slice", [add.output[0], start, end, axis], [summed],
            name=f"{add.name}_first_columns",
        )  # fmt: skip
        stale |= {node.output[0], cast.output[0], mul.output[0]}
    if not cuts:
        return 0
    for name, value in ((start, 0), (axis, -1)):
        graph.initializer.append(
            from_array(np.array([value], np.int64), name)
        )
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if node.op_type == "Add" and node.output[0] in cuts:
            nodes.append(cuts[node.output[0]])
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [v for v in graph.value_info if v.name not in stale]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    onnx.save(model, str(path))
    return len(cuts)


def quantize_graphs(out: Path, progress: bool = False) -> list[Path]:
    """int8 copies of the graphs: the weights of every matrix product and the embedding table as
    int8 with a scale, activations quantized on the fly (``quantize_dynamic``); the tied embedding
    and output weight once (``_one_generator_copy``); rows the page's int8 product reads slowly
    widened (``_unaliased_rows``)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    paths = []
    # onnxruntime advises pre-processing through the root logger, once a graph
    with _quiet(""), _bar(len(GRAPHS), "int8", "graph", progress) as bar:
        for name in GRAPHS:
            target = out / graph_file(name, True)
            bar.set_postfix_str(target.name)
            source = out / graph_file(name, False)
            quantize_dynamic(source, target, weight_type=QuantType.QInt8)
            _one_generator_copy(target)
            _unaliased_rows(target)
            paths.append(target)
            bar.update()
    return paths


def tokenizer_record(tokenizer) -> dict[str, Any]:
    """What the page's tokenizer needs: every piece with its score, the special ids, the rules."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(tokenizer.sp.serialized_model_proto())
    spec = proto.normalizer_spec
    if proto.trainer_spec.model_type != proto.trainer_spec.BPE:
        raise ValueError(
            "the page's tokenizer reads BPE models only, got "
            f"{proto.trainer_spec.ModelType.Name(proto.trainer_spec.model_type)}"
        )
    if spec.name != "identity" or spec.remove_extra_whitespaces:
        raise ValueError(
            "the page's tokenizer leaves text as it is: expected the identity normaliser "
            f"without removing spaces, got {spec.name!r}, "
            f"remove_extra_whitespaces={spec.remove_extra_whitespaces}"
        )
    kinds = {1: "normal", 2: "unknown", 3: "control", 4: "user", 6: "byte"}
    return {
        "pieces": [[p.piece, p.score] for p in proto.pieces],
        "types": [kinds.get(p.type, str(p.type)) for p in proto.pieces],
        "pad_id": proto.trainer_spec.pad_id,
        "bos_id": proto.trainer_spec.bos_id,
        "eos_id": proto.trainer_spec.eos_id,
        "unk_id": proto.trainer_spec.unk_id,
        "add_dummy_prefix": spec.add_dummy_prefix,
    }


def _files_entry(out: Path, names: Sequence[str]) -> dict[str, dict]:
    entries = {}
    for name in names:
        size, digest = sha256_file(out / name)
        entries[name] = {"bytes": size, "sha256": digest}
    return entries


def export(
    model: nn.Module,
    tokenizer,
    settings: dict[str, Any],
    out: str | os.PathLike,
    source: dict[str, Any] | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    shortlist: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the graphs, their int8 copies, ``tokenizer.json``, ``translator.json`` and a manifest.

    Args:
        model: a ``Transformer`` (any dtype: it is exported as float32, and left in eval mode).
        tokenizer: its ``Tokenizer``.
        settings: ``beam``, ``length_penalty``, ``max_len_a``, ``max_len_b``, ``max_len``.
        out: a new or empty folder (created). The command writes into a temporary one and
            renames it; see ``main``.
        source: what the weights are (recorded in the manifest).
        progress: progress bars on a terminal.
        log: called with a line before and after each step (e.g. ``print``).
        shortlist: ``aiayn.export.shortlist.build``'s record, written as ``shortlist.json`` for the
            page (none: the page scores every id).

    Returns:
        The manifest (no BLEU yet: ``score_files`` adds it).
    """
    import onnx
    import onnxruntime

    say = log or (lambda line: None)
    out = Path(out)
    if out.is_dir() and any(out.iterdir()):
        names = sorted(p.name for p in out.iterdir())
        raise ValueError(
            f"export writes into a new or empty folder, got {out} holding "
            f"{shown(names)}"
        )
    record = tokenizer_record(tokenizer)  # refuses now, not after the graphs
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    files = ", ".join(graph_file(n, False) for n in GRAPHS)
    say(f"exporting the float32 graphs ({files}) ...")
    export_graphs(model, out, progress)
    say(
        f"exported the float32 graphs in {time.perf_counter() - started:.0f} s"
    )
    step = time.perf_counter()
    say("quantizing them to int8 (*.int8.onnx) ...")
    quantize_graphs(out, progress)
    say(f"quantized in {time.perf_counter() - step:.0f} s")
    atomic_write(
        out / TOKENIZER_JSON,
        json.dumps(record, ensure_ascii=False).encode(),
    )
    atomic_write(
        out / SETTINGS_JSON, json.dumps(settings, indent=1).encode()
    )
    extra = [TOKENIZER_JSON, SETTINGS_JSON]
    if shortlist is not None:
        atomic_write(out / SHORTLIST_JSON, json.dumps(shortlist).encode())
        extra.append(SHORTLIST_JSON)
    names = [graph_file(n, q) for q in (False, True) for n in GRAPHS]
    page = [graph_file(n, True) for n in PAGE_GRAPHS]
    manifest = {
        "format": EXPORT_FORMAT,
        "what": "the translator as ONNX graphs (aiayn.export.command); the page "
        f"downloads {', '.join([*page, *extra])}",
        "source": source or {},
        "settings": settings,
        "inputs": {
            "encoder": ENCODER_INPUTS,
            "decoder": DECODER_INPUTS,
            "cross_kv": ["memory"],
            "decoder_step": STEP_INPUTS,
        },
        "outputs": {
            "encoder": ENCODER_OUTPUTS,
            "decoder": DECODER_OUTPUTS,
            "cross_kv": CROSS_KV_OUTPUTS,
            "decoder_step": STEP_OUTPUTS,
        },
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        "export_s": round(time.perf_counter() - started, 1),
        "files": _files_entry(out, [*names, *extra]),
        "page_files": [*page, *extra],
        "page_bytes": sum((out / n).stat().st_size for n in (*page, *extra)),
        "bleu": {},
    }
    atomic_write(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest
