"""`kdkit run --copy-to DEST --copy-every S`: the run folder copied off the machine while the
container runs, and once more, verified there, when it has closed.

While the run is open a background thread looks at each run folder once a second; when its
results.jsonl has grown or its heartbeat.json was rewritten (a batch closed) and S seconds have
passed since the last copy, it takes a snapshot of complete lines (results.jsonl cut at its last
newline, the other files as they are) into a scratch folder kept between copies, and syncs that to
``DEST/.<run-id>.kdkit-partial`` (a name only kdkit makes; a link or a file there is refused, never
followed) (rsync, sftp, rclone sync or a local copy). The thread only reads and starts a copy
program: the container never waits for it. A periodic copy that fails is a warning line. At the end
:meth:`CopyTo.finish` copies each closed folder with ``kdkit copy-out``
(kdkit.probe.results.copyout.copy_run), which reuses that staging folder so only what changed
travels, verifies it where it lies and renames it to ``DEST/<run-id>``; a failure there makes the
exit 1.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.runfolder import HEARTBEAT, RESULTS
from kdkit.probe.results.copyout import copy_run
from kdkit.probe.results.destinations import LOCAL, Place, parse_place
from kdkit.probe.results.remote import staging_place
from kdkit.probe.results.transports import bad_staging, transport_for

POLL_S = 1.0
Say = Callable[[str], None]


def snapshot(run: Path, scratch: Path) -> None:
    """Bring ``scratch`` up to ``run``'s closed part: each changed regular file copied (hidden
    staging names skipped), results.jsonl cut at its last newline, files gone from ``run``
    removed."""
    seen: set[Path] = set()
    for path in sorted(run.rglob("*")):
        name = path.relative_to(run)
        if any(part.startswith(".") for part in name.parts) or not path.is_file() \
                or path.is_symlink():
            continue
        target = scratch / name
        seen.add(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        if name.as_posix() == RESULTS:
            _complete_lines(path, target)
        elif not target.exists() or target.stat().st_mtime_ns != path.stat().st_mtime_ns:
            shutil.copy2(path, target)
    for old in [p for p in scratch.rglob("*") if p.is_file() and p not in seen]:
        old.unlink()


def _complete_lines(source: Path, target: Path) -> None:
    data = source.read_bytes()
    target.write_bytes(data[: data.rfind(b"\n") + 1])


def _signature(run: Path) -> tuple[int, int]:
    """What changes when a batch closes: results.jsonl's length, heartbeat.json's time."""
    def stat(name: str, size: bool) -> int:
        try:
            info = (run / name).stat()
        except OSError:
            return -1
        return info.st_size if size else info.st_mtime_ns
    return stat(RESULTS, True), stat(HEARTBEAT, False)


class CopyTo:
    """The copies of one `kdkit run` (see the module's docstring); a no-op when ``dest`` is None."""

    def __init__(self, dest: str | None, every: float, runs: Path,
                 run_ids: list[str] | None, warn: Say) -> None:
        if dest and every < 1:
            raise BadInput(
                f"--copy-every {every:g}: expected at least 1 second between copies, e.g. "
                "--copy-every 300")
        self.place = parse_place(dest) if dest else None
        self.every, self.runs, self.warn = every, runs, warn
        self.run_ids = run_ids
        self.before = self._present()
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.scratch = Path(tempfile.mkdtemp(prefix="kdkit-copyto-")) if dest else None
        self.state: dict[str, tuple[float, tuple[int, int]]] = {}
        self.copies = 0

    def _present(self) -> set[str]:
        return {p.name for p in self.runs.iterdir() if p.is_dir()} if self.runs.is_dir() else set()

    def _folders(self) -> list[Path]:
        names = self.run_ids if self.run_ids else sorted(self._present() - self.before)
        return [self.runs / name for name in names if not name.startswith(".")
                and (self.runs / name).is_dir()]

    def __enter__(self) -> CopyTo:
        if self.place is not None:
            self.thread = threading.Thread(target=self._loop, name="kdkit-copy-to", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        if self.scratch is not None:  # also when the run ended by an exception (finish never ran)
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _loop(self) -> None:
        while not self.stop.wait(POLL_S):
            for run in self._folders():
                self._maybe_copy(run)

    def _maybe_copy(self, run: Path) -> None:
        last, seen = self.state.get(run.name, (time.monotonic(), (-1, -1)))
        signature = _signature(run)
        if run.name in self.state and (signature == seen or time.monotonic() - last < self.every):
            return
        self.state[run.name] = (time.monotonic(), signature)
        if signature == (-1, -1):
            return
        try:
            self.copy_open(run)
            self.copies += 1
        except (KdkitError, OSError) as exc:
            self.warn(
                f"the periodic copy of {run.name} to {self.place} failed ({exc}); the run goes on")

    def copy_open(self, run: Path) -> None:
        """One snapshot of the open ``run`` synced to DEST/.<run-id>.kdkit-partial."""
        assert self.place is not None and self.scratch is not None
        local = self.scratch / run.name
        local.mkdir(parents=True, exist_ok=True)
        snapshot(run, local)
        staging = staging_place(self.place, run.name)
        if self.place.kind == LOCAL:
            path = Path(staging.path)
            if path.is_symlink() or (os.path.lexists(path) and not path.is_dir()):
                raise bad_staging(staging)
            shutil.rmtree(staging.path, ignore_errors=True)
            shutil.copytree(local, staging.path)
            return
        transport = transport_for(self.place)
        transport.prepare(self.place, run.name)
        transport.upload(local, staging)

    def finish(self, folders: list[Path], code: int, say: Say) -> int:
        """The final verified copy of each closed folder; the exit code (1 when a copy failed, else
        ``code``)."""
        if self.place is None:
            return code
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        failed = False
        for folder in folders:
            try:
                copy = copy_run(folder, self.place)
            except KdkitError as exc:
                say(f"Error: the copy of {folder.name} to {self.place} failed: {exc}")
                failed = True
                continue
            if self.place.kind == LOCAL:
                shutil.rmtree(staging_place(self.place, folder.name).path, ignore_errors=True)
            say(f"Copied to {copy}, verified there ({self.copies} copies during the run)")
        return code or int(failed)


def copy_during(dest: str | None, every: float, runs: Path,
                run_ids: list[str] | None, warn: Say) -> CopyTo:
    """A :class:`CopyTo` for ``kdkit run``; ``run_ids`` when known, else the folders that appear in
    ``runs``."""
    return CopyTo(dest, every, runs, run_ids, warn)


def copy_while_waiting(dest: str | None, every: float, runs: Path,
                       run_id: str, warn: Say) -> CopyTo:
    """A :class:`CopyTo` for ``kdkit wait --copy-to``: the run's folders as they are named now (its
    own, or its workers'), copied while the wait lasts; :func:`ended_folders` names the ones its
    final copy takes."""
    from kdkit.machine.watch import folders_of

    return CopyTo(dest, every, runs,
                  [folder.name for folder in folders_of(runs, run_id)] or [run_id], warn)


def ended_folders(runs: Path, run_id: str) -> list[Path]:
    """The folders of an ended run that travel: its own, or its workers' and their gathering."""
    from kdkit.core.runid import gathered_folder
    from kdkit.machine.watch import folders_of

    gathered = runs / gathered_folder(run_id)
    return folders_of(runs, run_id) + ([gathered] if gathered.is_dir() else [])


__all__ = ["CopyTo", "Place", "copy_during", "copy_while_waiting", "ended_folders", "snapshot"]
