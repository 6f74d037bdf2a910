"""What diagnose's steps share: the context they fill, and how a step says ok, warn or skip (a
finding, kdkit.core.finding) or fail (it raises StepFailed: what failed, and the fix).

Standard library only; torch is imported by the torch-import step and kept here.
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.core.builds import GPU_BACKENDS
from kdkit.core.finding import Finding


class StepFailed(Exception):
    """A step's verdict is fail: what was found, and what the user does about it. ``exit_code`` is
    diagnose's: 1 (the check failed) unless the step names another of kdkit.core.errors' (3:
    something is unavailable)."""

    def __init__(self, detail: str, fix: str, exit_code: int = 1) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fix = fix
        self.exit_code = exit_code


def _step(verdict: str, detail: str) -> Finding:
    """A step's finding; its name is the step's row (kdkit.probe.diagnose.runner), the runner's to
    give."""
    return Finding("steps", "", None, None, "", None, verdict, detail)


def ok(detail: str) -> Finding:
    return _step("ok", detail)


def warn(detail: str) -> Finding:
    return _step("warn", detail)


def skip(detail: str) -> Finding:
    return _step("skip", detail)


@dataclass
class Context:
    """Everything the steps learn, in order; ``facts`` goes to the report as is."""

    expect: str
    memory_share: float
    project: Path | None
    expected: str | None = None  # resolved from expect: cuda | rocm | cpu
    facts: dict[str, Any] = field(default_factory=dict)
    # Reasons a GPU may be invisible, collected by earlier steps as warnings; the
    # devices step turns them into its fix, so the user sees causes, not a symptom.
    causes: list[str] = field(default_factory=list)
    torch: Any = None
    device_ids: list[int] = field(default_factory=list)

    @property
    def gpu_expected(self) -> bool:
        return self.expected in GPU_BACKENDS

    @property
    def gpu_kind(self) -> str:
        return "ROCm" if self.expected == "rocm" else "CUDA"

    def devices(self) -> list[str]:
        """Device strings the compute steps run on: every visible GPU, or the CPU."""
        return [f"cuda:{i}" for i in self.device_ids] if self.gpu_expected else ["cpu"]

    def need_gpu(self, step: str) -> Finding | None:
        """A skip outcome when no GPU is expected, else None (the step goes on)."""
        if self.gpu_expected:
            return None
        return skip(f"{self.expected} expected; {step} concerns GPUs only")


StepFn = Callable[[Context], Finding]


def import_torch() -> Any:
    return importlib.import_module("torch")


def synchronize(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


@contextmanager
def captured_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """Collect torch's warnings (e.g. "driver too old") so they land in the report, not on
    stderr."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def warning_text(caught: list[warnings.WarningMessage]) -> str:
    lines = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
    return "; ".join(dict.fromkeys(lines))


@contextmanager
def project_on_path(root: Path) -> Iterator[None]:
    """Make the project's modules importable (its root first on sys.path) for the duration."""
    entry = str(root)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)


def env(name: str) -> str | None:
    return os.environ.get(name)
