"""Turning a trained model into translations: greedy decoding, beam search and sampling.

All three generate one token at a time, and the encoder runs once. Two ways to run a step:

- ``use_cache=False``, the reference: the decoder runs again over the whole prefix generated so
  far, the same call as in training, ``model.decode(memory, src_mask, prefix,
  decoder_mask(prefix))``, and only the last position's prediction is used.
- ``use_cache=True`` (default): a ``DecoderCache`` keeps every layer's keys and values, so a step
  runs the decoder over the one new position; the source's keys and values are projected once.
  Same numbers up to float rounding (the tests compare the logits of every step with the
  teacher-forced forward), several times faster on long outputs.

Outputs start with ``<bos>`` and have at most ``max_len`` columns, ``<bos>`` included. A sentence
that has produced ``<eos>`` is finished: from then on its row is filled with the padding id
(``model.config.pad_id``). Generation stops as soon as every sentence is finished. ``max_len``
may also give one limit per sentence, so that sentences of different lengths can share a batch
(``decode_sorted`` does this).

A finished sentence stops costing anything: with ``prune=True`` (default) its rows leave the
working batch (memory, masks, prefixes, scores and both key/value caches), its output is kept
aside, and the outputs are put back in input order at the end. In beam search a finished beam
stops costing too: the decoder runs over the beams still growing only, while the finished ones
wait, with their scores, for the rest of their sentence. ``prune=False`` computes every row until
the last sentence ends, as a reference; the tokens are the same.

The functions switch the model to eval mode (no dropout) while they run, and back afterwards.

On an x86 CPU the linear layers run on oneDNN's matrix product while they decode (``onednn=True``,
default; see ``onednn_linear``): twice as fast as the MKL product PyTorch calls otherwise, on the
AMD CPU of these measurements. Both are float32; only the order of the sums differs, so a logit
may differ in its last bits, as it does between batch sizes. Measured with the published model,
beam 4: all 1,000 test and 1,014 val translations identical to ``onednn=False``.

    B  batch        K  beam size        S  source length        T  length of the prefix so far
    V  target vocabulary size        d_model  model width
"""

from __future__ import annotations

import contextlib
import functools
import math
import numbers
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import register_flop_formula

from .attention import packed_weights_kept
from .checks import check_int, check_token_dtype
from .layers import DecoderCache
from .masks import decoder_mask, padding_mask

__all__ = [
    "greedy_decode",
    "beam_search",
    "BeamSearchOutput",
    "sample",
    "gnmt_length_penalty",
    "length_penalty_limit",
    "decode_sorted",
    "onednn_linear",
    "onednn_available",
]

MaxLen = int | Sequence[int] | torch.Tensor


# --- Shared pieces --------------------------------------------------------------------------------


@functools.cache
def onednn_available() -> bool:
    """Whether ``onednn_linear`` can run here: an x86 CPU with AVX, PyTorch built with oneDNN, and
    its product agreeing with ``F.linear`` on a small example (the op is PyTorch's own, not a
    public API: another PyTorch version may change it, and then decoding uses ``F.linear``)."""
    capability = torch.backends.cpu.get_cpu_capability()  # "AVX512", ...
    if not (
        capability.startswith("AVX")
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    ):
        return False
    g = torch.Generator().manual_seed(0)
    x, w, b = (
        torch.randn(*shape, generator=g) for shape in ((3, 8), (5, 8), (5,))
    )
    # float32 throughout, even when first asked inside an autocast block
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        try:
            with onednn_linear():
                y = F.linear(x, w, b)
        except (RuntimeError, TypeError):
            return False
        return torch.allclose(y, F.linear(x, w, b), atol=1e-5)


