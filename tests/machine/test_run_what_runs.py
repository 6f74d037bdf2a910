"""`kdkit run` runs the project as the user sees it, with its declared mounts and cache, and records what ran.

Real Docker: a copy of the session's locked project built under its own tag (kdkit-a26:cpu), then edited."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BASE, copy_tree, invoke

TAG = "kdkit-a26:cpu"
WRITE_CHECK = ("import os, sys\n"
               "p = sys.argv[1]\n"
               "try:\n    open(os.path.join(p, 'probe.txt'), 'w').write('x'); print('WROTE', p)\n"
               "except OSError as e:\n    print('REFUSED', p, e.errno)\n")


def _one_error(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.fixture(scope="module")
def a26(docker_engine: None, locked: Path, wheelhouse: Path, ca_bundle: tuple[Path, bytes],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The locked project, built under TAG, then edited: batch_size 2, a changed app file, two declared mounts,
    in a git checkout (its revision is recorded)."""
    root = copy_tree(locked, tmp_path_factory.mktemp("a26") / "kdkit-e2e")
    result = invoke("build", root, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                    wheelhouse,
                    "--ca-bundle", ca_bundle[0], "--tag", TAG)
    assert result.exit_code == 0, result.output
    pilot = json.loads((root / "config/pilot.json").read_text(encoding="utf-8"))
    pilot["batch_size"] = 2
    (root / "config/pilot.json").write_text(json.dumps(pilot, indent=2), encoding="utf-8")
    with (root / "src/classify.py").open("a", encoding="utf-8") as app:
        app.write("\n# edited after the build\n")
    (root / "models/m").mkdir(parents=True)
    (root / "models/m/weights.txt").write_text("declared weights", encoding="utf-8")
    (root / "scratch").mkdir()
    project = json.loads((root / "kdkit.json").read_text(encoding="utf-8"))
    project["mounts"] = {"model": {"path": "models/m", "env": "MODEL_DIR"},
                         "scratch": {"path": "scratch", "writable": True}}
    (root / "kdkit.json").write_text(json.dumps(project, indent=2), encoding="utf-8")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "edited"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    yield root
    subprocess.run(["docker", "rmi", "-f", TAG], capture_output=True)


def test_inspect_says_the_project_differs_and_exits_0(a26: Path) -> None:
    result = invoke("inspect", TAG, "--project", a26, "--json")
    assert result.exit_code == 0, result.output
    project = json.loads(result.stdout)["project"]
    assert project["matches"] is False and project["image_sha256"] != project["project_sha256"]
    assert project["changed"] == ["config/pilot.json", "src/classify.py"]
    text = invoke("inspect", TAG, "--project", a26)
    assert "Project: config/ and src/ differ from the image's (kdkit run mounts" in text.output


