"""The health points of one GPU, from the driver's facts (smi.read): ECC, retired pages and remapped
rows, the pending recovery action, the PCIe link at idle, throttle reasons, power limit,
persistence, compute and MIG modes, NVLink/XGMI links. Standard library only.

Each rule is kdkit/data/acceptance.json's (section "health", by point name; NVIDIA's throttle
reasons are the load section's "load.throttle", the same rule judged at idle). A reading the driver
printed but kdkit cannot read ("[N/A]", "[Insufficient Permissions]") is a point with verdict
``unknown``; a reading the driver does not report at all (a field older drivers lack) makes no
point, unless nothing else stands in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding

if TYPE_CHECKING:
    from kdkit.probe.diagnose.points import Rule

SECTION = "health"
THROTTLE = "throttle."


def who(gpu: dict[str, Any]) -> str:
    """``GPU 0 (NVIDIA H100 80GB HBM3, serial 1652823054321)``: the card as the provider can find
    it."""
    ident = next((f"{label} {gpu[key]}" for key,
                  label in (("serial", "serial"), ("uuid", "UUID"), ("bus_id", "bus"))
                  if gpu.get(key)), None)
    name = gpu.get("name") or "name unread"
    return f"GPU {gpu['index']} ({name}{', ' + ident if ident else ''})"


def tool(gpu: dict[str, Any]) -> str:
    return "nvidia-smi" if gpu.get("vendor") == "nvidia" else "amd-smi"


def make(name: str, gpu: dict[str, Any] | None, reading: Any, verdict: str, why: str,
         rule: Rule | None,
         unit: str = "", threshold: str | None = None, fix: str | None = None,
         provider: str | None = None) -> Finding:
    """A health point; its threshold and source are ``rule``'s (``threshold`` words it when
    given)."""
    shown = threshold if threshold is not None or rule is None else worded(rule.get("value"))
    return Finding(SECTION, name, None if gpu is None else gpu["index"], reading, unit, shown,
                   verdict, why,
                   fix, provider, None if rule is None else rule.get("source"))


def worded(value: Any) -> str:
    """A rule's value as a threshold reads: ``False`` -> "no", ``["a", "b"]`` -> "none of a, b"."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return "none of " + ", ".join(map(str, value))
    return str(value)


def unread(name: str, gpu: dict[str, Any], key: str, rule: Rule | None,
           unit: str = "") -> Finding:
    """The point of a reading the driver printed but kdkit could not read."""
    why = gpu["unread"].get(key, "not reported")
    raw = gpu["raw"].get(key)
    said = (f"{tool(gpu)} printed {raw!r}" if raw is not None and raw == why
            else f"{tool(gpu)}: {why}")
    return make(name, gpu, None, "unknown", f"{key} not read ({said}): not judged", rule, unit)


def known(gpu: dict[str, Any], key: str) -> bool:
    """Whether the driver reported ``key`` for this GPU (read or not)."""
    return key in gpu


def gpu_points(gpu: dict[str, Any], rules: dict[str, Rule],
               load_rules: dict[str, Rule]) -> list[Finding]:
    """Every health point of one GPU (the machine's are health.py's); one unknown point for a GPU
    whose line kdkit could not read."""
    if gpu.get("unreadable"):
        return [make("gpu.readings", gpu, None, "unknown",
                     f"{gpu['unreadable']}: no reading of this GPU is judged",
                     None)]
    return [*ecc_points(gpu, rules), *memory_repair_points(gpu, rules),
            *recovery_points(gpu, rules),
            *pcie_points(gpu, rules), *throttle_points(gpu, rules, load_rules),
            *mode_points(gpu, rules),
            *power_points(gpu, rules), state_point(gpu)]


def _count_point(name: str, gpu: dict[str, Any], key: str, rule: Rule, what: str,
                 provider: str | None) -> list[Finding]:
    if not known(gpu, key):
        return []
    value = gpu[key]
    if not isinstance(value, (int, float)):
        return [unread(name, gpu, key, rule, "errors")]
    limit = rule.get("value", 0)
    if value <= limit:
        return [make(name, gpu, value, "ok", f"{value} {what}", rule, "errors", f"<= {limit}")]
    return [make(name, gpu, value, rule.get("verdict", "refuse"), f"{value} {what}", rule, "errors",
                 f"<= {limit}",
                 provider=None if provider is None else provider.format(who=who(gpu), n=value))]


