"""What verify-env reports: a finding, one difference between the lock and the environment (what it
compares, the installed distributions, is :mod:`kdkit.probe.env.installed`'s). Standard library
only.
"""

from __future__ import annotations

from kdkit.core.record import Record


class Finding(Record):
    """One difference between the lock and the environment."""

    __slots__ = ("kind", "name", "severity", "message", "locked", "installed", "line")  # noqa: RUF023 (order)

    def __init__(self, kind: str, name: str, severity: str, message: str, locked: str | None = None,
                 installed: str | None = None, line: int | None = None) -> None:
        # missing | version | torch-build | direct-url | duplicate | extra; a PEP 751 lock adds
        # requires-python | environment | source | direct-source (kdkit.probe.env.pylockcheck)
        self.kind, self.name = kind, name
        self.severity = severity  # error | warning
        self.message, self.locked, self.installed, self.line = message, locked, installed, line
