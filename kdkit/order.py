"""Before ordering: is the offer compatible with the lock (``check``), and what does the order cost
and does its schedule fit (``plan``)?

Money is ``Decimal`` end to end and rounded to cents once, half up: 2 x 47.14 is 94.28, not
94.27999999. A lot's price already covers all of its cards (a B200 lot holds two): the total is
lot price x lots, never x cards.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from kdkit import __version__
from kdkit.catalog import DURATIONS, Catalog, Offer, Pairings, load_catalog, load_pairings
from kdkit.errors import BadInput
from kdkit.jsonio import atomic_write_json
from kdkit.project import Project

MAX_LOTS = 10
PREPARATIONS = ("ubuntu", "pytorch", "blender", "custom")
CENT = Decimal("0.01")
# Bounds that refuse typos and keep Decimal's arithmetic exact (1e999 is finite, but no cent of it
# can be computed in 28 digits): a lot costs at least a cent and at most ten million USD; a plan
# books at most a year of machine time (the longest window is 30 days).
MAX_PRICE = Decimal(10_000_000)
MAX_HOURS = 365 * 24


def usd(value: Decimal) -> str:
    """Money as the string an order stores: two decimals, rounded half up."""
    return str(value.quantize(CENT, rounding=ROUND_HALF_UP))


def _number(value: Decimal) -> int | float:
    """Hours for JSON: 78 stays 78, 1.5 stays 1.5."""
    return int(value) if value == value.to_integral_value() else float(value)


# ---------------------------------------------------------------- plan: inputs


def parse_price(text: str) -> Decimal:
    """``--price`` as an exact decimal amount in USD: finite (no NaN, sNaN, Infinity), a cent to MAX_PRICE."""
    try:
        value = Decimal(text.strip().removeprefix("$"))
    except InvalidOperation:
        value = Decimal(0)
    if not value.is_finite() or value <= 0:
        raise BadInput(f"--price {text!r}: expected a positive amount in USD for one lot, e.g. 47.14")
    if not CENT <= value <= MAX_PRICE:
        raise BadInput(f"--price {text!r}: expected {usd(CENT)} to {usd(MAX_PRICE)} USD for one lot, e.g. 47.14")
    return value


def _check_days_lots(days: int, lots: int) -> None:
    if days not in DURATIONS:
        raise BadInput(f"--days {days}: a plan lasts 3, 7 or 30 days; choose one of them")
    if not 1 <= lots <= MAX_LOTS:
        raise BadInput(f"--lots {lots}: an order holds 1 to {MAX_LOTS} lots; choose a number in that range")


def _check_counts(hours: Decimal | None, accepted: int | None) -> None:
    if hours is not None and not hours.is_finite():
        raise BadInput(f"--hours {hours}: not a finite number; give the machine-busy hours, e.g. 48")
    if hours is not None and hours < 0:
        raise BadInput(f"--hours {_number(hours)}: booked hours cannot be negative")
    if hours is not None and hours > MAX_HOURS:
        raise BadInput(f"--hours {float(hours):g}: more than a year ({MAX_HOURS} h) of machine time; give the "
                       "machine-busy hours of this plan (3, 7 or 30 days: 72, 168 or 720 h)")
    if accepted is not None and accepted < 0:
        raise BadInput(f"--accepted {accepted}: the number of accepted outputs cannot be negative")


def lot_price(offer: Offer, days: int, price: Decimal | None) -> tuple[Decimal, str]:
    """The price of one lot for ``days``: ``--price`` when given, else the catalog's; never a guess."""
    if price is not None:
        return price, "--price"
    known = offer.price(days)
    if known is None:
        raise BadInput(f"--gpu {offer.name!r}: the catalog has no {days}-day price; pass --price USD "
                       f"(the provider's price of one lot for {days} days) — kdkit never invents one")
    return known, "catalog"


# ---------------------------------------------------------------- plan: schedule and cost


def _longer_plan(offer: Offer, days: int, lots: int, total: Decimal) -> dict[str, Any] | None:
    longer = next((d for d in DURATIONS if d > days), None)
    if longer is None:
        return None
    price = offer.price(longer)
    if price is None:
        return {"days": longer, "total_usd": None, "difference_usd": None}
    return {"days": longer, "total_usd": usd(price * lots), "difference_usd": usd(price * lots - total)}


def _over_suggestions(over: Decimal, window: int, longer: dict[str, Any] | None) -> list[str]:
    reduce = (f"or reduce the protocol by {_number(over)} h to fit {window} h: keep the essential work, "
              "move useful and exploratory runs out")
    if longer is None:
        return ["no longer plan exists: reduce the protocol by "
                f"{_number(over)} h, or split independent inputs across lots as workers"]
    if longer["difference_usd"] is None:
        first = f"take the {longer['days']}-day plan (its price is unknown: ask the provider)"
    else:
        first = (f"take the {longer['days']}-day plan: {longer['total_usd']} USD in total, "
                 f"{longer['difference_usd']} USD more")
    return [first, reduce]


