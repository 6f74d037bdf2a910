"""Peak memory per sweep cell (kdkit.probe.measure.sweep): the GPU allocator's peak, or the resident
set's high-water mark; and what an out-of-memory failure looks like. Standard library only (torch
where present)."""

from __future__ import annotations

import gc
import resource
from pathlib import Path
from typing import Any

CLEAR_REFS = Path("/proc/self/clear_refs")
STATUS = Path("/proc/self/status")


class Memory:
    """Peak memory per cell: the GPU allocator's peak, or the resident set's high-water mark."""

    def __init__(self, device: str) -> None:
        self.torch: Any = None
        if device.startswith("cuda"):
            import torch

            self.torch = torch
            self.kind = "torch.cuda.max_memory_allocated"
        elif _clear_refs_works():
            self.kind = "peak RSS (VmHWM, reset per cell)"
        else:
            self.kind = "peak RSS of the process (ru_maxrss, not resettable here)"

    def reset(self) -> None:
        gc.collect()
        if self.torch is not None:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
        elif self.kind.startswith("peak RSS (VmHWM"):
            CLEAR_REFS.write_text("5", encoding="ascii")

    def peak(self) -> int:
        if self.torch is not None:
            return int(self.torch.cuda.max_memory_allocated())
        if self.kind.startswith("peak RSS (VmHWM"):
            return _vm_hwm()
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _vm_hwm() -> int:
    for line in STATUS.read_text(encoding="ascii").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _clear_refs_works() -> bool:
    """Linux resets the peak RSS when "5" is written to /proc/self/clear_refs (not in every
    sandbox)."""
    try:
        CLEAR_REFS.write_text("5", encoding="ascii")
        return _vm_hwm() > 0
    except OSError:
        return False


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (CUDA and ROCm), or an allocator error that says so."""
    return type(exc).__name__ == "OutOfMemoryError" or isinstance(exc, MemoryError) or (
        "out of memory" in str(exc).lower())
