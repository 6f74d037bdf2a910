"""The rented machine, as the user lives it: RUN.md's blocks, run as written, on a host that has only the bundle.

A bundle of the session's image is copied into a fresh folder: no project checkout beside it, no kdkit on
PATH, pip's configuration ignored (no local wheels, no index: the host is offline except where a path needs
the lock's index, which a local folder of the locked files stands in for). The image is removed from the
engine first. Then every indented block of the path's sections of RUN.md runs in ``sh -e``, from the
bundle's folder, as a person would paste it. The verdict must be a PASS summary of the 12 pilot documents,
and the copy-out must verify from the copy. Any drift between RUN.md and reality fails here.

The kdkit path is the rented hour in order: kdkit installed offline, the user's ``../.env``, the acceptance test
in the image, `kdkit run --detach` followed by `kdkit status` and `kdkit wait`, then the evidence copied off the
machine and verified there: RUN.md's ``user@backup-host:kdkit-evidence`` is tests/sshd.py's OpenSSH server on
127.0.0.1 (a throwaway host key and user key, a free port, its client config named by KDKIT_SSH_CONFIG), and its
rclone form is the same server through rclone's sftp backend (RCLONE_CONFIG). It runs
on its own image (the project named ``kdkit-d26-rented``), so removing it never takes the session's image from a
test running beside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.reloadcheck import reload_problems
from kdkit.core.runfolder import RESULTS
from kdkit.core.runverify import read_run
from kdkit.probe.results.copyout import verify_copy
from tests.conftest import BASE, invoke
from tests.sshd import SshServer, missing_tools, running_as_root

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # no kdkit, no venv of the test session
# RUN.md's place off the machine, which the user replaces with theirs
BACKUP = "user@backup-host:kdkit-evidence"
RENTED = "kdkit-d26-rented"  # this module's own project and image name


def sections(text: str) -> dict[str, list[str]]:
    """RUN.md's ``## N. Title`` sections -> their indented blocks (a block ends at a line that is not indented)."""
    found: dict[str, list[str]] = {}
    title, block = None, []
    for line in [*text.splitlines(), ""]:
        if line.startswith("    ") and title is not None:
            block.append(line[4:])
            continue
        if block and title is not None:
            found[title].append("\n".join(block))
            block = []
        heading = re.match(r"## \d+\. (.*)", line)
        if heading:
            title = heading.group(1)
            found[title] = []
    return found


def blocks_of(text: str, *starts: str) -> list[str]:
    """The blocks of the sections whose titles start so, in the order given; each section must exist."""
    found = sections(text)
    picked = []
    for start in starts:
        titles = [t for t in found if t.startswith(start)]
        assert len(titles) == 1, f"RUN.md has no single section starting {start!r}: {list(found)}"
        assert found[titles[0]], f"RUN.md's section {titles[0]!r} has no command block"
        picked += found[titles[0]]
    return picked


def host_env(home: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": SYSTEM_PATH, "HOME": str(home), "LANG": "C.UTF-8", "PIP_CONFIG_FILE": os.devnull,
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}
    if "DOCKER_HOST" in os.environ:
        env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    assert shutil.which("kdkit",
                        path=env["PATH"]) is None, "the rented host must not have kdkit already"
    return env


def play(folder: Path, blocks: list[str], env: dict[str, str]) -> list[str]:
    """Run each block in ``sh -e`` from ``folder``, as pasted; every one must succeed. Returns their outputs."""
    outputs = []
    for block in blocks:
        done = subprocess.run(["sh", "-e", "-c", block], cwd=folder, env=env, capture_output=True,
                              text=True,
                              timeout=1200, check=False)
        assert done.returncode == 0, f"RUN.md block failed ({done.returncode}):\n{block}\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout + done.stderr)
    return outputs


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True,
                          check=check, timeout=600)


