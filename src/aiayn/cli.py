"""What the three commands share: errors in one line, and tracebacks only with ``--debug``.

``python -m aiayn.train``, ``aiayn.evaluate`` and ``aiayn.bench`` build their parser with
``parser()`` and run with ``run``: a wrong argument, a bad value or a folder that cannot be used
prints ``error: <what was expected, what arrived, what to do>`` on one line and exits with status 2;
an unexpected failure prints one line too and exits with 1. ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from .checks import UnusableInput
from .files import DiskFull, disk_full, is_disk_full

__all__ = ["UsageError", "parser", "run"]

T = TypeVar("T")

# Errors that mean "the input was wrong": status 2. Everything else is a failure: status 1.
USAGE_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError,
                UnusableInput)  # fmt: skip


class UsageError(ValueError):
    """A command-line argument is missing or wrong."""


class _Parser(argparse.ArgumentParser):
    def error(
        self, message: str
    ) -> None:  # argparse prints usage and exits; we raise instead
        raise UsageError(f"{message} (see {self.prog} --help)")


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` whose errors are raised (``run`` prints them) and with ``--debug``."""
    p = _Parser(prog=prog, description=description)
    p.add_argument(
        "--debug", action="store_true", help="show the traceback of an error"
    )
    return p


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _exit_ctrl_c() -> SystemExit:
    """Status 130 for a Ctrl-C the command has reported, as its docstring promises.

    CPython marks the process to die by SIGINT once a ``KeyboardInterrupt`` leaves an ``exec`` or
    ``eval`` of a string, even if the program catches it later (``dataclasses`` and PyTorch run such
    code while they import or trace); its status is then lost. A successful ``exec`` of a string
    clears that mark.
    """
    exec("")
    return SystemExit(130)


def run(
    p: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    body: Callable[[argparse.Namespace], T],
    interrupted: tuple[type[BaseException], ...] = (),
) -> T:
    """Parse ``argv`` and call ``body(args)``; turn errors into one ``error: ...`` line and an exit status.

    Args:
        p: from ``parser``.
        argv: the arguments (default ``sys.argv[1:]``).
        body: the command.
        interrupted: exception types that report a Ctrl-C after which the work was saved: their
            message is printed as is, with exit status 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = p.parse_args(argv)
        return body(args)
    except SystemExit:
        raise
    except interrupted as err:
        print(_one_line(str(err)), file=sys.stderr)
        raise _exit_ctrl_c() from None
    except KeyboardInterrupt:
        if debug:
            raise
        print("error: interrupted (Ctrl-C)", file=sys.stderr)
        raise _exit_ctrl_c() from None
    except (
        DiskFull
    ) as err:  # the message names the file and says how to go on
        if debug:
            raise
        print(f"error: {_one_line(err.strerror)}", file=sys.stderr)
        raise SystemExit(1) from None
    except USAGE_ERRORS as err:
        if debug:
            raise
        message = (
            str(err.args[0])
            if isinstance(err, KeyError) and err.args
            else str(err)
        )
        print(f"error: {_one_line(message)}", file=sys.stderr)
        raise SystemExit(2) from None
    except Exception as err:  # a failure, not a usage error
        if debug:
            raise
        if is_disk_full(err):
            said = disk_full(err, "run the same command again").strerror
            print(f"error: {_one_line(said)}", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"error: {type(err).__name__}: {_one_line(str(err))} (rerun with --debug for the traceback)",
              file=sys.stderr)  # fmt: skip
        raise SystemExit(1) from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    return _int(text, 1)


def natural_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    return _int(text, 0)


def _int(text: str, minimum: int) -> int:
    return _number(
        text, int, f"an integer >= {minimum}", lambda v: v >= minimum
    )


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    return _number(
        text,
        float,
        "a finite number > 0",
        lambda v: 0 < v < math.inf,
        echo=True,
    )


def nonnegative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    return _number(
        text,
        float,
        "a finite number >= 0",
        lambda v: 0 <= v < math.inf,
        echo=True,
    )


# Outputs are at most TransformerConfig's default max_len (5000) columns long: α up to this keeps
# beam search's length penalty ((5 + L) / 6)^α finite in float32 for all of them (13.19 there).
MAX_LENGTH_PENALTY = 13


def length_penalty(text: str) -> float:
    """An argparse type: α of the GNMT length penalty, in [0, ``MAX_LENGTH_PENALTY``]."""
    why = (
        f": beyond {MAX_LENGTH_PENALTY}, the penalty ((5 + L) / 6)^alpha of "
        "a 5000-token output overflows float32 (the paper uses 0.6)"
    )
    return _number(
        text,
        float,
        f"a length penalty alpha in [0, {MAX_LENGTH_PENALTY}]",
        lambda v: 0 <= v <= MAX_LENGTH_PENALTY,
        echo=True,
        why=why,
    )


def _number(text, parse, expected, ok, echo=False, why=""):
    """Parse ``text``; refuse it as ``expected`` when it does not parse or ``ok`` says no.

    The refusal shows the value read, or the text as typed when ``echo`` (floats: ``nan``,
    ``1e400``), then ``why``. ``ok`` compares, and every comparison with ``nan`` is false.
    """
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {expected}, got {text!r}"
        ) from None
    if not ok(value):
        shown = text if echo else value
        raise argparse.ArgumentTypeError(
            f"expected {expected}, got {shown}{why}"
        )
    return value
