"""AMD's facts, from ``amd-smi``'s JSON (``rocm-smi --json`` on stacks that lack amd-smi), before
and without torch. Standard library only.

The shapes are those of the AMD SMI command line tool (ROCm/amdsmi, amdsmi_cli/amdsmi_commands.py
and amdsmi_cli/README.md;
https://rocm.docs.amd.com/projects/amdsmi/en/latest/how-to/amdsmi-cli-tool.html):

- ``amd-smi static --json`` and ``amd-smi metric --json`` print one object per GPU, keyed by
  ``gpu``: a bare list on older releases, ``{"gpu_data": [...]}`` on ROCm 6.4 and later. A reading
  is a bare value or ``{"value": 196592, "unit": "MB"}``; "N/A" where the card has none. static:
  ``asic.market_name``, ``board.product_serial``, ``bus.bdf``, ``bus.max_pcie_width``,
  ``bus.max_pcie_speed`` (GT/s), ``vram.size`` (MB, that is MiB), ``driver.version``,
  ``ras.ecc_block_state.UMC``. metric:
  ``ecc.total_correctable_count``/``total_uncorrectable_count``, ``pcie.width``/``speed``,
  ``power.socket_power``, ``power.throttle_status`` (THROTTLED/UNTHROTTLED),
  ``throttle.*_violation_status`` (ACTIVE/NOT ACTIVE, ROCm 6.4+), ``clock.gfx_0.clk``/``max_clk``,
  ``temperature.hotspot``, ``xgmi_err`` (an ``amdsmi_xgmi_status_t`` name:
  AMDSMI_XGMI_STATUS_NO_ERRORS, _ERROR, _MULTIPLE_ERRORS).
- ``amd-smi xgmi --link-status --json`` (ROCm 6.4+, ROCm/amdsmi CHANGELOG.md "amd_smi_lib for ROCm
  6.4.0"): per GPU a ``link_status`` list, each link U (up), D (down) or X (disabled), "SELF" for
  itself.
- ``rocm-smi --showproductname --showmeminfo vram --showbus --json`` (ROCm/rocm_smi_lib
  python_smi_tools/rocm_smi.py): ``{"card0": {"Card Series": ..., "VRAM Total Memory (B)": ..., "PCI
  Bus": ...}}``; it prints its RAS tables only as text, so ECC and XGMI stay unread on that path.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from kdkit.core.builds import shipped_data
from kdkit.probe.diagnose.points import ACCEPTANCE
from kdkit.probe.diagnose.smi_values import call, new_facts, new_gpu, number, put

if TYPE_CHECKING:
    from kdkit.probe.diagnose.smi_values import SmiFacts

AMD_SMI = "amd-smi"
ROCM_SMI = "rocm-smi"
# The violation states of `amd-smi metric --throttle` (ROCm 6.4+), each ACTIVE or NOT ACTIVE.
VIOLATIONS = ("prochot", "ppt", "socket_thermal",
              "vr_thermal", "hbm_thermal", "gfx_clk_below_host_limit")
STATIC: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("asic", "market_name"), "name", "text"), (("board", "product_serial"), "serial", "text"),
    (("bus", "bdf"), "bus_id", "text"), (("vram", "size"), "memory_mib", "number"),
    (("bus", "max_pcie_width"), "pcie_width_max", "number"),
    (("bus", "max_pcie_speed"), "pcie_speed_max", "number"),
    (("driver", "version"), "driver_version", "text"),
    (("ras", "ecc_block_state", "umc"), "ecc_mode", "flag"),
)
METRIC: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("ecc", "total_uncorrectable_count"), "ecc_uncorrected", "number"),
    (("ecc", "total_correctable_count"), "ecc_corrected", "number"),
    (("pcie", "width"), "pcie_width", "number"), (("pcie", "speed"), "pcie_speed", "number"),
    (("power", "socket_power"), "power_draw", "number"),
    (("clock", "gfx_0", "clk"), "sm_clock", "number"),
    (("clock", "gfx_0", "max_clk"), "sm_clock_max", "number"),
    (("temperature", "hotspot"), "temperature", "number"),
    (("power", "throttle_status"), "throttle.any", "flag"), (("xgmi_err",), "xgmi_errors", "text"),
    *((("throttle", f"{name}_violation_status"), f"throttle.{name}", "flag")
      for name in VIOLATIONS),
)


def json_answer(argv: list[str], timeout: float) -> tuple[Any, str | None, bool]:
    """(the JSON a tool printed, None, False), or (None, why not, whether it ran out of time). Text
    before the JSON (a warning line) is skipped."""
    called = call(argv, timeout)
    if called.done is None:
        return None, called.failure, called.timed_out
    if not called.done.ok:
        return (
            None,
            f"{' '.join(argv)}: exit {called.done.returncode}: {called.done.first_error_line()}",
            False)
    text = called.done.stdout
    starts = [at for at in (text.find("["), text.find("{")) if at >= 0]
    try:
        return json.JSONDecoder().raw_decode(text, min(starts))[0], None, False
    except (ValueError, json.JSONDecodeError):
        return (
            None, f"{' '.join(argv)}: printed no JSON kdkit can read: {text.strip()[:120]!r}",
            False)


def entries(data: Any) -> list[dict[str, Any]]:
    """The per-GPU objects of an amd-smi answer (a bare list, or under ``gpu_data``), each with a
    ``gpu`` index."""
    if isinstance(data, dict):
        data = data.get("gpu_data")
    if not isinstance(data, list):
        return []
    return [entry for entry in data if isinstance(entry, dict)
            and isinstance(entry.get("gpu"), int)]


_ABSENT = object()


def lookup(entry: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (keys matched without case), unwrapped from ``{"value": ..., "unit":
    ...}``; ``_ABSENT`` when the answer has no such key (an older amd-smi)."""
    for key in path:
        if not isinstance(entry, dict):
            return _ABSENT
        entry = next((value for name, value in entry.items() if str(name).lower() == key), _ABSENT)
    if isinstance(entry, dict) and "value" in entry:
        entry = entry["value"]
    return entry


