"""A copy to an SSH host or an rclone remote, verified there, and an existing remote copy
re-verified.

The copy goes to ``DEST/.<name>.kdkit-partial`` first (a name only kdkit makes; refused when it is a
link or not a folder) (``kdkit run --copy-to``'s periodic copies go there too, so the last copy
sends only what changed), is hashed where it lies (sha256sum over SSH, rclone hashsum) and compared
with the source's SHA256SUMS, its SHA256SUMS and its reloadable files read back into a temporary
folder and reloaded (kdkit.core.reloadcheck), and only then renamed to ``DEST/<name>``; a copy that
fails is removed there and never carries the final name. Standard library only.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kdkit.core import checksums
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, CheckFailed, KdkitError
from kdkit.core.jsonio import sha256_file
from kdkit.core.reloadcheck import reload_problems
from kdkit.core.runfolder import ENV, PARAMS, REQUIRED, RESULTS, STOP, SUMMARY, SUMMARY_MD
from kdkit.probe.results.destinations import Place, staging_name
from kdkit.probe.results.transports import Transport, transport_for

# read back to prove the copy reloadable
RELOADED = (PARAMS, ENV, RESULTS, SUMMARY, SUMMARY_MD, STOP)


def staging_place(dest: Place, name: str) -> Place:
    return dest.child(staging_name(name))


def copy_remote(source: Path, sums: dict[str, str], dest: Place,
                sums_text: str | None = None) -> Place:
    """Copy ``source`` to ``dest/<source.name>`` and verify it there against ``sums``; ``sums_text``
    is a SHA256SUMS to write into the copy (a checkpoint folder has none). Returns the final
    place."""
    transport = transport_for(dest)
    final, staging = dest.child(source.name), staging_place(dest, source.name)
    if transport.prepare(dest, source.name):
        raise BadInput(f"{final}: exists; choose another DEST or remove the old copy")
    try:
        transport.upload(source, staging)
        if sums_text is not None:
            transport.put_text(staging, SUMS, sums_text)
        original = (source / SUMS).read_bytes() if sums_text is None else None
        problems = remote_problems(transport, staging, sums,
                                   reload=sums_text is None, expected_sums=original)
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            raise CheckFailed(problems[0].replace(str(staging), str(final)) + more
                              + "; the copy was removed, copy "
                              "again")
        transport.publish(staging, final)
    except KdkitError:
        transport.remove(staging)
        raise
    return final


def remote_problems(transport: Transport, place: Place, sums: dict[str, str], reload: bool,
                    expected_sums: bytes | None = None) -> list[str]:
    """Every difference between the copy at ``place`` and ``sums``, hashed there; then, for a run
    folder (``reload``), its SHA256SUMS and reloadable files read back and reloaded."""
    names = sorted(sums)
    found = transport.hashes(place, names)
    problems = [f"{place.child(name)}: missing at the destination" if name not in found else
                f"{place.child(name)}: SHA-256 {found[name][:12]}... differs from {SUMS}'s "
                f"{sums[name][:12]}..."
                for name in names if found.get(name) != sums[name]]
    present = transport.files(place)
    problems += [f"{place.child(name)}: not listed in {SUMS}" for name in present
                 if name not in sums and name != SUMS]
    if problems or not reload:
        return problems
    with tempfile.TemporaryDirectory(prefix="kdkit-reload-") as scratch:
        folder = Path(scratch) / place.parent_and_name()[1]
        folder.mkdir()
        transport.fetch_many(place, [SUMS, *(n for n in RELOADED if n in present)], folder)
        if expected_sums is not None and (folder / SUMS).read_bytes() != expected_sums:
            return [f"{place.child(SUMS)}: differs from the original's {SUMS}"]
        problems = downloaded_mismatches(folder, sums, place)
        if problems:
            return problems
        return [problem.replace(str(folder), str(place)) for problem in reload_problems(folder)]


def downloaded_mismatches(folder: Path, sums: dict[str, str], place: Place) -> list[str]:
    """The files read back into ``folder`` hashed here against ``sums`` (a second look that does not
    trust the remote's hash listing); each mismatch names the file at ``place``."""
    return [f"{place.child(path.name)}: SHA-256 of the bytes read back differs from {SUMS}'s "
            f"{sums[path.name][:12]}... (the destination's hash listing does not match its bytes)"
            for path in sorted(folder.iterdir()) if path.name in sums
            and sha256_file(path) != sums[path.name]]


def verify_remote(place: Place) -> int:
    """Re-verify the copy at ``place`` where it lies: its SHA256SUMS read from there, every file
    hashed there, its reloadable files read back; CheckFailed naming the first problem. Returns the
    count of files."""
    transport = transport_for(place)
    parent, _name = place.parent_and_name()
    transport.learn(parent)
    if SUMS not in transport.files(place):  # the same words as a local copy without SHA256SUMS
        raise BadInput(f"{place.child(SUMS)}: not found; is {place} a finished run folder?")
    with tempfile.TemporaryDirectory(prefix="kdkit-sums-") as scratch:
        listed = Path(scratch) / SUMS
        transport.fetch(place.child(SUMS), listed)
        sums = checksums.read_sums(
            Path(scratch), "run folder", f"is {place} a copy of a run folder?")
    # a run folder, not a checkpoint
    reload = any(name in sums for names in REQUIRED.values() for name in names)
    problems = remote_problems(transport, place, sums, reload=reload)
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CheckFailed(problems[0] + more)
    return len(sums)
