"""Places that cannot be written (issue 10 §14): `kdkit init`, `kdkit sweep` and `kdkit resume-test`
refuse them with exit 2 and one line, before anything is written, and never with a traceback.

Tests run as root, where chmod stops no write, so each place is made unwritable for real:

* a read-only bind mount, in a private mount namespace (`unshare --mount`, then
  `mount -o remount,bind,ro`): the kernel answers EROFS;
* the CLI run as another user (`setpriv --reuid 65534`) over root's folders: EACCES;
* a file where a folder is expected: ENOTDIR;
* a path under /proc, where no folder can be made: ENOENT;
* a tmpfs of 48 KiB for a 100 KiB template: ENOSPC half-way.

Options are checked before anything is written too: `--device quantum`, a `--plot` over an
existing file without `--force`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DATA, REPO, invoke, tree_snapshot

KDKIT = str(REPO / ".venv" / "bin" / "kdkit")
NOBODY = 65534
READ_ONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" "$1" && shift && exec "$@"'


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module")
def namespaces() -> None:
    if not _works(["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /mnt"]):
        pytest.skip("no private mount namespace here (unshare --mount needs CAP_SYS_ADMIN): read-only mounts "
                    "cannot be made")


@pytest.fixture(scope="module")
def setpriv() -> None:
    if shutil.which("setpriv") is None or not _works(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                                                      "--clear-groups", "true"]):
        pytest.skip("setpriv (util-linux) cannot switch user here")


def kdkit(*args: object, user: int | None = None, read_only: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a subprocess, as ``user`` and/or with ``read_only`` mounted read-only."""
    argv = [KDKIT, *map(str, args)]
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *argv]
    if read_only is not None:
        argv = ["unshare", "--mount", "sh", "-c", READ_ONLY, "sh", str(read_only), *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder every user can reach (pytest's tmp_path is root's alone), owned by root, mode 0755."""
    base = Path(tempfile.mkdtemp(prefix="kdkit-places-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base)


def _scaffold(where: Path) -> Path:
    from kdkit.project.init import init_project

    root = init_project(where / "proj", name="proj", backend="cpu")
    shutil.copyfile(DATA / "sweep" / "sweepapp.py", root / "src" / "sweepapp.py")
    config = root / "config" / "pilot.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["entry"] = "src.sweepapp:predict_ok"
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return root


# ---------------------------------------------------------------- kdkit init


def _init_message(target: Path, reason: str) -> str:
    return (f"Error: {target}: could not write the project ({reason}); nothing was left behind, free space or fix "
            "permissions (or choose another place) and retry")


@pytest.mark.parametrize("target", ["proj", "a/b/proj"])
def test_init_under_a_read_only_mount(namespaces: None, tmp_path: Path, target: str) -> None:
    before = tree_snapshot(tmp_path)
    line = one_error(kdkit("init", tmp_path / target, read_only=tmp_path))
    assert line == _init_message(tmp_path / target, "Read-only file system")
    assert tree_snapshot(tmp_path) == before and list(tmp_path.iterdir()) == []


def test_init_into_an_empty_folder_of_a_read_only_mount(namespaces: None, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    line = one_error(kdkit("init", tmp_path / "empty", read_only=tmp_path))
    assert line == _init_message(tmp_path / "empty", "Read-only file system")
    assert [p.name for p in tmp_path.iterdir()] == ["empty"] and list((tmp_path / "empty").iterdir()) == []


@pytest.mark.parametrize("target", ["proj", "new/deeper/proj"])
def test_init_as_a_user_who_may_not_write_there(setpriv: None, shared: Path, target: str) -> None:
    before = tree_snapshot(shared)
    line = one_error(kdkit("init", shared / target, user=NOBODY))
    assert line == _init_message(shared / target, "Permission denied")
    assert tree_snapshot(shared) == before and list(shared.iterdir()) == []


def test_init_where_a_file_stands_in_the_path(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("mine", encoding="utf-8")
    before = tree_snapshot(tmp_path)
    result = invoke("init", tmp_path / "notes" / "proj")
    assert result.exit_code == 2
    assert result.output.splitlines() == [_init_message(tmp_path / "notes" / "proj", "Not a directory")]
    assert tree_snapshot(tmp_path) == before


def test_init_under_proc(tmp_path: Path) -> None:
    result = invoke("init", "/proc/kdkit-nowhere/proj")
    assert result.exit_code == 2
    assert result.output.splitlines() == [_init_message(Path("/proc/kdkit-nowhere/proj"), "No such file or directory")]
    assert not Path("/proc/kdkit-nowhere").exists()


def test_init_on_a_full_disk_leaves_nothing(namespaces: None, tmp_path: Path) -> None:
    """A real ENOSPC half-way through the copy: a 48 KiB tmpfs for a 100 KiB template."""
    script = ('mount -t tmpfs -o size=48k tmpfs "$1" && "$2" init "$1/deep/proj"; rc=$?; '
              'find "$1" -mindepth 1 | sed "s|^|LEFT |"; exit $rc')
    done = subprocess.run(["unshare", "--mount", "sh", "-c", script, "sh", str(tmp_path), KDKIT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [_init_message(tmp_path / "deep" / "proj", "No space left on device")]
    assert "LEFT" not in done.stdout  # not the staging, not the parent folder init made


def test_init_refuses_before_cleaning_and_cleans_what_a_dead_init_left(tmp_path: Path) -> None:
    stale = tmp_path / ".proj.partial-999999999"  # a PID that cannot be alive
    (stale / "config").mkdir(parents=True)
    (stale / "config" / "pilot.json").write_text("{", encoding="utf-8")
    bad = invoke("init", tmp_path / "proj", "--name", "Bad Name")  # bad input: nothing touched, not even staging
    assert bad.exit_code == 2 and stale.is_dir()
    result = invoke("init", tmp_path / "proj")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"removed {stale} (staging left by a process that no longer runs)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]
    assert invoke("validate", tmp_path / "proj").exit_code == 0


# ---------------------------------------------------------------- kdkit sweep


SWEEP_RUNS = r"Error: {runs}/sweep-\d{{8}}-\d{{6}}: cannot write there \({runs}: {reason}\); make it writable or " \
             r"choose another runs folder \(pilot config's runs\)"


def test_sweep_in_a_read_only_project(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    line = one_error(kdkit("sweep", root, read_only=root))
    assert re.fullmatch(SWEEP_RUNS.format(runs=re.escape(str(root / "runs")), reason="read-only file system"), line)
    assert tree_snapshot(root) == before


def test_sweep_as_a_user_who_may_not_write_the_project(setpriv: None, shared: Path) -> None:
    root = _scaffold(shared)
    before = tree_snapshot(root)
    line = one_error(kdkit("sweep", root, user=NOBODY))
    assert re.fullmatch(SWEEP_RUNS.format(runs=re.escape(str(root / "runs")), reason="permission denied"), line)
    assert tree_snapshot(root) == before


def test_sweep_when_runs_is_a_file(tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    (root / "runs").rmdir()
    (root / "runs").write_text("not a folder", encoding="utf-8")
    before = tree_snapshot(root)
    result = invoke("sweep", root)
    assert result.exit_code == 2
    runs = re.escape(str(root / "runs"))
    assert re.fullmatch(rf"Error: {runs}/sweep-\d{{8}}-\d{{6}}: {runs} is not a folder; move it away or choose "
                        r"another runs folder \(pilot config's runs\)", result.stderr.strip())
    assert tree_snapshot(root) == before


def test_sweep_plot_into_a_read_only_folder(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path / "p")
    plots = tmp_path / "plots"
    plots.mkdir()
    before = tree_snapshot(tmp_path)
    line = one_error(kdkit("sweep", root, "--plot", plots / "s.png", read_only=plots))
    assert line == (f"Error: {plots}: cannot write there ({plots}: read-only file system); make it writable or "
                    "choose another folder for --plot")
    assert tree_snapshot(tmp_path) == before


def test_sweep_plot_over_an_existing_file_needs_force(tmp_path: Path) -> None:
    root = _scaffold(tmp_path / "p")
    plot = tmp_path / "sweep.png"
    plot.write_bytes(b"my own picture")
    before = tree_snapshot(tmp_path)
    result = invoke("sweep", root, "--plot", plot)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: --plot {plot}: already exists; pass --force to replace it, or "
                                          "choose another name"]
    assert tree_snapshot(tmp_path) == before  # the file untouched, no sweep folder either
    forced = invoke("sweep", root, "--plot", plot, "--force")
    assert forced.exit_code == 0, forced.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_plot_onto_a_folder(tmp_path: Path) -> None:
    root = _scaffold(tmp_path / "p")
    (tmp_path / "pic.png").mkdir()
    before = tree_snapshot(tmp_path)
    result = invoke("sweep", root, "--plot", tmp_path / "pic.png", "--force")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: --plot {tmp_path / 'pic.png'}: is a folder; give a file name "
                                          "ending in .png"]
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("device", ["quantum", "", "cuda:x", "CUDA", "cpu ", "cuda:0,1", "../cpu"])
def test_sweep_unknown_device_writes_nothing(tmp_path: Path, device: str) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    result = invoke("sweep", root, "--device", device)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: --device {device!r}: unknown device; use auto, cpu, cuda or "
                                          "cuda:N"]
    assert tree_snapshot(root) == before


# ---------------------------------------------------------------- kdkit resume-test


RESUME_RUNS = r"Error: {runs}/resume-test-\d{{8}}-\d{{6}}: cannot write there \({runs}: {reason}\); make it " \
              r"writable or choose another folder for the test"


def test_resume_test_in_a_read_only_project(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    line = one_error(kdkit("resume-test", root, read_only=root))
    assert re.fullmatch(RESUME_RUNS.format(runs=re.escape(str(root / "runs")), reason="read-only file system"), line)
    assert tree_snapshot(root) == before


def test_resume_test_as_a_user_who_may_not_write_the_project(setpriv: None, shared: Path) -> None:
    root = _scaffold(shared)
    before = tree_snapshot(root)
    line = one_error(kdkit("resume-test", root, user=NOBODY))
    assert re.fullmatch(RESUME_RUNS.format(runs=re.escape(str(root / "runs")), reason="permission denied"), line)
    assert tree_snapshot(root) == before


def test_resume_test_when_runs_is_a_file(tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    (root / "runs").rmdir()
    (root / "runs").write_text("not a folder", encoding="utf-8")
    before = tree_snapshot(root)
    result = invoke("resume-test", root)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"{root / 'runs'} is not a folder; move it away or choose another folder "
                                          "for the test")
    assert tree_snapshot(root) == before


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "quantum"], "--device 'quantum': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", ""], "--device '': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", "cuda:-1"], "--device 'cuda:-1': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", "cuda:0; rm -rf /"], "--device 'cuda:0; rm -rf /': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--python", "/nonexistent/python"], "--python /nonexistent/python: not an executable interpreter; give the one "
                                          "that has the project's torch (default: this one)"),
    (["--python", "/bin/true"], "--python /bin/true: not an executable interpreter; give the one that has the "
                                "project's torch (default: this one)"),
    (["--python", "/bin/false"], "--python /bin/false: not an executable interpreter; give the one that has the "
                                 "project's torch (default: this one)"),
    (["--python", "/etc/hostname"], "--python /etc/hostname: not an executable interpreter; give the one that has "
                                    "the project's torch (default: this one)"),
])
def test_resume_test_checks_every_option_before_writing(tmp_path: Path, args: list[str], message: str) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    result = invoke("resume-test", root, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"Error: {message}"]
    assert tree_snapshot(root) == before and list((root / "runs").iterdir()) == []


# ---------------------------------------------------------------- a GPU device where torch sees none


def _gpus_here() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.parametrize("command", ["sweep", "resume-test"])
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7"])
def test_a_gpu_device_on_a_host_without_one_is_exit_3_and_writes_nothing(tmp_path: Path, command: str,
                                                                          device: str) -> None:
    if _gpus_here():
        pytest.skip("this host has a GPU")
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    result = invoke(command, root, "--device", device)
    assert result.exit_code == 3, result.output
    assert result.stderr.splitlines() == [f"Error: --device {device}: torch sees no GPU here; run where the GPU is "
                                          "(`kdkit diagnose` says why not) or use cpu"]
    assert tree_snapshot(root) == before


def test_the_pilot_configs_gpu_device_is_named_where_it_comes_from(tmp_path: Path) -> None:
    if _gpus_here():
        pytest.skip("this host has a GPU")
    root = _scaffold(tmp_path)
    config = root / "config" / "pilot.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"device": "auto"', '"device": "cuda:1"'),
                      encoding="utf-8")
    assert '"cuda:1"' in config.read_text(encoding="utf-8")
    result = invoke("sweep", root)
    assert result.exit_code == 3
    assert result.stderr.startswith(f"Error: {config}: $.device cuda:1: torch sees no GPU here;")


def test_a_gpu_index_beyond_the_gpus_there_is_bad_input() -> None:
    from kdkit.core.errors import BadInput, Unavailable
    from kdkit.probe.measure.resume import require_gpu

    require_gpu("cpu", 0)
    require_gpu("cuda:1", 2)
    with pytest.raises(BadInput, match=r"^--device cuda:2: torch sees 2 GPU\(s\) here \(cuda:0\.\.cuda:1\); choose"):
        require_gpu("cuda:2", 2)
    with pytest.raises(Unavailable, match=r"^--device cuda: torch sees no GPU here"):
        require_gpu("cuda", 0)
