"""`kdkit build --lock-format pylock`: the image installs exactly the files the backend's PEP 751 lock names.

The pylocks here are written by the real tool, `uv pip compile REQS --no-deps --format pylock.toml
--generate-hashes --python-version 3.11`, from a requirements lock, against files served over HTTP on
127.0.0.1 (tests/localindex.py's `serve`) or a folder; kdkit's header goes on top as `kdkit lock` writes it
(the requirements lock's `# kdkit:` lines and `requirements-lock = <path> sha256:<hex>`). pip (the test
venv's, 26.1+) installs the parts for real. The image is built once through the real engine, from the session's
locked project (conftest's `locked`, torch 2.13.0+cpu) with its files served on 127.0.0.1 (the builder runs
with network=host), then run with its own command: diagnose, verify-env against the pylock, the pilot.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.project import load_project
from kdkit.core.errors import BadInput
from kdkit.core.lockfile import parse_lock
from kdkit.image.pylockparts import check_pylock, pylock_torch_keys, split_pylock_text, wheelhouse_parts
from tests.conftest import BASE, invoke, tree_snapshot
from tests.core.test_pylock import tool_env
from tests.localindex import serve
from tests.lock.test_lock_agreement import UV
from tests.tinywheels import build_wheel, make_venv, sha256, torch_wheel
from tests.transfer.test_bundle import write_fresh_lock

needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed in the test venv")


def kdkit_header(lock: Path) -> str:
    """The header `kdkit lock` puts on a pylock it makes from ``lock`` (kdkit.lock.pylockwrite)."""
    lines = [line for line in lock.read_text(encoding="utf-8").splitlines()
             if line.startswith("# kdkit:")]
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    return "\n".join(
        [*lines, f"# kdkit: requirements-lock = requirements/{lock.name} sha256:{digest}"]) + "\n"


def uv_pylock(requirements: Path, out: Path, find_links: str) -> str:
    """uv's pylock of an exact, hashed requirements file, from ``find_links`` only, for Python 3.11."""
    done = subprocess.run([str(UV), "pip", "compile", str(requirements), "--no-deps", "--format",
                           "pylock.toml",
                           "--generate-hashes", "-o", str(out), "--python-version", "3.11",
                           "--no-index",
                           "--find-links", find_links], capture_output=True, text=True,
                          env=tool_env(out.parent),
                          check=False)
    assert done.returncode == 0, done.stderr
    return out.read_text(encoding="utf-8")


def write_pylock(project: Path, text: str, backend: str = "cpu") -> Path:
    lock = project / "requirements" / f"{backend}.txt"
    path = project / "requirements" / f"pylock.{backend}.toml"
    path.write_text(kdkit_header(lock) + text, encoding="utf-8")
    return path


def test_the_pylock_is_named_beside_the_requirements_lock(project: Path) -> None:
    backend = load_project(project).backend("cpu")
    assert backend.pylock == project / "requirements" / "pylock.cpu.toml"


# ---------------------------------------------------------------- the parts (real uv, real pip, tiny wheels)


def twin_text(wheels: dict[str, Path]) -> str:
    """A requirements lock as pip-compile annotates it: filelock is required by torch, idna by the project."""
    def pin(name: str, version: str, via: str) -> str:
        return f"{name}=={version} \\\n    --hash=sha256:{sha256(wheels[name])}\n    # via {via}\n"

    return (pin("filelock", "3.0", "torch")
            + pin("idna", wheels["idna"].name.split("-")[1], "-r base.in")
            + pin("torch", "2.13.0+cpu", "-r base.in"))


def tiny_wheels(folder: Path) -> dict[str, Path]:
    return {"torch": torch_wheel(folder, "2.13.0+cpu"),
            "filelock": build_wheel(folder, "filelock", "3.0"),
            "idna": build_wheel(folder, "idna", "3.10")}


def tiny_pylock(where: Path, wheels: dict[str, Path]) -> tuple[str, Path]:
    """(a pylock's text with kdkit's header, its requirements twin) of torch, filelock and idna, in ``where``."""
    twin = where / "requirements" / "cpu.txt"
    twin.parent.mkdir(parents=True, exist_ok=True)
    twin.write_text("# kdkit: backend = cpu\n# kdkit: platform = linux-x86_64\n"
                    + twin_text(wheels), encoding="utf-8")
    text = uv_pylock(twin, where / "pylock.cpu.toml", str(wheels["torch"].parent))
    return kdkit_header(twin) + text, twin


