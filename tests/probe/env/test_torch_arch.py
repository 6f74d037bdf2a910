"""`kdkit torch-arch` and the dev.kdkit.torch.arch_* labels: the compiled architectures of the torch
actually installed, read without a GPU.

The reader runs against real interpreters: the venv's own CPU torch, the stand-in +cu130 wheel of
tests/localindex.py installed by pip, and venvs holding a torch distribution laid out as the real
wheels are (torch/version.py, torch/include/ATen/cuda/CUDAConfig.h in the format of
torch-2.13.0+cu130's, a dist-info) whose import succeeds, fails, crashes or hangs. The Docker tests
read the labels of the session's CPU image and of an image locked against the stand-in index with
its +cu130 torch.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from kdkit.image.labels import ARCH_FILE, ARCH_LIST, ARCH_SOURCE, arch_labels, recorded_arch, torch_arch
from kdkit.probe.env import torcharch
from kdkit.probe.env.torcharch import SOURCE_CPU, SOURCE_FLAGS, SOURCE_HEADER, parse_config_header, read_arch_list
from tests.conftest import BASE, invoke
from tests.localindex import Served, torch_index_server, torch_wheel
from tests.tinywheels import make_venv, pip_install

__all__ = ["torch_index_server"]  # the session's stand-in index, a fixture

# torch-2.13.0+cu130's NVCC_FLAGS_EXTRA, as its CUDAConfig.h writes it (one line).
CU130_FLAGS = ("-gencode;arch=compute_75,code=sm_75;-gencode;arch=compute_80,code=sm_80;-gencode;"
               "arch=compute_86,code=sm_86;-gencode;arch=compute_90,code=sm_90;-gencode;arch=compute_100,"
               "code=sm_100;-gencode;arch=compute_120,code=sm_120")
CU130_ARCHS = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def config_header(flags: str | None = CU130_FLAGS, rocm: int = 0) -> str:
    """CUDAConfig.h as torch 2.13's wheels ship it, with ``flags`` as NVCC_FLAGS_EXTRA (None: no define)."""
    define = "" if flags is None else f'#define NVCC_FLAGS_EXTRA "{flags}"\n'
    return ("#if !defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)\n#pragma once\n\n"
            "// Test these using #if AT_CUDNN_ENABLED(), not #ifdef, so that it's\n"
            "#define AT_CUDNN_ENABLED() 1\n#define AT_CUSPARSELT_ENABLED() 1\n#define "
            f"AT_HIPSPARSELT_ENABLED() 0\n#define AT_ROCM_ENABLED() {rocm}\n#define "
            "AT_MAGMA_ENABLED() 1\n\n// Needed for hipMAGMA to correctly identify implementation\n"
            "#if (AT_ROCM_ENABLED() && AT_MAGMA_ENABLED())\n#define HAVE_HIP 1\n#endif\n\n"
            f"{define}\n#else\n#error \"This file should not be included when either "
            "TORCH_STABLE_ONLY or TORCH_TARGET_VERSION is defined.\"\n#endif  // "
            "!defined(TORCH_STABLE_ONLY) && !defined(TORCH_TARGET_VERSION)\n")


IMPORT_FAILS = ('raise ImportError("libcudnn.so.9: cannot open shared object file: No such file or '
                'directory")\n')


def flags_module(flags: str | None, cuda: str | None, hip: str | None = None) -> str:
    """torch/__init__.py of a stand-in that imports and answers like torch (version, _C._cuda_getArchFlags)."""
    return (f"__version__ = '2.13.0'\nclass version:\n    cuda = {cuda!r}\n    hip = {hip!r}\n"
            "class _C:\n    @staticmethod\n    def _cuda_getArchFlags():\n        return "
            f"{flags!r}\n")


@pytest.fixture
def stand_in(tmp_path: Path) -> Any:
    """A factory: a venv (no pip, no torch) and, when asked, a torch distribution in its site-packages."""
    def make(init: str | None = IMPORT_FAILS, *, version: str = "2.13.0+cu130",
             cuda: str | None = "13.0",
             hip: str | None = None, header: str | None = None) -> Path:
        python = make_venv(tmp_path / "venv", with_pip=False)
        if init is None:
            return python
        purelib = sysconfig.get_path("purelib", vars={"base": str(tmp_path / "venv"),
                                                      "platbase": str(tmp_path / "venv")})
        site = Path(purelib)
        (site / "torch").mkdir(parents=True)
        (site / "torch/__init__.py").write_text(init, encoding="utf-8")
        (site
         / "torch/version.py").write_text(f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = "
                                          f"{hip!r}\n",
                                               encoding="utf-8")
        if header is not None:
            (site / "torch/include/ATen/cuda").mkdir(parents=True)
            (site / "torch/include/ATen/cuda/CUDAConfig.h").write_text(header, encoding="utf-8")
        info = site / f"torch-{version.split('+')[0]}.dist-info"
        info.mkdir()
        (info
         / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n\n",
                                       encoding="utf-8")
        return python

    return make


