"""`kdkit diagnose`: its rules without a GPU, its real run on CPU with torch, and the probe's
standard-library-only promise (checked by an import scan and in a bare interpreter)."""

from __future__ import annotations

import ast
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kdkit.core import gpurules, layout
from kdkit.probe.diagnose import deep, nominal
from kdkit.probe.diagnose import host as diaghost
from kdkit.probe.diagnose import steps as diagsteps
from kdkit.probe.diagnose.core import Context, StepFailed
from tests.conftest import DATA, REPO, invoke
from tests.core.test_jsonio import _special

STEP_NAMES = ["interpreter", "environment", "torch import", "build", "driver", "devices", "arch",
              "compute",
              "memory", "libraries", "extensions"]
GPU_ONLY = {"driver", "devices", "arch", "memory", "libraries"}


def diagnose(*args: str | Path) -> tuple[int, dict[str, Any]]:
    result = invoke("diagnose", "--json", *args)
    return result.exit_code, json.loads(result.stdout)


# ---------------------------------------------------------------- pure rules


@pytest.mark.parametrize(("capability", "arch_list", "ok", "how"), [
    ((8, 9), ["sm_80", "sm_86"], True, "cubin sm_86"),  # same major, older minor runs
    ((8, 6), ["sm_89"], False, ""),  # a newer minor does not run on an older card
    ((9, 0), ["sm_80", "sm_86"], False, ""),  # another major needs PTX
    # PTX is JIT-compiled for newer cards
    ((9, 0), ["sm_80", "compute_80"], True, "PTX compute_80"),
    ((12, 0), ["sm_90", "sm_100", "compute_90"], True, "PTX compute_90"),
    ((12, 0), ["sm_90", "sm_100"], False, ""),  # RTX 5090 with a pre-Blackwell build
    ((9, 0), ["sm_90a"], True, "cubin sm_90a"),
    ((10, 3), ["sm_100a"], False, ""),  # arch-specific cubins run on exactly that arch
    ((8, 0), ["compute_90"], False, ""),  # PTX does not run on an older card
    ((8, 0), [], False, ""),
])
def test_cuda_arch_rules(capability: tuple[int, int], arch_list: list[str],
                         ok: bool, how: str) -> None:
    verdict = gpurules.cuda_arch_verdict(capability, arch_list)
    assert verdict.ok is ok
    assert verdict.how.startswith(how)


@pytest.mark.parametrize(("gcn", "arch_list", "override", "ok"), [
    ("gfx942:sramecc+:xnack-", ["gfx90a", "gfx942"], None, True),
    ("gfx1100", ["gfx90a", "gfx942"], None, False),
    ("gfx1101", ["gfx1100"], "11.0.0", True),
    ("gfx90a:sramecc+:xnack-", ["gfx90a:xnack-"], None, True),
])
def test_rocm_arch_rules(gcn: str, arch_list: list[str], override: str | None, ok: bool) -> None:
    assert gpurules.rocm_arch_verdict(gcn, arch_list, override).ok is ok


@pytest.mark.parametrize(("value", "gfx"),
                         [("11.0.0", "gfx1100"), ("9.4.2", "gfx942"), ("9.0.10", "gfx90a"),
                          ("10.3.0", "gfx1030"), ("11", None)])
def test_gfx_override_names(value: str, gfx: str | None) -> None:
    assert gpurules.gfx_from_override(value) == gfx


@pytest.mark.parametrize(("cuda", "driver", "ok"), [
    ("12.8", "525.60.13", True), ("12.1", "525.60.12", False), ("12.4", "535.104.05", True),
    ("13.0", "575.57.08", False), ("13.0", "580", True), ("13.0", "580.65.06", True),
    ("11.8", "450.80.02", True), ("11.8", "450.51", False),
])
def test_driver_minimum_per_cuda_major(cuda: str, driver: str, ok: bool) -> None:
    minimum = gpurules.driver_minimum(cuda)
    assert minimum is not None
    assert gpurules.driver_new_enough(driver, minimum) is ok


