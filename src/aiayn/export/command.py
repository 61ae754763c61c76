"""``python -m aiayn.export [RUN] --out DIR``: the translator as ONNX files for onnxruntime and the book's page.

It exports the published model or any run folder: ``aiayn.export.graphs`` writes the files (its
docstring lists them), then the command scores them on test 2016 with the search the page runs,
written once in Python (``aiayn.export.translator``, which ``aiayn/web/translator.mjs`` mirrors).
The shortlist the page scores is learned from Multi30k's training pairs (``aiayn.export.shortlist``;
``--shortlist none``: none, every id is scored at every step).

The command follows the rules of the others (``aiayn.cli``). ``--out`` is a new or empty folder,
or an earlier export, which is replaced as a whole (its manifest says ``"format":
"aiayn-export/1"``); a run folder, a folder of results or a folder with other files is refused.
RUN, ``--out``, ``--limit`` and the test data are checked before the model is loaded, and a wrong
one is one ``error: ...`` line with exit status 2. Everything is written into a sibling folder,
``DIR.unfinished-export-<random>``, renamed to DIR at the end: Ctrl-C or a crash leaves the old
DIR or none, never half an export. Each folder the export makes beside DIR holds
``.aiayn-export-temporary`` from the start, with the folder's own name in it; the next export
removes a killed one's leftover by that mark and leaves any other folder alone, whatever its name.
While it writes, the export holds an ``flock`` on ``DIR.export-lock`` beside DIR (a file, never
followed through a link, removed at the end): a second export into the same DIR fails at once.
Without RUN, ``$AIAYN_MODEL`` must name the published model's folder; a run folder there is
refused before anything is downloaded into it (name the run as RUN instead). Each step says
what it does; on a terminal, progress bars show the export, the quantization and the scoring
(``--no-progress``: none).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

from .. import cli
from ..files import atomic_write, sha256_file
from ..runs.folder import (
    RunFolder,
)
from .folders import (
    EXPECTED_OUT,
    check_out,
    check_run,
    export_lock,
    staged,
)
from .graphs import MANIFEST, export
from .scores import score_files
from .shortlist import build as build_shortlist


class ExportInterrupted(Exception):
    """Ctrl-C stopped the command; the message says that ``--out`` is as it was."""


def _check_modules(bleu: bool) -> None:
    """The packages of the ``export`` extra, before the model is loaded."""
    needed = ["onnx", "onnxscript", "onnxruntime", "sentencepiece"]
    needed += ["sacrebleu"] if bleu else []
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        raise ModuleNotFoundError(
            f"python -m aiayn.export needs {', '.join(missing)}, which are not "
            "installed: pip install 'aiayn[export]' (or pip install "
            f"{' '.join(missing)})"
        )


def _load(kind: str, path: Path, default: bool):
    """``(config, tokenizer, model, source)`` of a run folder, or of the published model.

    ``source`` names the weights without a path of this machine: the run folder's name, its id
    and checkpoints, or the published weights' file name and SHA-256.
    """
    from ..runs.load import load_run
    from ..runs.published import load_published, weights_file

    if kind == "run":
        cfg, tokenizer, model, sources = load_run(path, "cpu")
        source = {"run": path.resolve().name, "checkpoints": sources}
        run_id = RunFolder(path).run_id()
        if run_id is not None:
            source["run_id"] = run_id
        return cfg, tokenizer, model, source
    published = load_published(None if default else path, download=default)
    weights = weights_file(path)
    return (
        published.config,
        published.tokenizer,
        published.model,
        {"weights": weights.name, "sha256": sha256_file(weights)[1]},
    )


@contextlib.contextmanager
def _noting_ctrl_c() -> Iterator[list[int]]:
    """Note each Ctrl-C in the list it gives (then raise ``KeyboardInterrupt``, as Python does).

    ``torch.onnx.export`` can turn the ``KeyboardInterrupt`` into an error of its own; the note
    tells that it was a Ctrl-C all the same. Outside the main thread nothing is noted.
    """
    stopped: list[int] = []

    def note(signum, frame):
        stopped.append(signum)
        signal.default_int_handler(signum, frame)

    try:
        before = signal.signal(signal.SIGINT, note)
    except ValueError:  # not the main thread
        yield stopped
        return
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, before)


def _command_line(args: argparse.Namespace) -> str:
    """The command as the manifest records it: RUN and DIR instead of this machine's paths."""
    words = ["python", "-m", "aiayn.export"]
    words += [] if args.run is None else ["RUN"]
    words += ["--out", "DIR", "--bleu", args.bleu]
    words += [] if args.limit is None else ["--limit", str(args.limit)]
    return " ".join(words)


