"""The health section of `kdkit diagnose --accept`: what the driver says about the machine, read
before and independent of torch (smi.read), turned into points (kdkit.core.finding.Finding).
Standard library only.

``check()`` reads and judges; ``health_points()`` judges facts already read (the lead keeps them as
evidence). The machine's points are here: no GPU at all, a driver tool that fails, the driver
against the lock's CUDA (kdkit/data/pairings.json, through kdkit.core.builds.driver_floor), the GPUs
against the order (name, count, memory: kdkit/data/catalog.json), NVLink/XGMI links across GPUs;
each GPU's are health_rules.py's. Thresholds are kdkit/data/acceptance.json's (points.thresholds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdkit.core import gpurules
from kdkit.core.builds import driver_floor, shipped_data, version_tuple
from kdkit.core.finding import Finding
from kdkit.probe.diagnose import nominal, smi
from kdkit.probe.diagnose.health_rules import gpu_points, make, unread, who
from kdkit.probe.diagnose.points import thresholds

if TYPE_CHECKING:
    from kdkit.probe.diagnose.points import Rule
    from kdkit.probe.diagnose.smi_values import SmiFacts

GPU_FIX = ("in a container: docker run --gpus all (NVIDIA) or --device /dev/kfd --device /dev/dri "
           "(AMD); on a host: install the GPU driver")


def check(cuda: str | None = None, expected_name: str | None = None,
          expected_count: int | None = None,
          overrides: dict[str, dict[str, Rule]] | None = None,
          timeout: float = smi.READ_TIMEOUT) -> tuple[SmiFacts, list[Finding]]:
    """Read the driver's facts (smi.read) and judge them: (facts for the evidence, points)."""
    facts = smi.read(timeout)
    return facts, health_points(facts, cuda, expected_name, expected_count, overrides)


def health_points(facts: SmiFacts, cuda: str | None = None, expected_name: str | None = None,
                  expected_count: int | None = None,
                  overrides: dict[str, dict[str, Rule]] | None = None) -> list[Finding]:
    """Every health point of ``facts`` (smi.read's). ``cuda``: the lock's CUDA ("12.8"; None for a
    ROCm or CPU lock or when unknown). ``expected_name``/``expected_count``: the ordered card and
    count (None when unknown: the readings are then info). ``overrides``: kdkit.json
    "acceptance"."""
    rules = thresholds(overrides)
    health, load = rules.get("health", {}), rules.get("load", {})
    if not facts["gpus"]:
        return presence_points(facts)
    points = driver_points(facts, cuda) + query_points(facts) + order_points(facts, expected_name,
                                                                             expected_count,
                                                                              health)
    for gpu in facts["gpus"]:
        points += gpu_points(gpu, health, load)
    return points + link_points(facts, health)


def presence_points(facts: SmiFacts) -> list[Finding]:
    """The one point of a machine whose driver lists no GPU: no tool and no device node (refuse: no
    GPU at all); device nodes but no tool (unknown: the facts cannot be read); a tool that fails or
    hangs (refuse)."""
    nodes = facts.get("device_nodes") or []
    failure = facts.get("failure") or "the driver lists no GPU"
    if facts.get("tool") is None and not nodes:
        return [Finding("health", "gpu.present", None, False, "", "a GPU", "refuse",
                        "no GPU: no nvidia-smi, amd-smi or rocm-smi on PATH, and no /dev/nvidia*, "
                        "/dev/kfd or /proc/driver/nvidia",
                        fix=f"if this machine has GPUs, {GPU_FIX}",
                        provider="The machine shows no GPU at all (no driver tool, no GPU device "
                               "node); please check the order or give me a machine with the GPUs")]
    if facts.get("tool") is None:
        return [Finding("health", "driver.tool", None, None, "", None, "unknown",
                        f"GPU device nodes ({', '.join(nodes)}) but no driver tool on PATH: the "
                        "driver's facts cannot be read",
                        fix="in a container: NVIDIA_DRIVER_CAPABILITIES=compute,utility (utility "
                                     "mounts nvidia-smi), or use an image with amd-smi (ROCm)")]
    return [Finding("health", "driver.tool", None, False, "", "an answer", "refuse",
                    f"the driver lists no GPU: {failure}", fix=GPU_FIX,
                    provider=f"{facts['tool']} fails on this machine ({failure}); please check the "
                           "driver and GPUs or give me another machine")]


