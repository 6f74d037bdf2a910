"""The backend's PEP 751 lock, ``requirements/pylock.<backend>.toml``, written by `kdkit lock` from
the same resolution as ``requirements/<backend>.txt``.

kdkit writes no TOML of its own: uv writes the file (``uv pip compile --format pylock.toml``,
https://docs.astral.sh/uv/reference/cli/#uv-pip-compile). Its input is the requirements lock's pins,
each exact, with ``--no-deps``: uv resolves nothing anew, it names the files of those versions. It
is asked for the image's platform and Python (Linux, the lock's CPU, the glibc of torch's own Linux
wheels, ``manylinux_2_28``: ``torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl``; kdkit.json's
``python``) and given only the http(s) indexes the requirements lock names, never a find-links
folder or a ``file://`` index: every URL in the pylock is one the rented machine can reach.

Before anything is written, kdkit reads uv's file back with its own reader and holds it to the
requirements lock: the same names and versions, each file's sha256 among its pin's hashes, every URL
http(s). On top go kdkit's header lines as TOML comments, the requirements lock's own and
``requirements-lock = <path> sha256:<hex>``, the requirements lock it was made from
(:mod:`kdkit.lock.staleness` judges a pylock by them).

The requirements lock is complete on its own. When no pylock can be made from it (uv missing under
``--resolver pip-tools``, torch taken from ``--torch-find-links``, a Python without tomllib, uv's
refusal), `kdkit lock` writes the requirements lock alone and says why (:class:`NoPylock`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.config.project import Backend, Project
from kdkit.core import proc
from kdkit.core.errors import BadInput, KdkitError, Unavailable
from kdkit.core.lockfile import HEADER_PREFIX, Lock, parse_lock_text, parse_pylock_text
from kdkit.core.staging import scratch_beside
from kdkit.lock.inputs import relative
from kdkit.lock.provenance import is_remote
from kdkit.lock.staleness import REQUIREMENTS_LOCK

if TYPE_CHECKING:
    from kdkit.lock.resolvers import Job, Resolver

GLIBC = "manylinux_2_28"  # the tag of torch's own Linux wheels (see the module's docstring)


class NoPylock(KdkitError):
    """No pylock could be made from this requirements lock; the message says why and what to do."""


def _pins_only(lock: Lock) -> str:
    """uv's input: each pin of the lock with its hashes, no index line (uv gets the indexes as
    options)."""
    lines = []
    for pin in lock.every_pin():
        marker = f" ; {pin.marker}" if pin.marker else ""
        lines.append(f"{pin.name}=={pin.version}{marker} "
                     + " ".join(f"--hash={h}" for h in pin.hashes))
    return "\n".join(lines) + "\n"


def _index_arguments(lock: Lock) -> list[str]:
    """The lock's http(s) indexes as uv options, in the lock's order (the torch index first); the
    last is uv's default index, so PyPI is not added when the lock does not name it."""
    urls = [url for option,
            url in lock.options if option in ("--index-url", "--extra-index-url")
            and is_remote(url)]
    if not urls:
        raise NoPylock(
            f"{lock.name} names no http(s) index, so no file of it has a URL another machine can "
            "reach")
    return [word for number, url in enumerate(urls, start=1)
            for word in ("--default-index" if number == len(urls) else "--index", url)]


def run_uv(uv: Path, lock: Lock, python: str, machine: str, env: dict[str, str], cert: str | None,
           pylock: Path) -> str:
    """uv's pylock text for ``lock``'s pins, for Linux on ``machine`` and CPython ``python``
    (X.Y)."""
    from kdkit.lock.uvcompile import UV_FLAGS

    # the pylock's staging: a killed lock leaves it to the next (its resolver)
    with scratch_beside(pylock) as tmp:
        source, output = tmp / "pins.txt", tmp / "pylock.out.toml"
        source.write_text(_pins_only(lock), encoding="utf-8")
        argv = [str(uv), "pip", "compile", *UV_FLAGS, "--no-deps", "--format", "pylock.toml",
                "--python-version", python, "--python-platform", f"{machine}-{GLIBC}",
                *_index_arguments(lock),
                *(["--cert", cert] if cert else ["--system-certs"]), "--output-file", str(output),
                str(source)]
        done = proc.run(argv, env=env, timeout=1800)
        if not done.ok:
            raise NoPylock(f"uv could not name the files of {lock.name}: {done.first_error_line()}")
        return output.read_text(encoding="utf-8")


