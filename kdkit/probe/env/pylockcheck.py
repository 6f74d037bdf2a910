"""What a PEP 751 lock (``pylock.toml``) adds to verify-env. Standard library only.

The specification's installation steps
(https://packaging.python.org/en/latest/specifications/pylock-toml/#installation) say what an
installer MUST refuse; verify-env reports the same as error findings of the environment:

* ``requires-python``: the lock's ``requires-python`` not met by the inspected interpreter, or the
  ``requires-python`` of a package whose marker holds;
* ``environment``: the lock lists ``environments`` and none of them holds for the interpreter.

A package locked from a ``vcs``, ``directory`` or ``archive`` source is installed from a direct URL,
so the installed distribution's ``direct_url.json`` (PEP 610) must name the same place and, for a
VCS, the same commit: ``source`` (an error) when it does not, or when there is none (installed from
an index). When it does, ``direct-source`` (a warning; an error with ``--strict``) says so, because
no index release and hash prove that code, only where it came from. (A package locked from index
files but installed from a direct URL stays ``direct-url``, as for a requirements lock.)
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.lockfile import Lock, Pin
from kdkit.core.markers import InvalidMarker, evaluate
from kdkit.core.pylock import Source
from kdkit.core.versions import InvalidVersion, satisfies
from kdkit.probe.env.findings import env_finding
from kdkit.probe.env.installed import Installed

# PEP 610's info keys by the names PEP 751 gives the same sources
# (https://packaging.python.org/en/latest/specifications/direct-url-data-structure/).
_KINDS = {"vcs_info": "vcs", "dir_info": "directory", "archive_info": "archive"}


class DirectURL(NamedTuple):
    """What a direct_url.json says: ``kind`` is vcs, directory or archive; "unknown" when it names
    none of them, "unreadable" when it could not be read (then ``url`` is its path)."""

    url: str
    kind: str
    vcs: str | None = None
    commit: str | None = None
    subdirectory: str | None = None
    hashes: tuple[str, ...] = ()  # archive_info's, as "algorithm:hex"


def _archive_hashes(info: dict[str, Any]) -> tuple[str, ...]:
    hashes = info.get("hashes")
    found = [f"{k}:{v}".lower() for k, v in hashes.items()] if isinstance(hashes, dict) else []
    legacy = info.get("hash")  # the older single "sha256=<hex>"
    if isinstance(legacy, str) and "=" in legacy:
        found.append(legacy.replace("=", ":", 1).lower())
    return tuple(found)


def direct_url(have: Installed) -> DirectURL | None:
    """The installed distribution's direct_url.json, None when it has none (an index install)."""
    if have.direct is None or have.direct_url is None:
        return None
    if not have.direct:
        return DirectURL(have.direct_url, "unreadable")
    key = next((key for key in _KINDS if isinstance(have.direct.get(key), dict)), None)
    info: dict[str, Any] = have.direct[key] if key else {}
    subdirectory = have.direct.get("subdirectory")
    return DirectURL(have.direct_url, _KINDS[key] if key else "unknown", info.get("vcs"),
                     info.get("commit_id"),
                     subdirectory if isinstance(subdirectory, str) else None,
                     _archive_hashes(info) if key == "archive_info" else ())


def _python(markers: dict[str, str]) -> str:
    return markers.get("python_full_version") or markers.get("python_version", "")


def _meets(markers: dict[str, str], specifiers: str) -> bool:
    """Whether the interpreter's version meets ``specifiers``; a full version PEP 440 cannot read (a
    ``3.14.0+`` of a source build) is tried as its X.Y."""
    try:
        return satisfies(_python(markers), specifiers)
    except InvalidVersion:
        return satisfies(markers.get("python_version", ""), specifiers)


def _platform(markers: dict[str, str]) -> str:
    return (f"{markers.get('sys_platform', '?')} {markers.get('platform_machine', '?')}, "
            f"{markers.get('platform_python_implementation', 'Python')} {_python(markers)}")


def _environment_holds(lock: Lock, marker: str, markers: dict[str, str]) -> bool:
    """Whether one of the lock's ``environments`` holds; BadInput when it cannot be evaluated
    here."""
    try:
        return evaluate(marker, markers)
    except InvalidMarker as exc:
        raise BadInput(f"{lock.path}: the environment {marker!r} cannot be evaluated for this "
                       f"interpreter ({exc}); fix it or relock") from None