def _parser() -> argparse.ArgumentParser:
    p = cli.parser(
        "python -m aiayn.export",
        "Export a translator to ONNX (float32 and int8) for onnxruntime and "
        "the book's page, and score the files on test 2016.",
    )
    p.add_argument(
        "run",
        nargs="?",
        help="a run folder or a published model's folder "
        "(default: $AIAYN_MODEL, else the user cache)",
    )
    p.add_argument(
        "--out",
        required=True,
        help="the folder to write: new, empty, or an earlier export "
        "(replaced whole)",
    )
    p.add_argument(
        "--bleu",
        choices=("none", "int8", "all"),
        default="int8",
        help="score which graphs on test 2016, greedy and beam "
        "(default int8: the files the page uses)",
    )
    p.add_argument(
        "--shortlist",
        choices=("train", "none"),
        default="train",
        help="the lexical shortlist the page scores, learned from the "
        "training pairs (default), or none: every id at every step",
    )
    p.add_argument(
        "--limit",
        type=cli.positive_int,
        default=None,
        help="score only the first N sentences",
    )
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (they show only on a terminal)",
    )
    return p


def _export(args: argparse.Namespace) -> int:
    """Check everything, take ``--out``'s lock, then export (``_write``)."""
    if not args.out.strip():
        raise cli.UsageError(
            "--out must name a folder, got an empty string; "
            "e.g. --out runs/export"
        )
    if args.limit is not None and args.bleu == "none":
        raise cli.UsageError(
            f"--limit {args.limit} chooses the sentences to score, and "
            "--bleu none scores none; drop one of them"
        )
    out = Path(args.out)
    check_out(out)  # before the run is looked at
    kind, run = check_run(args.run)
    if run.resolve() == out.resolve():
        raise cli.UsageError(
            f"--out {out} is the folder of the model it exports; "
            f"{EXPECTED_OUT} elsewhere"
        )
    _check_modules(args.bleu != "none")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except PermissionError as err:
        raise PermissionError(
            f"--out {out}: cannot create {err.filename} ({err.strerror}); "
            "choose a folder you can write to"
        ) from None
    with export_lock(out):  # a second export into out fails here, at once
        return _write(args, out, kind, run)


def _write(args: argparse.Namespace, out: Path, kind: str, run: Path) -> int:
    """Export and score into a staged folder, renamed to ``--out`` at the end (under its lock)."""
    from ..data.multi30k import load_multi30k

    before = check_out(out)  # again, under the lock
    kinds = {"none": (), "int8": (True,), "all": (True, False)}[args.bleu]
    pairs = load_multi30k("test2016")[: args.limit] if kinds else []
    train = load_multi30k("train") if args.shortlist == "train" else []
    progress = not args.no_progress

    def say(line: str) -> None:
        print(line, flush=True)

    try:
        with _noting_ctrl_c() as stopped, staged(out, say) as tmp:
            say(f"loading the model from {run} ...")
            cfg, tokenizer, model, source = _load(
                kind, run, args.run is None
            )
            settings = {
                "beam": cfg.beam,
                "length_penalty": cfg.length_penalty,
                "max_len_a": cfg.max_len_a,
                "max_len_b": cfg.max_len_b,
                "max_len": cfg.max_len,
            }
            shortlist = None
            if train:
                say(f"learning the shortlist from {len(train)} pairs ...")
                shortlist = build_shortlist(
                    zip(
                        tokenizer.encode_batch([s for s, _ in train]),
                        tokenizer.encode_batch([t for _, t in train]),
                        strict=True,
                    )
                )
            manifest = export(
                model, tokenizer, settings, tmp, source, progress, say,
                shortlist,
            )  # fmt: skip
            for int8 in kinds:
                name = "int8" if int8 else "fp32"
                say(
                    f"scoring the {name} graphs on {len(pairs)} sentences of "
                    f"test2016, beam 1 and {cfg.beam} ..."
                )
                scores = score_files(
                    tmp, pairs, int8, (1, cfg.beam), progress=progress
                )
                for key, entry in scores.items():
                    hypotheses = entry.pop("hypotheses")
                    atomic_write(
                        tmp / f"test2016.{name}.{key}.hyp.en",
                        ("\n".join(hypotheses) + "\n").encode(),
                    )
                    entry["command"] = _command_line(args)
                    manifest["bleu"][f"{name}.{key}"] = entry
                    say(
                        f"test2016 {name} {key}: BLEU {entry['bleu']} "
                        f"({entry['decode_s']} s)"
                    )
                atomic_write(
                    tmp / MANIFEST, json.dumps(manifest, indent=1).encode()
                )
    except BaseException as err:
        # the exporter may turn the KeyboardInterrupt into an error of its own
        if not (isinstance(err, KeyboardInterrupt) or stopped):
            raise
        state = "is as it was" if before != "new" else "was not created"
        raise ExportInterrupted(
            f"error: interrupted (Ctrl-C) before the export was finished: "
            f"{out} {state}"
        ) from None
    replaced = " (the earlier export replaced)" if before == "export" else ""
    say(
        f"exported to {out}{replaced}: the page downloads "
        f"{manifest['page_bytes'] / 1e6:.1f} MB"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), export and score; a failure is one ``error:`` line.

    A wrong argument or folder exits with status 2, Ctrl-C with 130, any other failure with 1.
    """
    return cli.run(
        _parser(), argv, _export, interrupted=(ExportInterrupted,)
    )


if __name__ == "__main__":
    raise SystemExit(main())
