"""Issue 10 §6 for images: what `kdkit build` sends to Docker never holds a secret-shaped file or
a file reached through a link out of the project (found by the bundle's hostile tests: the build
context took config/.env, src/id_rsa and a src/ link to /etc/shadow)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.image.build import context_entries, plan_build
from kdkit.image.context import write_context
from tests.conftest import copy_tree, invoke

SECRET_NAMED = ["config/.env", "config/.env.production", "src/id_rsa", "src/id_ed25519",
                "src/.netrc",
                "src/secrets.env", "src/server.pem", "src/deploy.key", "config/credentials.json"]


@pytest.fixture
def project(locked: Path, tmp_path: Path) -> Path:
    return copy_tree(locked, tmp_path / "proj")


def _context_names(project: Path) -> list[str]:
    out = io.BytesIO()
    write_context(context_entries(plan_build(project, "cpu")), out)
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return tar.getnames()


def test_secret_shaped_files_never_enter_the_build_context(project: Path) -> None:
    for rel in SECRET_NAMED:
        (project / rel).write_text("AKIA" + "Q" * 16 + "\n")
    plan = plan_build(project, "cpu")
    assert sorted(plan.left_out) == sorted(SECRET_NAMED)
    names = _context_names(project)
    assert "project/src/classify.py" in names
    assert not [n for n in names if n.removeprefix("project/") in SECRET_NAMED]


@pytest.mark.parametrize("target", ["/etc/shadow", "/etc/passwd", "../../outside.txt"])
def test_a_link_out_of_the_project_is_refused_before_any_build(project: Path, target: str) -> None:
    (project.parent / "outside.txt").write_text("outside\n")
    (project / "src" / "linked").symlink_to(target)
    if not (project / "src" / "linked").exists():
        pytest.skip(f"{target} does not exist here")
    with pytest.raises(
        BadInput, match=r"src/linked: leads to .*, outside the project \(a symbolic link\)"):
        plan_build(project, "cpu")
    result = invoke("build", project, "--backend", "cpu")
    assert result.exit_code == 2 and "outside the project" in result.stderr


def test_a_link_inside_the_project_is_carried_as_its_file(project: Path) -> None:
    (project / "src" / "alias.py").symlink_to("classify.py")
    assert "project/src/alias.py" in _context_names(project)
