"""The entry point without click: ``python -m kdkit.probe COMMAND`` in the container and
``python3 kdkit.pyz COMMAND``; it lists and runs the commands kdkit.core.commands.COMMANDS says run
there, each an argparse ``main(argv)`` of a package below (the host's click forwards here too)."""

from __future__ import annotations

import sys

from kdkit.core.commands import COMMANDS, CONTAINER, USAGE, call, excepthook, runs_in


def safe_output() -> None:
    """stdout and stderr escape what their encoding cannot hold (``\\xf8``), as Python's stderr does
    by default: under ``PYTHONIOENCODING=ascii`` or a C locale, a project path outside ASCII or a
    table's dash prints escaped, never as a traceback after the work is done. Called once, before
    anything is printed, by every entry point (this module's and the ``kdkit`` console script's)."""
    for stream in (sys.stdout, sys.stderr):
        # absent on a stream that is not a text file
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def run_command(name: str, argv: list[str]) -> int:
    """Run the named in-container command of COMMANDS (its argparse ``main``)."""
    # __import__, not importlib.import_module: the importlib package is not loaded at start-up and
    # would be for this one call.
    module = __import__(COMMANDS[name][0], fromlist=["main"])
    return call(module.main, argv)


def main(argv: list[str] | None = None, where: str = CONTAINER) -> int:
    """The entry point without click: ``python -m kdkit.probe`` (container) or kdkit.pyz
    (zipapp)."""
    sys.excepthook = excepthook  # a crash's traceback is redacted too
    safe_output()
    args = list(sys.argv[1:] if argv is None else argv)
    here = runs_in(where)
    if not args or args[0] in ("-h", "--help") or args[0] not in here:
        asked = args[:1] in (["-h"], ["--help"])
        lines = [f"usage: {USAGE[where]} COMMAND [ARGS]...", "", "Commands:"]
        lines += [f"  {name:<11} {COMMANDS[name][2]}" for name in here]
        print("\n".join(lines), file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return run_command(args[0], args[1:])