# ---------------------------------------------------------------- the real torch of this venv


def test_the_venvs_cpu_torch_has_no_architectures() -> None:
    result = read_arch_list()
    assert (result["arch_list"], result["source"], result["reason"]) == ([], SOURCE_CPU, None)
    assert result["torch"] == "2.13.0+cpu" and result["cuda"] is None and result["hip"] is None
    assert result["import_error"] is None  # read by importing it


def test_command_reads_another_interpreter_as_json() -> None:
    result = invoke("torch-arch", "--json", "--python", sys.executable)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["arch_list"], answer["source"],
            answer["python"]) == ([], SOURCE_CPU, sys.executable)
    text = invoke("torch-arch")
    assert text.exit_code == 0
    assert "torch 2.13.0+cpu (no GPU runtime): no GPU architectures (cpu build)" in text.stdout


def test_command_is_listed_among_the_in_container_commands() -> None:
    from kdkit.core.commands import COMMANDS

    assert COMMANDS["torch-arch"][0] == "kdkit.probe.env.torcharch"
    shown = invoke("torch-arch", "--help")
    assert shown.exit_code == 0
    assert "usage: kdkit torch-arch [-h] [--python PATH] [--timeout S] [--json]" in shown.stdout
    assert "torch-arch  Show the GPU architectures the installed torch was compiled for." in invoke(
        "--help").stdout


# ---------------------------------------------------------------- torch imports: its own string


def test_an_importable_cuda_torch_answers_with_its_flags(stand_in: Any) -> None:
    python = stand_in(flags_module("sm_75 sm_80 sm_90 compute_90", "13.0"))
    result = read_arch_list(str(python))
    assert (result["arch_list"],
            result["source"]) == (["sm_75", "sm_80", "sm_90", "compute_90"], SOURCE_FLAGS)
    assert (result["cuda"], result["import_error"]) == ("13.0", None)


def test_a_rocm_torch_answers_with_its_gfx_targets(stand_in: Any) -> None:
    """ROCm builds hold their gfx targets in the same function; untested against a real ROCm wheel."""
    python = stand_in(flags_module("gfx90a gfx942 gfx1100", None, "6.4.43482"),
                      cuda=None, hip="6.4.43482")
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"],
            result["hip"]) == (["gfx90a", "gfx942", "gfx1100"],
                                                                      SOURCE_FLAGS, "6.4.43482")


def test_a_cuda_torch_whose_flags_are_none_falls_back_to_the_header(stand_in: Any) -> None:
    python = stand_in(flags_module(None, "13.0"), header=config_header())
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"]) == (CU130_ARCHS, SOURCE_HEADER)
    assert result["import_error"] == ("torch 2.13.0 is a CUDA 13.0 build but "
                                      "torch._C._cuda_getArchFlags() returned nothing")


def test_flags_that_are_not_architecture_names_are_not_believed(stand_in: Any) -> None:
    python = stand_in(flags_module('sm_90 "; rm -rf', "13.0"))
    result = read_arch_list(str(python))
    assert result["arch_list"] is None and result["source"] == "unknown"
    assert result["reason"].startswith("torch._C._cuda_getArchFlags() returned 'sm_90 \"; rm -rf', "
                                       "with '\";' not an architecture name; and ")


# ---------------------------------------------------------------- torch does not import: its header


def test_the_stand_in_cu130_wheel_installed_by_pip_is_read_from_its_header(tmp_path: Path) -> None:
    """localindex's +cu130 torch imports (no torch._C, as no real torch lacks): its header says."""
    wheel = torch_wheel(tmp_path / "wheels", "2.13.0+cu130", requires=[])
    python = make_venv(tmp_path / "venv", with_pip=False)
    pip_install(python, wheel.parent, ["torch==2.13.0+cu130"])
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"],
            result["cuda"]) == (CU130_ARCHS, SOURCE_HEADER, "13.0")
    assert result["import_error"] == "torch 2.13.0+cu130 is a CUDA 13.0 build but torch._C has no _cuda_getArchFlags"


