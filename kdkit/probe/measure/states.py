"""Comparing the states and losses of a resume test's phases: which paths differ, which required
parts a checkpoint lacks, where the losses first diverge. On a CPU values must be identical; on a
GPU floats may differ by the stated tolerance.

A checkpoint is one file (a dict of the parts below, the template's format before issue 28) or a
folder in the Hugging Face Trainer layout: model.pt (or model.safetensors, pytorch_model.bin),
optimizer.pt, scheduler.pt, scaler.pt, rng_state.pth (or rng_state_<rank>.pth) and
trainer_state.json (global_step, data_position). A folder is read into the same dict: a part whose
file is absent is missing, except the scaler (Hugging Face writes scaler.pt only with mixed
precision: without it the loop has none). A folder with a SHA256SUMS (kdkit train's) must hold every
file it lists, unchanged.

Standard library only, plus torch (imported lazily) to read and compare the checkpoints.
"""

from __future__ import annotations

import importlib
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kdkit.core.checksums import SUMS
from kdkit.core.checksums import read_sums as read_checksums
from kdkit.core.errors import CheckFailed, Unavailable
from kdkit.core.jsonio import sha256_file
from kdkit.probe.measure.torchimport import import_torch

# What a checkpoint must hold (a part the loop does not have is stored as None, never left out).
REQUIRED = ("step", "data_position", "model", "optimizer", "scheduler", "scaler", "rng")
RNG_REQUIRED = ("python", "torch", "cuda", "numpy")
# What a checkpoint may hold about the run that wrote it rather than about training (the template's
# torchrun run ID and process count): two runs that train identically differ there, so it is never
# compared.
META = "meta"
# Floats on a GPU may differ this much (|a - b| <= ATOL + RTOL * |b|); a CPU must match exactly.
GPU_RTOL = 1e-5
GPU_ATOL = 1e-7
# A checkpoint folder: the files each part is read from (the first found), in the Hugging Face
# Trainer's names.
PART_FILES = {"model": ("model.pt", "model.safetensors", "pytorch_model.bin"),
              "optimizer": ("optimizer.pt",),
              "scheduler": ("scheduler.pt",), "scaler": ("scaler.pt",), "rng": ("rng_state.pth",)}
OPTIONAL = ("scaler",)  # absent: None, the loop has no such part
TRAINER_STATE = "trainer_state.json"
RANK_RNG = re.compile(r"rng_state_([0-9]{1,5})\.pth")


def _close(a: float, b: float, gpu: bool) -> bool:
    if gpu:
        return math.isclose(a, b,
                            rel_tol=GPU_RTOL, abs_tol=GPU_ATOL) or (math.isnan(a) and math.isnan(b))
    return a == b or (math.isnan(a) and math.isnan(b))


def _tensor_differs(a: Any, b: Any, gpu: bool) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return True
    if gpu and a.is_floating_point():
        return not torch.allclose(a.double(), b.double(), rtol=GPU_RTOL,
                                  atol=GPU_ATOL, equal_nan=True)
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
    """Required parts a checkpoint leaves out (None counts as present: the loop has no such
    part)."""
    if not isinstance(state, dict):
        return list(REQUIRED)
    missing = [key for key in REQUIRED if key not in state]
    rng = state.get("rng")
    if isinstance(rng, dict):
        missing += [f"rng.{key}" for key in RNG_REQUIRED if key not in rng]
    return missing


def _torch() -> Any:
    try:
        torch = import_torch("resume-test")  # its numpy warning said once, in words
    except ImportError:
        raise Unavailable(f"{sys.executable}: torch is not importable here; run resume-test with "
                          "the project's interpreter (--python) or inside the image") from None
    return torch


