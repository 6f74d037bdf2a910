"""What an interpreter is: its sys.path and its PEP 508 marker variables.

Standard library only and free of kdkit imports, because ``verify-env --python``
sends this file's text to another interpreter (``python -I -c``) and reads back
what it prints (:func:`encode`, :func:`decode`: one fact a line, values escaped, so
that neither side needs ``json``, whose import costs more than the whole check).
Nothing is imported there beyond the standard library, and not even ``platform``
where ``os.uname`` answers: this runs on every verify-env call and its start-up is
most of that call's time.
"""

from __future__ import annotations

import os
import sys

_IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy",
                    "ironpython": "IronPython", "jython": "Jython"}


def _implementation_version() -> str:
    info = sys.implementation.version
    version = f"{info.major}.{info.minor}.{info.micro}"
    if info.releaselevel != "final":
        version += info.releaselevel[0] + str(info.serial)
    return version


def _uname() -> tuple[str, str, str, str]:
    """(system, release, version, machine), as the platform module reports them."""
    if hasattr(os, "uname"):
        info = os.uname()
        return info.sysname, info.release, info.version, info.machine
    import platform  # Windows: no os.uname

    return platform.system(), platform.release(), platform.version(), platform.machine()


def marker_environment() -> dict[str, str]:
    """The PEP 508 marker variables of the running interpreter."""
    system, release, version, machine = _uname()
    full = sys.version.split()[0]
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": _implementation_version(),
        "os_name": os.name,
        "platform_machine": machine,
        "platform_python_implementation": _IMPLEMENTATIONS.get(
            sys.implementation.name, sys.implementation.name),
        "platform_release": release,
        "platform_system": system,
        "platform_version": version,
        "python_full_version": full,
        "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "sys_platform": sys.platform,
    }


def _started_from(entry: str) -> bool:
    """Whether ``entry`` is what the interpreter put first on sys.path: the cwd for ``-m``, ``-c``
    and stdin, the script's folder, or the zipapp itself
    (https://docs.python.org/3/library/sys.html#sys.path)."""
    if not entry:
        return True
    named = sys.argv and sys.argv[0] not in ("", "-c", "-m")
    script = os.path.abspath(sys.argv[0]) if named else ""
    starts = {os.getcwd(), script, os.path.dirname(script)} - {""}
    return os.path.realpath(entry) in {os.path.realpath(path) for path in starts}


def search_path() -> list[str]:
    """sys.path as the environment makes it: without the entry the interpreter puts first for the
    cwd or the script, unless -P / -I left it out (sys.flags.safe_path, Python 3.11+). A stale
    ``click.egg-info`` in the cwd is no part of the environment."""
    path = list(sys.path)
    if path and not getattr(sys.flags, "safe_path", False) and _started_from(path[0]):
        path = path[1:]
    return [entry for entry in path if entry]


def describe() -> dict[str, object]:
    """The facts verify-env needs about the running interpreter."""
    return {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "sys_path": search_path(),
        "markers": marker_environment(),
    }


_FIRST = "kdkit-envinfo 1"  # the first line of what encode() writes: the format and its version


def _escaped(value: str) -> str:
    """``value`` on one line of ASCII: newlines, tabs, backslashes and non-ASCII characters
    escaped."""
    return value.encode("unicode_escape").decode("ascii")


def encode(info: dict[str, object]) -> str:
    """What :func:`describe` returns, as lines ``key<TAB>value`` (``sys_path`` once per entry, in
    order; ``marker:<name>`` per marker variable), after a first line naming the format."""
    paths, markers = info["sys_path"], info["markers"]
    assert isinstance(paths, list) and isinstance(markers, dict)
    lines = [
        _FIRST, f"executable\t{_escaped(str(info['executable']))}",
        f"prefix\t{_escaped(str(info['prefix']))}"]
    lines += [f"sys_path\t{_escaped(str(entry))}" for entry in paths]
    lines += [f"marker:{name}\t{_escaped(str(value))}" for name, value in markers.items()]
    return "\n".join(lines) + "\n"


def decode(text: str) -> dict[str, object] | None:
    """:func:`encode`'s text back as :func:`describe`'s dict; None when ``text`` is not such a
    text."""
    lines = text.splitlines()
    if not lines or lines[0] != _FIRST:
        return None
    paths: list[str] = []
    markers: dict[str, str] = {}
    info: dict[str, object] = {"sys_path": paths, "markers": markers}
    try:
        for line in lines[1:]:
            key, tab, value = line.partition("\t")
            if not tab:
                return None
            value = value.encode("ascii").decode("unicode_escape")
            if key == "sys_path":
                paths.append(value)
            elif key.startswith("marker:"):
                markers[key[len("marker:"):]] = value
            else:
                info[key] = value
    except UnicodeError:
        return None
    # every variable marker_environment() reports, no other
    if set(markers) != set(marker_environment()):
        return None
    return info


if __name__ == "__main__":  # run by verify-env --python in the inspected interpreter
    sys.stdout.write(encode(describe()))
