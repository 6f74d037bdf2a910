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
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from kdkit.core.builds import parse_label
from kdkit.core.envinfo import describe
from kdkit.core.errors import BadInput
from kdkit.core.lockfile import Lock, Pin, normalize_name, parse_lock
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.report import print_result
from kdkit.core.versions import InvalidVersion, Version

NEVER_EXTRA = frozenset({"pip", "setuptools", "wheel", "distribute", "kdkit"})

DESCRIPTION = "Compare a lock with the live environment of an interpreter, without pip."
EPILOG = """\
Exit codes: 0 the environment matches the lock; 1 it does not (each finding is
listed); 2 the lock cannot be read, or --python is not an interpreter.

Findings: missing (locked, not installed), version (installed version differs,
local label included: locked +cu128, installed +cpu), torch-build (torch.version.cuda
or .hip disagrees with the lock's label), direct-url (installed from a URL or a
local file, not an index), duplicate (a stale second .dist-info of one name), extra
(installed, not locked). The last three are errors only with --strict. pip,
setuptools, wheel and kdkit are never 'extra'.

Examples:
  kdkit verify-env --lock requirements/cuda.txt
  python -m kdkit.probe verify-env --lock /app/requirements.lock --strict --json
  kdkit verify-env --lock requirements/cpu.txt --python .venv/bin/python
"""


class Installed(NamedTuple):
    """One installed distribution, as its metadata file says."""

    name: str
    version: str
    location: Path
    direct_url: str | None = None  # PEP 610: installed from this URL, not from an index
    stale: tuple[str, ...] = ()  # other metadata folders of the same name on the path
    metadata: str = ""  # its own metadata folder (or PKG-INFO file)


class Finding(NamedTuple):
    """One difference between the lock and the environment."""

    kind: str  # missing | version | torch-build | direct-url | duplicate | extra
    name: str
    severity: str  # error | warning
    message: str
    locked: str | None = None
    installed: str | None = None
    line: int | None = None


class Report:
    """Everything verify-env found, ready for text or JSON (filled in by :func:`compare`)."""

    def __init__(self, lock: str, python: str, strict: bool, installed: int) -> None:
        self.lock, self.python, self.strict, self.installed = lock, python, strict, installed
        self.locked = 0
        self.findings: list[Finding] = []
        self.excluded: list[dict[str, Any]] = []

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "lock": self.lock, "python": self.python, "strict": self.strict,
            "counts": {"locked": self.locked, "installed": self.installed,
                       "excluded_by_marker": len(self.excluded),
                       "errors": sum(f.severity == "error" for f in self.findings),
                       "warnings": sum(f.severity == "warning" for f in self.findings)},
            "findings": [f._asdict() for f in self.findings],
            "excluded_by_marker": self.excluded,
        }


# ---------------------------------------------------------------- the inspected interpreter


def _envinfo_source() -> str:
    """The text of _envinfo.py, fed to the other interpreter on stdin ("-") to keep argv short."""
    path = Path(__file__).with_name("_envinfo.py")
    if path.is_file():
        return path.read_text(encoding="utf-8")
    # Inside a zipapp there is no file; importlib.resources (slow to import) reads it from the archive.
    from importlib import resources

    return resources.files("kdkit.core").joinpath("envinfo.py").read_text(encoding="utf-8")


def inspect_interpreter(python: str | None) -> dict[str, Any]:
    """sys.path and marker variables of ``python`` (default: this interpreter)."""
    if python is None:
        return describe()
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BadInput(f"--python {python}: not an executable file; give the path of a Python interpreter")
    from kdkit.core import proc  # subprocess is only needed to inspect another interpreter

    script = _envinfo_source()
    try:
        done = proc.run([str(path), "-I", "-"], input_text=script, timeout=60)
    except OSError as exc:
        raise BadInput(f"--python {python}: cannot run it ({exc}); give a Python interpreter") from None
    try:
        info = json.loads(done.stdout) if done.ok else None
    except json.JSONDecodeError:
        info = None
    if not isinstance(info, dict) or not isinstance(info.get("sys_path"), list):
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}, no JSON on stdout"])[-1]
        raise BadInput(f"--python {python}: not a Python interpreter ({said[:160]})")
    return info


# ---------------------------------------------------------------- installed distributions


