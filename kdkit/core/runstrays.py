"""What appeared in the runs folder beside a pilot run while it was open, and is no run of kdkit's.

A pilot session takes a :func:`snapshot` of the runs folder's top-level entries (name -> file type
and inode) before its run folder is made or resumed; at close, :func:`strays` names every top-level
entry that is new (or replaced: another type, another inode) and that kdkit itself makes there:

- this run's own folder;
- a run folder: a real folder holding params.json or summary.json as regular files (a pilot run, a
  worker's share made at the same moment by a sibling worker, a gathering, a verified copy): kdkit
  makes each whole, in a staging folder renamed into place (kdkit.core.runresults.RunFolder.make,
  kdkit.core.staging);
- a measurement's folder named as kdkit.core.runfolder names them (``sweep-<time>``,
  ``resume-test-<time>``, ``serve-test-<time>``, made empty before their report is written) and a
  sweep's scratch folder (``.kdkit-sweep-outputs-*``, kdkit.probe.measure.sweep);
- a staging folder of kdkit.core.staging (``.NAME.partial-PID``, ``.NAME.old-PID``) whose owner
  still holds it or still runs (a sibling worker's folder in the making).

Anything else (a file, a link, any other folder: ``runs/sneaky.txt``, ``runs/side-vectors/``) was
written beside the run by the app or by something else during the session: it is part of no run, it
is never read, and the run cannot pass. Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from kdkit.core.stalestaging import staged_name, stale_staging

Snapshot = dict[str, tuple[int, int]]  # top-level name -> (file type bits, inode)
# kdkit.core.runfolder PARAMS, SUMMARY (not imported: no cycle)
RUN_FILES = ("params.json", "summary.json")
# runfolder.ID_SHAPES, claim()
MEASURED = re.compile(r"(?:sweep|resume-test|serve-test)-[0-9]{8}-[0-9]{6}(?:-[0-9]+)?")
# the prefix of kdkit sweep's scratch for file-kind apps (it uses this one)
SWEEP_SCRATCH = ".kdkit-sweep-outputs-"


def snapshot(runs: Path) -> Snapshot:
    """The runs folder's top-level entries now (empty when it does not exist yet)."""
    found: Snapshot = {}
    try:
        entries = os.scandir(runs)
    except OSError:
        return found
    with entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            found[entry.name] = (stat.S_IFMT(info.st_mode), info.st_ino)
    return found


def strays(runs: Path, before: Snapshot, own: str, root: Path) -> list[str]:
    """One problem per top-level entry of ``runs`` new since ``before`` that kdkit did not make (see
    the module)."""
    problems = []
    where = _shown(runs, root)
    for name, seen in sorted(snapshot(runs).items()):
        if name == own or before.get(name) == seen or _kdkits(runs, name, seen[0]):
            continue
        problems.append(f"{where}/{name}: written into {where}/ beside the run during this "
                        "session; not part of any run: the run cannot pass")
    return problems


def _kdkits(runs: Path, name: str, kind: int) -> bool:
    """Whether the entry is one kdkit makes in a runs folder (a real folder, by the rules of the
    module)."""
    if not stat.S_ISDIR(kind):
        return False
    path = runs / name
    if any(_regular(path / file) for file in RUN_FILES):
        return True
    if MEASURED.fullmatch(name) or name.startswith(SWEEP_SCRATCH):
        return True
    final = staged_name(name)
    if final is None or name.endswith(".tmp"):
        return False
    # held, or its owner still runs
    return path not in stale_staging(runs / final, folders_only=True)


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _shown(path: Path, root: Path) -> str:
    """``path`` relative to the project when inside it (``runs``), else as it is."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)
