"""`kdkit init`: the scaffold's content and its refusal to overwrite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kdkit.project import init as scaffold
from tests.conftest import invoke, tree_snapshot


def test_init_creates_a_complete_project(tmp_path: Path) -> None:
    result = invoke("init", tmp_path / "Doc Classifier", "--backend", "rocm")
    assert result.exit_code == 0, result.output
    root = tmp_path / "Doc Classifier"
    config = json.loads((root / "kdkit.json").read_text())
    assert config["name"] == "doc-classifier"
    assert config["default_backend"] == "rocm"
    assert set(config["backends"]) == {"cuda", "rocm", "cpu"}
    assert "doc-classifier" in (root / "README.md").read_text()
    for rel in ("config/pilot.json", "requirements/base.in",
                ".gitignore", ".env.example", "src/classify.py"):
        assert (root / rel).is_file(), rel
    assert (root / "runs").is_dir()
    assert "runs/" in (root / ".gitignore").read_text()


def test_pilot_data_has_twelve_documents_one_planned_rejection(project: Path) -> None:
    manifest = json.loads((project / "data/pilot/manifest.json").read_text())["documents"]
    assert len(manifest) == 12
    assert len({d["id"] for d in manifest}) == 12
    rejects = [d for d in manifest if d["expect"] == "reject"]
    assert len(rejects) == 1
    bad = (project / "data/pilot" / rejects[0]["file"]).read_bytes()
    with pytest.raises(UnicodeDecodeError):
        bad.decode("utf-8")
    sizes = sorted((project / "data/pilot" / d["file"]).stat().st_size for d in manifest)
    assert sizes[-1] > 20 * sizes[1], "documents should range from a few lines to a few pages"


def test_pilot_documents_are_copied_byte_for_byte(project: Path) -> None:
    from kdkit.config.shipped import template_dir

    for source in (template_dir() / "data/pilot").iterdir():
        assert (project / "data/pilot" / source.name).read_bytes() == source.read_bytes()


def test_init_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    target = tmp_path / "existing"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    before = tree_snapshot(tmp_path)
    result = invoke("init", target)
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"Error: {target}: folder exists and is not empty; choose a new path or pass --force"
    )
    assert tree_snapshot(tmp_path) == before


def test_init_force_keeps_other_files(tmp_path: Path) -> None:
    target = tmp_path / "existing"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    assert invoke("init", target, "--force", "--name", "x").exit_code == 0
    assert (target / "notes.txt").read_text() == "mine"
    assert (target / "kdkit.json").is_file()


def test_init_into_an_empty_folder_is_allowed(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert invoke("init", tmp_path / "empty").exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--name", "Bad Name"], "--name 'Bad Name': use lowercase letters, digits"),
        (["--backend", "tpu"], "Invalid value for '--backend'"),
    ],
)
def test_init_bad_options_write_nothing(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("init", tmp_path / "p", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "p").exists()


def test_init_failure_half_way_leaves_nothing(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    copied = 0
    real_copyfile = scaffold.shutil.copyfile

    def failing_copyfile(src: Path, dst: Path) -> object:
        nonlocal copied
        copied += 1
        if copied == 5:
            raise OSError(28, "No space left on device")
        return real_copyfile(src, dst)

    monkeypatch.setattr(scaffold.shutil, "copyfile", failing_copyfile)
    result = invoke("init", tmp_path / "p")
    assert result.exit_code == 2  # the target cannot be written: bad input (was 1 before issue 10)
    assert "could not write the project (No space left on device); nothing was left behind" in result.output
    assert list(tmp_path.iterdir()) == []


def test_init_dot_in_an_empty_folder_keeps_that_folder(tmp_path: Path) -> None:
    """`mkdir p && cd p && kdkit init .`: the shell's folder is filled, never replaced by another one."""
    import subprocess

    from tests.conftest import REPO

    folder = tmp_path / "p"
    folder.mkdir()
    inode = folder.stat().st_ino
    done = subprocess.run([str(REPO / ".venv/bin/kdkit"), "init", "."], cwd=folder,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert folder.stat().st_ino == inode and (folder / "kdkit.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]  # no staging left beside it
    assert invoke("validate", folder).exit_code == 0


def test_init_failure_while_filling_an_empty_folder_leaves_it_empty(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    moved = 0
    real_replace = scaffold.os.replace

    def failing_replace(src: str, dst: str) -> None:
        nonlocal moved
        moved += 1
        if moved == 6:
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(scaffold.os, "replace", failing_replace)
    result = invoke("init", target)
    assert result.exit_code == 2
    assert "could not write the project (Input/output error); nothing was left behind" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and list(target.iterdir()) == []
