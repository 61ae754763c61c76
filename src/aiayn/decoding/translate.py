"""Translating sentences with a trained model: ``translate``, and the engine its options pick.

``translate`` decodes sentences in padded batches of similar length with the key/value cache;
``_decoding_engine`` decides, from the options, which of the engine's twins run, and
``decode_sorted`` which search, by its name (``strategies.pick``). A run folder's model comes
from ``aiayn.runs.load.load_run``; scoring a split is ``aiayn.runs.scoring.evaluate``.

Two options make decoding on a CPU faster and change a few translations, so both are off by
default: ``quantize="int8"`` (a copy of the model whose linear layers compute in int8,
``aiayn.engine.precision.int8_copy``) and ``amp_dtype=torch.bfloat16`` (autocast, only on a CPU
that computes bfloat16 natively, ``cpu_has_native_bf16``). ``tools/measure_decoding.py`` measures them.

    B  batch        S  source length        L  output length
"""

from __future__ import annotations

import contextlib
import math
import time
import unicodedata
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch

from ..attention import check_head_mask
from ..checks import check_int
from ..data.multi30k import (
    BOS,
    EOS,
    UNK,
    Tokenizer,
)
from ..engine.precision import cpu_has_native_bf16, int8_copy
from ..engine.switch import set_fast
from ..model import Transformer, set_head_mask
from .search import decode_sorted
from .strategies import pick

__all__ = [
    "ZERO_WIDTH",
    "is_blank",
    "normalise",
    "source_ids",
    "translate",
    "QUANTIZE",
    "AMP_NAMES",
    "check_decoding_options",
    "describe_decoding",
]


# characters that take no room: zero-width space, non-joiner and joiner, word joiner, byte-order mark
ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff")


def is_blank(sentence: str) -> bool:
    """True when ``sentence`` holds nothing to translate: only whitespace and zero-width characters.

    Whitespace is what ``str.isspace`` says it is (spaces, tabs, newlines, non-breaking spaces ...),
    zero-width characters are ``ZERO_WIDTH``; ``""`` is blank.
    """
    return all(c.isspace() or c in ZERO_WIDTH for c in sentence)


def normalise(sentence: str) -> str:
    """The sentence as the model reads it: NFKC, each run of whitespace one space, none at the ends.

    The tokenizer leaves text as it is (``normalization_rule_name="identity"``), so the reader's
    text is normalised here, by Unicode's compatibility composition (NFKC): an umlaut typed as
    "a" and a combining diaeresis (as some pastes on macOS give) becomes the one character "ä"
    that the captions use, and fullwidth letters ("Ｅｉｎ Ｈｕｎｄ") and ligatures ("ﬁ") become
    the plain letters the model learned, instead of pieces it never saw. NFKC leaves every
    Multi30k source sentence as NFC does. Whitespace is what ``str.isspace`` says (tabs,
    newlines, non-breaking spaces ...); zero-width characters are left as they are.
    """
    return " ".join(unicodedata.normalize("NFKC", sentence).split())