def ecc_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """ECC mode, and the uncorrectable (and AMD's correctable) error counts."""
    points = []
    if known(gpu, "ecc_mode"):
        rule = rules["ecc.mode"]
        if gpu["ecc_mode"] is None:
            points.append(unread("ecc.mode", gpu, "ecc_mode", rule))
        elif gpu["ecc_mode"]:
            points.append(make("ecc.mode", gpu, "Enabled", "ok", "ECC is enabled", rule))
        else:
            nvidia = gpu.get("vendor") == "nvidia"
            points.append(make("ecc.mode", gpu, "Disabled", rule["verdict"],
                               "ECC is disabled: memory errors go "
                               "undetected", rule,
                               fix=f"with root: sudo nvidia-smi -i {gpu['index']} -e 1; reboot"
                               if nvidia else None,
                               provider=f"{who(gpu)} runs with ECC disabled; please enable it"
                                        f"{' (nvidia-smi -e 1 and a reboot)' if nvidia else ''} or "
                                        "give me a machine with ECC on"))
    replace = "{who} reports {n} uncorrectable ECC errors; please replace the card or the machine"
    points += _count_point("ecc.volatile_uncorrected", gpu, "ecc_uncorrected_volatile",
                           rules["ecc.volatile_uncorrected"],
                           "uncorrectable ECC errors since the driver loaded",
                           replace.replace("{n} ", "{n} volatile "))
    points += _count_point("ecc.aggregate_uncorrected", gpu, "ecc_uncorrected_aggregate",
                           rules["ecc.aggregate_uncorrected"],
                           "uncorrectable ECC errors over the card's life", None)
    points += _count_point("ecc.uncorrected", gpu, "ecc_uncorrected", rules["ecc.uncorrected"],
                           "uncorrectable ECC errors (amd-smi)", replace)
    if isinstance(gpu.get("ecc_corrected"), (int, float)) and gpu["ecc_corrected"] > 0:
        points.append(make("ecc.corrected", gpu, gpu["ecc_corrected"], "info",
                           f"{gpu['ecc_corrected']} correctable "
                           "ECC errors (corrected by the hardware)", None, "errors"))
    return points


def _flag_point(name: str, gpu: dict[str, Any], key: str, rule: Rule,
                texts: tuple[str, str], fix: str,
                provider: str) -> Finding:
    """A yes/no reading against ``rule``'s value; ``texts``: (why when as the rule wants, why when
    not)."""
    value = gpu[key]
    if value is None:
        return unread(name, gpu, key, rule)
    if value == rule["value"]:
        return make(name, gpu, value, "ok", texts[0], rule)
    return make(name, gpu, value, rule["verdict"], texts[1], rule,
                fix=fix, provider=f"{who(gpu)}: {provider}")


def memory_repair_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """Pending page retirement (before Ampere) and row remapping (Ampere and later, which replaces
    it: NVIDIA GPU memory error management, Row Remapping). The mechanism the card does not use
    answers "[N/A]" and makes no point while the other is readable."""
    remap_read = isinstance(gpu.get("remap_pending"), bool) or isinstance(
        gpu.get("remap_failure"), bool)
    retire_read = isinstance(gpu.get("retired_pages_pending"), bool)
    reset = f"with root, no process on the GPU: sudo nvidia-smi -r -i {gpu['index']}"
    points = []
    if known(gpu, "retired_pages_pending") and (retire_read or not remap_read):
        points.append(_flag_point("retired_pages.pending", gpu, "retired_pages_pending",
                                  rules["retired_pages.pending"],
                                  ("no memory page pending retirement",
                                   "memory pages pending retirement: they retire at the next "
                                   "reboot, and may be allocated until then"),
                                  "reboot the machine (or reload the driver)",
                                  "memory pages are pending retirement (nvidia-smi "
                                  "retired_pages.pending); please reboot the machine or give me "
                                  "another one"))
    if known(gpu, "remap_pending") and (remap_read or not retire_read):
        points.append(_flag_point("remapped_rows.pending", gpu, "remap_pending",
                                  rules["remapped_rows.pending"],
                                  ("no row remap pending",
                                   "a row remap is pending: it takes effect at the next "
                                   "GPU reset"), reset,
                                  "a row remap is pending (nvidia-smi --query-remapped-rows); "
                                  "please reset the GPU or give me another machine"))
    if known(gpu, "remap_failure") and (remap_read or not retire_read):
        points.append(_flag_point("remapped_rows.failure", gpu, "remap_failure",
                                  rules["remapped_rows.failure"],
                                  ("no failed row remap",
                                   "a row remap failed: the spare rows are used up, "
                                   "NVIDIA's replacement criterion"),
                                  "ask for another machine",
                                  "a row remap failed (nvidia-smi --query-remapped-rows "
                                  "remapped_rows.failure); please replace the card or the machine"))
    return points


