"""RUN.md's `docker run` line is `kdkit run`'s container: the same spec, the host's facts computed by a shell.

The line RUN.md prints for a host kdkit has never seen is evaluated here by a real ``sh`` (its prelude,
then the line with ``docker`` replaced by a printer of its arguments), and the words Docker would receive
must be exactly those `kdkit run` gives the engine on this host (kdkit.machine.run's confinement, read
from the same host facts). A flag added to one and not the other fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from kdkit.config.shipped import DATA_ITEMS
from kdkit.docker_adapter import cli_arguments
from kdkit.image.container import container_spec, portable_line, portable_spec, project_mounts, shell_prelude
from kdkit.machine.run import HostFacts, confinement
from tests.conftest import REPO

IMAGE = "proj:cpu-0123456789ab"


def _meminfo_bytes() -> int:
    text = Path("/proc/meminfo").read_text(encoding="utf-8")
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    assert match
    return int(match.group(1)) * 1024


def _as_the_shell_passes_it(folder: Path, backend: str) -> list[str]:
    """The prelude and RUN.md's line run by sh in ``folder``; the arguments `docker` would have received."""
    line = portable_line(portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", backend), backend)
    assert line.startswith("docker run ")
    script = "\n".join([*shell_prelude("project/runs", backend), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=folder, capture_output=True, check=True)
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_run_md_line_gives_docker_the_words_kdkit_run_gives_the_engine(backend: str, tmp_path: Path) -> None:
    words = _as_the_shell_passes_it(tmp_path, backend)
    root_runs = os.getuid() == 0
    uid, gid = (10001, 10001) if root_runs else (os.getuid(), os.getgid())
    host = HostFacts(uid=os.getuid(), gid=os.getgid(), cpus=os.cpu_count() or 1, memory_bytes=_meminfo_bytes())
    access = {"gpus": "all"} if backend == "cuda" else {}
    spec = container_spec(IMAGE, project_mounts(tmp_path / "project", "data/pilot", "runs"),
                          confinement(host, uid, gid), access)
    assert words == cli_arguments(spec)[1:]
    assert (tmp_path / "project" / "runs").is_dir()
    if root_runs:  # root hands the runs folder to the image's user, never opens it to everyone
        info = (tmp_path / "project" / "runs").stat()
        assert (info.st_uid, info.st_mode & 0o002) == (10001, 0)


def test_rocm_line_collects_kfd_and_each_render_node_with_its_group() -> None:
    prelude = shell_prelude("project/runs", "rocm")
    line = portable_line(portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", "rocm"), "rocm")
    assert any("/dev/kfd /dev/dri/renderD*" in part and "--group-add" in part for part in prelude)
    assert line.endswith(f' "$@" {IMAGE}') and "--device /dev/dri " not in line and "seccomp" not in line


def test_wheel_force_include_is_the_shipped_data_list() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[tool.hatch.build.targets.wheel.force-include]\n", 1)[1].split("\n[", 1)[0]
    included = dict(re.findall(r'^"([^"]+)" = "([^"]+)"$', table, re.MULTILINE))
    assert included == {item: f"kdkit/_data/{item}" for item in DATA_ITEMS}
