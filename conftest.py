"""pytest's hooks for the whole repository: the chapters' kernels under nbval talk over Unix sockets.

nbval starts a kernel for each chapter, and jupyter_client gives it five TCP ports on 127.0.0.1 by binding
port 0, closing the socket and handing the number to the kernel, which binds it again. Between the two, any
process may take that number, for instance as the source port of a connection to the other worker's kernel:
then the new kernel cannot bind it and dies ("Kernel died before replying to kernel_info"), and every cell
of its chapter fails. A kernel died so in a CI self-check, at the first chapter of one worker while the
other worker started its own (nbval sends a kernel's errors to /dev/null, so the cause is inferred, not
seen). Over IPC each channel is a Unix socket, a file in a folder of this process's own: there is no number
to lose.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("nbval", default=False):
        return
    import nbval.kernel

    folder = tempfile.mkdtemp(prefix="aiayn-kernels-")
    numbers = itertools.count()
    tcp = nbval.kernel.KernelManager

    class UnixSocketKernelManager(tcp):
        """nbval's kernel manager, its five channels ``{folder}/kernel-{n}-1`` to ``-5``."""

        def __init__(self, **kwargs):
            kwargs.setdefault("transport", "ipc")
            kwargs.setdefault("ip", f"{folder}/kernel-{next(numbers)}")
            super().__init__(**kwargs)

    nbval.kernel.KernelManager = UnixSocketKernelManager
    config.add_cleanup(lambda: setattr(nbval.kernel, "KernelManager", tcp))
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
