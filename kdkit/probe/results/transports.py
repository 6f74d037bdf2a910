"""The two ways a copy leaves the machine: SSH (rsync where both ends have it, else sftp) and
rclone.

Every program runs through kdkit.core.proc with an argv list; a command run by the remote shell is
built with shlex.quote around every path. SSH never prompts (BatchMode=yes), gives up on a silent
host (ConnectTimeout) and reads the user's ~/.ssh/config, or the file KDKIT_SSH_CONFIG names (``ssh
-F``). An SSH error (ssh's exit 255: unreachable, refused key, unknown host) and a remote rclone
cannot list are Unavailable (exit 3); a copy or a hash that fails once connected is CheckFailed
(exit 1). Each message names the destination, never a secret. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import IO

from kdkit.core import proc
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, CheckFailed, KdkitError, Unavailable
from kdkit.core.safetext import printable
from kdkit.probe.results.destinations import RCLONE, Place, config_args, staging_name

SSH_EXIT = 255
LINK = ".rclonelink"  # how rclone --links lists a symbolic link of its local backend
_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


def ssh_command() -> list[str]:
    config = os.environ.get("KDKIT_SSH_CONFIG")
    return ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15",
            *(["-F", config] if config else [])]


def _failed(place: Place, done: proc.Completed, what: str) -> KdkitError:
    line = printable(done.first_error_line())
    if done.returncode == SSH_EXIT:
        return Unavailable(
                   f"{place}: unreachable over SSH ({line}); check the host, the key and "
                   "~/.ssh/config")
    return CheckFailed(f"{place}: {what} failed ({line}); nothing local was changed")


def bad_staging(place: Place) -> BadInput:
    return BadInput(f"{place}: a link or a file where kdkit keeps its unverified copy; kdkit never "
                    "reuses it: remove it, or choose another DEST")


def digests_from(text: str) -> dict[str, str]:
    """``sha256sum``'s (and ``rclone hashsum``'s) lines as {name: digest}; names with './'
    trimmed."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line.strip("\r"))
        if match:
            found[match[2].removeprefix("./")] = match[1]
    return found


