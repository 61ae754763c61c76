"""pytest's hooks for the whole repository: the chapters' kernels under nbval talk over Unix sockets.

nbval starts a kernel for each chapter, and jupyter_client gives it five TCP ports on 127.0.0.1 by binding
port 0, closing the socket and handing the number to the kernel, which binds it again. Between the two, any
process may take that number, for instance as the source port of a connection to the other worker's kernel:
then the new kernel cannot bind it and dies ("Kernel died before replying to kernel_info"), and every cell
of its chapter fails. A kernel died so in a CI self-check, at the first chapter of one worker while the
other worker started its own (nbval sends a kernel's errors to /dev/null, so the cause is inferred, not
seen). Over IPC each channel is a Unix socket, a file in a folder of this process's own: there is no number
to lose.

With ``--reader-install`` (the portable pass of `make nbval-portable`), each kernel first runs
tools/reader_install.py's guard: only the modules of a reader's ``pip install aiayn[book]`` can be imported.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import pytest

READER_INSTALL = Path(__file__).resolve().parent / "tools" / "reader_install.py"
# run by the kernel before the chapter's first cell; run_path's namespace is its own, and runpy is deleted,
# so the chapter sees no name of it
GUARD = f"import runpy; runpy.run_path({str(READER_INSTALL)!r}, run_name='aiayn_reader_guard'); del runpy"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--reader-install",
        action="store_true",
        help="nbval: the chapters' kernels import only what `pip install aiayn[book]` installs",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("nbval", default=False):
        return
    import nbval.kernel

    folder = tempfile.mkdtemp(prefix="aiayn-kernels-")
    numbers = itertools.count()
    reader_install = config.getoption("reader_install")
    tcp = nbval.kernel.KernelManager

    class UnixSocketKernelManager(tcp):
        """nbval's kernel manager, its five channels ``{folder}/kernel-{n}-1`` to ``-5``."""

        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", f"{folder}/kernel-{next(numbers)}")
            super().__init__(**kwargs)

        def start_kernel(self, **kwargs):
            if reader_install:
                kwargs["extra_arguments"] = [*kwargs.get("extra_arguments", []), f"--IPKernelApp.exec_lines={GUARD}"]
            return super().start_kernel(**kwargs)

    nbval.kernel.KernelManager = UnixSocketKernelManager
    config.add_cleanup(lambda: setattr(nbval.kernel, "KernelManager", tcp))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