def check_against(text: str, lock: Lock, where: Path) -> None:
    """NoPylock unless uv's pylock ``text`` names exactly ``lock``'s pins, each file with one of its
    pin's hashes and an http(s) URL."""
    if sys.version_info < (3, 11):
        raise NoPylock("reading a pylock back needs Python 3.11 or newer (tomllib)")
    import tomllib

    written = parse_pylock_text(text, where)
    wanted = {(pin.key, pin.version) for pin in lock.every_pin()}
    got = {(pin.key, pin.version) for pin in written.every_pin()}
    if got != wanted:
        differ = sorted(got ^ wanted)[:3]
        raise NoPylock(
            f"uv's pylock names other pins than {lock.name} "
            f"({', '.join(f'{k}=={v}' for k, v in differ)})")
    hashes = {(pin.key, pin.version): set(pin.hashes) for pin in lock.every_pin()}
    for pin in written.every_pin():
        if not set(pin.hashes) <= hashes[(pin.key, pin.version)]:
            raise NoPylock(
                f"uv's pylock gives {pin.name}=={pin.version} a file whose sha256 {lock.name} does "
                "not list")
    for package in tomllib.loads(text)["packages"]:
        files = [package.get("sdist") or {}, package.get("archive") or {},
                 *package.get("wheels", [])]
        where_from = [f.get("url") or f.get("path") or "" for f in files if f]
        if not all(is_remote(url) for url in where_from):
            raise NoPylock(
                f"uv's pylock names a file of {package.get('name')} by a path of this machine")


def header(lock_header: str, project: Project, backend: Backend, lock_text: str) -> str:
    """kdkit's lines on top of the pylock: the requirements lock's own header, then the lock it was
    made from."""
    digest = hashlib.sha256(lock_text.encode("utf-8")).hexdigest()
    rel = relative(project.root, backend.lock)
    fields = [line for line in lock_header.splitlines() if line.startswith(HEADER_PREFIX)]
    return "\n".join([
        f"# PEP 751 lock written by `kdkit lock` from {rel}: the same resolution, the files of the "
        "image's",
        "# platform as uv names them; do not edit. Install with pip 26.1 or later:",
        f"#   pip install -r {relative_pylock(project, backend)}",
        *fields,
        f"{HEADER_PREFIX} {REQUIREMENTS_LOCK} = {rel} sha256:{digest}",
        "",
    ]) + "\n"


def make_pylock(uv: Path | None, lock: Lock, project: Project, backend: Backend, lock_header: str,
                lock_text: str,
                env: dict[str, str], cert: str | None, machine: str) -> str:
    """The pylock's whole text (kdkit's header and uv's file), checked against ``lock`` (the
    requirements lock as written, ``lock_text``, its index lines included); NoPylock saying why
    there is none."""
    if uv is None:
        from kdkit.lock.uvcompile import GET_UV

        raise NoPylock(f"uv, which writes it, was not found ({GET_UV})")
    try:
        text = run_uv(uv, lock, project.python, machine, env, cert, backend.pylock)
        check_against(text, lock, backend.pylock)
    except (BadInput, Unavailable) as exc:
        raise NoPylock(f"uv's pylock does not read back: {exc}") from None
    return header(lock_header, project, backend, lock_text) + text


def relative_pylock(project: Project, backend: Backend) -> str:
    return relative(project.root, backend.pylock)


def stale_note(project: Project, backend: Backend, lock_text: str) -> str:
    """What a pylock left from an earlier lock now is, when this one could make none: stale, unless
    it was made from the very lock now written (the same text)."""
    if not os.path.isfile(backend.pylock):
        return ""
    made_from = f"{REQUIREMENTS_LOCK} = {relative(project.root, backend.lock)} sha256:"
    digest = hashlib.sha256(lock_text.encode("utf-8")).hexdigest()
    with open(backend.pylock, encoding="utf-8", errors="replace") as handle:
        if f"{made_from}{digest}" in handle.read(1 << 16):  # the header lines are at the top
            return ""
    return (
        f"; the {relative_pylock(project, backend)} from before is now stale (`kdkit validate` "
        "says so)")


def pylock_text(resolver: Resolver, job: Job, head: str, text: str) -> tuple[str | None, list[str]]:
    """(the backend's pylock text, or None and the warning saying why there is none), for `kdkit
    lock` to write beside the requirements lock ``text``. Nothing is written here."""
    from kdkit.lock import uvcompile

    project, backend = job.project, job.backend
    try:
        if job.local_torch is not None:
            raise NoPylock("torch came from --torch-find-links, a folder of this machine, and a "
                           "pylock names each file by a URL another machine can reach")
        uv = resolver.uv
        if uv is None:
            try:
                uv = uvcompile.find_uv()
            except Unavailable:
                uv = None
        env = uvcompile.uv_environment(job.pip_config, os.environ)
        cert = uvcompile.uv_cert(job.pip_config, job.ca_bundle, in_container=False)
        made = make_pylock(uv, parse_lock_text(text, backend.lock), project, backend, head, text,
                           env, cert, job.target[1])
    except NoPylock as exc:
        rel = relative_pylock(project, backend)
        return None, [f"{rel} not written: {exc}; {relative(project.root, backend.lock)} is "
                      "complete on its own"
                      + stale_note(project, backend, text)]
    return made, []