@pytest.fixture(scope="module")
def rented_built(docker_engine: None, locked: Path, wheelhouse: Path, ca_bundle: tuple[Path, bytes],
                 tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The session's locked project under this module's own name, and its image (built as the session's is)."""
    project = Path(shutil.copytree(locked, tmp_path_factory.mktemp("rented-project") / RENTED,
                                   ignore=shutil.ignore_patterns("runs")))
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    (project
     / "kdkit.json").write_text(json.dumps({**config, "name": RENTED}, indent=2), encoding="utf-8")
    result = invoke("build", project, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                    wheelhouse,
                    "--ca-bundle", ca_bundle[0], "--json")
    assert result.exit_code == 0, result.output
    return project, json.loads(result.stdout)


@pytest.fixture(scope="module")
def built(rented_built: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
    return rented_built[1]


@pytest.fixture(scope="module")
def made(rented_built: tuple[Path, dict[str, Any]], wheelhouse: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle, as `kdkit bundle` writes it on the machine that built the image; its lock's torch came from a
    folder of this machine (--torch-find-links), so it carries that file (--wheelhouse: local-wheels/)."""
    out = tmp_path_factory.mktemp("made") / "bundle"
    result = invoke("bundle", rented_built[0], "--out", out, "--json", "--wheelhouse", wheelhouse)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def backup_host(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    """The OpenSSH server of tests/sshd.py on 127.0.0.1 standing in for the user's backup host: (the place that
    replaces RUN.md's BACKUP, the environment its clients need: ssh's and rclone's configs, the folder the copies
    land in)."""
    if missing_tools() or not running_as_root():
        pytest.skip(
            "the SSH destination needs "
            f"{', '.join(missing_tools()) or 'root (the server logs in as root)'}")
    server = SshServer.start(tmp_path / "sshd")
    landing = tmp_path / "backup"
    landing.mkdir()
    try:
        yield (f"{server.target}:{landing}/kdkit-evidence",
               {"KDKIT_SSH_CONFIG": str(server.client_config),
                "RCLONE_CONFIG": str(server.rclone_config)}, landing)
    finally:
        server.stop()


@pytest.fixture
def image_gone(built: dict[str, Any], made: Path) -> Iterator[str]:
    """The session's image removed from the engine (its build cache kept); afterwards it is there again,
    with every tag it had, whatever the test did."""
    image_id = str(built["id"])
    tags = json.loads(docker("image", "inspect", "--format", "{{json .RepoTags}}", image_id).stdout)
    removed = docker("image", "rm", "--force", "--no-prune", image_id, check=False)
    assert removed.returncode == 0, f"cannot remove the image to play the rented host: {removed.stderr}"
    try:
        yield image_id
    finally:
        if docker("image", "inspect", image_id, check=False).returncode != 0:
            subprocess.run(f"zstd -q -dc {made / 'image.tar.zst'} | docker load",
                           shell=True, check=True)
        for tag in tags:
            docker("tag", image_id, tag)


def rented_copy(made: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The bundle as it arrives on the rented host: (its folder, a HOME with nothing in it)."""
    home = tmp_path / "home"
    home.mkdir()
    folder = Path(shutil.copytree(made, tmp_path / "rented" / "bundle", symlinks=True))
    return folder, home


def assert_verdict_and_evidence(folder: Path, evidence: Path | None = None) -> None:
    """One PASS run of the 12 pilot documents in project/runs, and its copy in ``evidence`` (default
    ../kdkit-evidence) verified and reloadable."""
    runs = [p for p in (folder / "project" / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    run = read_run(runs[0])
    assert (run.verdict, run.total, run.accepted, run.rejected) == ("pass", 12, 11, 1)
    ids = {json.loads(line)["id"]
           for line in (runs[0] / RESULTS).read_text(encoding="utf-8").splitlines()}
    assert len(ids) == 12
    copy = (evidence or folder.parent / "kdkit-evidence") / runs[0].name
    assert verify_copy(copy) > 0
    assert reload_problems(copy) == []
    assert (copy / "summary.json").read_bytes() == (runs[0] / "summary.json").read_bytes()


def play_accept(folder: Path, block: str, env: dict[str, str]) -> str:
    """RUN.md's acceptance block, as written: exit 0 and ACCEPT, or (a shared CPU machine's throughput wavers)
    exit 1 and DEGRADED, the judgement a person reads and acts on; never a block that cannot run."""
    done = subprocess.run(["sh", "-e", "-c", block], cwd=folder, env=env, capture_output=True,
                          text=True,
                          timeout=1200, check=False)
    said = done.stdout + done.stderr
    assert (done.returncode, "VERDICT: ACCEPT" in said) == (0, True) or (
        done.returncode == 1 and "VERDICT: DEGRADED" in said), f"{block}\n{said}"
    return said


def test_run_md_with_docker_through_kdkit_from_the_bundle_alone(made: Path, image_gone: str,
                                                                locked: Path,
                                                               backup_host: tuple[str,
                                                                                  dict[str, str],
                                                                                  Path],
                                                               tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    place, ssh_env, landing = backup_host
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    assert BACKUP in text and "--env-file ../.env" in text and "diagnose --accept" in text
    blocks = [block.replace(BACKUP, place)
              for block in blocks_of(text, "Check the copy", "With Docker, through kdkit")]
    env = host_env(home, **ssh_env)
    accept = [i for i, block in enumerate(blocks) if "diagnose --accept" in block]
    assert len(accept) == 1 and accept[0] < next(i for i, b in enumerate(blocks) if "--detach" in b)
    outputs = play(folder, blocks[:accept[0]], env)
    assert docker("image", "inspect",
                  image_gone, check=False).returncode == 0, "kdkit load did not load the image"
    # made on the host, beside the bundle, owner-only: never in the bundle
    secrets = folder.parent / ".env"
    assert secrets.is_file() and secrets.stat().st_mode & 0o077 == 0
    secrets.write_text(secrets.read_text(encoding="utf-8")
                       + "KD_RENTED_TOKEN=not-a-real-token\n", encoding="utf-8")
    outputs.append(play_accept(folder, blocks[accept[0]], env))
    outputs += play(folder, blocks[accept[0] + 1:], env)
    assert_verdict_and_evidence(folder, landing / "kdkit-evidence")
    assert "not-a-real-token" not in "".join(outputs)
    last = blocks[-1].splitlines()
    # the copy verified again where it lies, later, from anywhere
    play(folder, [f"{last[0]}\n{last[-1]}"], env)
    # RUN.md's rclone form, as its sentence gives it: the same server through rclone's sftp backend.
    rclone = re.search(r"With rclone: `([^`]*)`, then `([^`]*)`", text)
    assert rclone, "RUN.md gives no rclone form"
    run_id = next(p for p in (folder / "project" / "runs").iterdir() if p.is_dir()).name
    play(folder,
         [line.replace("RUN_ID", run_id).replace("myremote:kdkit-evidence",
                                                 f"kdsftp:{landing}/rclone")
          for line in rclone.groups()], env)
    assert verify_copy(landing / "rclone" / run_id) > 0
    # The campaign closes there too: the order made before renting, copied beside the bundle, and RUN.md's line.
    order = invoke("plan", locked, "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--hours",
                   "40",
                   "--save", folder.parent / "order.json")
    assert order.exit_code == 0, order.output
    close = re.search(r"`([^`]* close [^`]*)`", text)
    assert close, "RUN.md names no close command"
    play(folder, [close.group(1)], host_env(home))
    report = json.loads(
        (folder.parent / "kdkit-reports" / "campaign-report.json").read_text(encoding="utf-8"))
    assert report["runs"] and not [p for p in (folder / "project").rglob("*") if "report" in p.name]
    assert not [block for blocks in sections(text).values() for block in blocks if "chmod" in block]
    assert "pass" in "".join(outputs).lower()


def test_run_md_with_docker_only_runs_the_same_container_as_kdkit_run(made: Path, image_gone: str,
                                                                       tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    play(folder, blocks_of(text, "Check the copy", "With Docker only"), host_env(home))
    assert_verdict_and_evidence(folder)
    line = next(b for b in blocks_of(text, "With Docker only")
                if "docker run" in b).splitlines()[-1]
    for flag in ("--read-only", "--cap-drop ALL", "--security-opt no-new-privileges",
                 '--user "$kd_uid:$kd_gid"',
                 '--pids-limit "$kd_pids"', "target=/app/data/pilot,readonly", "target=/app/runs\"",
                 "--network none"):
        assert flag in line, (flag, line)


def test_run_md_without_docker_from_a_venv_made_from_the_lock(
    made: Path, wheelhouse: Path, tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    # The lock's index stood in for by a folder of the locked files but torch: torch, which no index has (the
    # lock's machine-local), comes from the bundle's own local-wheels/ (issue 31 §4).
    index = tmp_path / "index"
    index.mkdir()
    for path in wheelhouse.iterdir():
        if not path.name.startswith("torch-"):
            (index / path.name).symlink_to(path)
    assert sorted(p.name for p in (folder / "local-wheels").iterdir()) == sorted(
        p.name for p in wheelhouse.iterdir() if p.name.startswith("torch-"))
    assert "--find-links local-wheels -r project/requirements/cpu.txt" in text
    env = host_env(home, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(index))
    play(folder, blocks_of(text, "Check the copy", "Without Docker"), env)
    assert_verdict_and_evidence(folder)
