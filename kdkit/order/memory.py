"""A lower bound on a job's GPU memory, with what it cannot know listed, and the pilot's measured
peak.

The parameter count alone never proves that a job fits: activations, library workspaces and
fragmentation are not counted. So the only verdicts against a card are "does not fit" (the
lower bound alone exceeds one card) and "may fit — to be measured by the pilot".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.project import Project
from kdkit.core.errors import BadInput
from kdkit.core.runfolder import SUMMARY, run_folders
from kdkit.core.runverify import read_run
from kdkit.facts.catalog import Offer

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    class MemoryItem(TypedDict):
        """One counted item of the lower bound: its bytes, GiB and how it was counted."""

        item: str
        bytes: int
        gib: float
        formula: str

    class CardVerdict(TypedDict):
        """The lower bound against one card of an offer (verdict)."""

        gpu: str
        card_memory_gb: float
        capacity_bytes: int
        verdict: str
        note: str

    class PilotPeak(TypedDict):
        """The newest pilot run's measured peak memory (pilot_peak)."""

        run_id: str
        peak_bytes: int
        peak_gib: float
        device: str | None
        file: str

    class MemoryEstimate(TypedDict):
        """``kdkit estimate-memory``'s report: the counted items, their sum, what is not counted;
        the verdict against a card and the pilot's peak once estimate_memory adds them."""

        parameters: int
        dtype: str
        train: str
        kv: dict[str, int] | None
        items: list[MemoryItem]
        lower_bound_bytes: int
        lower_bound_gib: float
        unmeasured: list[str]
        # CardVerdict or None; Any: estimate_memory sets its verdict when an offer is given, which
        # the type checker cannot tie to the key being a CardVerdict
        against: NotRequired[Any]
        pilot_peak: NotRequired[PilotPeak | None]

DTYPE_BYTES: dict[str, Decimal] = {
    "fp32": Decimal(4), "fp16": Decimal(2), "bf16": Decimal(2),
    "fp8": Decimal(1), "int8": Decimal(1), "int4": Decimal("0.5"),
}
TRAIN_MODES = ("none", "sgd", "adam")
FP32 = DTYPE_BYTES["fp32"]
GIB = 2**30

DOES_NOT_FIT = "does not fit"
MAY_FIT = "may fit — to be measured by the pilot"

UNMEASURED = (
    "activations (they grow with batch size and sequence length)",
    "CUDA/ROCm context and library workspaces (cuBLAS, cuDNN, MIOpen, NCCL)",
    "allocator caching and fragmentation",
    "temporary buffers inside individual operations",
)

_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
# Bounds that keep every figure a finite float (GiB) and refuse typos: 10^15 parameters is a
# thousand times the largest models; a KV-cache dimension (layers, heads, head dim, sequence,
# batch) above 10^9 is no real job.
MAX_PARAMETERS = 10**15
MAX_KV = 10**9