def _metadata_fields(path: Path) -> tuple[str, str] | None:
    """Name and Version from the header of a METADATA / PKG-INFO file."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return _name_and_version(handle)
    except OSError:
        return None


def _name_and_version(lines: Iterable[str]) -> tuple[str, str] | None:
    """The Name and Version fields of a metadata header, read up to its first blank line."""
    name = version = None
    for line in lines:
        if not line.strip():
            break  # the header ends at the first blank line
        if line.startswith("Name:"):
            name = line[5:].strip()
        elif line.startswith("Version:"):
            version = line[8:].strip()
        if name and version:
            return name, version
    return None


def _metadata_file(entry: os.DirEntry[str]) -> Path | None:
    if entry.name.endswith(".dist-info"):
        return Path(entry.path, "METADATA")
    if entry.name.endswith(".egg-info"):
        return Path(entry.path, "PKG-INFO") if entry.is_dir() else Path(entry.path)
    return None


def _direct_url(meta: Path) -> str | None:
    """The ``url`` of a .dist-info's PEP 610 direct_url.json, when it has one."""
    path = meta.with_name("direct_url.json")
    if meta.name != "METADATA" or not path.is_file():
        return None
    try:
        url = json.loads(path.read_text(encoding="utf-8")).get("url")
    except (OSError, ValueError, AttributeError):
        return str(path)
    return url if isinstance(url, str) else str(path)


def _second(first: Installed, other: Installed) -> Installed:
    """Two metadata folders of one name: the first on sys.path wins; in one folder, whose order is the
    file system's, the newer version does (the older is what an interrupted upgrade left)."""
    try:
        swap = other.location == first.location and Version.parse(other.version) > Version.parse(first.version)
    except InvalidVersion:
        swap = False
    if swap:
        return other._replace(stale=(*first.stale, first.metadata))
    return first._replace(stale=(*first.stale, other.metadata))


def read_installed(sys_path: list[str]) -> dict[str, Installed]:
    """Installed distributions by normalized name; the first on sys.path wins, as at import time, and
    the other metadata folders of that name are kept as ``stale``."""
    found: dict[str, Installed] = {}
    for folder in dict.fromkeys(os.path.abspath(entry) for entry in sys_path):  # each folder once
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # zip files, missing folders
        for entry in sorted(entries, key=lambda e: e.name):
            meta = _metadata_file(entry)
            fields = _metadata_fields(meta) if meta else None
            if not fields or meta is None:
                continue
            key = normalize_name(fields[0])
            have = Installed(fields[0], fields[1], Path(folder), _direct_url(meta), (), entry.path)
            found[key] = _second(found[key], have) if key in found else have
    return found


# ---------------------------------------------------------------- torch's build


