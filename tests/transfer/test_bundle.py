"""`kdkit bundle`, `verify-bundle`, `load`: one verified folder that carries a project elsewhere."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.core.jsonio import sha256_file
from tests.conftest import invoke, tree_snapshot
from tests.core.test_safe_paths import HOSTILE, PATH_KEYS, USED, _refused, set_key

BASE_IMAGE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")


def write_fresh_lock(project: Path, backend: str = "cpu") -> Path:
    """A hashed lock with the provenance header `kdkit lock` writes (no torch index is reachable here)."""
    digest = sha256_file(project / "requirements" / "base.in")
    lock = project / "requirements" / f"{backend}.txt"
    lock.write_text(
        "# kdkit: kdkit-version = 0.1.0\n"
        f"# kdkit: backend = {backend}\n"
        "# kdkit: torch-index = https://download.pytorch.org/whl/cpu\n"
        f"# kdkit: input:requirements/base.in = {digest}\n"
        "torch==2.13.0+cpu \\\n"
        f"    --hash=sha256:{'ab' * 32}\n",
        encoding="utf-8",
    )
    return lock


def ready_to_bundle(project: Path) -> Path:
    """A scaffolded project with a fresh lock, a .env and an old run: ready to bundle."""
    write_fresh_lock(project)
    (project / ".env").write_text("API_TOKEN=never-bundled\n", encoding="utf-8")
    (project / "runs" / "old-run").mkdir(parents=True)
    (project / "runs" / "old-run" / "results.jsonl").write_text("{}\n", encoding="utf-8")
    return project


@pytest.fixture
def locked(project: Path) -> Path:
    return ready_to_bundle(project)


def _bundle(project: Path, out: Path, *args: str) -> dict[str, object]:
    result = invoke("bundle", project, "--out", out, "--json", *args)
    assert result.exit_code == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


# ---------------------------------------------------------------- without an image


def test_no_image_bundle_holds_project_zipapp_run_md_and_sums(locked: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    info = _bundle(locked, out, "--no-image")
    files = _files(out)
    assert {"RUN.md", "SHA256SUMS", "bundle.json", "kdkit.pyz", "project/kdkit.json",
            "project/config/pilot.json",
            "project/requirements/cpu.txt", "project/data/pilot/manifest.json",
            "project/data/pilot/doc-12.txt",
            # the campaign goes along (issue 28)
            "project/src/train.py", "project/campaign.json"} <= set(files)
    assert not [f for f in files if f.startswith(("project/runs", "project/.env"))
                and f != "project/.env.example"]
    assert info["image"] is None and info["revision"] is None and info["lock"] == "requirements/cpu.txt"
    assert info["lock_sha256"] == sha256_file(locked / "requirements" / "cpu.txt")
    # The pilot documents travel byte for byte (doc-12 is deliberately not UTF-8).
    assert (out
            / "project/data/pilot/doc-12.txt").read_bytes() == (locked
                                                                / "data/pilot/doc-12.txt").read_bytes()
    # SHA256SUMS is what the coreutils tool reads, and lists every other file.
    check = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=out,
                           capture_output=True, check=False)
    assert check.returncode == 0, check.stdout
    listed = [line.split("  ", 1)[1] for line in (out / "SHA256SUMS").read_text().splitlines()]
    assert listed == [f for f in files if f != "SHA256SUMS"]
    run_md = (out / "RUN.md").read_text(encoding="utf-8")
    assert ("../project-venv/bin/python kdkit.pyz diagnose --expect cpu && "
            "../project-venv/bin/python kdkit.pyz verify-env --lock "
            "project/requirements/cpu.txt") in run_md
    assert "docker" not in run_md
    result = invoke("verify-bundle", out)
    assert result.exit_code == 0
    assert result.stdout == f"OK: {len(listed)} files match SHA256SUMS in {out}\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bundle")]


def test_zipapp_runs_diagnose_without_kdkit_installed(locked: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _bundle(locked, out, "--no-image")
    # -I: isolated mode, so the kdkit of this checkout cannot be imported from anywhere but the zipapp.
    done = subprocess.run([sys.executable, "-I", "kdkit.pyz", "diagnose", "--expect", "cpu"],
                          cwd=out,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS: torch computes on cpu" in done.stdout
    listing = subprocess.run([sys.executable, "-I", "kdkit.pyz", "--help"], cwd=out,
                             capture_output=True,
                             text=True, check=False)
    assert listing.returncode == 0
    from kdkit.core.commands import ZIPAPP, runs_in

    assert [line.split()[0] for line in listing.stdout.splitlines()[3:]] == runs_in(ZIPAPP)
    assert "gather" in runs_in(ZIPAPP) and "sweep" in runs_in(ZIPAPP)


def test_existing_out_is_refused_without_force_and_replaced_with_it(
    locked: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "keep.txt").write_text("old\n", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke("bundle", locked, "--out", out, "--no-image")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {out}: already exists; choose a new --out folder or pass "
                             "--force to replace it\n")
    assert tree_snapshot(tmp_path) == before
    # Issue 10: --force used to delete any folder; it now replaces only a bundle kdkit wrote.
    result = invoke("bundle", locked, "--out", out, "--no-image", "--force")
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {out}: holds no readable bundle.json, so kdkit did not write "
                             "it as a bundle; --force replaces only a bundle that kdkit wrote: "
                             "choose a new --out or move the folder away first\n")
    assert tree_snapshot(tmp_path) == before
    (out / "keep.txt").unlink()
    out.rmdir()
    _bundle(locked, out, "--no-image")
    old_sums = (out / "SHA256SUMS").read_bytes()
    (locked / "src" / "train.py").write_text("# a new revision of the loop\n", encoding="utf-8")
    _bundle(locked, out, "--no-image", "--force")
    assert (out / "SHA256SUMS").read_bytes() != old_sums
    assert (out
            / "project/src/train.py").read_text(encoding="utf-8") == "# a new revision of the loop\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("damage", ["altered", "missing", "added"])
def test_verify_bundle_names_the_damaged_file(locked: Path, tmp_path: Path, damage: str) -> None:
    out = tmp_path / "bundle"
    _bundle(locked, out, "--no-image")
    target = out / "project" / "data" / "pilot" / "doc-03.txt"
    if damage == "altered":
        data = bytearray(target.read_bytes())
        data[10] ^= 0x01  # one flipped bit
        target.write_bytes(bytes(data))
        problem = "altered: its sha256 differs from SHA256SUMS"
    elif damage == "missing":
        target.unlink()
        problem = "missing"
    else:
        target = out / "project" / "src" / "extra.py"
        target.write_text("print('not bundled')\n", encoding="utf-8")
        problem = "not listed in SHA256SUMS (added after bundling)"
    result = invoke("verify-bundle", out)
    assert result.exit_code == 1
    assert result.stderr == (f"Error: {target}: {problem}; the bundle was changed or damaged in "
                             "transfer: copy it again\n")
    report = json.loads(invoke("verify-bundle", out, "--json").stdout)
    assert report["problems"] == [{"file": target.relative_to(out).as_posix(), "problem": problem}]


def test_results_written_inside_the_bundle_are_not_damage(locked: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    _bundle(locked, out, "--no-image")
    (out / "project" / "runs" / "pilot-1").mkdir(parents=True)
    (out / "project" / "runs" / "pilot-1" / "summary.json").write_text("{}\n", encoding="utf-8")
    assert invoke("verify-bundle", out).exit_code == 0


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("no-lock",
         "requirements/cpu.txt: no lock for backend cpu; run `kdkit lock --backend cpu`"),
        ("no-parent", "folder does not exist; create it or choose another --out"),
    ],
)
def test_bad_bundle_input_exits_2_and_writes_nothing(project: Path, tmp_path: Path, setup: str,
                                                     message: str) -> None:
    out = tmp_path / "missing-parent" / "bundle" if setup == "no-parent" else tmp_path / "bundle"
    if setup == "no-parent":
        write_fresh_lock(project)
    before = tree_snapshot(tmp_path)
    result = invoke("bundle", project, "--out", out, "--no-image")
    assert result.exit_code == 2
    assert message in result.stderr and len(result.stderr.splitlines()) == 1
    assert tree_snapshot(tmp_path) == before


def test_verify_bundle_of_a_folder_without_sums_is_bad_input(tmp_path: Path) -> None:
    result = invoke("verify-bundle", tmp_path)
    assert result.exit_code == 2
    assert result.stderr == (f"Error: {tmp_path / 'SHA256SUMS'}: not found; {tmp_path} is not a "
                             "kdkit bundle (made by `kdkit bundle`)\n")


# ---------------------------------------------------------------- a git checkout


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          env=env, check=True)
    return done.stdout.strip()


def test_git_project_is_bundled_at_its_revision(locked: Path, tmp_path: Path) -> None:
    _git(locked, "init", "-q")
    _git(locked, "add", "-A")
    _git(locked, "commit", "-q", "-m", "pilot")
    (locked / "src" / "train.py").write_text("# an uncommitted edit\n", encoding="utf-8")
    out = tmp_path / "bundle"
    info = _bundle(locked, out, "--no-image")
    assert info["revision"] == _git(locked, "rev-parse", "HEAD")
    assert info["uncommitted"] == ["src/train.py"]
    assert (out / "project/src/train.py").read_text(encoding="utf-8") != "# an uncommitted edit\n"
    text = invoke("bundle", locked, "--out", tmp_path / "second", "--no-image")
    assert "Warning: 1 uncommitted change(s) are NOT in the bundle" in text.stderr


def test_git_project_whose_lock_is_not_committed_is_refused(locked: Path, tmp_path: Path) -> None:
    _git(locked, "init", "-q")
    _git(locked, "add", "kdkit.json", "config", "data", "src", "requirements/base.in")
    _git(locked, "commit", "-q", "-m", "no lock")
    before = tree_snapshot(tmp_path)
    result = invoke("bundle", locked, "--out", tmp_path / "bundle", "--no-image")
    assert result.exit_code == 2
    revision = _git(locked, "rev-parse", "HEAD")[:12]
    assert result.stderr == (f"Error: requirements/cpu.txt: not committed at revision {revision}; "
                             "the bundle must carry it (git add requirements/cpu.txt && git "
                             "commit)\n")
    assert tree_snapshot(tmp_path) == before


# ---------------------------------------------------------------- with the image (Docker engine)


def _labelled_image(project: Path, tag: str, lock_sha256: str | None = None) -> None:
    """A small real image carrying the labels `kdkit build` gives this project (no torch install)."""
    import docker

    from kdkit.config.project import load_project
    from kdkit.image.labels import image_labels

    loaded = load_project(project)
    backend = loaded.backend("cpu")
    labels = image_labels(loaded, backend, lock_sha256 or sha256_file(backend.lock))
    dockerfile = io.BytesIO(f"FROM {BASE_IMAGE}\nRUN echo bundled > /marker\n".encode())
    client = docker.from_env()
    client.images.build(fileobj=dockerfile, tag=tag, labels=labels, rm=True, pull=False)
    client.close()


@pytest.fixture
def image(locked: Path, docker_engine: None) -> Iterator[str]:
    from kdkit.config.project import load_project
    from kdkit.image.labels import default_tag

    tag = default_tag(load_project(locked), "cpu", sha256_file(locked / "requirements" / "cpu.txt"))
    _labelled_image(locked, tag)
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


@pytest.mark.docker
def test_bundle_with_image_then_load_checks_id_and_labels(
    locked: Path, tmp_path: Path, image: str) -> None:
    out = tmp_path / "bundle"
    info = _bundle(locked, out)
    recorded = info["image"]
    assert isinstance(recorded, dict)
    assert recorded["ref"] == image and recorded["compressor"] == "zstd" and recorded["file"] == "image.tar.zst"
    assert (out / "image.tar.zst").read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstd magic
    run_md = (out / "RUN.md").read_text(encoding="utf-8")
    assert "    ../kdkit-venv/bin/python -m kdkit load .\n" in run_md
    assert "    zstd -q -dc image.tar.zst | docker load\n" in run_md
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=True)
    result = invoke("load", out, "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["image"] == image and report["id"] == recorded["id"] and image in report["loaded"]


@pytest.mark.docker
def test_load_refuses_an_altered_archive_before_loading(locked: Path,
                                                        tmp_path: Path, image: str) -> None:
    out = tmp_path / "bundle"
    _bundle(locked, out)
    subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=True)
    archive = out / "image.tar.zst"
    with archive.open("r+b") as handle:
        handle.seek(archive.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    result = invoke("load", out)
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (f"Error: {archive}: altered: its sha256 differs from "
                                              "SHA256SUMS; the bundle was changed or damaged in "
                                              "transfer: copy it again")
    inspect = subprocess.run(["docker", "image", "inspect", image],
                             capture_output=True, check=False)
    assert inspect.returncode != 0  # nothing was loaded


@pytest.mark.docker
def test_image_of_another_lock_is_refused_and_nothing_written(
    locked: Path, tmp_path: Path, image: str) -> None:
    _labelled_image(locked, image, lock_sha256=hashlib.sha256(b"another lock").hexdigest())
    before = tree_snapshot(tmp_path)
    result = invoke("bundle", locked, "--out", tmp_path / "bundle")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: image {image}: does not match the project "
                                    "(dev.kdkit.lock.sha256: image has '")
    assert tree_snapshot(tmp_path) == before


@pytest.mark.docker
def test_load_of_a_bundle_without_image_is_bad_input(locked: Path,
                                                     tmp_path: Path, docker_engine: None) -> None:
    out = tmp_path / "bundle"
    _bundle(locked, out, "--no-image")
    result = invoke("load", out)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (f"Error: {out / 'bundle.json'}: this bundle has no "
                                              "image (made with --no-image); use kdkit.pyz as "
                                              "RUN.md says, or bundle again with the image")


def test_the_dockerfile_writes_the_labels_the_bundle_checks(locked: Path) -> None:
    """The labels `kdkit build` gives (Dockerfile.common's LABEL, filled from image_labels) and those a
    bundle ties to its image are the same names: a label renamed on one side only fails here."""
    import re

    from kdkit.config.project import load_project
    from kdkit.config.shipped import dockerfile
    from kdkit.image.labels import LABEL, image_labels
    from kdkit.transfer.format import TIED_LABELS

    written = set(
        re.findall(r"^\s+(dev\.kdkit\.[a-z0-9_.]+)=",
                   dockerfile("common").read_text(), re.MULTILINE))
    loaded = load_project(locked)
    backend = loaded.backend("cpu")
    given = {key for key in image_labels(loaded, backend, sha256_file(backend.lock))
             if key.startswith(LABEL)}
    assert written == given
    assert {label for label in TIED_LABELS if label.startswith(LABEL)} <= given


def test_a_bundle_parses_its_lock_once(locked: Path, tmp_path: Path,
                                       lock_parses: list[str]) -> None:
    """Issue 30 §1: the freshness check, the machine-local pins, the sha256 bundle.json records and the default
    tag come from one read of the lock (before: two parses and a third read for the hash)."""
    info = _bundle(locked, tmp_path / "out", "--no-image")
    lock = locked / "requirements" / "cpu.txt"
    assert info["lock_sha256"] == sha256_file(lock)
    assert lock_parses.count(os.path.realpath(lock)) == 1, lock_parses


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize(("file", "where", "value"), PATH_KEYS, ids=[k[1] for k in PATH_KEYS])
def test_bundle_refuses_a_config_edited_after_validate(project: Path, tmp_path: Path, file: str,
                                                       where: str,
                                                       value: str, name: str) -> None:
    write_fresh_lock(project)
    set_key(project, file, where, HOSTILE[name](value))
    out = tmp_path / "bundle"
    _refused(["bundle", project, "--out", out, "--no-image", "--no-kdkit-wheels"], [project], where)
    assert not out.exists() and not any(p.name.startswith(".bundle") for p in tmp_path.iterdir())
