"""Presets: every choice of a Multi30k training run in one frozen ``TrainConfig``, and the named ones.

``TrainConfig`` holds the model's sizes as a ``TransformerConfig`` (``cfg.model``) and adds the data,
optimisation, speed and decoding settings of a run. ``PRESETS`` names the runs the book uses.

Presets
-------

``multi30k`` aims at 40 sacreBLEU or more (de→en, test2016, cased and detokenized) after at most 10
minutes of training on one H100:

- **Model**: d_model 512, d_ff 2048, h 8 as in the base model, but N = 3. Multi30k has 29,000 short
  caption pairs (900k padded positions per epoch, no sentence longer than 53 pieces); six layers per
  stack mostly add capacity to overfit with, and a shallower post-norm stack trains stably with a
  short warmup. P_drop 0.3 instead of 0.1: on a small corpus it is the setting that matters most
  (fairseq's IWSLT'14 recipe, 160k pairs, uses 0.3 as well).
- **Vocabulary**: one joint BPE of 8,000 pieces (``data.train_tokenizer`` has the measurements),
  shared source/target embeddings and a tied generator, as the paper does with its joint vocabulary.
- **Batches**: 8,192 padded positions, about 250 pairs: 117 steps per epoch, 5% padding. Small batches
  give more updates, which a small corpus needs more than large-batch efficiency.
- **Schedule**: Noam with warmup 1,000 and factor 0.5, a peak rate of 7e-4 (fairseq's IWSLT range is
  5e-4 to 1e-3) falling to about 3e-4 by the end; label smoothing 0.1, gradient clipping at 1.0.
- **Length**: 40 epochs, about 4,700 steps, with the validation loss after each. A step of this
  model (26 M parameters) takes tens of milliseconds on an H100, so training needs a few minutes.
- **Decoding**: the paper's beam 4 and α = 0.6, outputs up to input length + 50, and the weights of
  the last 5 epochs averaged (the paper averaged its last 5 checkpoints).

If a run falls short of 40, N = 6 with warmup 2,000 is the next thing to try.

``multi30k-t4`` is sized for Colab's free T4 (float16 with a gradient scaler, no native bfloat16),
to finish within 15 minutes there: d_model 256, d_ff 1024, h 4, N 3 (29% of the ``multi30k``
model's FLOPs per token), P_drop 0.2, batches of 4,096 positions (about 234 steps per epoch, twice
the updates per epoch), warmup 1,000 and factor 0.5 (a peak rate of 1e-3), 25 epochs, the last 5
averaged. Not yet run on a T4: its time there is an estimate. Trained to its end on an H200 (bfloat16,
where a T4 runs float16) it reached sacreBLEU 40.24 in 294 s beside another run
(``results/presets.h200.json``); in float16 with its scaler, as a T4 runs it, and alone, 40.28 in 189 s
(``results/gpu_run.h200.json``).
``estimate.estimate_minutes(cfg, "Tesla T4")`` gives the estimate with its arithmetic (see its docstring):
for this preset about 3 minutes on one T4 and 2 on Kaggle's two (``gpus=2``), if the host launches
ops as fast as the H100 machine's did. A step is mostly host time (1,338 ATen ops at about 18 µs
each, 24 ms, against 7 ms of arithmetic), so a slower host makes it longer in proportion.

``multi30k-smoke`` runs the whole pipeline on two CPU cores in well under a minute: 2,000 training
pairs, a 1,000-piece vocabulary, a two-layer model of width 64 without dropout (far too short a run to
overfit, and drawing dropout masks is a sixth of a CPU step at this size), 3 epochs of 50 steps; the
loss must visibly fall. It validates on 200 pairs and tests on the first 100 sentences with beam 2 and
short outputs, on one CPU thread: on two shared cores a step took 50-85 ms with one thread and
35-1500 ms with two, which wait on each other at every small operation when the cores are busy.

``laptop`` is an hour of two CPU cores: ``multi30k-t4``'s model for 14 epochs of
2,048-token batches (6,314 updates) on two threads, P_drop 0.1, the last 3 epochs averaged. On the
book's shared 2-core build machine it took 47.6 minutes and scored sacreBLEU 41.69 on test2016,
2.68 above the published model by a paired bootstrap; with seeds 1 and 2, 40.41 (+1.40) and 40.77
(+1.75), a mean of 40.96 over the three. All are in ``results/laptop.json``, written by
``tools/laptop_hour.py``, which also timed the candidate sizes it was chosen from.

``rnn`` and ``rnn-smoke`` train the recurrent translator the paper replaced (``aiayn.baselines.rnn``,
Bahdanau et al.'s RNNsearch: a bidirectional GRU encoder, a GRU decoder with additive attention) as
``multi30k`` and ``multi30k-smoke`` train the Transformer: the same data, tokenizer, batches,
schedule, label smoothing, averaging and beam. ``rnn`` has d_model 512, d_hidden = d_attn = 920,
within 1 % of the ``multi30k`` model's parameters. On an H200 it reached sacreBLEU 38.45 on test2016,
1.64 below the ``multi30k`` run of the same day, its step 1.4 to 1.8 times as long
(``results/gpu_run.h200.json``; chapter 1.4 sets the two side by side). ``rnn-laptop`` is the laptop
hour's twin: the ``laptop`` recipe with the recurrent model at the laptop model's parameter count, for
6 epochs (chapter 1.4 sets the two side by side, from ``results/rnn-laptop.json``, written by
``tools/laptop_hour.py``).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ..baselines.rnn import RNN, RNNConfig
from ..cli import MAX_LENGTH_PENALTY
from ..data.multi30k import PAD, Tokenizer
from ..model import Transformer, TransformerConfig
from ..schedule import ADAM_IMPLEMENTATIONS

__all__ = [
    "TrainConfig",
    "PRESETS",
    "get_preset",
    "build_model",
]

# The model fields a run's config.json held at the top level before they moved into "model".
_FLAT_MODEL_FIELDS = (
    "d_model",
    "d_ff",
    "h",
    "N",
    "dropout",
    "share_embeddings",
    "tie_output",
    "fused_attention",
)


def _default_model() -> TransformerConfig:
    return TransformerConfig(
        8000,
        8000,
        share_embeddings=True,
        max_len=256,
        pad_id=PAD,
        fused_attention=True,
    )


# The ranges of the numeric settings. Each is checked when a config is built (a preset, from_dict,
# with_changes), before any work, by _check_ranges, whose message names the range and why it ends
# there. Model sizes go up to eight times the paper's big model (d_model 1024, d_ff 4096, h 16,
# N 6, d_k = d_v = 64), far past what a caption corpus can use.
_MODEL_SIZES = {
    "d_model": 8192,
    "d_ff": 32768,
    "h": 128,
    "N": 48,
    "d_k": 512,
    "d_v": 512,
}
MAX_VOCAB = 65536  # pieces of the joint BPE (the paper's had about 37,000)
MAX_POSITIONS = 5000  # TransformerConfig's default max_len
MAX_TOKENS = 2**20  # about 20 times the paper's 25,000 + 25,000 tokens
MAX_AVERAGE = 100  # epochs averaged, each kept on disk (the paper: 5 or 20)
MAX_BEAM = 64  # the paper: 4; each beam is one more row to decode
MAX_SEED = 2**64 - 1  # the largest seed torch.manual_seed takes
# cpu_threads: up to this machine's CPUs, and never fewer than 64, so that the
# config.json of a run folder still reads on a smaller machine
MIN_THREAD_BOUND = 64


def _in_range(
    name: str,
    value: object,
    low: float,
    high: float | None = None,
    *,
    integer: bool = True,
    optional: bool = False,
    open_low: bool = False,
    open_high: bool = False,
    why: str = "",
) -> None:
    """Raise a ``ValueError`` unless ``value`` lies in the range, naming it and, after it, ``why``.

    Args:
        name: the field, as the message names it.
        value: an int (``integer``) or a finite real number, never a bool; ``None`` when
            ``optional``.
        low, high: the bounds, inclusive unless ``open_low`` / ``open_high``; ``high=None``:
            none above.
        why: why the range ends there, appended to the message.
    """
    if optional and value is None:
        return
    kinds = (int,) if integer else (int, float)
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    ok = ok and (isinstance(value, int) or math.isfinite(value))
    ok = ok and (value > low if open_low else value >= low)
    if ok and high is not None:
        ok = value < high if open_high else value <= high
    if ok:
        return
    if integer:
        wanted = f"an integer in {low}..{high}"
        if high is None:
            wanted = f"an integer >= {low}"
    elif high is None:
        wanted = f"a finite number {'>' if open_low else '>='} {low}"
    else:
        left, right = "(" if open_low else "[", ")" if open_high else "]"
        wanted = f"a number in {left}{low}, {high}{right}"
    null = " (or null)" if optional else ""
    because = f"; {why}" if why else ""
    raise ValueError(
        f"{name} must be {wanted}{null}, got {value!r}{because}"
    )


def _check_ranges(cfg: TrainConfig) -> None:
    """Check every numeric field of ``cfg`` and of ``cfg.model`` against its range."""
    model = cfg.model
    big = (
        "eight times the paper's big model (d_model 1024, d_ff 4096, "
        "h 16, N 6, d_k 64) at most"
    )
    for name, high in _MODEL_SIZES.items():
        optional = name in ("d_k", "d_v")
        value = getattr(model, name)
        _in_range(
            f"model.{name}", value, 1, high, optional=optional, why=big
        )
    _in_range(
        "model.src_vocab_size", model.src_vocab_size, 8, MAX_VOCAB,
        why="the paper's joint vocabulary had about 37,000 pieces",
    )  # fmt: skip
    _in_range(
        "model.max_len", model.max_len, 1, MAX_POSITIONS,
        why=f"length_penalty's bound, {MAX_LENGTH_PENALTY}, keeps the "
        f"penalty finite for outputs up to {MAX_POSITIONS} positions",
    )  # fmt: skip
    L = model.max_len
    _in_range(
        "max_tokens", cfg.max_tokens, 1, MAX_TOKENS,
        why="about twenty times the paper's batches of 25,000 source "
        "and 25,000 target tokens",
    )  # fmt: skip
    for name in ("train_subset", "val_subset", "test_subset", "max_steps",
                 "checkpoint_every"):  # fmt: skip
        _in_range(name, getattr(cfg, name), 1, optional=True)
    for name in ("epochs", "warmup", "log_every"):
        _in_range(name, getattr(cfg, name), 1)
    _in_range(
        "seed", cfg.seed, 0, MAX_SEED, why="what torch.manual_seed takes"
    )
    _in_range(
        "average_last", cfg.average_last, 0, MAX_AVERAGE,
        why="each epoch averaged is kept on disk (the paper averaged 5, "
        "or 20 for its big model)",
    )  # fmt: skip
    _in_range("lr_factor", cfg.lr_factor, 0, integer=False, open_low=True)
    _in_range(
        "label_smoothing", cfg.label_smoothing, 0, 1, integer=False,
        open_high=True,
    )  # fmt: skip
    for name in ("clip_norm", "checkpoint_minutes"):
        _in_range(
            name, getattr(cfg, name), 0, integer=False, optional=True,
            open_low=True,
        )  # fmt: skip
    _in_range(
        "pad_to", cfg.pad_to, 1, L, optional=True,
        why=f"no sentence is longer than model.max_len={L}, so a larger "
        "multiple only adds padding",
    )  # fmt: skip
    rows = max(1, cfg.max_tokens // 2)
    _in_range(
        "pad_rows", cfg.pad_rows, 1, rows, optional=True,
        why=f"a batch of max_tokens={cfg.max_tokens} positions holds at "
        f"most {rows} pairs, so a larger multiple only adds empty rows",
    )  # fmt: skip
    cpus = os.cpu_count() or 1
    _in_range(
        "cpu_threads", cfg.cpu_threads, 1, max(cpus, MIN_THREAD_BOUND),
        optional=True,
        why=f"this machine has {cpus} CPUs, and threads beyond them only "
        f"wait on each other (the bound is never below {MIN_THREAD_BOUND}, "
        "so that a run folder reads on a smaller machine)",
    )  # fmt: skip
    _in_range(
        "beam", cfg.beam, 1, MAX_BEAM,
        why="the paper uses 4, and each beam is one more row to decode",
    )  # fmt: skip
    _in_range(
        "length_penalty", cfg.length_penalty, 0, MAX_LENGTH_PENALTY,
        integer=False,
        why=f"as evaluate's --length-penalty: beyond {MAX_LENGTH_PENALTY}, "
        f"the penalty ((5 + L) / 6)^alpha of a {MAX_POSITIONS}-token output "
        "overflows float32 (the paper uses 0.6)",
    )  # fmt: skip
    cut = f"outputs stop at model.max_len={L} positions anyway"
    _in_range("max_len_a", cfg.max_len_a, 0, L, integer=False, why=cut)
    _in_range("max_len_b", cfg.max_len_b, 0, L, why=cut)


@dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run: the model's sizes in ``model``, the rest here.

    Every numeric field, the model's included, is checked against its range when the config is
    built (a preset, ``from_dict``, ``with_changes``), before any work: a value outside it raises a
    ``ValueError`` that names the range and why it ends there, e.g. ``pad_rows must be an integer
    in 1..4096 (or null), got 100000``.

    Args:
        name: a label for the run (the preset's name).
        model: the ``TransformerConfig``. Its ``src_vocab_size`` (= ``tgt_vocab_size``) is the number of
            pieces of the joint sentencepiece BPE model, its ``max_len`` the longest training pair kept
            (pieces, ``<eos>`` included; outputs are cut there too).
        max_tokens: batch budget of padded source plus target positions (``data.make_batches``).
        train_subset, val_subset, test_subset: use only the first so many pairs of a split (``None``: all).
            ``test_subset`` is what ``evaluate`` scores by default.
        epochs: passes over the training data.
        max_steps: stop after this many optimizer steps (``None``: after ``epochs``).
        warmup, lr_factor: the Noam schedule, peak rate ``lr_factor · (d_model · warmup)^-0.5``.
        label_smoothing: ε_ls.
        clip_norm: gradient-norm clipping (``None``: off).
        average_last: ``evaluate`` averages the weights of the last k epochs (0 or 1: the final weights).
        seed: seeds the weights, dropout and the batch order.
        amp: ``"auto"``: on CUDA, bfloat16 autocast where the GPU has it natively (compute
            capability 8.0 and up), float16 with a gradient scaler below (Colab's T4); float32 on
            other devices. ``"bf16"`` or ``"fp16"`` (always) or ``None`` (float32);
            see ``step.amp_dtype_for``.
        adam: Adam's implementation (``schedule.ADAM_IMPLEMENTATIONS``): ``"auto"`` takes the fused
            one on CUDA and PyTorch's default elsewhere; ``"fused"``, ``"foreach"``, ``"for-loop"``
            ask for one (the same update; the tests train with each on the CPU).
        compile: ``torch.compile`` the model's forward pass (slow first steps, faster later ones).
        pin_memory: page-locked batches, copied to the GPU with ``non_blocking=True`` (CUDA only).
        pad_to: pad each batch's source and target lengths up to a multiple of this (``None``: to
            the longest in the batch), at most ``model.max_len``. The same loss and gradients
            (``tests/test_batches.py``), fewer batch shapes, as a captured step needs; with dropout
            the random draws differ, so a resumed run keeps its setting.
        pad_rows: pad each batch's number of sentences up to a multiple of this, with rows that hold
            nothing to predict (``None``: none added), at most ``max_tokens // 2``, the most pairs a
            batch holds. With ``pad_to``, an epoch of ``multi30k`` has a few dozen shapes instead of
            one per batch; the same loss and gradients.
        cuda_graphs: replay the model's forward and backward passes as CUDA graphs, one pair per
            batch shape (``cuda_graphs.GraphedShapes``): far fewer kernel launches a step. CUDA and
            one process only, not with ``compile``. Each shape is captured the first time it comes
            (an epoch's batch shapes come again every epoch): 108 captures for ``multi30k`` as it
            is, 28 with ``pad_to`` 8 and ``pad_rows`` 32, at 31 % more padded positions.
        cpu_threads: on the CPU, ``torch.set_num_threads`` for the run (restored afterwards); ``None``
            keeps torch's setting. Tiny models run faster on one thread, and far faster when other
            processes share the cores (two threads then wait on each other at every small operation).
            At most the machine's CPUs (``os.cpu_count()``), or 64 where it has fewer, so that a
            run folder still reads on a smaller machine.
        log_every: write every k-th training step to ``metrics.jsonl`` (evaluations always).
        checkpoint_every: also save ``checkpoint.pt`` every k steps (``None``: off).
        checkpoint_minutes: also save ``checkpoint.pt`` when this many minutes passed since the last
            save (``None``: off). A checkpoint is also saved after the first step, at the run's end and
            when Ctrl-C, SIGTERM or SIGHUP stops it; not at every epoch's end, so that what a run writes does not grow
            with its epochs (the weights to average are written for the last ``average_last`` only).
        beam, length_penalty: beam size K and α of the GNMT length penalty (the paper: 4 and 0.6);
            α in [0, 13], as ``evaluate --length-penalty`` takes it (``cli.MAX_LENGTH_PENALTY``).
        max_len_a, max_len_b: outputs stop after ``a · S + b`` tokens (the paper: input length + 50),
            and at ``model.max_len`` in any case.
    """

    name: str = "custom"
    model: TransformerConfig = field(default_factory=_default_model)
    # data
    max_tokens: int = 8192
    train_subset: int | None = None
    val_subset: int | None = None
    test_subset: int | None = None
    # optimisation
    epochs: int = 20
    max_steps: int | None = None
    warmup: int = 4000
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    clip_norm: float | None = 1.0
    average_last: int = 5
    seed: int = 0
    # speed
    amp: str | None = "auto"
    adam: str = "auto"
    compile: bool = False
    pin_memory: bool = True
    pad_to: int | None = None
    pad_rows: int | None = None
    cuda_graphs: bool = False
    cpu_threads: int | None = None
    # logging and checkpoints
    log_every: int = 1
    checkpoint_every: int | None = None
    checkpoint_minutes: float | None = 10.0
    # decoding
    beam: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50

    def __post_init__(self) -> None:
        if not isinstance(self.model, TransformerConfig):
            raise TypeError(
                f"model: expected a TransformerConfig, got {type(self.model).__name__}"
            )
        if self.model.src_vocab_size != self.model.tgt_vocab_size:
            raise ValueError(
                "model: one joint vocabulary is trained, so src_vocab_size must equal tgt_vocab_size, got "
                f"{self.model.src_vocab_size} and {self.model.tgt_vocab_size}"
            )
        if self.adam not in ADAM_IMPLEMENTATIONS:
            raise ValueError(
                f"adam must be one of {', '.join(ADAM_IMPLEMENTATIONS)}, got {self.adam!r}"
            )
        if self.cuda_graphs and self.compile:
            raise ValueError(
                "cuda_graphs: not with compile (torch.compile's mode='reduce-overhead' "
                "captures graphs of its own); turn one of them off"
            )
        if self.amp not in ("auto", "bf16", "fp16", None):
            raise ValueError(
                f"amp must be 'auto', 'bf16', 'fp16' or None, got {self.amp!r}"
            )
        _check_ranges(self)

    # Read-only views of the model's sizes under the names a preset table uses.
    vocab_size = property(
        lambda self: self.model.src_vocab_size,
        doc="pieces of the joint vocabulary",
    )
    max_len = property(
        lambda self: self.model.max_len,
        doc="longest training pair kept, and longest output",
    )
    d_model = property(lambda self: self.model.d_model)
    d_ff = property(lambda self: self.model.d_ff)
    h = property(lambda self: self.model.h)
    N = property(lambda self: self.model.N)
    dropout = property(lambda self: self.model.dropout)

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON values (``config.json``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Rebuild a config from ``to_dict`` output, or from the flat ``config.json`` of older run folders."""
        if not isinstance(values, dict):
            raise ValueError(
                f"expected a JSON object of TrainConfig fields, got {type(values).__name__}"
            )
        values = dict(values)
        if (
            "model" not in values
        ):  # an older run folder: the model's fields at the top level
            model = {
                name: values.pop(name)
                for name in _FLAT_MODEL_FIELDS
                if name in values
            }
            vocab = values.pop("vocab_size", 8000)
            model |= {
                "src_vocab_size": vocab,
                "tgt_vocab_size": vocab,
                "pad_id": PAD,
            }
            model["max_len"] = values.pop("max_len", 256)
            values["model"] = model
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown TrainConfig fields {unknown}; known fields are {sorted(known)}"
            )
        # the recurrent baseline's model says so by its "kind"
        is_rnn = values["model"].get("kind") == "rnn"
        kind = RNNConfig if is_rnn else TransformerConfig
        model_fields = {f.name for f in fields(kind)}
        model_unknown = sorted(set(values["model"]) - model_fields)
        if model_unknown:
            raise ValueError(
                f"unknown {kind.__name__} fields {model_unknown}; known are {sorted(model_fields)}"
            )
        return cls(**{**values, "model": kind(**values["model"])})

    def with_changes(self, **changes: Any) -> TrainConfig:
        """A copy with fields replaced; model fields (``d_model=32``) go into ``model``."""
        model_fields = {f.name for f in fields(self.model)}
        model = {
            k: changes.pop(k) for k in list(changes) if k in model_fields
        }
        if "vocab_size" in changes:
            vocab = changes.pop("vocab_size")
            model |= {"src_vocab_size": vocab, "tgt_vocab_size": vocab}
        if "max_len" in changes:
            model["max_len"] = changes.pop("max_len")
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ValueError(
                f"unknown TrainConfig fields {unknown}; known fields are {sorted(f.name for f in fields(self))}"
            )
        return replace(
            self,
            **changes,
            model=replace(self.model, **model) if model else self.model,
        )


# The reasoning behind both presets is in the module docstring.
_MULTI30K = TrainConfig(
    name="multi30k",
    model=TransformerConfig(
        8000, 8000, d_model=512, d_ff=2048, h=8, N=3, dropout=0.3, max_len=256,
        share_embeddings=True, tie_output=True, pad_id=PAD, fused_attention=True,
    ),
    max_tokens=8192,
    epochs=40,
    warmup=1000,
    lr_factor=0.5,
    label_smoothing=0.1,
    clip_norm=1.0,
    average_last=5,
    beam=4,
    length_penalty=0.6,
    max_len_a=1.0,
    max_len_b=50,
)  # fmt: skip

_SMOKE = TrainConfig(
    name="multi30k-smoke",
    model=TransformerConfig(
        1000, 1000, d_model=64, d_ff=128, h=4, N=2, dropout=0.0, max_len=128,
        share_embeddings=True, tie_output=True, pad_id=PAD, fused_attention=True,
    ),
    max_tokens=2048,
    train_subset=2000,
    val_subset=200,
    test_subset=100,
    epochs=3,
    warmup=50,
    lr_factor=0.3,
    average_last=2,
    beam=2,
    max_len_a=1.1,
    max_len_b=5,
    cpu_threads=1,
)  # fmt: skip

# Under an hour on two CPU cores: the multi30k-t4 model (width 256, three layers, the 8,000-piece
# vocabulary) for 14 epochs of 2,048-token batches, 6,314 updates. Chosen from measured throughput
# (tools/laptop_hour.py sizes: two threads train this size at about 1,800 target tokens/s, 14 epochs
# of 443,065 tokens in an hour) and the multi30k-t4 run's curve, still falling at epoch 25 with
# dropout 0.2: a run of half its epochs takes less (0.1) and averages fewer epochs (3). Measured in
# aiayn/results/laptop.json: 48 minutes on the book's build machine, test2016 sacreBLEU 41.69.
_LAPTOP = TrainConfig(
    name="laptop",
    model=TransformerConfig(
        8000, 8000, d_model=256, d_ff=1024, h=4, N=3, dropout=0.1, max_len=256,
        share_embeddings=True, tie_output=True, pad_id=PAD, fused_attention=True,
    ),
    max_tokens=2048,
    epochs=14,
    warmup=1000,
    lr_factor=0.5,
    average_last=3,
    beam=4,
    length_penalty=0.6,
    cpu_threads=2,
)  # fmt: skip

_T4 = TrainConfig(
    name="multi30k-t4",
    model=TransformerConfig(
        8000, 8000, d_model=256, d_ff=1024, h=4, N=3, dropout=0.2, max_len=256,
        share_embeddings=True, tie_output=True, pad_id=PAD, fused_attention=True,
    ),
    max_tokens=4096,
    epochs=25,
    warmup=1000,
    lr_factor=0.5,
    average_last=5,
    beam=4,
    length_penalty=0.6,
)  # fmt: skip

# The recurrent baseline (aiayn.baselines.rnn), trained as _MULTI30K is: the same data, batches,
# schedule, label smoothing, dropout, averaging and beam. d_hidden = d_attn = 920 gives it the
# multi30k model's parameter count within 1 % (tests/test_rnn_baseline.py prints both).
_RNN = replace(
    _MULTI30K,
    name="rnn",
    model=RNNConfig(
        8000, 8000, d_model=512, d_hidden=920, d_attn=920, dropout=0.3,
        max_len=256, share_embeddings=True, tie_output=True, pad_id=PAD,
    ),
)  # fmt: skip

# The recurrent baseline through the whole pipeline on a CPU, as _SMOKE is for the Transformer.
_RNN_SMOKE = replace(
    _SMOKE,
    name="rnn-smoke",
    model=RNNConfig(
        1000, 1000, d_model=64, d_hidden=64, d_attn=64, dropout=0.0,
        max_len=128, share_embeddings=True, tie_output=True, pad_id=PAD,
    ),
)  # fmt: skip

# The laptop recipe with the recurrent model in place of the Transformer: the same data, batches,
# schedule, dropout, averaging and beam, on two CPU threads, for 6 epochs where the laptop trains 14.
# d_hidden = d_attn = 460 gives it the laptop model's parameter count within 0.3 % (7.56 M against
# 7.59 M); d_model 256, as the laptop's, sets the same peak rate. Measured in
# aiayn/results/rnn-laptop.json: 48.8 minutes on the book's build machine, on a day it ran the laptop
# model at half the laptop hour's speed (884 target tokens/s against 1,776), so the two wall times do
# not compare; the record also holds the cost of a step of each model, timed taking turns on the same
# batches. Chapter 1.4 sets the two side by side.
_RNN_LAPTOP = replace(
    _LAPTOP,
    name="rnn-laptop",
    model=RNNConfig(
        8000, 8000, d_model=256, d_hidden=460, d_attn=460, dropout=0.1,
        max_len=256, share_embeddings=True, tie_output=True, pad_id=PAD,
    ),
    epochs=6,
)  # fmt: skip

PRESETS: dict[str, TrainConfig] = {
    "multi30k": _MULTI30K,
    "multi30k-t4": _T4,
    "multi30k-smoke": _SMOKE,
    "laptop": _LAPTOP,
    "rnn": _RNN,
    "rnn-smoke": _RNN_SMOKE,
    "rnn-laptop": _RNN_LAPTOP,
}


def get_preset(name: str, **overrides: Any) -> TrainConfig:
    """The preset called ``name``, with some fields replaced: ``get_preset("multi30k", max_steps=100, N=6)``."""
    if name not in PRESETS:
        raise ValueError(
            f"unknown preset {name!r}; the presets are: {', '.join(PRESETS)}"
        )
    return PRESETS[name].with_changes(**overrides)


def build_model(
    cfg: TrainConfig, tokenizer: Tokenizer | int
) -> Transformer | RNN:
    """The model of ``cfg`` over the tokenizer's vocabulary (or a vocabulary of that many ids).

    A ``Transformer``, or the recurrent baseline ``RNN`` when ``cfg.model`` is an ``RNNConfig``.
    """
    V = tokenizer if isinstance(tokenizer, int) else tokenizer.vocab_size
    model = replace(cfg.model, src_vocab_size=V, tgt_vocab_size=V)
    return RNN(model) if isinstance(model, RNNConfig) else Transformer(model)
