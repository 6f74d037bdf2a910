"""RUN.md's `docker run` line is `kdkit run`'s container: the same spec, the host's facts computed by a shell.

The line RUN.md prints for a host kdkit has never seen is evaluated here by a real ``sh`` (its prelude,
then the line with ``docker`` replaced by a printer of its arguments), and the words Docker would receive
must be exactly those `kdkit run` gives the engine on this host (kdkit.machine.run's confinement, read
from the same host facts). A flag added to one and not the other fails here.
"""

from __future__ import annotations

import csv
import itertools
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.shipped import DATA_ITEMS
from kdkit.docker_adapter import cli_arguments
from kdkit.image.container import container_spec, portable_line, portable_spec, project_mounts, shell_prelude
from kdkit.machine.host import HostFacts, rocm_access
from kdkit.machine.run import confinement
from kdkit.transfer.runmd import run_md
from tests.conftest import REPO, invoke
from tests.core.test_safe_paths import set_key
from tests.transfer.test_bundle import write_fresh_lock
from tests.transfer.test_rented import sections

IMAGE = "proj:cpu-0123456789ab"


def _meminfo_bytes() -> int:
    text = Path("/proc/meminfo").read_text(encoding="utf-8")
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    assert match
    return int(match.group(1)) * 1024


def _as_the_shell_passes_it(folder: Path, backend: str) -> list[str]:
    """The prelude and RUN.md's line run by sh in ``folder``; the arguments `docker` would have received."""
    line = portable_line(
        portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", backend), backend)
    assert line.startswith("docker run ")
    script = "\n".join(
        [*shell_prelude("project/runs", backend), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=folder, capture_output=True, check=True)
    return done.stdout.decode().split("\0")[:-1]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_run_md_line_gives_docker_the_words_kdkit_run_gives_the_engine(
    backend: str, tmp_path: Path) -> None:
    words = _as_the_shell_passes_it(tmp_path, backend)
    root_runs = os.getuid() == 0
    uid, gid = (10001, 10001) if root_runs else (os.getuid(), os.getgid())
    host = HostFacts(uid=os.getuid(), gid=os.getgid(), cpus=os.cpu_count() or 1,
                     memory_bytes=_meminfo_bytes())
    access = {"gpus": "all"} if backend == "cuda" else {}
    spec = container_spec(IMAGE, project_mounts(tmp_path / "project", "data/pilot", "runs"),
                          confinement(host, uid, gid), access)
    assert words == cli_arguments(spec)[1:]
    assert (tmp_path / "project" / "runs").is_dir()
    if root_runs:  # root hands the runs folder to the image's user, never opens it to everyone
        info = (tmp_path / "project" / "runs").stat()
        assert (info.st_uid, info.st_mode & 0o002) == (10001, 0)


FAKE_DEV = ("mount -t tmpfs none /dev && mkdir /dev/dri && touch /dev/kfd /dev/dri/renderD128 "
            # /dev/kfd stays root's: no --group-add 0
            "/dev/dri/renderD129 && chgrp 44 /dev/dri/renderD128 /dev/dri/renderD129")


def test_rocm_line_collects_kfd_and_each_render_node_with_the_groups_kdkit_run_adds(
    tmp_path: Path) -> None:
    """Played in a private mount namespace whose /dev has an AMD GPU's nodes (this machine has none)."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give a private /dev the nodes of an AMD GPU")
    line = portable_line(portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", "rocm"), "rocm")
    script = "\n".join([FAKE_DEV, *shell_prelude("project/runs", "rocm"), "printf '%s\\0' \"$@\""])
    done = subprocess.run(["unshare", "-m", "sh", "-e", "-c", script], cwd=tmp_path,
                          capture_output=True, check=False)
    if done.returncode and b"unshare" in done.stderr:
        pytest.skip(f"unshare -m refused here: {done.stderr.decode().strip()}")
    assert done.returncode == 0, done.stderr
    nodes = ["/dev/dri/renderD128", "/dev/dri/renderD129"]
    access = rocm_access(
        HostFacts(uid=0, gid=0, kfd=True, render_nodes=nodes, device_gids=[44]), None)
    expected = [word for device in access["devices"] for word in ("--device", device)]
    expected += [word for group in access["group_add"] for word in ("--group-add", group)]
    assert done.stdout.decode().split("\0")[:-1] == expected
    assert line.endswith(f' "$@" {IMAGE}') and "seccomp" not in line


def test_a_path_of_the_project_cannot_run_anything_in_the_line(tmp_path: Path) -> None:
    """Only the prelude's variables and $PWD expand: a pilot inputs folder named like a command stays a name."""
    inputs = "data/pi$(touch pwned)`touch pwned2`$HOME"
    line = portable_line(portable_spec(IMAGE, "$PWD/project", inputs, "runs", "cpu"), "cpu")
    script = "\n".join(
        [*shell_prelude("project/runs", "cpu"), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    mount = next(w for w in done.stdout.decode().split("\0") if w.startswith("type=bind")
                 and "readonly" in w)
    assert mount == f'type=bind,"source={tmp_path}/project/{inputs}","target=/app/{inputs}",readonly'
    assert not list(tmp_path.glob("pwned*"))


def test_wheel_force_include_is_the_shipped_data_list() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[tool.hatch.build.targets.wheel.force-include]\n", 1)[1].split("\n[", 1)[0]
    included = dict(re.findall(r'^"([^"]+)" = "([^"]+)"$', table, re.MULTILINE))
    assert included == {item: f"kdkit/_data/{item}" for item in DATA_ITEMS}


def test_the_model_folder_the_pilot_config_names_is_mounted_read_only_as_kdkit_run_mounts_it(
    tmp_path: Path) -> None:
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
    (root
     / "config/pilot.json").write_text(
         json.dumps({**config, "model": {"path": "models/enc"}}), encoding="utf-8")
    project = load_project(root)
    recorded = _named_mounts(project)
    assert recorded == ["models/enc"]
    # as the inputs'
    word = r'"type=bind,\"source=$PWD/project/models/enc\",target=/app/models/enc,readonly"'
    info = {"project": "proj", "backend": "cpu", "kdkit_version": "0",
            "created": "2026-12-03T00:00:00Z",
            "revision": None, "python": "3.11", "lock": "requirements/cpu.txt", "pylock": None,
            "inputs": "data/pilot", "runs": "runs", "mounts": recorded, "kdkit_wheels": None,
            "image": {"ref": IMAGE, "id": "sha256:" + "0" * 64,
                      "compressor": "zstd", "file": "image.tar.zst"}}
    (line,) = [ln for ln in run_md(info).splitlines() if ln.lstrip().startswith("docker run ")]
    assert f" --mount {word} " in line, line
    # a bundle.json without it (or naming nothing) mounts only the two
    old = run_md({**info, "mounts": []})
    assert "models/enc" not in old and "/app/runs" in old

    line = portable_line(
        portable_spec(IMAGE, "$PWD/project", "data/pilot", "runs", "cpu", recorded), "cpu")
    script = "\n".join(
        [*shell_prelude("project/runs", "cpu"), "printf '%s\\0' " + line.removeprefix("docker ")])
    done = subprocess.run(["sh", "-e", "-c", script], cwd=folder, capture_output=True, check=True)
    root_runs = os.getuid() == 0
    uid, gid = (10001, 10001) if root_runs else (os.getuid(), os.getgid())
    host = HostFacts(uid=os.getuid(), gid=os.getgid(), cpus=os.cpu_count() or 1,
                     memory_bytes=_meminfo_bytes())
    mounts = project_mounts(
        root, "data/pilot", "runs") + named_mounts(project, project.pilot_config(),
                                                                       root / "data/pilot")
    spec = container_spec(IMAGE, mounts, confinement(host, uid, gid), {})
    assert done.stdout.decode().split("\0")[:-1] == cli_arguments(spec)[1:]
    assert f'type=bind,"source={root}/models/enc",target=/app/models/enc,readonly' in cli_arguments(
        spec)


def test_run_md_teaches_the_rented_hour_in_order() -> None:
    """Issue 26 §6: verify the bundle, install kdkit offline, the user's .env, diagnose --accept, run --detach then
    status and wait, the evidence copied off the machine and verified there; the local copy only as a fallback."""
    from kdkit.transfer.runmd import run_md
    from tests.transfer.test_rented import sections

    text = run_md(_info(""))
    found = sections(text)
    first = next(blocks for title, blocks in found.items() if title.startswith("Check the copy"))
    assert first == ["sha256sum -c --quiet SHA256SUMS"]
    kdkit = "\n".join(
        next(blocks for title, blocks in found.items() if title.startswith("With Docker, through")))
    steps = ["--no-index --find-links kdkit-wheels", "-m kdkit load .", "> ../.env",
             "-- kdkit diagnose --accept --expect cpu",
             "--env-file ../.env --detach --json > ../kdkit-run.json",
             'status "$run_id" --project project', 'wait "$run_id" --project project',
             'copy-out project/runs/"$run_id" user@backup-host:kdkit-evidence',
             'copy-out --verify user@backup-host:kdkit-evidence/"$run_id"']
    at = [kdkit.find(step) for step in steps]
    assert -1 not in at and at == sorted(at), dict(zip(steps, at, strict=True))
    # a copy on the same machine is named in the prose, as a fallback only
    assert "../kdkit-evidence" not in kdkit
    assert "password manager" in text and "dashboard" in text and "lost with the machine" in text
    assert "myremote:kdkit-evidence" in text  # the rclone form


@pytest.mark.parametrize("image", [True, False])
def test_a_lock_with_a_machine_local_torch_gets_no_install_block_that_cannot_work(
    image: bool) -> None:
    """Issue 31 §4: a lock whose torch came from a local folder (the header's machine-local) made RUN.md's
    section without Docker run `pip install -r` against an index that has no such file. It now says so, and
    what to do instead; a lock without machine-local pins keeps the block."""
    from kdkit.transfer.runmd import run_md
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
    assert ("Use the image (above)" if image
            else "Bundle again with the image (without --no-image)") in text
    assert "-r project/requirements/" not in text.split("Without Docker: not possible", 1)[1]


def test_a_bundle_carrying_the_machine_local_files_installs_them_from_its_own_folder() -> None:
    """Issue 31 §4, the other way: with `kdkit bundle --wheelhouse`, local-wheels/ holds torch's file and the
    venv line looks there too (the rest still from the lock's index)."""
    from kdkit.transfer.runmd import run_md
    from tests.transfer.test_rented import sections

    info = {**_info(""), "machine_local": ["torch"],
            "local_wheels": {"folder": "local-wheels",
                             "files": ["torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"]}}
    text = run_md(info)
    (title,) = [t for t in sections(text) if t.startswith("Without Docker")]
    assert title == "Without Docker (python3.11 and the lock's index reachable)"
    assert "--require-hashes --no-deps --find-links local-wheels -r project/requirements/cpu.txt" in text
    assert "torch from `local-wheels/`, which this bundle carries" in text


# ---------------------------------------------------------------- RUN.md with hostile values, run for real

# Values put straight into RUN.md's renderer, past every rule: each must stay one word of each command.
INJECTED = {
    "semicolon": ";touch PWNED;#",
    "command substitution": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "and": " && touch PWNED #",
    "pipe": "|touch PWNED",
    "single quotes": "'; touch PWNED; '",
    "double quotes": '"; touch PWNED; "',
    "IFS": "${IFS}$(touch${IFS}PWNED)",
    "escaped": "\\$(touch PWNED)",
    "globs": "* ?[a]{b,c}",
    "variable": "$PWD$kd_uid",
    "option-like": " -rf x",
    # allowed by the rule, and still worth a look: dashes, dots, underscores where a shell or a tool notices them
    "allowed dash dot": "-1.0_x",
    "allowed dots": "..x.",
}
# Each call to a file of its own, named by the time it began (two ends of a pipe run at once).
RECORDER = "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > \"$KD_CALLS/$(date +%s%N).$$\"\n"


def _info(h: str) -> dict[str, Any]:
    """bundle.json's keys that RUN.md reads, each holding ``h``."""
    return {"project": "proj", "backend": f"cpu{h}", "kdkit_version": "0.1.0",
            "created": "2026-01-01T00:00:00Z",
            "revision": None, "python": f"3.11{h}", "lock": f"requirements/cpu{h}.txt",
            "pylock": None,
            "inputs": f"data{h}", "runs": f"runs{h}",
            "image": {"ref": f"proj:cpu{h}", "id": "sha256:" + "0" * 64,
                      "file": f"image{h}.tar.zst",
                      "compressor": "zstd"},
            "kdkit_wheels": {"folder": f"kdkit-wheels{h}",
                             "requirements": f"kdkit-wheels{h}/requirements.txt",
                             "pythons": ["3.11"], "arch": "x86_64"}}


def _stage(base: Path, h: str) -> tuple[Path, dict[str, str]]:
    """A bundle folder with one finished run and one earlier copy, and every program RUN.md calls a recorder."""
    bundle = base / "bundle"
    (bundle / "project" / f"runs{h}" / "r1").mkdir(parents=True)
    (base / "kdkit-evidence" / "r0").mkdir(parents=True)
    stubs = base / "stubs"
    stubs.mkdir()
    (base / "calls").mkdir()
    programs = [stubs / name
                for name in ("python3", f"python3.11{h}", "docker", "zstd", "sha256sum", "touch")]
    programs += [base / "kdkit-venv/bin/python", base / "project-venv/bin/python"]
    for program in programs:
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text(RECORDER, encoding="utf-8")
        program.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(base),
           "KD_CALLS": str(base / "calls"),
           "LANG": "C.UTF-8"}
    return bundle, env


def _calls(base: Path) -> list[list[str]]:
    """The calls recorded since the last look, in the order they began (and forgotten)."""
    records = sorted((base / "calls").iterdir(), key=lambda p: tuple(map(int, p.name.split("."))))
    calls = [[os.fsdecode(word) for word in record.read_bytes().split(b"\0")[:-1]]
             for record in records]
    for record in records:
        record.unlink()
    return calls


def _expected(h: str, stubs: Path) -> dict[str, list[list[str]]]:
    """The calls each section's blocks must make, in order: the programs RUN.md means, the values whole."""
    kv, pv, lock, runs = ("../kdkit-venv/bin/python", "../project-venv/bin/python",
                          f"project/requirements/cpu{h}.txt",
                          f"project/runs{h}/r1/")
    copies = lambda *tool: [[*tool, "copy-out", runs, "../kdkit-evidence"],  # noqa: E731
                            [*tool, "copy-out", "--verify", "../kdkit-evidence/r0/"]]
    python3 = str(stubs / "python3")
    run_id = [kv,
              "-c", 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])',
              "../kdkit-run.json"]
    return {
        "Check the copy": [[str(stubs / "sha256sum"), "-c", "--quiet", "SHA256SUMS"]],
        "With Docker, through kdkit": [
            [python3, "-m", "venv", "--clear", "../kdkit-venv"],
            [kv, "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
             f"kdkit-wheels{h}",
             "--require-hashes", "-r", f"kdkit-wheels{h}/requirements.txt"],
            [kv, "-m", "kdkit", "load", "."],
            [kv, "-m", "kdkit", "run", "project", "--image", f"proj:cpu{h}", "--", "kdkit",
             "diagnose", "--accept",
             "--expect", f"cpu{h}"],
            [kv, "-m", "kdkit", "run", "project", "--image", f"proj:cpu{h}", "--env-file",
             "../.env", "--detach",
             "--json"],
            # the stub prints no run ID
            run_id, [kv, "-m", "kdkit", "status", "", "--project", "project"],
            [kv, "-m", "kdkit", "wait", "", "--project", "project"],
            run_id,
            [kv, "-m", "kdkit", "copy-out", f"project/runs{h}/", "user@backup-host:kdkit-evidence"],
            [kv, "-m", "kdkit", "copy-out", "--verify", "user@backup-host:kdkit-evidence/"]],
        "With Docker "
        "only": [[str(stubs / "zstd"), "-q", "-dc", f"image{h}.tar.zst"],
                 [str(stubs / "docker"), "load"],
                             ["docker run"], *copies(python3, "kdkit.pyz")],
        "Without Docker": [
            [str(stubs / f"python3.11{h}"), "-m", "venv", "../project-venv"],
            [pv, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps", "-r", lock],
            [pv, "kdkit.pyz", "diagnose", "--expect", f"cpu{h}"],
            [pv, "kdkit.pyz", "verify-env", "--lock", lock],
            [pv, "kdkit.pyz", "pilot", "project"], *copies(pv, "kdkit.pyz")],
    }


def _mounts(words: list[str]) -> dict[str, dict[str, str]]:
    """docker run's --mount values (CSV records, as the docker CLI reads them) by target."""
    found = {}
    for flag, value in itertools.pairwise(words):
        if flag == "--mount":
            fields = dict(field.split("=", 1) if "=" in field else (field, "")
                          for field in next(csv.reader([value])))
            found[fields["target"]] = fields
    return found


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("h", list(INJECTED.values()), ids=list(INJECTED))
def test_each_run_md_block_runs_only_its_commands_whatever_the_values(
    tmp_path: Path, h: str, shell: str) -> None:
    text = run_md(_info(h))
    bundle, env = _stage(tmp_path, h)
    expected = _expected(h, tmp_path / "stubs")
    found = sections(text)
    assert [t.split(" (")[0].split(",")[0]
            for t in found] == ["Check the copy before anything else",
                                                              "With Docker", "With Docker only",
                                "Without Docker"]
    for title, blocks in found.items():
        for block in blocks:
            done = subprocess.run([shell, "-n", "-c", block], capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, (block, done.stderr)
            done = subprocess.run([shell, "-e", "-c", block], cwd=bundle, env=env,
                                  capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, (title, block, done.stderr)
        calls = _calls(tmp_path)
        want = next(v for k, v in expected.items() if title.startswith(k))
        if title.startswith("With Docker only"):
            # zstd | docker load: either may record first
            assert sorted(calls[:2]) == sorted(want[:2]), calls
            calls[:2], run = want[:2], calls.pop(2)
            assert run[:2] == [
                str(tmp_path / "stubs/docker"), "run"] and run[-1] == f"proj:cpu{h}", run
            mounts = _mounts(run)
            assert mounts[f"/app/data{h}"]["source"] == f"{bundle}/project/data{h}", mounts
            assert mounts[f"/app/runs{h}"]["source"] == f"{bundle}/project/runs{h}", mounts
            assert "readonly" in mounts[f"/app/data{h}"] and "readonly" not in mounts[f"/app/runs{h}"]
            want = [c for c in want if c != ["docker run"]]
        assert calls == want, title
    assert not [p for p in tmp_path.rglob("*")
                if p.name.startswith("PWNED")], "an injected command ran"


def test_allowed_values_are_written_as_they_are() -> None:
    """What the rule allows needs no quoting: RUN.md shows the paths people wrote, as they wrote them."""
    h = INJECTED["allowed dash dot"]
    assert shlex.quote(f"project/requirements/cpu{h}.txt") == f"project/requirements/cpu{h}.txt"
    assert f"-r project/requirements/cpu{h}.txt" in run_md(_info(h))


# ---------------------------------------------------------------- a real bundle of allowed, unusual paths


def test_a_bundle_of_allowed_unusual_paths_gives_blocks_every_shell_reads(
    project: Path, tmp_path: Path) -> None:
    lock = "requirements/.v1/cpu..lock-1_x.txt"
    (project / lock).parent.mkdir()
    shutil.move(write_fresh_lock(project), project / lock)
    (project / "data/pilot").rename(project / "data/.p-1_x")
    set_key(project, "kdkit.json", "$.backends.cpu.lock", lock)
    set_key(project, "config/pilot.json", "$.inputs", "data/.p-1_x")
    set_key(project, "config/pilot.json", "$.manifest", "data/.p-1_x/manifest.json")
    set_key(project, "config/pilot.json", "$.runs", "._runs-1/x_/")
    # the campaign's corpus too
    set_key(project, "campaign.json", "$.corpus.manifest", "data/.p-1_x/manifest.json")
    assert invoke("validate", project).exit_code == 0
    result = invoke("bundle", project, "--out",
                    tmp_path / "bundle", "--no-image", "--no-kdkit-wheels")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "bundle/RUN.md").read_text(encoding="utf-8")
    assert f"-r project/{lock}" in text and "for run in project/._runs-1/x_/*/" in text
    blocks = [block for found in sections(text).values() for block in found]
    # the check, the venv and its pilot, the copies (no image: no Docker sections)
    assert len(blocks) == 3
    for shell in ("sh", "bash"):
        for block in blocks:
            done = subprocess.run([shell, "-n", "-c", block], capture_output=True,
                                  text=True, check=False)
            assert done.returncode == 0, (shell, block, done.stderr)