def read_torch_build(location: Path) -> dict[str, str | None] | None:
    """``cuda``/``hip``/``__version__`` from torch/version.py, parsed, not imported."""
    import ast

    try:
        tree = ast.parse((location / "torch" / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    values: dict[str, str | None] = {"cuda": None, "hip": None, "__version__": None}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and target.id in values and isinstance(value, ast.Constant):
            values[target.id] = value.value if isinstance(value.value, str) else None
    return values


def _describe_build(build: dict[str, str | None]) -> str:
    if build["cuda"]:
        return f"a CUDA {build['cuda']} build"
    if build["hip"]:
        return f"a ROCm build (HIP {build['hip']})"
    return "a CPU-only build"


def torch_build_finding(pin: Pin, have: Installed) -> Finding | None:
    """The torch build check: the lock's label against torch.version.cuda / .hip."""
    def finding(message: str, severity: str = "error") -> Finding:
        return Finding("torch-build", have.name, severity, message, pin.version, have.version, pin.line)

    if pin.local is None:
        return finding(f"torch is locked as {pin.version} without a local label, so any build matches; "
                       "relock with `kdkit lock` to pin torch==X+label", "warning")
    expected = parse_label(pin.local)
    if expected is None:
        return finding(f"unknown torch label +{pin.local}; the build cannot be checked", "warning")
    build = read_torch_build(have.location)
    if build is None:
        return finding(f"cannot read {have.location / 'torch' / 'version.py'}; torch's build is unknown")
    kind, wanted = expected
    actual = {"cuda": build["cuda"], "rocm": build["hip"], "cpu": None}[kind]
    matches = (build["cuda"] is None and build["hip"] is None) if kind == "cpu" else (
        actual is not None and (actual == wanted or actual.startswith(f"{wanted}.")))
    if matches:
        return None
    promised = "a CPU-only build" if kind == "cpu" else f"a {kind.upper() if kind == 'cuda' else 'ROCm'} " \
        f"{wanted} build"
    return finding(f"locked +{pin.local} ({promised}) but the installed torch is {_describe_build(build)} "
                   f"(torch.version.cuda={build['cuda']!r}, hip={build['hip']!r}); reinstall from the lock")


# ---------------------------------------------------------------- the comparison


def same_version(locked: str, installed: str) -> bool:
    """PEP 440 equality with the local label required to match exactly (1.0 == 1.0.0)."""
    if locked == installed:
        return True  # the common case, without parsing
    try:
        return Version.parse(locked) == Version.parse(installed)
    except InvalidVersion:
        return locked.strip().lower() == installed.strip().lower()


def _check_pin(pin: Pin, have: Installed | None, severity: str) -> list[Finding]:
    if have is None:
        message = f"{pin.name}=={pin.version} is locked (line {pin.line}) but not installed"
        return [Finding("missing", pin.name, "error", message, pin.version, None, pin.line)]
    findings = []
    if not same_version(pin.version, have.version):
        findings.append(Finding("version", pin.name, "error", f"{pin.name}: locked {pin.version} "
                                f"(line {pin.line}), installed {have.version}", pin.version, have.version,
                                pin.line))
    elif have.direct_url:
        findings.append(Finding("direct-url", pin.name, severity, f"{have.name} {have.version} was installed "
                                f"from {have.direct_url}, not from the lock's index; reinstall it from the lock",
                                pin.version, have.version, pin.line))
    if pin.key == "torch" and (torch := torch_build_finding(pin, have)) is not None:
        findings.append(torch)
    return findings


def _stale_findings(installed: dict[str, Installed], severity: str) -> list[Finding]:
    return [Finding("duplicate", have.name, severity, f"{have.name} {have.version} in {have.location} has "
                    f"another metadata folder {have.stale[0]}; remove the stale one or reinstall {have.name}",
                    None, have.version, None) for _key, have in sorted(installed.items()) if have.stale]


def compare(lock: Lock, installed: dict[str, Installed], markers: dict[str, str], *,
            strict: bool = False, python: str = "") -> Report:
    """Every finding of ``lock`` against ``installed`` for the interpreter described by ``markers``."""
    report = Report(str(lock.path), python, strict, len(installed))
    severity = "error" if strict else "warning"
    required: set[str] = set()
    for key, candidates in lock.candidates.items():
        pin = lock.pin_for(key, markers)
        report.excluded += [{"name": other.name, "version": other.version, "marker": other.marker,
                             "line": other.line} for other in candidates if other is not pin]
        if pin is not None:
            required.add(key)
            report.findings += _check_pin(pin, installed.get(key), severity)
    report.locked = len(required)
    report.findings += _stale_findings(installed, severity)
    for key, have in sorted(installed.items()):
        if key not in required and key not in NEVER_EXTRA:
            report.findings.append(Finding("extra", have.name, severity, f"{have.name} {have.version} is "
                                           "installed but not locked", None, have.version, None))
    return report


def verify(lock_path: Path, python: str | None, *, strict: bool = False) -> Report:
    """Parse the lock, inspect the interpreter, compare. The library entry point."""
    lock = parse_lock(lock_path)
    info = inspect_interpreter(python)
    installed = read_installed([str(p) for p in info["sys_path"]])
    return compare(lock, installed, info["markers"], strict=strict, python=str(info.get("executable", "")))


# ---------------------------------------------------------------- command line


def render_text(report: Report) -> str:
    lines = [f"Lock:   {report.lock}", f"Python: {report.python}"]
    for f in report.findings:
        tag = f.kind.upper() if f.severity == "error" else f"{f.kind} (warning)"
        lines.append(f"  {tag:<18} {f.message}")
    errors = sum(f.severity == "error" for f in report.findings)
    warnings = len(report.findings) - errors
    summary = (f"{report.locked} locked, {report.installed} installed, "
               f"{len(report.excluded)} excluded by markers")
    verdict = "MATCH" if report.ok else "MISMATCH"
    lines.append(f"{verdict}: {errors} error(s), {warnings} warning(s) ({summary})")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("verify-env", DESCRIPTION, EPILOG)
    parser.add_argument("--lock", required=True, type=Path, metavar="FILE",
                        help="hashed lock written by `kdkit lock` (requirements/<backend>.txt)")
    parser.add_argument("--python", metavar="PATH", default=None,
                        help="interpreter whose environment to inspect (default: this one); it runs only "
                             "a standard-library script under -I, nothing is imported into it")
    parser.add_argument("--strict", action="store_true",
                        help="distributions installed but not locked are errors, not warnings")
    add_json(parser, "one JSON document with every finding and its fields", dest="as_json")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    report = verify(args.lock, args.python, strict=args.strict)
    print_result(args.as_json, report.as_dict(), lambda: render_text(report))
    return 0 if report.ok else 1
