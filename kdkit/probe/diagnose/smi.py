"""The GPU driver's facts, read before and without torch, so a broken torch still gets "the driver
sees 1 H200; torch sees none": ``read()`` for the health section of ``kdkit diagnose --accept``,
``sample()`` for readings under load (the load section calls it about once a second). Standard
library only.

NVIDIA's facts come from nvidia-smi (smi_nvidia.py), AMD's from amd-smi or rocm-smi (smi_amd.py);
each runs the program of that name on PATH through kdkit.core.proc.run, with a time limit, and
parses what it prints. The facts are plain dicts (smi_values.py says their keys) so they go to the
evidence as they are.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from kdkit.probe.diagnose import smi_amd, smi_nvidia
from kdkit.probe.diagnose.smi_values import new_facts

if TYPE_CHECKING:
    from kdkit.probe.diagnose.smi_values import SmiFacts

# seconds per driver tool run: nvidia-smi answers in about 1 s; 30 s means it hangs
READ_TIMEOUT = 30.0
SAMPLE_TIMEOUT = 5.0  # seconds per sample: a sampler that waits longer misses the next second


def read(timeout: float = READ_TIMEOUT) -> SmiFacts:
    """What the driver says about this machine: NVIDIA's when nvidia-smi is on PATH, else AMD's
    (amd-smi, then rocm-smi), else none (``failure`` says so, ``device_nodes`` says whether /dev
    shows a GPU). Each run is bounded by ``timeout``; a tool that hangs is asked nothing more. Never
    raises."""
    if shutil.which(smi_nvidia.NVIDIA_SMI):
        return smi_nvidia.read(timeout)
    if shutil.which(smi_amd.AMD_SMI) or shutil.which(smi_amd.ROCM_SMI):
        return smi_amd.read(timeout)
    facts = new_facts(None, None)
    facts["failure"] = "no nvidia-smi, amd-smi or rocm-smi on PATH"
    return facts


def sample(timeout: float = SAMPLE_TIMEOUT) -> dict[int, dict[str, Any]]:
    """One reading per GPU index of its clocks (``sm_clock``, ``sm_clock_max``, MHz),
    ``temperature`` (°C), ``power_draw`` (W), ``power_limit`` (W, NVIDIA), throttle reasons
    (``throttle.<reason>``: True when active), the PCIe link (``pcie_gen``/``pcie_gen_max``;
    ``pcie_speed``/``pcie_speed_max`` in GT/s on AMD, read as ``pcie_gen`` too),
    ``pcie_width``/``pcie_width_max``) and ``bus_id`` (to match torch's index), each GPU a
    smi_values record (``raw``, ``unread``). One run of the driver tool after the first; {} when
    there is none or it fails; never raises, so a sampling loop needs no guard."""
    try:
        if shutil.which(smi_nvidia.NVIDIA_SMI):
            return smi_nvidia.sample(timeout)
        if shutil.which(smi_amd.AMD_SMI):
            return smi_amd.sample(timeout)
    except Exception:  # a sampler inside a load loop must not end it: no reading is the answer
        return {}
    return {}


def commands(facts: SmiFacts) -> list[str]:
    """The driver tool's command lines behind ``facts`` (read()'s), for the evidence's "reproduce"
    list."""
    tool = facts.get("tool")
    if tool == smi_nvidia.NVIDIA_SMI:
        fields = ",".join(facts.get("query", {}).get("fields") or [])
        return [
            f"{tool} --query-gpu={fields} {smi_nvidia.CSV}", f"{tool} -q -d COMPUTE",
            f"{tool} nvlink --status"]
    if tool == smi_amd.AMD_SMI:
        return [
            f"{tool} static --json", f"{tool} metric --json", f"{tool} xgmi --link-status --json"]
    return [f"{tool} --showproductname --showmeminfo vram --showbus --json"] if tool else []
