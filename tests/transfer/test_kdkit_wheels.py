"""kdkit-wheels/: kdkit's own wheel, the locked wheels from kdkit's cache, and what a bundle makes of both."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kdkit.transfer.kdkitwheels import MANIFEST, WHEELS, _files, write_kdkit_wheel
from tests.conftest import invoke, tree_snapshot


def _bundle(project: Path, out: Path) -> dict[str, Any]:
    result = invoke("bundle", project, "--out", out, "--no-image", "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(tmp_path: Path) -> None:
    wheel = write_kdkit_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    assert "kdkit/_data/requirements/runtime.txt" in names and "kdkit/_data/project-template/kdkit.json" in names
    assert "kdkit/data/pairings.json" in names and "kdkit/cli/__init__.py" in names
    odd = [n for n in names if not n.startswith(("kdkit/_data/", "kdkit-"))
           and not n.endswith((".py", ".json"))]
    assert odd == []
    (tmp_path / "again").mkdir()
    # same files, same bytes
    assert write_kdkit_wheel(tmp_path / "again").read_bytes() == wheel.read_bytes()


def test_links_and_caches_never_travel_in_the_wheel(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "__pycache__").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "secret").write_text("root:*:1:0:::\n")
    (tmp_path / "pkg" / "link.py").symlink_to(tmp_path / "secret")
    (tmp_path / "pkg" / "linked").symlink_to(tmp_path, target_is_directory=True)
    assert [name for name, _ in _files(tmp_path / "pkg", "kdkit")] == ["kdkit/mod.py"]


def test_kdkit_installs_offline_from_a_bundle_and_verifies_it(locked: Path, tmp_path: Path) -> None:
    info = _bundle(locked, tmp_path / "bundle")
    assert "3.11" in info["kdkit_wheels"]["pythons"]
    folder, env = tmp_path / "bundle" / WHEELS, tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", env], check=True)
    offline = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # no local wheels, no index
    done = subprocess.run([env / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-index",
                           "--find-links",
                           folder, "--require-hashes", "-r", folder / "requirements.txt"],
                          env=offline, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    verified = subprocess.run([env / "bin" / "python", "-m", "kdkit",
                               "verify-bundle", tmp_path / "bundle"],
                              env=offline, capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_bundle_made_under_umask_077_is_readable_by_the_containers_user(
    locked: Path, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        _bundle(locked, tmp_path / "bundle")
    finally:
        os.umask(old)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "bundle").rglob("*")}
    assert modes["bundle/project/data/pilot/manifest.json"] == 0o644
    assert modes["bundle/project/data/pilot"] == 0o755
    assert {m & 0o044 for m in modes.values()} == {0o044}  # everything readable by group and others


@pytest.mark.slow
def test_the_cache_is_refetched_when_incomplete_and_refused_when_altered(locked: Path,
                                                                         tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDKIT_CACHE_DIR", str(tmp_path / "cache"))
    _bundle(locked, tmp_path / "first")
    cached = next((tmp_path / "cache" / WHEELS).iterdir())
    listed = json.loads((cached / MANIFEST).read_text())["files"]
    click = next(name for name in listed if name.startswith("click-"))
    (cached / click).unlink()  # a wheel lost from the cache: fetched again, the bundle whole
    info = _bundle(locked, tmp_path / "second")
    assert click in info["kdkit_wheels"]["files"] and (cached / click).is_file()
    rich = next(name for name in listed if name.startswith("rich-"))
    # a wheel swapped for another: refused, nothing written
    shutil.copyfile(cached / click, cached / rich)
    before = tree_snapshot(tmp_path / "third")
    result = invoke("bundle", locked, "--out", tmp_path / "third", "--no-image")
    assert result.exit_code == 1 and f"{cached / rich}: its hash is not the lock's for it" in result.stderr
    assert tree_snapshot(tmp_path / "third") == before and not (tmp_path / "third").exists()