def test_a_torch_that_fails_to_import_is_read_from_its_header(stand_in: Any) -> None:
    python = stand_in(header=config_header())
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"],
            result["reason"]) == (CU130_ARCHS, SOURCE_HEADER, None)
    assert (result["torch"], result["cuda"]) == ("2.13.0+cu130", "13.0")
    assert result["import_error"] == ("import torch failed: ImportError: libcudnn.so.9: cannot "
                                      "open shared object file: No such file or directory")
    shown = invoke("torch-arch", "--python", python)
    assert shown.exit_code == 0
    assert shown.stdout.splitlines()[1:] == [
        "torch 2.13.0+cu130 (CUDA 13.0): sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
        f"Source: {SOURCE_HEADER}",
        f"(torch was not imported: {result['import_error']})"]


def test_ptx_entries_are_torchs_compute_tokens(stand_in: Any) -> None:
    flags = CU130_FLAGS + ";-gencode;arch=compute_120,code=compute_120"
    python = stand_in(header=config_header(flags))
    assert read_arch_list(str(python))["arch_list"] == [*CU130_ARCHS, "compute_120"]


def test_a_torch_import_that_crashes_is_read_from_its_header(stand_in: Any) -> None:
    python = stand_in("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
                      header=config_header())
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"]) == (CU130_ARCHS, SOURCE_HEADER)
    assert result["import_error"].startswith(f"importing torch in {python} ended without an answer "
                                             "(killed by signal 11: ")


def test_a_torch_import_that_hangs_is_bounded(stand_in: Any) -> None:
    python = stand_in("import time\ntime.sleep(60)\n", header=config_header())
    result = read_arch_list(str(python), timeout=1)
    assert (result["arch_list"], result["source"]) == (CU130_ARCHS, SOURCE_HEADER)
    assert result["import_error"] == f"importing torch in {python} gave no answer within 1 s"


def test_a_cpu_torch_that_fails_to_import_is_a_cpu_build_by_its_version_file(stand_in: Any) -> None:
    python = stand_in(version="2.13.0+cpu", cuda=None)
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"],
            result["torch"]) == ([], SOURCE_CPU, "2.13.0+cpu")


def test_a_rocm_torch_that_fails_to_import_is_unknown(stand_in: Any) -> None:
    python = stand_in(version="2.13.0+rocm7.2", cuda=None, hip="7.2.0")
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"]) == (None, "unknown")
    assert result["reason"] == ("torch 2.13.0+rocm7.2 is a ROCm build (HIP 7.2.0): its gfx targets "
                                "are read only by importing it, and that failed: import torch "
                                "failed: ImportError: libcudnn.so.9: cannot open shared object "
                                "file: No such file or directory")


# ---------------------------------------------------------------- unknown, with the reason


@pytest.mark.parametrize(("text", "why"), [
    (config_header(None), 'no #define NVCC_FLAGS_EXTRA "..." line'),
    (config_header(""), "NVCC_FLAGS_EXTRA holds no arch=...,code=... pair ('')"),
    (config_header(CU130_FLAGS)
     + config_header(CU130_FLAGS), "#define NVCC_FLAGS_EXTRA appears 2 times"),
    (config_header("-gencode;arch=compute_90,code=banana"),
     "-gencode entry 'arch=compute_90,code=banana' is not arch=compute_XY,code=sm_XY|compute_XY"),
    (config_header("-gencode;arch=sm_90,code=sm_90"),
     "-gencode entry 'arch=sm_90,code=sm_90' is not arch=compute_XY,code=sm_XY|compute_XY"),
    (config_header("-gencode;arch=compute_90,code=sm_90;-Xfatbin;-compress-all"),
     "NVCC_FLAGS_EXTRA holds more than -gencode pairs ('-Xfatbin;-compress-all')"),
    (config_header(CU130_FLAGS, rocm=1),
     "it is a ROCm build's header (AT_ROCM_ENABLED() 1), which holds no gfx targets"),
])
def test_malformed_headers_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_config_header(text)
    assert str(caught.value) == why


def test_header_forms_nvcc_accepts() -> None:
    assert parse_config_header(config_header("--generate-code=arch=compute_90,code=[sm_90,compute_90] "
                                             "-gencode arch=compute_100a,code=sm_100a")) == \
        ["sm_90", "compute_90", "sm_100a"]