def test_the_edited_config_and_app_run_and_params_record_what_ran(a26: Path) -> None:
    # the shared locked project may hold runs already
    before = {p for p in (a26 / "runs").iterdir() if p.is_dir()}
    result = invoke("run", a26, "--image", TAG)
    assert result.exit_code == 0, result.output
    (folder,) = [p for p in (a26 / "runs").iterdir() if p.is_dir() and p not in before]
    params = json.loads((folder / "params.json").read_text(encoding="utf-8"))
    assert params["params"]["batch_size"] == 2
    edited = hashlib.sha256((a26 / "src/classify.py").read_bytes()).hexdigest()
    assert params["app"]["files"]["src/classify.py"] == edited
    image = json.loads(invoke("inspect", TAG, "--json").stdout)
    launch = params["launch"]
    head = subprocess.run(["git", "-C", str(a26), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout
    assert (launch["image_id"], launch["image"], launch["lock_sha256"], launch["network"]) == (
        image["id"], TAG, image["kdkit"]["lock.sha256"], "none")
    assert launch["revision"] == head.strip()  # runs/ and .kdkit-cache/ are ignored: a clean tree
    # no .git in the container: the launch record's (issue 31)
    assert params["code"]["revision"] == head.strip()
    # issue 31 §6: what the container's user 10001 wrote (0600) is readable, said so
    if os.geteuid() == 0:
        assert all(p.stat().st_mode & stat.S_IROTH for p in [folder, *folder.rglob("*")])
        assert folder.stat().st_uid == 10001 and f"{folder}: made readable by everyone" in result.stderr
    targets = {m["target"]: m for m in launch["mounts"]}
    assert targets["/app/src"]["source"] == str(
        (a26 / "src").resolve()) and not targets["/app/src"]["writable"]
    assert targets["/mnt/scratch"]["writable"] and targets["/cache"]["writable"]


def _in_container(root: Path, *args: str, code: str, extra: tuple[str, ...] = ()) -> str:
    result = invoke("run", root, "--image", TAG, *extra, "--", "python", "-c", code, *args)
    assert result.exit_code == 0, result.output
    return str(result.stdout)


def test_declared_mounts_are_read_only_unless_writable_and_the_cache_persists(a26: Path) -> None:
    read = (
        "import os; print('READ', open(os.environ['MODEL_DIR'] + '/weights.txt').read(), "
        "os.environ['HF_HOME'])")
    assert "READ declared weights /cache/huggingface" in _in_container(a26, code=read)
    out = _in_container(a26, "/mnt/model", code=WRITE_CHECK)
    assert "REFUSED /mnt/model 30" in out  # EROFS
    assert "WROTE /mnt/scratch" in _in_container(a26, "/mnt/scratch", code=WRITE_CHECK)
    assert (a26 / "scratch/probe.txt").read_text() == "x"
    _in_container(a26, code="import os; os.makedirs('/cache/torch', exist_ok=True); "
                             "open('/cache/torch/kept.txt', 'w').write('run 1')")
    assert "KEPT run 1" in _in_container(
        a26, code="print('KEPT', open('/cache/torch/kept.txt').read())")
    assert (a26 / ".kdkit-cache/torch/kept.txt").is_file()


def test_mount_option_overrides_the_declared_folder(a26: Path, tmp_path: Path) -> None:
    (tmp_path / "weights.txt").write_text("from the command line", encoding="utf-8")
    # the container's user (10001 when root runs kdkit) reads it; kdkit never chmods a folder
    tmp_path.chmod(0o755)
    read = "import os; print('READ', open(os.environ['KDKIT_MOUNT_MODEL'] + '/weights.txt').read())"
    assert "READ from the command line" in _in_container(
        a26, code=read, extra=("--mount", f"{tmp_path}:model"))


@pytest.mark.parametrize("option, message", [
    ("{tmp}:weights", "declares no mount 'weights'"),
    ("/no/such/folder:model", "is not an existing folder"),
    ("model", "expected SRC:NAME"),
])
def test_bad_mount_options_are_one_line_exit_2(a26: Path, tmp_path: Path,
                                               option: str, message: str) -> None:
    result = invoke("run", a26, "--image", TAG, "--mount", option.format(tmp=tmp_path))
    assert result.exit_code == 2
    assert message in _one_error(result.output)


def test_a_declared_path_leaving_the_project_is_exit_2(a26: Path, tmp_path: Path) -> None:
    root = copy_tree(a26, tmp_path / "copy")
    (root / "outside").symlink_to(tmp_path)
    project = json.loads((root / "kdkit.json").read_text(encoding="utf-8"))
    project["mounts"]["model"]["path"] = "outside"
    (root / "kdkit.json").write_text(json.dumps(project), encoding="utf-8")
    result = invoke("run", root, "--image", TAG, "--print")
    assert result.exit_code == 2
    assert "$.mounts.model.path: 'outside' leads to" in _one_error(result.output)


def test_print_shows_the_mounts_and_the_launch_record(a26: Path) -> None:
    result = invoke("run", a26, "--image", TAG, "--print")
    assert result.exit_code == 0, result.output
    words = shlex.split(result.stdout.splitlines()[-1])
    mounts = {word.split(",target=")[1] for word in words if word.startswith("type=bind,")}
    assert {"/app/kdkit.json,readonly", "/app/config,readonly", "/app/src,readonly",
            "/mnt/model,readonly",
            "/mnt/scratch", "/cache"} <= mounts
    (launch,) = [word for word in words if word.startswith("KDKIT_LAUNCH=")]
    assert json.loads(launch.removeprefix("KDKIT_LAUNCH="))["image"] == TAG


def test_a_bad_launch_variable_stops_the_pilot_with_exit_2(a26: Path, tmp_path: Path) -> None:
    env: dict[str, Any] = {**os.environ, "KDKIT_LAUNCH": "{not json"}
    done = subprocess.run([str(Path(__file__).resolve().parents[2] / ".venv/bin/kdkit"), "pilot",
                           str(a26)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "KDKIT_LAUNCH:1:2: malformed JSON" in done.stderr
