"""NVIDIA's facts, from ``nvidia-smi``'s scriptable interface, before and without torch. Standard
library only.

The source is NVIDIA's documented scripting interface (nvidia-smi man page,
https://docs.nvidia.com/deploy/nvidia-smi/index.html, "Selective query options"):

- ``nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits``: one line per GPU, the values in
  the order asked, separated by ", ". The field names are ``nvidia-smi --help-query-gpu``'s. A field
  the driver does not know is refused with ``Field "<name>" is not a valid field to query.`` and
  exit status 2; kdkit then asks again with the field's other spelling (drivers before R535 know the
  clock event reasons only as ``clocks_throttle_reasons.*``; R535+ accept both) or without it, and
  records which.
- ``nvidia-smi --query-remapped-rows=...``: row remapping is its own query
  (``--help-query-remapped-rows``), one line per GPU, keyed by ``gpu_bus_id``.
- ``nvidia-smi -q -d COMPUTE``: the ``-q`` header names the driver (``Driver Version``, ``KMD
  Version`` on R6xx) and the newest CUDA it supports (``CUDA Version``, ``CUDA UMD Version`` on
  R6xx); no query field gives the CUDA version (``cuda_version`` is refused).
- ``nvidia-smi nvlink --status``: per GPU a ``GPU <i>: <name> (UUID: ...)`` line, then ``Link <n>:
  <rate>`` or ``Link <n>: <inactive>`` (``nvidia-smi nvlink -h``; link states in NVML's NvLink
  methods, https://docs.nvidia.com/deploy/nvml-api/group__NvLink.html).
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from kdkit.probe.diagnose.smi_values import (
    Called,
    call,
    new_facts,
    new_gpu,
    number,
    put,
    unread_all,
)

if TYPE_CHECKING:
    from kdkit.probe.diagnose.smi_values import SmiFacts

NVIDIA_SMI = "nvidia-smi"
CSV = "--format=csv,noheader,nounits"
# nvidia-smi --help-query-gpu, "clocks_event_reasons" section (NVML's clocks event reasons,
# https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
REASONS = ("gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
           "hw_thermal_slowdown",
           "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost")
# (query field, fact key, kind). ``index`` comes first: it keys each line.
# gpu_recovery_action: the driver's "action to take to clear fault that previously happened" (None,
# Reset, Reboot, Drain P2P, Drain and Reset; nvidia-smi man page, "GPU Recovery Action"; NVIDIA GPU
# memory error management,
# https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html).
# Drivers before it (R535) answer reset_status.* instead; each driver refuses the other's.
GPU_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("index", "index", "number"), ("name", "name", "text"), ("serial", "serial", "text"),
    ("uuid", "uuid", "text"),
    ("pci.bus_id", "bus_id", "text"), ("driver_version", "driver_version", "text"),
    ("memory.total", "memory_mib", "number"), ("ecc.mode.current", "ecc_mode", "flag"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile", "number"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_aggregate", "number"),
    ("retired_pages.pending", "retired_pages_pending", "flag"),
    ("pcie.link.gen.current", "pcie_gen", "number"),
    ("pcie.link.gen.max", "pcie_gen_max", "number"),
    ("pcie.link.width.current", "pcie_width", "number"),
    ("pcie.link.width.max", "pcie_width_max", "number"),
    ("clocks.sm", "sm_clock", "number"), ("clocks.max.sm", "sm_clock_max", "number"),
    ("temperature.gpu", "temperature", "number"), ("power.draw", "power_draw", "number"),
    ("enforced.power.limit", "power_limit", "number"),
    ("power.default_limit", "power_default_limit", "number"),
    ("persistence_mode", "persistence", "flag"), ("compute_mode", "compute_mode", "text"),
    ("mig.mode.current", "mig_mode", "flag"), ("gpu_recovery_action", "recovery_action", "text"),
    ("reset_status.reset_required", "reset_required", "flag"),
    ("reset_status.drain_and_reset_recommended", "drain_and_reset", "flag"),
    *((f"clocks_event_reasons.{reason}", f"throttle.{reason}", "flag") for reason in REASONS),
)
# What the load section samples about once a second (clocks, temperature, power, throttle, PCIe
# link; the bus address matches the driver's GPU index to torch's).
SAMPLE_KEYS = ("index", "bus_id", "sm_clock", "sm_clock_max", "temperature", "power_draw",
               "power_limit", "pcie_gen",
               "pcie_gen_max", "pcie_width", "pcie_width_max",
               *(f"throttle.{reason}" for reason in REASONS))
SAMPLE_FIELDS = tuple(row for row in GPU_FIELDS if row[1] in SAMPLE_KEYS)
# nvidia-smi --help-query-remapped-rows (Ampere and newer; other GPUs answer "[N/A]").
REMAP_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("gpu_bus_id", "bus_id", "text"),
    ("remapped_rows.correctable", "remapped_rows_correctable", "number"),
    ("remapped_rows.uncorrectable", "remapped_rows_uncorrectable", "number"),
    ("remapped_rows.pending", "remap_pending", "flag"),
    ("remapped_rows.failure", "remap_failure", "flag"))
# Another spelling of a field, tried when a driver refuses the first (--help-query-gpu lists both
# for R535+; pcie.link.gen.current is "Deprecated, use pcie.link.gen.gpucurrent instead").
ALTERNATIVE = {**{f"clocks_event_reasons.{r}": f"clocks_throttle_reasons.{r}" for r in REASONS},
               "pcie.link.gen.current": "pcie.link.gen.gpucurrent"}
REFUSED = ('Field "', '" is not a valid field to query')
PROBLEMS_SHOWN = 20  # odd lines of one answer kept in the evidence


class Answer:
    """The lines of one query, the fields they hold (``names``, in column order, as kdkit names
    them) and ``asked`` (as the driver knows them), or ``failure``."""

    __slots__ = ("asked", "failure", "lines", "names", "renamed", "timed_out", "unknown")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: list[str] = []
        self.asked: list[str] = []
        self.renamed: dict[str, str] = {}
        self.unknown: list[str] = []
        self.failure: str | None = None
        self.timed_out = False


def refused_field(called: Called) -> str | None:
    """The field nvidia-smi named as not valid to query, if that is why it failed (read whatever the
    exit status)."""
    done = called.done
    if done is None:
        return None
    text = done.stdout + "\n" + done.stderr
    start = text.find(REFUSED[0])
    end = text.find(REFUSED[1], start + len(REFUSED[0])) if start >= 0 else -1
    return text[start + len(REFUSED[0]):end] if end > start else None


def query(switch: str, fields: tuple[str, ...], timeout: float,
          known: Answer | None = None) -> Answer:
    """``nvidia-smi --query-<switch>=fields``, asking again with another spelling of each refused
    field, or without it, until the driver answers. ``known``: an earlier answer whose spellings
    worked (the sampler's)."""
    answer = Answer()
    answer.names, answer.asked = (list(known.names),
                                  list(known.asked)) if known else (list(fields), list(fields))
    for _ in range(2 * len(fields) + 1):
        called = call([NVIDIA_SMI, f"--query-{switch}={','.join(answer.asked)}", CSV], timeout)
        refused = refused_field(called)
        if refused is None or refused not in answer.asked or len(answer.asked) == 1:
            return _finish(answer, called)
        at = answer.asked.index(refused)
        other = ALTERNATIVE.get(answer.names[at])
        # the whole family at once (clocks_event_reasons.*): one retry, not eight
        if other and other != refused:
            family = refused.rsplit(".", 1)[0] + "."
            for i, name in enumerate(answer.names):
                if answer.asked[i].startswith(family) and ALTERNATIVE.get(name):
                    answer.asked[i] = answer.renamed[name] = ALTERNATIVE[name]
        else:
            answer.unknown.append(answer.names.pop(at))
            answer.asked.pop(at)
    answer.failure = (
        f"nvidia-smi refused every spelling of the fields kdkit asked for (--query-{switch})")
    return answer


def _finish(answer: Answer, called: Called) -> Answer:
    if called.done is None:
        answer.failure, answer.timed_out = called.failure, called.timed_out
    elif not called.done.ok:
        answer.failure = (
            f"nvidia-smi exited {called.done.returncode}: {called.done.first_error_line()}")
    else:
        answer.lines = [line for line in called.done.stdout.splitlines() if line.strip()]
    return answer


def gpu_records(answer: Answer,
                table: tuple[tuple[str, str, str], ...]) -> tuple[list[dict[str, Any]], list[str]]:
    """One record per line that starts with a GPU index; a line of the wrong width keeps the GPU
    with every reading unread; any other line is a problem (a warning nvidia-smi printed among its
    answers)."""
    kinds = {field: (key, kind) for field, key, kind in table}
    gpus: list[dict[str, Any]] = []
    problems: list[str] = []
    for line in answer.lines:
        cells = [cell.strip() for cell in line.split(",")]
        index = number(cells[0])
        if not isinstance(index, int):
            # a tool that floods its warnings is named, not copied
            if len(problems) < PROBLEMS_SHOWN:
                problems.append(
                    f"nvidia-smi printed a line kdkit cannot read: {line.strip()[:120]!r}")
            elif len(problems) == PROBLEMS_SHOWN:
                problems.append("nvidia-smi printed more lines kdkit cannot read (not listed)")
            continue
        gpu = new_gpu(index, "nvidia")
        if len(cells) != len(answer.names):
            why = f"nvidia-smi printed {len(cells)} values for {len(answer.names)} fields"
            problems.append(f"GPU {index}: {why}: {line.strip()[:120]!r}")
            unread_all(gpu, [kinds[name][0] for name in answer.names[1:]], why)
        else:
            for name, cell in zip(answer.names[1:], cells[1:], strict=True):
                put(gpu, kinds[name][0], kinds[name][1], cell)
        gpus.append(gpu)
    return gpus, problems


def read(timeout: float) -> SmiFacts:
    """Everything nvidia-smi says about this machine's GPUs (smi_values.new_facts); never raises."""
    facts = new_facts("nvidia", NVIDIA_SMI)
    answer = query("gpu", tuple(field for field, _, _ in GPU_FIELDS), timeout)
    facts["query"] = {"fields": answer.asked, "renamed": answer.renamed, "unknown": answer.unknown}
    if answer.failure is not None:
        facts["failure"] = answer.failure
        return facts
    facts["gpus"], facts["problems"] = gpu_records(answer, GPU_FIELDS)
    versions = {gpu.get("driver_version") for gpu in facts["gpus"]} - {None}
    facts["driver_version"] = versions.pop() if len(versions) == 1 else None
    for step in (_remapped_rows, _versions, _nvlink):
        if step(facts, timeout):  # it ran out of time: nvidia-smi hangs, ask it nothing more
            break
    return facts


def _remapped_rows(facts: SmiFacts, timeout: float) -> bool:
    answer = query("remapped-rows", tuple(field for field, _, _ in REMAP_FIELDS), timeout)
    if answer.failure is not None:
        facts["problems"].append(f"remapped rows: {answer.failure}")
        return answer.timed_out
    kinds = {field: (key, kind) for field, key, kind in REMAP_FIELDS}
    by_bus = {str(gpu.get("bus_id") or "").upper(): gpu for gpu in facts["gpus"]}
    for line in answer.lines:
        cells = [cell.strip() for cell in line.split(",")]
        gpu = by_bus.get(cells[0].upper())
        if gpu is None or len(cells) != len(answer.names):
            facts["problems"].append(
                f"remapped rows: a line kdkit cannot match to a GPU: {line.strip()[:120]!r}")
            continue
        for name, cell in zip(answer.names[1:], cells[1:], strict=True):
            put(gpu, kinds[name][0], kinds[name][1], cell)
    return False


def _why_not(called: Called) -> str:
    if called.done is None:
        return called.failure or "no answer"
    return f"exit {called.done.returncode}: {called.done.first_error_line()}"


def _versions(facts: SmiFacts, timeout: float) -> bool:
    called = call([NVIDIA_SMI, "-q", "-d", "COMPUTE"], timeout)
    if called.done is None or not called.done.ok:
        facts["problems"].append(f"nvidia-smi -q: {_why_not(called)}")
        return called.timed_out
    for line in called.done.stdout.splitlines():
        label, colon, value = line.partition(":")
        label, value = label.strip(), value.strip()
        if colon and label in ("Driver Version", "KMD Version") and value \
                and facts["driver_version"] is None:
            facts["driver_version"] = value
        if colon and label in ("CUDA Version", "CUDA UMD Version") and number(value) is not None:
            facts["cuda_version"] = value
    return False


def _nvlink(facts: SmiFacts, timeout: float) -> bool:
    called = call([NVIDIA_SMI, "nvlink", "--status"], timeout)
    if called.done is None or not called.done.ok:
        facts["problems"].append(f"nvidia-smi nvlink: {_why_not(called)}")
        return called.timed_out
    links = nvlink_status(called.done.stdout)
    for gpu in facts["gpus"]:
        found = links.get(gpu["index"])
        gpu["links"] = {"kind": "nvlink", **found} if found and found["total"] else None
    return False


def nvlink_status(text: str) -> dict[int, dict[str, int]]:
    """Per GPU index: links ``up`` (a rate is shown), ``down`` (``<inactive>``), ``other`` (anything
    else) and ``total``."""
    links: dict[int, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        head, colon, rest = stripped.partition(":")
        if head.startswith("GPU ") and colon and isinstance(number(head[4:]), int):
            current = links.setdefault(int(head[4:]), {"up": 0, "down": 0, "other": 0, "total": 0})
        elif current is not None and head.startswith("Link ") and colon and "," not in head:
            state = rest.strip().lower()
            kind = "down" if "inactive" in state else "up" if state.endswith("gb/s") else "other"
            current[kind] += 1
            current["total"] += 1
    return links


# Per nvidia-smi program: its last answer to SAMPLE_FIELDS, whose spellings that driver knows (found
# once, so each later sample is one run of nvidia-smi).
_SAMPLED: dict[str, Answer] = {}


def sample(timeout: float) -> dict[int, dict[str, Any]]:
    """One reading of SAMPLE_KEYS per GPU index; {} when nvidia-smi gives none."""
    program = shutil.which(NVIDIA_SMI) or NVIDIA_SMI
    answer = query("gpu", tuple(field for field, _, _ in SAMPLE_FIELDS), timeout,
                   _SAMPLED.get(program))
    if answer.failure is not None:
        return {}
    _SAMPLED[program] = answer
    gpus, _ = gpu_records(answer, SAMPLE_FIELDS)
    return {gpu["index"]: gpu for gpu in gpus}
