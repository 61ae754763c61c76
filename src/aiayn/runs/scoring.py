"""Scoring a trained run: translate a split, score it with our BLEU and sacreBLEU, keep one result per setting.

``evaluate(run_dir)`` loads the run (``aiayn.runs.load.load_run``), translates the split
(``decoding.translate.translate``), scores it and saves the entry ``setting_name(...)`` of ``results.json``
with the translations beside it, under the folder's lock, after checking again whose results the
folder holds. ``python -m aiayn.evaluate`` is its command.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from ..bleu import corpus_bleu
from ..checks import Record, check_int
from ..data.multi30k import encode_pairs, load_multi30k
from ..decoding.translate import (
    AMP_NAMES,
    QUANTIZE,
    check_decoding_options,
    describe_decoding,
    translate,
)
from ..model import set_head_mask
from ..training.batches import eval_batches
from ..training.step import amp_dtype_for, mean_loss
from .folder import (
    CONFIG,
    RESULTS,
    RunFolder,
    RunFolderError,
    shown,
)
from .load import load_run
from .presets import TrainConfig

__all__ = ["EvalResult", "setting_name", "evaluate"]


@dataclass(frozen=True)
class EvalResult(Record):
    """One scored decoding setting of a run (an entry of ``results.json``).

    ``result["bleu"]`` works as well as ``result.bleu`` (code written when this was a dict).
    """

    split: str
    setting: str
    sentences: int
    beam: int
    length_penalty: float
    checkpoints: list[str]
    bleu: float
    bleu_detail: str
    sacrebleu: float | None
    signature: str | None
    loss: float
    ppl: float
    decode_s: float
    sentences_per_s: float
    device: str
    device_name: str
    torch: str
    hypotheses_file: str


def setting_name(
    cfg: TrainConfig,
    split: str,
    beam: int,
    length_penalty: float,
    limit: int | None,
    average: bool,
    quantize: str | None = None,
    amp_dtype: torch.dtype | None | Literal["config"] = "config",
    head_mask: torch.Tensor | None = None,
) -> str:
    """The key of a decoding setting: the split alone for the run's own setting, else what differs.

    ``test2016`` (the config's beam, α, subset, averaged weights, dtype), ``test2016.beam1``,
    ``test2016.beam4.lp1``, ``val.n5.final``, ``test2016.int8``, ``test2016.bf16`` ...; a head
    mask with a head at 0 adds ``.heads`` and the first 8 hex digits of the SHA-256 of its 0s
    and 1s (``test2016.heads3f2a9c1b``).
    """
    name = split
    if beam != cfg.beam:
        name += f".beam{beam}"
    if length_penalty != cfg.length_penalty:
        name += f".lp{length_penalty:g}"
    if limit != cfg.test_subset:
        name += f".n{'all' if limit is None else limit}"
    if not average:
        name += ".final"
    if quantize is not None:
        name += f".{quantize}"
    if amp_dtype != "config":  # a dtype asked for, not the config's
        name += "." + AMP_NAMES[amp_dtype]
    if head_mask is not None and not bool((head_mask == 1).all()):
        bits = "".join("01"[int(v)] for v in head_mask.flatten().tolist())
        name += ".heads" + hashlib.sha256(bits.encode()).hexdigest()[:8]
    return name


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


def _device_name(device: torch.device) -> str:
    import platform

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{device.type} ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


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
    out_dir: str | os.PathLike | None = None,
    quantize: str | None = None,
    amp_dtype: torch.dtype | None | Literal["config"] = "config",
    progress: bool = False,
    head_mask: torch.Tensor | None = None,
) -> EvalResult:
    """Translate a split with a trained run and score it: our BLEU, sacreBLEU, loss, perplexity.

    Each decoding setting keeps its own result: ``results.json`` gets the entry ``setting_name(...)``
    (``test2016`` for the run's own setting, ``test2016.beam1`` ...) and the translations go to
    ``<setting>.hyp.en``, one per source line; other settings' entries and files stay.

    Args:
        run_dir: a folder written by ``train``, or any folder with a run's ``config.json``,
            ``tokenizer.model`` and weights (a published model, a release): without ``out_dir``
            the results go into ``run_dir``, which must then be a folder ``train`` wrote.
        split: ``"test2016"``, ``"val"`` or ``"train"``.
        beam, length_penalty: default: the run's config.
        limit: score the first ``limit`` sentences (at least 1); ``"config"``: the config's
            ``test_subset``; ``None``: all.
        batch_size: sentences per decoding batch.
        device: default CUDA when available.
        root: the Multi30k folder.
        average: average the last epochs' weights as the config says (``False``: the final weights).
        log: called with a progress line or two (e.g. ``print``), the speed and setting among them.
        out_dir: where ``results.json`` and the translations go (default ``run_dir``; another
            folder for a published model, a release, or a folder you cannot write to).
        quantize: ``"int8"`` decodes with an int8 copy of the model (``translate``; CPU only).
        amp_dtype: the autocast dtype of decoding and loss; ``"config"``: the run's ``amp``
            (``step.amp_dtype_for``: none on a CPU); ``None``: float32. A setting other than
            the run's own gets its own entry (``setting_name``).
        progress: show a tqdm bar of the sentences translated (``translate``).
        head_mask: float ``(3, N, h)`` of 0 and 1: the heads switched off (at 0) for the
            translations and the loss (``model.set_head_mask``); a mask with a 0 gets its own
            entry (``setting_name``).

    Returns:
        The ``EvalResult``.
    """
    if limit != "config" and limit is not None:
        check_int("limit", limit, minimum=1)
    if beam is not None:
        check_int("beam", beam, minimum=1)
    if length_penalty is not None and not (
        isinstance(length_penalty, (int, float))
        and math.isfinite(length_penalty)
        and length_penalty >= 0
    ):
        raise ValueError(
            f"length_penalty must be a finite number >= 0, got {length_penalty!r}"
        )
    check_int("batch_size", batch_size, minimum=1)
    run = RunFolder(run_dir)
    if not run.file(CONFIG).is_file():
        what = (
            "is not a folder"
            if not run.path.is_dir()
            else "holds no run (no config.json)"
        )
        raise RunFolderError(
            f"{run.path} {what}: expected a run folder written by python -m aiayn.train"
        )
    out = run if out_dir is None else RunFolder(out_dir)
    _check_writable(out, out_dir is None)
    _check_results_of(out, run)
    out.read_results()  # a damaged results.json is found before decoding

    dtypes = (None, torch.bfloat16, torch.float16)
    if amp_dtype != "config" and amp_dtype not in dtypes:
        raise ValueError(
            "amp_dtype must be 'config', None, torch.bfloat16 or torch.float16, "
            f"got {amp_dtype!r}"
        )
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(
            f"quantize must be None (float32) or one of {QUANTIZE}, got {quantize!r}"
        )
    cfg, tokenizer, model, sources = load_run(run_dir, device, average)
    if head_mask is not None:  # evaluate's own model: decoding and loss
        set_head_mask(model, head_mask)
    device = next(model.parameters()).device
    # the config's: float16 on a T4, bfloat16 on newer GPUs, none on a CPU
    config_amp = amp_dtype_for(cfg.amp, device)
    amp = config_amp if amp_dtype == "config" else amp_dtype
    check_decoding_options(quantize, amp, device)  # before translating
    beam = cfg.beam if beam is None else beam
    length_penalty = (
        cfg.length_penalty
        if length_penalty is None
        else float(length_penalty)
    )
    limit = cfg.test_subset if limit == "config" else limit
    pairs = load_multi30k(split, root)[:limit]
    setting = setting_name(
        cfg, split, beam, length_penalty, limit, average, quantize, amp_dtype,
        head_mask,
    )  # fmt: skip
    sources_text, references = [s for s, _ in pairs], [t for _, t in pairs]
    if log:
        log(
            f"translating {len(pairs)} sentences of {split} "
            f"({describe_decoding(beam, length_penalty, quantize, amp)}) on {device}"
        )

    threads = torch.get_num_threads()
    if cfg.cpu_threads is not None and device.type == "cpu":
        torch.set_num_threads(cfg.cpu_threads)
    try:
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
            quantize=quantize,
            log=log,  # the speed, with the setting
            progress=progress,
        )
        decode_s = time.perf_counter() - start
        loss = mean_loss(
            model,
            eval_batches(encode_pairs(tokenizer, pairs), cfg.max_tokens),
            amp,
        )
    finally:
        torch.set_num_threads(threads)
    ours = corpus_bleu(hypotheses, references)
    sacre, signature = _sacrebleu(hypotheses, references)
    result = EvalResult(
        split=split,
        setting=setting,
        sentences=len(pairs),
        beam=beam,
        length_penalty=length_penalty,
        checkpoints=sources,
        bleu=ours.score,
        bleu_detail=str(ours),
        sacrebleu=sacre,
        signature=signature,
        loss=loss,
        ppl=math.exp(min(loss, 50.0)),
        decode_s=decode_s,
        sentences_per_s=len(pairs) / decode_s if decode_s > 0 else 0.0,
        device=str(device),
        device_name=_device_name(device),
        torch=torch.__version__,
        hypotheses_file=f"{setting}.hyp.en",
    )
    _save(out, run, result, hypotheses)
    return result


def _check_writable(out: RunFolder, is_run: bool) -> None:
    """Fail before translating when the results cannot be written where they should go.

    Without ``--out`` (``is_run``), only a run folder that ``python -m aiayn.train`` wrote (it has
    our ``manifest.json``) is written into: a published model, a release or a copied folder is
    read-only by what it is, whatever its permissions.
    """
    path = out.path
    blocking = next(
        (p for p in path.parents if p.exists() and not p.is_dir()), None
    )
    if blocking is not None:
        raise RunFolderError(
            f"--out {path}: {blocking} is a file, not a folder"
        )
    if path.exists() and not path.is_dir():
        what = "the run folder" if is_run else "--out"
        raise RunFolderError(
            f"{what} {path} is a file; give "
            + (
                "a run folder written by python -m aiayn.train"
                if is_run
                else "a folder for the results"
            )
        )
    if is_run and path.is_dir() and not out.has_manifest():
        raise RunFolderError(
            f"{path} was not written by python -m aiayn.train (no manifest.json: a published model, "
            f"a release, a copied folder), so evaluate writes nothing into it; its results would go "
            f"to {path / RESULTS}: pass --out DIR to write them elsewhere"
        )
    probe = (
        path
        if path.exists()
        else next((p for p in path.parents if p.exists()), Path("."))
    )
    if (
        not os.access(probe, os.W_OK) or not probe.stat().st_mode & 0o222
    ):  # read-only, even for root
        hint = (
            "pass --out DIR to write the results elsewhere"
            if is_run
            else "choose a folder you can write to"
        )
        raise RunFolderError(
            f"{probe} is not writable, so results.json cannot be saved there: {hint}"
        )
    if (
        not is_run
        and path.exists()
        and any(path.iterdir())
        and not out.has_manifest()
    ):
        names = sorted(p.name for p in path.iterdir())
        raise RunFolderError(
            f"--out {path} is not empty ({shown(names)}) and is not a folder aiayn wrote "
            "(no manifest.json); choose a new or empty folder"
        )
    if out.has_manifest():
        # fail now, not after decoding, when another command writes there
        out.check_unlocked()


def _results_of(run: RunFolder) -> str:
    """What a folder of results names as its run: the run's id, else its resolved path."""
    return run.run_id() or str(run.path.resolve())


def _check_results_of(
    out: RunFolder, run: RunFolder, saving: bool = False
) -> None:
    """Results of one run never go into another run's folder, or beside another run's results.

    Checked before decoding, and again under the folder's lock when saving (``saving``): another
    command may have saved there in between.
    """
    if out is run or not out.has_manifest():
        return
    later = (
        " (another command wrote there while this one decoded; nothing was saved)"
        if saving
        else ""
    )
    if out.listed(CONFIG) or out.file(CONFIG).is_file():
        if out.path.resolve() != run.path.resolve():
            raise RunFolderError(
                f"--out {out.path} is another run's folder{later}; its results.json would mix "
                f"the scores of two runs. Choose a new or empty folder for the results of {run.path}"
            )
        return
    source = out.manifest().get("results_of")
    if source is not None and source != _results_of(run):
        raise RunFolderError(
            f"--out {out.path} holds the results of another run ({source}){later}; choose a "
            f"new or empty folder for the results of {run.path}"
        )


# how long saving waits for another command's lock: another evaluation saves in well under a second
SAVE_WAIT_S = 10.0


def _save(
    out: RunFolder, run: RunFolder, result: EvalResult, hypotheses: list[str]
) -> None:
    """Add the result to ``results.json`` and write the translations, under the folder's lock.

    The manifest is read again under the lock, and whose results the folder holds checked again:
    two commands that decode into one new folder at once never mix or overwrite their results.
    """
    with out.locked(wait=SAVE_WAIT_S):
        _check_results_of(out, run, saving=True)
        if not out.has_manifest():
            out.start(None)  # a new folder of results (a run folder has one)
            out.manifest()["results_of"] = _results_of(run)
        results = out.read_results()
        out.write(
            result.hypotheses_file,
            "".join(h.replace("\n", " ") + "\n" for h in hypotheses),
        )
        results[result.setting] = result.to_dict()
        out.write(RESULTS, json.dumps(results, indent=2) + "\n")