def dig(entry: Any, path: tuple[str, ...]) -> Any:
    """The reading at ``path``: a string or a number, else None."""
    value = lookup(entry, path)
    return value if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def fill(gpu: dict[str, Any], entry: dict[str, Any],
         table: tuple[tuple[tuple[str, ...], str, str], ...]) -> None:
    """Put each reading of ``table`` the answer has (a key it lacks stays absent: not reported)."""
    for path, key, kind in table:
        if lookup(entry, path) is not _ABSENT:
            put(gpu, key, kind, dig(entry, path))
    for key, kind, path in (("temperature", "number", ("temperature", "edge")),
                            ("name", "text", ("board", "product_name"))):
        if gpu.get(key) is None and dig(entry, path) is not None:
            put(gpu, key, kind, dig(entry, path))


def generations(gpu: dict[str, Any]) -> None:
    """``pcie_gen``/``pcie_gen_max`` from amd-smi's GT/s (``pcie_speed``/``pcie_speed_max``), by the
    PCIe data rates of kdkit/data/acceptance.json (health "pcie.link" gen_gt_s, PCI-SIG), so AMD's
    link reads as NVIDIA's does; a rate of no generation stays unread."""
    rates = {float(rate): int(gen) for gen,
             rate in shipped_data(ACCEPTANCE)["health"]["pcie.link"]["gen_gt_s"].items()}
    for speed, gen in (("pcie_speed", "pcie_gen"), ("pcie_speed_max", "pcie_gen_max")):
        if speed in gpu:
            value = gpu[speed]
            put(gpu, gen, "number",
                rates.get(float(value)) if isinstance(value, (int, float)) else None)
            if gpu[gen] is None:
                gpu["unread"][gen] = f"{gpu['raw'].get(speed, 'no')} GT/s is no PCIe generation"


def read(timeout: float) -> SmiFacts:
    """Everything amd-smi (or rocm-smi) says about this machine's GPUs (smi_values.new_facts); never
    raises."""
    if shutil.which(AMD_SMI) is None:
        return read_rocm_smi(timeout)
    facts = new_facts("amd", AMD_SMI)
    static, failure, late = json_answer([AMD_SMI, "static", "--json"], timeout)
    if failure is not None or not entries(static):
        facts["failure"] = (failure
                            or f"amd-smi static --json listed no GPU: {json.dumps(static)[:120]}")
        return read_rocm_smi(timeout) if shutil.which(ROCM_SMI) and not late else facts
    gpus = {}
    for entry in entries(static):
        gpus[entry["gpu"]] = gpu = new_gpu(entry["gpu"], "amd")
        fill(gpu, entry, STATIC)
    facts["gpus"] = [gpus[index] for index in sorted(gpus)]
    versions = {gpu.get("driver_version") for gpu in facts["gpus"]} - {None}
    facts["driver_version"] = versions.pop() if len(versions) == 1 else None
    metric, failure, late = json_answer([AMD_SMI, "metric", "--json"], timeout)
    for entry in entries(metric):
        if entry["gpu"] in gpus:
            fill(gpus[entry["gpu"]], entry, METRIC)
    for gpu in facts["gpus"]:
        generations(gpu)
    if failure is not None:
        facts["problems"].append(f"metric: {failure}")
    if not late:
        _xgmi(facts, gpus, timeout)
    return facts