def test_a_malformed_header_is_unknown_naming_the_file(stand_in: Any) -> None:
    python = stand_in(header=config_header("-gencode;arch=compute_90,code=banana"))
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"]) == (None, "unknown")
    header = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / \
        "site-packages" / SOURCE_HEADER
    assert result["reason"].endswith(f"; and {header}: -gencode entry "
                                     "'arch=compute_90,code=banana' is not "
                                     "arch=compute_XY,code=sm_XY|compute_XY")
    shown = invoke("torch-arch", "--python", python, "--json")
    assert shown.exit_code == 3
    assert json.loads(shown.stdout)["reason"] == result["reason"]


def test_a_cuda_torch_without_its_header_is_unknown(stand_in: Any) -> None:
    python = stand_in()
    result = read_arch_list(str(python))
    assert result["arch_list"] is None
    assert result["reason"].endswith(f"{SOURCE_HEADER} cannot be read (No such file or directory)")


def test_no_torch_is_unknown(stand_in: Any) -> None:
    python = stand_in(None)
    result = read_arch_list(str(python))
    assert (result["arch_list"], result["source"]) == (None, "unknown")
    assert result["reason"] == (f"torch is not installed for {python} (no torch distribution on "
                                "its sys.path); import torch failed: ModuleNotFoundError: No "
                                "module named 'torch'")
    shown = invoke("torch-arch", "--python", python)
    assert shown.exit_code == 3
    assert shown.stdout.splitlines()[1] == f"torch: architectures unknown: {result['reason']}"


def test_not_an_interpreter_is_bad_input(tmp_path: Path) -> None:
    result = invoke("torch-arch", "--python", tmp_path / "nope")
    assert result.exit_code == 2
    assert result.output.strip() == (f"Error: --python {tmp_path / 'nope'}: not an executable "
                                     "file; give the path of a Python interpreter")
    assert invoke("torch-arch", "--timeout", "nan").exit_code == 2


# ---------------------------------------------------------------- the labels (no engine)


def test_labels_from_an_answer() -> None:
    assert arch_labels(torcharch.report(CU130_ARCHS, SOURCE_FLAGS)) == {
        ARCH_LIST: "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", ARCH_SOURCE: SOURCE_FLAGS}
    assert arch_labels(torcharch.report([], SOURCE_CPU)) == {ARCH_LIST: "", ARCH_SOURCE: SOURCE_CPU}
    assert arch_labels(torcharch.unknown("torch is not\ninstalled")) == {
        ARCH_LIST: "unknown", ARCH_SOURCE: "unknown: torch is not installed"}


@pytest.mark.parametrize(("answer", "why"), [
    ([], f"{ARCH_FILE} does not hold a JSON object"),
    ({"arch_list": "sm_90", "source": SOURCE_FLAGS},
     f"{ARCH_FILE}: arch_list is not a list of architecture names"),
    ({"arch_list": ["sm 90"], "source": SOURCE_FLAGS},
     f"{ARCH_FILE}: arch_list is not a list of architecture names"),
    ({"arch_list": ["sm_90"], "source": "a guess"},
     f"{ARCH_FILE}: source 'a guess' does not go with arch_list ['sm_90']"),
    ({"arch_list": [], "source": SOURCE_FLAGS},
     f"{ARCH_FILE}: source '{SOURCE_FLAGS}' does not go with arch_list []"),
    ({"arch_list": None}, "kdkit torch-arch gave no reason"),
])
def test_an_answer_of_another_shape_is_unknown(answer: Any, why: str) -> None:
    assert arch_labels(answer) == {ARCH_LIST: "unknown", ARCH_SOURCE: f"unknown: {why}"}


class _Engine:
    """Stands for docker_adapter.Engine's read_file."""

    def __init__(self, answer: bytes | Exception | None) -> None:
        self.answer = answer

    def read_file(self, image: str, path: str, limit: int) -> bytes | None:
        assert path == ARCH_FILE
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_what_the_image_holds_becomes_labels_and_a_failure_never_raises() -> None:
    from kdkit.core.errors import Unavailable

    good = json.dumps(torcharch.report(CU130_ARCHS, SOURCE_HEADER)).encode()
    assert recorded_arch(_Engine(good), "sha256:x")[ARCH_LIST] == " ".join(CU130_ARCHS)
    assert recorded_arch(_Engine(None), "sha256:x") == {ARCH_LIST: "unknown", ARCH_SOURCE: (
        f"unknown: the image has no {ARCH_FILE} (its torch-arch step wrote nothing; see the build "
        "log)")}
    assert recorded_arch(_Engine(b'{"arch_list": [}'), "sha256:x")[ARCH_SOURCE].startswith(
        f"unknown: {ARCH_FILE} is not readable JSON ({ARCH_FILE}:1:")
    assert recorded_arch(
        _Engine(Unavailable("image x: the Docker engine refused: boom")), "sha256:x") == {
        ARCH_LIST: "unknown",
        ARCH_SOURCE: f"unknown: cannot copy {ARCH_FILE} out of the image: image x: the Docker "
                     "engine refused: boom"}