@dataclass(frozen=True)
class KvShape:
    """The KV cache of generation: 2 (K and V) x layers x kv heads x head dim x sequence x batch."""

    layers: int
    kv_heads: int
    head_dim: int
    seq: int
    batch: int

    @classmethod
    def parse(cls, text: str) -> KvShape:
        parts = [p.strip() for p in text.split(",")]
        # ASCII digits only: "²".isdigit() is true and int("²") raises.
        if len(parts) != 5 or not all(re.fullmatch(r"0*[1-9][0-9]*", p) for p in parts):
            raise BadInput(f"--kv {text!r}: expected five positive integers "
                           "layers,kv_heads,head_dim,seq,batch (e.g. 32,8,128,4096,1)")
        # length first: int() of 10^6 digits
        if any(len(p.lstrip("0")) > 10 or int(p) > MAX_KV for p in parts):
            raise BadInput(f"--kv {text!r}: each of layers,kv_heads,head_dim,seq,batch is at most "
                           "10^9; give the generation's real shape")
        return cls(*(int(p) for p in parts))

    def elements(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.seq * self.batch


@dataclass(frozen=True)
class MemoryJob:
    """What is known of the representative job before it runs."""

    parameters: int
    dtype: str = "bf16"
    train: str = "none"
    kv: KvShape | None = None

    def __post_init__(self) -> None:
        if self.parameters <= 0:
            raise BadInput(f"--params {self.parameters}: the parameter count must be positive")
        if self.parameters > MAX_PARAMETERS:
            raise BadInput(
                f"--params {self.parameters:.3g}: more than 10^15 parameters; give the model's "
                "count")
        if self.dtype not in DTYPE_BYTES:
            raise BadInput(f"--dtype {self.dtype}: unknown; choose one of {', '.join(DTYPE_BYTES)}")
        if self.train not in TRAIN_MODES:
            raise BadInput(f"--train {self.train}: unknown; choose one of {', '.join(TRAIN_MODES)}")


def parse_params(text: str) -> int:
    """``7B``, ``350M``, ``1.5e9`` or ``7000000000`` -> an integer count."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([kmbgt]?)\s*",
                         text, re.IGNORECASE)
    if match is None:
        raise BadInput(f"--params {text!r}: expected a parameter count such as 7B, 350M or 1.5e9")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:  # an exponent beyond Decimal's own limits
        number = Decimal(MAX_PARAMETERS + 1)
    # Exact (Fraction, not Decimal's 28-digit context) and bounded before any arithmetic:
    # 1e999999999 would otherwise be a billion-digit int.
    value = (Fraction(number) * _SUFFIX[match.group(2).lower()] if number.adjusted() <= 15
             else MAX_PARAMETERS + 1)
    if value <= 0 or value.denominator != 1:
        raise BadInput(f"--params {text!r}: the parameter count must be a positive whole number")
    if value > MAX_PARAMETERS:
        raise BadInput(
            f"--params {text!r}: more than 10^15 parameters; give the model's count, e.g. 7B")
    return int(value)


def _item(name: str, nbytes: Decimal, formula: str) -> MemoryItem:
    return {"item": name, "bytes": int(nbytes), "gib": _gib(int(nbytes)), "formula": formula}


def _gib(nbytes: int) -> float:
    return round(nbytes / GIB, 2)


def _training_items(job: MemoryJob, p: int, size: Decimal) -> list[MemoryItem]:
    items = [_item("gradients", p * size, f"{p:,} x {size} B ({job.dtype})")]
    if job.dtype != "fp32":
        items.append(_item("fp32 master weights", p * FP32, f"{p:,} x 4 B (mixed precision)"))
    if job.train == "adam":
        items.append(_item("Adam moments", 2 * p * FP32, f"2 x {p:,} x 4 B (two fp32 moments)"))
    return items


def estimate(job: MemoryJob) -> MemoryEstimate:
    """The counted items, their sum (a lower bound) and what is not counted."""
    p, size = job.parameters, DTYPE_BYTES[job.dtype]
    items = [_item("weights", p * size, f"{p:,} x {size} B ({job.dtype})")]
    if job.train != "none":
        items += _training_items(job, p, size)
    unmeasured = list(UNMEASURED)
    if job.kv is not None:
        kv = job.kv
        items.append(_item("KV cache", kv.elements() * size,
                           f"2 x {kv.layers} layers x {kv.kv_heads} kv heads x {kv.head_dim} head "
                           f"dim x {kv.seq} seq x {kv.batch} batch x {size} B"))
    else:
        unmeasured.append("KV cache of generation (not given: pass --kv)")
    if job.train == "sgd":
        unmeasured.append(f"SGD momentum, if used: one more fp32 buffer ({_gib(p * 4)} GiB)")
    total = sum(i["bytes"] for i in items)
    return {"parameters": p, "dtype": job.dtype, "train": job.train,
            "kv": None if job.kv is None else vars(job.kv),
            "items": items, "lower_bound_bytes": total, "lower_bound_gib": _gib(total),
            "unmeasured": unmeasured}


def verdict(lower_bound_bytes: int, offer: Offer) -> CardVerdict:
    """The lower bound against ONE card of the offer: cards never pool their memory.

    The capacity is read generously (memory_gb x 2^30), so "does not fit" is only said when
    the uncounted items could not possibly make room.
    """
    capacity = int(Decimal(str(offer.memory_gb)) * GIB)
    fits_not = lower_bound_bytes > capacity
    return {"gpu": offer.name, "card_memory_gb": offer.memory_gb, "capacity_bytes": capacity,
            "verdict": DOES_NOT_FIT if fits_not else MAY_FIT,
            "note": "per card: several cards do not pool their memory nor split a program by "
                    "themselves"}


def job_from_config(config: dict[str, Any], where: Path) -> MemoryJob:
    """The ``memory`` section of kdkit.json (already schema-checked) as a job."""
    section = config.get("memory")
    if not isinstance(section, dict):
        raise BadInput(f"{where}: $.memory: missing; add {{\"parameters\": N, \"dtype\": \"bf16\", "
                       "\"train\": \"none\"}} or pass --params N")
    kv = section.get("kv")
    parameters = _count(section["parameters"], MAX_PARAMETERS, where, "$.memory.parameters")
    return MemoryJob(parameters, section.get("dtype", "bf16"), section.get("train", "none"),
                     None if kv is None
                     else KvShape(*(_count(kv[key], MAX_KV, where, f"$.memory.kv.{key}")
                                    for key in ("layers", "kv_heads", "head_dim", "seq", "batch"))))


def _count(value: Any, maximum: int, where: Path, key: str) -> int:
    """A count from kdkit.json as an int (JSON Schema's integer also admits 7e9, a float), within
    bounds."""
    if isinstance(value, float) and value.is_integer() and value <= maximum:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
        raise BadInput(
            f"{where}: {key}: {value!r:.40} is not a whole number from 1 to {maximum:,}; fix the "
            "value")
    return value


# ---------------------------------------------------------------- the pilot's measurement


def pilot_peak(runs: Path) -> PilotPeak | None:
    """The newest run under ``runs`` whose summary.json records a peak memory (run ids sort by
    time)."""
    for run in map(read_run, reversed(run_folders(runs))):
        if run.peak_bytes is not None:
            return {"run_id": run.run_id, "peak_bytes": run.peak_bytes,
                    "peak_gib": _gib(run.peak_bytes),
                    "device": run.peak_device, "file": str(run.path / SUMMARY)}
    return None


def measured_verdict(peak: PilotPeak, offer: Offer) -> str | None:
    """A GPU-measured peak above one card's memory cannot fit it; a CPU peak says nothing of a
    card."""
    device = (peak.get("device") or "").lower()
    on_gpu = device.startswith(("cuda", "rocm", "hip", "gpu"))
    if on_gpu and peak["peak_bytes"] > int(Decimal(str(offer.memory_gb)) * GIB):
        return DOES_NOT_FIT
    return None


def estimate_memory(job: MemoryJob, offer: Offer | None = None,
                    runs: Path | None = None) -> MemoryEstimate:
    """The report of ``kdkit estimate-memory``: estimate, verdict against a card, the pilot's
    peak."""
    report = estimate(job)
    report["against"] = None if offer is None else verdict(report["lower_bound_bytes"], offer)
    report["pilot_peak"] = None if runs is None else pilot_peak(runs)
    peak = report["pilot_peak"]
    if offer is not None and peak is not None and measured_verdict(peak, offer) == DOES_NOT_FIT:
        report["against"]["verdict"] = DOES_NOT_FIT
    return report


def memory_report(project: Project | None, *, params: str | None, from_config: bool,
                  dtype: str | None,
                  train: str | None, kv: str | None, offer: Offer | None) -> MemoryEstimate:
    """``kdkit estimate-memory``: the job from --params or kdkit.json's memory section (flags given
    on the command line win), estimated, against ``offer``, beside the project's last measured
    peak."""
    if (params is None) == (not from_config):
        raise BadInput("estimate-memory: give exactly one of --params N or --from-config")
    if from_config:
        if project is None:
            raise BadInput(
                "--from-config: no kdkit.json here or above; pass PROJECT_DIR or --params N")
        base = job_from_config(project.config, project.root / "kdkit.json")
    else:
        base = MemoryJob(parse_params(params or ""))
    job = MemoryJob(base.parameters, dtype or base.dtype, train or base.train,
                    KvShape.parse(kv) if kv is not None else base.kv)
    runs = None
    if project is not None:
        from kdkit.order.plan import runs_folder

        runs = project.root / runs_folder(project)
    return estimate_memory(job, offer, runs)
