"""What `kdkit diagnose --accept` judges: one point (a kdkit.core.finding.Finding) per reading (a
fact the driver or a measurement gave), its threshold, its verdict, and what to do or to tell the
provider; and how points make the machine's verdict. Standard library only.

The thresholds are data: ``kdkit/data/acceptance.json``, each with the public source it was read in,
overridable per project (kdkit.json ``"acceptance"``). A reading kdkit has no threshold for (an
unknown card, a field the driver does not give) is reported as read, with the verdict ``unknown`` or
``info``: never an invented threshold.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from kdkit.core.finding import Finding

    class Rule(TypedDict, total=False):
        """A rule of kdkit/data/acceptance.json (threshold, card reference), overrides laid over."""

        value: Any  # the threshold: a number, text, flag, list or table, by rule
        verdict: str
        idle_verdict: str
        gen_gt_s: dict[str, float]
        window: float
        bounds: dict[str, list[float | None]]
        about: str
        source: str
        unit: str
        note: str
        copy_gb_s: float
        triad_gb_s: float
        bandwidth_source: str


ACCEPTANCE = "data/acceptance.json"  # inside the kdkit package; travels (kdkit.core.layout.DATA)

# A point's verdict. ok: within its threshold. info: a fact with no verdict (a MIG slice, the driver
# version). unknown: no threshold applies (an unknown card) or the reading could not be taken
# ("[N/A]", "[Insufficient Permissions]"): reported, never judged. degraded: the card works below
# what was paid for (throttling, a PCIe link trained at x8, a pending row remap). refuse: the
# machine should go back (an uncorrectable ECC error, a failed row remap, silent data corruption, no
# GPU).
VERDICTS = ("ok", "info", "unknown", "degraded", "refuse")
# The machine's verdict, from its worst point.
MACHINE = {"refuse": "refuse", "degraded": "degraded"}  # anything else: accept


def machine_verdict(points: list[Finding]) -> str:
    """accept, degraded or refuse: the worst point decides; no point at all is no evidence
    (refuse). ValueError for a point whose verdict is a finding's but not an acceptance point's (a
    rule's mistake: "fail" or "warn" says nothing of whether the machine goes back)."""
    if not points:
        return "refuse"
    odd = [f"{point.name}: {point.verdict}" for point in points if point.verdict not in VERDICTS]
    if odd:
        raise ValueError(f"acceptance points with a verdict outside {VERDICTS}: {', '.join(odd)}")
    worst = max(VERDICTS.index(point.verdict) for point in points)
    return MACHINE.get(VERDICTS[worst], "accept")


def reasons(points: list[Finding]) -> list[Finding]:
    """The points that make the verdict what it is: every refuse point, else every degraded one."""
    for level in ("refuse", "degraded"):
        chosen = [point for point in points if point.verdict == level]
        if chosen:
            return chosen
    return []


def thresholds(
        overrides: dict[str, dict[str, Rule]] | None = None) -> dict[str, dict[str, Rule]]:
    """The shipped thresholds (``kdkit/data/acceptance.json``), each ``{"value": ..., "source":
    ...}`` under its section and name, with a project's ``overrides`` (kdkit.json ``"acceptance"``:
    the same shape, ``source`` optional) laid over them; an overridden threshold's source says
    so."""
    from kdkit.core.builds import shipped_data

    merged: dict[str, dict[str, Rule]] = {section: dict(rules) for section,
                                          rules in shipped_data(ACCEPTANCE).items()
                                          if isinstance(rules, dict)}
    for section, rules in (overrides or {}).items():
        for name, rule in rules.items():
            base = merged.setdefault(section, {}).get(name, {})
            merged[section][name] = {**base, **rule,
                                     "source": rule.get("source", "kdkit.json (this project)")}
    return merged


def _kind(value: Any) -> str:
    """A JSON value's kind, as an override must match the shipped rule's: number, text, flag, list,
    table."""
    if isinstance(value, bool):
        return "flag"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "text"
    return "list" if isinstance(value, list) else "table" if isinstance(value, dict) else "null"


def check_overrides(overrides: Any, where: str) -> None:
    """BadInput, one line naming the place, unless ``overrides`` (kdkit.json ``"acceptance"``) only
    changes rules kdkit ships, each key to a value of the shipped kind (finite numbers), with a
    ``source`` that is text and carries no credential (it goes into the evidence for the provider).
    Checked before any load: a misspelt rule would otherwise leave the shipped threshold in force,
    unsaid."""
    from kdkit.core.builds import shipped_data
    from kdkit.core.errors import BadInput

    shipped = shipped_data(ACCEPTANCE)
    if not isinstance(overrides, dict):
        raise BadInput(f"{where}: expected sections of rules, e.g. {{\"load\": "
                       "{\"load.gemm.sustained\": {\"value\": 0.9}}}}")
    for section, rules in overrides.items():
        known = shipped.get(section)
        if section == "about" or not isinstance(known, dict) or not isinstance(rules, dict):
            raise BadInput(f"{where}.{section}: not a section of rules kdkit knows (health, load)")
        for name, rule in rules.items():
            _no_credential(f"{where}.{section}.{name}", rule)
            if name not in known and section == "reference" and _catalog_card(name):
                raise BadInput(f"{where}.{section}: kdkit ships no reference for {name}; a project "
                               "can change a shipped reference, not add one")
            if name not in known or not isinstance(rule, dict):
                raise BadInput(f"{where}.{section}: {name!r} is not a rule kdkit knows; the rules "
                               f"are in kdkit/data/acceptance.json (e.g. {next(iter(known))!r})")
            for key, value in rule.items():
                _check_key(f"{where}.{section}.{name}.{key}", key, value, known[name])


def _catalog_card(name: str) -> bool:
    """Whether ``name`` is a card the catalog knows (exactly, as the reference section names
    cards)."""
    from kdkit.probe.diagnose import nominal

    try:
        figures = nominal.lookup(name)
    except Exception:  # the catalog unreadable: the plain message below still holds
        return False
    return figures is not None and figures.name == name


def _no_credential(place: str, value: Any) -> None:
    """BadInput naming the JSON path of the first text under ``value`` (keys too) with a
    credential's shape: every string of an override can land in the evidence for the provider. Never
    echoes it."""
    from kdkit.core.credentials import find
    from kdkit.core.errors import BadInput

    if isinstance(value, dict):
        for key, item in value.items():
            _no_credential(f"{place}.{key}", key)
            _no_credential(f"{place}.{key}", item)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _no_credential(f"{place}[{index}]", item)
    elif isinstance(value, str) and (found := find(value)):
        raise BadInput(f"{place}: carries {found[0].what}; it would go into the evidence for the "
                       "provider: remove it")


def _finite(value: Any) -> bool:
    """A number a float can hold, finitely (a 400-digit integer cannot)."""
    import math

    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _check_key(place: str, key: str, value: Any, shipped: dict[str, Any]) -> None:
    from kdkit.core.errors import BadInput
    from kdkit.core.safetext import printable

    if key == "source":
        if not isinstance(value, str) or not value.strip():
            raise BadInput(f"{place}: expected the text naming where the threshold comes from")
        return
    if key not in shipped or key == "bounds":
        keys = ", ".join(k for k in shipped if k not in ("source", "bounds"))
        raise BadInput(f"{place}: not a key of this rule ({keys})")
    wanted = _kind(shipped[key])
    if _kind(value) != wanted or (wanted == "number" and not _finite(value)):
        got = "a number too large for a float" if wanted == "number" and _kind(value) == "number" \
            else printable(repr(value)[:80])
        raise BadInput(f"{place}: expected a {wanted} like the shipped {shipped[key]!r}, got {got}")
    low, high = (shipped.get("bounds") or {}).get(key) or (None, None)
    if (low is not None and value <= low) or (high is not None and value > high):
        above = f"above {low}" if low is not None else ""
        upto = f"at most {high}" if high is not None else ""
        raise BadInput(f"{place}: expected a number {' and '.join(w for w in (above, upto) if w)}, "
                       f"like the shipped {shipped[key]!r}, got {value!r}")