def test_inspect_reads_the_labels_back() -> None:
    assert torch_arch({}) == {"recorded": False, "arch_list": None, "source": None}
    assert torch_arch(
        {ARCH_LIST: "", ARCH_SOURCE: SOURCE_CPU}) == {"recorded": True, "arch_list": [],
                                                                   "source": SOURCE_CPU}
    assert torch_arch(
        {ARCH_LIST: "sm_90 compute_90", ARCH_SOURCE: SOURCE_FLAGS})["arch_list"] == ["sm_90",
                                                                                                  "compute_90"]
    assert torch_arch({ARCH_LIST: "unknown", ARCH_SOURCE: "unknown: why"}) == {
        "recorded": True, "arch_list": None, "source": "unknown: why"}


# ---------------------------------------------------------------- the session's CPU image (engine)


def test_the_cpu_image_records_no_architectures(built: dict[str, Any], locked: Path) -> None:
    assert (built["labels"][ARCH_LIST], built["labels"][ARCH_SOURCE]) == ("", SOURCE_CPU)
    result = invoke("inspect", built["tag"], "--project", locked, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["torch_arch"] == {"recorded": True, "arch_list": [], "source": SOURCE_CPU}
    assert (report["kdkit"]["torch.arch_list"],
            report["kdkit"]["torch.arch_source"]) == ("", SOURCE_CPU)
    assert (report["os"], report["architecture"]) == ("linux", "amd64")
    shown = invoke("inspect", built["tag"], "--project", locked)
    assert "Torch architectures: none (cpu build)" in shown.stdout
    assert f"{built['tag']}  (linux/amd64, " in shown.stdout
    checked = invoke("check", locked, "--gpu", "RTX 4090", "--image", built["tag"], "--json")
    assert checked.exit_code == 1
    points = {p["name"]: p for p in json.loads(checked.stdout)["points"]}
    assert points["backend"]["why"] == "RTX 4090 is an NVIDIA card: it runs the cuda backend, not cpu"
    assert points["build"]["why"] == (f"image {built['tag']} has torch 2.13.0+cpu, a cpu build; "
                                         "RTX 4090 (sm_89) needs a cuda build")


def test_the_file_in_the_image_is_roots_and_read_only(built: dict[str, Any]) -> None:
    from kdkit.core import proc

    script = (
        f"stat -c '%u:%g %a' {ARCH_FILE}; echo x >>{ARCH_FILE} 2>/dev/null && echo written; cat "
        f"{ARCH_FILE}")
    done = proc.run(
        ["docker", "run", "--rm", "--network", "none", built["tag"], "sh", "-c", script],
        timeout=(120))
    assert done.ok, done.stderr
    first, _, rest = done.stdout.partition("\n")
    assert first == "0:0 444"  # and the image's user (10001) cannot write it: no "written"
    answer = json.loads(rest)
    assert (answer["arch_list"], answer["source"],
            answer["python"]) == ([], SOURCE_CPU, "/opt/kdkit/venv/bin/python")


def test_the_zipapp_reads_the_architectures_too(tmp_path: Path) -> None:
    import subprocess

    from kdkit.transfer.zipapp import build_zipapp

    build_zipapp(tmp_path / "kdkit.pyz")
    done = subprocess.run([sys.executable, "-I",
                           str(tmp_path / "kdkit.pyz"), "torch-arch", "--json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert (json.loads(done.stdout)["arch_list"],
            json.loads(done.stdout)["source"]) == ([], SOURCE_CPU)


def test_a_cu130_image_records_its_torchs_architectures(docker_engine: None,
                                                        torch_index_server: Served,
                                                         tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Locked against the stand-in index, built offline from its wheelhouse: the label lists the header's."""
    from kdkit.docker_adapter import connect
    from kdkit.project.init import init_project

    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", torch_index_server.simple)
    project = init_project(tmp_path / "proj", name="kdkit-arch", backend="cuda")
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["backends"]["cuda"]["torch_index"] = torch_index_server.torch_index("cu130")
    (project / "kdkit.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    assert invoke("lock", project, "--backend", "cuda").exit_code == 0
    assert invoke("wheelhouse", project, "--backend", "cuda",
                  "--out", tmp_path / "wh").exit_code == 0
    tag = "kdkit-e2e:arch-cu130"
    result = invoke("build", project, "--backend", "cuda", "--base-image", BASE, "--wheelhouse",
                    tmp_path / "wh",
                    "--tag", tag, "--json")
    try:
        assert result.exit_code == 0, result.output
        labels = json.loads(result.stdout)["labels"]
        assert (labels[ARCH_LIST], labels[ARCH_SOURCE]) == (" ".join(CU130_ARCHS), SOURCE_HEADER)
        assert labels["dev.kdkit.torch.version"] == "2.13.0+cu130"
        shown = invoke("inspect", tag, "--project", project)
        assert shown.exit_code == 0, shown.output
        assert f"Torch architectures: {' '.join(CU130_ARCHS)} (from {SOURCE_HEADER})" in shown.stdout
        # kdkit check --image judges the card by the image's own list, not the table.
        checked = invoke("check", project, "--gpu", "RTX 5090", "--image", tag, "--json")
        assert checked.exit_code == 0, checked.output
        points = {p["name"]: p for p in json.loads(checked.stdout)["points"]}
        assert points["cpu"]["why"] == f"image {tag} is for x86_64, as RTX 5090 hosts are"
        assert points["kernels"]["why"] == (
            "the image's torch carries cubin sm_120, which runs on sm_120 (read from "
            f"{SOURCE_HEADER}: {', '.join(CU130_ARCHS)})")
        volta = invoke("check", project, "--gpu", "V100 SXM2 16GB", "--image", tag, "--json")
        assert volta.exit_code == 1
        kernels = {p["name"]: p for p in json.loads(volta.stdout)["points"]}["kernels"]
        assert kernels["verdict"] == "fail" and "no code for V100 SXM2 16GB's sm_70" in kernels["why"]
        grace = invoke("check", project, "--gpu", "GH200", "--image", tag, "--json")
        cpu = {p["name"]: p for p in json.loads(grace.stdout)["points"]}["cpu"]
        assert grace.exit_code == 1 and cpu["verdict"] == "fail"
        assert cpu["why"].startswith(
            f"image {tag} is for x86_64 but GH200 hosts are aarch64 (Grace)")
    finally:
        connect().remove_image(tag)


def test_labels_of_someone_elses_image_are_shown_as_text_and_never_believed(docker_engine: None,
                                                                            locked: Path,
                                                                             tmp_path: Path) -> None:
    """An image loaded from elsewhere may carry any label: markup and escape codes are shown inert, and an
    arch list that is not a list of architecture names is not used to pass a card."""
    from kdkit.core import proc
    from kdkit.docker_adapter import connect

    tag = "kdkit-e2e:hostile-labels"
    labels = {"dev.kdkit.backend": "cuda", "dev.kdkit.lock.sha256": "0" * 64,
              "dev.kdkit.torch.version": "2.13.0+cu130", "dev.kdkit.project": "[bold red]markup[/]",
              "dev.kdkit.torch.arch_list": "sm_90;rm -rf / sm_120",
              "dev.kdkit.torch.arch_source": "\x1b]0;pwned\x07x"}
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\n", encoding="utf-8")
    args = [a for key, value in labels.items() for a in ("--label", f"{key}={value}")]
    done = proc.run(["docker", "build", "-q", "-t", tag, *args, str(tmp_path)], timeout=300)
    assert done.ok, done.stderr
    try:
        shown = invoke("inspect", tag)
        assert "[bold red]markup[/]" in shown.stdout and "\x1b" not in shown.stdout
        checked = invoke("check", locked, "--gpu", "H100 SXM", "--image", tag, "--json")
        kernels = {p["name"]: p for p in json.loads(checked.stdout)["points"]}["kernels"]
        assert kernels["why"].endswith("so this is the pairings' answer")
        assert "the image's own arch list is unknown" in kernels["why"]
    finally:
        connect().remove_image(tag)


def test_a_program_that_is_not_python_is_bad_input(tmp_path: Path) -> None:
    script = tmp_path / "not-python"
    script.write_text("#!/bin/sh\necho garbage\n", encoding="utf-8")
    script.chmod(0o755)
    result = invoke("torch-arch", "--python", script)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: --python {script}: not a Python interpreter (exit "
                                     "status 0, no answer on stdout)")