def _parts(text: str, twin: Path | None) -> tuple[str, str]:
    import tomllib

    data = tomllib.loads(text)
    return split_pylock_text(text, data, pylock_torch_keys(data, twin), Path("pylock.cpu.toml"))


@needs_uv
def test_torch_part_and_the_rest_each_block_as_written(tmp_path: Path) -> None:
    import tomllib

    text, twin = tiny_pylock(tmp_path, tiny_wheels(tmp_path / "wheels"))
    torch_part, rest = _parts(text, twin)
    # the twin's `# via`
    assert [p["name"] for p in tomllib.loads(torch_part)["packages"]] == ["filelock", "torch"]
    assert [p["name"] for p in tomllib.loads(rest)["packages"]] == ["idna"]
    blocks = ["[[packages]]" + block for block in text.split("[[packages]]")[1:]]
    for part in (torch_part, rest):
        assert "# kdkit:" not in part and 'lock-version = "1.0"' in part
        assert all(block.strip() in text for block in part.split("\n\n")
                   if block.startswith("[[packages]]"))
    assert sum(part.count("[[packages]]") for part in (torch_part, rest)) == len(blocks) == 3
    # without the twin: torch alone (uv wrote no dependencies)
    assert _parts(text, None)[0].count("[[packages]]") == 1


@needs_uv
def test_a_bumped_small_package_or_a_new_header_leaves_the_torch_part_byte_for_byte(
    tmp_path: Path) -> None:
    wheels = tiny_wheels(tmp_path / "wheels")
    text, twin = tiny_pylock(tmp_path / "a", wheels)
    bumped, twin_b = tiny_pylock(tmp_path / "b",
                                 {**wheels,
                                  "idna": build_wheel(tmp_path / "wheels", "idna", "3.11")})
    assert _parts(bumped, twin_b)[0] == _parts(text, twin)[0]
    assert _parts(bumped, twin_b)[1] != _parts(text, twin)[1]
    assert kdkit_header(twin) != kdkit_header(twin_b)  # the header changed: no part carries it


def test_dependencies_tables_put_what_torch_requires_in_its_part(tmp_path: Path) -> None:
    import tomllib

    digest = "0" * 64
    text = ('lock-version = "1.0"\ncreated-by = "t"\n' + "".join(
        f'\n[[packages]]\nname = "{name}"\nversion = "1.0"\n{deps}wheels = [{{ url = '
        f'"https://example.org/{name}-1.0-py3-none-any.whl", hashes = {{ sha256 = "{digest}" }} '
        '}]\n'
        for name,
        deps in (("torch", 'dependencies = [{ name = "sympy" }]\n'),
                 ("sympy", 'dependencies = [{ name = '
                      '"mpmath" }]\n'),
                 ("mpmath", ""), ("idna", ""))))
    torch_part, rest = _parts(text, None)
    assert [p["name"]
            for p in tomllib.loads(torch_part)["packages"]] == ["torch", "sympy", "mpmath"]
    assert [p["name"] for p in tomllib.loads(rest)["packages"]] == ["idna"]
    with pytest.raises(BadInput, match="cannot be cut into the image's two layers as written"):
        _parts('lock-version = "1.0"\npackages = [{ name = "torch", version = "1.0", wheels = [{ '
               f'url = "https://x.org/torch-1.0-py3-none-any.whl", hashes = {{ sha256 = "{digest}" '
               '} }] }]\n', None)