def schedule(offer: Offer, days: int, lots: int, total: Decimal, hours: Decimal | None) -> dict[str, Any]:
    """Booked machine-busy hours against the window (stages on one GPU run one after another)."""
    window = days * 24
    base: dict[str, Any] = {"window_hours": window, "booked_hours": None, "left_hours": None,
                            "over_hours": None, "fits": None, "longer_plan": None, "suggestions": []}
    if hours is None:
        base["suggestions"] = ["pass --hours H: the machine-busy hours of installation, checks, compute "
                               "and export, end to end"]
        return base
    base["booked_hours"] = _number(hours)
    if hours <= window:
        return {**base, "left_hours": _number(window - hours), "fits": True}
    over = hours - window
    longer = _longer_plan(offer, days, lots, total)
    return {**base, "over_hours": _number(over), "fits": False, "longer_plan": longer,
            "suggestions": _over_suggestions(over, window, longer)}


def cost_per_accepted(total: Decimal, accepted: int | None) -> dict[str, Any] | None:
    """What each accepted output cost; with none accepted the ratio is undefined, never zero."""
    if accepted is None:
        return None
    if accepted == 0:
        return {"accepted": 0, "per_output_usd": None, "cost_incurred_usd": usd(total),
                "reason": f"0 accepted outputs: {usd(total)} USD was spent and nothing was accepted, so the "
                          "cost per output is undefined (not zero)"}
    return {"accepted": accepted, "per_output_usd": usd(total / accepted), "cost_incurred_usd": usd(total),
            "reason": None}


def make_plan(catalog: Catalog, gpu: str, days: int, lots: int, *, price: Decimal | None = None,
              hours: Decimal | None = None, accepted: int | None = None, preparation: str = "ubuntu",
              project: str | None = None) -> dict[str, Any]:
    """The order summary, its schedule and its cost per accepted output (the order file's content)."""
    _check_days_lots(days, lots)
    _check_counts(hours, accepted)
    if preparation not in PREPARATIONS:
        raise BadInput(f"--preparation {preparation}: choose one of {', '.join(PREPARATIONS)}")
    offer = catalog.find(gpu)
    per_lot, source = lot_price(offer, days, price)
    total = per_lot * lots
    return {
        "kdkit_order": 1, "created": _utc_now(), "kdkit_version": __version__, "project": project,
        "offer": offer.summary(), "days": days, "lots": lots, "cards": lots * offer.cards_per_lot,
        "preparation": preparation, "price_per_lot_usd": usd(per_lot), "price_source": source,
        "total_usd": usd(total), "schedule": schedule(offer, days, lots, total, hours),
        "cost_per_accepted": cost_per_accepted(total, accepted),
    }


def _utc_now() -> str:
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def save_order(order: dict[str, Any], path: Path, *, force: bool = False) -> None:
    """Write the order atomically; an existing order is a record and is kept unless ``force``."""
    if path.exists() and not force:
        raise BadInput(f"{path}: already exists; an order is a record — choose another name or pass --force")
    if not path.parent.is_dir():
        raise BadInput(f"{path.parent}: folder does not exist; create it first")
    atomic_write_json(path, order)


def load_order(path: Path) -> dict[str, Any]:
    """An order file written by ``kdkit plan --save``, checked against schemas/order.schema.json."""
    from kdkit.validate import load_valid

    return load_valid(path, "order", what="order file", hint="; write it with `kdkit plan --save`")


# ---------------------------------------------------------------- check


@dataclass(frozen=True)
class Point:
    """One point of ``kdkit check``: ok, fail, unknown (cannot be shown to hold) or note (to confirm)."""

    name: str
    status: str
    detail: str
    fix: str | None = None


_INDEX_URL = re.compile(r"/whl/(cpu|cu[0-9]{3}|rocm[0-9.]+)/?$")
_TORCH_INDEX = "https://download.pytorch.org/whl/{label}"


def _label_backend(label: str, pairings: Pairings) -> str:
    known = pairings.index(label)
    if known is not None:
        return known["backend"]
    return "cuda" if label.startswith("cu") else "rocm" if label.startswith("rocm") else "cpu"


def _lock_label(pin_local: str | None, options: list[tuple[str, str]]) -> str | None:
    """The build label: the pin's local label, else the lock's torch index URL."""
    if pin_local:
        return pin_local
    for _option, value in options:
        match = _INDEX_URL.search(value)
        if match:
            return match.group(1)
    return None


