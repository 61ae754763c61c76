"""Runs: the presets (``presets``), the run folder and its record (``folder``, ``run_log``), a run from a
preset to a trained folder (``recipes``), scoring (``scoring``), loading a run (``load``), the published
model (``published``, ``weights_files``) and a release (``release``).
"""

from pathlib import Path


def __getattr__(name: str):
    """The names of the former module ``aiayn.runs``, now ``aiayn.runs.folder``."""
    if (Path(__file__).parent / f"{name}.py").exists():
        # a module of this folder: the import system loads it
        raise AttributeError(name)
    from . import folder

    try:
        return getattr(folder, name)
    except AttributeError:
        raise AttributeError(
            f"module 'aiayn.runs' has no attribute {name!r}"
        ) from None
