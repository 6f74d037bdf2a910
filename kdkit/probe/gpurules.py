"""The decisions diagnose makes about GPUs, as pure functions of text and numbers.

Kept apart from the steps that gather the facts so each rule is unit-tested
without a GPU: which compiled architectures run on which card, which driver a
CUDA major needs, what an environment variable hides. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Minimum Linux driver for CUDA minor-version compatibility, per CUDA major.
DRIVER_MINIMUM: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}

_SM = re.compile(r"^sm_(\d+)([af]?)$")
_PTX = re.compile(r"^compute_(\d+)([af]?)$")
_DRIVER_IN_PROC = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def version_tuple(text: str) -> tuple[int, ...]:
    """``"525.60.13"`` -> ``(525, 60, 13)``; non-numeric tails are ignored."""
    parts = []
    for piece in text.strip().split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def driver_minimum(cuda_version: str) -> str | None:
    """The oldest driver that runs a build for ``cuda_version`` ("12.8"), or None if unknown."""
    major = version_tuple(cuda_version)[:1]
    return DRIVER_MINIMUM.get(major[0]) if major else None


def driver_new_enough(driver: str, minimum: str) -> bool:
    """Compare dotted driver versions numerically (``525.105.17 >= 525.60.13``)."""
    have, need = version_tuple(driver), version_tuple(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


def driver_from_proc(text: str) -> str | None:
    """The driver version in ``/proc/driver/nvidia/version`` (proprietary or open module)."""
    match = _DRIVER_IN_PROC.search(text)
    return match.group(1) if match else None


def capabilities_lack_compute(value: str | None) -> bool:
    """NVIDIA_DRIVER_CAPABILITIES set to a list without ``compute`` (or ``all``): no CUDA inside.

    Unset means the toolkit's default (``compute,utility``), which is fine.
    """
    if value is None:
        return False
    caps = {c.strip().lower() for c in value.split(",") if c.strip()}
    return not caps & {"compute", "all"}


def hides_all_devices(name: str, value: str | None) -> bool:
    """Whether a *_VISIBLE_DEVICES value leaves no GPU visible (``""``, ``-1``, ``void``, ``none``)."""
    if value is None:
        return False
    text = value.strip().lower()
    if name == "NVIDIA_VISIBLE_DEVICES":
        return text in ("", "void", "none")
    return text == "" or text.split(",")[0].strip() == "-1"


@dataclass(frozen=True)
class ArchVerdict:
    """Whether a build has code for a device, and which compiled entry provides it."""

    ok: bool
    how: str


def cuda_arch_verdict(capability: tuple[int, int], arch_list: list[str]) -> ArchVerdict:
    """Apply CUDA's compatibility rules to ``torch.cuda.get_arch_list()``.

    A cubin ``sm_XY`` runs on a device of the same major whose minor is not older
    (``sm_86`` runs on an ``sm_89`` card); ``sm_XYa`` runs on exactly that
    device; PTX ``compute_XY`` is compiled by the driver at load time for any
    device at least that new. Anything else ends in "no kernel image is
    available for execution on the device".
    """
    major, minor = capability
    cubins = []
    for entry in arch_list:
        sm = _SM.match(entry)
        if sm is None:
            continue
        code_major, code_minor = divmod(int(sm.group(1)), 10)
        exact_only = sm.group(2) == "a"
        if code_major == major and (code_minor == minor if exact_only else code_minor <= minor):
            cubins.append((code_minor, entry))
    if cubins:  # the loader picks the newest compatible cubin
        return ArchVerdict(True, f"cubin {max(cubins)[1]}")
    for entry in arch_list:
        ptx = _PTX.match(entry)
        if ptx is not None and ptx.group(2) == "" and divmod(int(ptx.group(1)), 10) <= (major, minor):
            return ArchVerdict(True, f"PTX {entry}, compiled by the driver at first load")
    return ArchVerdict(False, f"no cubin for sm_{major}{minor} and no PTX at or below compute_{major}{minor}")


def gfx_base(name: str) -> str:
    """``"gfx942:sramecc+:xnack-"`` -> ``"gfx942"`` (target features do not change the ISA name)."""
    return name.split(":", 1)[0].strip().lower()


def gfx_from_override(value: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION ``"11.0.0"`` -> ``"gfx1100"``; ``"9.0.10"`` -> ``"gfx90a"``."""
    parts = version_tuple(value)
    if len(parts) != 3:
        return None
    major, minor, stepping = parts
    return f"gfx{major}{minor}{stepping:x}"


def rocm_arch_verdict(gcn_arch: str, arch_list: list[str], override: str | None) -> ArchVerdict:
    """ROCm loads code only for the exact gfx name; otherwise "HIP error: invalid device function"."""
    names = {gfx_base(a) for a in arch_list}
    device = gfx_base(gcn_arch)
    if device in names:
        return ArchVerdict(True, f"code object for {device}")
    forced = gfx_from_override(override) if override else None
    if forced and forced in names:
        return ArchVerdict(True, f"code object for {forced} via HSA_OVERRIDE_GFX_VERSION={override}")
    return ArchVerdict(False, f"no code object for {device}")


def cuda_arch_fix(capability: tuple[int, int]) -> str:
    """What to install when the build lacks code for a CUDA device."""
    major, minor = capability
    if major >= 10:
        return (f"sm_{major}{minor} (Blackwell) needs a CUDA 12.8+ build (torch >= 2.7): install torch from "
                "https://download.pytorch.org/whl/cu128 or newer (set torch_index in kdkit.json, re-lock)")
    return (f"install a torch build whose arch list covers sm_{major}{minor} (another CUDA wheel index in "
            "kdkit.json's torch_index, then `kdkit lock`)")


def cudnn_version_text(raw: int | None) -> str | None:
    """cuDNN's integer version as text: 90100 -> 9.1.0 (cuDNN 9), 8902 -> 8.9.2 (cuDNN 8)."""
    if raw is None:
        return None
    if raw >= 10000:
        return f"{raw // 10000}.{raw % 10000 // 100}.{raw % 100}"
    return f"{raw // 1000}.{raw % 1000 // 100}.{raw % 100}"


def relative_error(max_abs_diff: float, max_abs_ref: float) -> float:
    """Largest error scaled by the reference's magnitude (0 when both are 0)."""
    if max_abs_ref == 0.0:
        return 0.0 if max_abs_diff == 0.0 else float("inf")
    return max_abs_diff / max_abs_ref


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB"
