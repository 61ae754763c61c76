"""What a reader's ``pip install aiayn[book]`` installs, and a guard that makes everything else unimportable.

The portable nbval pass (``make nbval-portable``) runs each chapter as a reader meets it: alone in an
empty folder, against the package installed from its wheel, and, through this guard, with only the
modules of the distributions that ``pip install "aiayn[book]"`` brings (the chapters' extra), plus
``ipykernel``, the Jupyter kernel that runs them. Every other module of this environment (onnxruntime,
pytest, playwright, jupyter-book, ...) is not found in the chapter's kernel, as on a laptop with a fresh
install (``ModuleNotFoundError: No module named 'onnxruntime'``): a chapter that imports one fails
there, not in a reader's hands.

    python tools/reader_install.py           # the distributions a reader gets, and the modules blocked

The root conftest.py starts each kernel of that pass with ``runpy.run_path`` of this file under the
name ``GUARD``, which calls ``block_imports`` (the chapter's namespace gets no name from it).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

EXTRA = "book"  # pyproject.toml's extra for the chapters
KERNEL = "ipykernel"  # what runs a chapter (Colab and any Jupyter have it)
GUARD = "aiayn_reader_guard"  # the run name under which this file installs the guard


def _name(dist: str) -> str:
    """A distribution's normalised name (PEP 503): ``Jinja2`` and ``jinja2`` are one."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def reader_distributions(extra: str = EXTRA) -> set[str]:
    """The installed distributions that ``pip install aiayn[extra]`` and ipykernel require, transitively."""
    from packaging.requirements import Requirement

    wanted, seen = [("aiayn", {extra}), (KERNEL, set())], set()
    while wanted:
        dist, extras = wanted.pop()
        if _name(dist) in seen:
            continue
        seen.add(_name(dist))
        try:
            requires = metadata.distribution(dist).requires or []
        except metadata.PackageNotFoundError:  # an optional one this environment lacks
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
                wanted.append((req.name, set(req.extras)))
    return seen


def blocked_modules(extra: str = EXTRA) -> dict[str, str]:
    """Top-level module -> the distribution that installs it here, for every module no reader distribution
    installs (standard library names aside)."""
    allowed = reader_distributions(extra)
    blocked = {}
    for module, dists in metadata.packages_distributions().items():
        if module in sys.stdlib_module_names or not module.isidentifier():
            continue
        if not any(_name(d) in allowed for d in dists):
            blocked[module] = dists[0]
    return blocked


def block_imports(blocked: dict[str, str]) -> None:
    """From now on, the import system finds no module of ``blocked``, as on a machine without them.

    ``import onnxruntime`` raises ``ModuleNotFoundError: No module named 'onnxruntime'`` and
    ``importlib.util.find_spec`` returns ``None``, which libraries use to look for what is installed
    (torch does, for a list of packages); raising in ``find_spec`` instead would break them. Nor does
    ``importlib.metadata`` list their distributions. Every finder on ``sys.meta_path`` now answers through
    one that first refuses the blocked names.
    """
    import importlib.abc

    finders = list(sys.meta_path)
    hidden = {_name(dist) for dist in blocked.values()}

    class ReaderInstall(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname.partition(".")[0] in blocked:
                return None
            for finder in finders:
                find = getattr(finder, "find_spec", None)
                spec = None if find is None else find(fullname, path, target)
                if spec is not None:
                    return spec
            return None

        def find_distributions(self, *args, **kwargs):
            """What importlib.metadata reads: every distribution but the blocked ones."""
            for finder in finders:
                find = getattr(finder, "find_distributions", None)
                for dist in [] if find is None else find(*args, **kwargs):
                    if _name(dist.metadata["Name"] or "") not in hidden:
                        yield dist

        def invalidate_caches(self):
            for finder in finders:
                if hasattr(finder, "invalidate_caches"):
                    finder.invalidate_caches()

    sys.meta_path[:] = [ReaderInstall()]


if __name__ == GUARD:
    block_imports(blocked_modules())
elif __name__ == "__main__":
    reader = sorted(reader_distributions())
    blocked = blocked_modules()
    print(f"a reader's install (aiayn[{EXTRA}] and {KERNEL}): {len(reader)} distributions: {', '.join(reader)}")
    print(f"blocked in the chapters' kernels: {len(blocked)} modules: {', '.join(sorted(blocked))}")