class SshTransport:
    """A folder on an SSH host: rsync when both ends have it, else sftp; hashes by the remote's
    sha256sum."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.rsync = False
        self.sha256sum = True

    def shell(self, script: str, input_text: str | None = None) -> proc.Completed:
        return proc.run([*ssh_command(), "--", self.host, script],
                        input_text=input_text, timeout=3600)

    def prepare(self, folder: Place, name: str) -> bool:
        """Make ``folder``; learn what the remote has; whether ``folder/name`` exists already
        (BadInput when its staging name is a link or not a folder)."""
        target, staging = shlex.quote(folder.child(name).path), shlex.quote(
            folder.child(staging_name(name)).path)
        script = (f"mkdir -p -- {shlex.quote(folder.path or '.')} || exit 3; if [ -e {target} ] || "
                  f"[ -L {target} ]; then echo EXISTS; fi; if [ -L {staging} ] || {{ [ -e "
                  f"{staging} ] && [ ! -d {staging} ]; }}; then echo BADSTAGING; fi; command -v "
                  "rsync >/dev/null 2>&1 && echo RSYNC; command -v sha256sum >/dev/null 2>&1 && "
                  "echo SHA256SUM; exit 0")
        done = self.shell(script)
        if not done.ok:
            raise _failed(folder, done, "making the destination folder")
        words = done.stdout.split()
        if "BADSTAGING" in words:
            raise bad_staging(folder.child(staging_name(name)))
        self.rsync = "RSYNC" in words and _local_rsync()
        self.sha256sum = "SHA256SUM" in words
        return "EXISTS" in words

    def learn(self, place: Place) -> None:
        """What the remote has, for a verification of a copy in ``place`` (nothing made there)."""
        done = self.shell("command -v sha256sum >/dev/null 2>&1 && echo SHA256SUM; exit 0")
        if not done.ok:
            raise _failed(place, done, "reaching the host")
        self.sha256sum = "SHA256SUM" in done.stdout.split()

    def upload(self, source: Path, staging: Place) -> None:
        """``source``'s files mirrored into ``staging`` (made, extra files removed)."""
        if self.rsync:
            rsh = shlex.join(ssh_command())
            done = proc.run(["rsync", "-a", "--delete", "--protect-args", "-e", rsh, "--",
                             f"{source}/",
                             f"{self.host}:{staging.path}/"], timeout=None)
        else:
            self.remove(staging)
            done = proc.run(["sftp", *ssh_command()[1:], "-b", "-", "--", self.host],
                            input_text=_sftp_batch(source, staging.path), timeout=None)
        if not done.ok:
            raise _failed(staging, done, "the copy")

    def put_text(self, folder: Place, name: str, text: str) -> None:
        done = self.shell(f"cat > {shlex.quote(folder.child(name).path)}", input_text=text)
        if not done.ok:
            raise _failed(folder.child(name), done, "writing the file")

    def hashes(self, folder: Place, names: list[str]) -> dict[str, str]:
        if not self.sha256sum:
            return {name: self._download_hash(folder.child(name)) for name in names}
        # one connection: the names go by stdin (NUL-separated), xargs gives them to sha256sum
        script = f"cd -- {shlex.quote(folder.path or '.')} && xargs -0 sha256sum --"
        done = self.shell(script, input_text="\0".join(names))
        if done.returncode == SSH_EXIT or (not done.stdout and not done.ok):
            raise _failed(folder, done, "hashing there (sha256sum)")
        return digests_from(done.stdout)

    def _download_hash(self, place: Place) -> str:
        digest = hashlib.sha256()
        try:
            for chunk in proc.stdout_chunks(
                [*ssh_command(), "--", self.host, f"cat -- {shlex.quote(place.path)}"]):
                digest.update(chunk)
        except CheckFailed:
            return ""
        return digest.hexdigest()

    def files(self, folder: Place) -> list[str]:
        done = self.shell(
                   f"cd -- {shlex.quote(folder.path or '.')} && find . \\( -type f -o -type l \\) "
                   "-print")
        if not done.ok:
            raise _failed(folder, done, "listing the copy")
        return sorted(line.removeprefix("./") for line in done.stdout.splitlines() if line.strip())

    def fetch(self, place: Place, target: Path) -> None:
        argv = [*ssh_command(), "--", self.host, f"cat -- {shlex.quote(place.path)}"]
        _stream(argv, target, place)

    def fetch_many(self, folder: Place, names: list[str], target: Path) -> None:
        """``names`` in ``folder`` read back into ``target`` in one connection (a tar stream, only
        those names taken from it, as regular files)."""
        script = f"cd -- {shlex.quote(folder.path or '.')} && tar -cf - -- {shlex.join(names)}"
        with tempfile.TemporaryFile() as archive:
            try:
                for chunk in proc.stdout_chunks([*ssh_command(), "--", self.host, script]):
                    archive.write(chunk)
            except CheckFailed as exc:
                why = printable(str(exc).rpartition(": ")[2])
                raise CheckFailed(f"{folder}: cannot be read back ({why})") from None
            archive.seek(0)
            _untar(archive, set(names), target)

    def publish(self, staging: Place, final: Place) -> None:
        source, target = shlex.quote(staging.path), shlex.quote(final.path)
        done = self.shell(f"if [ -e {target} ] || [ -L {target} ]; then echo EXISTS; exit 4; fi; "
                          f"mv -- {source} {target}")
        if not done.ok:
            raise _failed(final, done, "renaming the verified copy into place")

    def remove(self, place: Place) -> None:
        self.shell(f"rm -rf -- {shlex.quote(place.path)}")


def _untar(archive: IO[bytes], wanted: set[str], target: Path) -> None:
    with tarfile.open(fileobj=archive, mode="r|") as tar:
        for member in tar:
            source = tar.extractfile(member) if member.name in wanted and member.isfile() else None
            if source is not None:
                with (target / member.name).open("wb") as sink:
                    shutil.copyfileobj(source, sink)


def _local_rsync() -> bool:
    return any(os.access(Path(folder) / "rsync", os.X_OK)
               for folder in os.environ.get("PATH", "").split(os.pathsep)
               if folder)


def _sftp_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _sftp_batch(source: Path, target: str) -> str:
    """sftp's batch: the folders made, then each file put (a '-' before mkdir: an existing folder is
    fine)."""
    lines = [f"-mkdir {_sftp_quote(target)}"]
    for path in sorted(source.rglob("*")):
        name = path.relative_to(source).as_posix()
        if path.is_dir() and not path.is_symlink():
            lines.append(f"-mkdir {_sftp_quote(target + '/' + name)}")
        elif path.is_file():
            lines.append(f"put {_sftp_quote(str(path))} {_sftp_quote(target + '/' + name)}")
    return "\n".join(lines) + "\n"


