"""A CUDA image from PyPI's torch, built by the real engine from a stand-in with the real layout.

The real image (PyPI's torch 2.13.0, a CUDA 13.0 build, and its 28 nvidia-*/cuda-* wheels: 2.7 GB of
wheels, a 5 GB image) was built here once by ``bench/bench_cuda_image.py`` (bench/results/cuda_image.json,
docs/evidence/cuda-image-from-pypi.md); it is too big for every CI run. This test keeps its path: a cuda
backend whose torch_index is the stand-in PyPI of tests/localindex.py (named by pip's configuration as the
user's mirror), whose label-less ``torch-2.13.0`` says ``2.13.0+cu130`` in torch/version.py, carries the real
``torch/include/ATen/cuda/CUDAConfig.h`` line and requires the stand-in ``nvidia-cudnn-cu13`` as the real one
does. `kdkit lock` (pip-compile) locks it; `kdkit build --backend cuda` installs it in the image (the builder
reaches the index on 127.0.0.1 with network=host); the image says what build it is.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

import tests.lock.test_lock_index as index_tests
from tests.conftest import BASE, invoke
from tests.localindex import CUDNN, Served, torch_index_server

__all__ = ["torch_index_server"]  # the session's index, a fixture

pytestmark = pytest.mark.docker


def in_image(tag: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "run", "--rm", "--pull", "never", "--network", "none", tag,
                           "sh", "-c", script],
                          capture_output=True, text=True, check=False, timeout=300)


def built(project: Path, tag: str) -> dict[str, Any]:
    result = invoke("build", project, "--backend", "cuda", "--base-image", BASE,
                    "--tag", tag, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_a_cuda_image_from_pypi_says_its_build_and_checks_itself(
        docker_engine: None, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path, torch_index_server: Served) -> None:
    index_tests.isolate_pip(monkeypatch, tmp_path)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_INDEX_URL", torch_index_server.simple)
    project = index_tests.make_project(tmp_path / "proj", "cuda", torch_index_server.simple, None)
    locked = invoke("lock", project, "--backend", "cuda")
    assert locked.exit_code == 0, locked.output
    tag = f"kdkit-test/cuda-pypi-{uuid.uuid4().hex[:10]}:standin"
    try:
        data = built(project, tag)
        labels = data["labels"]
        assert labels["dev.kdkit.backend"] == "cuda" and labels["dev.kdkit.torch.cuda"] == "13.0"
        assert labels["dev.kdkit.torch.arch_list"] == "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
        env = subprocess.run(["docker", "image", "inspect",
                              tag, "--format", "{{json .Config.Env}}"],
                             capture_output=True, text=True, check=True).stdout
        assert "NVIDIA_REQUIRE_CUDA=cuda>=13.0" in json.loads(env)
        arch = in_image(tag, "exec kdkit torch-arch --json")
        assert arch.returncode == 0, arch.stderr
        assert json.loads(arch.stdout)["arch_list"] == labels["dev.kdkit.torch.arch_list"].split()
        verify = in_image(tag, 'exec kdkit verify-env --lock "$KDKIT_LOCK_FILE"')
        assert verify.returncode == 0 and "MATCH: 0 error(s)" in verify.stdout, verify.stdout + verify.stderr
        # cuDNN is torch's: it lies in the venv (torch's layers), once, not in the rest's deps/.
        found = (
            in_image(tag,
                     "find /opt/kdkit -path '*/nvidia/cudnn/__init__.py'; true").stdout.split())
        assert len(found) == 1 and found[0].startswith("/opt/kdkit/venv/"), found
        assert CUDNN[0] in (project / "requirements" / "cuda.txt").read_text(encoding="utf-8")
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)
