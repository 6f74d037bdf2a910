"""``verify-env``: prove that the live environment of an interpreter is what the lock says.

Standard library only: this is the core of the in-container check and must run
in an image that holds nothing but Python and the locked packages. It reads the
installed distributions' metadata files (``*.dist-info/METADATA``) on the
inspected interpreter's ``sys.path`` instead of running pip, and torch's build
from ``torch/version.py`` as a file, so nothing is imported into the inspected
environment. With ``--python`` the only code run in that interpreter is
:mod:`kdkit.core.envinfo` under ``-I`` (isolated: no PYTHONPATH, no user
site), which reports its ``sys.path`` and marker variables.

Rules, and where they are deliberately stricter than ``pip-sync --dry-run``:

* names are compared PEP 503-normalized; lines whose marker is false for the
  inspected interpreter are not required (and count as unlocked if installed);
* versions are compared with their local labels: a lock pin ``2.8.0`` is NOT
  satisfied by an installed ``2.8.0+cu128`` (pip-sync accepts it, as PEP 440
  does), because the label is the build and the build is what rented hours are
  lost to;
* torch's build itself is checked: the lock's local label (``cu128``, ``rocm6.4``,
  ``cpu``) must agree with ``torch.version.cuda`` / ``torch.version.hip``;
* pip, setuptools, wheel, distribute and kdkit (the installer's tools and the
  checker) are never reported as unlocked; when the lock pins them they are
  checked like any other line;
* distributions present but not locked are warnings; ``--strict`` makes them errors;
* so are a locked distribution installed from a direct URL or a local file (PEP 610
  ``direct_url.json``; pip-sync reinstalls it from the lock's index, uv keeps it) and a
  name with two ``.dist-info`` folders on the path (a stale one; uv reinstalls, pip-sync
  does not look): https://packaging.python.org/en/latest/specifications/direct-url/

The lock may also be a PEP 751 ``pylock.toml`` / ``pylock.<name>.toml``; what it adds
(requires-python, environments, sources checked against ``direct_url.json``) is
:mod:`kdkit.probe.env.pylockcheck`'s, and its warnings (a newer minor lock-version) are printed.
"""

from __future__ import annotations

import os
import sys

from kdkit.core.builds import header_build, parse_label
from kdkit.core.envinfo import decode, describe
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.finding import Finding, finding_json
from kdkit.core.lockfile import Lock, Pin, parse_lock
from kdkit.core.parsers import Option, add_options, command_parser, json_help, quick_parse
from kdkit.core.report import print_result
from kdkit.probe.env.findings import env_finding
from kdkit.probe.env.installed import Installed, read_installed, read_torch_build

# The whole check on fifty distributions takes less time than importing argparse, json, pathlib or
# typing: none is loaded on its way (bench/bench_verify_env.py; its goal is uv's time, in the
# image).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence
    from os import PathLike
    from typing import Any, TypedDict

    class ExcludedPin(TypedDict):
        """A locked candidate that this interpreter's markers exclude."""

        name: str
        version: str
        marker: str | None
        line: int

    class EnvReport(TypedDict):
        """verify-env's report as JSON (Report.as_dict)."""

        ok: bool
        lock: str
        format: str
        warnings: list[str]
        python: str
        strict: bool
        counts: dict[str, int]  # locked, installed, excluded_by_marker, errors, warnings
        findings: Sequence[Mapping[str, Any]]  # kdkit.core.finding.finding_json of each
        excluded_by_marker: list[ExcludedPin]

NEVER_EXTRA = frozenset({"pip", "setuptools", "wheel", "distribute", "kdkit"})

