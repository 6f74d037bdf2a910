"""The one table of kdkit's commands, and how a command's error becomes one line and its exit code.

Each command is listed once: its module, its heading in ``kdkit --help``, its one-line summary, and
where it runs: ``host`` (the click CLI, kdkit/cli), ``container`` (``python -m kdkit.probe``) and
``zipapp`` (``python3 kdkit.pyz``). A command that runs in the container is an argparse module of
kdkit.probe with ``main(argv: list[str]) -> int``, so its options are defined once and the host only
forwards to it; a host-only command's module is the kdkit.cli module that defines its click command.

Standard library only, and cheap to import: every entry point reads this table at start-up. The
entry points that load the modules it names stand above it: kdkit.probe.entry (without click) and
kdkit.cli (click).
"""

from __future__ import annotations

import os
import sys

from kdkit.core.errors import KdkitError, interrupted_exit
from kdkit.core.safetext import printable

# typing, collections.abc and types cost the in-container commands' start-up more than a fast
# verify-env's whole work (bench/bench_verify_env.py); they are needed by the type checker only,
# which reads this constant as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import TracebackType

HOST, CONTAINER, ZIPAPP = "host", "container", "zipapp"
EVERYWHERE = frozenset({HOST, CONTAINER, ZIPAPP})
HOST_ONLY = frozenset({HOST})

# The headings of `kdkit --help`, in order.
SECTIONS = ("Project", "Dependencies", "Images (before ordering)", "On the rented machine",
            "Order and campaign", "Transfer")
_PROJECT, _DEPS, _IMAGES, _MACHINE, _ORDER, _TRANSFER = SECTIONS

# name -> (module, help section, one-line summary, where it runs); listed in --help in this order.
COMMANDS: dict[str, tuple[str, str, str, frozenset[str]]] = {
    "init": ("kdkit.cli.project", _PROJECT,
             "Create a project folder that survives a change of machine.",
             HOST_ONLY),
    "validate": ("kdkit.cli.project", _PROJECT,
                 "Check every config against its schema, plus portability rules.",
                 HOST_ONLY),
    "lock": ("kdkit.cli.deps", _DEPS,
             "Write requirements/<backend>.txt and its pylock: a hashed lock of base.in.",
             HOST_ONLY),
    "verify-env": ("kdkit.probe.env.verify", _DEPS,
                   "Compare a lock with the live environment of an interpreter.",
                   EVERYWHERE),
    "torch-arch": ("kdkit.probe.env.torcharch", _DEPS,
                   "Show the GPU architectures the installed torch was compiled for.", EVERYWHERE),
    "wheelhouse": ("kdkit.cli.deps", _DEPS,
                   "Download the locked files, hash-checked, for offline builds.",
                   HOST_ONLY),
    "build": ("kdkit.cli.images", _IMAGES,
              "Build the project's image from its lock, through the Docker SDK.",
              HOST_ONLY),
    "inspect": ("kdkit.cli.images", _IMAGES,
                "Show an image's labels and whether the project's lock still matches.",
                HOST_ONLY),
    "run": ("kdkit.cli.machine", _IMAGES,
            "Run the image here: diagnose, verify-env, pilot; exit code = verdict.",
            HOST_ONLY),
    "diagnose": ("kdkit.probe.diagnose.command", _MACHINE,
                 "Prove this machine's GPU really computes, step by step.",
                 EVERYWHERE),
    "pilot": ("kdkit.probe.pilot.command", _MACHINE,
              "Run the pilot documents with exactly-once accounting.",
              EVERYWHERE),
    "gather": ("kdkit.probe.pilot.gather", _MACHINE,
               "Prove the workers of one run answered every ID exactly once.",
               EVERYWHERE),
    "manifest": ("kdkit.probe.pilot.manifest", _MACHINE,
                 "Write the manifest (IDs, sha256, sizes) of a folder of inputs or a JSONL corpus.",
                 EVERYWHERE),
    "copy-out": ("kdkit.probe.results.copyout", _MACHINE,
                 "Copy a run folder elsewhere and verify the copy.",
                 EVERYWHERE),
    "status": ("kdkit.cli.follow", _MACHINE,
               "Where a run stands, from any shell: state, items, rate, ETA, GPUs.",
               HOST_ONLY),
    "wait": ("kdkit.cli.follow",
             _MACHINE, "Wait for a run to end; exit code = its verdict.", HOST_ONLY),
    "logs": ("kdkit.cli.follow",
             _MACHINE, "Show (or follow with -f) the output of a run's container.", HOST_ONLY),
    "train": ("kdkit.probe.train.command", _MACHINE,
              "Run the training loop as a run: metrics, checkpoints, stop rules, resume, reload.",
              EVERYWHERE),
    "sweep": ("kdkit.probe.measure.sweep", _MACHINE,
              "Find the batch size from measurements: each length group at each batch size.",
              EVERYWHERE),
    "serve-test": ("kdkit.probe.serve.command", _MACHINE,
                   "An interactive service before you pay: latency with its queue, capacity, the "
                   "configuration.",
                   EVERYWHERE),
    "resume-test": ("kdkit.probe.measure.resume", _MACHINE,
                    "Prove the training loop resumes exactly from a checkpoint in a new process.",
                    EVERYWHERE),
    "check": ("kdkit.cli.order",
              _ORDER, "Before ordering: will the locked build run on this GPU offer?", HOST_ONLY),
    "plan": ("kdkit.cli.order", _ORDER,
             "The order summary, its schedule and the cost per accepted output.",
             HOST_ONLY),
    "estimate-memory": ("kdkit.cli.order", _ORDER,
                        "A lower bound on GPU memory, with what it cannot know listed.",
                        HOST_ONLY),
    "close": ("kdkit.cli.order",
              _ORDER, "The campaign report: what the order bought, against the plan.", HOST_ONLY),
    "campaign": ("kdkit.cli.campaign", _ORDER,
                 "The campaign: what is done and passed, what remains, what to cut first.",
                 HOST_ONLY),
    "bundle": ("kdkit.cli.transfer", _TRANSFER,
               "Pack everything the rented machine needs into one verified folder.",
               HOST_ONLY),
    "verify-bundle": ("kdkit.cli.transfer", _TRANSFER,
                      "Check every file of a bundle against its SHA256SUMS before anything is "
                      "loaded.", HOST_ONLY),
    "load": ("kdkit.cli.transfer", _TRANSFER,
             "Verify a bundle, load its image into Docker, and check the image against the bundle.",
             HOST_ONLY),
}
USAGE = {CONTAINER: "python -m kdkit.probe", ZIPAPP: "python3 kdkit.pyz"}