def source_ids(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_len: int,
    cut_long: bool = False,
) -> list[list[int] | None]:
    """Each sentence's ids ending in ``<eos>``, or ``None`` where there is nothing to translate.

    Each sentence is read as ``normalise`` gives it (NFKC, whitespace collapsed and trimmed). A
    blank sentence (``is_blank``: only whitespace, non-breaking spaces included, and zero-width
    characters), or one with no piece the model knows (only ``<unk>`` and word boundaries, e.g.
    emoji), gives ``None``: its translation is ``""``, not one the model would invent. A
    sentence longer than the model's ``max_len`` positions (``<eos>`` included) is refused with
    its length, or, with ``cut_long``, cut there with a warning that says how much was dropped.
    """
    if isinstance(sentences, str):
        raise TypeError("sentences: expected a list of str, got one str")
    kinds = sorted(
        {type(s).__name__ for s in sentences if not isinstance(s, str)}
    )
    if kinds:
        raise TypeError(
            f"sentences: expected a list of str, got {', '.join(kinds)} items"
        )
    boundary = tokenizer.piece_to_id("\u2581")  # "▁", a word boundary alone
    ids: list[list[int] | None] = []
    texts = [normalise(s) for s in sentences]
    for i, pieces in enumerate(tokenizer.encode_batch(texts)):
        unknown = all(p in (UNK, boundary) for p in pieces)
        if unknown or is_blank(sentences[i]):
            ids.append(None)
            continue
        if len(pieces) + 1 > max_len:
            dropped = len(pieces) + 1 - max_len
            where = f"sentence {i} has {len(pieces)} pieces + <eos>, the model reads at most {max_len}"
            if not cut_long:
                raise ValueError(
                    f"{where}: shorten it, or pass cut_long=True to cut it there"
                )
            warnings.warn(
                f"{where}: its last {dropped} pieces are cut off and not translated",
                stacklevel=3,
            )
            pieces = pieces[: max_len - 1]
        ids.append(pieces + [EOS])
    return ids


# --- Faster decoding on a CPU ---------------------------------------------------------------------

