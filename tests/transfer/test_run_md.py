"""RUN.md's `docker run` line is `kdkit run`'s container: the same spec, the host's facts computed by a shell.

The line RUN.md prints for a host kdkit has never seen is evaluated here by a real ``sh`` (its prelude,
then the line with ``docker`` replaced by a printer of its arguments), and the words Docker would receive
must be exactly those `kdkit run` gives the engine on this host (kdkit.machine.run's confinement, read
from the same host facts). A flag added to one and not the other fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kdkit.config.shipped import DATA_ITEMS
from kdkit.docker_adapter import cli_arguments
from kdkit.image.container import container_spec, portable_line, portable_spec, project_mounts, shell_prelude
from kdkit.machine.host import HostFacts, rocm_access
from kdkit.machine.run import confinement
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


FAKE_DEV = ("mount -t tmpfs none /dev && mkdir /dev/dri && touch /dev/kfd /dev/dri/renderD128 /dev/dri/renderD129 "
            "&& chgrp 44 /dev/dri/renderD128 /dev/dri/renderD129")  # /dev/kfd stays root's: no --group-add 0


def test_rocm_line_collects_kfd_and_each_render_node_with_the_groups_kdkit_run_adds(tmp_path: Path) -> None:
    """Played in a private mount namespace whose /dev has an AMD GPU's nodes (this machine has none)."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give a private /dev the nodes of an AMD GPU")
    line = portable_line(portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", "rocm"), "rocm")
    script = "\n".join([FAKE_DEV, *shell_prelude("project/runs", "rocm"), "printf '%s\\0' \"$@\""])
    done = subprocess.run(["unshare", "-m", "sh", "-e", "-c", script], cwd=tmp_path, capture_output=True, check=False)
    if done.returncode and b"unshare" in done.stderr:
        pytest.skip(f"unshare -m refused here: {done.stderr.decode().strip()}")
    assert done.returncode == 0, done.stderr
    nodes = ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    access = rocm_access(HostFacts(uid=0, gid=0, kfd=True, render_nodes=nodes, device_gids=[44]), None)
    expected = [word for device in access["devices"] for word in ("--device", device)]
    expected += [word for group in access["group_add"] for word in ("--group-add", group)]
    assert done.stdout.decode().split("\0")[:-1] == expected
    assert line.endswith(f' "$@" {IMAGE}') and "seccomp" not in line


def test_a_path_of_the_project_cannot_run_anything_in_the_line(tmp_path: Path) -> None:
    """Only the prelude's variables and $PWD expand: a pilot inputs folder named like a command stays a name."""
    inputs = "data/pi$(touch pwned)`touch pwned2`$HOME"
    line = portable_line(portable_spec(IMAGE, "$PWD/project", inputs, "runs", "cpu"), "cpu")
    script = "\n".join([*shell_prelude("project/runs", "cpu"), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    mount = next(w for w in done.stdout.decode().split("\0") if w.startswith("type=bind") and "readonly" in w)
    assert mount == f'type=bind,"source={tmp_path}/project/{inputs}","target=/app/{inputs}",readonly'
    assert not list(tmp_path.glob("pwned*"))


def test_wheel_force_include_is_the_shipped_data_list() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[tool.hatch.build.targets.wheel.force-include]\n", 1)[1].split("\n[", 1)[0]
    included = dict(re.findall(r'^"([^"]+)" = "([^"]+)"$', table, re.MULTILINE))
    assert included == {item: f"kdkit/_data/{item}" for item in DATA_ITEMS}


def test_the_model_folder_the_pilot_config_names_is_mounted_read_only_as_kdkit_run_mounts_it(tmp_path: Path) -> None:
    """A pilot config naming ``"model": {"path": ...}``: the bundle records the folder (by kdkit run's own rule,
    kdkit.image.container.named_mounts), RUN.md's line mounts it read-only, one shell word where only $PWD
    expands, and the shell gives Docker exactly the words `kdkit run` gives the engine."""
    import json

    from kdkit.config.project import load_project
    from kdkit.image.container import named_mounts
    from kdkit.project.init import init_project
    from kdkit.transfer.bundle import _named_mounts
    from kdkit.transfer.runmd import run_md

    folder = tmp_path.resolve()
    root = init_project(folder / "project", name="proj", backend="cpu")
    (root / "models/enc").mkdir(parents=True)
    (root / "models/enc/weights.bin").write_bytes(b"\x00weights")
    config = json.loads((root / "config/pilot.json").read_text(encoding="utf-8"))
    (root / "config/pilot.json").write_text(json.dumps({**config, "model": {"path": "models/enc"}}), encoding="utf-8")
    project = load_project(root)
    recorded = _named_mounts(project)
    assert recorded == ["models/enc"]
    word = r'"type=bind,\"source=$PWD/project/models/enc\",target=/app/models/enc,readonly"'  # as the inputs'
    info = {"project": "proj", "backend": "cpu", "kdkit_version": "0", "created": "2026-12-03T00:00:00Z",
            "revision": None, "python": "3.11", "lock": "requirements/cpu.txt", "pylock": None,
            "inputs": "data/pilot", "runs": "runs", "mounts": recorded, "kdkit_wheels": None,
            "image": {"ref": IMAGE, "id": "sha256:" + "0" * 64, "compressor": "zstd", "file": "image.tar.zst"}}
    (line,) = [ln for ln in run_md(info).splitlines() if ln.lstrip().startswith("docker run ")]
    assert f" --mount {word} " in line, line
    old = run_md({**info, "mounts": []})  # a bundle.json without it (or naming nothing) mounts only the two
    assert "models/enc" not in old and "/app/runs" in old

    line = portable_line(portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", "cpu", recorded), "cpu")
    script = "\n".join([*shell_prelude("project/runs", "cpu"), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=folder, capture_output=True, check=True)
    root_runs = os.getuid() == 0
    uid, gid = (10001, 10001) if root_runs else (os.getuid(), os.getgid())
    host = HostFacts(uid=os.getuid(), gid=os.getgid(), cpus=os.cpu_count() or 1, memory_bytes=_meminfo_bytes())
    mounts = project_mounts(root, "data/pilot", "runs") + named_mounts(project, project.pilot_config(),
                                                                       root / "data/pilot")
    spec = container_spec(IMAGE, mounts, confinement(host, uid, gid), {})
    assert done.stdout.decode().split("\0")[:-1] == cli_arguments(spec)[1:]
    assert f'type=bind,"source={root}/models/enc",target=/app/models/enc,readonly' in cli_arguments(spec)


def test_run_md_teaches_the_rented_hour_in_order() -> None:
    """Issue 26 §6: verify the bundle, install kdkit offline, the user's .env, diagnose --accept, run --detach then
    status and wait, the evidence copied off the machine and verified there; the local copy only as a fallback."""
    from kdkit.transfer.runmd import run_md
    from tests.config.test_hostile_config_values import _info
    from tests.transfer.test_rented import sections

    text = run_md(_info(""))
    found = sections(text)
    first = next(blocks for title, blocks in found.items() if title.startswith("Check the copy"))
    assert first == ["sha256sum -c --quiet SHA256SUMS"]
    kdkit = "\n".join(next(blocks for title, blocks in found.items() if title.startswith("With Docker, through")))
    steps = ["--no-index --find-links kdkit-wheels", "-m kdkit load .", "> ../.env",
             "-- kdkit diagnose --accept --expect cpu", "--env-file ../.env --detach --json > ../kdkit-run.json",
             'status "$run_id" --project project', 'wait "$run_id" --project project',
             'copy-out project/runs/"$run_id" user@backup-host:kdkit-evidence',
             'copy-out --verify user@backup-host:kdkit-evidence/"$run_id"']
    at = [kdkit.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dict(zip(steps, at, strict=True))
    assert "../kdkit-evidence" not in kdkit  # a copy on the same machine is named in the prose, as a fallback only
    assert "password manager" in text and "dashboard" in text and "lost with the machine" in text
    assert "myremote:kdkit-evidence" in text  # the rclone form


@pytest.mark.parametrize("image", [True, False])
def test_a_lock_with_a_machine_local_torch_gets_no_install_block_that_cannot_work(image: bool) -> None:
    """Issue 31 §4: a lock whose torch came from a local folder (the header's machine-local) made RUN.md's
    section without Docker run `pip install -r` against an index that has no such file. It now says so, and
    what to do instead; a lock without machine-local pins keeps the block."""
    from kdkit.transfer.runmd import run_md
    from tests.config.test_hostile_config_values import _info
    from tests.transfer.test_rented import sections

    info = _info("")
    info = {**info, "image": info["image"] if image else None}
    plain = sections(run_md(info))
    (title,) = [t for t in plain if t.startswith("Without Docker")]
    assert any("--require-hashes" in line for line in plain[title])
    text = run_md({**info, "machine_local": ["torch==2.13.0+cpu"]})
    found = sections(text)
    (title,) = [t for t in found if t.startswith("Without Docker")]
    assert title == "Without Docker: not possible with this lock" and found[title] == []
    assert "pins torch==2.13.0+cpu from a folder on the machine that locked it" in text
    assert ("Use the image (above)" if image else "Bundle again with the image (without --no-image)") in text
    assert "-r project/requirements/" not in text.split("Without Docker: not possible", 1)[1]


def test_a_bundle_carrying_the_machine_local_files_installs_them_from_its_own_folder() -> None:
    """Issue 31 §4, the other way: with `kdkit bundle --wheelhouse`, local-wheels/ holds torch's file and the
    venv line looks there too (the rest still from the lock's index)."""
    from kdkit.transfer.runmd import run_md
    from tests.config.test_hostile_config_values import _info
    from tests.transfer.test_rented import sections

    info = {**_info(""), "machine_local": ["torch"],
            "local_wheels": {"folder": "local-wheels", "files": ["torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"]}}
    text = run_md(info)
    (title,) = [t for t in sections(text) if t.startswith("Without Docker")]
    assert title == "Without Docker (python3.11 and the lock's index reachable)"
    assert "--require-hashes --no-deps --find-links local-wheels -r project/requirements/cpu.txt" in text
    assert "torch from `local-wheels/`, which this bundle carries" in text