def query_points(facts: SmiFacts) -> list[Finding]:
    """How the driver was read (info, for the evidence): the other spellings used for fields this
    driver knows only by them (clocks_throttle_reasons.* before R535), the fields it does not know,
    the lines kdkit could not read."""
    query, points = facts.get("query") or {}, []
    if query.get("renamed") or query.get("unknown"):
        families: dict[tuple[str, str], list[str]] = {}
        for new, old in query.get("renamed", {}).items():
            families.setdefault(
                (new.rsplit(".", 1)[0], old.rsplit(".", 1)[0]), []).append(f"{new} as {old}")
        renamed = ", ".join(f"{new}.* as {old}.* ({len(pairs)} fields)" if len(pairs) > 1
                            else pairs[0]
                            for (new, old), pairs in families.items())
        unknown = ", ".join(query.get("unknown", []))
        points.append(Finding("health", "driver.fields", None, len(query.get("unknown", [])),
                              "fields unknown", None,
                              "info",
                              "; ".join(part for part in (f"read {renamed}" if renamed else "",
                                                         f"not known to this driver: {unknown}"
                                                          if unknown
                                                         else "") if part)))
    if facts.get("problems"):
        points.append(Finding("health", "driver.output", None, len(facts["problems"]), "problems",
                              None, "info",
                              "; ".join(facts["problems"][:5])))
    return points


def catalog_offer(name: str) -> dict[str, Any] | None:
    """The catalog's card for a name: as the driver prints it (device_pattern, nominal.lookup) or as
    an order names it (the card's name or an alias)."""
    offers = shipped_data(nominal.CATALOG)["offers"]
    wanted = name.strip().casefold()
    for offer in offers:
        if wanted in (alias.casefold() for alias in [offer["name"], *offer.get("aliases", [])]):
            return dict(offer)
    found = nominal.lookup(name)
    return next((dict(offer) for offer in offers if found and offer["name"] == found.name), None)


def driver_points(facts: SmiFacts, cuda: str | None) -> list[Finding]:
    """The driver against the lock's CUDA: its version against the floor (pairings.json), and the
    CUDA it supports (info)."""
    version = facts.get("driver_version")
    if facts.get("vendor") != "nvidia":
        return [Finding("health", "driver.version", None, version, "", None, "info",
                        f"amdgpu driver {version or 'version unread'} ({facts.get('tool')})")]
    points = [Finding("health", "driver.cuda", None, facts.get("cuda_version"), "", None, "info",
                      f"the driver supports CUDA up to {facts.get('cuda_version') or '(unread)'} "
                      f"(nvidia-smi -q); the lock's CUDA is {cuda or 'unknown'}")]
    source = (
        "kdkit/data/pairings.json drivers, architecture_drivers (kdkit.core.builds.driver_floor)")
    offer = catalog_offer(facts["gpus"][0].get("name") or "")
    floor = driver_floor(cuda, offer.get("architecture") if offer else None) if cuda else None
    if version is None or floor is None:
        why = "the driver version is unread" if version is None else (
            f"no CUDA build to compare with (driver {version})" if not cuda else
            f"kdkit knows no driver floor for CUDA {version_tuple(cuda)[:1]} (driver {version})")
        return [*points, Finding("health", "driver.version", None, version, "", None,
                                 "info" if version and not cuda else "unknown", why, source=source)]
    minimum, reason = floor
    if gpurules.driver_new_enough(version, minimum):
        return [*points,
                Finding("health", "driver.version", None, version, "", f">= {minimum}", "ok",
                        f"driver {version} >= {minimum}, the floor for {reason}", source=source)]
    return [*points,
            Finding("health", "driver.version", None, version, "", f">= {minimum}", "refuse",
                    f"driver {version} is older than {minimum}, the floor for {reason} (the lock's "
                    f"CUDA {cuda}); torch will not start on it",
                    fix="lock a torch build for an older CUDA (another torch_index in kdkit.json, "
                      "then `kdkit lock`)",
                    provider=f"The NVIDIA driver {version} is older than {minimum}, which CUDA "
                           f"{cuda} needs; please update the driver to {minimum} or newer, or give "
                           "me a machine with one",
                    source=source)]


