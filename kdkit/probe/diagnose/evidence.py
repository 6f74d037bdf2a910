"""What `kdkit diagnose --accept` leaves for the user and the provider: the machine's verdict and
its reasons, ``acceptance.json`` (everything, for a script or a dispute) and ``acceptance.md`` (for
a person), each written atomically into ``--out``, and a short paragraph to paste to the provider.
Standard library only.

The verdict: ``accept``, ``degraded`` (it works below what was paid for), ``refuse`` (it should go
back), or ``incomplete`` when the evidence could not be gathered for a reason that is not the
machine's (the driver sees the cards, torch does not: the environment is at fault, not the card).
Only a complete run whose every point is within its threshold is ``accept``.
"""

from __future__ import annotations

import platform
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.finding import Finding, finding_json, finding_line, finite, place, shown
from kdkit.core.jsonio import atomic_write_json, atomic_write_text
from kdkit.probe.diagnose.points import machine_verdict, reasons

if TYPE_CHECKING:
    from typing import NotRequired, TypedDict

    from kdkit.probe.diagnose.runner import DiagnoseReport
    from kdkit.probe.diagnose.smi_values import SmiFacts

    class MachineFacts(TypedDict):
        """The machine as the evidence names it (machine_facts): host, driver, each card."""

        hostname: str
        kernel: str
        machine: str
        driver: str | None
        cuda: str | None
        gpus: list[dict[str, Any]]  # each card's IDENTITY keys, its readings as the driver gave

    class OrderFacts(TypedDict):
        """The card and count of the order the machine is held to (None: no order)."""

        card: str | None
        count: int | None

    class AcceptExtra(TypedDict):
        """What the acceptance run adds to its report (report_of's ``extra``)."""

        expect: str
        expected: str | None
        driver: SmiFacts
        order: OrderFacts
        commands: list[str]
        # report_of sets it (one given here is replaced); listed here because the report unpacks
        # ``extra``, and mypy's extra checks want every NotRequired key of it in a ** item
        provider_message: NotRequired[str | None]

    class AcceptReport(AcceptExtra):
        """The acceptance report (report_of): what acceptance.json and acceptance.md hold."""

        command: str
        verdict: str
        incomplete: str | None
        started: str
        seconds_under_load: float
        machine: MachineFacts
        reasons: list[Finding]
        points: list[Finding]
        steps: DiagnoseReport
        reproduce: list[str]


JSON_NAME, MD_NAME = "acceptance.json", "acceptance.md"
EXIT = {"accept": 0, "degraded": 1, "refuse": 1, "incomplete": 1}


def verdict(points: list[Finding], incomplete: str | None) -> str:
    """The machine's verdict: ``refuse`` when a point refuses it (a refusal stands whatever else
    failed), else ``incomplete`` when ``incomplete`` says why the evidence is missing, else the
    worst point's (no point at all is no evidence: refuse)."""
    if any(point.verdict == "refuse" for point in points):
        return "refuse"
    return "incomplete" if incomplete else machine_verdict(points)


# of each card, as the driver names it
IDENTITY = ("index", "name", "serial", "uuid", "bus_id", "memory_mib")


def machine_facts(driver: SmiFacts) -> MachineFacts:
    """The machine as the evidence names it: host, kernel, driver, and each card's identity
    (smi.read's facts)."""
    gpus = [{key: gpu.get(key) for key in IDENTITY} for gpu in driver.get("gpus") or []]
    return {"hostname": platform.node(), "kernel": platform.release(),
            "machine": platform.machine(),
            "driver": driver.get("driver_version"),
            "cuda": driver.get("cuda_version"), "gpus": gpus}


def one_line(text: Any) -> str:
    """``text`` as one line of a table or a paragraph: what a driver prints cannot add a line or a
    column."""
    from kdkit.core.safetext import printable

    return printable(" ".join(str(text).split())).replace("|", "\\|")


def _md(text: Any) -> str:
    """``text`` as one line of acceptance.md: controls shown escaped, Markdown syntax shown, not
    interpreted (safetext.md_cell, the helper summary.md uses); what a driver prints cannot add a
    line, a column or a heading."""
    from kdkit.core.safetext import md_cell

    return md_cell(" ".join(str(text).split()), None)


def provider_paragraph(report: AcceptReport) -> str | None:
    """The paragraph a user pastes to the provider, for a degraded or refused machine; None
    otherwise."""
    if report["verdict"] not in ("refuse", "degraded"):
        return None
    gpus = report["machine"]["gpus"]
    cards = f" ({len(gpus)} x {one_line(gpus[0].get('name') or 'GPU')})" if gpus else ""
    lines = [one_line(point.provider or point.why) for point in report["reasons"]]
    asked = any(point.provider for point in report["reasons"])  # their own sentences ask already
    ask = "" if asked else (" Please replace the card or the machine, or refund the rental."
                            if report["verdict"] == "refuse" else
                            " It runs below the specification we paid for: please replace it or "
                            "adjust the price.")
    return (f"On {report['started']} the machine {one_line(report['machine']['hostname'])}{cards} "
            "failed our acceptance test (kdkit diagnose --accept, "
            f"{report['seconds_under_load']:g} s under load): "
            + " ".join(line.rstrip(".") + "." for line in lines) + ask
            + " The full evidence is attached (acceptance.json, acceptance.md).")


