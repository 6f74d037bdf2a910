"""Issue 31: every hint the main path prints is a command that works, run literally, one after the other, from a
folder above the project, as a newcomer pastes them: init's git line and its "Next:", lock's way to build here
offline (torch came from a folder of this machine), wheelhouse's "Next:", and build's "Next:", which passes the
pilot. The only additions are what this machine needs and a user's would not: the torch folder as lock's
KDKIT_TORCH_FIND_LINKS (a user's torch index) and --base-image (no registry here)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BASE, TORCH_WHEELS

pytestmark = pytest.mark.docker

GIT_ID = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
          "GIT_COMMITTER_EMAIL": "t@example.org"}
# a bound that only catches a hang: a build from cached layers takes a minute, a cold one several
HANG_S = 1800


def pasted(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``line`` run as a person pastes it into bash; it must succeed."""
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=HANG_S,
                          check=False)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done


def hint(output: str, pattern: str) -> str:
    """The one command ``pattern`` (a regular expression with one group) finds in ``output``."""
    (found,) = re.findall(pattern, output, flags=re.MULTILINE)
    return str(found)


def test_each_hint_of_the_main_path_runs_as_printed(docker_engine: None, tmp_path: Path) -> None:
    if not any(TORCH_WHEELS.glob("torch-*.whl")):
        pytest.skip(f"no torch wheel in {TORCH_WHEELS} (KDKIT_TEST_TORCH_WHEELS)")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, **GIT_ID, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KDKIT_TORCH_FIND_LINKS": str(TORCH_WHEELS)}
    init = pasted("kdkit init kdkit-e2e --backend cpu", tmp_path, env)
    pasted(hint(init.stdout, r"start it with: (.+)$"), tmp_path, env)
    locked = pasted(hint(init.stdout, r"^Next: (.+)$"), tmp_path, env)  # validate && lock
    offline = hint(locked.stderr, r"build the image here offline: `([^`]+)`")
    assert offline == f"kdkit wheelhouse {shlex.quote(str(tmp_path / 'kdkit-e2e'))} --backend cpu"
    made = pasted(offline, tmp_path, env)
    build = hint(made.stdout, r"^Next: (kdkit build .+)$")
    built = pasted(f"{build} --base-image {shlex.quote(BASE)} --tag kdkit-e2e:hints", tmp_path, env)
    run = hint(built.stdout, r"^Next: (kdkit run .+?)   \(or ")
    try:
        ran = pasted(run, tmp_path, env)
    finally:
        subprocess.run(["docker", "rmi", "-f", "kdkit-e2e:hints"], capture_output=True,
                       timeout=HANG_S, check=False)
    assert "PASS: every ID exactly once" in ran.stdout
    assert "Verdict: passed" in ran.stderr
