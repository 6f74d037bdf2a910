"""Issue 31 §5: a run records the code revision it ran, so `init` says how to put a new project under git (a line
that works as printed) and `validate` warns while the project is outside git or has uncommitted changes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1"}


def _kdkit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # no global git config: only the project's own repository
    env = {**os.environ, **GIT_ID, "HOME": str(cwd)}
    return subprocess.run([sys.executable, "-m", "kdkit", *args], cwd=cwd, env=env,
                          capture_output=True, text=True,
                          timeout=300)


def _git_warnings(cwd: Path) -> list[str]:
    done = _kdkit(cwd, "validate", "proj", "--json")
    assert done.returncode == 0, done.stderr
    return [w["why"] for w in json.loads(done.stdout)["warnings"] if w["name"] == "git"]


def test_init_says_how_to_start_git_and_validate_warns_until_it_is_clean(tmp_path: Path) -> None:
    made = _kdkit(tmp_path, "init", "proj", "--backend", "cpu")
    assert made.returncode == 0, made.stderr
    (line,) = [ln for ln in made.stdout.splitlines() if ln.startswith("Not under git")]
    assert _git_warnings(tmp_path) == [
        "not a git checkout (or no git here), so a run records no code revision; start one there: "
        "`git init -q && git add -A && git commit -qm 'kdkit init'`"]
    command = line.split("start it with: ", 1)[1]
    assert command == "cd proj && git init -q && git add -A && git commit -qm 'kdkit init'"
    env = {**os.environ, **GIT_ID, "HOME": str(tmp_path)}
    # as printed
    subprocess.run(["sh", "-e", "-c", command], cwd=tmp_path, env=env, check=True, timeout=120)
    assert _git_warnings(tmp_path) == []
    (tmp_path / "proj" / "src" / "classify.py").write_text("# changed\n", encoding="utf-8")
    assert _git_warnings(tmp_path) == [
        "1 uncommitted change(s) (src/classify.py): a run records its revision as dirty; commit "
        "them first"]
    # inside a checkout: nothing to say
    again = _kdkit(tmp_path / "proj", "init", "inner", "--backend", "cpu")
    assert again.returncode == 0 and "Not under git" not in again.stdout


def test_a_project_named_like_an_option_gets_lines_that_never_read_it_as_one(
    tmp_path: Path) -> None:
    """A hostile review's find: `init -- -P` printed `cd -P && git init ...`, which went to $HOME and committed it."""
    made = _kdkit(tmp_path, "init", "--backend", "cpu", "--", "-P")
    assert made.returncode == 0, made.stderr
    (line,) = [ln for ln in made.stdout.splitlines() if ln.startswith("Not under git")]
    command = line.split("start it with: ", 1)[1]
    assert command.startswith("cd ./-P && ")
    assert "Next: kdkit validate ./-P && kdkit lock ./-P --backend cpu" in made.stdout
    env = {**os.environ, **GIT_ID, "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    subprocess.run(["sh", "-e", "-c", command], cwd=tmp_path, env=env, check=True, timeout=120)
    assert (tmp_path / "-P" / ".git").is_dir() and not (tmp_path / "home" / ".git").exists()