def report_of(points: list[Finding], steps: DiagnoseReport, *, started: str, seconds: float,
              incomplete: str | None,
              argv: list[str], extra: AcceptExtra) -> AcceptReport:
    """The acceptance report: verdict, reasons, the machine, every point, today's diagnose steps,
    the measurements' series (``extra``), and the commands that reproduce it."""
    judged = verdict(points, incomplete)
    report: AcceptReport = {
        "command": "diagnose --accept", "verdict": judged, "incomplete": incomplete,
        "started": started,
        "seconds_under_load": seconds, "machine": machine_facts(extra.get("driver") or {}),
        "reasons": reasons(points), "points": points, "steps": steps, **extra,
        "reproduce": ["kdkit " + shlex.join(argv), *extra.get("commands", [])],
    }
    report["provider_message"] = provider_paragraph(report)
    return report


def as_json(report: AcceptReport) -> dict[str, Any]:
    """The report with its points as plain dicts (what acceptance.json and --json hold)."""
    plain: dict[str, Any] = finite({**report,
                                    "reasons": [finding_json(p) for p in report["reasons"]],
                                    "points": [finding_json(p) for p in report["points"]]})
    return plain


def render_text(report: AcceptReport) -> str:
    """The report for a person at the terminal: each section's points, then the verdict and what to
    do."""
    lines = (
        [f"kdkit diagnose --accept ({report['started']}, {report['seconds_under_load']:g} s under "
         "load)", "steps:"])
    lines += [f"  {step['status']:<8} {step['name']}: {step['detail']}"
              for step in report["steps"]["steps"]]
    for section in ("health", "load"):
        chosen = [p for p in report["points"] if p.section == section]
        if chosen:
            lines += [f"{section}:", *(f"  {finding_line(p)}" for p in chosen)]
    why = f": {report['incomplete']}" if report["verdict"] == "incomplete" else ""
    lines.append(f"VERDICT: {report['verdict'].upper()}{why}")
    lines += [f"  because {finding_line(p)}" for p in report["reasons"]]
    fixes = list(dict.fromkeys(p.fix for p in report["reasons"] if p.fix))
    lines += [f"Fix: {fix}" for fix in fixes]
    if report["provider_message"]:
        lines += ["For the provider:", f"  {report['provider_message']}"]
    return "\n".join(lines)


def render_markdown(report: AcceptReport) -> str:
    """acceptance.md: the verdict, the paragraph for the provider, the machine, every point with its
    threshold and source, and the commands that reproduce the test."""
    out = [f"# Acceptance: {report['verdict'].upper()}", "",
           f"Tested {_md(report['started'])} on {_md(report['machine']['hostname'])} "
           f"({_md(report['machine']['machine'])}, kernel {_md(report['machine']['kernel'])}); "
           f"{report['seconds_under_load']:g} s under load.", ""]
    if report["incomplete"]:
        out += [f"Incomplete: {_md(report['incomplete'])}", ""]
    if report["provider_message"]:
        out += ["## For the provider", "", _md(report["provider_message"]), ""]
    machine = report["machine"]
    out += ["## GPUs", "",
            f"Driver {_md(machine['driver'] or 'unknown')}, CUDA "
            f"{_md(machine['cuda'] or 'unknown')}.",
            "", "| index | name | memory (MiB) | serial | uuid | bus |",
            "|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(_md(g[key] if g[key] is not None else "") for key in IDENTITY) + " |"
            for g in report["machine"]["gpus"]] or ["| - | no GPU seen | | | | |"]
    out += ["", "## Diagnose steps", ""]
    out += [f"- {_md(step['status'])}: {_md(step['name'])}: {_md(step['detail'])}"
            for step in report["steps"]["steps"]]
    out += ["", "## Readings", "",
            "| verdict | where | point | reading | threshold | why | source |",
            "|---|---|---|---|---|---|---|"]
    for p in report["points"]:
        cells = [p.verdict, place(p), f"{p.section}: {p.name}", shown(p.reading, p.unit),
                 p.threshold or "", p.why,
                 p.source or ""]
        out.append("| " + " | ".join(_md(c) for c in cells) + " |")
    out += ["", "## Reproduce", "",
            *(f"    {one_line(command)}" for command in report["reproduce"]), ""]
    return "\n".join(out)


def check_folder(folder: Path) -> None:
    """BadInput, before any load, unless ``folder`` can take acceptance.json and acceptance.md: a
    folder (or none yet, under a folder) where a file can really be made (a read-only mount, /proc),
    holding neither name as anything but a regular file (a folder, a link)."""
    import tempfile

    from kdkit.core.errors import BadInput
    from kdkit.core.jsonio import require_replaceable
    from kdkit.core.staging import require_writable

    if folder.exists() and not folder.is_dir():
        raise BadInput(f"{folder}: not a folder; --out with --accept names the folder for "
                       "acceptance.json and acceptance.md")
    require_writable(folder, "folder for --out")
    for name in (JSON_NAME, MD_NAME):
        require_replaceable(folder / name)
    probe = folder if folder.is_dir() else next(p for p in folder.parents if p.is_dir())
    try:
        # closed below
        handle = tempfile.NamedTemporaryFile(dir=probe, prefix=".kdkit-probe-")  # noqa: SIM115
        handle.close()
    except OSError as exc:
        raise BadInput(
            f"{folder}: cannot write there ({exc.strerror or exc}); choose a writable "
            "folder") from None


def write_evidence(folder: Path, report: AcceptReport) -> list[Path]:
    """acceptance.md, then acceptance.json (the record), each written atomically into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    md, data = folder / MD_NAME, folder / JSON_NAME
    atomic_write_text(md, render_markdown(report))
    atomic_write_json(data, as_json(report))
    return [data, md]


def exit_code(report: AcceptReport) -> int:
    return EXIT[report["verdict"]]
