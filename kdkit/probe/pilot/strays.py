"""The processes an app leaves behind: found in /proc, killed with their process groups, reaped.

kdkit.probe.pilot.supervisor makes the pilot the child subreaper of what it starts, so an orphan of
the app (a daemon that double-forked and left its group with setsid) becomes the pilot's child; here
every such process is found and killed before the run is judged. Linux only (/proc); standard
library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time


def process_table() -> dict[int, tuple[int, int]]:
    """Every process's (parent, process group), one look at /proc; empty where there is no /proc."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()  # state, ppid, pgrp, ...
            table[int(name)] = (int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def children_of(pid: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    """The processes whose parent is ``pid``."""
    return {child for child,
            (parent, _group) in (process_table() if table is None else table).items()
            if parent == pid}


def _descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    below: dict[int, list[int]] = {}
    for child, (parent, _group) in table.items():
        below.setdefault(parent, []).append(child)
    seen, todo = set(), set(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.update(below.get(pid, ()))
    return seen


def kill_strays(before: set[int], grace_s: float) -> None:
    """Whatever this process started since ``before`` (its children then) that is still alive, in
    the app's group or not: killed and reaped, for at most ``grace_s`` seconds.

    Looked for again until a look finds none: a process that forks as it is killed leaves a child
    which, orphaned, becomes this process's (subreaper) and is found by the next look."""
    until, own_group, me = time.monotonic() + grace_s, os.getpgrp(), os.getpid()
    while True:
        # one look: each stray's group read with it, never from a pid reused since
        table = process_table()
        strays = _descendants(children_of(me, table) - before, table) - {me}
        if not strays or time.monotonic() >= until:
            return
        for group in {table[pid][1] for pid in strays if pid in table} - {own_group}:
            # a group at once: a member that
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)  # forks meanwhile dies with its child
        for pid in strays:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        # the orphans among them are our children (subreaper): reaped, gone from /proc
        for pid in strays:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.01)