@needs_uv
def test_a_wheelhouse_part_installs_offline_with_pip_and_no_direct_url(tmp_path: Path) -> None:
    """The parts of a --wheelhouse build name its files by paths; the test venv's pip (26.1+) installs them with no
    index and no network, each file hash-checked, and writes no direct_url.json: verify-env sees index installs."""
    import tomllib

    wheels = tiny_wheels(tmp_path / "wheels")
    text, twin = tiny_pylock(tmp_path, wheels)
    data = tomllib.loads(text)
    pylock = tmp_path / "requirements" / "pylock.cpu.toml"
    pylock.write_text(text, encoding="utf-8")
    parts = wheelhouse_parts(text, data, data["packages"], pylock_torch_keys(data, twin),
                             list(wheels.values()))
    python = make_venv(tmp_path / "venv", with_pip=False)
    for name, part in zip(("torch", "rest"), parts, strict=True):
        folder = tmp_path / "build" / name
        (folder / "wheels").mkdir(parents=True)
        for wheel in wheels.values():
            shutil.copy(wheel, folder / "wheels")
        (folder / "pylock.toml").write_text(part, encoding="utf-8")
        assert 'path = "wheels/' in part and "url =" not in part
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                               "--isolated",
                               "--no-index", "--require-hashes", "--no-deps", "-r",
                               str(folder / "pylock.toml")],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    assert not list((tmp_path / "venv").rglob("direct_url.json"))
    result = invoke("verify-env", "--lock", pylock, "--python", python, "--json")
    assert (result.exit_code,
            json.loads(result.stdout)["counts"]["locked"]) == (0, 3), result.stdout
    (tmp_path / "build" / "rest" / "wheels"
     / wheels["idna"].name).write_bytes(wheels["filelock"].read_bytes())
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--isolated", "--no-index",
                           "--force-reinstall", "--no-deps", "-r",
                           str(tmp_path / "build" / "rest" / "pylock.toml")],
                          capture_output=True, text=True, check=False)
    # pip checks the pylock's hash
    assert done.returncode == 1 and "DO NOT MATCH THE HASHES" in done.stderr


def test_a_package_with_no_file_hash_or_a_file_of_this_machine_is_refused(tmp_path: Path) -> None:
    head = 'lock-version = "1.0"\ncreated-by = "t"\n\n[[packages]]\nname = "torch"\n'
    vcs = tmp_path / "vcs" / "pylock.cpu.toml"
    vcs.parent.mkdir()
    vcs.write_text(head
                   + 'vcs = { type = "git", url = "https://example.org/torch.git", commit-id = '
                     '"abc" }\n')
    with pytest.raises(BadInput,
                       match=r"pylock.cpu.toml:4: torch comes from git "
                             r"https://example.org/torch.git@abc, "
                             "which no file hash proves"):
        check_pylock(parse_lock(vcs), "3.11", local_files_ok=True)
    local = tmp_path / "local" / "pylock.cpu.toml"
    local.parent.mkdir()
    local.write_text(head
                     + 'version = "1.0"\nwheels = [{ path = "/srv/torch-1.0-py3-none-any.whl", '
                       f'hashes = {{ sha256 = "{"0" * 64}" }} }}]\n')
    with pytest.raises(
        BadInput, match=r"torch: its file lies on this machine .* pass --wheelhouse DIR"):
        check_pylock(parse_lock(local), "3.11", local_files_ok=False)
    # a wheelhouse build names its own files
    check_pylock(parse_lock(local), "3.11", local_files_ok=True)
    marked = (
        local.read_text().replace('version = "1.0"',
                                  'version = "1.0"\nmarker = "sys_platform == \'win32\'"'))
    local.write_text(marked)
    # never installed in a Linux image
    check_pylock(parse_lock(local), "3.11", local_files_ok=False)


# ---------------------------------------------------------------- stale pylocks, refused builds (no engine)


def hand_pylock(digest: str = "ab" * 32) -> str:
    return ('lock-version = "1.0"\ncreated-by = "uv"\nrequires-python = ">=3.11"\n\n[[packages]]\n'
            'name = "torch"\nversion = "2.13.0+cpu"\nwheels = [{ url = '
            '"https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-'
            f'cp311-cp311-manylinux_2_28_x86_64.whl", hashes = {{ sha256 = "{digest}" }} }}]\n')


