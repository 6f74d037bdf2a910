"""What an interpreter is: its sys.path and its PEP 508 marker variables.

Standard library only and free of kdkit imports, because ``verify-env --python``
sends this file's text to another interpreter (``python -I -c``) and reads back
the JSON it prints. Nothing is imported there beyond the standard library, and
not even ``platform`` where ``os.uname`` answers: this runs on every verify-env
call and its start-up is most of that call's time.
"""

from __future__ import annotations

import json
import os
import sys

_IMPLEMENTATIONS = {"cpython": "CPython", "pypy": "PyPy", "ironpython": "IronPython", "jython": "Jython"}


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
        "platform_python_implementation": _IMPLEMENTATIONS.get(sys.implementation.name, sys.implementation.name),
        "platform_release": release,
        "platform_system": system,
        "platform_version": version,
        "python_full_version": full,
        "python_version": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "sys_platform": sys.platform,
    }


def describe() -> dict[str, object]:
    """The facts verify-env needs about the running interpreter."""
    return {
        "executable": sys.executable,
        "prefix": sys.prefix,
        "sys_path": [entry for entry in sys.path if entry],
        "markers": marker_environment(),
    }


if __name__ == "__main__":
    json.dump(describe(), sys.stdout)
