"""The harness's side of the app's process (kdkit/probe/pilot/appchild.py is the other side).

The pilot never runs the application in its own interpreter. It starts one child process, in
a session of its own, that runs the diagnose and then imports the entry; each batch goes there
over a pipe and the answers come back as JSON. The harness keeps the run folder, the accounting
and the verdict, so nothing the app does can fake a pass or lose a finished result:

* an exception (``Exception``) is an answer: the batch is retried item by item, as before;
* ``sys.exit``, a ``BaseException``, ``os._exit``, a crash (SIGSEGV, a CUDA abort), the
  out-of-memory killer (SIGKILL) or a batch past ``stop.max_batch_seconds`` stops the run: the
  child's exit status or signal and the batch in flight go to stop.json, the run folder is
  closed with a failing summary, and ``--resume`` redoes that batch;
* Ctrl-C, SIGTERM and ``max_seconds`` interrupt the wait at once; the child is killed with its
  whole process group; if the pilot itself is killed, the kernel kills the child
  (PR_SET_PDEATHSIG), so an app holding a GPU never outlives its pilot;
* a process the app leaves behind (a daemon that double-forked and called setsid to leave the
  group) cannot outlive it either: the pilot is the "child subreaper" of what it starts
  (PR_SET_CHILD_SUBREAPER, Linux prctl(2)), so such orphans become its children, and every new
  child and its descendants, with their process groups (a chain that forks and exits to move its
  pid on dies with the group), are killed and looked for again until none is left, when the app's
  process ends, before the run is judged.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.credentials import redact_head
from kdkit.probe.pilot.appchild import FRAME, frame, prctl
from kdkit.probe.pilot.appoutput import Relay
from kdkit.probe.pilot.fanout import interpreter, kdkit_home
from kdkit.probe.pilot.harness import AppRaised, EntryError, Item, first_line
from kdkit.probe.pilot.replies import decode_answers, escape_surrogates, reply_limit
from kdkit.probe.pilot.stopguard import StopRequested
from kdkit.probe.pilot.strays import children_of, kill_strays

EXIT_GRACE_S = 5.0  # how long a child that was asked to leave may take before it is killed
RECEIVED = 1 << 20  # bytes read from the pipe at a time
# a batch's inputs up to this size are sent in one write (larger ones each as it is)
JOINED = 4 << 20
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # linux/prctl.h
SIGNAL_HINTS = {
    signal.SIGKILL: "the kernel's out-of-memory killer sends SIGKILL (see `dmesg` or the "
                    "container's OOMKilled state); lower batch_size or the model's memory",
    signal.SIGSEGV: "the interpreter or a native library (CUDA, a C extension) crashed",
    signal.SIGBUS: "the interpreter or a native library crashed (a bus error; often a full "
                   "/dev/shm)",
    signal.SIGABRT: "a native library aborted (a CUDA error or a failed assertion in C++)",
    signal.SIGFPE: "a native library divided by zero",
}

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypedDict

    from kdkit.probe.pilot.apprequests import PredictRequest, Request

    class ExitStatus(TypedDict):
        """How the app's process ended: its exit status, or the signal that killed it."""

        exit_status: int | None
        signal: int | None
        signal_name: str | None


def child_command() -> list[str]:
    """The child's interpreter line: this interpreter, its isolation flags, and this very kdkit
    (importable from wherever it was: a venv, /opt/kdkit/lib in the image, kdkit.pyz)."""
    home = kdkit_home()
    boot = (f"import sys; sys.path.insert(0, {home!r}); import kdkit.probe.pilot.appchild as c; "
            f"sys.path.remove({home!r}); c.main({os.getpid()})")
    return [*interpreter(), "-c", boot]