def _cause(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _load_file(path: Path) -> Any:
    """One file of a checkpoint, with torch.load(weights_only=True) (numpy's generator state
    allowed, as the Hugging Face Trainer's rng_state.pth holds it), or safetensors."""
    torch = _torch()
    try:
        if path.suffix == ".safetensors":
            return importlib.import_module("safetensors.torch").load_file(str(path), device="cpu")
        with torch.serialization.safe_globals(_numpy_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except ImportError:
        raise Unavailable(f"{path}: reading it needs the safetensors package; install it") from None
    except Exception as exc:  # torch raises many types (pickle, zip, unsupported global)
        raise CheckFailed(
            f"{path}: cannot be loaded with torch.load(weights_only=True) "
            f"({_cause(exc)})") from None


def _numpy_globals() -> list[Any]:
    numpy = sys.modules.get("numpy")
    if numpy is None:
        return []
    reconstruct = (getattr(numpy, "_core", None) or numpy.core).multiarray._reconstruct
    return [reconstruct, numpy.ndarray, numpy.dtype, type(numpy.dtype(numpy.uint32))]


def _listed_problems(folder: Path) -> list[str]:
    """A folder's SHA256SUMS against its files: a listed file gone or changed."""
    if not (folder / SUMS).is_file():
        return []
    sums = read_checksums(folder, "checkpoint folder", "")
    return [f"{folder / name}: listed in {SUMS} but "
            f"{'missing' if not (folder / name).is_file() else 'changed'}; the checkpoint is "
            "incomplete" for name, digest in sums.items()
            if not (folder / name).is_file() or sha256_file(folder / name) != digest]


def _rng(folder: Path, state: dict[str, Any]) -> None:
    """rng_state.pth (the template's: lists in rank order; the Trainer's: one process's) or
    rng_state_<r>.pth."""
    ranks = sorted((int(m.group(1)), path) for path in folder.iterdir()
                   if (m := RANK_RNG.fullmatch(path.name)))
    if "rng" not in state and ranks:
        per_rank = [_load_file(path) for _rank, path in ranks]
        state["rng"] = {key: [own.get(key) for own in per_rank] for key in per_rank[0]}
    rng = state.get("rng")
    if isinstance(rng, dict):
        # one process's generators, not lists in rank order
        if isinstance(rng.get("python"), tuple):
            rng = {key: [value] for key, value in rng.items()}
        if "cpu" in rng and "torch" not in rng:  # the Trainer calls torch's CPU generator "cpu"
            rng["torch"] = rng.pop("cpu")
        state["rng"] = rng


def load_folder(folder: Path) -> dict[str, Any]:
    """A checkpoint folder read into the single file's dict (META included)."""
    problems = _listed_problems(folder)
    if problems:
        raise CheckFailed(problems[0])
    state: dict[str, Any] = {}
    for part, names in PART_FILES.items():
        found = next((folder / name for name in names if (folder / name).is_file()), None)
        if found is not None:
            state[part] = _load_file(found)
        elif part in OPTIONAL:
            state[part] = None
    _rng(folder, state)
    if (folder / TRAINER_STATE).is_file():
        try:
            trainer = json.loads((folder / TRAINER_STATE).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise CheckFailed(f"{folder / TRAINER_STATE}: not JSON ({_cause(exc)})") from None
        if isinstance(trainer, dict) and "global_step" in trainer:
            state["step"] = trainer["global_step"]
        # the Trainer derives the data position from global_step: None, not lost
        if isinstance(trainer, dict):
            state["data_position"] = trainer.get("data_position")
            state.update({META: trainer[META]} if META in trainer else {})
    return state


def load_state(path: Path) -> Any:
    """A checkpoint's training state (a single file or a checkpoint folder): all of it but its
    META."""
    if path.is_dir():
        state = load_folder(path)
    else:
        torch = _torch()
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types (pickle, zip, unsupported global)
            raise CheckFailed(f"{path}: cannot be loaded with torch.load(weights_only=True) "
                              f"({_cause(exc)})") from None
    return {key: value for key,
            value in state.items() if key != META} if isinstance(state, dict) else state


def state_bytes(path: Path) -> int:
    """The size of a checkpoint: its file, or every file in its folder."""
    if path.is_dir():
        return sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
    return path.stat().st_size


def first_divergence(reference: list[float], resumed: list[float],
                     offset: int, gpu: bool) -> int | None:
    """The first step whose loss differs (or is missing), counted from step 0."""
    for index, expected in enumerate(reference):
        if index >= len(resumed) or not _close(float(expected), float(resumed[index]), gpu):
            return offset + index
    return None if len(resumed) == len(reference) else offset + len(reference)
