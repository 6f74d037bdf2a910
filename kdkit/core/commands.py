"""The table of in-container commands and the runner that maps errors to exit codes.

Each command module exposes ``main(argv: list[str]) -> int`` built on argparse,
so its options are defined once and work with or without click.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import TracebackType

from kdkit.core.errors import KdkitError

# name -> (module, one-line summary shown by `kdkit --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "diagnose": ("kdkit.probe.diagnose.command", "Prove this machine's GPU really computes, step by step."),
    "verify-env": ("kdkit.probe.env.verify", "Compare a lock with the live environment of an interpreter."),
    "pilot": ("kdkit.probe.pilot.command", "Run the pilot documents with exactly-once accounting."),
    "copy-out": ("kdkit.probe.results.copyout", "Copy a run folder elsewhere and verify the copy."),
    "gather": ("kdkit.probe.pilot.gather", "Prove the workers of one run answered every ID exactly once."),
    "torch-arch": ("kdkit.probe.env.torcharch", "Show the GPU architectures the installed torch was compiled for."),
}


def redact(text: str) -> str:
    """kdkit.core.credentials.redact, imported only when an error is printed: it and what it imports
    (dataclasses, inspect, pathlib) are not on the start-up path of every in-container command."""
    from kdkit.core.credentials import redact as redacting

    return redacting(text)


def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook for kdkit's entry points: a crash's traceback, redacted (loaded when it happens)."""
    from kdkit.core.credentials import redacting_excepthook

    redacting_excepthook(kind, value, tb)


def call(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a command's main; a KdkitError becomes one line on stderr and its exit code.

    Every line printed here goes through :func:`kdkit.core.credentials.redact`.
    """
    import traceback

    try:
        return main(argv)
    except KdkitError as exc:
        if os.environ.get("KDKIT_DEBUG", "") not in ("", "0"):
            sys.stderr.write(redact(traceback.format_exc()))
        print(f"Error: {redact(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130


def run_command(name: str, argv: list[str]) -> int:
    """Run the named command of COMMANDS."""
    module = importlib.import_module(COMMANDS[name][0])
    return call(module.main, argv)


def main(argv: list[str] | None = None) -> int:
    sys.excepthook = excepthook  # a crash's traceback is redacted too
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or args[0] not in COMMANDS:
        lines = ["usage: python -m kdkit.probe COMMAND [ARGS]...", "", "Commands:"]
        lines += [f"  {name:<11} {summary}" for name, (_m, summary) in COMMANDS.items()]
        print("\n".join(lines), file=sys.stdout if args[:1] in (["-h"], ["--help"]) else sys.stderr)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    return run_command(args[0], args[1:])
