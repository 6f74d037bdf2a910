"""``kdkit`` (the console script) and ``python -m kdkit``.

A command that also runs in the container (verify-env, torch-arch, diagnose, pilot...) has its
options defined once, with argparse, in kdkit.probe; click only forwards its command line there
(kdkit.cli.machine.forwarder). So such a command goes straight to kdkit.probe.entry here, without
loading click and the host's modules: ``kdkit verify-env`` starts as fast as ``python -m kdkit.probe
verify-env`` (bench/bench_verify_env.py). Everything else, ``--help`` and ``--version`` included, is
the click group's.
"""

from __future__ import annotations

import sys


def main() -> None:
    """Console entry point."""
    from kdkit.core.commands import forwarded
    from kdkit.probe.entry import safe_output

    safe_output()
    argv = sys.argv[1:]
    if argv and forwarded(argv[0]):
        from kdkit.core.commands import excepthook
        from kdkit.probe.entry import run_command

        sys.excepthook = excepthook  # a crash's traceback is redacted, as under click
        sys.exit(run_command(argv[0], argv[1:]))
    from kdkit.cli import main as click_main

    click_main()


if __name__ == "__main__":
    main()
