"""Comparing the states and losses of a resume test's phases: which paths differ, which required parts a
checkpoint lacks, where the losses first diverge. On a CPU values must be identical; on a GPU floats
may differ by the stated tolerance.

Standard library only, plus torch (imported lazily) to read and compare the checkpoints.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kdkit.core.errors import CheckFailed, Unavailable

# What a checkpoint must hold (a part the loop does not have is stored as None, never left out).
REQUIRED = ("step", "data_position", "model", "optimizer", "scheduler", "scaler", "rng")
RNG_REQUIRED = ("python", "torch", "cuda", "numpy")
# What a checkpoint may hold about the run that wrote it rather than about training (the template's
# torchrun run ID and process count): two runs that train identically differ there, so it is never compared.
META = "meta"
# Floats on a GPU may differ this much (|a - b| <= ATOL + RTOL * |b|); a CPU must match exactly.
GPU_RTOL = 1e-5
GPU_ATOL = 1e-7


def _close(a: float, b: float, gpu: bool) -> bool:
    if gpu:
        return math.isclose(a, b, rel_tol=GPU_RTOL, abs_tol=GPU_ATOL) or (math.isnan(a) and math.isnan(b))
    return a == b or (math.isnan(a) and math.isnan(b))


def _tensor_differs(a: Any, b: Any, gpu: bool) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if gpu and a.is_floating_point():
        return not torch.allclose(a.double(), b.double(), rtol=GPU_RTOL, atol=GPU_ATOL, equal_nan=True)
    return not torch.equal(a, b)


def differences(a: Any, b: Any, path: str = "", gpu: bool = False) -> Iterator[str]:
    """Dotted paths where two nested states differ (floats within tolerance on a GPU)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key in a and key in b:
                yield from differences(a[key], b[key], sub, gpu)
            else:
                yield sub
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from differences(x, y, f"{path}.{index}" if path else str(index), gpu)
    elif _leaf_differs(a, b, gpu):
        yield path


def _leaf_differs(a: Any, b: Any, gpu: bool) -> bool:
    """Whether two values that are not both dicts (nor sequences of one length) differ."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return _tensor_differs(a.cpu(), b.cpu(), gpu)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return True  # of different lengths
    if isinstance(a, float) and isinstance(b, float):
        return not _close(a, b, gpu)
    return type(a) is not type(b) or a != b


def component(path: str) -> str:
    """The part of the state a path belongs to: ``rng.torch``, ``scheduler``, ``model``…"""
    parts = path.split(".")
    return ".".join(parts[:2]) if parts[0] == "rng" else parts[0]


def by_component(paths: Iterator[str]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for path in paths:
        grouped.setdefault(component(path), []).append(path)
    return grouped


def missing_parts(state: Any) -> list[str]:
    """Required parts a checkpoint leaves out (None counts as present: the loop has no such part)."""
    if not isinstance(state, dict):
        return list(REQUIRED)
    missing = [key for key in REQUIRED if key not in state]
    rng = state.get("rng")
    if isinstance(rng, dict):
        missing += [f"rng.{key}" for key in RNG_REQUIRED if key not in rng]
    return missing


def load_state(path: Path) -> Any:
    """A checkpoint's training state: all of it but its META."""
    try:
        import torch
    except ImportError:
        raise Unavailable(f"{sys.executable}: torch is not importable here; run resume-test with the "
                          "project's interpreter (--python) or inside the image") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types (pickle, zip, unsupported global)
        raise CheckFailed(f"{path}: cannot be loaded with torch.load(weights_only=True) "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    return {key: value for key, value in state.items() if key != META} if isinstance(state, dict) else state


def first_divergence(reference: list[float], resumed: list[float], offset: int, gpu: bool) -> int | None:
    """The first step whose loss differs (or is missing), counted from step 0."""
    for index, expected in enumerate(reference):
        if index >= len(resumed) or not _close(float(expected), float(resumed[index]), gpu):
            return offset + index
    return None if len(resumed) == len(reference) else offset + len(reference)
