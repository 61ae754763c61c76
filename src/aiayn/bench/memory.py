"""How much memory does a contender need? Its peak, on CUDA by phase, on a CPU for the process.

On CUDA, ``torch.cuda.max_memory_allocated`` over a contender's set-up, warm-up and first timed
pass, less what the other contenders hold (all of them stay on the device for the rounds): weights,
Adam's states, activations and gradients. On a CPU there is no per-phase counter: the column shows
the process's peak resident memory after the contender's warm-up (``resource.getrusage().ru_maxrss``),
which never decreases, so it compares contenders only when a later one needs more than every
earlier one.

``start_memory`` marks the start of a phase, ``peak_memory_mib`` reads its peak beyond the mark.
"""

from __future__ import annotations

import torch

__all__ = ["start_memory", "allocated_bytes", "peak_memory_mib"]


def start_memory(device: torch.device) -> int:
    """On CUDA: synchronise, reset the peak counter, return the bytes allocated now (else 0)."""
    if device.type != "cuda":
        return 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def allocated_bytes(device: torch.device) -> int:
    """On CUDA: the bytes allocated now (else 0)."""
    return (
        torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    )


def peak_memory_mib(
    device: torch.device, base_bytes: int = 0
) -> float | None:
    """CUDA: the peak since ``start_memory`` beyond ``base_bytes``; else the process's peak."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - base_bytes
        return peak / 2**20
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return kib / 2**10