# the values of translate(quantize=...), besides None (float32)
QUANTIZE = ("int8",)
# amp_dtype in setting names
AMP_NAMES = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def check_decoding_options(
    quantize: str | None, amp_dtype: torch.dtype | None, device: torch.device
) -> None:
    """Refuse an option this device cannot run, saying what would work."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(
            f"quantize must be None (float32) or one of {QUANTIZE}, got {quantize!r}"
        )
    if amp_dtype is None:
        return
    if amp_dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(
            f"amp_dtype must be torch.bfloat16, torch.float16 or None, got {amp_dtype!r}"
        )
    if quantize is not None:
        raise ValueError(
            f"quantize={quantize!r} and amp_dtype={amp_dtype} do not combine: the int8 "
            "products take float32 inputs; choose one"
        )
    if device.type != "cpu":
        return
    if amp_dtype == torch.float16:
        raise ValueError(
            "amp_dtype=torch.float16 on the CPU: autocast runs float16 there slowly; "
            "use torch.bfloat16 on a CPU that has it natively, or None (python -m "
            "aiayn.evaluate: --amp fp32)"
        )
    if not cpu_has_native_bf16():
        raise ValueError(
            "amp_dtype=torch.bfloat16: this CPU has no native bfloat16 (no avx512_bf16, "
            "amx_bf16 or bf16 flag in /proc/cpuinfo), so it would be emulated and slower "
            "than float32; leave amp_dtype=None (python -m aiayn.evaluate: --amp fp32)"
        )


def describe_decoding(
    beam: int,
    length_penalty: float,
    quantize: str | None = None,
    amp_dtype: torch.dtype | None = None,
    strategy: str | None = None,
) -> str:
    """The decoding setting in words, for logs: ``"beam 4, α 0.6, float32"``, ``"greedy, int8"``.

    The search is named as ``strategies.pick`` chooses it (another strategy by its name alone).
    """
    search = pick(strategy, beam).name
    if search == "beam":
        search = f"beam {beam}, α {length_penalty:g}"
    if quantize is not None:
        numbers = quantize
    elif amp_dtype is not None:
        numbers = f"{str(amp_dtype).removeprefix('torch.')} autocast"
    else:
        numbers = "float32"
    return f"{search}, {numbers}"


def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    beam: int = 4,
    length_penalty: float = 0.6,
    batch_size: int = 128,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    amp_dtype: torch.dtype | None = None,
    fast: bool | None = None,
    cut_long: bool = False,
    prune: bool = True,
    quantize: str | None = None,
    log: Callable[[str], None] | None = None,
    onednn: bool = True,
    progress: bool = False,
    strategy: str | None = None,
    head_mask: torch.Tensor | None = None,
) -> list[str]:
    """Translate ``sentences`` and return detokenized strings, in input order.

    ``decoding.decode_sorted`` does the work: the sources are sorted by length and decoded up to
    ``batch_size`` at a time, each batch padded to its longest source, with the key/value cache (the
    decoder runs over one new position per step), by beam search (``beam > 1``) or greedy decoding
    (``beam == 1``), or by another registered ``strategy``. Every sentence keeps its own output
    limit, ``max_len_a · S + max_len_b`` tokens for a source of S ids (``<eos>`` included, capped at
    the model's ``max_len``), and padded keys get a weight of exactly zero, so a sentence's
    translation does not depend on which others are translated with it (only float rounding can
    differ; the tests compare the lines with the uncached, unpadded decoding). A blank sentence, or
    one with no piece the model knows, translates to ``""``; a source longer than ``max_len`` is
    refused (``source_ids``).

    Args:
        model: a trained ``Transformer`` (its device is used).
        tokenizer: the run's tokenizer.
        sentences: source sentences.
        beam: beam size K (1: greedy).
        length_penalty: α of the GNMT length penalty.
        batch_size: most sentences per batch (each becomes K rows in beam search).
        max_len_a, max_len_b: the output length limit (a >= 0, b >= 1).
        amp_dtype: run under ``torch.autocast`` with this dtype (``torch.bfloat16`` on CUDA is
            faster). On a CPU only ``torch.bfloat16``, and only where the CPU has it natively
            (``cpu_has_native_bf16``). It changes a few translations, so it is off by default:
            measured with the published model on one thread of a CPU with AVX512-BF16, 1.4x
            faster than float32 with oneDNN (the 1,000 test sentences, beam 4), 969 of the 1,014
            val translations (95.6 %) identical to float32, sacreBLEU 39.55 against 39.53
            (``tools/measure_decoding.py``).
        fast: decode with every fast path on (``engine.switch.set_fast``: fused attention, packed q/k/v,
            ``F.layer_norm``), restored afterwards; ``None``: when the model's config has
            ``fused_attention`` on, as the trained runs do.
        cut_long: cut a source longer than ``max_len`` there, with a warning, instead of refusing it.
        prune: drop a sentence from its batch once it has finished (``False``: the reference,
            every row computed until the batch's last sentence ends; same translations).
        quantize: ``"int8"``: decode with ``int8_copy(model)`` (CPU only; the model passed in is
            not changed). It changes a few translations, so it is off by default: measured as
            above, 1.7x faster, 900 of 1,014 (88.8 %) identical, sacreBLEU 39.43 against 39.53.
            Its activations are scaled per batch, so a translation depends on its batch-mates.
        onednn: on an x86 CPU, the float32 linear layers run on oneDNN's product
            (``decoding.onednn_linear``), twice as fast as PyTorch's MKL one on an AMD EPYC; the
            same sums in another order: all 1,000 test and 1,014 val translations of the
            published model identical to ``onednn=False``.
        log: called once with the speed and the setting, e.g. ``print``:
            ``"translated 300 sentences in 9.81 s, 30.6 sentences/s (beam 4, α 0.6, float32)"``.
        progress: show a tqdm bar of the sentences translated (on stderr; needs tqdm).
        strategy: the search by its name in ``aiayn.decoding.strategies`` (``"greedy"``,
            ``"beam"`` or one registered there); ``None``: ``"beam"`` if ``beam > 1``, else
            ``"greedy"``.
        head_mask: float ``(3, N, h)`` of 0 and 1: the heads switched off (at 0) while
            translating (``model.set_head_mask``); ``None``: the heads as they are set.
    """
    start = time.perf_counter()
    options = beam, batch_size, max_len_a, max_len_b, quantize, amp_dtype
    _check_translate_options(model, tokenizer, *options, strategy)
    if head_mask is not None:
        check_head_mask(head_mask, model.head_mask_shape)
    ids = source_ids(tokenizer, sentences, model.config.max_len, cut_long)
    # the sentences to decode; a blank one (None) translates to ""
    todo = [i for i, s in enumerate(ids) if s is not None]
    if not todo:
        return ["" for _ in ids]
    fast = model.config.fused_attention if fast is None else fast
    bar = _sentence_bar(len(todo), progress)
    heads = (
        contextlib.nullcontext()
        if head_mask is None
        else set_head_mask(model, head_mask)  # before an int8 copy is made
    )
    with (
        bar,
        heads,
        _decoding_engine(model, fast, quantize, amp_dtype) as engine,
    ):
        outputs = decode_sorted(
            engine, [ids[i] for i in todo], BOS, EOS, beam, length_penalty,
            batch_size, max_len_a, max_len_b, use_cache=True, prune=prune,
            onednn=onednn, progress=bar.update, strategy=strategy,
        )  # fmt: skip
    lines = [""] * len(ids)
    for i, line in zip(todo, tokenizer.decode_batch(outputs), strict=True):
        lines[i] = line
    if log is not None:
        seconds = time.perf_counter() - start
        setting = describe_decoding(
            beam, length_penalty, quantize, amp_dtype, strategy
        )
        log(
            f"translated {len(lines)} sentences in {seconds:.2f} s, "
            f"{len(lines) / seconds:.1f} sentences/s ({setting})"
        )
    return lines


def _check_translate_options(
    model: Transformer,
    tokenizer: Tokenizer,
    beam: int,
    batch_size: int,
    max_len_a: float,
    max_len_b: int,
    quantize: str | None,
    amp_dtype: torch.dtype | None,
    strategy: str | None,
) -> None:
    """``translate``'s checks: a ``ValueError`` that names what was expected."""
    check_int("beam", beam, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    _check_limits(max_len_a, max_len_b)
    check_decoding_options(
        quantize, amp_dtype, next(model.parameters()).device
    )
    pick(strategy, beam)  # an unknown name, before any work
    V = model.config.tgt_vocab_size
    if tokenizer.vocab_size != V or not EOS < V:
        raise ValueError(
            f"the tokenizer has {tokenizer.vocab_size} ids (<eos> = {EOS}) "
            f"but the model's vocabulary has {V}: use the tokenizer the "
            "model was trained with"
        )


class _NoBar(contextlib.nullcontext):
    """What ``_sentence_bar`` gives when no bar is shown: ``update`` does nothing."""

    def update(self, n: int = 1) -> None:
        pass


def _sentence_bar(total: int, enabled: bool):
    """A tqdm bar of ``total`` sentences (a context manager with ``update``), or one that shows nothing."""
    if not enabled:
        return _NoBar()
    try:
        from tqdm.auto import tqdm
    except ImportError as error:  # tqdm comes with the book's extras
        raise ImportError(
            "translate(progress=True) needs tqdm: pip install tqdm, or pass progress=False"
        ) from error
    return tqdm(
        total=total, unit="sentence", dynamic_ncols=True, leave=False
    )


@contextlib.contextmanager
def _decoding_engine(
    model: Transformer,
    fast: bool,
    quantize: str | None,
    amp_dtype: torch.dtype | None,
) -> Iterator[Transformer]:
    """The model to decode with, inside its engine's settings: ``set_fast``, an int8 copy, autocast."""
    device = next(model.parameters()).device
    if quantize == "int8":
        model = int8_copy(model)  # the model passed in is not changed
    switch = set_fast(model) if fast else contextlib.nullcontext()
    autocast = torch.autocast(
        device.type,
        dtype=amp_dtype or torch.bfloat16,
        enabled=amp_dtype is not None,
    )
    with switch, autocast:
        yield model


def _check_limits(max_len_a: float, max_len_b: int) -> None:
    """The output limit ``a · S + b`` must give every sentence at least one token."""
    a_ok = isinstance(max_len_a, (int, float)) and not isinstance(
        max_len_a, bool
    )
    if not (a_ok and math.isfinite(max_len_a) and max_len_a >= 0):
        raise ValueError(
            f"max_len_a: expected a finite number >= 0, got {max_len_a!r}"
        )
    check_int("max_len_b", max_len_b, minimum=1)
