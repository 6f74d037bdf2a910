"""Running one short program and reading its output, for commands whose whole time is their
start-up.

kdkit.core.proc is where kdkit starts its programs (pip, docker, git...). It stands on
``subprocess``, whose import alone costs a fast command more than its work: ``kdkit verify-env
--python VENV`` runs a standard-library script in VENV's interpreter and reads back a few lines, and
its goal is at most twice `uv pip sync --dry-run` (bench/bench_verify_env.py). Here the same is done
with ``os.posix_spawn``, two pipes and ``select``: no ``subprocess``, ``signal``, ``threading`` or
``selectors`` to import. Standard library only; POSIX only, as every place kdkit runs.

The program is not trusted: it runs in a process group of its own, which is killed after it (nothing
it left behind lives on), after a timeout and on any interruption; what it writes is read as it
comes (a full pipe never blocks it) and kept within bounds (the first 4 MiB of stdout, the last 64
KiB of stderr); and once it has exited, a descendant still holding its pipes is not waited for.
"""

from __future__ import annotations

import os
import time

from kdkit.core.errors import Unavailable

_CHUNK = 1 << 16
KEEP_STDOUT = 1 << 22  # an interpreter's facts are a few KiB
KEEP_STDERR = 1 << 16  # a message shows stderr's last line
# seconds the pipes are still read after the program exited (what it wrote just before)
_GRACE = 0.5
_KILL = 9  # SIGKILL; the signal module's names would cost the import this module avoids


def capture(argv: list[str], *, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``argv`` run to completion, stdin empty. ``argv[0]`` is a path
    (no PATH search); an OSError when it cannot be started is the caller's to word. A program still
    running after ``timeout`` seconds is killed: Unavailable, naming it."""
    out_r, out_w = os.pipe()  # both ends close-on-exec; the child gets its own copies as 1 and 2
    err_r, err_w = os.pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
    try:
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions, setpgroup=0)
    except BaseException:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    try:
        out, err = _drain(pid, out_r, err_r, time.monotonic() + timeout)
    except TimeoutError:
        raise Unavailable(f"{argv[0]}: no answer after {timeout:.0f} s") from None
    finally:
        status = _end(pid)
    return os.waitstatus_to_exitcode(status), out, err


def _end(pid: int) -> int:
    """Kill what is left of the program's process group (its number is still the program's: not yet
    reaped), then reap the program; its wait status."""
    try:  # noqa: SIM105 (contextlib.suppress: contextlib is not loaded at start-up)
        os.killpg(pid, _KILL)
    except ProcessLookupError:
        pass  # all gone already
    return os.waitpid(pid, 0)[1]


def _read(fd: int, kept: bytearray, head: bool, pending: list[int]) -> None:
    """One read of a pipe into ``kept``: its first KEEP_STDOUT bytes (``head``) or its last
    KEEP_STDERR; the pipe leaves ``pending`` at its end."""
    data = os.read(fd, _CHUNK)
    if not data:
        pending.remove(fd)
    elif head:
        kept += data[:max(0, KEEP_STDOUT - len(kept))]
    else:
        kept += data
        del kept[:-KEEP_STDERR]


def _drain(pid: int, out_r: int, err_r: int, deadline: float) -> tuple[str, str]:
    """(stdout, stderr) of the program: both pipes read as the program writes, until both end, or
    the program has exited and a short grace has passed; TimeoutError past ``deadline``. The pipes
    are closed on return. The program is never reaped here: as a zombie it keeps its process group's
    number for _end to kill."""
    import select  # a C module: cheap

    out, err = bytearray(), bytearray()
    pending, status, until = [out_r, err_r], None, deadline
    try:
        while pending:
            if status is None \
                    and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                # exited, left unreaped (see _end)
                status, until = 0, min(deadline, time.monotonic() + _GRACE)
            left = until - time.monotonic()
            if left <= 0:
                if status is None:
                    raise TimeoutError
                break  # exited; a descendant holds the pipes open
            ready, _w, _x = select.select(pending, [], [],
                                          min(left, 0.05) if status is None else left)
            for fd in ready:
                _read(fd, out if fd == out_r else err, fd == out_r, pending)
    finally:
        os.close(out_r)
        os.close(err_r)
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