class onednn_linear(
    TorchFunctionMode
):  # lower case: used as ``with onednn_linear():``
    """Inside the block, compute ``F.linear`` on float32 CPU tensors with oneDNN's matrix product.

    PyTorch's CPU ``F.linear`` calls its BLAS, Intel MKL in the wheels from pypi.org, which on
    some CPUs runs far below their peak: on the AMD EPYC these chapters were measured on, oneDNN
    (the library PyTorch also ships for its CPU kernels) multiplies twice as fast. Same float32
    arithmetic, summed in another order, so the results differ by rounding, as they do between
    batch sizes. Everything else (gradients, autocast, other dtypes and devices) goes to
    ``F.linear`` unchanged. Each weight is reordered once inside the block, which must therefore
    not change the weights (decoding does not); the copies are dropped on exit.
    """

    def __init__(self) -> None:
        super().__init__()
        # (address, shape) -> (the weight, held so that its address is not
        # reused while the entry exists; the weight in oneDNN's layout)
        self.packed: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def __exit__(self, *exc_info: object) -> None:
        # no reordered weight outlives the block: parameters may change after it, and a version
        # counter would not say so (fused optimizers update in place without bumping it)
        self.packed.clear()
        return super().__exit__(*exc_info)

    def _packed(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` in oneDNN's blocked layout, made once per weight inside the block."""
        stamp = (weight.data_ptr(), tuple(weight.shape))
        if stamp not in self.packed:
            blocked = torch.ops.mkldnn._reorder_linear_weight(
                weight.detach(), None
            )
            self.packed[stamp] = (weight, blocked)
        return self.packed[stamp][1]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.linear:
            return func(*args, **kwargs)
        x, weight, bias = _linear_arguments(*args, **kwargs)
        plain = (
            x.device.type == "cpu"
            and x.dtype == weight.dtype == torch.float32
            and x.numel() > 0
            and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
        )
        if not plain:
            return func(*args, **kwargs)
        rows = x.reshape(-1, x.size(-1))  # (rows, in_features)
        # (rows, out_features): x Wᵀ + b, with no activation fused after it
        packed = self._packed(weight)
        y = torch.ops.mkldnn._linear_pointwise(
            rows, packed, bias, "none", [], ""
        )
        return y.view(*x.shape[:-1], weight.size(0))  # (..., out_features)


def _linear_arguments(input, weight, bias=None):
    """``F.linear``'s arguments, by position or by name."""
    return input, weight, bias


if hasattr(torch.ops.mkldnn, "_linear_pointwise"):

    @register_flop_formula(torch.ops.mkldnn._linear_pointwise)
    def _onednn_linear_flops(x_shape, *args, **kwargs) -> int:
        """``FlopCounterMode`` counts oneDNN's product as it counts ``F.linear``'s: 2 · rows · in · out.

        ``args``: the shapes of (weight, bias, attr, scalars, algorithm), or of the ``binary``
        overload's (other, weight, bias, attr).
        """
        w_shape = args[0] if len(args) == 5 else args[1]  # (out, in)
        return 2 * math.prod(x_shape[:-1]) * x_shape[-1] * w_shape[0]


@contextlib.contextmanager
def _eval_mode(model: nn.Module, onednn: bool = False) -> Iterator[None]:
    """Run the block with ``model.eval()`` and gradients off, then restore the previous mode.

    With ``onednn`` (and ``onednn_available()``), the linear layers run under ``onednn_linear``.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), _products(onednn), packed_weights_kept(model):
            yield
    finally:
        model.train(was_training)


def _products(onednn: bool) -> contextlib.AbstractContextManager:
    """``onednn_linear()`` when asked for and available here, else a context that does nothing."""
    if onednn and onednn_available():
        return onednn_linear()
    return contextlib.nullcontext()


def _check_token_id(name: str, value: object, model: nn.Module) -> None:
    """Raise a ``ValueError`` unless ``value`` is an id of the output vocabulary, in [0, V)."""
    check_int(name, value)
    V = getattr(model.config, "tgt_vocab_size", None)  # None: a stand-in
    if value < 0 or (V is not None and value >= V):
        where = (
            f"in [0, {V}) (the model's output vocabulary)" if V else ">= 0"
        )
        raise ValueError(f"{name} must be a token id {where}, got {value}")


def _check_device(name: str, tensor: torch.Tensor, model: nn.Module) -> None:
    """Raise a ``ValueError`` when ``tensor`` is not on the device of the model's weights."""
    parameters = getattr(model, "parameters", None)
    weight = next(parameters(), None) if callable(parameters) else None
    if weight is not None and tensor.device != weight.device:
        raise ValueError(
            f"{name} is on {tensor.device} but the model is on "
            f"{weight.device}: move it with {name}.to({str(weight.device)!r})"
        )


def _check_common(
    model: nn.Module,
    src: torch.Tensor,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
) -> tuple[int, int, torch.Tensor | None]:
    """Validate the arguments every decoder takes.

    Returns:
        The padding id, the longest output and, when ``max_len`` gives one limit per
        sentence, those limits ``(B,)`` (else ``None``).
    """
    check_token_dtype(src, "src")
    if src.dim() != 2:
        raise ValueError(
            f"src: expected shape (B, S) of token ids, got {tuple(src.shape)}"
        )
    if src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(
            "src: expected at least one sentence of at least one token, "
            f"got shape {tuple(src.shape)}"
        )
    _check_device("src", src, model)
    limits = None
    if isinstance(max_len, (torch.Tensor, Sequence)) and not isinstance(
        max_len, str
    ):
        if isinstance(max_len, torch.Tensor):
            values = max_len.tolist()
        else:
            values = list(max_len)
        values = values if isinstance(values, list) else [values]
        ok = all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1
            for v in values
        )
        if not ok or len(values) != src.size(0):
            raise ValueError(
                f"max_len: expected one positive integer per sentence ({src.size(0)}), got {values!r}"
            )
        limits = torch.tensor(values, dtype=torch.long, device=src.device)
        max_len = max(values)
    is_int = isinstance(max_len, int) and not isinstance(max_len, bool)
    if not is_int or max_len < 1:
        raise ValueError(
            f"max_len must be a positive integer (the output length, <bos> included), got {max_len!r}"
        )
    _check_token_id("bos_id", bos_id, model)
    _check_token_id("eos_id", eos_id, model)
    pad_id = model.config.pad_id
    if bos_id == pad_id:
        raise ValueError(
            f"bos_id must differ from the padding id, got both {pad_id}"
        )
    if eos_id == bos_id:
        raise ValueError(
            f"eos_id must differ from bos_id, got both {bos_id}"
        )
    return pad_id, max_len, limits


def _next_logits(
    model: nn.Module,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    prefix: torch.Tensor,
    cache: DecoderCache | None = None,
) -> torch.Tensor:
    """The logits for the token after ``prefix`` ``(B, T)``, ``(B, V)`` float32.

    Without a cache the decoder runs over the whole prefix; with one, over the positions the
    cache does not hold yet (the last one).
    """
    if cache is None:  # the decoder runs over the whole prefix
        tgt_mask = decoder_mask(prefix, model.config.pad_id)  # (B, 1, T, T)
        out = model.decode(memory, src_mask, prefix, tgt_mask)
    else:  # only over the position the cache does not hold yet
        new = prefix[:, len(cache) :]  # (B, 1)
        out = model.decode(memory, src_mask, new, cache=cache)
    # out: (B, T or 1, d_model); the next token's logits come from the last
    return model.generator(out[:, -1]).float()  # (B, V)


def _start(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    bos_id: int,
):
    """Encode the source once and build the ``(B, 1)`` prefix of ``<bos>``."""
    if isinstance(src_mask, torch.Tensor):
        _check_device("src_mask", src_mask, model)
    elif src_mask is not None:
        raise TypeError(
            "src_mask: expected a boolean (B, 1, 1, S) torch.Tensor or None, "
            f"got {type(src_mask).__name__}"
        )
    if src_mask is None:
        src_mask = padding_mask(src, model.config.pad_id)  # (B, 1, 1, S)
    memory = model.encode(src, src_mask)  # (B, S, d_model)
    B = src.size(0)
    # (B, 1): every output starts with <bos>
    prefix = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    return memory, src_mask, prefix


def _keep_rows(
    index: torch.Tensor,
    cache: DecoderCache | None,
    *tensors: torch.Tensor | None,
) -> list[torch.Tensor | None]:
    """Keep the rows ``index`` ``(B',)`` of the cache and of each tensor.

    This is how a finished sentence leaves the working batch. ``None`` stays
    ``None`` (no limits per sentence, no cache).

    Returns:
        The tensors in the order given, each with ``B'`` rows.
    """
    if cache is not None:
        cache.keep_rows(index)  # self- and cross-attention, every layer
    return [None if t is None else t.index_select(0, index) for t in tensors]


class _Finished:
    """The outputs of the sentences that have left the batch."""

    def __init__(self) -> None:
        self.parts: list[tuple[torch.Tensor, ...]] = []

    def add(self, sentences: torch.Tensor, tokens: torch.Tensor, *values):
        """Keep ``tokens`` ``(n, T)`` and ``values`` ``(n,)`` of ``sentences`` ``(n,)``."""
        self.parts.append((sentences, tokens, *values))

    def in_order(self, pad_id: int) -> list[torch.Tensor]:
        """Row i is sentence i: tokens ``(B, L)``, padded, and values ``(B,)``."""
        sentences, tokens, *values = zip(*self.parts, strict=True)
        L = max(t.size(1) for t in tokens)
        tokens = [F.pad(t, (0, L - t.size(1)), value=pad_id) for t in tokens]
        order = torch.cat(sentences).argsort()  # (B,)
        return [torch.cat(field)[order] for field in (tokens, *values)]


def _generate(
    model,
    src,
    src_mask,
    max_len,
    bos_id,
    eos_id,
    choose,
    use_cache,
    prune,
    onednn,
) -> torch.Tensor:
    """The loop shared by greedy decoding and sampling; ``choose`` maps ``(B, V)`` logits to ``(B,)`` ids."""
    pad_id, max_len, limits = _check_common(
        model, src, max_len, bos_id, eos_id
    )
    with _eval_mode(model, onednn):
        memory, src_mask, ys = _start(model, src, src_mask, bos_id)
        cache = model.new_cache() if use_cache else None
        B = src.size(0)
        # (B,), True once a sentence has ended or reached its limit
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        if limits is not None:
            finished |= limits <= 1
        # (B,), the sentence of each row (a finished one leaves the batch)
        live = torch.arange(B, device=src.device)
        out = _Finished()
        for _ in range(max_len - 1):
            logits = _next_logits(model, memory, src_mask, ys, cache)
            next_id = choose(logits)  # (B,)
            # a finished row only grows padding
            next_id = next_id.masked_fill(finished, pad_id)
            ys = torch.cat([ys, next_id[:, None]], dim=1)  # (B, T + 1)
            finished |= next_id == eos_id
            if limits is not None:  # a sentence at its own limit stops
                finished |= limits <= ys.size(1)
            if finished.all():
                break
            if prune and finished.any():  # finished rows leave the batch
                out.add(live[finished], ys[finished])
                keep = (~finished).nonzero().squeeze(1)  # (B',)
                memory, src_mask, ys, limits, live, finished = _keep_rows(
                    keep, cache, memory, src_mask, ys, limits, live, finished
                )
        out.add(live, ys)
    return out.in_order(pad_id)[0]  # (B, L)


# --- Greedy ---------------------------------------------------------------------------------------


def greedy_decode(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
) -> torch.Tensor:
    """Pick the most probable token at every step, for a whole batch at once.

    Args:
        model: a ``Transformer`` (``encode``, ``decode``, ``generator``, ``config.pad_id``).
        src: ``(B, S)`` source ids.
        src_mask: ``(B, 1, 1, S)`` boolean; ``None`` builds it from ``model.config.pad_id``.
        max_len: most columns in the output, ``<bos>`` included; or one such limit per sentence.
        bos_id: the id that starts every output.
        eos_id: the id that ends a sentence; later positions hold the padding id.
        use_cache: keep keys and values between steps (``False``: rerun the whole prefix).
        prune: drop a sentence's rows from the batch once it has finished (``False``:
            compute every row until the last sentence ends; same tokens).
        onednn: on an x86 CPU, compute the linear layers with ``onednn_linear`` (``False``:
            PyTorch's own product; the same float32 sums in another order).

    Returns:
        ``(B, L)`` long ids with ``L <= max_len``, ``<bos>`` first.
    """

    def choose(logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)  # (B, V) -> (B,)

    args = (model, src, src_mask, max_len, bos_id, eos_id)
    return _generate(*args, choose, use_cache, prune, onednn)


# --- Sampling -------------------------------------------------------------------------------------


def _filter_top_k(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """Keep the ``top_k`` largest logits of each row, set the others to -inf."""
    k = min(top_k, logits.size(-1))
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (B, 1), the k-th largest
    return logits.masked_fill(logits < kth, -math.inf)


def _filter_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most probable tokens whose probability adds up to at least ``top_p``."""
    sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
    probs = sorted_logits.softmax(dim=-1)  # (B, V)
    cumulative = probs.cumsum(dim=-1)  # (B, V)
    # drop a token when the tokens before it already reach top_p
    # (the most probable one always stays)
    drop_sorted = (cumulative - probs) >= top_p  # (B, V)
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # vocabulary order
    return logits.masked_fill(drop, -math.inf)


def sample(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
) -> torch.Tensor:
    """Draw each token at random from the model's distribution, optionally sharpened and truncated.

    The logits are divided by ``temperature`` (below 1 sharpens, above 1 flattens), then only the
    ``top_k`` most probable tokens are kept, then only the smallest set whose probability adds up to
    ``top_p`` (nucleus sampling); the next token is drawn from what is left.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id: as in ``greedy_decode``.
        temperature: positive divisor of the logits.
        top_k: keep this many tokens (``None``: all).
        top_p: keep tokens up to this cumulative probability, in (0, 1] (``None``: all).
        generator: a ``torch.Generator`` on ``src``'s device, for reproducible draws.
        use_cache, prune, onednn: as in ``greedy_decode`` (the draws depend on ``prune``: a
            finished sentence no longer takes random numbers).

    Returns:
        ``(B, L)`` long ids with ``L <= max_len``, ``<bos>`` first.
    """
    if not (_is_number(temperature) and 0 < temperature < math.inf):
        raise ValueError(
            f"temperature must be a positive number, got {temperature!r}"
        )
    is_int = isinstance(top_k, int) and not isinstance(top_k, bool)
    if top_k is not None and not (is_int and top_k >= 1):
        raise ValueError(
            f"top_k must be a positive integer or None, got {top_k!r}"
        )
    if top_p is not None and not (_is_number(top_p) and 0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1] or None, got {top_p!r}")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                "generator: expected a torch.Generator or None, "
                f"got {type(generator).__name__}"
            )
        device = src.device if isinstance(src, torch.Tensor) else None
        if device is not None and generator.device.type != device.type:
            raise ValueError(
                f"generator is on {generator.device} but src is on {device}: "
                f"make it with torch.Generator(device={str(device)!r})"
            )

    def choose(logits: torch.Tensor) -> torch.Tensor:
        logits = logits / temperature  # (B, V)
        if top_k is not None:
            logits = _filter_top_k(logits, top_k)
        if top_p is not None:
            logits = _filter_top_p(logits, top_p)
        probs = logits.softmax(dim=-1)  # (B, V)
        next_id = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        return next_id.squeeze(-1)  # (B,)

    args = (model, src, src_mask, max_len, bos_id, eos_id)
    return _generate(*args, choose, use_cache, prune, onednn)


# --- Beam search ----------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    """A real number that is not a bool (``True`` is an int in Python)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def length_penalty_limit(
    length: int, dtype: torch.dtype = torch.float32
) -> float:
    """The largest α for which ((5 + L) / 6)^α stays finite in ``dtype`` for every L <= ``length``.

    Beam search divides by the penalty in float32: a larger α makes the penalty of a long output
    infinite and its score 0, the best there is, so long outputs would win whatever their words.
    """
    check_int("length", length, minimum=0)
    if length == 0:
        return math.inf
    return math.log(torch.finfo(dtype).max) / math.log((5 + length) / 6)


def gnmt_length_penalty(
    length: torch.Tensor | int, alpha: float
) -> torch.Tensor | float:
    """The length penalty of Wu et al. (2016), lp(Y) = ((5 + |Y|) / 6)^α; α = 0 turns it off.

    Raises a ``ValueError`` when α is not a finite number >= 0, and when the penalty overflows
    (see ``length_penalty_limit``) rather than return infinity.
    """
    if not (_is_number(alpha) and 0 <= alpha < math.inf):
        raise ValueError(
            "length_penalty (alpha) must be a finite number >= 0, "
            f"got {alpha!r}"
        )
    if not isinstance(length, torch.Tensor):
        check_int("length", length, minimum=0)
        try:
            return ((5 + length) / 6) ** alpha
        except OverflowError:
            raise ValueError(
                _overflow(alpha, length, torch.float64)
            ) from None
    lp = ((5 + length) / 6) ** alpha
    # below this α even the longest int64 length cannot overflow: no check,
    # so no device synchronisation, for the α anyone uses
    safe = math.log(torch.finfo(lp.dtype).max) / math.log((5 + 2**63) / 6)
    if alpha > safe and not torch.isfinite(lp).all():
        raise ValueError(_overflow(alpha, int(length.max()), lp.dtype))
    return lp


def _overflow(alpha: float, length: int, dtype: torch.dtype) -> str:
    limit = length_penalty_limit(length, dtype)
    return (
        f"length_penalty (alpha) {alpha!r} makes the penalty "
        f"((5 + L) / 6)^alpha overflow {dtype} for an output of L = "
        f"{length} tokens; use an alpha of at most {limit:.2f}"
    )


def _searched(
    finished: torch.Tensor, log_p: torch.Tensor, prune: bool
) -> torch.Tensor:
    """The beams ``(B, K)`` whose next token the decoder computes.

    With ``prune``, only those that may still grow: not finished, and with a finite log P (at
    the first step only beam 0 is, the others are its copies). A beam left out extends with
    padding alone, which is all a finished beam does and cannot lift a log P of -inf. Without
    ``prune``, every beam, as a reference.
    """
    if not prune:
        return torch.ones_like(finished)
    return ~finished & (log_p > -math.inf)


def _beam_logits(
    model: nn.Module,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    ys: torch.Tensor,
    cache: DecoderCache | None,
    rows: torch.Tensor,
    K: int,
) -> torch.Tensor:
    """The next token's logits ``(R, V)`` of the beams ``rows`` ``(R,)`` of ``ys`` ``(B·K, T)``.

    ``memory`` ``(B, S, d_model)`` and ``src_mask`` ``(B, 1, 1, S)`` hold one row per sentence.
    The cache holds the R rows (``DecoderCache.beams``); without one, each beam's memory and mask
    are copied to its row and the decoder runs over the whole prefix.
    """
    prefix = ys.index_select(0, rows)  # (R, T)
    if cache is None:
        sentence = rows // K  # (R,)
        memory = memory.index_select(0, sentence)  # (R, S, d_model)
        src_mask = src_mask.index_select(0, sentence)  # (R, 1, 1, S)
        return _next_logits(model, memory, src_mask, prefix)
    cache.beams = (rows, K)
    return _next_logits(model, memory, src_mask, prefix, cache)


def _token_log_probs(
    logits: torch.Tensor,
    rows: torch.Tensor,
    pad_only: torch.Tensor,
    pad_id: int,
) -> torch.Tensor:
    """log P of every next token ``(B, K, V)`` from the logits ``(R, V)`` of the beams ``rows``.

    Args:
        logits: ``(R, V)``, row j for beam ``rows[j]`` (beam b of sentence i is i·K + b).
        rows: ``(R,)``.
        pad_only: ``(B, K)``, True for the beams whose one continuation is padding, at
            log P 0 (every beam not in ``rows`` must be one).
    """
    B, K = pad_only.shape
    V = logits.size(-1)
    log_probs = F.log_softmax(logits, dim=-1)  # (R, V)
    if log_probs.size(0) < B * K:  # rows for the beams not computed
        full = log_probs.new_empty(B * K, V)
        log_probs = full.index_copy_(0, rows, log_probs)  # (B·K, V)
    log_probs = log_probs.view(B, K, V)
    padding = torch.full((V,), -math.inf, device=logits.device)
    padding[pad_id] = 0.0
    log_probs[pad_only] = padding  # (B, K, V), only those rows
    return log_probs


def _cache_rows(
    rows: torch.Tensor, parents: torch.Tensor, searched: torch.Tensor
) -> torch.Tensor:
    """The rows of the cache ``(R',)`` the next step's beams continue.

    Args:
        rows: ``(R,)``, the beams this step computed, as the cache holds them.
        parents: ``(B·K,)``, the beam each new beam extends.
        searched: ``(B, K)``, the new beams the next step computes (each extends a searched one).
    """
    # (B·K,): the cache row of each beam computed this step
    position = torch.zeros_like(parents)
    position[rows] = torch.arange(rows.size(0), device=rows.device)
    return position[parents[searched.view(-1)]]  # (R',)


class BeamSearchOutput(NamedTuple):
    """The best hypothesis per sentence; unpack as ``tokens, scores, log_probs = beam_search(...)``.

    Args:
        tokens: ``(B, L)`` long ids, ``<bos>`` first, padded after ``<eos>``.
        scores: ``(B,)`` log P(Y) / lp(Y), the number the search maximised.
        log_probs: ``(B,)`` log P(Y), the sum of the chosen tokens' log-probabilities.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    log_probs: torch.Tensor


def _best_beams(
    ys: torch.Tensor, log_p: torch.Tensor, lengths: torch.Tensor, alpha
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best-scoring beam of each sentence: tokens ``(B, T)``, score and log P ``(B,)``.

    Args:
        ys: ``(B·K, T)``, beam b of sentence i in row i·K + b.
        log_p, lengths: ``(B, K)``, each beam's log P and generated tokens.
        alpha: α of the length penalty.
    """
    B, K = log_p.shape
    scores = log_p / gnmt_length_penalty(lengths, alpha)  # (B, K)
    best_beam = scores.argmax(dim=-1)  # (B,)
    arange = torch.arange(B, device=log_p.device)
    pick = arange * K + best_beam  # (B,)
    return ys[pick], scores[arange, best_beam], log_p[arange, best_beam]


def beam_search(
    model: nn.Module,
    src: torch.Tensor,
    src_mask: torch.Tensor | None,
    max_len: MaxLen,
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
) -> BeamSearchOutput:
    """Keep the ``beam_size`` best prefixes per sentence at every step; the paper uses 4 and α = 0.6.

    Hypotheses are ranked by log P(Y) / lp(Y) with the GNMT length penalty lp(Y) = ((5 + |Y|) / 6)^α,
    |Y| counting the generated tokens (``<eos>`` included, ``<bos>`` not). Without it the search
    prefers short outputs, since every extra token lowers log P. A beam that produced ``<eos>``
    stays in the beam with a fixed score and competes with the live ones; the search ends when
    every beam of every sentence has finished or ``max_len`` is reached, and the best-scoring beam
    of each sentence is returned. A sentence whose beams have all finished leaves the batch
    (``prune``) with its best beam.

    All sentences are searched together: the beams are flattened to ``B · K`` rows, and each step
    runs the decoder over the rows that can still grow (``prune``: not the finished beams, and at
    the first step only beam 0 of each sentence, since the others are its copies). The source's
    memory, mask and cross-attention keys and values are kept once per sentence
    (``DecoderCache.beams``); the rows of the self-attention keys and values follow the
    surviving beams (``DecoderCache.reorder``). With ``beam_size=1`` this is greedy decoding.

    Args:
        model, src, src_mask, max_len, bos_id, eos_id: as in ``greedy_decode``; a sentence that
            reaches its own ``max_len`` keeps its beams as they are.
        beam_size: K, hypotheses kept per sentence.
        length_penalty: α of the length penalty; 0 ranks by log P alone.
        use_cache, prune, onednn: as in ``greedy_decode``.

    Returns:
        A ``BeamSearchOutput`` (``tokens`` ``(B, L)`` with ``L <= max_len``, ``scores``, ``log_probs``).
    """
    is_int = isinstance(beam_size, int) and not isinstance(beam_size, bool)
    if not is_int or beam_size < 1:
        raise ValueError(
            f"beam_size must be a positive integer, got {beam_size!r}"
        )
    alpha = length_penalty  # α in lp(Y) = ((5 + |Y|) / 6)^α
    is_number = isinstance(alpha, (int, float))
    if not (is_number and alpha >= 0 and math.isfinite(alpha)):
        raise ValueError(
            "length_penalty (alpha) must be a non-negative number, "
            f"got {length_penalty!r}"
        )
    pad_id, max_len, limits = _check_common(
        model, src, max_len, bos_id, eos_id
    )
    B, K = src.size(0), beam_size
    device = src.device

    with _eval_mode(model, onednn):
        # one memory and mask per sentence: its beams share them
        memory, src_mask, ys = _start(model, src, src_mask, bos_id)
        ys = ys.repeat_interleave(K, dim=0)  # (B·K, 1)
        cache = model.new_cache() if use_cache else None

        # Per beam, (B, K): log P, generated tokens, finished or not. Every
        # beam starts as the same "<bos>"; only the first may expand, or the
        # K beams would be copies.
        log_p = torch.full((B, K), -math.inf, device=device)
        log_p[:, 0] = 0.0
        lengths = torch.zeros(B, K, dtype=torch.long, device=device)
        finished = torch.zeros(B, K, dtype=torch.bool, device=device)
        if limits is not None:
            finished |= (limits <= 1)[:, None]
        live = torch.arange(B, device=device)  # (B,), the sentences searched
        out = _Finished()
        # (B, K): the beams the next step runs the decoder for
        searched = _searched(finished, log_p, prune)

        for _ in range(max_len - 1):
            B = live.size(0)  # the sentences still in the batch
            # (R,): beam b of sentence i is row i·K + b of ys
            rows = searched.view(-1).nonzero().squeeze(1)
            logits = _beam_logits(
                model, memory, src_mask, ys, cache, rows, K
            )
            # (B, K, V); padding is the only continuation of a beam not searched
            token_log_p = _token_log_probs(
                logits, rows, ~searched | finished, pad_id
            )
            V = token_log_p.size(-1)

            cand_len = lengths + (~finished).long()  # (B, K)
            lp = gnmt_length_penalty(cand_len, alpha)  # (B, K)
            # (B, K, V): each candidate's log P, divided (in place) by its penalty
            cand_score = (log_p[..., None] + token_log_p).div_(lp[..., None])
            # the K best of each sentence's K·V candidates, as indices
            _, best = cand_score.view(B, K * V).topk(K, dim=-1)  # (B, K)
            # which beam each extends, with which token
            beam, token = best // V, best % V  # (B, K) each

            # (B, K): log P of the kept candidates, the same sum as in cand_score
            chosen = token_log_p.view(B, K * V).gather(1, best)  # (B, K)
            log_p = log_p.gather(1, beam) + chosen
            lengths = cand_len.gather(1, beam)  # (B, K)
            was_finished = finished.gather(1, beam)  # (B, K)
            finished = was_finished | (token == eos_id)  # (B, K)
            # the rows of ys to keep: beam b of sentence i is row i·K + b
            offset = torch.arange(B, device=device)[:, None] * K  # (B, 1)
            parents = (beam + offset).view(-1)  # (B·K,)
            # (B·K, T + 1): each kept prefix and its new token
            ys = torch.cat([ys[parents], token.view(-1, 1)], dim=1)
            if limits is not None:  # a sentence at its own limit stops
                finished |= (limits <= ys.size(1))[:, None]
            if finished.all():
                break
            searched = _searched(finished, log_p, prune)
            if cache is not None:  # the keys and values follow their beams
                cache.reorder(_cache_rows(rows, parents, searched))
            ended = finished.all(dim=1)  # (B,), all its beams have finished
            if prune and ended.any():  # those sentences leave the batch
                picked = _best_beams(ys, log_p, lengths, alpha)
                out.add(live[ended], *(x[ended] for x in picked))
                keep = (~ended).nonzero().squeeze(1)  # (B',)
                per_beam = log_p, lengths, finished, searched
                log_p, lengths, finished, searched = _keep_rows(
                    keep, None, *per_beam
                )
                # their beams have left the self-attention cache already
                memory, src_mask, limits, live = _keep_rows(
                    keep, None, memory, src_mask, limits, live
                )
                if cache is not None:
                    cache.keep_sources(keep)
                beams = torch.arange(K, device=device)  # (K,)
                rows = (keep[:, None] * K + beams).view(-1)  # (B'·K,)
                (ys,) = _keep_rows(rows, None, ys)

        out.add(live, *_best_beams(ys, log_p, lengths, alpha))
        return BeamSearchOutput(*out.in_order(pad_id))


# --- Many sentences, batched by length ------------------------------------------------------------


def _check_sources(sources: object) -> list[list[int]]:
    """``sources`` as lists of ids; a ``TypeError`` for anything but sequences of integer ids."""
    if isinstance(sources, (str, bytes, torch.Tensor)) or not isinstance(
        sources, Sequence
    ):
        raise TypeError(
            "sources: expected a list of id sequences (one list of ints per "
            f"sentence), got {type(sources).__name__}"
        )
    out = []
    for i, ids in enumerate(sources):
        if isinstance(ids, torch.Tensor):
            check_token_dtype(ids, f"sources[{i}]")
            ids = ids.tolist() if ids.dim() == 1 else ids
        if not isinstance(ids, Sequence) or isinstance(ids, (str, bytes)):
            raise TypeError(
                f"sources[{i}]: expected a list of integer token ids, "
                f"got {type(ids).__name__}"
            )
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise TypeError(
                    f"sources[{i}]: expected integer token ids, got {t!r}"
                )
        out.append([int(t) for t in ids])
    return out


def decode_sorted(
    model: nn.Module,
    sources: Sequence[Sequence[int]],
    bos_id: int,
    eos_id: int,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    batch_size: int = 128,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    use_cache: bool = True,
    prune: bool = True,
    onednn: bool = True,
) -> list[list[int]]:
    """Decode many sources in padded batches of similar length; outputs come back in input order.

    The sources are sorted by length and cut into batches of up to ``batch_size``, each padded
    to its longest source. Every sentence keeps its own output limit,
    ``min(int(max_len_a · S + max_len_b) + 1, model.config.max_len)`` columns for a source of S
    ids (``+ 1`` for ``<bos>``), so its translation does not depend on the sentences it is
    batched with: padded keys get a weight of exactly zero. Only float rounding can differ
    (the matrix products change shape with the batch), which the tests show leaves the tokens
    unchanged. Beam search with ``beam_size > 1``, greedy decoding with 1.

    Args:
        model: a ``Transformer``; its device is used.
        sources: id sequences (each usually ending in ``<eos>``), at most ``max_len`` long.
        bos_id, eos_id: as in ``greedy_decode``.
        beam_size: K (1: greedy).
        length_penalty: α of the GNMT length penalty.
        batch_size: most sentences per batch (each becomes K rows in beam search).
        max_len_a, max_len_b: the output limit, as above.
        use_cache, prune, onednn: as in ``greedy_decode``.

    Returns:
        One list of ids per source: ``<bos>`` first, up to ``<eos>`` included, no padding.
    """
    sources = _check_sources(sources)
    check_int("beam_size", beam_size, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if not (_is_number(max_len_a) and 0 <= max_len_a < math.inf):
        raise ValueError(
            f"max_len_a must be a finite number >= 0, got {max_len_a!r}"
        )
    check_int("max_len_b", max_len_b, minimum=0)
    lengths = [len(s) for s in sources]
    limit = model.config.max_len
    if any(n < 1 or n > limit for n in lengths):
        raise ValueError(
            f"sources must hold 1 to max_len={limit} ids each, got lengths from {min(lengths)} to {max(lengths)}"
        )
    # alpha is checked as beam search will use it, on the longest output it
    # allows (greedy decoding too: a bad alpha never passes unnoticed)
    S = max(lengths, default=1)
    longest = min(int(max_len_a * S + max_len_b), limit - 1)
    gnmt_length_penalty(torch.tensor([longest]), length_penalty)
    pad_id = model.config.pad_id
    device = next(model.parameters()).device
    order = sorted(range(len(sources)), key=lambda i: lengths[i])
    out: list[list[int]] = [[] for _ in sources]
    # one oneDNN mode for all the batches, so that each weight is packed once
    # (the calls below get onednn=False: the mode is on already, or unwanted)
    with _products(onednn):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            S = max(lengths[i] for i in chunk)
            # (B, S), padded to the longest source of the batch
            src = torch.full((len(chunk), S), pad_id, dtype=torch.long)
            for row, i in enumerate(chunk):
                src[row, : lengths[i]] = torch.as_tensor(sources[i])
            src = src.to(device)
            limits = [
                min(int(max_len_a * lengths[i] + max_len_b) + 1, limit)
                for i in chunk
            ]
            args = (model, src, None, limits, bos_id, eos_id)
            if beam_size == 1:
                # (B, L)
                tokens = greedy_decode(*args, use_cache, prune, False)
            else:
                search = beam_search(
                    *args, beam_size, length_penalty, use_cache, prune, False
                )
                tokens = search.tokens  # (B, L)
            for row, i in enumerate(chunk):
                ids = tokens[row].tolist()
                while ids and ids[-1] == pad_id:  # trailing padding only
                    ids.pop()
                out[i] = ids
    return out