def test_validate_judges_the_pylock_by_its_header_and_requirements_lock(project: Path) -> None:
    lock = write_fresh_lock(project)
    assert invoke("validate", project).exit_code == 0  # no pylock: nothing is stale
    pylock = write_pylock(project, hand_pylock())
    header = parse_lock(pylock).header
    assert header["requirements-lock"] == f"requirements/cpu.txt sha256:{sha256(lock)}"
    assert parse_lock(pylock).inputs() == parse_lock(lock).inputs()
    assert invoke("validate", project).exit_code == 0
    lock.write_text(lock.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    result = invoke("validate", project)
    assert result.exit_code == 2
    assert (f"{pylock}: header: made from another requirements/cpu.txt; run `kdkit lock --backend "
            "cpu`"
            in result.stdout + result.stderr)
    header = kdkit_header(lock).replace("# kdkit: requirements-lock", "# kdkit: other")
    pylock.write_text(header + hand_pylock(), encoding="utf-8")
    result = invoke("validate", project)
    assert ("header: its header names no requirements-lock (the requirements lock it was made "
            "from); run `kdkit lock --backend cpu`") in result.stdout + result.stderr
    (project / "requirements" / "base.in").write_text("torch==2.13.0\nidna\n", encoding="utf-8")
    write_pylock(project, hand_pylock())
    result = invoke("validate", project)
    assert "pylock.cpu.toml: header: stale: requirements/base.in changed" in result.stdout + result.stderr


def _refused(project: Path, *args: str) -> str:
    before = tree_snapshot(project)
    result = invoke("build", project, "--backend", "cpu", "--lock-format", "pylock", *args)
    assert (result.exit_code, result.stdout, result.stderr.count("\n")) == (2, "", 1), result.output
    assert tree_snapshot(project) == before
    return result.stderr


def test_a_pylock_build_is_refused_in_one_line_before_any_engine(project: Path) -> None:
    lock = write_fresh_lock(project)
    pylock = project / "requirements" / "pylock.cpu.toml"
    assert _refused(
        project) == (f"Error: {pylock}: no PEP 751 lock for backend cpu; `kdkit lock --backend "
                                 "cpu` writes it beside requirements/cpu.txt, or build from "
                                 "requirements/cpu.txt (--lock-format requirements)\n")
    write_pylock(project, hand_pylock())
    lock.write_text(lock.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert _refused(
        project) == (f"Error: {pylock}: made from another requirements/cpu.txt; run `kdkit lock "
                                 "--backend cpu`\n")
    write_pylock(project, hand_pylock())
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    (project / "kdkit.json").write_text(json.dumps({**config, "python": "3.10"}), encoding="utf-8")
    assert _refused(
        project) == ("Error: kdkit.json: \"python\" is 3.10, but an image built from "
                                 "pylock.cpu.toml checks itself against it with verify-env, which "
                                 "reads a pylock with tomllib (Python 3.11 or newer); build from "
                                 "cpu.txt (--lock-format requirements), or set \"python\" to 3.11 "
                                 "or newer and relock\n")


# ---------------------------------------------------------------- the image (engine)


def _relock_with(project: Path, files: Path, requirement: str | None = None) -> Path:
    """The session's lock (plus ``requirement``, relocked), its files in ``files`` (`kdkit wheelhouse`)."""
    from tests.conftest import TORCH_WHEELS

    if requirement:
        base_in = project / "requirements" / "base.in"
        base_in.write_text(base_in.read_text(encoding="utf-8")
                           + f"{requirement}\n", encoding="utf-8")
        done = invoke("lock", project, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS)
        assert done.exit_code == 0, done.output
    done = invoke("wheelhouse", project, "--out", files, "--json")
    assert done.exit_code == 0, done.output
    return project / "requirements" / "cpu.txt"


def _build(project: Path) -> dict[str, Any]:
    result = invoke("build", project, "--backend", "cpu", "--lock-format", "pylock",
                    "--base-image", BASE, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _ran(data: dict[str, Any], pattern: str) -> bool:
    steps = [s for s in data["steps"] if re.search(pattern, s["instruction"])]
    assert len(steps) == 1, pattern
    return not steps[0]["cached"]


@needs_uv
def test_an_image_built_from_the_pylock_runs_and_checks_itself_against_it(
        docker_engine: None, locked_copy: Path, tmp_path: Path) -> None:
    files = tmp_path / "files"
    files.mkdir()
    tags: list[str] = []
    with serve(files) as served:
        try:
            lock = _relock_with(locked_copy, files)
            write_pylock(locked_copy,
                         uv_pylock(lock, tmp_path / "pylock.cpu.toml", f"{served.url}/"))
            first = _build(locked_copy)
            tags.append(str(first["tag"]))
            labels = first["labels"]
            assert labels["dev.kdkit.lock.path"] == "requirements/pylock.cpu.toml"
            assert labels["dev.kdkit.lock.sha256"] == sha256(
                locked_copy / "requirements" / "pylock.cpu.toml")
            assert labels["dev.kdkit.torch.version"] == "2.13.0+cpu"
            assert any(path.endswith("/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl")
                       for path in served.requests)  # the builder fetched the pylock's own URL
            # the image's own command: diagnose, verify-env, the pilot
            run = invoke("run", locked_copy)
            assert run.exit_code == 0, run.output
            assert "Lock:   /app/requirements/pylock.cpu.toml (PEP 751)" in run.stdout
            assert "MATCH: 0 error(s), 0 warning(s)" in run.stdout
            inspected = invoke("inspect", first["tag"], "--project", locked_copy, "--json")
            assert inspected.exit_code == 0 and json.loads(
                inspected.stdout)["lock"]["matches"] is True
            # One more small package: a new rest, torch's part of the pylock unchanged, so its layers cached.
            lock = _relock_with(locked_copy, files, "idna==3.10")
            write_pylock(locked_copy,
                         uv_pylock(lock, tmp_path / "pylock.cpu.toml", f"{served.url}/"))
            # the pylock moved on
            assert invoke("inspect", first["tag"], "--project", locked_copy).exit_code == 1
            second = _build(locked_copy)
            tags.append(str(second["tag"]))
            assert not _ran(second, r"^COPY build/torch/") and not _ran(second,
                                                                        r"^RUN .*/tmp/kdkit-build/torch;")
            assert _ran(second, r"^RUN .*/tmp/kdkit-build/rest;")
            check = subprocess.run(["docker", "run", "--rm", second["tag"], "kdkit", "verify-env",
                                    "--lock",
                                    "/app/requirements/pylock.cpu.toml", "--json"],
                                   capture_output=True, text=True,
                                   check=False)
            report = json.loads(check.stdout)
            assert (check.returncode, report["format"],
                    report["counts"]["locked"]) == (0, "pylock", 11), check.stderr
        finally:
            for tag in tags:
                subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


# ---------------------------------------------------------------- the torch pin of the image


def test_the_torch_pin_is_the_one_for_the_image_among_several_under_markers(tmp_path: Path) -> None:
    """A lock for several platforms pins a torch per marker: `kdkit check` and the image's labels take the one
    for Linux on the lock's CPU and kdkit.json's Python, never merely the first."""
    from kdkit.config.project import Backend
    from kdkit.image.labels import torch_build
    from kdkit.order.checkmodel import Subject, check_point
    from kdkit.order.checksubject import lock_subject

    hashed = "--hash=sha256:" + "ab" * 32
    lock = tmp_path / "cpu.txt"
    backend = Backend("cpu", BASE, "https://download.pytorch.org/whl/cpu", lock)
    for platform, version in (("linux-aarch64", "2.13.0+cpu"), ("linux-x86_64", "2.12.0+cpu"),
                              ("", "2.12.0+cpu")):
        lock.write_text(f"# kdkit: platform = {platform}\n"
                        f'torch==2.12.0+cpu ; platform_machine == "x86_64" {hashed}\n'
                        f'torch==2.13.0+cpu ; platform_machine == "aarch64" {hashed}\n',
                        encoding=("utf-8"))
        subject = lock_subject(parse_lock(lock), "cpu.txt", "cpu", "3.11")
        assert isinstance(subject, Subject) and subject.version == version, platform
        assert torch_build(lock, backend, "3.11") == (version, "", "")
    lock.write_text(f'torch==2.13.0+cpu ; python_version >= "3.12" {hashed}\n', encoding="utf-8")
    assert lock_subject(parse_lock(lock), "cpu.txt", "cpu", "3.11") == check_point(
        "lock", "fail", "cpu.txt: torch is not pinned for the image (Linux, Python 3.11)",
        "add torch to requirements/base.in, then `kdkit lock`")
    pylock = tmp_path / "pylock.cpu.toml"
    pylock.write_text('lock-version = "1.0"\ncreated-by = "t"\n\n[[packages]]\nname = "torch"\nvcs '
                      '= { type = "git", url = "https://example.org/torch.git", commit-id = "abc" '
                      '}\n', encoding=("utf-8"))
    assert lock_subject(parse_lock(pylock), "pylock.cpu.toml", "cpu", "3.11") == check_point(
        "lock", "fail",
        "pylock.cpu.toml:4: torch comes from git https://example.org/torch.git@abc, with no "
        "version kdkit can judge against a card",
        "lock a torch release (torch==<version>+<label>), then `kdkit lock`")
    assert torch_build(pylock, backend, "3.11") == ("", "", "")


# ---------------------------------------------------------------- the bundle


def _pylocked(project: Path, lock_rel: str = "requirements/cpu.txt") -> Path:
    """A scaffolded project with a fresh lock at ``lock_rel`` and the pylock beside it."""
    if lock_rel != "requirements/cpu.txt":
        config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
        config["backends"]["cpu"]["lock"] = lock_rel
        (project / "kdkit.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
        (project / lock_rel).parent.mkdir(parents=True, exist_ok=True)
        write_fresh_lock(project).rename(project / lock_rel)
    else:
        write_fresh_lock(project)
    lock = project / lock_rel
    pylock = lock.with_name("pylock.cpu.toml")
    pylock.write_text(kdkit_header(lock).replace("requirements/cpu.txt", lock_rel)
                      + hand_pylock(), encoding="utf-8")
    return pylock


@pytest.mark.parametrize("lock_rel", ["requirements/cpu.txt", "locks/cpu.txt"])
def test_the_bundle_carries_the_pylock_and_run_md_says_which_lock_the_venv_uses(project: Path,
                                                                                tmp_path: Path,
                                                                                lock_rel: str) -> None:
    pylock = _pylocked(project, lock_rel)
    assert invoke("validate", project).exit_code == 0
    result = invoke("bundle", project, "--out", tmp_path / "bundle",
                    "--no-image", "--no-kdkit-wheels", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    rel = pylock.relative_to(project).as_posix()
    assert (info["lock"], info["pylock"]) == (lock_rel, rel) and rel in info["files"]
    assert (tmp_path / "bundle" / "project" / rel).read_bytes() == pylock.read_bytes()
    run_md = (tmp_path / "bundle" / "RUN.md").read_text(encoding="utf-8")
    assert ("A venv made from the lock (the requirements lock: the PEP 751 lock beside it, "
            f"`project/{rel}`, pins the same packages, but only pip 26.1 or newer installs from "
            "it") in run_md
    # the venv still installs the requirements
    assert f"--require-hashes --no-deps -r project/{lock_rel}\n" in run_md
    pylock.unlink()
    info = json.loads(invoke("bundle", project, "--out", tmp_path / "again", "--no-image",
                             "--no-kdkit-wheels",
                             "--json").stdout)
    assert info["pylock"] is None and "PEP 751" not in (tmp_path / "again"
                                                        / "RUN.md").read_text(encoding="utf-8")


def test_run_and_bundle_take_the_image_built_from_the_pylock_and_load_checks_it(
        project: Path, tmp_path: Path, docker_engine: None) -> None:
    """A small real image with the labels of a pylock build (no torch install): `kdkit run` and `kdkit bundle` take
    it by default, being the newest of the project's images, and `kdkit load` checks its lock.sha256 against the
    pylock the bundle carries."""
    import io

    import docker

    from kdkit.image.labels import default_tag, image_labels

    pylock = _pylocked(project)
    loaded = load_project(project)
    tag = default_tag(loaded, "cpu", sha256(pylock))
    client = docker.from_env()
    try:
        client.images.build(fileobj=io.BytesIO(
            f"FROM {BASE}\nRUN echo pylock > /marker\n".encode()), tag=tag,
                            labels=image_labels(loaded, loaded.backend("cpu"),
                                                sha256(pylock), pylock), rm=True)
        printed = invoke("run", project, "--print")
        assert printed.exit_code == 0, printed.output
        assert f" {tag}" in printed.stdout and "built from another lock" not in printed.output
        out = tmp_path / "bundle"
        made = invoke("bundle", project, "--out", out, "--no-kdkit-wheels",
                      "--compressor", "gzip", "--json")
        assert made.exit_code == 0, made.output
        assert json.loads(
            made.stdout)["image"]["labels"]["dev.kdkit.lock.path"] == "requirements/pylock.cpu.toml"
        client.images.remove(tag, force=True)
        result = invoke("load", out, "--json")
        assert result.exit_code == 0, result.output
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
        client.close()
