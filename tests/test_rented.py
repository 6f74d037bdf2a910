"""The rented machine, as the user lives it: RUN.md's blocks, run as written, on a host that has only the bundle.

A bundle of the session's image is copied into a fresh folder: no project checkout beside it, no kdkit on
PATH, pip's configuration ignored (no local wheels, no index: the host is offline except where a path needs
the lock's index, which a local folder of the locked files stands in for). The image is removed from the
engine first. Then every indented block of the path's sections of RUN.md runs in ``sh -e``, from the
bundle's folder, as a person would paste it. The verdict must be a PASS summary of the 12 pilot documents,
and the copy-out must verify from the copy. Any drift between RUN.md and reality fails here.
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

from kdkit.core.runfolder import RESULTS, read_run
from kdkit.probe.results.copyout import verify_copy
from tests.conftest import invoke

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"  # no kdkit, no venv of the test session


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
    assert shutil.which("kdkit", path=env["PATH"]) is None, "the rented host must not have kdkit already"
    return env


def play(folder: Path, blocks: list[str], env: dict[str, str]) -> list[str]:
    """Run each block in ``sh -e`` from ``folder``, as pasted; every one must succeed. Returns their outputs."""
    outputs = []
    for block in blocks:
        done = subprocess.run(["sh", "-e", "-c", block], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=1200, check=False)
        assert done.returncode == 0, f"RUN.md block failed ({done.returncode}):\n{block}\n{done.stdout}{done.stderr}"
        outputs.append(done.stdout + done.stderr)
    return outputs


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=600)


@pytest.fixture(scope="module")
def made(built: dict[str, Any], locked: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle, as `kdkit bundle` writes it on the machine that built the image."""
    out = tmp_path_factory.mktemp("made") / "bundle"
    result = invoke("bundle", locked, "--out", out, "--json")
    assert result.exit_code == 0, result.output
    return out


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
            subprocess.run(f"zstd -q -dc {made / 'image.tar.zst'} | docker load", shell=True, check=True)
        for tag in tags:
            docker("tag", image_id, tag)


def rented_copy(made: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The bundle as it arrives on the rented host: (its folder, a HOME with nothing in it)."""
    home = tmp_path / "home"
    home.mkdir()
    folder = Path(shutil.copytree(made, tmp_path / "rented" / "bundle", symlinks=True))
    return folder, home


def assert_verdict_and_evidence(folder: Path) -> None:
    """One PASS run of the 12 pilot documents in project/runs, and its copy in ../kdkit-evidence verified."""
    runs = [p for p in (folder / "project" / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    run = read_run(runs[0])
    assert (run.verdict, run.total, run.accepted, run.rejected) == ("pass", 12, 11, 1)
    ids = {json.loads(line)["id"] for line in (runs[0] / RESULTS).read_text(encoding="utf-8").splitlines()}
    assert len(ids) == 12
    copy = folder.parent / "kdkit-evidence" / runs[0].name
    assert verify_copy(copy) > 0
    assert (copy / "summary.json").read_bytes() == (runs[0] / "summary.json").read_bytes()


def test_run_md_with_docker_through_kdkit_from_the_bundle_alone(made: Path, image_gone: str, locked: Path,
                                                               tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    blocks = blocks_of(text, "Check the copy", "With Docker, through kdkit")
    outputs = play(folder, blocks, host_env(home))
    assert docker("image", "inspect", image_gone, check=False).returncode == 0, "kdkit load did not load the image"
    assert_verdict_and_evidence(folder)
    play(folder, blocks[-1:], host_env(home))  # the evidence block pasted again: nothing new, nothing refused
    # The campaign closes there too: the order made before renting, copied beside the bundle, and RUN.md's line.
    order = invoke("plan", locked, "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--hours", "40",
                   "--save", folder.parent / "order.json")
    assert order.exit_code == 0, order.output
    close = re.search(r"`([^`]* close [^`]*)`", text)
    assert close, "RUN.md names no close command"
    play(folder, [close.group(1)], host_env(home))
    report = json.loads((folder.parent / "kdkit-reports" / "campaign-report.json").read_text(encoding="utf-8"))
    assert report["runs"] and not [p for p in (folder / "project").rglob("*") if "report" in p.name]
    assert not [block for blocks in sections(text).values() for block in blocks if "chmod" in block]
    assert "PASS" in "".join(outputs)


def test_run_md_with_docker_only_runs_the_same_container_as_kdkit_run(made: Path, image_gone: str,
                                                                       tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    play(folder, blocks_of(text, "Check the copy", "With Docker only"), host_env(home))
    assert_verdict_and_evidence(folder)
    line = next(b for b in blocks_of(text, "With Docker only") if "docker run" in b).splitlines()[-1]
    for flag in ("--read-only", "--cap-drop ALL", "--security-opt no-new-privileges", '--user "$kd_uid:$kd_gid"',
                 '--pids-limit "$kd_pids"', "target=/app/data/pilot,readonly", "target=/app/runs\"",
                 "--network none"):
        assert flag in line, (flag, line)


def test_run_md_without_docker_from_a_venv_made_from_the_lock(made: Path, wheelhouse: Path, tmp_path: Path) -> None:
    folder, home = rented_copy(made, tmp_path)
    text = (folder / "RUN.md").read_text(encoding="utf-8")
    # The lock's index (PyTorch's, out of reach here) stood in for by a folder of exactly the locked files.
    env = host_env(home, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse))
    play(folder, blocks_of(text, "Check the copy", "Without Docker"), env)
    assert_verdict_and_evidence(folder)
