"""Places `kdkit sweep` and `kdkit resume-test` cannot write (issue 10 §14), options they cannot use and a GPU
torch does not see: each refused with one line and exit 2 (3 for the missing GPU), before anything is written,
never with a traceback. The unwritable places are made for real, as tests/project/test_init_places.py says
(a read-only bind mount, another user, a file where a folder is expected).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import DATA, invoke, tree_snapshot
from tests.project.test_init_places import NOBODY, kdkit, one_error
from tests.project.test_init_places import namespaces as namespaces  # the fixtures, used here too
from tests.project.test_init_places import setpriv as setpriv
from tests.project.test_init_places import shared as shared


def _scaffold(where: Path) -> Path:
    from kdkit.project.init import init_project

    root = init_project(where / "proj", name="proj", backend="cpu")
    shutil.copyfile(DATA / "sweep" / "sweepapp.py", root / "src" / "sweepapp.py")
    config = root / "config" / "pilot.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["entry"] = "src.sweepapp:predict_ok"
    config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return root


# ---------------------------------------------------------------- kdkit sweep


SWEEP_RUNS = (r"Error: {runs}/sweep-\d{{8}}-\d{{6}}: cannot write there \({runs}: {reason}\); make "
              r"it writable or "
              r"choose another runs folder \(pilot config's runs\)")


def test_sweep_in_a_read_only_project(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    line = one_error(kdkit("sweep", root, read_only=root))
    assert re.fullmatch(
        SWEEP_RUNS.format(runs=re.escape(str(root / "runs")), reason="read-only file system"), line)
    assert tree_snapshot(root) == before


def test_sweep_as_a_user_who_may_not_write_the_project(setpriv: None, shared: Path) -> None:
    root = _scaffold(shared)
    before = tree_snapshot(root)
    line = one_error(kdkit("sweep", root, user=NOBODY))
    assert re.fullmatch(
        SWEEP_RUNS.format(runs=re.escape(str(root / "runs")), reason="permission denied"), line)
    assert tree_snapshot(root) == before


def test_sweep_when_runs_is_a_file(tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    (root / "runs").rmdir()
    (root / "runs").write_text("not a folder", encoding="utf-8")
    before = tree_snapshot(root)
    result = invoke("sweep", root)
    assert result.exit_code == 2
    runs = re.escape(str(root / "runs"))
    assert re.fullmatch(fr"Error: {runs}/sweep-\d{{8}}-\d{{6}}: {runs} is not a folder; move it "
                        r"away or choose "
                        r"another runs folder \(pilot config's runs\)", result.stderr.strip())
    assert tree_snapshot(root) == before


def test_sweep_plot_into_a_read_only_folder(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path / "p")
    plots = tmp_path / "plots"
    plots.mkdir()
    before = tree_snapshot(tmp_path)
    line = one_error(kdkit("sweep", root, "--plot", plots / "s.png", read_only=plots))
    assert line == (f"Error: {plots}: cannot write there ({plots}: read-only file system); make it "
                    "writable or choose another folder for --plot")
    assert tree_snapshot(tmp_path) == before


def test_sweep_plot_over_an_existing_file_needs_force(tmp_path: Path) -> None:
    root = _scaffold(tmp_path / "p")
    plot = tmp_path / "sweep.png"
    plot.write_bytes(b"my own picture")
    before = tree_snapshot(tmp_path)
    result = invoke("sweep", root, "--plot", plot)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: --plot {plot}: already exists; pass --force to "
                                          "replace it, or choose another name"]
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
    assert result.stderr.splitlines() == [f"Error: --plot {tmp_path / 'pic.png'}: is a folder; "
                                          "give a file name ending in .png"]
    assert tree_snapshot(tmp_path) == before


@pytest.mark.parametrize("device", ["quantum", "", "cuda:x", "CUDA", "cpu ", "cuda:0,1", "../cpu"])
def test_sweep_unknown_device_writes_nothing(tmp_path: Path, device: str) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    result = invoke("sweep", root, "--device", device)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"Error: --device {device!r}: unknown device; use auto, "
                                          "cpu, cuda or cuda:N"]
    assert tree_snapshot(root) == before


# ---------------------------------------------------------------- kdkit resume-test


RESUME_RUNS = (r"Error: {runs}/resume-test-\d{{8}}-\d{{6}}: cannot write there \({runs}: "
               r"{reason}\); make it "
               r"writable or choose another folder for the test")


def test_resume_test_in_a_read_only_project(namespaces: None, tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    line = one_error(kdkit("resume-test", root, read_only=root))
    assert re.fullmatch(
        RESUME_RUNS.format(runs=re.escape(str(root / "runs")), reason="read-only file system"),
        line)
    assert tree_snapshot(root) == before


def test_resume_test_as_a_user_who_may_not_write_the_project(setpriv: None, shared: Path) -> None:
    root = _scaffold(shared)
    before = tree_snapshot(root)
    line = one_error(kdkit("resume-test", root, user=NOBODY))
    assert re.fullmatch(
        RESUME_RUNS.format(runs=re.escape(str(root / "runs")), reason="permission denied"), line)
    assert tree_snapshot(root) == before


def test_resume_test_when_runs_is_a_file(tmp_path: Path) -> None:
    root = _scaffold(tmp_path)
    (root / "runs").rmdir()
    (root / "runs").write_text("not a folder", encoding="utf-8")
    before = tree_snapshot(root)
    result = invoke("resume-test", root)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"{root / 'runs'} is not a folder; move it away or "
                                          "choose another folder for the test")
    assert tree_snapshot(root) == before


@pytest.mark.parametrize(("args", "message"), [
    (["--device", "quantum"], "--device 'quantum': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", ""], "--device '': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", "cuda:-1"], "--device 'cuda:-1': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--device", "cuda:0; rm -rf /"],
     "--device 'cuda:0; rm -rf /': unknown device; use auto, cpu, cuda or cuda:N"),
    (["--python", "/nonexistent/python"],
     "--python /nonexistent/python: not an executable interpreter; give the one "
     "that has the project's torch (default: this one)"),
    (["--python", "/bin/true"],
     "--python /bin/true: not an executable interpreter; give the one that has the "
     "project's torch (default: this one)"),
    (["--python", "/bin/false"],
     "--python /bin/false: not an executable interpreter; give the one that has the "
     "project's torch (default: this one)"),
    (["--python", "/etc/hostname"],
     "--python /etc/hostname: not an executable interpreter; give the one that has "
     "the project's torch (default: this one)"),
])
def test_resume_test_checks_every_option_before_writing(tmp_path: Path,
                                                        args: list[str], message: str) -> None:
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
def test_a_gpu_device_on_a_host_without_one_is_exit_3_and_writes_nothing(tmp_path: Path,
                                                                         command: str,
                                                                          device: str) -> None:
    if _gpus_here():
        pytest.skip("this host has a GPU")
    root = _scaffold(tmp_path)
    before = tree_snapshot(root)
    result = invoke(command, root, "--device", device)
    assert result.exit_code == 3, result.output
    assert result.stderr.splitlines() == [f"Error: --device {device}: torch sees no GPU here; run "
                                          "where the GPU is (`kdkit diagnose` says why not) or use "
                                          "cpu"]
    assert tree_snapshot(root) == before


def test_the_pilot_configs_gpu_device_is_named_where_it_comes_from(tmp_path: Path) -> None:
    if _gpus_here():
        pytest.skip("this host has a GPU")
    root = _scaffold(tmp_path)
    config = root / "config" / "pilot.json"
    config.write_text(config.read_text(encoding="utf-8").replace('"device": "auto"',
                                                                 '"device": "cuda:1"'),
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
    with pytest.raises(
        BadInput, match=r"^--device cuda:2: torch sees 2 GPU\(s\) here \(cuda:0\.\.cuda:1\); choose"):
        require_gpu("cuda:2", 2)
    with pytest.raises(Unavailable, match=r"^--device cuda: torch sees no GPU here"):
        require_gpu("cuda", 0)