def _instead(offer: Offer, pairings: Pairings) -> str:
    """What to lock instead: the builds known to carry code for the card, oldest first."""
    builds = pairings.builds_for(offer.architecture, offer.backend)
    if not builds:
        return f"no build in kdkit's pairings carries {offer.architecture}; add one to a project pairings.json"
    by_torch: dict[str, list[str]] = {}
    for build in builds:
        by_torch.setdefault(build.torch, []).append(build.label)
    first = builds[0]
    known = "; ".join(f"{t} {'/'.join(labels)}" for t, labels in by_torch.items())
    return (f"lock torch >= {first.torch} with {first.label} (known to carry {offer.architecture}: {known}): "
            f"set backends.{offer.backend}.torch_index to {_TORCH_INDEX.format(label=first.label)}, "
            f"pin torch>={first.torch} in requirements/base.in, then `kdkit lock --backend {offer.backend}`")


def _backend_point(offer: Offer, backend: str) -> Point:
    if offer.backend == backend:
        return Point("backend", "ok", f"{offer.name} ({offer.vendor}) runs the {backend} backend")
    return Point("backend", "fail",
                 f"{offer.name} is an {offer.vendor.upper()} card: it runs the {offer.backend} backend, "
                 f"not {backend}",
                 f"check and lock the {offer.backend} backend: `kdkit lock --backend {offer.backend}`, then "
                 f"`kdkit check --gpu {offer.name!r} --backend {offer.backend}`")


def _build_point(offer: Offer, version: str, label: str, pairings: Pairings, lock: Path) -> Point:
    backend = _label_backend(label, pairings)
    if backend != offer.backend:
        return Point("lock build", "fail",
                     f"{lock} pins torch {version}, a {backend} build; {offer.name} "
                     f"({offer.architecture}) needs a {offer.backend} build",
                     _instead(offer, pairings))
    return Point("lock build", "ok", f"{lock} pins torch {version}, a {backend} build")


def _kernel_point(offer: Offer, version: str, label: str, pairings: Pairings) -> Point:
    build = pairings.build(version, label)
    card = offer.architecture
    if build is None:
        return Point("kernels", "unknown",
                     f"kdkit's pairings do not know torch {version} from {label} "
                     f"(known releases: {', '.join(pairings.known_torch())})",
                     "confirm with torch.cuda.get_arch_list() inside the image (`kdkit diagnose` does), "
                     "then add the pairing to a project pairings.json; or " + _instead(offer, pairings))
    code = build.code_for(card)
    if code is not None:
        return Point("kernels", "ok", f"torch {version} carries {code}, which runs on {card}")
    carried = ", ".join(build.architectures) or "no GPU code"
    if not build.complete:
        return Point("kernels", "unknown",
                     f"{card} is not among the targets kdkit knows for torch {build.torch} {label} ({carried}); "
                     "that list is partial",
                     "confirm with torch.cuda.get_arch_list() inside the image (`kdkit diagnose` does)")
    needs = " (Blackwell needs a CUDA 12.8+ build, torch >= 2.7)" if card in ("sm_100", "sm_120") else ""
    return Point("kernels", "fail",
                 f"torch {version} carries {carried}: no code for {offer.name}'s {card}{needs}; on the machine "
                 "this is 'no kernel image is available for execution on the device'",
                 _instead(offer, pairings))


def _driver_point(offer: Offer, version: str, label: str, pairings: Pairings) -> Point:
    index = pairings.index(label)
    if offer.backend == "rocm":
        return Point("driver", "note", "the host needs the amdgpu kernel driver and /dev/kfd access",
                     "ask the provider; `kdkit diagnose` checks /dev/kfd on arrival (add the render group)")
    if index is None or not index["version"]:
        return Point("driver", "unknown", f"the CUDA version of {label} is not in kdkit's pairings",
                     "add the index to a project pairings.json")
    minimum = pairings.min_driver(index["version"])
    if minimum is None:
        return Point("driver", "unknown", f"no minimum driver known for CUDA {index['version']}",
                     "add it under drivers in a project pairings.json")
    return Point("driver", "note",
                 f"torch {version} (CUDA {index['version']}) needs an NVIDIA host driver >= {minimum}",
                 "ask the provider for the driver version; `kdkit diagnose` checks it on arrival")