def _stream(argv: list[str], target: Path, place: Place) -> None:
    try:
        with target.open("wb") as sink:
            for chunk in proc.stdout_chunks(argv):
                sink.write(chunk)
    except CheckFailed as exc:
        raise CheckFailed(
            f"{place}: cannot be read back ({printable(str(exc).rpartition(': ')[2])})") from None


class RcloneTransport:
    """A folder on an rclone remote: ``rclone sync`` into the staging name, ``rclone hashsum
    sha256`` there (or ``--download`` where the remote cannot hash), ``rclone moveto`` into
    place."""

    def __init__(self, config: str | None) -> None:
        self.base = ["rclone", *config_args(config), "--retries", "1", "--low-level-retries", "2",
                     "--contimeout", "15s"]

    def _run(self, *words: str, input_text: str | None = None) -> proc.Completed:
        return proc.run([*self.base, *words], input_text=input_text, timeout=None)

    def prepare(self, folder: Place, name: str) -> bool:
        # a local link: NAME.rclonelink
        done = self._run("lsf", "--max-depth", "1", "--links", _spec(folder))
        if done.returncode == 3:  # rclone: directory not found
            return False
        if not done.ok:
            line = printable(done.first_error_line())
            raise Unavailable(
                f"{folder}: the rclone remote cannot be listed ({line}); check the remote and its "
                "config")
        listed = {line.removesuffix(LINK) for line in done.stdout.splitlines()}
        if staging_name(name) in listed:  # a file or a link (a folder is listed with its '/')
            raise bad_staging(folder.child(staging_name(name)))
        return name in {line.rstrip("/") for line in listed}

    def learn(self, place: Place) -> None:
        self.prepare(place, ".")

    def upload(self, source: Path, staging: Place) -> None:
        done = self._run("sync", str(source), _spec(staging))
        if not done.ok:
            raise CheckFailed(f"{staging}: the copy failed ({printable(done.first_error_line())}); "
                              "nothing local was changed")

    def put_text(self, folder: Place, name: str, text: str) -> None:
        done = self._run("rcat", _spec(folder.child(name)), input_text=text)
        if not done.ok:
            raise CheckFailed(
                f"{folder.child(name)}: writing failed ({printable(done.first_error_line())})")

    def hashes(self, folder: Place, names: list[str]) -> dict[str, str]:
        try:
            found = self._hashsum(folder)
        # the remote cannot hash sha256 (S3, sftp without shell access): download and hash
        except CheckFailed:
            found = {}
        if any(name not in found for name in names if name):
            found = {**found, **self._hashsum(folder, "--download")}
        return found

    def _hashsum(self, folder: Place, *extra: str) -> dict[str, str]:
        done = self._run("hashsum", "sha256", *extra, _spec(folder))
        if not done.ok and not done.stdout:
            raise CheckFailed(
                f"{folder}: hashing there failed ({printable(done.first_error_line())})")
        return digests_from(done.stdout)

    def files(self, folder: Place) -> list[str]:
        done = self._run("lsf", "-R", "--files-only", _spec(folder))
        if not done.ok:
            raise CheckFailed(
                f"{folder}: listing the copy failed ({printable(done.first_error_line())})")
        return sorted(line for line in done.stdout.splitlines() if line.strip())

    def fetch(self, place: Place, target: Path) -> None:
        _stream([*self.base, "cat", _spec(place)], target, place)

    def fetch_many(self, folder: Place, names: list[str], target: Path) -> None:
        for name in names:
            self.fetch(folder.child(name), target / name)

    def publish(self, staging: Place, final: Place) -> None:
        parent, name = final.parent_and_name()
        if self.prepare(parent, name):
            raise CheckFailed(
                f"{final}: appeared while the copy was verified; the verified copy stays at "
                f"{staging}")
        done = self._run("moveto", _spec(staging), _spec(final))
        if not done.ok:
            raise CheckFailed(f"{final}: renaming the verified copy into place failed "
                              f"({printable(done.first_error_line())})")

    def remove(self, place: Place) -> None:
        self._run("purge", _spec(place))


def _spec(place: Place) -> str:
    return f"{place.host}:{place.path}"


Transport = SshTransport | RcloneTransport


def transport_for(place: Place) -> Transport:
    return (RcloneTransport(place.rclone_config) if place.kind == RCLONE
            else SshTransport(place.host))


__all__ = ["SUMS", "Transport", "digests_from", "transport_for"]