class AppProcess:
    """One app process for one pilot session; a context manager that always leaves it dead."""

    def __init__(self, batch_seconds: float | None = None, batch_size: int = 1) -> None:
        self.batch_seconds = batch_seconds
        self.batch_size = batch_size
        self.reply_limit = reply_limit(batch_size)
        self.process: subprocess.Popen[bytes] | None = None
        self.in_flight: list[str] | None = None  # IDs of the batch the app holds now
        self.status: ExitStatus | None = None  # how the process ended, once it has
        self._before: set[int] = set()
        self._reaper = False
        self.stopped_by_us = False  # it went silent without ending and was killed here
        self._buffer = bytearray()

    def __enter__(self) -> AppProcess:
        self._before = children_of(os.getpid())  # the pilot's own children, never touched
        self._reaper = prctl(
            PR_GET_CHILD_SUBREAPER, read=True) == 0 and prctl(PR_SET_CHILD_SUBREAPER, 1) == 0
        self.process = subprocess.Popen(child_command(), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True,
                                        close_fds=True, bufsize=0)
        assert self.process.stderr is not None
        # the app's prints, escaped (kdkit.probe.pilot.appoutput)
        self._output = Relay(self.process.stderr)
        assert self.process.stdin is not None and self.process.stdout is not None
        os.set_blocking(self.process.stdin.fileno(), False)
        os.set_blocking(self.process.stdout.fileno(), False)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    # ------------------------------------------------------------ requests

    def diagnose(self, expect: str, project: Path) -> dict[str, Any]:
        reply = self._request({"op": "diagnose", "expect": expect, "project": str(project)},
                              "the diagnose",
                              deadline=None)
        report: dict[str, Any] = reply["report"]
        return report

    def load(self, root: Path, entry: str, device: str,
             params: dict[str, Any] | None = None) -> None:
        """Import the entry; ``params`` (the config's) are handed to a predict that takes them with
        every batch."""
        reply = self._request({"op": "load", "root": str(root), "entry": entry,
                               "device": device, "params": params},
                              f"importing the entry {entry}", deadline=None)
        if reply.get("op") == "entry_error":
            raise EntryError(str(reply.get("message")))

    def __call__(self, items: Sequence[Item]) -> Any:
        """The app's answers for ``items``; AppRaised when it raised, StopRequested when it must
        stop."""
        ids = [item.doc.id for item in items]
        parts = [item.payload for item in items]  # the bytes the harness read, sent as they are
        sizes = [len(part) for part in parts]
        header: PredictRequest = {"op": "predict", "ids": ids, "sizes": sizes,
                                  "kind": items[0].kind if items else "text",
                                  # 64 hex digits an item
                                  "sha256": "".join(item.sha256 for item in items)}
        # the file output kind: each item's out_dir
        if any(item.out_dir is not None for item in items):
            header["out_dirs"] = [item.out_dir for item in items]
        if sum(sizes) <= JOINED:
            parts = [b"".join(parts)]  # small inputs in one write, not one each
        self.in_flight = ids
        reply = self._request(header, "the batch", deadline=self.batch_seconds, payload=parts)
        self.in_flight = None
        if reply.get("op") == "raised":
            raise AppRaised(str(reply.get("type")), str(reply.get("message") or ""))
        return decode_answers(reply)

    def peak_memory(self) -> dict[str, Any] | None:
        """The app process's peak memory as it measured it; None when it cannot say any more."""
        if self.process is None or self.process.poll() is not None:
            return None
        try:
            reply = self._request({"op": "peak"}, "the memory report", deadline=EXIT_GRACE_S)
        except StopRequested:
            return None
        memory: dict[str, Any] = reply.get("memory")  # type: ignore[assignment]
        return memory if isinstance(memory, dict) else None

    def _request(self, header: Request, what: str, deadline: float | None,
                 payload: Sequence[bytes | memoryview] = ()) -> dict[str, Any]:
        assert self.process is not None
        until = None if deadline is None else time.monotonic() + deadline
        try:
            parts: list[bytes | memoryview] = [frame(header, sum(map(len, payload))), *payload]
            for part in parts:
                self._send(part, what, until)
            reply = self._receive(what, until)
        except BaseException:
            self.kill()  # a stop (Ctrl-C, SIGTERM, max_seconds) or a failure: the app cannot go on
            raise
        if reply.get("op") == "fatal":
            self._wait_gone()
            raise self._fatal(reply, what)
        return reply

    # ------------------------------------------------------------ the pipes

    def _wait(self, fd: int, write: bool, until: float | None, what: str) -> None:
        timeout = None if until is None else max(0.0, until - time.monotonic())
        ready = select.select([], [fd],
                              [], timeout) if write else select.select([fd], [], [], timeout)
        if not any(ready):
            self.kill()
            limit = (f"max_batch_seconds {self.batch_seconds:g}" if self.batch_seconds
                     else f"{EXIT_GRACE_S:g} s")
            raise StopRequested(f"stop rule: the app took longer than {limit} on {what}; its "
                                "process was stopped",
                                "max_batch_seconds", details=self._details())

    def _send(self, data: bytes | memoryview, what: str, until: float | None) -> None:
        assert self.process is not None and self.process.stdin is not None
        fd, view = self.process.stdin.fileno(), memoryview(data)
        while view:
            self._wait(fd, True, until, what)
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise self._gone(what) from None

    def _receive(self, what: str, until: float | None) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        fd, buffer = self.process.stdout.fileno(), self._buffer
        while True:
            if len(buffer) >= FRAME.size:
                size, payload = FRAME.unpack_from(buffer)
                # from the length header, before any of the body is read
                if size > self.reply_limit or payload:
                    raise self._oversized(what, size, payload)
                if len(buffer) >= FRAME.size + size:
                    with memoryview(buffer) as view:
                        data = bytes(view[FRAME.size:FRAME.size + size])
                    del buffer[:FRAME.size + size]
                    return self._parse(data, what)
            self._wait(fd, False, until, what)
            try:
                chunk = os.read(fd, RECEIVED)
            except BlockingIOError:
                continue
            if not chunk:
                raise self._gone(what)
            buffer += chunk

    def _parse(self, data: bytes, what: str) -> dict[str, Any]:
        try:
            reply = json.loads(data)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            raise self._protocol(what, "a reply that is not a JSON object")
        # a lone surrogate from the app is data, never a crash
        if re.search(rb"\\u[dD][89a-fA-F]", data):
            cleaned: dict[str, Any] = escape_surrogates(reply)
            return cleaned
        return reply

    # ------------------------------------------------------------ how it ended

    def _details(self) -> dict[str, Any]:
        return {"app_process": {"pid": self.pid, **(self.status or {})}}

    def _wait_gone(self) -> None:
        assert self.process is not None
        try:
            self.process.wait(timeout=EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            self.stopped_by_us = True
        self._record_status()

    def _record_status(self) -> None:
        assert self.process is not None
        code = self.process.returncode
        if code is None:
            return
        if code < 0:
            name = _signal_name(-code)
            self.status = {"exit_status": None, "signal": -code, "signal_name": name}
        else:
            self.status = {"exit_status": code, "signal": None, "signal_name": None}

    def _gone(self, what: str) -> StopRequested:
        """The child closed its end: it died. Name how, and what it was doing."""
        self._wait_gone()
        status: Mapping[str, Any] = self.status or {}
        if self.stopped_by_us:
            return StopRequested(f"the app's process closed its pipe to the harness during {what} "
                                 "but did not end; it was killed", "app-protocol",
                                 details=self._details())
        if status.get("signal"):
            number = int(status["signal"])
            hint = next((text for sig, text in SIGNAL_HINTS.items() if sig == number), None)
            reason = (f"the app's process was killed by signal {number} ({status['signal_name']}) "
                      f"during {what}"
                      + (f"; {hint}" if hint else ""))
            return StopRequested(reason, "app-crash", details=self._details())
        reason = (f"the app's process exited with status {status.get('exit_status')} during "
                  f"{what}, without answering; an app must return its results (os._exit or a "
                  "native library ending the process?)")
        return StopRequested(reason, "app-exit", details=self._details())

    def _fatal(self, reply: dict[str, Any], what: str) -> StopRequested:
        kind, said = str(reply.get("type")), redact_head(
            first_line(str(reply.get("message") or ""), 200), 200, "")
        if kind == "SystemExit":
            code = redact_head(repr(reply.get("code")), 200)
            reason = (f"the app called sys.exit({code}) during {what}; an app must return its "
                      "results, never end the process")
            return StopRequested(reason, "app-exit", details=self._details())
        reason = (f"the app raised {redact_head(kind, 200)}" + (f": {said}" if said else "")
                  + f" during {what}; "
                  "only exceptions derived from Exception are taken as a failed item")
        return StopRequested(reason, "app-fatal", details=self._details())

    def _protocol(self, what: str, problem: str,
                  hint: str = "something in the app writes to the harness's pipe") -> StopRequested:
        self.kill()
        return StopRequested(f"the app's process sent {problem} during {what}; {hint}",
                             "app-protocol",
                             details=self._details())

    def _oversized(self, what: str, size: int, payload: int) -> StopRequested:
        if payload:
            return (
                self._protocol(what,
                               f"a reply with {payload} bytes of payload (replies have none)"))
        return self._protocol(what,
                              f"a reply of {size} bytes (more than the {self.reply_limit} a reply "
                              f"may take with batch_size {self.batch_size}; not read)",
                              "answer with an ID and a category or a short error, not data (or "
                              "something in the app writes to the harness's pipe)")

    # ------------------------------------------------------------ ending

    def kill(self) -> None:
        """SIGKILL to the app's whole process group (its own workers included)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=EXIT_GRACE_S)
        self._record_status()
        kill_strays(self._before, EXIT_GRACE_S)

    def close(self) -> None:
        """Ask the child to leave, give it a moment, then make sure it and its group are gone."""
        if self.process is None:
            return
        if self.process.poll() is None and self.in_flight is None:
            with contextlib.suppress(OSError, StopRequested):
                self._send(frame({"op": "exit"}), "leaving", time.monotonic() + EXIT_GRACE_S)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=EXIT_GRACE_S)
        self.kill()
        if self._reaper:
            prctl(PR_SET_CHILD_SUBREAPER, 0)
            self._reaper = False
        # its writers are dead: what they wrote is out before the verdict
        self._output.join(EXIT_GRACE_S)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