def order_points(facts: SmiFacts, expected_name: str | None = None,
                 expected_count: int | None = None,
                 rules: dict[str, Rule] | None = None) -> list[Finding]:
    """The GPUs against the order: how many, which card (``expected_name``, a catalog name or alias,
    or as the driver prints it), how much memory. None for what the order does not say: the readings
    are then info. ``rules``: the health section's (the shipped ones when None)."""
    rules = thresholds()["health"] if rules is None else rules
    gpus = facts["gpus"]
    names = sorted({str(gpu.get("name") or "name unread") for gpu in gpus})
    seen = f"{len(gpus)} x {', '.join(names)}"
    if expected_count is None:
        points = [
            Finding("health", "gpu.count", None, len(gpus), "GPUs",
                    None, "info", f"the driver sees {seen}")]
    elif len(gpus) < expected_count:
        points = [Finding("health", "gpu.count", None, len(gpus), "GPUs", f">= {expected_count}",
                          "refuse",
                          f"the driver sees {seen}; the order is for {expected_count}",
                          provider=f"The order is for {expected_count} {expected_name or 'GPUs'}; "
                                   f"the driver sees {seen}; please give me the GPUs ordered",
                          source="the order")]
    else:
        verdict = "ok" if len(gpus) == expected_count else "info"
        points = [Finding("health", "gpu.count", None, len(gpus), "GPUs", f">= {expected_count}",
                          verdict, f"the driver sees {seen}; the order is for {expected_count}",
                          source="the order")]
    for gpu in gpus:
        points += name_points(gpu, expected_name) + memory_points(gpu, rules["gpu.memory"])
    return points


def name_points(gpu: dict[str, Any], expected: str | None) -> list[Finding]:
    """The card against the ordered one; without an order, the name as read (info)."""
    name = gpu.get("name")
    if name is None or gpu.get("unreadable"):
        return [unread("gpu.name", gpu, "name", None)]
    if expected is None:
        return [Finding("health", "gpu.name", gpu["index"], name, "", None, "info", who(gpu))]
    same, why = same_card(expected, name)
    source = "kdkit/data/catalog.json (names, aliases, device_pattern; tier words Ti, SUPER, D)"
    if same is None:
        return [Finding("health", "gpu.name", gpu["index"], name, "", expected, "unknown",
                        f"kdkit cannot tell whether '{name}' is the ordered '{expected}'",
                        source=source)]
    if same:
        return [
            Finding("health", "gpu.name", gpu["index"], name, "", expected, "ok",
                    why, source=source)]
    return [Finding("health", "gpu.name", gpu["index"], name, "", expected, "refuse", why,
                    provider=f"{who(gpu)} is not the {expected} ordered; please give me the card "
                             "ordered",
                    source=source)]


def same_card(expected: str, name: str) -> tuple[bool | None, str]:
    """Whether the driver's name is the ordered card (None: cannot tell), and why. A name the driver
    gives several cards alike (MI250X/MI250) matches an order of any of them; a name of the ordered
    model with another tier word (RTX 4090 D, 4080 vs 4080 SUPER) is another card; the ordered name
    within the driver's, tiers alike, is the card."""
    ordered, alike = catalog_offer(expected), nominal.named(name)
    if ordered and len(alike) > 1:
        if ordered["name"] in alike:
            return True, (f"{name} matches the order ({expected}): the driver names "
                          f"{' and '.join(alike)} alike, so it cannot tell them apart")
        return False, f"{name} is not the ordered {expected}"
    actual = catalog_offer(name)
    if ordered and actual:
        if ordered["name"] == actual["name"]:
            return True, f"{name}, as ordered ({expected})"
        return False, f"{name} is not the ordered {expected}"
    card = ordered["name"] if ordered else expected
    model = nominal.model(card)
    if model and model == nominal.model(name) and nominal.tiers(card) != nominal.tiers(name):
        return (False,
                f"the driver names a {name}; the order is {expected} (Ti, SUPER and D make other "
                "cards)")
    if expected.casefold() in name.casefold() or card.casefold() in name.casefold():
        return True, f"{name}, as ordered ({expected})"
    return None, ""


