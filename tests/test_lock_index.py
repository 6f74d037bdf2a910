"""`kdkit lock` through a real package index: the stand-in download.pytorch.org of tests/localindex.py,
served over HTTP on 127.0.0.1, with pip's configuration as a user's machine has it (clean or hostile).
pip-compile, pip and the server all run for real.
"""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

from localindex import Served, python_tag, sha256, torch_index_server, torch_wheel

__all__ = ["torch_index_server"]  # the session's index, a fixture


# ---------------------------------------------------------------- the stand-in index itself


def test_stand_in_torch_wheel_is_named_and_described_like_the_real_one(tmp_path: Path) -> None:
    tag = python_tag()
    cuda = torch_wheel(tmp_path / "a", "2.13.0+cu130", arches=["sm_75", "sm_120"])
    assert cuda.name == f"torch-2.13.0+cu130-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(cuda) as archive:
        version_py = archive.read("torch/version.py").decode()
        header = archive.read("torch/include/ATen/cuda/CUDAConfig.h").decode()
        metadata = archive.read("torch-2.13.0+cu130.dist-info/METADATA").decode()
        record = archive.read("torch-2.13.0+cu130.dist-info/RECORD").decode()
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert "__version__ = '2.13.0+cu130'\n" in version_py and "cuda: Optional[str] = '13.0'\n" in version_py
    assert "hip: Optional[str] = None\n" in version_py and "rocm: Optional[str] = None\n" in version_py
    assert '#define NVCC_FLAGS_EXTRA "-gencode;arch=compute_75,code=sm_75;-gencode;arch=compute_120,code=sm_120"\n' \
        in header
    assert "Name: torch\nVersion: 2.13.0+cu130\n" in metadata
    assert 'Requires-Dist: nvidia-cudnn-cu13==9.13.0.50; platform_system == "Linux"' in metadata
    assert re.search(r"^torch/version\.py,sha256=[-_A-Za-z0-9]{43},\d+$", record, re.MULTILINE)
    assert sha256(cuda) == sha256(torch_wheel(tmp_path / "b", "2.13.0+cu130", arches=["sm_75", "sm_120"]))

    rocm = torch_wheel(tmp_path / "c", "2.13.0+rocm7.2")
    with zipfile.ZipFile(rocm) as archive:
        version_py = archive.read("torch/version.py").decode()
        assert not any("CUDAConfig" in name for name in archive.namelist())
    assert "cuda: Optional[str] = None\n" in version_py and "rocm: Optional[str] = '7.2.0'\n" in version_py
    assert re.search(r"^hip: Optional\[str\] = '7\.2\.\d+-[0-9a-f]+'$", version_py, re.MULTILINE)


def test_served_pages_have_the_layout_of_download_pytorch_org(torch_index_server: Served) -> None:
    def page(path: str) -> str:
        with urllib.request.urlopen(torch_index_server.url + path, timeout=10) as response:
            return str(response.read().decode())

    cu130 = page("/whl/cu130/torch/")
    assert re.findall(r'href="([^"#]+)#sha256=[0-9a-f]{64}"', cu130) == [
        f"/whl/cu130/torch-2.13.0%2Bcu130-{python_tag()}-{python_tag()}-manylinux_2_28_x86_64.whl"]
    every = page("/whl/torch/")
    assert {m for m in re.findall(r"torch-2\.13\.0\+(\w+\.?\w*)-", every)} >= {"cu126", "cu130", "rocm7.2", "cpu"}
    assert 'href="../../files/nvidia_cudnn_cu13-9.13.0.50-py3-none-manylinux_2_27_x86_64.whl#sha256=' \
        in page("/simple/nvidia-cudnn-cu13/")


def test_pip_installs_the_stand_in_from_the_served_index(torch_index_server: Served, tmp_path: Path) -> None:
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-cache-dir",
                           "--target", str(target), "--index-url", torch_index_server.torch_index("cu130"),
                           "--extra-index-url", torch_index_server.simple, "torch==2.13.0"],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"})
    assert done.returncode == 0, done.stderr
    probe = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); import torch; "
                            "print(torch.__version__, torch.version.cuda)", str(target)],
                           capture_output=True, text=True)
    assert probe.stdout == "2.13.0+cu130 13.0\n", probe.stderr
    assert (target / "nvidia" / "cudnn" / "__init__.py").is_file()
