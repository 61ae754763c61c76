"""``python -m aiayn.published``: check, release and copy into the book the published model.

The model itself is loaded by ``aiayn.runs.published.load_published``; this module is its command.

The command line:

    python -m aiayn.published check [DIR]         # download and check the published files
    python -m aiayn.published release RUN --out runs/release         # aiayn.runs.release
    python -m aiayn.published results RUN --commit <sha> --date <day> --command "..."
    python -m aiayn.published attention --lines 209 757 276

``results`` copies a run's figures into the book (``results_dir()``, package data, each file well
under 1 MB); ``attention`` adds the published model's attention on a few test lines.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
from collections.abc import Sequence
from pathlib import Path

from . import cli
from .runs import published as _loader
from .runs.published import (
    SHA256,
    fetch_published,
    load_published,
    results_dir,
)
from .runs.weights_files import SUMS, read_sums

__all__ = ["main"]


def __getattr__(name: str):
    """``aiayn.published.load_published`` and the loader's other names, where they were before."""
    return getattr(_loader, name)


def _day(text: str) -> str:
    """An argparse type: a day written YYYY-MM-DD (``2026-11-23``)."""
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            raise ValueError(text)
        datetime.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a day as YYYY-MM-DD (e.g. 2026-11-23), got {text!r}"
        ) from None
    return text


def _parser() -> argparse.ArgumentParser:
    parser = cli.parser(
        "python -m aiayn.published", _loader.__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    debug = {
        "action": "store_true",
        "help": "show the traceback of an error",
    }
    rel = sub.add_parser(
        "release",
        help="prepare release files, SHA256SUMS and a model card from a run",
    )
    rel.add_argument("run", help="a trained run, evaluated on test2016")
    rel.add_argument(
        "--out",
        default="runs/release",
        help="a new or empty folder for the files (default runs/release, "
        "which git ignores)",
    )
    rel.add_argument(
        "--half",
        action="store_true",
        help="store the weights in float16: half the size, a few "
        "translations differ from the run's (default float32: the same)",
    )
    rel.add_argument("--debug", **debug)
    res = sub.add_parser(
        "results", help="copy a run's figures into src/aiayn/results"
    )
    res.add_argument("run", help="a trained and evaluated run folder")
    res.add_argument("--out", default="src/aiayn/results")
    res.add_argument(
        "--commit", required=True, help="the commit the run used"
    )
    res.add_argument(
        "--date",
        required=True,
        type=_day,
        help="the day of the run (YYYY-MM-DD)",
    )
    res.add_argument(
        "--command", action="append", required=True, dest="commands"
    )
    res.add_argument(
        "--bench",
        type=Path,
        default=None,
        help="python -m aiayn.bench --json output",
    )
    res.add_argument("--debug", **debug)
    att = sub.add_parser(
        "attention",
        help="the published model's attention on chosen test lines, for "
        "chapter 11 without the model",
    )
    att.add_argument("--lines", type=int, nargs="+", required=True)
    att.add_argument("--out", default="src/aiayn/results")
    att.add_argument("--data", default=None, help="the Multi30k folder")
    att.add_argument("--debug", **debug)
    chk = sub.add_parser(
        "check", help="check (and download) the published files"
    )
    chk.add_argument(
        "root",
        nargs="?",
        default=None,
        help="default $AIAYN_MODEL or the user cache",
    )
    chk.add_argument("--debug", **debug)
    return parser


def _command(args: argparse.Namespace) -> int:
    # the maintainer's tools, imported by their commands only: loading the model needs neither
    from .pages.book_results import write_attention, write_results
    from .runs.release import prepare_release

    if args.command == "release":
        sums = prepare_release(args.run, args.out, half=args.half)
        for name, digest in sums.items():
            print(f"{digest}  {Path(args.out) / name}")
        print(f"{SUMS} last: check with (cd {args.out} && sha256sum -c "
              f"{SUMS}); load with aiayn.runs.published.load_published(root="
              f"'{args.out}'); upload {', '.join(sums)} and {SUMS} as the "
              "assets of a GitHub release")  # fmt: skip
    elif args.command == "results":
        bench = json.loads(args.bench.read_text()) if args.bench else None
        files = write_results(args.run, args.out, commit=args.commit, date=args.date,
                              commands=args.commands, bench=bench)  # fmt: skip
        for path in files.values():
            print(f"{path}: {path.stat().st_size:,} bytes")
    elif args.command == "attention":
        _, tokenizer, model, _ = load_published()
        path = write_attention(model, tokenizer, args.lines, Path(args.out),
                               results=results_dir(), root=args.data)  # fmt: skip
        print(f"{path}: {path.stat().st_size:,} bytes")
    else:
        directory = fetch_published(args.root)
        names = (
            read_sums(directory / SUMS)
            if (directory / SUMS).is_file()
            else SHA256
        )
        print(f"{directory}: {', '.join(names)} present and intact")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m aiayn.published release RUN``, ``... results RUN --commit ...`` or ``... check``.

    A wrong argument or input prints one ``error: ...`` line and exits with status 2
    (``aiayn.cli.run``); ``--debug`` shows the traceback.
    """
    return cli.run(_parser(), argv, _command)


if __name__ == "__main__":
    raise SystemExit(main())
