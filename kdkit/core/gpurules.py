"""The decisions diagnose makes about GPUs, as pure functions of text and numbers.

Kept apart from the steps that gather the facts so each rule is unit-tested
without a GPU: which compiled architectures run on which card, which driver a
CUDA major needs, what an environment variable hides. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kdkit.core.builds import TORCH_INDEX_URL, driver_floor, shipped_pairings, version_tuple

_SM = re.compile(r"^sm_(\d+)([af]?)$")
_PTX = re.compile(r"^compute_(\d+)([af]?)$")
_DRIVER_IN_PROC = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def driver_minimum(cuda_version: str, architecture: str | None = None) -> str | None:
    """The oldest driver that runs a build for ``cuda_version`` ("12.8") on ``architecture``
    (sm_XY), or None if unknown. The floors are pairings.json's (kdkit.core.builds), the host side's
    too."""
    floor = driver_floor(cuda_version, architecture)
    return floor[0] if floor else None


def driver_new_enough(driver: str, minimum: str) -> bool:
    """Compare dotted driver versions numerically (``570.124.06 >= 570.86.15``)."""
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
    """Whether a *_VISIBLE_DEVICES value leaves no GPU visible (``""``, ``-1``, ``void``,
    ``none``)."""
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
        if ptx is not None and ptx.group(2) == "" \
                and divmod(int(ptx.group(1)), 10) <= (major, minor):
            return ArchVerdict(True, f"PTX {entry}, compiled by the driver at first load")
    return ArchVerdict(False,
                       f"no cubin for sm_{major}{minor} and no PTX at or below "
                       f"compute_{major}{minor}")


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
    """ROCm loads code only for the exact gfx name; otherwise "HIP error: invalid device
    function"."""
    names = {gfx_base(a) for a in arch_list}
    device = gfx_base(gcn_arch)
    if device in names:
        return ArchVerdict(True, f"code object for {device}")
    forced = gfx_from_override(override) if override else None
    if forced and forced in names:
        return (
            ArchVerdict(True, f"code object for {forced} via HSA_OVERRIDE_GFX_VERSION={override}"))
    return ArchVerdict(False, f"no code object for {device}")


def cuda_arch_fix(capability: tuple[int, int]) -> str:
    """What to install when the build lacks code for a CUDA device: the newest stable published
    build that carries it (pairings.json), and the oldest, so the user sees the range."""
    major, minor = capability
    data = shipped_pairings()
    carrying = []
    for release in sorted(data.get("torch", {}), key=version_tuple):
        for label, ref in data["torch"][release].get("builds", data["torch"][release]).items():
            name, experimental = (ref["arch_set"],
                                  ref.get("experimental", False)) if isinstance(ref, dict) \
                else (ref, False)
            if not experimental \
                    and cuda_arch_verdict(capability, data["arch_sets"][name]["architectures"]).ok:
                carrying.append((release, label))
    if not carrying:
        return (f"no published torch build kdkit knows carries sm_{major}{minor}; install one "
                "whose torch.cuda.get_arch_list() covers it (torch_index in kdkit.json, then "
                "`kdkit lock`)")
    template = data.get("template", {})
    chosen = (".".join(template.get("torch", "").split(".")[:2]),
              template.get("builds", {}).get("cuda"))
    (first, first_label), (newest, label) = (carrying[0],
                                             chosen if chosen in carrying else carrying[-1])
    return (f"sm_{major}{minor} needs a torch build that carries it (torch {first} {first_label} "
            f"and later): install torch {newest} from {TORCH_INDEX_URL.format(label=label)} (set "
            "torch_index in kdkit.json, re-lock)")


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
