"""The loop under supervision: started in a process group of its own, its channel read, the stop
rules judged.

The loop runs as ``python -m MODULE ARGS`` (cwd the project root) with the write end of a pipe as
its channel (kdkit.core.trainapi); its stdout and stderr go into one pipe that a thread copies raw
to ``output.log`` and escaped to kdkit's stderr. Each report is appended to metrics.jsonl and
fsynced, each checkpoint to checkpoints.jsonl. A stop rule, a signal to kdkit or ``max_seconds``
ends the loop's whole process group (SIGTERM, then SIGKILL after GRACE_S). A loop ended by a SIGKILL
kdkit did not send is "oom" when the cgroup's oom_kill count rose meanwhile, else "killed".

Standard library only.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from kdkit.core import checkpoints, trainapi
from kdkit.core.heartbeat import Heartbeat
from kdkit.core.proc import dies_with_kdkit
from kdkit.core.runfolder import TRAIN
from kdkit.core.safetext import printable
from kdkit.core.trainconfig import TrainConfig
from kdkit.probe.train.runfiles import CHECKPOINT_LOG, CHECKPOINTS, METRICS, OUTPUT_LOG, Appender

GRACE_S = 5.0
TICK_S = 0.2
OOM_EVENTS = Path("/sys/fs/cgroup/memory.events")


@dataclass
class Outcome:
    reason: str
    detail: str
    returncode: int | None
    step: int | None
    # first and last of this session (rate)
    reports: list[dict[str, Any]] = field(default_factory=list)
    saves: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    signal: int | None = None
    seconds: float = 0.0


def events_file() -> Path:
    """Where the kernel counts the OOM kills of this process's cgroup: cgroup v2's memory.events,
    else cgroup v1's memory.oom_control; both hold ``oom_kill N`` (torvalds/linux
    Documentation/admin-guide/cgroup-v2.rst, memory.events; the v1 line is read where present, as
    this test machine's kernel writes it)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, place = rest.partition(":")
        if hierarchy == "0" and not controllers:
            candidate = OOM_EVENTS.parent / place.strip("/") / OOM_EVENTS.name
        elif "memory" in controllers.split(","):
            candidate = OOM_EVENTS.parent / "memory" / place.strip("/") / "memory.oom_control"
        else:
            continue
        if candidate.is_file():
            return candidate
    return OOM_EVENTS


def oom_kills() -> int | None:
    try:
        for line in events_file().read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _tee(source: int, log: Path) -> threading.Thread:
    def copy() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        with open(log, "ab") as kept, contextlib.suppress(OSError, ValueError):
            while chunk := os.read(source, 1 << 16):
                kept.write(chunk)
                kept.flush()
                _write(2, printable(decoder.decode(chunk), lines=True))
        os.close(source)

    thread = threading.Thread(target=copy, name="kdkit-train-output", daemon=True)
    thread.start()
    return thread


def _write(fd: int, text: str) -> None:
    view = memoryview(text.encode("utf-8"))
    with contextlib.suppress(OSError):
        while view:
            view = view[os.write(fd, view):]


