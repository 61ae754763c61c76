"""What the commands print for a reader to run next works as printed, and evaluation shows its progress."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from test_runs import TINY

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_printed_evaluate_command_finds_data_given_inline(tmp_path, root, cache):
    """``AIAYN_DATA=... python -m aiayn.train`` prints a next command that runs without that variable."""
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(TINY.with_changes(epochs=1).to_dict()))
    base = {k: v for k, v in os.environ.items() if k != "AIAYN_DATA"}
    base |= {"PYTHONPATH": str(REPO / "src"), "XDG_CACHE_HOME": str(cache), "OMP_NUM_THREADS": "1"}
    trained = run([sys.executable, "-m", "aiayn.train", "--config", str(config), "--out", str(tmp_path / "run"),
                   "--device", "cpu", "--no-progress"], {**base, "AIAYN_DATA": str(root)})  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    command = re.search(r"next: (python -m aiayn\.evaluate .*)$", trained.stdout, re.M).group(1)
    assert f"--data {shlex.quote(str(root.resolve()))}" in command
    argv = shlex.split(command)
    evaluated = run([sys.executable, *argv[1:], "--device", "cpu"], base)  # no AIAYN_DATA now
    assert evaluated.returncode == 0, evaluated.stderr
    assert "our BLEU" in evaluated.stdout
    assert "sentence" not in evaluated.stderr  # no bar off a terminal: a script reads one error line
    # on a terminal, a progress bar of the sentences translated
    code, shown = on_a_terminal([sys.executable, *argv[1:], "--device", "cpu", "--beam", "1"], base)
    assert code == 0 and re.search(r"5/5 \[", shown), shown


def on_a_terminal(argv: list[str], env: dict) -> tuple[int, str]:
    """Run ``argv`` with its stderr on a pseudo-terminal; the exit status and what the terminal showed."""
    leader, follower = pty.openpty()
    # a terminal of 24 rows and 100 columns (a new pseudo-terminal has none, and tqdm then draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    return process.wait(timeout=300), shown.decode(errors="replace")
