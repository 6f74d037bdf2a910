"""The one exception tree. Each class carries the exit code the CLI maps it to.

Standard library only: the in-container side raises these too.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at start-up (kdkit.core.commands says why)
if TYPE_CHECKING:
    from types import ModuleType


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



def _signal() -> ModuleType:
    """The signal module, imported when an interrupt is handled: it imports enum, which every
    in-container command would otherwise pay for at start-up."""
    import signal

    return signal


class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C) or SIGTERM reached kdkit while it waited on something it started.

    A KeyboardInterrupt, so no ``except Exception`` swallows it, and so a plain Ctrl-C and
    kdkit's SIGTERM handler end the same way. Its exit code is 128 + the signal's number, as
    shells report a command a signal ended: 130 for SIGINT, 143 for SIGTERM (the pilot's own
    stop.json codes are the same, kdkit.probe.pilot.stopguard).
    """

    def __init__(self, signum: int | None = None) -> None:
        if signum is None:
            signum = _signal().SIGINT
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum

    @property
    def name(self) -> str:
        signal = _signal()
        names = {int(signal.SIGINT): "Ctrl-C (SIGINT)", int(signal.SIGTERM): "SIGTERM"}
        return names.get(self.signum, f"signal {self.signum}")


def interrupted_exit(exc: BaseException) -> int:
    """The exit code of an interrupt: an Interrupted's own, 130 for a bare KeyboardInterrupt
    (Ctrl-C)."""
    return exc.exit_code if isinstance(exc, Interrupted) else Interrupted().exit_code