RECOVERY_FIX = {"reset": "with root, no process on the GPU: sudo nvidia-smi -r -i {i}",
                "reboot": "reboot the machine",
                "drain p2p": "stop the processes doing peer-to-peer traffic, then read the action "
                             "again",
                "drain and reset": "stop every GPU process, then with root: sudo nvidia-smi -r -i "
                                   "{i}"}


def recovery_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """The driver's pending recovery action (gpu_recovery_action), or the reset status of drivers
    before it."""
    rule = rules["recovery_action"]
    action = gpu.get("recovery_action")
    if isinstance(action, str):
        if action == rule["value"]:
            return [make("recovery_action", gpu, action, "ok", "no recovery action pending", rule)]
        fix = RECOVERY_FIX.get(action.lower(), "ask the provider").format(i=gpu["index"])
        return [make("recovery_action", gpu, action, rule["verdict"],
                     f"the driver asks for a recovery action: "
                     f"{action}; the GPU is unusable until it is done", rule, fix=fix,
                     provider=f"{who(gpu)}: the driver's recovery action is '{action}' (nvidia-smi "
                              "--query-gpu=gpu_recovery_action); please do it or give me another "
                              "machine")]
    flags = {key: gpu[key] for key in ("reset_required", "drain_and_reset")
             if isinstance(gpu.get(key), bool)}
    if flags:
        wanted = [key.replace("_", " ") for key, value in flags.items() if value]
        if not wanted:
            return [
                make("recovery_action", gpu, "None",
                     "ok", "no GPU reset required (reset_status)", rule)]
        return [make("recovery_action", gpu, ", ".join(wanted), rule["verdict"],
                     f"the driver reports: "
                     f"{', '.join(wanted)}; the GPU is unusable until it is reset", rule,
                     fix=RECOVERY_FIX["reset"].format(i=gpu["index"]),
                     provider=f"{who(gpu)}: the driver reports '{', '.join(wanted)}' (nvidia-smi "
                              "reset_status); please reset the GPU or give me another machine")]
    present = [key for key in ("recovery_action", "reset_required", "drain_and_reset")
               if known(gpu, key)]
    return [unread("recovery_action", gpu, present[0], rule)] if present else []


def pcie_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """The PCIe link at idle: at its maximum is ok, below is reported (info) for the load section to
    judge."""
    rule = rules["pcie.link"]
    points = []
    for name, key, label in (("pcie.gen", "pcie_gen", "Gen{}"),
                             ("pcie.width", "pcie_width", "x{}")):
        now, top = gpu.get(key), gpu.get(key + "_max")
        if not known(gpu, key) and not known(gpu, key + "_max"):
            continue
        if not isinstance(now, (int, float)) or not isinstance(top, (int, float)):
            points.append(
                unread(name, gpu, key if not isinstance(now, (int, float)) else key + "_max", rule))
            continue
        shown = f"{label.format(now)} of {label.format(top)}"
        if now >= top:
            points.append(
                make(name, gpu, now, "ok", f"PCIe link {shown}", rule, threshold=label.format(top)))
        else:
            points.append(make(name, gpu, now, rule["idle_verdict"],
                               f"PCIe link {shown} at idle: a link trains down "
                               "when idle; the load section judges it under load", rule,
                               threshold=label.format(top)))
    return points


def throttle_points(gpu: dict[str, Any], rules: dict[str, Rule],
                    load_rules: dict[str, Rule]) -> list[Finding]:
    """Clock event (throttle) reasons at idle: a slowdown reason active at idle is degraded."""
    reasons = {key[len(THROTTLE):]: value for key, value in gpu.items() if key.startswith(THROTTLE)}
    if not reasons:
        return []
    rule = rules["throttle.amd"] if gpu.get("vendor") == "amd" else load_rules["load.throttle"]
    if all(value is None for value in reasons.values()):
        return [unread("throttle", gpu, THROTTLE + next(iter(reasons)), rule)]
    active = sorted(name for name, value in reasons.items() if value)
    slow = [name for name in active if name in rule["value"]]
    shown = ", ".join(active) or "none"
    if not slow:
        return [make("throttle", gpu, shown, "ok", f"clock event reasons active: {shown}", rule)]
    return [make("throttle", gpu, shown, rule.get("verdict", "degraded"),
                 f"the card slows itself at idle: "
                 f"{', '.join(slow)}", rule,
                 fix="check the temperature and power readings; ask for another machine",
                 provider=f"{who(gpu)} throttles at idle ({', '.join(slow)}): its cooling or power "
                          "delivery is failing; please check the machine or give me another one")]