def forwarded(name: str) -> bool:
    """Whether ``name`` runs both on the host and in the container: the host only forwards its
    command line to its argparse ``main`` (kdkit.cli.machine.forwarder; kdkit.__main__ skips click
    for it)."""
    entry = COMMANDS.get(name)
    return entry is not None and HOST in entry[3] and CONTAINER in entry[3]


def runs_in(where: str) -> list[str]:
    """The names of the commands that run ``where`` (host, container or zipapp), in the table's
    order."""
    return [name for name, entry in COMMANDS.items() if where in entry[3]]


def redact(text: str) -> str:
    """kdkit.core.credentials.redact, imported only when an error is printed: it and what it imports
    (dataclasses, inspect, pathlib) are not on the start-up path of every in-container command."""
    from kdkit.core.credentials import redact as redacting

    return redacting(text)


def excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """sys.excepthook for kdkit's entry points: a crash's traceback, redacted (loaded when it
    happens)."""
    from kdkit.core.credentials import redacting_excepthook

    redacting_excepthook(kind, value, tb)


def call(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a command's main; a KdkitError becomes one line on stderr and its exit code.

    Every line printed here goes through :func:`kdkit.core.credentials.redact`.
    """
    try:
        return main(argv)
    except KdkitError as exc:
        if os.environ.get("KDKIT_DEBUG", "") not in ("", "0"):
            import traceback

            sys.stderr.write(printable(redact(traceback.format_exc()), lines=True))
        # one line, whatever the message quotes
        print(f"Error: {printable(redact(str(exc)))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        print("Interrupted.", file=sys.stderr)
        return interrupted_exit(exc)
    # the reader left (`kdkit verify-env --json | head -1`): no traceback, as under click
    except BrokenPipeError:
        # the exit's own flush would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