DESCRIPTION = "Compare a lock with the live environment of an interpreter, without pip."
EPILOG = """\
Exit codes: 0 the environment matches the lock; 1 it does not (each finding is
listed); 2 the lock cannot be read, or --python is not an interpreter; 3 a
pylock.toml on Python 3.10 (no tomllib).

The lock: requirements/<backend>.txt (`kdkit lock`), or a PEP 751 pylock.toml /
pylock.<name>.toml (`uv pip compile --format pylock.toml`, `pip lock`).

Findings: missing (locked, not installed), version (installed version differs,
local label included: locked +cu128, installed +cpu), torch-build (torch.version.cuda
or .hip disagrees with the lock's label), direct-url (installed from a URL or a
local file, not an index), duplicate (a stale second .dist-info of one name), extra
(installed, not locked). The last three are errors only with --strict. pip,
setuptools, wheel and kdkit are never 'extra'. A pylock adds requires-python
(not met), environment (none holds), source (installed from another VCS commit,
folder or archive than locked) and direct-source (installed from the locked one:
no index hash proves it; an error only with --strict).

Examples:
  kdkit verify-env --lock requirements/cuda.txt
  python -m kdkit.probe verify-env --lock /app/requirements.lock --strict --json
  kdkit verify-env --lock requirements/cpu.txt --python .venv/bin/python
  kdkit verify-env --lock pylock.cpu.toml --python .venv/bin/python
"""


class Report:
    """Everything verify-env found, ready for text or JSON (filled in by :func:`compare`)."""

    def __init__(self, lock: str, python: str, strict: bool, installed: int) -> None:
        self.lock, self.python, self.strict, self.installed = lock, python, strict, installed
        self.locked = 0
        self.findings: list[Finding] = []
        self.excluded: list[ExcludedPin] = []
        self.format = "requirements"  # or "pylock" (PEP 751)
        self.warnings: list[str] = []  # the lock's own (a newer minor lock-version)

    @property
    def ok(self) -> bool:
        return not any(f.verdict == "fail" for f in self.findings)

    def as_dict(self) -> EnvReport:
        return {
            "ok": self.ok, "lock": self.lock, "format": self.format, "warnings": self.warnings,
            "python": self.python, "strict": self.strict,
            "counts": {"locked": self.locked, "installed": self.installed,
                       "excluded_by_marker": len(self.excluded),
                       "errors": sum(f.verdict == "fail" for f in self.findings),
                       "warnings": sum(f.verdict == "warn" for f in self.findings)},
            "findings": [finding_json(f) for f in self.findings],
            "excluded_by_marker": self.excluded,
        }


# ---------------------------------------------------------------- the inspected interpreter


def _envinfo_source() -> str:
    """The text of kdkit.core.envinfo, which the other interpreter runs. Read through the module's
    own loader, which reads a file on disk and a member of kdkit.pyz alike (importlib.resources, the
    usual way, costs more to import than the whole check)."""
    from kdkit.core import envinfo

    get_data = getattr(envinfo.__loader__, "get_data", None)
    # kdkit.pyz loads envinfo.pyc; envinfo.py is beside it
    source = str(envinfo.__file__).removesuffix("c")
    try:
        if get_data is None or not source.endswith(".py"):
            raise OSError("no loader that reads sources")
        return bytes(get_data(source)).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise Unavailable(f"{source}: kdkit's envinfo module is not readable as source ({exc}); "
                          "reinstall kdkit") from None


def inspect_interpreter(python: str | None) -> dict[str, Any]:
    """sys.path and marker variables of ``python`` (default: this interpreter)."""
    if python is None:
        return describe()
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise BadInput(
            f"--python {python}: not an executable file; give the path of a Python interpreter")
    # no subprocess: this is most of the check's time otherwise
    from kdkit.core.spawn import capture

    try:  # -I: no PYTHONPATH, no user site, no cwd on sys.path; the script is standard library only
        code, stdout, stderr = capture([python, "-I", "-c", _envinfo_source()], timeout=60)
    except OSError as exc:
        raise BadInput(f"--python {python}: cannot run it ({exc.strerror or exc}); give a Python "
                       "interpreter") from None
    info = decode(stdout) if code == 0 else None
    if info is None or not info["sys_path"] or not info["markers"] or "executable" not in info:
        said = (stderr.strip().splitlines() or [f"exit status {code}, no answer on stdout"])[-1]
        raise BadInput(f"--python {python}: not a Python interpreter ({said[:160]})")
    return info


def _describe_build(build: dict[str, str | None]) -> str:
    if build["cuda"]:
        return f"a CUDA {build['cuda']} build"
    if build["hip"]:
        return f"a ROCm build (HIP {build['hip']})"
    return "a CPU-only build"