def _xgmi(facts: SmiFacts, gpus: dict[int, dict[str, Any]], timeout: float) -> None:
    data, failure, _ = json_answer([AMD_SMI, "xgmi", "--link-status", "--json"], timeout)
    if failure is not None:
        facts["problems"].append(f"xgmi link status: {failure}")
        return
    for index, states in link_states(data).items():
        if index in gpus:
            counts = {"up": states.count("U"), "down": states.count("D"),
                      "disabled": states.count("X")}
            gpus[index]["links"] = {"kind": "xgmi", **counts,
                                    "total": sum(counts.values())} if states else None


def link_states(data: Any) -> dict[int, list[str]]:
    """Per GPU index, the state letters of its XGMI links (U, D, X), found wherever the answer nests
    them; a status naming several links ("U/U") counts each."""
    found: dict[int, list[str]] = {}
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            status = item.get("link_status")
            if isinstance(item.get("gpu"), int) and isinstance(status, list):
                letters = [part.strip().upper() for state in status
                           for part in str(state).split("/")]
                found[item["gpu"]] = [letter for letter in letters if letter in ("U", "D", "X")]
            else:
                stack.extend(item.values())
    return found


def read_rocm_smi(timeout: float) -> SmiFacts:
    """What rocm-smi's JSON gives: name, memory and bus per card (older ROCm stacks)."""
    facts = new_facts("amd", ROCM_SMI)
    data, failure, _ = json_answer([ROCM_SMI, "--showproductname", "--showmeminfo",
                                    "vram", "--showbus", "--json"],
                                   timeout)
    cards = {int(name[4:]): card for name, card in (data if isinstance(data, dict) else {}).items()
             if isinstance(name, str) and name.startswith("card") and name[4:].isdigit()
             and isinstance(card, dict)}
    if failure is not None or not cards:
        facts["failure"] = failure or "rocm-smi --json listed no GPU"
        return facts
    for index in sorted(cards):
        card = {str(key).lower(): value for key, value in cards[index].items()}
        gpu = new_gpu(index, "amd")
        put(gpu, "name", "text", card.get("card series") or card.get("card sku"))
        total = number(str(card.get("vram total memory (b)", "")))
        put(gpu, "memory_mib", "number", None if total is None else total // 2**20)
        put(gpu, "bus_id", "text", card.get("pci bus"))
        facts["gpus"].append(gpu)
    return facts


# Per amd-smi program: each GPU's maximum PCIe link (static, read once), so that each sample runs
# amd-smi once.
_MAXIMA: dict[str, dict[int, dict[str, str | int | float | None]]] = {}


def sample(timeout: float) -> dict[int, dict[str, Any]]:
    """One reading of clocks, temperature, power, throttle and the PCIe link per GPU index; {} when
    amd-smi gives none."""
    program = shutil.which(AMD_SMI) or AMD_SMI
    if program not in _MAXIMA:
        static, _, _ = json_answer([AMD_SMI, "static", "--json"], timeout)
        _MAXIMA[program] = {entry["gpu"]: {"pcie_width_max": dig(entry, ("bus", "max_pcie_width")),
                                           "pcie_speed_max": dig(entry, ("bus", "max_pcie_speed")),
                                           "bus_id": dig(entry, ("bus", "bdf"))}
                            for entry in entries(static)}
    metric, _, _ = json_answer([AMD_SMI, "metric", "--json"], timeout)
    readings = {}
    for entry in entries(metric):
        gpu = new_gpu(entry["gpu"], "amd")
        fill(gpu, entry, METRIC)
        for key, value in _MAXIMA[program].get(entry["gpu"], {}).items():
            put(gpu, key, "text" if key == "bus_id" else "number", value)
        generations(gpu)
        readings[entry["gpu"]] = gpu
    return readings