def mode_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """Persistence, compute and MIG modes."""
    points = []
    if known(gpu, "persistence"):
        rule, value = rules["persistence_mode"], gpu["persistence"]
        if value is None:
            points.append(unread("persistence_mode", gpu, "persistence", rule))
        else:
            points.append(make("persistence_mode", gpu, "Enabled" if value else "Disabled",
                               "ok" if value else
                               rule["verdict"],
                               "persistence mode is " + ("on" if value else "off: the driver "
                               "unloads between clients, each CUDA start pays its load time"), rule,
                               fix=None if value
                               else f"with root: sudo nvidia-smi -i {gpu['index']} -pm 1"))
    if known(gpu, "compute_mode"):
        points.append(_compute_mode(gpu, rules["compute_mode"]))
    if known(gpu, "mig_mode"):
        rule, value = rules["mig.mode"], gpu["mig_mode"]
        if value is None:
            points.append(unread("mig.mode", gpu, "mig_mode", rule))
        elif value:
            points.append(make("mig.mode", gpu, "Enabled", rule["verdict"],
                               "MIG is enabled: this machine may see "
                               "a slice of the GPU; per-card figures (memory, throughput) do not "
                               "apply", rule))
        else:
            points.append(
                make("mig.mode", gpu, "Disabled", "ok", "MIG is disabled: the whole GPU", rule))
    return points


def _compute_mode(gpu: dict[str, Any], rule: Rule) -> Finding:
    mode = gpu["compute_mode"]
    if mode is None:
        return unread("compute_mode", gpu, "compute_mode", rule)
    if mode in rule["value"]:
        return make("compute_mode", gpu, mode, rule["verdict"],
                    f"compute mode {mode}: no CUDA context can be "
                    "created", rule, threshold=worded(rule["value"]),
                    fix=f"with root: sudo nvidia-smi -i {gpu['index']} -c DEFAULT",
                    provider=(
                        f"{who(gpu)} is in compute mode {mode}; please set it to Default "
                        "(nvidia-smi -c 0)"))
    verdict, why = ("ok", "") if mode == "Default" else ("info", ": one process at a time")
    return make("compute_mode", gpu, mode, verdict, f"compute mode {mode}{why}", rule)


def power_points(gpu: dict[str, Any], rules: dict[str, Rule]) -> list[Finding]:
    """The enforced power limit against the card's default."""
    if not known(gpu, "power_limit") or not known(gpu, "power_default_limit"):
        return []
    rule = rules["power.limit"]
    limit, default = gpu["power_limit"], gpu["power_default_limit"]
    if not isinstance(limit, (int, float)) or not isinstance(default, (int, float)) or default <= 0:
        key = "power_limit" if not isinstance(limit, (int, float)) else "power_default_limit"
        return [unread("power.limit", gpu, key, rule, "W")]
    floor = rule["value"] * default
    shown = f">= {floor:g} W ({rule['value']:g} of the default {default:g} W)"
    if limit >= floor:
        return [make("power.limit", gpu, limit, "ok",
                     f"power limit {limit:g} W, default {default:g} W", rule, "W",
                     shown)]
    return [make("power.limit", gpu, limit, rule["verdict"],
                 f"capped at {limit:g} W, below its default {default:g} W",
                 rule, "W", shown,
                 fix=f"with root: sudo nvidia-smi -i {gpu['index']} -pl {default:g}",
                 provider=f"{who(gpu)} is capped at {limit:g} W, below its default {default:g} W; "
                          "please restore the default power limit")]


def state_point(gpu: dict[str, Any]) -> Finding:
    """Temperature, clocks and power as read (info: judged under load)."""
    parts = [f"{gpu['temperature']:g} C" if isinstance(gpu.get("temperature"), (int, float))
             else None,
             f"SM clock {gpu['sm_clock']:g} of {gpu['sm_clock_max']:g} MHz"
             if isinstance(gpu.get("sm_clock"), (int, float))
             and isinstance(gpu.get("sm_clock_max"), (int, float))
             else None,
             f"{gpu['power_draw']:g} W" if isinstance(gpu.get("power_draw"), (int, float))
             else None]
    shown = ", ".join(part for part in parts if part) or "no temperature, clock or power reading"
    return make("gpu.state", gpu, shown, "info", f"at idle: {shown}", None)
