"""What the GPU driver's tools answer, turned into facts kdkit can judge: running one tool with a
time limit, reading one printed value ("81559", "Enabled", "Not Active", "[N/A]", "[Insufficient
Permissions]") and the fact record of one GPU. Shared by the NVIDIA reader (smi_nvidia.py) and the
AMD one (smi_amd.py). Standard library only.

A GPU's facts are a plain dict (it goes to the evidence as JSON): ``index`` and ``vendor``, one key
per reading (``memory_mib``, ``ecc_uncorrected_volatile``, ``pcie_gen``,
``throttle.hw_thermal_slowdown``...) holding the parsed value or None, ``raw`` (what the tool
printed for each key) and ``unread`` (why a key holds None: "[N/A]", "[Insufficient Permissions]",
"not a number: 'x'"); ``unreadable`` when its whole line could not be read. A key that is absent was
not reported at all (a field the driver does not know).
"""

from __future__ import annotations

import math
import shutil
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import KdkitError
from kdkit.core.proc import Completed
from kdkit.probe.diagnose.host import hardware_hints

if TYPE_CHECKING:
    from typing import TypedDict

    class SmiQuery(TypedDict):
        """The query-gpu fields asked (as the driver knows them), renamed and refused."""

        fields: list[str]
        renamed: dict[str, str]
        unknown: list[str]

    class SmiFacts(TypedDict):
        """What the driver's tool said about this machine (new_facts; each GPU new_gpu's)."""

        vendor: str | None
        tool: str | None
        driver_version: str | None
        cuda_version: str | None
        gpus: list[dict[str, Any]]  # one new_gpu record each: its reading keys vary by tool
        query: SmiQuery
        problems: list[str]
        failure: str | None
        device_nodes: list[str]


# The words the tools print for a state: nvidia-smi's "Enabled"/"Disabled" (persistence, ECC and MIG
# modes), "Active"/"Not Active" (clock event reasons), "Yes"/"No" (pending retirement, remapped
# rows), as its man page describes them (https://docs.nvidia.com/deploy/nvidia-smi/index.html);
# amd-smi's "ENABLED", "ACTIVE", "THROTTLED"/"UNTHROTTLED" (ROCm/amdsmi
# amdsmi_cli/amdsmi_commands.py).
FLAGS = {"enabled": True, "active": True, "yes": True, "on": True, "true": True, "throttled": True,
         "disabled": False, "not active": False, "no": False, "off": False, "false": False,
         "unthrottled": False}
# Values that say a reading could not be taken: nvidia-smi brackets them ("[N/A]", "[Not
# Supported]", "[Insufficient Permissions]", "[Unknown Error]"); amd-smi prints "N/A".
NOT_READ = ("N/A", "NA", "UNKNOWN ERROR", "NOT SUPPORTED")


class Called:
    """One run of a driver tool: its answer (``done``), or why there is none (``failure``, one
    line), and whether it ran out of time (``timed_out``: the caller asks the same tool nothing
    more)."""

    __slots__ = ("done", "failure", "timed_out")

    def __init__(self, done: Completed | None, failure: str | None,
                 timed_out: bool = False) -> None:
        self.done, self.failure, self.timed_out = done, failure, timed_out


def call(argv: list[str], timeout: float) -> Called:
    """Run ``argv`` (its program found on PATH) through kdkit.core.spawn.capture, at most
    ``timeout`` seconds: what it prints is kept within bounds (a tool that floods never fills
    memory) and read as UTF-8 with replacement (a stray byte never stops the test); the tool and
    what it left behind are killed after it. A missing program, one that cannot run and one that
    does not answer in time are a ``failure`` line, never an exception."""
    from kdkit.core.spawn import capture

    program = shutil.which(argv[0])
    if program is None:
        return Called(None, f"{argv[0]} is not on PATH")
    shown = " ".join(argv)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    try:
        code, out, err = capture([program, *argv[1:]], timeout=timeout)
    except KdkitError:
        return Called(None, f"{shown}: no answer within {timeout:g} s", timed_out=True)
    except OSError as exc:
        return Called(None, f"{shown}: cannot be run ({exc.strerror or exc})")
    return Called(Completed(tuple(argv), code, out, err), None)


def number(text: str) -> int | float | None:
    """``"81559"`` -> 81559, ``"69.50"`` -> 69.5, ``"32 GT/s"`` -> 32; None for anything else."""
    head = text.strip().split(" ", 1)[0]
    try:
        value = float(head)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() else value


def parse(kind: str, text: str) -> tuple[Any, str | None]:
    """(value, None), or (None, why) when ``text`` is no reading of ``kind`` (text, number or
    flag)."""
    shown = text.strip()
    if not shown or shown.startswith("[") or shown.upper() in NOT_READ:
        return None, shown or "empty"
    if kind == "text":
        return shown, None
    if kind == "flag":
        if shown.lower() in FLAGS:
            return FLAGS[shown.lower()], None
        if shown.isdigit():  # remapped_rows.pending prints a count on some drivers
            return int(shown) > 0, None
        return None, f"not a state: {shown!r}"
    value = number(shown)
    return (value, None) if value is not None else (None, f"not a number: {shown!r}")


def new_gpu(index: int, vendor: str) -> dict[str, Any]:
    """The fact record of one GPU, before any reading."""
    return {"index": index, "vendor": vendor, "raw": {}, "unread": {}}


def put(gpu: dict[str, Any], key: str, kind: str, raw: Any) -> None:
    """Record one reading: the tool's text (or JSON value) ``raw`` parsed as ``kind``."""
    gpu["unread"].pop(key, None)
    if raw is None:
        gpu[key] = None
        gpu["unread"][key] = "not in the answer"
        return
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        value, why = parse(kind, str(raw))
    # JSON's NaN and Infinity, as some tools print
    elif isinstance(raw, float) and not math.isfinite(raw):
        value, why = None, f"not a finite number: {raw!r}"
    else:
        value, why = (raw, None) if kind == "number" else parse(kind, str(raw))
    gpu[key] = value
    gpu["raw"][key] = raw if isinstance(raw, (int, float)) else str(raw).strip()
    if why is not None:
        gpu["unread"][key] = why


def unread_all(gpu: dict[str, Any], keys: list[str], why: str) -> None:
    """Mark ``keys`` read but unreadable, and the GPU's whole answer with ``why`` (``unreadable``: a
    line kdkit cannot split into its fields)."""
    for key in keys:
        gpu[key] = None
        gpu["unread"][key] = why
    gpu["unreadable"] = why


def new_facts(vendor: str | None, tool: str | None) -> SmiFacts:
    """What the driver said about this machine, before asking: ``gpus`` (one record each), the
    driver and CUDA versions, ``query`` (the field names used, renamed and refused), ``problems``
    (odd lines, failed side queries), ``failure`` (why there is no answer at all) and
    ``device_nodes`` (GPU vendors seen in /dev and /proc,
    kdkit.probe.diagnose.host.hardware_hints)."""
    return {"vendor": vendor, "tool": tool, "driver_version": None, "cuda_version": None,
            "gpus": [],
            "query": {"fields": [], "renamed": {}, "unknown": []}, "problems": [], "failure": None,
            "device_nodes": hardware_hints()}