def test_unknown_cuda_major_has_no_minimum() -> None:
    assert gpurules.driver_minimum("10.2") is None


@pytest.mark.parametrize(("text", "version"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n",
     "535.104.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  "
     "(dvs-builder@U16)\n",
     "570.86.15"),
    ("nothing here", None),
])
def test_driver_version_from_proc(text: str, version: str | None) -> None:
    assert gpurules.driver_from_proc(text) == version


@pytest.mark.parametrize(("value", "lacks"), [
    (None, False), ("compute,utility", False), ("all", False), ("utility", True),
    ("graphics,video", True),
    ("", True), (" Compute ", False),
])
def test_driver_capabilities_without_compute(value: str | None, lacks: bool) -> None:
    assert gpurules.capabilities_lack_compute(value) is lacks


@pytest.mark.parametrize(("name", "value", "hides"), [
    ("CUDA_VISIBLE_DEVICES", "", True), ("CUDA_VISIBLE_DEVICES", "-1", True),
    ("CUDA_VISIBLE_DEVICES", "0,1", False),
    ("CUDA_VISIBLE_DEVICES", None, False), ("NVIDIA_VISIBLE_DEVICES", "void", True),
    ("NVIDIA_VISIBLE_DEVICES", "all", False), ("HIP_VISIBLE_DEVICES", "-1", True),
])
def test_visible_devices_that_hide_every_gpu(name: str, value: str | None, hides: bool) -> None:
    assert gpurules.hides_all_devices(name, value) is hides


@pytest.mark.parametrize(("raw", "text"),
                         [(90100, "9.1.0"), (8902, "8.9.2"), (91002, "9.10.2"), (None, None)])
def test_cudnn_version_text(raw: int | None, text: str | None) -> None:
    assert gpurules.cudnn_version_text(raw) == text


