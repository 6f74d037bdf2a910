"""A node's one process, started by a per-node launcher, runs one worker per GPU of its node.

SkyPilot, dstack and Slurm with one task per node start ``kdkit pilot`` once per node
(kdkit.probe.pilot.launchers). When the node has G > 1 GPUs, that process starts G pilots side by
side, the same command line each, with KDKIT_LOCAL_WORKER=i and KDKIT_LOCAL_WORKERS=G in their
environment, and the i-th visible device as their only one (CUDA_VISIBLE_DEVICES, or
HIP_VISIBLE_DEVICES on AMD): worker i answers share ``node rank * G + i``, in its own run folder.
It waits for all of them and exits with the first non-zero exit code in worker order (0 when every
worker passed). SIGINT and SIGTERM (``docker stop`` on PID 1) are passed to every worker, which
closes its run folder with the reason; if this process dies, the kernel sends its workers SIGTERM
(Linux PR_SET_PDEATHSIG). Each worker writes its own lines on stderr; its result (text or
``--json``) is printed here in worker order, ``--json`` as one object. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

from kdkit.core.report import print_result
from kdkit.core.stopsignals import handling_stops
from kdkit.probe.diagnose.host import hardware_hints
from kdkit.probe.pilot.appchild import PR_SET_PDEATHSIG
from kdkit.probe.pilot.launch import pin
from kdkit.probe.pilot.launchers import LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR, Placement


def interpreter() -> list[str]:
    """This interpreter and its isolation flags: a child started with them runs as this process
    does."""
    flags = [flag for flag, on in (("-I", sys.flags.isolated), ("-S", sys.flags.no_site),
                                   ("-E", sys.flags.ignore_environment and not sys.flags.isolated),
                                   ("-s", sys.flags.no_user_site and not sys.flags.isolated),
                                   ("-B", sys.flags.dont_write_bytecode)) if on]
    return [sys.executable, *flags]


def kdkit_home() -> str:
    """The folder that holds this very kdkit (a venv's site-packages, /opt/kdkit/lib in the image,
    kdkit.pyz)."""
    import kdkit

    return os.path.dirname(os.path.dirname(os.path.abspath(kdkit.__file__)))


def worker_command(argv: Sequence[str]) -> list[str]:
    """``kdkit pilot ARGV`` in this interpreter and kdkit, dying (SIGTERM) with the process that
    started it."""
    boot = (f"import os, sys; sys.path.insert(0, {kdkit_home()!r}); "
            f"from kdkit.probe.pilot.appchild import prctl; prctl({PR_SET_PDEATHSIG}, "
            f"{int(signal.SIGTERM)}); os.getppid() == {os.getpid()} or sys.exit(143); "
            "from kdkit.probe.entry import main; sys.exit(main(['pilot', *sys.argv[1:]]))")
    return [*interpreter(), "-c", boot, *argv]


def worker_env(env: Mapping[str, str], index: int, count: int) -> dict[str, str]:
    """Worker ``index``'s environment: its place on the node and its one GPU
    (kdkit.probe.pilot.launch.pin)."""
    child = {**env, LOCAL_WORKER_VAR: str(index), LOCAL_WORKERS_VAR: str(count)}
    kept = pin(index, env, count, amd=hardware_hints() == ["amd"])
    if kept is not None:
        child[kept[0]] = kept[1]
    return child


@contextmanager
def passing_signals(workers: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    """While the workers run, SIGINT and SIGTERM sent to this process go to each of them."""
    def forward(signum: int, _frame: FrameType | None) -> None:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signum)

    with handling_stops(forward):
        yield


def run_node(argv: Sequence[str], placed: Placement, as_json: bool) -> int:
    """Start one worker per GPU of this node, wait for them, print their results; the module's
    docstring."""
    count = len(placed.node_shares)
    workers: list[subprocess.Popen[bytes]] = []
    outputs: list[bytes] = [b""] * count
    readers: list[threading.Thread] = []
    with passing_signals(workers):
        for index in range(count):
            workers.append(subprocess.Popen(worker_command(argv),
                                            env=worker_env(os.environ, index, count),
                                            stdout=subprocess.PIPE, start_new_session=True))
            readers.append(
                threading.Thread(target=_read, args=(workers[-1], outputs, index), daemon=True))
            readers[-1].start()
        # a worker killed by a signal (one that had closed its folder and was exiting when SIGTERM
        # came, its handlers gone) is -N to Popen: 128 + N, as a shell and `docker stop` report it,
        # never -N & 0xff
        codes = [code if code >= 0 else 128 - code
                 for code in (worker.wait() for worker in workers)]
        for reader in readers:
            reader.join()
    _print(outputs, placed, codes, as_json)
    return next((code for code in codes if code != 0), 0)


def _read(worker: subprocess.Popen[bytes], outputs: list[bytes], index: int) -> None:
    assert worker.stdout is not None
    outputs[index] = worker.stdout.read()


def _print(outputs: list[bytes], placed: Placement, codes: list[int], as_json: bool) -> None:
    texts = [out.decode("utf-8", "replace") for out in outputs]
    if as_json:
        docs: list[Any] = []
        for text in texts:
            try:
                docs.append(json.loads(text))
            except ValueError:
                docs.append(None)  # the worker failed before its result; its stderr said why
        shares = [{"worker": s.worker, "workers": s.workers} for s in placed.node_shares]
        # kdkit.core.report: no raw control character, valid JSON
        print_result(True,
                     {"launcher": placed.record(), "shares": shares,
                      "exit_codes": codes, "workers": docs},
                     "", ascii_only=False)
    else:
        print_result(False, None, "\n".join(text.rstrip("\n") for text in texts if text.strip()))