class Supervisor:
    """One session of the loop: ``run()`` returns its Outcome."""

    def __init__(self, cfg: TrainConfig, folder: Path, argv: list[str], env: dict[str, str],
                 cwd: Path,
                 started: float, keep_fds: tuple[int, ...] = ()) -> None:
        self.cfg, self.folder, self.argv, self.env, self.cwd = cfg, folder, argv, env, cwd
        # the run folder's lock: held by the loop too, until the last of them ends
        self.keep_fds = keep_fds
        self.started, self.session_start = started, time.monotonic()
        self.stop: tuple[str, str] | None = None
        # the step a rule fired at (the loop may log a few more before it ends)
        self.stop_step: int | None = None
        self.signum: int | None = None
        self.killed_by_us = False
        self.last_save = time.monotonic()
        self.step: int | None = None
        self.outcome = Outcome("exit", "", None, None)
        self.heartbeat: Heartbeat | None = None

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signum = signum
        if self.stop is None:
            self.stop = ("signal", f"kdkit train got {signal.Signals(signum).name}")

    def run(self) -> Outcome:
        read_end, write_end = os.pipe()
        out_read, out_write = os.pipe()
        env = {**self.env, trainapi.FD_ENV: str(write_end)}
        before = oom_kills()
        saved = {s: signal.signal(s, self._on_signal)
                 for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            process = subprocess.Popen(self.argv, cwd=self.cwd, env=env,
                                       pass_fds=(write_end, *self.keep_fds),
                                       stdin=subprocess.DEVNULL, stdout=out_write, stderr=out_write,
                                       start_new_session=True, preexec_fn=dies_with_kdkit())
            os.close(write_end)
            os.close(out_write)
            tee = _tee(out_read, self.folder / OUTPUT_LOG)
            self._follow(process, read_end)
            returncode = process.wait()
            tee.join(GRACE_S)
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
            os.close(read_end)
        self._judge_exit(returncode, before)
        self.outcome.seconds = time.monotonic() - self.session_start
        return self.outcome

    def _follow(self, process: subprocess.Popen[bytes], channel: int) -> None:
        metrics, saves = Appender(self.folder / METRICS), Appender(self.folder / CHECKPOINT_LOG)
        self.heartbeat = Heartbeat(self.folder, self.folder.name, None, None,
                                   self.cfg.stop.max_seconds,
                                   kind=TRAIN)  # kdkit status reads it; closing removes it
        self.heartbeat.beat(0, 0, force=True)
        pending, deadline = b"", None
        try:
            while True:
                if self.stop is not None and deadline is None:
                    deadline = self._terminate(process)
                if deadline is not None and time.monotonic() > deadline:
                    self._kill(process, signal.SIGKILL)
                    deadline = math.inf
                ready, _, _ = select.select([channel], [], [], TICK_S)
                if ready:
                    chunk = os.read(channel, 1 << 16)
                    if not chunk:
                        return
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        self._message(line, metrics, saves)
                self._timers()
        finally:
            metrics.close()
            saves.close()

    def _terminate(self, process: subprocess.Popen[bytes]) -> float:
        self._kill(process, signal.SIGTERM)
        return time.monotonic() + GRACE_S

    def _kill(self, process: subprocess.Popen[bytes], sig: int) -> None:
        self.killed_by_us = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)

    def _timers(self) -> None:
        rules, now = self.cfg.stop, time.monotonic()
        if self.stop is not None:
            return
        if rules.max_seconds is not None and now - self.session_start > rules.max_seconds:
            self.stop = (
                ("max_seconds", f"the session ran past max_seconds ({rules.max_seconds:g} s)"))
        gap = rules.max_checkpoint_gap_minutes
        if gap is not None and now - self.last_save > gap * 60:
            self.stop = ("no_checkpoint", f"no usable checkpoint for more than {gap:g} minutes")

    def _message(self, line: bytes, metrics: Appender, saves: Appender) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if isinstance(message.get("report"), dict):
            self._report(message["report"], metrics)
        elif isinstance(message.get("checkpoint"), dict):
            self._checkpoint(message["checkpoint"], saves)

    def _report(self, report: dict[str, Any], metrics: Appender) -> None:
        step = report.get("step")
        if not isinstance(step, int):
            return
        at = report.pop("at", None)
        record = {"step": step,
                  "t": round(at - self.started, 3) if isinstance(at, float) else None, **report}
        metrics.append(record)
        self.step = step
        self.outcome.step = step
        # the session's first step is where its rate starts (a resumed run's too)
        if self.heartbeat is not None:
            (self.heartbeat.beat if self.outcome.reports else self.heartbeat.rebase)(step, 0)
        self.outcome.metrics.update({k: v for k, v in report.items() if k != "step"})
        reports, kept = self.outcome.reports, dict(record, mono=time.monotonic())
        reports[min(len(reports), 1):] = [kept]  # the session's first report and its latest
        if self.stop is None:
            self.stop = judge(self.cfg, record)
            self.stop_step = step if self.stop is not None else None

    def _checkpoint(self, record: dict[str, Any], saves: Appender) -> None:
        if isinstance(record.get("at"), float):
            record["at"] = datetime.fromtimestamp(
                record["at"], timezone.utc).isoformat(timespec="seconds")
        saves.append(record)
        self.last_save = time.monotonic()
        self.outcome.saves.append(record)
        if self.stop is None:
            self.stop = incomplete(self.folder / CHECKPOINTS,
                                   [r.get("name") for r in self.outcome.saves])

    def _judge_exit(self, returncode: int, before: int | None) -> None:
        outcome = self.outcome
        outcome.returncode, outcome.signal = returncode, self.signum
        if self.stop is None:
            names = [r.get("name") for r in outcome.saves]
            self.stop = incomplete(self.folder / CHECKPOINTS, names)
        if self.stop is not None:
            outcome.reason, outcome.detail = self.stop
            outcome.step = self.stop_step if self.stop_step is not None else outcome.step
        elif returncode == -signal.SIGKILL:
            after = oom_kills()
            oom = before is not None and after is not None and after > before
            outcome.reason = "oom" if oom else "killed"
            outcome.detail = ("the loop was killed by the OOM killer (cgroup oom_kill rose)" if oom
                              else "the loop was killed by SIGKILL (not sent by kdkit)")
        elif returncode < 0:
            outcome.reason, outcome.detail = ("killed",
                                              "the loop was ended by "
                                              f"{signal.Signals(-returncode).name}")
        else:
            outcome.reason, outcome.detail = "exit", f"the loop exited with code {returncode}"


def judge(cfg: TrainConfig, record: dict[str, Any]) -> tuple[str, str] | None:
    """The stop rule one logged step breaks, as (reason, detail), or None."""
    rules, step, loss = cfg.stop, record["step"], record.get("loss")
    if isinstance(loss, (int, float)) and not isinstance(loss, bool):
        if rules.nonfinite_loss and not math.isfinite(loss):
            return "nan_loss", f"the loss is {loss} at step {step}"
        if rules.loss_above is not None and step >= rules.loss_above[1] \
                and loss > rules.loss_above[0]:
            return "loss_bound", (f"the loss {loss:.6g} at step {step} is above "
                                  f"{rules.loss_above[0]:g} (after {rules.loss_above[1]} steps)")
    if rules.eval_below is not None:
        metric, threshold = rules.eval_below
        value = record.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and not value >= threshold:
            return "eval_below", f"{metric} {value:.6g} at step {step} is below {threshold:g}"
    return None


def incomplete(parent: Path, names: list[Any]) -> tuple[str, str] | None:
    """("checkpoint_incomplete", detail) when a committed checkpoint lacks a file its SHA256SUMS
    lists."""
    for name in names:
        if isinstance(name, str) and checkpoints.NAME.match(name):
            missing = checkpoints.missing_files(parent / name)
            if missing:
                return ("checkpoint_incomplete",
                        f"checkpoint {name} is missing {missing[0]}, which it listed")
    return None


def python_argv(module: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", module, *args]