def _built_for(kind: str, wanted: str, build: dict[str, str | None]) -> bool:
    """Whether torch's version.py says the build a label promises. CUDA: ``cuda`` is the label's
    version (``13.0`` for cu130). ROCm: ``rocm`` where torch writes it (``6.2.4``, ``7.2.0``), else
    HIP's major.minor, since HIP's third field is a build number, not ROCm's patch (HIP 6.2.41133 in
    a ROCm 6.2.0 build log, vllm-project/vllm#10855)."""
    cuda, hip, rocm = build["cuda"], build["hip"], build.get("rocm")
    if kind == "cpu":
        return cuda is None and hip is None
    if kind == "cuda":
        return cuda is not None and (cuda == wanted or cuda.startswith(f"{wanted}."))
    if rocm:
        return rocm == wanted or rocm.startswith(f"{wanted}.")
    return hip is not None and hip.split(".")[:2] == wanted.split(".")[:2]


def torch_build_finding(pin: Pin, have: Installed,
                        build_label: str | None = None) -> Finding | None:
    """The torch build check: the lock's label (``build_label``: the build its header records for
    PyPI's plain torch, ``# kdkit: torch-build = cu130 (...)``) against torch.version.cuda /
    .hip."""
    def finding(message: str, severity: str = "error") -> Finding:
        return env_finding("torch-build", have.name, severity, message, pin.version,
                           have.version, pin.line)

    label = pin.local or build_label
    if label is None:
        return finding(f"torch is locked as {pin.version} without a local label, so any build "
                       "matches; relock with `kdkit lock` to pin torch==X+label", "warning")
    expected = parse_label(label)
    if expected is None:
        return finding(f"unknown torch label +{label}; the build cannot be checked", "warning")
    build = read_torch_build(have.location)
    if build is None:
        where = os.path.join(have.location, "torch", "version.py")
        return finding(f"cannot read {where}; torch's build is unknown")
    kind, wanted = expected
    if _built_for(kind, wanted or "", build):
        return None
    promised = ("a CPU-only build" if kind == "cpu"
                else f"a {kind.upper() if kind == 'cuda' else 'ROCm'} "
                f"{wanted} build")
    locked = (f"+{label}" if pin.local
              else f"{pin.version} from PyPI, the +{label} build (lock header torch-build),")
    return finding(f"locked {locked} ({promised}) but the installed torch is "
                   f"{_describe_build(build)} (torch.version.cuda={build['cuda']!r}, "
                   f"hip={build['hip']!r}); reinstall from the lock")


# ---------------------------------------------------------------- the comparison


def same_version(locked: str, installed: str) -> bool:
    """PEP 440 equality with the local label required to match exactly (1.0 == 1.0.0)."""
    if locked == installed:
        return True  # the common case, without parsing
    from kdkit.core.versions import InvalidVersion, Version

    try:
        return Version.parse(locked) == Version.parse(installed)
    except InvalidVersion:
        return locked.strip().lower() == installed.strip().lower()


def _check_pin(pin: Pin, have: Installed | None, severity: str,
               build_label: str | None = None) -> list[Finding]:
    if have is None:
        locked = f"{pin.name}=={pin.version}" if pin.version else f"{pin.name} from {pin.source}"
        message = f"{locked} is locked (line {pin.line}) but not installed"
        return [
            env_finding("missing", pin.name, "error", message, pin.version or str(pin.source),
                        None, pin.line)]
    findings = []
    if pin.version and not same_version(pin.version, have.version):
        findings.append(env_finding("version", pin.name, "error",
                                    f"{pin.name}: locked {pin.version} "
                                    f"(line {pin.line}), installed {have.version}", pin.version,
                                    have.version,
                                    pin.line))
    elif have.direct_url and pin.source is None:  # a locked source is pylockcheck's
        findings.append(env_finding("direct-url", pin.name, severity,
                                    f"{have.name} {have.version} was installed "
                                    f"from {have.direct_url}, not from the lock's index; reinstall "
                                    "it from the lock",
                                    pin.version, have.version, pin.line))
    if pin.key == "torch" and (torch := torch_build_finding(pin, have, build_label)) is not None:
        findings.append(torch)
    return findings


