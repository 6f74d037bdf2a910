"""`kdkit copy-out` to an SSH host (rsync, and sftp when rsync is missing) and to rclone remotes (sftp and local
backends), verified there; `copy-out --verify` of a remote copy; a checkpoint folder; the hostile cases: an
unreachable port, a wrong key, a full remote disk, one byte changed on the remote. A real OpenSSH server
(tests/sshd.py), real rsync and rclone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.probe.results.destinations import LOCAL, RCLONE, SSH, parse_place
from tests.conftest import invoke, tree_snapshot
from tests.sshd import SshServer, missing_tools, running_as_root

pytestmark = pytest.mark.skipif(bool(missing_tools()) or not running_as_root(),
                                reason="needs root and "
                                       f"{', '.join(missing_tools()) or 'nothing else'} (.ci/run "
                                       "installs openssh-server, rsync, rclone)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    started = SshServer.start(tmp_path_factory.mktemp("sshd"))
    yield started
    started.stop()


@pytest.fixture
def ssh_env(server: SshServer, monkeypatch: pytest.MonkeyPatch) -> SshServer:
    monkeypatch.setenv("KDKIT_SSH_CONFIG", str(server.client_config))
    monkeypatch.setenv("RCLONE_CONFIG", str(server.rclone_config))
    return server


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One closed run folder of the example project (made once; tests copy it, never change it)."""
    from kdkit.project.init import init_project

    root = tmp_path_factory.mktemp("proj") / "proj"
    init_project(root, backend="cpu")
    result = invoke("pilot", root, "--json")
    assert result.exit_code == 0, result.stderr
    return Path(json.loads(result.stdout)["run_dir"])


def test_the_destination_kinds_are_told_apart(ssh_env: SshServer) -> None:
    assert parse_place("./a:b").kind == LOCAL and parse_place("/x/y:z").kind == LOCAL
    assert parse_place("dir/sub:x").kind == LOCAL and parse_place("plain").kind == LOCAL
    assert parse_place("me@host:x").kind == SSH and parse_place("kdtest:x").kind == SSH
    assert parse_place("kdsftp:x").kind == RCLONE and parse_place("kdlocal:/tmp/x").kind == RCLONE
    assert invoke("copy-out", "x", "-host:y").exit_code == 2