@pytest.mark.parametrize(("name", "nominal_name"), [
    ("NVIDIA H200", "H200"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA L40S", "L40S"),
    ("AMD Instinct MI300X", "MI300X"), ("NVIDIA L40", "L40"), ("Tesla T4", "T4"),
    ("NVIDIA GeForce RTX 4080", None),
])
def test_nominal_figures_by_device_name(name: str, nominal_name: str | None) -> None:
    found = nominal.lookup(name)
    assert (found.name if found else None) == nominal_name


def test_throughput_below_half_of_nominal_is_flagged() -> None:
    assert nominal.judge(790.0, 989.0, "TFLOP/s", "bf16 matmul") == (
        True, "bf16 matmul 790 TFLOP/s = 80% of nominal 989")
    assert nominal.judge(300.0, 989.0, "TFLOP/s", "bf16 matmul")[0] is False
    assert nominal.judge(300.0,
                         None, "GB/s", "copy") == (True,
                                                   "copy 300 GB/s (no nominal figure for this GPU)")


# ---------------------------------------------------------------- GPU code paths with stand-in hardware


def _gpu_context(expected: str, device: dict[str, Any], arch_list: list[str]) -> Context:
    """A context as the devices step leaves it on a GPU machine; torch stands in for the hardware."""
    ctx = Context(expect=expected, memory_share=0.8, project=None, expected=expected)
    ctx.facts["devices"] = [device]
    ctx.device_ids = [0]
    ctx.torch = SimpleNamespace(cuda=SimpleNamespace(get_arch_list=lambda: arch_list))
    return ctx


def test_arch_step_names_the_no_kernel_image_error_for_a_blackwell_card() -> None:
    device = {"index": 0, "name": "NVIDIA GeForce RTX 5090", "capability": [12, 0],
              "arch": "sm_120",
              "gcn_arch": None}
    with pytest.raises(StepFailed) as failed:
        diagsteps.arch(_gpu_context("cuda", device, ["sm_80", "sm_86", "sm_90"]))
    assert "\"CUDA error: no kernel image is available for execution on the device\"" in failed.value.detail
    assert failed.value.fix == (
        "sm_120 needs a torch build that carries it (torch 2.8 cu128 and later): install torch "
        "2.13 from https://download.pytorch.org/whl/cu130 (set torch_index in kdkit.json, re-lock)")


def test_arch_step_names_the_hip_error_for_a_missing_gfx() -> None:
    device = {"index": 0, "name": "AMD Radeon RX 7900 XTX", "capability": [11, 0],
              "arch": "gfx1100",
              "gcn_arch": "gfx1100"}
    with pytest.raises(StepFailed) as failed:
        diagsteps.arch(_gpu_context("rocm", device, ["gfx90a", "gfx942"]))
    assert "\"HIP error: invalid device function\"" in failed.value.detail


def test_arch_step_accepts_an_h100_with_a_cu128_arch_list() -> None:
    device = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "capability": [9, 0],
              "arch": "sm_90", "gcn_arch": None}
    outcome = diagsteps.arch(
        _gpu_context("cuda", device, ["sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]))
    assert (outcome.verdict, outcome.why) == ("ok", "cuda:0 sm_90: cubin sm_90")


def test_driver_step_fails_on_a_driver_too_old_for_the_build(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  520.61.05  Thu Sep 29 05:30:25 UTC 2022\n")
    monkeypatch.setattr(diaghost, "PROC_NVIDIA", proc)
    ctx = Context(expect="cuda", memory_share=0.8, project=None, expected="cuda")
    ctx.facts["build"] = {"backend": "cuda", "cuda": "12.8", "hip": None}
    with pytest.raises(StepFailed) as failed:
        diaghost.driver(ctx)
    assert failed.value.detail.startswith("NVIDIA driver 520.61.05 is older than 525.60.13, the "
                                          "minimum for CUDA 12.x builds")
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build\n")
    assert diaghost.driver(ctx).verdict == "ok"


# ---------------------------------------------------------------- real runs on this CPU machine


def test_expect_cpu_passes_with_gpu_steps_skipped(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, report = diagnose("--expect", "cpu")
    assert code == 0
    assert (report["verdict"], report["backend"], report["first_failure"]) == ("pass", "cpu", None)
    assert [s["name"] for s in report["steps"]] == STEP_NAMES
    statuses = {s["name"]: s["status"] for s in report["steps"]}
    assert {name for name,
            status in statuses.items() if status == "skip"} == GPU_ONLY | {"extensions"}
    assert statuses["compute"] == "ok"
    assert all(isinstance(s["seconds"], float) for s in report["steps"])
    assert report["facts"]["torch"]["version"].startswith("2.13.0")
    assert {c["dtype"] for c in report["facts"]["compute"]} == {"float32", "float16", "bfloat16"}


def test_expect_cuda_fails_at_devices_and_still_writes_its_report(tmp_path: Path) -> None:
    out = tmp_path / "reports" / "diagnose.json"
    result = invoke("diagnose", "--expect", "cuda", "--out", out)
    assert result.exit_code == 1
    assert "FAIL at step 6 of 11 (devices): torch sees no CUDA device" in result.stdout
    assert "Fix: torch 2.13.0+cpu is a CPU-only build, not a CUDA build: install the cuda lock" in result.stdout
    report = json.loads(out.read_text())
    assert report["verdict"] == "fail"
    assert report["first_failure"]["step"] == "devices"
    assert [s["name"] for s in report["steps"]] == STEP_NAMES[:6]
    assert report["not_reached"] == STEP_NAMES[6:]
    assert [p.name for p in out.parent.iterdir()] == ["diagnose.json"]  # atomic: no temporary left


def test_a_hidden_gpu_is_named_among_the_causes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    code, report = diagnose("--expect", "cuda")
    assert code == 1
    assert "CUDA_VISIBLE_DEVICES='' hides every GPU" in report["first_failure"]["fix"]


def test_capabilities_without_compute_fail_at_the_environment_step(
    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVIDIA_DRIVER_CAPABILITIES", "utility")
    code, report = diagnose("--expect", "cuda")
    assert code == 1
    assert report["first_failure"]["step"] == "environment"
    assert report["first_failure"]["detail"].startswith(
        "NVIDIA_DRIVER_CAPABILITIES=utility lacks 'compute'")


# What an unprivileged user meets: /dev/kfd is the real one's stand-in (a file owned by root and a group
# with mode 0660), the check runs as uid/gid 65534 with no other group (setpriv, util-linux), so the
# kernel refuses the open as it refuses /dev/kfd to a user outside its group.
KFD_PROBE = """
import json, sys
from pathlib import Path
from kdkit.probe.diagnose import command, host, runner
host.KFD = Path(sys.argv[1])
runner.STEPS = (("environment", host.environment), ("driver", host.driver))  # the steps before need ROCm torch
report = runner.run_diagnose("rocm")
print(json.dumps({"code": command.exit_code(report), "failure": report["first_failure"],
                  "text": command.render_text(report)}))
"""


def _kfd_as(gid: int, *user: str) -> dict[str, Any]:
    import tempfile

    # pytest's own tmp is closed to other users
    folder = Path(tempfile.mkdtemp(prefix="kdkit-kfd-"))
    try:
        folder.chmod(0o755)
        kfd = folder / "kfd"
        kfd.write_bytes(b"")
        os.chown(kfd, 0, gid)
        kfd.chmod(0o660)
        done = subprocess.run([*user, sys.executable, "-c", KFD_PROBE, str(kfd)],
                              capture_output=True, text=True,
                              cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
        assert done.returncode == 0, done.stderr
        found: dict[str, Any] = json.loads(done.stdout)
        found["kfd"] = kfd
        return found
    finally:
        shutil.rmtree(folder)


NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
needs_root_and_setpriv = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                            reason=(
                                                "needs root (to make the stand-in) and setpriv (to "
                                                "drop it)"))


@needs_root_and_setpriv
@pytest.mark.parametrize(("gid", "group"), [(0, "root (gid 0)"), (4242, "gid 4242")],
                         ids=["named", "unnamed"])
def test_a_kfd_outside_the_users_groups_is_exit_3_naming_its_group_and_the_fix(
    gid: int, group: str) -> None:
    found = _kfd_as(gid, *NOBODY)
    failure = found["failure"]
    assert (found["code"], failure["step"], failure["exit_code"]) == (3, "driver", 3)
    assert failure["detail"] == (f"{found['kfd']}: cannot open it read-write (Permission denied): "
                                 f"it belongs to group {group}, mode 0660, and this process (uid "
                                 "65534, groups 65534) is not in it")
    assert failure["fix"] == (f"{diaghost.KFD_FIX}; in a container: docker run --group-add {gid} "
                              "(kdkit run adds it)")
    assert failure["fix"].startswith("on a host: sudo usermod -aG render,video $USER, then log in "
                                     "again (AMD: rocm.docs.amd.com/")
    assert failure["detail"] in found["text"] and diaghost.KFD_FIX in found["text"]


@needs_root_and_setpriv
def test_a_kfd_the_user_may_open_passes_the_driver_step() -> None:
    found = _kfd_as(65534, *NOBODY)  # nobody's own group: mode 0660 lets it read and write
    assert (found["code"], found["failure"]) == (0, None)
    assert "opens read-write" in found["text"]


def test_a_failed_steps_exit_code_is_the_reports() -> None:
    from kdkit.probe.diagnose.command import exit_code

    assert exit_code({"first_failure": None}) == 0
    assert exit_code({"first_failure": {"step": "devices", "exit_code": 1}}) == 1
    assert exit_code({"first_failure": {"step": "driver", "exit_code": 3}}) == 3
    # a report written before exit codes
    assert exit_code({"first_failure": {"step": "devices"}}) == 1


def _project_with_extension(project: Path, module: str, body: str, smoke: bool = True) -> Path:
    """An extension module at the project root; each test names its own (diagnose runs in-process)."""
    (project / f"{module}.py").write_text(body)
    config = json.loads((project / "kdkit.json").read_text())
    config["extensions"] = [{"module": module, **({"smoke": f"{module}:smoke"} if smoke else {})}]
    (project / "kdkit.json").write_text(json.dumps(config))
    return project


def test_extensions_are_imported_and_smoke_tested(project: Path) -> None:
    _project_with_extension(project, "ext_ok", "def smoke():\n    return None\n")
    code, report = diagnose("--expect", "cpu", "--project", project)
    assert code == 0
    assert report["steps"][-1] == {**report["steps"][-1],
                                   "status": "ok", "detail": "ext_ok imported, smoke passed"}


def test_a_failing_extension_smoke_stops_at_extensions(project: Path) -> None:
    body = "def smoke():\n    raise RuntimeError('kernel missing for this arch')\n"
    _project_with_extension(project, "ext_bad", body)
    code, report = diagnose("--expect", "cpu", "--project", project)
    assert code == 1
    assert report["first_failure"]["detail"] == ("extension ext_bad: smoke ext_bad:smoke failed: "
                                                 "RuntimeError: kernel missing for this arch")


def test_a_missing_extension_is_found_from_the_cwd(project: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _project_with_extension(project, "ext_gone", "", smoke=False)
    (project / "ext_gone.py").unlink()
    monkeypatch.chdir(project / "data")
    code, report = diagnose("--expect", "cpu")
    assert code == 1
    assert report["first_failure"]["detail"].startswith(
        "extension ext_gone: import failed: ModuleNotFoundError")


@pytest.mark.parametrize(("args", "message"), [
    (["--memory-share", "2"], "--memory-share '2': outside (0, 0.95]"),
    (["--expect", "tpu"], "argument --expect: invalid choice: 'tpu'"),
])
def test_bad_usage_is_exit_2(args: list[str], message: str) -> None:
    result = invoke("diagnose", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_an_unwritable_out_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = invoke("diagnose", "--expect", "cpu", "--out", tmp_path / "file" / "report.json")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"Error: {tmp_path}/file/report.json: cannot write the report")


@pytest.mark.slow
def test_deep_compiles_on_cpu(tmp_path: Path) -> None:
    """In a process of its own, with its own Inductor cache: torch state an earlier test left in a
    worker, or another process writing the shared cache, is not the step's to judge (the compile step
    once failed in a loaded run and passed alone)."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    done = subprocess.run([sys.executable, "-m", "kdkit", "diagnose", "--json",
                           "--expect", "cpu", "--deep"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1800, check=False)
    code, report = done.returncode, json.loads(done.stdout)
    # which, and why
    assert code == 0, [step for step in report["steps"] if step["status"] not in ("ok", "skip")]
    statuses = {s["name"]: s["status"] for s in report["steps"]}
    assert (statuses["compile"], statuses["pinned copy"],
            statuses["throughput"]) == ("ok", "skip", "skip")


def _sine_outputs(off_by: float, which: str) -> tuple[Any, Any, Any, list[float]]:
    """Real CPU tensors of the compile step's function, one of them off on its second half (the
    shape MKL gave a loaded CI machine: one thread's chunk of torch.sin off by 3e-4)."""
    torch = pytest.importorskip("torch")
    x = torch.linspace(-3, 3, 4096)
    exact = [math.sin(v) * 2 + v for v in x.tolist()]
    good = torch.tensor(exact, dtype=torch.float32)
    bad = good.clone()
    bad[2048:] += off_by
    out, eager = (bad, good) if which == "compiled" else (good, bad)
    return torch, out, eager, exact


@pytest.mark.parametrize(("which", "blamed"), [("compiled", "torch.compile on cpu returned"),
                                               ("eager", "eager torch.sin on cpu is off")])
def test_a_compile_mismatch_names_the_side_that_is_off_from_the_exact_values(
        which: str, blamed: str) -> None:
    torch, out, eager, exact = _sine_outputs(3e-4, which)
    with pytest.raises(StepFailed) as failed:
        deep._compare_with_eager(torch, "cpu", out, eager, exact)
    assert failed.value.detail.startswith(blamed), failed.value.detail
    assert "0.0003" in failed.value.detail


def test_compiled_and_eager_within_the_tolerance_pass() -> None:
    torch, out, eager, exact = _sine_outputs(5e-6, "eager")
    deep._compare_with_eager(torch, "cpu", out, eager, exact)


# ---------------------------------------------------------------- the probe stands alone

TRAVELLING = layout.modules()  # what runs in the container: kdkit, kdkit.core..., kdkit.probe...


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", [path for rel, path in layout.files() if rel.endswith(".py")],
                         ids=lambda p: p.relative_to(REPO / "kdkit").as_posix())
def test_in_container_modules_import_only_the_stdlib_torch_and_each_other(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        allowed = top in sys.stdlib_module_names or top in layout.OPTIONAL or name in TRAVELLING
        assert allowed, f"{path.name} imports {name}"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A venv made --without-pip, run with -S (no site-packages): only the stdlib and a kdkit copy
    holding nothing but the probe and the modules it may use."""
    base = tmp_path_factory.mktemp("bare")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True)
    code = base / "code"
    layout.copy_to(code)
    return base / "venv" / "bin" / "python", code


def _bare(bare_python: tuple[Path, Path], *args: str | Path) -> subprocess.CompletedProcess[str]:
    python, code = bare_python
    return subprocess.run([python, "-S", "-m", "kdkit.probe", *map(str, args)], cwd=code,
                          capture_output=True,
                          text=True, check=False, timeout=120)


def test_bare_interpreter_diagnose_fails_at_torch_import_with_the_fix(bare_python: tuple[Path,
                                                                                         Path],
                                                                      tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    done = _bare(bare_python, "diagnose", "--expect", "cpu", "--out", out)
    assert done.returncode == 1, done.stderr
    failure = json.loads(out.read_text())["first_failure"]
    assert failure["step"] == "torch import"
    assert "ModuleNotFoundError: No module named 'torch'" in failure["detail"]
    assert failure["fix"].startswith("install the project's locked packages into this interpreter")
    assert "FAIL at step 3 of 11 (torch import)" in done.stdout


def test_bare_interpreter_runs_the_pilot_with_an_app_without_torch(bare_python: tuple[Path, Path],
                                                                    project: Path) -> None:
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    config = json.loads((project / "config" / "pilot.json").read_text())
    (project / "config"
     / "pilot.json").write_text(json.dumps({**config, "entry": "src.oracle:predict",
                                                               "device": "cpu"}))
    done = _bare(bare_python, "pilot", project, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert (summary["accepted"], summary["rejected"],
            summary["peak_memory"]["device"]) == (11, 1, "cpu")
    env = json.loads((Path(summary["run_dir"]) / "env.json").read_text())
    assert env["first_failure"]["step"] == "torch import"


def test_diagnose_help_lists_every_option() -> None:
    result = invoke("diagnose", "--help")
    assert result.exit_code == 0
    for option in ("--expect", "--deep", "--json", "--out", "--memory-share", "--project"):
        assert option in result.stdout


def test_diagnose_refuses_such_an_out_before_running_its_steps(tmp_path: Path) -> None:
    fifo = _special(tmp_path)["fifo"]
    result = invoke("diagnose", "--expect", "cpu", "--out", fifo)
    # refused before any step ran (none printed)
    assert result.exit_code == 2 and result.stdout == ""