def _stale_findings(installed: dict[str, Installed], severity: str) -> list[Finding]:
    return [env_finding("duplicate", have.name, severity,
                        f"{have.name} {have.version} in {have.location} has "
                        f"another metadata folder {have.stale[0]}; remove the stale one or "
                        f"reinstall {have.name}",
                        None, have.version, None) for _key,
            have in sorted(installed.items()) if have.stale]


def compare(lock: Lock, installed: dict[str, Installed], markers: dict[str, str], *,
            strict: bool = False, python: str = "") -> Report:
    """Every finding of ``lock`` against ``installed`` for the interpreter described by
    ``markers``."""
    report = Report(str(lock.path), python, strict, len(installed))
    report.format, report.warnings = lock.format, list(lock.warnings)
    severity = "error" if strict else "warning"
    if lock.format == "pylock":
        from kdkit.probe.env import pylockcheck

        report.findings += pylockcheck.lock_findings(lock, markers)
    required: set[str] = set()
    for key, candidates in lock.candidates.items():
        pin = lock.pin_for(key, markers)
        report.excluded += [{"name": other.name, "version": other.version, "marker": other.marker,
                             "line": other.line} for other in candidates if other is not pin]
        if pin is not None:
            required.add(key)
            have = installed.get(key)
            report.findings += _check_pin(pin, have, severity, header_build(lock.header))
            if lock.format == "pylock":
                report.findings += pylockcheck.pin_findings(pin, have, markers, severity,
                                                            os.path.dirname(
                                                                os.path.abspath(lock.path)))
    report.locked = len(required)
    report.findings += _stale_findings(installed, severity)
    for key, have in sorted(installed.items()):
        if key not in required and key not in NEVER_EXTRA:
            report.findings.append(env_finding("extra", have.name, severity,
                                               f"{have.name} {have.version} is "
                                               "installed but not locked", None,
                                               have.version, None))
    return report


def verify(lock_path: str | PathLike[str], python: str | None, *, strict: bool = False) -> Report:
    """Parse the lock, inspect the interpreter, compare. The library entry point."""
    lock = parse_lock(lock_path)
    info = inspect_interpreter(python)
    installed = read_installed([str(p) for p in info["sys_path"]])
    return compare(lock, installed, info["markers"], strict=strict,
                   python=str(info.get("executable", "")))


# ---------------------------------------------------------------- command line


def render_text(report: Report) -> str:
    shown = f"{report.lock} (PEP 751)" if report.format == "pylock" else report.lock
    lines = [f"Lock:   {shown}", f"Python: {report.python}"]
    lines += [f"  {'lock (warning)':<18} {warning}" for warning in report.warnings]
    for f in report.findings:
        tag = f.name.upper() if f.verdict == "fail" else f"{f.name} (warning)"
        lines.append(f"  {tag:<18} {f.why}")
    errors = sum(f.verdict == "fail" for f in report.findings)
    warnings = len(report.findings) - errors
    summary = (f"{report.locked} locked, {report.installed} installed, "
               f"{len(report.excluded)} excluded by markers")
    verdict = "MATCH" if report.ok else "MISMATCH"
    lines.append(f"{verdict}: {errors} error(s), {warnings} warning(s) ({summary})")
    return "\n".join(lines)


OPTIONS = (
    Option("--lock", "lock",
           "the lock: requirements/<backend>.txt written by `kdkit lock`, or a PEP 751 "
           "pylock.toml / pylock.<name>.toml (read by its name)", metavar="FILE", required=True),
    Option("--python", "python",
           "interpreter whose environment to inspect (default: this one); it runs only "
           "a standard-library script under -I, nothing is imported into it", metavar="PATH"),
    Option("--strict", "strict", "distributions installed but not locked are errors, not warnings"),
    Option("--json", "as_json", json_help("one JSON document with every finding and its fields")),
)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("verify-env", DESCRIPTION, EPILOG)
    add_options(parser, OPTIONS)
    return parser


def main(argv: list[str]) -> int:
    args = quick_parse(argv, OPTIONS) or build_parser().parse_args(argv)
    report = verify(args.lock, args.python, strict=args.strict)
    if args.as_json:  # the text report lists them itself; with --json, a person still sees them
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    print_result(args.as_json, report.as_dict(), lambda: render_text(report))
    return 0 if report.ok else 1