def memory_points(gpu: dict[str, Any], rule: Rule) -> list[Finding]:
    """The card's memory against its datasheet (catalog memory_gb per device), for a card the
    catalog knows."""
    mib = gpu.get("memory_mib")
    if "memory_mib" not in gpu or gpu.get("unreadable"):
        return []
    if not isinstance(mib, (int, float)):
        return [unread("gpu.memory", gpu, "memory_mib", rule, "MiB")]
    offer = catalog_offer(str(gpu.get("name") or ""))
    if offer is None or gpu.get("mig_mode") or not offer.get("memory_gb"):
        why = ("a MIG slice" if gpu.get("mig_mode")
               else f"kdkit has no datasheet memory for '{gpu.get('name')}'")
        return [
            make("gpu.memory", gpu, mib, "unknown", f"{mib:g} MiB; not judged: {why}", rule, "MiB")]
    expected = offer["memory_gb"] / offer.get("devices_per_card", 1)
    have = mib * 2**20 / 1e9
    shown = f">= {rule['value'] * expected:g} GB ({offer['name']}: {expected:g} GB per device)"
    if have >= rule["value"] * expected:
        return [
            make("gpu.memory", gpu, mib, "ok", f"{mib:g} MiB = {have:.1f} GB", rule, "MiB", shown)]
    return [make("gpu.memory", gpu, mib, rule["verdict"],
                 f"{mib:g} MiB = {have:.1f} GB, less than the "
                 f"{expected:g} GB of a {offer['name']}", rule, "MiB", shown,
                 provider=f"{who(gpu)} reports {have:.1f} GB of memory, less than the {expected:g} "
                          f"GB of a {offer['name']}; please give me the card ordered")]


def link_points(facts: SmiFacts, rules: dict[str, Rule]) -> list[Finding]:
    """NVLink/XGMI: links down on a GPU whose other links are up, or while the machine's other GPUs
    have links up; XGMI errors. A machine with no link up at all is reported (a PCIe-only machine
    looks the same)."""
    rule = rules["links.down"]
    linked = [gpu for gpu in facts["gpus"] if isinstance(gpu.get("links"), dict)]
    any_up = any(gpu["links"]["up"] for gpu in linked)
    points = []
    for gpu in linked:
        links = gpu["links"]
        kind, up, down = (links["kind"].upper().replace("NVLINK", "NVLink"), links["up"],
                          links["down"])
        shown = f"{up} of {links['total']} {kind} links up"
        if down == 0:
            points.append(make("links.down", gpu, down, "ok", shown, rule, "links"))
        elif up or any_up or kind == "XGMI":
            points.append(make("links.down", gpu, down, rule["verdict"], f"{shown}, {down} down",
                               rule, "links",
                               fix="ask for another machine (a link down is a cable, bridge or "
                                   "fabric fault)",
                               provider=f"{who(gpu)} has {down} of {links['total']} {kind} links "
                                        "down; please repair the links or give me another machine"))
        else:
            points.append(make("links.down", gpu, down, "info",
                               f"no {kind} link up on any GPU: a PCIe-only machine, "
                               "or links down everywhere (the load section's all-reduce tells)",
                               rule, "links"))
    for gpu in facts["gpus"]:
        points += _xgmi_errors(gpu, rules["xgmi.errors"])
    return points


def _xgmi_errors(gpu: dict[str, Any], rule: Rule) -> list[Finding]:
    if "xgmi_errors" not in gpu:
        return []
    status = gpu["xgmi_errors"]
    if not isinstance(status, str) or "ERROR" not in status.upper():
        return [unread("xgmi.errors", gpu, "xgmi_errors", rule)]
    if status.upper().endswith("NO_ERRORS"):
        return [make("xgmi.errors", gpu, status, "ok", "no XGMI errors", rule)]
    return [make("xgmi.errors", gpu, status, rule["verdict"], f"XGMI errors: {status}", rule,
                 provider=f"{who(gpu)} reports XGMI link errors ({status}); please check the links "
                          "or give me another machine")]