def _memory_point(project: Project, offer: Offer) -> Point:
    """The lower bound from kdkit.json's memory section, and the pilot's measured peak, against a card."""
    from kdkit.memory import DOES_NOT_FIT, estimate_memory, job_from_config, measured_verdict, pilot_peak

    runs = project.root / runs_folder(project)
    fix: str | None = None
    if "memory" in project.config:
        report = estimate_memory(job_from_config(project.config, project.root / "kdkit.json"), offer, runs)
        peak, verdict = report["pilot_peak"], report["against"]["verdict"]
        detail = (f"lower bound {report['lower_bound_gib']} GiB against {offer.memory_gb} GB per card: "
                  f"{verdict}")
    else:
        peak = pilot_peak(runs)
        verdict = None if peak is None else measured_verdict(peak, offer)
        detail = "no estimate: kdkit.json has no memory section"
        fix = ("add $.memory (parameters, dtype, train, kv) to kdkit.json or run `kdkit estimate-memory "
               "--params N --gpu NAME`; the pilot measures the real peak")
    if peak is not None:
        detail += f"; pilot {peak['run_id']} measured {peak['peak_gib']} GiB on {peak['device'] or 'an unnamed device'}"
    if verdict == DOES_NOT_FIT:
        return Point("memory", "fail", detail, "a card with more memory, a smaller batch or sequence, or "
                     "lower precision (validated on your own inputs)")
    return Point("memory", "note", detail, fix)


def runs_folder(project: Project) -> str:
    """The pilot config's runs folder, or ``runs`` when the config cannot be read."""
    try:
        runs = project.pilot_config().get("runs", "runs")
    except BadInput:
        return "runs"
    return runs if isinstance(runs, str) else "runs"


def _lock_points(offer: Offer, lock_path: Path, backend: str, pairings: Pairings) -> list[Point]:
    """What the lock says about the card: its build, its kernels, its driver."""
    from kdkit.probe.lockfile import parse_lock

    if not lock_path.is_file():
        return [Point("lock", "fail", f"{lock_path}: no lock yet", f"`kdkit lock --backend {backend}`")]
    lock = parse_lock(lock_path)
    pin = lock.pins.get("torch")
    if pin is None:
        return [Point("lock", "fail", f"{lock_path}: torch is not pinned",
                      "add torch to requirements/base.in, then `kdkit lock`")]
    label = _lock_label(pin.local, lock.options)
    if label is None:
        return [Point("lock", "fail", f"{lock_path}:{pin.line}: torch=={pin.version} has no local label, so it "
                      "also matches +cpu and +rocm builds", "re-lock with `kdkit lock`, which pins the label")]
    points = [_build_point(offer, pin.version, label, pairings, lock_path)]
    if points[0].status == "ok":
        points += [_kernel_point(offer, pin.version, label, pairings),
                   _driver_point(offer, pin.version, label, pairings)]
    return points


def check_order(project_dir: Path | None, gpu: str | None, *, backend: str | None = None,
                catalog_file: Path | None = None, pairings_file: Path | None = None) -> dict[str, Any]:
    """Every point that must hold before ordering ``gpu`` for this project, each with its fix."""
    from kdkit.project import load_project

    project = load_project(project_dir)
    name = gpu or project.config.get("target_gpu")
    if not name:
        raise BadInput(f"{project.root / 'kdkit.json'}: $.target_gpu is null; pass --gpu NAME or set it")
    offer = load_catalog(project.root, catalog_file).find(name)
    pairings = load_pairings(project.root, pairings_file)
    chosen = project.backend(backend or offer.backend)
    points = [_backend_point(offer, chosen.name)]
    points += _lock_points(offer, chosen.lock, chosen.name, pairings)
    points.append(_memory_point(project, offer))
    return {"project": str(project.root), "gpu": offer.summary(), "backend": chosen.name,
            "lock": str(chosen.lock), "ok": all(p.status in ("ok", "note") for p in points),
            "points": [asdict(p) for p in points]}


# ---------------------------------------------------------------- entry points for the commands


def optional_project(project_dir: Path | None) -> Project | None:
    """The project named, or the one around the current folder, or None outside any project."""
    from kdkit.project import find_root, load_project

    if project_dir is None:
        try:
            project_dir = find_root()
        except BadInput:
            return None
    return load_project(project_dir)


def plan_order(project_dir: Path | None, gpu: str, days: int, lots: int, *, price: str | None = None,
               hours: float | None = None, accepted: int | None = None, preparation: str = "ubuntu",
               catalog_file: Path | None = None, save: Path | None = None,
               force: bool = False) -> dict[str, Any]:
    """``kdkit plan``: the plan for ``gpu`` (with the project's catalog.json when inside a project),
    saved atomically to ``save`` when given."""
    project = optional_project(project_dir)
    catalog = load_catalog(None if project is None else project.root, catalog_file)
    order = make_plan(catalog, gpu, days, lots, price=None if price is None else parse_price(price),
                      hours=None if hours is None else Decimal(str(hours)), accepted=accepted,
                      preparation=preparation, project=None if project is None else project.name)
    if save is not None:
        save_order(order, save, force=force)
    return order