@pytest.mark.parametrize("via", ["rsync", "sftp"])
def test_copy_to_ssh_is_verified_there_and_a_changed_byte_is_named(ssh_env: SshServer,
                                                                   closed_run: Path,
                                                                   tmp_path: Path, via: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if via == "sftp":  # a PATH without rsync: the copy goes by sftp
        tools = tmp_path / "bin"
        tools.mkdir()
        for tool in ("ssh", "sftp", "rclone"):
            (tools / tool).symlink_to(shutil.which(tool) or tool)
        monkeypatch.setenv("PATH", str(tools))
    dest = tmp_path / f"remote-{via}"
    before = tree_snapshot(closed_run)
    result = invoke("copy-out", closed_run, f"{ssh_env.target}:{dest}")
    assert result.exit_code == 0, result.stderr
    copy = dest / closed_run.name
    assert tree_snapshot(copy) == before and tree_snapshot(closed_run) == before
    assert not (dest / f".{closed_run.name}.kdkit-partial").exists()
    again = invoke("copy-out", closed_run, f"{ssh_env.target}:{dest}")
    assert again.exit_code == 2 and "exists" in again.stderr
    place = f"{ssh_env.target}:{copy}"
    assert invoke("copy-out", "--verify", place).exit_code == 0
    data = bytearray((copy / "results.jsonl").read_bytes())
    data[5] ^= 1
    (copy / "results.jsonl").write_bytes(bytes(data))
    failed = invoke("copy-out", "--verify", place)
    assert failed.exit_code == 1 and f"{place}/results.jsonl: SHA-256" in failed.stderr, failed.stderr


def test_copy_to_rclone_sftp_and_local_and_a_changed_byte(ssh_env: SshServer, closed_run: Path,
                                                          tmp_path: Path) -> None:
    for remote in ("kdsftp", "kdlocal"):
        dest = tmp_path / remote
        result = invoke("copy-out", closed_run, f"{remote}:{dest}")
        assert result.exit_code == 0, result.stderr
        copy = dest / closed_run.name
        assert tree_snapshot(copy) == tree_snapshot(closed_run)
        place = f"{remote}:{copy}"
        assert invoke("copy-out", "--verify", place).exit_code == 0
        (copy / "summary.md").write_text((copy / "summary.md").read_text() + "x")
        failed = invoke("copy-out", "--verify", place)
        assert failed.exit_code == 1 and f"{place}/summary.md: SHA-256" in failed.stderr, failed.stderr


def test_a_resealed_copy_that_cannot_be_reloaded_is_refused_remotely(ssh_env: SshServer,
                                                                     closed_run: Path,
                                                                    tmp_path: Path) -> None:
    result = invoke("copy-out", closed_run, f"{ssh_env.target}:{tmp_path}")
    assert result.exit_code == 0, result.stderr
    copy = tmp_path / closed_run.name
    lines = (copy / "results.jsonl").read_text().splitlines()
    (copy / "results.jsonl").write_text("\n".join([lines[0][:-3], *lines[1:]]) + "\n")
    subprocess.run([
        "sh", "-c", "sha256sum $(sed 's/^[0-9a-f]*  //' SHA256SUMS) > S && mv S SHA256SUMS"],
                   cwd=copy, check=True)
    failed = invoke("copy-out", "--verify", f"{ssh_env.target}:{copy}")
    assert failed.exit_code == 1 and "results.jsonl:1" in failed.stderr, failed.stderr


def test_a_checkpoint_folder_travels_with_sums_written_into_the_copy(
    ssh_env: SshServer, tmp_path: Path) -> None:
    ckpt = tmp_path / "step-1000"
    (ckpt / "shard").mkdir(parents=True)
    (ckpt / "model.bin").write_bytes(os.urandom(4096))
    (ckpt / "shard" / "a b.txt").write_text("weights")
    before = tree_snapshot(ckpt)
    for dest in (f"{ssh_env.target}:{tmp_path / 'ssh'}", f"kdsftp:{tmp_path / 'rc'}",
                 str(tmp_path / "local")):
        result = invoke("copy-out", ckpt, dest)
        assert result.exit_code == 0, result.stderr
    assert tree_snapshot(ckpt) == before and not (ckpt / "SHA256SUMS").exists()
    for copy in (tmp_path / "ssh" / "step-1000", tmp_path / "rc" / "step-1000",
                 tmp_path / "local" / "step-1000"):
        assert "shard/a b.txt" in (copy / "SHA256SUMS").read_text()
        assert subprocess.run(
            ["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=copy).returncode == 0
    assert invoke(
        "copy-out", "--verify", f"{ssh_env.target}:{tmp_path / 'ssh' / 'step-1000'}").exit_code == 0
    assert invoke("copy-out", "--verify", tmp_path / "local" / "step-1000").exit_code == 0
    (tmp_path / "rc" / "step-1000" / "model.bin").write_bytes(b"changed")
    failed = invoke("copy-out", "--verify", f"kdsftp:{tmp_path / 'rc' / 'step-1000'}")
    assert failed.exit_code == 1 and "step-1000/model.bin: SHA-256" in failed.stderr, failed.stderr


def test_unreachable_and_wrong_key_exit_3_naming_the_destination(ssh_env: SshServer,
                                                                 closed_run: Path,
                                                                 tmp_path: Path) -> None:
    closed = tmp_path / "closed_config"
    closed.write_text(ssh_env.client_config.read_text().replace(f"Port {ssh_env.port}", "Port 1"))
    os.environ["KDKIT_SSH_CONFIG"] = str(closed)
    result = invoke("copy-out", closed_run, f"{ssh_env.target}:{tmp_path}/d")
    assert result.exit_code == 3 and f"{ssh_env.target}:{tmp_path}/d: unreachable" in result.stderr
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = tmp_path / "wrong_config"
    wrong.write_text(ssh_env.client_config.read_text().replace(str(ssh_env.user_key), str(other)))
    os.environ["KDKIT_SSH_CONFIG"] = str(wrong)
    result = invoke("copy-out", closed_run, f"{ssh_env.target}:{tmp_path}/d")
    assert result.exit_code == 3 and "unreachable" in result.stderr and "Permission denied" in result.stderr
    assert not (tmp_path / "d").exists() and (closed_run / "SHA256SUMS").is_file()
    rclone_closed = tmp_path / "rclone.conf"
    rclone_closed.write_text(
        ssh_env.rclone_config.read_text().replace(f"port = {ssh_env.port}", "port = 1"))
    result = invoke("copy-out", closed_run,
                    f"kdsftp:{tmp_path}/d", "--rclone-config", rclone_closed)
    assert result.exit_code == 3 and f"kdsftp:{tmp_path}/d: the rclone remote cannot be listed" in result.stderr


def test_a_full_remote_disk_fails_and_leaves_no_final_copy(ssh_env: SshServer, closed_run: Path,
                                                           tmp_path: Path) -> None:
    disk = tmp_path / "small"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root and mount rights)")
    try:
        (disk / "filler").write_bytes(b"x" * 56_000)  # two 4 KiB pages left: the copy needs more
        big = tmp_path / "big"
        shutil.copytree(closed_run, big / closed_run.name)
        result = invoke("copy-out", big / closed_run.name, f"{ssh_env.target}:{disk}")
        assert result.exit_code == 1 and f"{ssh_env.target}:{disk}" in result.stderr, result.stderr
        assert sorted(p.name for p in disk.iterdir()) == ["filler"]
        assert tree_snapshot(big / closed_run.name) == tree_snapshot(closed_run)
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_copy_to_during_a_run_then_the_final_verified_copy(ssh_env: SshServer, closed_run: Path,
                                                           tmp_path: Path) -> None:
    """kdkit run --copy-to's host side: an open folder appearing under runs/ is synced (complete lines only) to
    DEST/.<id>.kdkit-partial while it grows; at the end the closed folder is copied, verified there, renamed."""
    from kdkit.machine.copyto import copy_during

    runs, dest, warnings, said = tmp_path / "runs", tmp_path / "dest", [], []
    runs.mkdir()
    open_run = runs / closed_run.name
    with copy_during(f"{ssh_env.target}:{dest}", 1, runs, None, warnings.append) as copier:
        shutil.copytree(closed_run, open_run)
        (open_run / "SHA256SUMS").unlink()
        with (open_run / "results.jsonl").open("a") as results:
            results.write('{"id": "half')
        partial = dest / f".{closed_run.name}.kdkit-partial"
        for _ in range(600):
            if copier.copies:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert copier.copies and not warnings, warnings
    assert (partial / "results.jsonl").read_bytes() == (closed_run / "results.jsonl").read_bytes()
    shutil.rmtree(open_run)
    shutil.copytree(closed_run, open_run)
    assert copier.finish([open_run], 0, said.append) == 0, said
    assert tree_snapshot(dest
                         / closed_run.name) == tree_snapshot(closed_run) and not partial.exists()
    assert said[-1].startswith(
        f"Copied to {ssh_env.target}:{dest}/{closed_run.name}, verified there")
    failing = copy_during(f"{ssh_env.target}:{dest}", 1, runs, [closed_run.name], warnings.append)
    assert failing.finish([open_run], 0, said.append) == 1 and "exists" in said[-1]


def test_the_pilots_copy_to_accepts_an_ssh_destination(ssh_env: SshServer, tmp_path: Path) -> None:
    from kdkit.project.init import init_project

    root = init_project(tmp_path / "proj", backend="cpu")
    result = invoke("pilot", root, "--json", "--copy-to", f"{ssh_env.target}:{tmp_path / 'ev'}")
    summary = json.loads(result.stdout)
    assert result.exit_code == 0 and summary["copy"]["verified"] is True, result.stderr
    copy = tmp_path / "ev" / summary["run_id"]
    assert summary["copy"]["path"] == f"{ssh_env.target}:{copy}"
    assert tree_snapshot(copy) == tree_snapshot(Path(summary["run_dir"]))


def test_a_file_kind_runs_declared_outputs_travel_to_ssh_and_rclone(ssh_env: SshServer,
                                                                    project: Path,
                                                                     tmp_path: Path) -> None:
    """outputs/ is listed in the run's SHA256SUMS: each output file is copied and hashed where the copy lies."""
    from tests.probe.pilot.test_file_output import DOCS, make, pilot

    make(project, DOCS)
    code, summary = pilot(project, "--copy-to", f"{ssh_env.target}:{tmp_path / 'ssh'}")
    assert code == 0 and summary["copy"]["verified"] is True, summary
    run_dir = Path(summary["run_dir"])
    copy = tmp_path / "ssh" / run_dir.name
    assert (copy / "outputs" / "f-05" / "result.txt").read_text() == "XXXXXX"
    assert tree_snapshot(copy) == tree_snapshot(run_dir)
    assert invoke("copy-out", run_dir, f"kdsftp:{tmp_path / 'rc'}").exit_code == 0
    copy = tmp_path / "rc" / run_dir.name
    (copy / "outputs" / "f-05" / "result.txt").write_text("XXXXXY")
    failed = invoke("copy-out", "--verify", f"kdsftp:{copy}")
    assert failed.exit_code == 1 and "outputs/f-05/result.txt: SHA-256" in failed.stderr, failed.stderr


# --- the hostile tester's cases (issue 26 item 5) ---


def test_bytes_read_back_are_hashed_here_whatever_the_remote_listing_says(tmp_path: Path) -> None:
    """A remote sha256sum that lies passes the first look; the reload's second look hashes the downloaded bytes."""
    from kdkit.core.jsonio import sha256_file
    from kdkit.probe.results.destinations import Place
    from kdkit.probe.results.remote import downloaded_mismatches

    folder = tmp_path / "read-back"
    folder.mkdir()
    (folder / "summary.md").write_text("# edited on the remote\n")
    (folder / "params.json").write_text("{}")
    # the listing says so
    forged = {"summary.md": "a" * 64, "params.json": sha256_file(folder / "params.json")}
    place = Place(SSH, "/ev/RUN", "me@host")
    problems = downloaded_mismatches(folder, forged, place)
    assert len(problems) == 1 and problems[0].startswith(
        "me@host:/ev/RUN/summary.md: SHA-256 of the bytes read back")
    forged["summary.md"] = sha256_file(folder / "summary.md")
    assert downloaded_mismatches(folder, forged, place) == []


def test_an_open_run_folder_is_refused_and_a_checkpoint_folder_still_travels(closed_run: Path,
                                                                             tmp_path: Path) -> None:
    open_run = tmp_path / "runs" / closed_run.name
    shutil.copytree(closed_run, open_run)
    (open_run / "SHA256SUMS").unlink()
    for dest in (str(tmp_path / "ev"), "kdlocal:" + str(tmp_path / "rc")):
        result = invoke("copy-out", open_run, dest)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert f"{open_run}: a run folder that is not closed (no SHA256SUMS); wait for its end" in result.stderr
    (open_run / "params.json").unlink()
    (open_run / "heartbeat.json").write_text("{}")
    assert invoke("copy-out", open_run, tmp_path / "ev").exit_code == 2
    assert not (tmp_path / "ev").exists() or not any((tmp_path / "ev").iterdir())
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.bin").write_bytes(b"w")
    assert invoke("copy-out", ckpt, tmp_path / "ev").exit_code == 0


@pytest.mark.parametrize("name", ["a\nb.bin", "a\\b.bin", "tab\tname"])
def test_a_file_name_sha256sums_cannot_list_is_refused_up_front(tmp_path: Path, name: str) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / name).write_bytes(b"w")
    result = invoke("copy-out", ckpt, tmp_path / "ev")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "a file name SHA256SUMS cannot list" in result.stderr and "copy again" not in result.stderr
    assert "kdkit-" not in result.stderr and not (tmp_path / "ev" / "ckpt").exists()


def test_a_staging_name_that_is_a_link_or_a_file_is_never_followed(ssh_env: SshServer,
                                                                   closed_run: Path,
                                                                   tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious")
    dest = tmp_path / "dest"
    dest.mkdir()
    staging = dest / f".{closed_run.name}.kdkit-partial"
    staging.symlink_to(victim)
    for where in (f"{ssh_env.target}:{dest}", f"kdlocal:{dest}"):
        result = invoke("copy-out", closed_run, where)
        assert result.exit_code == 2 and f"{staging.name}: a link or a file where kdkit keeps" in result.stderr, \
            (where, result.stderr)
    staging.unlink()
    staging.write_text("a file")
    for where in (f"{ssh_env.target}:{dest}", f"kdsftp:{dest}"):
        result = invoke("copy-out", closed_run, where)
        assert result.exit_code == 2 and f"{staging.name}: a link or a file" in result.stderr, (
            where, result.stderr)
    assert sorted(p.name
                  for p in victim.iterdir()) == ["keep.txt"] and sorted(dest.iterdir()) == [staging]
    staging.unlink()
    staging.symlink_to(victim)
    from kdkit.core.errors import BadInput
    from kdkit.machine.copyto import copy_during

    with copy_during(str(dest), 1, tmp_path, [closed_run.name], print) as copier, \
            pytest.raises(BadInput, match="a link or a file"):
        copier.copy_open(closed_run)
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize(("dest", "words"), [
    ("me:s3cr3t@host:ev", "a password in DEST is never used; use an SSH key: user@host:path"),
    ("me:s3cr3t@host", "a password in DEST is never used"),
    (":s3,access_key_id=s3cr3t:bucket/ev", "on-the-fly remote"),
    ("sftp://me:s3cr3t@host/ev",
     "DEST: a URL is not a destination; use user@host:path or an rclone remote:path"),
    ("me@host:ev\ns3cr3t", "control character"),
    ("me@host:~other/ev", "'~user' paths are not expanded"),
])
def test_destinations_refused_without_echo(dest: str, words: str, tmp_path: Path) -> None:
    result = invoke("copy-out", tmp_path, dest)
    assert result.exit_code == 2 and words in result.stderr and "s3cr3t" not in result.stderr, result.stderr
    assert "other" not in result.stderr or "~other" not in dest


def test_ssh_home_paths_and_a_missing_rclone_config(tmp_path: Path) -> None:
    assert parse_place("me@host:~/ev").path == "ev" and parse_place("me@host:~").path == ""
    missing = tmp_path / "no-such.conf"
    result = invoke("copy-out", tmp_path, "kdsftp:ev", "--rclone-config", missing)
    assert result.exit_code == 2 and f"--rclone-config {missing}: not found" in result.stderr, result.stderr


def test_the_scratch_folder_goes_also_when_the_run_ends_by_an_exception(tmp_path: Path) -> None:
    from kdkit.machine.copyto import copy_during

    copier = copy_during(str(tmp_path / "ev"), 300, tmp_path, ["x"], print)
    assert copier.scratch is not None and copier.scratch.is_dir()
    with pytest.raises(RuntimeError), copier:
        raise RuntimeError("the run broke")
    assert not copier.scratch.exists()


def test_verify_of_a_copy_without_sums_is_exit_2_remote_as_local(ssh_env: SshServer,
                                                                 closed_run: Path,
                                                                 tmp_path: Path) -> None:
    copy = tmp_path / closed_run.name
    shutil.copytree(closed_run, copy)
    (copy / "SHA256SUMS").unlink()
    local = invoke("copy-out", "--verify", copy)
    assert local.exit_code == 2 and f"{copy}/SHA256SUMS: not found; is {copy} a finished run folder?" in local.stderr
    for place in (f"{ssh_env.target}:{copy}", f"kdsftp:{copy}"):
        remote = invoke("copy-out", "--verify", place)
        assert remote.exit_code == 2, remote.stderr
        assert f"{place}/SHA256SUMS: not found; is {place} a finished run folder?" in remote.stderr, remote.stderr