def lock_findings(lock: Lock, markers: dict[str, str]) -> list[Finding]:
    """The lock-level checks: its requires-python and its environments."""
    findings = []
    python = _python(markers)
    if lock.requires_python and not _meets(markers, lock.requires_python):
        findings.append(env_finding("requires-python", "python", "error",
                                    f"the lock requires Python "
                                    f"{lock.requires_python} and this interpreter is {python}; use "
                                    "a Python that meets it, or relock on this one",
                                    lock.requires_python, python, None))
    if lock.environments \
            and not any(_environment_holds(lock, marker, markers) for marker in lock.environments):
        here, listed = _platform(markers), " | ".join(lock.environments)
        findings.append(env_finding("environment", "python", "error",
                                    f"this interpreter ({here}) is in none of the "
                                    f"lock's environments ({listed}); use the lock made for this "
                                    "platform, or relock with it among the environments",
                                    listed, here, None))
    return findings


def _place(where: str, base: str) -> str:
    """A comparable form of a URL or path: a local file's real path (a ``file:`` URL, or a path
    relative to the lock's folder ``base``), else the URL without a ``git+``-style prefix or a
    trailing slash."""
    if where.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        where = unquote(urlsplit(where).path)
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", where):
        return re.sub(r"^(git|hg|svn|bzr)\+", "", where).rstrip("/")
    return os.path.realpath(os.path.join(base, where))


def _other_hash(locked: list[str], installed: tuple[str, ...]) -> str | None:
    """An archive hash of direct_url.json that differs from the lock's of the same algorithm."""
    mine = dict(value.split(":", 1) for value in locked)
    return next(
        (value for value in installed if value.split(":", 1)[0] in mine and value not in locked),
        None)


def _difference(source: Source, hashes: list[str],
                direct: DirectURL | None, base: str) -> str | None:
    """What the installed direct_url.json says that the lock's source (and its archive ``hashes``)
    does not; None when they agree."""
    if direct is None:
        return "it was installed from an index (it has no direct_url.json)"
    if direct.kind == "unreadable":
        return f"its {direct.url} cannot be read"
    if direct.kind != source.kind:
        return f"it was installed from {direct.url} (a {direct.kind} source)"
    places = {_place(value, base) for value in (source.url, source.path) if value}
    if _place(direct.url, base) not in places:
        return f"it was installed from {direct.url}"
    if source.kind == "vcs" and (direct.vcs, direct.commit) != (source.vcs, source.commit):
        return f"the installed {direct.vcs} commit is {direct.commit}"
    if source.subdirectory and direct.subdirectory != source.subdirectory:
        return f"it was installed from subdirectory {direct.subdirectory!r}"
    if source.kind == "archive" and (other := _other_hash(hashes, direct.hashes)):
        return f"the installed archive's hash is {other}"
    return None


def source_finding(pin: Pin, source: Source, have: Installed, severity: str, base: str) -> Finding:
    """``source`` when the installed distribution did not come from the locked source, else
    ``direct-source``."""
    why = _difference(source, pin.hashes, direct_url(have), base)
    installed = have.direct_url or "an index"
    if why is not None:
        return env_finding("source", pin.name, "error",
                           f"{pin.name}: locked from {source} (line {pin.line}) but {why}; "
                           "reinstall it from the lock",
                           str(source), installed, pin.line)
    return env_finding("direct-source", pin.name, severity,
                       f"{have.name} {have.version} is installed from {source}, as locked (line "
                       f"{pin.line}); no index release and hash prove that code, only where it "
                       "came from", str(source), installed, pin.line)


def pin_findings(pin: Pin, have: Installed | None, markers: dict[str, str], severity: str,
                 base: str) -> list[Finding]:
    """A package's own requires-python, and where it was installed from when the lock names a
    source."""
    findings = []
    if pin.requires_python and not _meets(markers, pin.requires_python):
        findings.append(env_finding("requires-python", pin.name, "error",
                                    f"{pin.name} (line {pin.line}) requires Python "
                                    f"{pin.requires_python} and this interpreter is "
                                    f"{_python(markers)}; use a Python that meets it, or relock on "
                                    "this one", pin.requires_python, _python(markers), pin.line))
    if pin.source is not None and have is not None:
        findings.append(source_finding(pin, pin.source, have, severity, base))
    return findings
