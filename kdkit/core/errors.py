"""The one exception tree. Each class carries the exit code the CLI maps it to.

Standard library only: the in-container side raises these too.
"""

from __future__ import annotations


class KdkitError(Exception):
    """Base of every error kdkit reports to a person. Its message is one line."""

    exit_code = 1


class CheckFailed(KdkitError):
    """A check ran and its verdict is negative (exit 1)."""

    exit_code = 1


class BadInput(KdkitError):
    """Usage, an invalid config, a refused overwrite (exit 2)."""

    exit_code = 2


class Unavailable(KdkitError):
    """A needed component is missing: Docker engine, image, GPU runtime, a tool (exit 3)."""

    exit_code = 3

