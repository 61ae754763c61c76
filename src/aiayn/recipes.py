"""From raw Multi30k to a scored translation model: presets, data, training, translation, evaluation.

``TrainConfig`` holds every choice of a run; ``PRESETS`` names two of them. ``train(cfg, out_dir)``
builds the tokenizer, the batches and the model, trains with ``aiayn.training.fit`` and leaves
everything in ``out_dir``; ``evaluate(out_dir)`` translates a test split and scores it.

A run folder holds:

    config.json         the TrainConfig
    tokenizer.model     the sentencepiece model the run was trained with
    checkpoint.pt       the latest state (weights, optimizer, schedule, RNG): ``train`` resumes from it
    epoch-NNN.pt        the weights after epoch NNN, only the last ``average_last`` kept, for averaging
    metrics.jsonl       one JSON line per logged step and per evaluation
    summary.json        what ``train`` returned
    <split>.hyp.en      one detokenized translation per line, written by ``evaluate``
    results.json        BLEU, sacreBLEU and its signature, test loss and perplexity, per split

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

``multi30k-smoke`` runs the whole pipeline on two CPU cores in well under a minute: 2,000 training
pairs, a 1,000-piece vocabulary, a two-layer model of width 64 without dropout (far too short a run to
overfit, and drawing dropout masks is a sixth of a CPU step at this size), 3 epochs of 50 steps; the
loss must visibly fall. It validates on 200 pairs and tests on the first 100 sentences with beam 2 and
short outputs, on one CPU thread: on two shared cores a step took 50-85 ms with one thread and
35-1500 ms with two, which wait on each other at every small operation when the cores are busy.

    B  batch        S  source length        T  target length        V  vocabulary size
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from .bleu import corpus_bleu
from .data import (
    BOS,
    EOS,
    PAD,
    Tokenizer,
    collate,
    encode_pairs,
    load_multi30k,
    make_batches,
    train_tokenizer,
)
from .decoding import beam_search, greedy_decode
from .model import Transformer, TransformerConfig, count_parameters
from .training import (
    Batch,
    LabelSmoothingLoss,
    fit,
    load_checkpoint,
    make_optimizer,
    noam_scheduler,
    save_checkpoint,
)

__all__ = [
    "TrainConfig",
    "ResumeError",
    "PRESETS",
    "get_preset",
    "PreparedData",
    "prepare_data",
    "build_model",
    "EpochBatches",
    "train",
    "load_run",
    "average_checkpoints",
    "translate",
    "evaluate",
]


@dataclass(frozen=True)
class TrainConfig:
    """Every choice of a training run; model and optimizer defaults are the paper's base model.

    Args:
        name: a label for the run (the preset's name).
        d_model, d_ff, h, N, dropout: model sizes and P_drop, as in ``TransformerConfig``.
        share_embeddings: one embedding table for German and English (one joint BPE vocabulary).
        tie_output: the generator reuses the target embedding's weight (section 3.4).
        vocab_size: pieces of the joint sentencepiece BPE model.
        max_tokens: batch budget of padded source plus target positions (``data.make_batches``).
        train_subset, val_subset, test_subset: use only the first so many pairs of a split (``None``: all).
            ``test_subset`` is what ``evaluate`` scores by default.
        max_len: training pairs with a side longer than this (pieces, ``<eos>`` included) are left out;
            the positional table covers this many positions and outputs are cut there.
        epochs: passes over the training data.
        max_steps: stop after this many optimizer steps (``None``: after ``epochs``).
        warmup, lr_factor: the Noam schedule, peak rate ``lr_factor · (d_model · warmup)^-0.5``.
        label_smoothing: ε_ls.
        clip_norm: gradient-norm clipping (``None``: off).
        average_last: ``evaluate`` averages the weights of the last k epochs (0 or 1: the final weights).
        seed: seeds the weights, dropout and the batch order.
        amp: ``"auto"`` (bfloat16 autocast on CUDA, float32 elsewhere), ``"bf16"`` (always) or ``None``.
        fused_attention: PyTorch's fused attention kernel instead of the explicit softmax(QKᵀ/√d_k)V.
        compile: ``torch.compile`` the model's forward pass (slow first steps, faster later ones).
        pin_memory: page-locked batches, copied to the GPU with ``non_blocking=True`` (CUDA only).
        cpu_threads: on the CPU, ``torch.set_num_threads`` for the run (restored afterwards); ``None``
            keeps torch's setting. Tiny models run faster on one thread, and far faster when other
            processes share the cores (two threads then wait on each other at every small operation).
        log_every: write every k-th training step to ``metrics.jsonl`` (evaluations always).
        checkpoint_every: also save ``checkpoint.pt`` every k steps (``None``: at each epoch's end).
        beam, length_penalty: beam size K and α of the GNMT length penalty (the paper: 4 and 0.6).
        max_len_a, max_len_b: outputs stop after ``a · S + b`` tokens (the paper: input length + 50).
    """

    name: str = "custom"
    # model
    d_model: int = 512
    d_ff: int = 2048
    h: int = 8
    N: int = 6
    dropout: float = 0.1
    share_embeddings: bool = True
    tie_output: bool = True
    # data
    vocab_size: int = 8000
    max_tokens: int = 8192
    train_subset: int | None = None
    val_subset: int | None = None
    test_subset: int | None = None
    max_len: int = 256
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
    fused_attention: bool = True
    compile: bool = False
    pin_memory: bool = True
    cpu_threads: int | None = None
    # logging and checkpoints
    log_every: int = 1
    checkpoint_every: int | None = None
    # decoding
    beam: int = 4
    length_penalty: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50

    def __post_init__(self) -> None:
        for name in (
            "d_model",
            "d_ff",
            "h",
            "N",
            "vocab_size",
            "max_tokens",
            "max_len",
            "epochs",
            "warmup",
        ):
            _check_int(name, getattr(self, name), minimum=1)
        for name in (
            "train_subset",
            "val_subset",
            "test_subset",
            "max_steps",
            "checkpoint_every",
            "cpu_threads",
        ):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), minimum=1)
        _check_int("log_every", self.log_every, minimum=1)
        _check_int("beam", self.beam, minimum=1)
        _check_int("average_last", self.average_last, minimum=0)
        _check_int("seed", self.seed, minimum=0)
        _check_int("max_len_b", self.max_len_b, minimum=0)
        if self.d_model % self.h:
            raise ValueError(
                f"d_model must be divisible by h, got d_model={self.d_model}, h={self.h}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(
                f"dropout must be in [0, 1), got {self.dropout!r}"
            )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(
                f"label_smoothing must be in [0, 1), got {self.label_smoothing!r}"
            )
        if not self.lr_factor > 0:
            raise ValueError(
                f"lr_factor must be positive, got {self.lr_factor!r}"
            )
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(
                f"clip_norm must be positive or None, got {self.clip_norm!r}"
            )
        if self.amp not in ("auto", "bf16", None):
            raise ValueError(
                f"amp must be 'auto', 'bf16' or None, got {self.amp!r}"
            )
        if not self.length_penalty >= 0:
            raise ValueError(
                f"length_penalty must be non-negative, got {self.length_penalty!r}"
            )
        if not self.max_len_a >= 0:
            raise ValueError(
                f"max_len_a must be non-negative, got {self.max_len_a!r}"
            )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """Rebuild a config from ``asdict`` output (e.g. a run's ``config.json``)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown TrainConfig fields {unknown}; known fields are {sorted(known)}"
            )
        return cls(**values)


def _check_int(name: str, value: object, minimum: int) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
    ):
        raise ValueError(
            f"{name} must be an integer >= {minimum}, got {value!r}"
        )


# The reasoning behind both presets is in the module docstring.
_MULTI30K = TrainConfig(
    name="multi30k",
    d_model=512,
    d_ff=2048,
    h=8,
    N=3,
    dropout=0.3,
    vocab_size=8000,
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
)

_SMOKE = TrainConfig(
    name="multi30k-smoke",
    d_model=64,
    d_ff=128,
    h=4,
    N=2,
    dropout=0.0,
    vocab_size=1000,
    max_tokens=2048,
    train_subset=2000,
    val_subset=200,
    test_subset=100,
    max_len=128,
    epochs=3,
    warmup=50,
    lr_factor=0.3,
    average_last=2,
    beam=2,
    max_len_a=1.1,
    max_len_b=5,
    cpu_threads=1,
)

PRESETS: dict[str, TrainConfig] = {
    "multi30k": _MULTI30K,
    "multi30k-smoke": _SMOKE,
}


def get_preset(name: str, **overrides: Any) -> TrainConfig:
    """The preset called ``name``, with some fields replaced: ``get_preset("multi30k", max_steps=100)``."""
    if name not in PRESETS:
        raise ValueError(
            f"unknown preset {name!r}; the presets are: {', '.join(PRESETS)}"
        )
    return replace(PRESETS[name], **overrides)


# --- Data and model -------------------------------------------------------------------------------

Pairs = list[tuple[str, str]]
IdPairs = list[tuple[list[int], list[int]]]


class PreparedData(NamedTuple):
    """The tokenizer, the sentence pairs of each split (subsets applied) and their ids (no special tokens)."""

    tokenizer: Tokenizer
    train: Pairs
    val: Pairs
    test: Pairs
    train_ids: IdPairs
    val_ids: IdPairs
    test_ids: IdPairs


def prepare_data(
    cfg: TrainConfig,
    root: str | os.PathLike | None = None,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PreparedData:
    """Load Multi30k de→en, learn (or reuse) the joint tokenizer and encode every split.

    The tokenizer is learned from the training pairs that the run uses (``train_subset``). Training pairs
    with a side longer than ``cfg.max_len`` pieces (``<eos>`` included) are dropped; validation and test
    pairs are all kept.

    Args:
        cfg: the run's config.
        root: the Multi30k folder (default ``$AIAYN_DATA``, see ``data.data_dir``).
        tokenizer: use this tokenizer instead of learning one (a resumed run reuses its own).
        cache_dir: where ``train_tokenizer`` caches models (default ``~/.cache/aiayn/tokenizers``).
    """
    splits = {
        split: load_multi30k(split, root)
        for split in ("train", "val", "test2016")
    }
    train_pairs = splits["train"][: cfg.train_subset]
    val_pairs = splits["val"][: cfg.val_subset]
    test_pairs = splits["test2016"][: cfg.test_subset]
    if tokenizer is None:
        tokenizer = train_tokenizer(
            train_pairs, cfg.vocab_size, cache_dir=cache_dir
        )
    train_ids = encode_pairs(tokenizer, train_pairs)
    keep = [
        i
        for i, (s, t) in enumerate(train_ids)
        if max(len(s), len(t)) + 1 <= cfg.max_len
    ]
    return PreparedData(
        tokenizer,
        [train_pairs[i] for i in keep],
        val_pairs,
        test_pairs,
        [train_ids[i] for i in keep],
        encode_pairs(tokenizer, val_pairs),
        encode_pairs(tokenizer, test_pairs),
    )


def build_model(cfg: TrainConfig, tokenizer: Tokenizer | int) -> Transformer:
    """The ``Transformer`` of ``cfg`` over the tokenizer's vocabulary (or a vocabulary of that many ids)."""
    V = tokenizer if isinstance(tokenizer, int) else tokenizer.vocab_size
    config = TransformerConfig(
        V,
        V,
        d_model=cfg.d_model,
        d_ff=cfg.d_ff,
        h=cfg.h,
        N=cfg.N,
        dropout=cfg.dropout,
        max_len=cfg.max_len,
        share_embeddings=cfg.share_embeddings,
        tie_output=cfg.tie_output,
        pad_id=PAD,
        fused_attention=cfg.fused_attention,
    )
    return Transformer(config)


def _amp_dtype(amp: str | None, device: torch.device) -> torch.dtype | None:
    if amp == "bf16" or (
        amp == "auto"
        and device.type == "cuda"
        and torch.cuda.is_bf16_supported()
    ):
        return torch.bfloat16
    return None


def _device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


@contextlib.contextmanager
def _cpu_threads(n: int | None, device: torch.device) -> Iterator[None]:
    """Run the block with ``n`` intra-op threads when on the CPU, then restore the previous count."""
    if n is None or device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pinned(batch: Batch) -> Batch:
    tensors = {
        f.name: getattr(batch, f.name).pin_memory()
        for f in fields(batch)
        if f.name != "n_tokens"
    }
    return replace(batch, **tensors)


class EpochBatches:
    """The training batches of each epoch, for ``fit``: called with an epoch, it yields that epoch's ``Batch``es.

    ``make_batches`` draws the order from ``(seed, epoch)``, so iterating an epoch again gives the same
    batches, which ``fit`` needs to resume in the middle of one. ``len()`` (epoch 0's count) sizes the
    progress bar.

    Args:
        pairs: ``(source ids, target ids)`` per pair.
        max_tokens: padded positions per batch.
        seed: the batch-order seed.
        pin_memory: pin each batch's tensors (only when CUDA is available).
    """

    def __init__(
        self,
        pairs: IdPairs,
        max_tokens: int,
        seed: int = 0,
        pin_memory: bool = False,
    ):
        self.pairs, self.max_tokens, self.seed = pairs, max_tokens, seed
        self.pin_memory = pin_memory and torch.cuda.is_available()
        self._indices: dict[int, list[list[int]]] = {}

    def indices(self, epoch: int) -> list[list[int]]:
        """Pair indices of each batch of ``epoch``."""
        if epoch not in self._indices:
            self._indices[epoch] = make_batches(
                self.pairs,
                self.max_tokens,
                shuffle=True,
                seed=self.seed,
                epoch=epoch,
            )
        return self._indices[epoch]

    def steps_through(self, epoch: int) -> int:
        """Optimizer steps from the start of training to the end of ``epoch``."""
        return sum(len(self.indices(e)) for e in range(epoch + 1))

    def __len__(self) -> int:
        return len(self.indices(0))

    def __call__(self, epoch: int) -> Iterator[Batch]:
        for batch in self.indices(epoch):
            src, tgt = collate(
                [self.pairs[i] for i in batch]
            )  # (B, S), (B, T)
            out = Batch.make(src, tgt, PAD, BOS)
            yield _pinned(out) if self.pin_memory else out


def _eval_batches(pairs: IdPairs, max_tokens: int) -> list[Batch]:
    return [
        Batch.make(*collate([pairs[i] for i in batch]), PAD, BOS)
        for batch in make_batches(pairs, max_tokens, shuffle=False)
    ]


@torch.no_grad()
def _mean_loss(
    model: Transformer,
    batches: Sequence[Batch],
    device: torch.device,
    amp: torch.dtype | None,
) -> float:
    """Per-token cross-entropy (no smoothing) of ``model`` on ``batches``, teacher forced."""
    loss_fn = LabelSmoothingLoss(0.0, ignore_index=PAD, reduction="sum")
    total, tokens = 0.0, 0
    for batch in batches:
        batch = batch.to(device, non_blocking=True)
        with torch.autocast(
            device.type, dtype=amp or torch.bfloat16, enabled=amp is not None
        ):
            logits = model(
                batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask
            )  # (B, T, V)
        total += float(loss_fn(logits.float(), batch.tgt_out))
        tokens += batch.n_tokens
    return total / tokens


# --- Training -------------------------------------------------------------------------------------

# fields that may change when a run is resumed: how long to go on, and how fast or how to decode
_RESUMABLE_CHANGES = {
    "epochs", "max_steps", "amp", "compile", "pin_memory", "cpu_threads", "log_every", "checkpoint_every",
    "beam", "length_penalty", "max_len_a", "max_len_b", "test_subset",
}  # fmt: skip
_RUN_FILES = (
    "checkpoint.pt",
    "metrics.jsonl",
    "summary.json",
    "results.json",
    "tokenizer.model",
    "config.json",
)


def _epoch_checkpoints(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("epoch-*.pt"))


class ResumeError(ValueError):
    """A run folder cannot be continued with the config given (it was trained with other settings)."""


def _check_resumable(old: TrainConfig, new: TrainConfig) -> None:
    changed = [
        f.name
        for f in fields(TrainConfig)
        if getattr(old, f.name) != getattr(new, f.name)
    ]
    fixed = [name for name in changed if name not in _RESUMABLE_CHANGES]
    if fixed:
        details = ", ".join(
            f"{name}: {getattr(old, name)!r} -> {getattr(new, name)!r}"
            for name in fixed
        )
        raise ResumeError(
            f"cannot resume: the run was trained with other settings ({details}). "
            "Use another output folder, or resume=False (--no-resume) to start this one afresh"
        )


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [
        json.loads(line)
        for line in path.read_text().splitlines()
        if line.strip()
    ]


def train(
    cfg: TrainConfig | str,
    out_dir: str | os.PathLike,
    root: str | os.PathLike | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
    resume: bool = True,
) -> dict[str, Any]:
    """Train the model of ``cfg`` on Multi30k de→en and leave the run in ``out_dir``.

    With ``resume`` and a ``checkpoint.pt`` in ``out_dir``, training continues from it exactly (weights,
    optimizer, schedule, RNG and position in the epoch); ``metrics.jsonl`` is cut back to the checkpoint's
    step and continues from there. Only the length (``epochs``, ``max_steps``), speed and decoding
    settings may differ from the saved ``config.json``. Without ``resume`` the run's files are replaced.

    Args:
        cfg: a ``TrainConfig`` or a preset name.
        out_dir: the run folder (created if needed).
        root: the Multi30k folder (default ``$AIAYN_DATA``).
        device: default CUDA when available, else CPU.
        progress: show a progress bar.
        resume: continue from ``out_dir/checkpoint.pt`` when it exists.

    Returns:
        A summary: steps, epochs, wall time, training tokens/s, last losses, val loss and perplexity,
        parameters, device and torch version (also written to ``summary.json``).
    """
    start_time = time.perf_counter()
    cfg = get_preset(cfg) if isinstance(cfg, str) else cfg
    device = _device(device)
    with _cpu_threads(cfg.cpu_threads, device):
        return _train(
            cfg, Path(out_dir), root, device, progress, resume, start_time
        )


def _train(
    cfg: TrainConfig,
    out: Path,
    root: str | os.PathLike | None,
    device: torch.device,
    progress: bool,
    resume: bool,
    start_time: float,
) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    amp = _amp_dtype(cfg.amp, device)
    ckpt_path, metrics_path = out / "checkpoint.pt", out / "metrics.jsonl"

    resuming = resume and ckpt_path.is_file()
    if resuming:
        _check_resumable(
            TrainConfig.from_dict(
                json.loads((out / "config.json").read_text())
            ),
            cfg,
        )
    else:
        for name in _RUN_FILES:
            (out / name).unlink(missing_ok=True)
        for path in [*_epoch_checkpoints(out), *out.glob("*.hyp.en")]:
            path.unlink()
    (out / "config.json").write_text(
        json.dumps(asdict(cfg), indent=2) + "\n"
    )

    tokenizer = Tokenizer(out / "tokenizer.model") if resuming else None
    data = prepare_data(cfg, root, tokenizer=tokenizer)
    if not resuming:
        shutil.copyfile(data.tokenizer.model_file, out / "tokenizer.model")

    torch.manual_seed(cfg.seed)
    model = build_model(cfg, data.tokenizer).to(device)
    optimizer = make_optimizer(model)  # fused Adam when the model is on CUDA
    scheduler = noam_scheduler(
        optimizer, cfg.d_model, cfg.warmup, cfg.lr_factor
    )
    if cfg.compile:
        model.compile()  # in place: state_dict keys and attributes stay those of the plain model
    batches = EpochBatches(
        data.train_ids,
        cfg.max_tokens,
        cfg.seed,
        cfg.pin_memory and device.type == "cuda",
    )
    val_batches = [
        b.to(device) for b in _eval_batches(data.val_ids, cfg.max_tokens)
    ]  # moved once

    # The metrics log, cut back to what the checkpoint knows about, then appended to.
    position = {"step": 0, "epoch": 0}
    records = []
    if resuming:
        saved = torch.load(ckpt_path, map_location="cpu", weights_only=True)
        position = {"step": saved["step"], "epoch": saved["epoch"]}
        del saved
        records = [
            r
            for r in _read_metrics(metrics_path)
            if r["step"] <= position["step"]
        ]
    metrics_path.write_text("".join(json.dumps(r) + "\n" for r in records))
    evaluated = {r["step"] for r in records if r["event"] == "eval"}
    last_eval = next(
        (r for r in reversed(records) if r["event"] == "eval"), {}
    )
    first_step = position["step"]

    with open(metrics_path, "a") as log_file:

        def write(record: dict[str, Any]) -> None:
            log_file.write(json.dumps(record) + "\n")
            log_file.flush()

        def log(record: dict[str, Any]) -> None:
            nonlocal last_eval
            if record["event"] == "step":
                position.update(step=record["step"], epoch=record["epoch"])
                if (
                    record["step"] % cfg.log_every == 0
                    or record["step"] == first_step + 1
                ):
                    seconds = record["seconds"]
                    write(
                        {
                            **record,
                            "tokens_per_s": record["tokens"] / seconds
                            if seconds > 0
                            else 0.0,
                        }
                    )
            elif (
                record["step"] not in evaluated
            ):  # a resume at an epoch's end evaluates that epoch again
                evaluated.add(record["step"])
                last_eval = record
                write(record)

        def eval_fn(model: Transformer) -> dict[str, float]:
            epoch_done = position["step"] == batches.steps_through(
                position["epoch"]
            )
            if epoch_done and cfg.average_last > 1:
                epoch_file = out / f"epoch-{position['epoch'] + 1:03d}.pt"
                save_checkpoint(
                    epoch_file,
                    model,
                    step=position["step"],
                    epoch=position["epoch"] + 1,
                )
                for old in _epoch_checkpoints(out)[: -cfg.average_last]:
                    old.unlink()
            val_loss = _mean_loss(model, val_batches, device, amp)
            return {
                "val_loss": val_loss,
                "val_ppl": math.exp(min(val_loss, 50.0)),
                "epoch_done": epoch_done,
            }

        history = fit(
            model,
            batches,
            epochs=cfg.epochs,
            optimizer=optimizer,
            scheduler=scheduler,
            loss_fn=LabelSmoothingLoss(
                cfg.label_smoothing, ignore_index=PAD
            ),
            clip_norm=cfg.clip_norm,
            amp_dtype=amp,
            device=device,
            max_steps=cfg.max_steps,
            eval_fn=eval_fn,
            checkpoint_path=ckpt_path,
            checkpoint_every=cfg.checkpoint_every,
            resume_from=ckpt_path if resuming else None,
            progress=progress,
            log=log,
        )

    new = [i for i, s in enumerate(history.step) if s > first_step]
    tokens = sum(history.tokens[i] for i in new)
    seconds = sum(history.seconds[i] for i in new)
    summary = {
        "preset": cfg.name,
        "out_dir": str(out),
        "device": str(device),
        "device_name": _device_name(device),
        "torch": torch.__version__,
        "amp": str(amp).replace("torch.", "") if amp else None,
        "fused_attention": cfg.fused_attention,
        "compile": cfg.compile,
        "parameters": count_parameters(model),
        "train_pairs": len(data.train_ids),
        "resumed_from_step": first_step if resuming else None,
        "steps": history.step[-1] if history.step else first_step,
        "steps_this_run": len(new),
        "epochs_done": position["epoch"]
        + int(bool(last_eval.get("epoch_done", False))),
        "wall_s": time.perf_counter() - start_time,
        "train_s": seconds,
        "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
        "loss_first": history.loss[0] if history.loss else None,
        "loss_last": history.loss[-1] if history.loss else None,
        "val_loss": last_eval.get("val_loss"),
        "val_ppl": last_eval.get("val_ppl"),
    }
    if device.type == "cuda":
        summary["peak_memory_mib"] = (
            torch.cuda.max_memory_allocated(device) / 2**20
        )
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


# --- Loading a run and translating ----------------------------------------------------------------


def average_checkpoints(
    paths: Sequence[str | os.PathLike],
) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights in ``paths`` (floating-point tensors; others from the last)."""
    if not paths:
        raise ValueError(
            "average_checkpoints: expected at least one checkpoint path, got none"
        )
    states = [load_checkpoint(p)["model"] for p in paths]
    mean = {}
    for key, value in states[-1].items():
        if value.is_floating_point():
            mean[key] = (
                sum(s[key].double() for s in states)
                .div(len(states))
                .to(value.dtype)
            )
        else:
            mean[key] = value
    return mean


def load_run(
    run_dir: str | os.PathLike,
    device: torch.device | str | None = None,
    average: bool = True,
) -> tuple[TrainConfig, Tokenizer, Transformer, list[str]]:
    """Rebuild a trained model from its run folder, in eval mode.

    With ``average`` and ``average_last = k > 1``, the weights are the mean of the last k epoch
    checkpoints, plus the final weights when training stopped inside an epoch after them.

    Returns:
        ``(config, tokenizer, model, names of the checkpoints whose weights it holds)``.
    """
    run = Path(run_dir)
    for name in ("config.json", "tokenizer.model", "checkpoint.pt"):
        if not (run / name).is_file():
            raise FileNotFoundError(
                f"{run / name} is missing: is {run} a run folder written by aiayn.recipes.train?"
            )
    cfg = TrainConfig.from_dict(
        json.loads((run / "config.json").read_text())
    )
    tokenizer = Tokenizer(run / "tokenizer.model")
    model = build_model(cfg, tokenizer)
    sources = [run / "checkpoint.pt"]
    if average and cfg.average_last > 1:
        epochs = _epoch_checkpoints(run)
        final_step = torch.load(
            run / "checkpoint.pt", map_location="cpu", weights_only=True
        )["step"]
        last_epoch_step = (
            load_checkpoint(epochs[-1])["step"] if epochs else -1
        )
        sources = epochs + (
            [run / "checkpoint.pt"] if final_step > last_epoch_step else []
        )
        sources = sources[-cfg.average_last :]
    model.load_state_dict(average_checkpoints(sources))
    return (
        cfg,
        tokenizer,
        model.to(_device(device)).eval(),
        [p.name for p in sources],
    )


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
) -> list[str]:
    """Translate ``sentences`` and return detokenized strings, in input order.

    Sentences are grouped by length and decoded up to ``batch_size`` at a time, with beam search
    (``beam > 1``) or greedy decoding (``beam == 1``). A batch holds sources of one length S (``<eos>``
    included): no padding, one output limit ``max_len_a · S + max_len_b`` (capped at the model's
    ``max_len``) for all, and a batch of short sentences stops early. So a sentence's translation does
    not depend on which others are translated with it. Sources longer than ``max_len`` are cut there.

    Args:
        model: a trained ``Transformer`` (its device is used).
        tokenizer: the run's tokenizer.
        sentences: source sentences.
        beam: beam size K (1: greedy).
        length_penalty: α of the GNMT length penalty.
        batch_size: most sentences per batch (each becomes K rows in beam search).
        max_len_a, max_len_b: the output length limit.
        amp_dtype: run under ``torch.autocast`` with this dtype (``torch.bfloat16`` on CUDA is faster).
    """
    if isinstance(sentences, str) or not all(
        isinstance(s, str) for s in sentences
    ):
        raise TypeError("sentences: expected a list of str")
    _check_int("beam", beam, minimum=1)
    _check_int("batch_size", batch_size, minimum=1)
    device = next(model.parameters()).device
    max_len = model.config.max_len
    ids = [
        s[: max_len - 1] + [EOS]
        for s in tokenizer.encode_batch(list(sentences))
    ]
    by_length: dict[int, list[int]] = {}
    for i in sorted(range(len(ids)), key=lambda i: len(ids[i])):
        by_length.setdefault(len(ids[i]), []).append(i)
    chunks = [
        same[k : k + batch_size]
        for same in by_length.values()
        for k in range(0, len(same), batch_size)
    ]
    out: list[str] = [""] * len(ids)
    for chunk in chunks:
        S = len(ids[chunk[0]])
        src = torch.tensor(
            [ids[i] for i in chunk], dtype=torch.long, device=device
        )  # (B, S), no padding
        limit = min(
            int(max_len_a * S + max_len_b) + 1, max_len
        )  # + 1 for <bos>
        with torch.autocast(
            device.type,
            dtype=amp_dtype or torch.bfloat16,
            enabled=amp_dtype is not None,
        ):
            if beam == 1:
                tokens = greedy_decode(
                    model, src, None, limit, BOS, EOS
                )  # (B, L)
            else:
                tokens = beam_search(
                    model, src, None, limit, BOS, EOS, beam, length_penalty
                ).tokens  # (B, L)
        for i, text in zip(
            chunk, tokenizer.decode_batch(tokens.cpu()), strict=True
        ):
            out[i] = text
    return out


# --- Evaluation -----------------------------------------------------------------------------------


def _sacrebleu(
    hypotheses: list[str], references: list[str]
) -> tuple[float | None, str | None]:
    """sacreBLEU's score and signature, the reference scorer (an optional dependency, imported here only)."""
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        return None, None
    bleu = BLEU()
    return bleu.corpus_score(hypotheses, [references]).score, str(
        bleu.get_signature()
    )


def evaluate(
    run_dir: str | os.PathLike,
    split: str = "test2016",
    beam: int | None = None,
    length_penalty: float | None = None,
    limit: int | None | Literal["config"] = "config",
    batch_size: int = 128,
    device: torch.device | str | None = None,
    root: str | os.PathLike | None = None,
    average: bool = True,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Translate a split with a trained run and score it: our BLEU, sacreBLEU with its signature, loss, perplexity.

    Writes ``run_dir/<split>.hyp.en`` (one translation per source line) and adds the split's entry to
    ``run_dir/results.json``.

    Args:
        run_dir: a folder written by ``train``.
        split: ``"test2016"``, ``"val"`` or ``"train"``.
        beam, length_penalty: default: the run's config.
        limit: score the first ``limit`` sentences; ``"config"``: the config's ``test_subset``; ``None``: all.
        batch_size: sentences per decoding batch.
        device: default CUDA when available.
        root: the Multi30k folder.
        average: average the last epochs' weights as the config says (``False``: the final weights).
        log: called with a progress line or two (e.g. ``print``).

    Returns:
        The results: ``bleu`` (ours), ``sacrebleu``, ``signature``, ``loss``, ``ppl``, sizes and timings.
    """
    run = Path(run_dir)
    cfg, tokenizer, model, sources = load_run(run, device, average)
    device = next(model.parameters()).device
    amp = _amp_dtype(cfg.amp, device)
    beam = cfg.beam if beam is None else beam
    length_penalty = (
        cfg.length_penalty if length_penalty is None else length_penalty
    )
    limit = cfg.test_subset if limit == "config" else limit
    pairs = load_multi30k(split, root)[:limit]
    sources_text, references = [s for s, _ in pairs], [t for _, t in pairs]
    if log:
        log(
            f"translating {len(pairs)} sentences of {split} with beam {beam}, α {length_penalty} on {device}"
        )

    with _cpu_threads(cfg.cpu_threads, device):
        start = time.perf_counter()
        hypotheses = translate(
            model,
            tokenizer,
            sources_text,
            beam,
            length_penalty,
            batch_size,
            cfg.max_len_a,
            cfg.max_len_b,
            amp,
        )
        decode_s = time.perf_counter() - start
        loss = _mean_loss(
            model,
            _eval_batches(encode_pairs(tokenizer, pairs), cfg.max_tokens),
            device,
            amp,
        )
    (run / f"{split}.hyp.en").write_text(
        "".join(h.replace("\n", " ") + "\n" for h in hypotheses)
    )
    ours = corpus_bleu(hypotheses, references)
    sacre, signature = _sacrebleu(hypotheses, references)
    result = {
        "split": split,
        "sentences": len(pairs),
        "beam": beam,
        "length_penalty": length_penalty,
        "checkpoints": sources,
        "bleu": ours.score,
        "bleu_detail": str(ours),
        "sacrebleu": sacre,
        "signature": signature,
        "loss": loss,
        "ppl": math.exp(min(loss, 50.0)),
        "decode_s": decode_s,
        "sentences_per_s": len(pairs) / decode_s if decode_s > 0 else 0.0,
        "device": str(device),
        "device_name": _device_name(device),
        "torch": torch.__version__,
    }
    results_path = run / "results.json"
    results = (
        json.loads(results_path.read_text())
        if results_path.is_file()
        else {}
    )
    results[split] = result
    results_path.write_text(json.dumps(results, indent=2) + "\n")
    return result
