"""What verify-env reports: a finding (kdkit.core.finding) of its ``env`` section, one difference
between the lock and the environment (what it compares, the installed distributions, is
:mod:`kdkit.probe.env.installed`'s). Standard library only.
"""

from __future__ import annotations

from kdkit.core.finding import Finding

# A difference's severity, as verify-env says it (an error fails the check; --strict makes the
# warnings errors), and the finding's verdict for it.
VERDICT = {"error": "fail", "warning": "warn"}


def env_finding(kind: str, name: str, severity: str, message: str, locked: str | None = None,
                installed: str | None = None, line: int | None = None) -> Finding:
    """One difference: its ``kind`` (the finding's name: missing, version, torch-build,
    direct-url, duplicate, extra; a PEP 751 lock adds requires-python, environment, source,
    direct-source, kdkit.probe.env.pylockcheck) for the distribution ``name`` (where it is), what
    the lock says (the threshold) and what is installed (the reading), the lock's ``line`` (the
    source of what it says) and the message with its fix."""
    source = None if line is None else f"line {line}"
    return Finding("env", kind, None, installed, "", locked, VERDICT[severity], message,
                   source=source,
                   where=name)
