"""`kdkit lock` through a real package index: the stand-in download.pytorch.org of tests/localindex.py,
served over HTTP on 127.0.0.1, with pip's configuration as a user's machine has it (clean or hostile).
pip-compile, pip and the server all run for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.lockfile import parse_lock
from tests.conftest import invoke, tree_snapshot
from tests.localindex import (
    LocalIndex,
    Served,
    dependency_wheel,
    python_tag,
    serve,
    sha256,
    torch_index_server,
    torch_wheel,
)

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
    assert sha256(cuda) == sha256(
        torch_wheel(tmp_path / "b", "2.13.0+cu130", arches=["sm_75", "sm_120"]))

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
    assert {m
            for m in re.findall(r"torch-2\.13\.0\+(\w+\.?\w*)-", every)} >= {
                "cu126", "cu130", "rocm7.2", "cpu"}
    assert 'href="../../files/nvidia_cudnn_cu13-9.13.0.50-py3-none-manylinux_2_27_x86_64.whl#sha256=' \
        in page("/simple/nvidia-cudnn-cu13/")


def test_pip_installs_the_stand_in_from_the_served_index(
    torch_index_server: Served, tmp_path: Path) -> None:
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--isolated",
                           "--no-cache-dir",
                           "--target", str(target), "--index-url",
                           torch_index_server.torch_index("cu130"),
                           "--extra-index-url", torch_index_server.simple, "torch==2.13.0"],
                          capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PIP_CONFIG_FILE": "/dev/null"})
    assert done.returncode == 0, done.stderr
    probe = subprocess.run([sys.executable, "-I", "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import torch; "
                            "print(torch.__version__, torch.version.cuda)", str(target)],
                           capture_output=True, text=True)
    assert probe.stdout == "2.13.0+cu130 13.0\n", probe.stderr
    assert (target / "nvidia" / "cudnn" / "__init__.py").is_file()


# ---------------------------------------------------------------- pip configured as on a user's machine


class Machine:
    """What a hostile pip configuration points at: folders and a file:// index of this machine only."""

    def __init__(self, root: Path, served: Served) -> None:
        self.links = root / "wheels"  # find-links of the config file and of PIP_FIND_LINKS
        self.other_links = root / "more-wheels"  # only in PIP_FIND_LINKS
        # same names as the index's files, other bytes (another arch list), and a newer release
        self.torch_same_name = torch_wheel(self.links, "2.13.0+cu130", arches=["sm_80"])
        self.torch_newer = torch_wheel(self.links, "2.13.1+cu130")
        torch_wheel(self.other_links, "2.13.0+cpu", arches=[])
        # a file:// index: a copy of PyPI's cuDNN and a local-only package
        self.mirror = LocalIndex(root / "mirror")
        self.mirror.add_simple(next((served.root / "files").glob("nvidia_cudnn_cu13-*.whl")))
        self.helper = self.mirror.add_simple(dependency_wheel(root / "build", "kdkit-local-helper",
                                                              "1.0",
                                                              "py3-none-any"))
        self.mirror.write()
        self.paths = (str(root), root.as_uri())


def isolate_pip(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No PIP_* variable of this machine, no global configuration folder: only what the test sets."""
    for name in [n for n in os.environ if n.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "no-xdg"))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")


@pytest.fixture
def clean_pip(monkeypatch: pytest.MonkeyPatch,
              tmp_path: Path, torch_index_server: Served) -> Served:
    """No pip configuration at all (PIP_CONFIG_FILE=os.devnull); the user's index is the local /simple/."""
    isolate_pip(monkeypatch, tmp_path)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", torch_index_server.simple)
    return torch_index_server


@pytest.fixture
def hostile_pip(monkeypatch: pytest.MonkeyPatch,
                tmp_path: Path, torch_index_server: Served) -> Machine:
    """pip as on a machine with local wheels: a config file naming a find-links folder, a file:// extra
    index and a 180 s timeout, and PIP_FIND_LINKS naming two folders; the user's index is the local /simple/."""
    isolate_pip(monkeypatch, tmp_path)
    machine = Machine(tmp_path / "machine", torch_index_server)
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = {torch_index_server.simple}\nfind-links = "
                      f"{machine.links}\nextra-index-url = "
                      f"{machine.mirror.root.as_uri()}/simple\ndefault-timeout = 180\n",
                      encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", f"{machine.links} {machine.other_links}")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "180")
    return machine


def make_project(root: Path, backend: str, torch_index: str, base_in: str | None = None) -> Path:
    from kdkit.project.init import init_project

    project = init_project(root, name="proj", backend=backend)
    set_torch_index(project, backend, torch_index)
    if base_in is not None:
        (project / "requirements" / "base.in").write_text(base_in, encoding="utf-8")
    return project


def set_torch_index(project: Path, backend: str, url: str) -> None:
    path = project / "kdkit.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["backends"][backend]["torch_index"] = url
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


def assert_travels(lock_text: str, *local: str) -> None:
    """Nothing in the lock is a path of this machine: no file: URL, no find-links, none of ``local``."""
    assert "file:/" not in lock_text and "--find-links" not in lock_text
    for path in local:
        assert path not in lock_text
    indexes = [line.split()[1] for line in lock_text.splitlines() if line.startswith(("--index-url",
                                                                                       "--extra-index-url"))]
    assert indexes and all(url.startswith(("http://", "https://")) for url in indexes)


# ---------------------------------------------------------------- a. the build exists


@pytest.mark.parametrize(("backend", "label", "pins"),
                         [("cuda", "cu130", 2), ("rocm", "rocm7.2", 1),
                          ("cpu", "cpu", 1)])
def test_lock_through_the_index(clean_pip: Served, tmp_path: Path, backend: str,
                                label: str, pins: int) -> None:
    project = make_project(tmp_path / "proj", backend, clean_pip.torch_index(label))
    started = time.monotonic()
    result = invoke("lock", project, "--backend", backend)
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.stderr
    assert elapsed < HANG_S, f"a lock against the local index took {elapsed:.1f} s"
    lock_path = project / "requirements" / f"{backend}.txt"
    lock = parse_lock(lock_path)
    assert lock.pins["torch"].version == f"2.13.0+{label}" and len(lock.pins) == pins
    assert all(pin.hashes for pin in lock.pins.values())
    tag = python_tag()
    wheel = f"torch-2.13.0+{label}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    assert lock.pins["torch"].hashes == [f"sha256:{sha256(clean_pip.root / 'whl' / label / wheel)}"]
    index = clean_pip.torch_index(label)
    assert lock.header["torch-source"] == f"{index} ({wheel})"
    assert lock.header["indexes"] == f"--index-url {index}; --extra-index-url {clean_pip.simple}"
    assert lock.header["machine-local"] == "none"
    assert lock.options == [("--index-url", index), ("--extra-index-url", clean_pip.simple)]
    assert_travels(lock_path.read_text(encoding="utf-8"), str(tmp_path))


def test_lock_installs_on_another_machine(clean_pip: Served, tmp_path: Path) -> None:
    """The lock alone says where its files are: pip with no configuration and no index option installs it."""
    project = make_project(tmp_path / "proj", "cuda", clean_pip.torch_index("cu130"))
    assert invoke("lock", project, "--backend", "cuda").exit_code == 0
    target = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-cache-dir",
                           "--target", str(target),
                           "--require-hashes", "-r", str(project / "requirements" / "cuda.txt")],
                          capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                               "PIP_CONFIG_FILE": os.devnull})
    assert done.returncode == 0, done.stderr
    assert (target / "torch" / "version.py").read_text().count("cuda: Optional[str] = '13.0'") == 1


# ---------------------------------------------------------------- b. the index lacks the build


@pytest.mark.parametrize(
    ("backend", "label", "served"),
    # 2.12.0, and 2.13.0 for cp314
    [("cuda", "cu128", "serves no torch 2.13.0 for Python {py} on linux-x86_64"),
     ("cuda", "cu999", "has no torch/ page")],
    ids=["other-releases", "no-page"],
)
def test_index_without_the_build_is_refused_before_pip_compile(clean_pip: Served, tmp_path: Path,
                                                               backend: str,
                                                               label: str, served: str) -> None:
    project = make_project(tmp_path / "proj", backend, clean_pip.torch_index(label))
    before, seen = tree_snapshot(project), len(clean_pip.requests)
    result = invoke("lock", project, "--backend", backend)
    assert result.exit_code == 2
    index, py = clean_pip.torch_index(label), ".".join(map(str, sys.version_info[:2]))
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'kdkit.json'}: backends.cuda.torch_index {index} "
        f"{served.format(py=py)}; torch 2.13.0 has +cu126 and +cu130 at "
        f"{clean_pip.url}/whl/torch/; set backends.cuda.torch_index to {clean_pip.url}/whl/cu130")
    assert tree_snapshot(project) == before
    # pip-compile never ran: the only pages asked for are the preflight's two
    assert clean_pip.requests[seen:] == [f"/whl/{label}/torch/", "/whl/torch/"]


def test_requirement_and_python_filter_the_builds(clean_pip: Served, tmp_path: Path) -> None:
    """torch 2.13.0 has a +cu128 wheel, for another Python only; ROCm asks for its own labels."""
    other = make_project(tmp_path / "rocm", "rocm", clean_pip.torch_index("rocm6.4"))
    result = invoke("lock", other, "--backend", "rocm")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].endswith(
        f"torch 2.13.0 has +rocm7.2 at {clean_pip.url}/whl/torch/; "
        f"set backends.rocm.torch_index to {clean_pip.url}/whl/rocm7.2")
    project = make_project(tmp_path / "cuda", "cuda",
                           clean_pip.torch_index("cu128"), "torch>=2.12,<2.13\n")
    # 2.12.0+cu128 fits the range
    assert invoke("lock", project, "--backend", "cuda").exit_code == 0
    assert parse_lock(project / "requirements" / "cuda.txt").pins["torch"].version == "2.12.0+cu128"


# ---------------------------------------------------------------- c. the index does not answer


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# A bound on wall time here only catches a hang: each failure has its own bound in the message kdkit prints ("no
# answer after 10 s"), and pip alone took 228 s on the silent index. A loaded machine is slow, never this slow.
HANG_S = 120


def _timed_lock(project: Path) -> tuple[object, float]:
    started = time.monotonic()
    result = invoke("lock", project, "--backend", "cuda")
    return result, time.monotonic() - started


def test_closed_port_fails_at_once(hostile_pip: Machine, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/whl/cu130"
    project = make_project(tmp_path / "proj", "cuda", url)
    before = tree_snapshot(project)
    result, elapsed = _timed_lock(project)
    assert result.exit_code == 3  # type: ignore[attr-defined]
    assert elapsed < HANG_S, f"took {elapsed:.1f} s"
    assert result.stderr.splitlines()[-1] == (  # type: ignore[attr-defined]
        f"Error: {url}/torch/ (backends.cuda.torch_index in {project / 'kdkit.json'}): connection "
        "refused; nothing was locked: check the URL, the network and the proxy (HTTPS_PROXY, pip's "
        "proxy), or lock from a local folder with --torch-find-links")
    assert tree_snapshot(project) == before


def test_silent_index_fails_within_seconds_whatever_pip_says(
    hostile_pip: Machine, tmp_path: Path) -> None:
    """A server that takes the connection and never answers, with pip configured for 180 s: 10 s, not minutes
    (pip itself took 3 min 48 s here, then locked torch from a find-links folder of its configuration)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/whl/cu130"
        project = make_project(tmp_path / "proj", "cuda", url)
        result, elapsed = _timed_lock(project)
    assert result.exit_code == 3  # type: ignore[attr-defined]
    assert 9 < elapsed < HANG_S, f"took {elapsed:.1f} s"  # kdkit's own 10 s bound, not pip's 180 s
    assert result.stderr.splitlines()[-1].startswith(  # type: ignore[attr-defined]
        f"Error: {url}/torch/ (backends.cuda.torch_index in {project / 'kdkit.json'}): no answer "
        "after 10 s; ")
    assert not (project / "requirements" / "cuda.txt").exists()


def _answers(host: str, port: int) -> bool:
    """Whether something takes a TCP connection to host:port within a second (an intercepting network does)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def test_blackholed_address_with_pips_short_timeout(clean_pip: Served,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """A non-routable address: no route or no answer, either way seconds (pip's own 2 s timeout holds). Where the
    network intercepts every connection and answers for it, that answer is what kdkit reports (a 404 here)."""
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    url = "http://10.255.255.1/whl/cu130"
    project = make_project(tmp_path / "proj", "cuda", url)
    result, elapsed = _timed_lock(project)
    assert elapsed < HANG_S, f"took {elapsed:.1f} s"
    line = result.stderr.splitlines()[-1]  # type: ignore[attr-defined]
    if _answers("10.255.255.1", 80):
        assert result.exit_code in (2, 3), line  # type: ignore[attr-defined]
        assert line.startswith(f"Error: {project / 'kdkit.json'}: backends.cuda.torch_index {url} "
                               "has no torch/ page") or line.startswith(
                                   f"Error: {url}/torch/ "), line
        return
    assert result.exit_code == 3, line  # type: ignore[attr-defined]
    assert re.fullmatch(fr"Error: {re.escape(url)}/torch/ \(backends\.cuda\.torch_index in "
                        r".*kdkit\.json\): "
                        r"(no answer after 2 s|[^;]*unreachable[^;]*); nothing was locked: .*",
                        line), line


def test_users_index_that_does_not_answer(clean_pip: Served,
                                          monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    user = f"http://127.0.0.1:{_free_port()}/simple/"
    monkeypatch.setenv("PIP_INDEX_URL", user)
    project = make_project(tmp_path / "proj", "cuda", clean_pip.torch_index("cu130"))
    result, elapsed = _timed_lock(project)
    assert result.exit_code == 3 and elapsed < HANG_S  # type: ignore[attr-defined]
    assert result.stderr.splitlines()[-1] == (  # type: ignore[attr-defined]
        f"Error: {user}torch/ (index-url of pip's configuration, `pip config list`): connection "
        "refused; nothing was locked: check the URL, the network and the proxy (HTTPS_PROXY, pip's "
        "proxy), or change pip's configuration")


# ---------------------------------------------------------------- d. where each file came from


def test_hostile_configuration_the_header_names_the_index(hostile_pip: Machine, tmp_path: Path,
                                                          torch_index_server: Served) -> None:
    """find-links with a same-named torch and a file:// mirror in pip's configuration: the lock names the index's
    file, carries none of this machine's paths, and cuDNN (also on the mirror) is not called machine-local."""
    project = make_project(tmp_path / "proj", "cuda", torch_index_server.torch_index("cu130"))
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 0, result.stderr
    lock_path = project / "requirements" / "cuda.txt"
    lock = parse_lock(lock_path)
    tag = python_tag()
    wheel = f"torch-2.13.0+cu130-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    assert lock.header["torch-source"] == f"{torch_index_server.torch_index('cu130')} ({wheel})"
    assert lock.header["machine-local"] == "none"
    # pip-tools hashed both
    assert f"sha256:{sha256(hostile_pip.torch_same_name)}" in lock.pins["torch"].hashes
    assert "file:" not in lock.header["indexes"]
    assert_travels(lock_path.read_text(encoding="utf-8"), *hostile_pip.paths, str(tmp_path))
    assert "torch==2.13.0+cu130 also matches a file of this machine" in result.stderr
    assert str(hostile_pip.links) in result.stderr


def test_torch_only_from_a_folder_of_pips_configuration_is_refused(hostile_pip: Machine,
                                                                   tmp_path: Path,
                                                                   torch_index_server: Served) -> None:
    """The index has 2.13.0+cu130, the find-links folder a newer 2.13.1+cu130 that pip prefers: refused."""
    project = make_project(tmp_path / "proj", "cuda",
                           torch_index_server.torch_index("cu130"), "torch>=2.13,<2.14\n")
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'requirements' / 'cuda.txt'}: torch==2.13.1+cu130 came only from "
        f"find-links {hostile_pip.links} (pip's configuration), not from "
        f"{torch_index_server.torch_index('cu130')}; nothing was written (another machine could "
        "not install it): remove that source from pip's configuration (`pip config list`), or lock "
        "from it on purpose with --torch-find-links FOLDER")
    assert tree_snapshot(project) == before

    named = invoke("lock", project, "--backend", "cuda", "--torch-find-links", hostile_pip.links)
    assert named.exit_code == 0, named.stderr
    lock = parse_lock(project / "requirements" / "cuda.txt")
    assert lock.pins["torch"].version == "2.13.1+cu130"
    assert lock.header["torch-source"] == "find-links (replaces torch-index)"
    assert lock.header["machine-local"] == "torch"
    assert "warning:" in named.stderr.lower() and "torch came only from this machine" in named.stderr
    assert_travels((project / "requirements" / "cuda.txt").read_text(encoding="utf-8"),
                   *hostile_pip.paths)
    # Issue 31 §4: the bundle says its path without Docker cannot install that torch, and RUN.md has no block
    # that would try (pip install -r against an index without the file).
    bundled = invoke("bundle", project, "--backend", "cuda", "--no-image", "--no-kdkit-wheels",
                     "--out",
                     tmp_path / "bundle")
    assert bundled.exit_code == 0, bundled.stderr
    assert "requirements/cuda.txt pins torch from a folder of this machine only" in bundled.stderr
    run_md = (tmp_path / "bundle" / "RUN.md").read_text(encoding="utf-8")
    assert "Without Docker: not possible with this lock" in run_md and "-r project/requirements" not in run_md
    empty = tmp_path / "empty-wheelhouse"
    empty.mkdir()
    before = tree_snapshot(project)
    refused = invoke("bundle", project, "--backend", "cuda", "--no-image", "--no-kdkit-wheels",
                     "--wheelhouse", empty,
                     "--out", tmp_path / "bundle-2")
    assert refused.exit_code == 2 and refused.stderr.splitlines()[-1].startswith(f"Error: --wheelhouse {empty}: no "
                                                                                "file with a "
                                                                                "locked hash for ")
    # checked before any write
    assert not (tmp_path / "bundle-2").exists() and tree_snapshot(project) == before


def test_pins_only_on_this_machine_are_named(hostile_pip: Machine, tmp_path: Path,
                                             torch_index_server: Served) -> None:
    project = make_project(tmp_path / "proj", "cuda", torch_index_server.torch_index("cu130"),
                           "torch==2.13.0\nkdkit-local-helper==1.0\n")
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 0, result.stderr
    lock_path = project / "requirements" / "cuda.txt"
    lock = parse_lock(lock_path)
    assert lock.header["machine-local"] == "kdkit-local-helper"  # names only, no paths
    assert lock.pins["kdkit-local-helper"].hashes == [f"sha256:{sha256(hostile_pip.helper)}"]
    assert ("cuda.txt: kdkit-local-helper came only from this machine (index "
            f"{hostile_pip.mirror.root.as_uri()}/simple (pip's configuration)); another machine "
            "cannot install this lock") in result.stderr
    assert_travels(lock_path.read_text(encoding="utf-8"), *hostile_pip.paths)


# ---------------------------------------------------------------- the end-to-end path


def test_init_lock_check_end_to_end(clean_pip: Served, tmp_path: Path) -> None:
    """kdkit init, then kdkit lock --backend cuda against the local index with no find-links anywhere, then
    kdkit check --gpu "RTX 5090" on what was locked."""
    project = tmp_path / "proj"
    assert invoke("init", project, "--backend", "cuda").exit_code == 0
    set_torch_index(project, "cuda", clean_pip.torch_index("cu130"))
    locked = invoke("lock", project, "--backend", "cuda")
    assert locked.exit_code == 0, locked.stderr
    assert "torch==2.13.0+cu130" in locked.stdout
    checked = invoke("check", project, "--gpu", "RTX 5090")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    assert "RTX 5090: every point holds" in checked.stdout


def test_a_target_on_another_cpu_is_said_when_locking_and_building(
    clean_pip: Served, tmp_path: Path) -> None:
    """GH200 hosts are aarch64 (Grace): a lock made here is for x86_64, and lock and build say how to target arm64."""
    from kdkit.image.build import plan_build

    project = tmp_path / "proj"
    assert invoke("init", project, "--backend", "cuda").exit_code == 0
    set_torch_index(project, "cuda", clean_pip.torch_index("cu130"))
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["target_gpu"] = "GH200"
    (project / "kdkit.json").write_text(json.dumps(config), encoding="utf-8")
    locked = invoke("lock", project, "--backend", "cuda", "--json")
    assert locked.exit_code == 0, locked.stderr
    advice = ("requirements/cuda.txt is for x86_64, but kdkit.json's target_gpu GH200 comes in "
              "aarch64 hosts, where it will not install: make the lock and the image on "
              "linux/arm64 (run `kdkit lock --in-container` and `kdkit build` on an aarch64 "
              "machine, or in a linux/arm64 container through QEMU binfmt)")
    assert advice in json.loads(locked.stdout)["locks"][0]["warnings"]
    assert plan_build(project, "cuda").warnings == [
        advice.replace("requirements/cuda.txt", "the image built here")]
    checked = invoke("check", project, "--json")
    assert checked.exit_code == 1
    assert {p["name"]: p for p in json.loads(checked.stdout)["points"]}["cpu"]["verdict"] == "fail"


# ---------------------------------------------------------------- the pieces, called directly


def test_torch_requirement_read_from_the_input_files(tmp_path: Path) -> None:
    from kdkit.lock.pages import torch_requirement

    base, extra = tmp_path / "base.in", tmp_path / "extra.in"
    extra.write_text(
        "torch<2.14 ; python_version >= '3.10'\ntorch>=9 ; sys_platform == 'win32'\n",
        encoding=("utf-8"))
    base.write_text("-r extra.in\nnumpy\nTorch >= 2.12, != 2.13.1  # comment\n", encoding="utf-8")
    found = torch_requirement([base, extra], "3.11", ("linux", "x86_64"))
    assert found is not None and found.clauses == ((">=", "2.12"), ("!=", "2.13.1"), ("<", "2.14"))
    assert found.allows("2.13.0+cu130") and not found.allows("2.13.1+cu130") and not found.allows(
        "2.14.0")
    assert found.text() == "torch>=2.12,!=2.13.1,<2.14"
    base.write_text("torch==2.13.0+cu126\n", encoding="utf-8")
    exact = torch_requirement([base], "3.11", ("linux", "x86_64"))
    assert exact is not None and exact.text() == "torch 2.13.0+cu126" and not exact.allows(
        "2.13.0+cu130")
    base.write_text(
        "torch @ https://example.invalid/torch-2.13.0-cp311-cp311-linux_x86_64.whl\n",
        encoding=("utf-8"))
    assert torch_requirement([base], "3.11", ("linux", "x86_64")) is None
    base.write_text("numpy\n", encoding="utf-8")
    assert torch_requirement([base], "3.11", ("linux", "x86_64")) is None


@pytest.mark.parametrize(
    ("tags", "python", "fit"),
    [(("cp311", "cp311", "manylinux_2_28_x86_64"), "3.11", True),
     (("cp311", "cp311", "manylinux_2_28_aarch64"), "3.11", False),
     (("cp312", "cp312", "manylinux_2_28_x86_64"), "3.11", False),
     (("cp313", "cp313t", "manylinux_2_28_x86_64"), "3.13", False),
     (("cp39", "abi3", "manylinux2014_x86_64"), "3.11", True),
     (("cp312", "abi3", "manylinux2014_x86_64"), "3.11", False),
     (("py3", "none", "any"), "3.11", True),
     (("cp311", "cp311", "win_amd64"), "3.11", False),
     (("cp311", "cp311", "linux_x86_64"), "3.11", True)],
)
def test_wheel_tags_filter(tags: tuple[str, str, str], python: str, fit: bool) -> None:
    from kdkit.lock.pages import fits

    assert fits(tags, python, ("linux", "x86_64")) is fit


def test_a_file_url_names_its_path_percent_decoded_as_pip_reads_it() -> None:
    from kdkit.lock.pages import local_path

    assert local_path("file:///srv/my%20mirror/simple") == "/srv/my mirror/simple"
    assert local_path("/srv/wheels") == "/srv/wheels"


def test_pep503_page_parsing() -> None:
    from kdkit.lock.pages import parse_page

    page = ('<a href="/whl/cu130/torch-2.13.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=ABC123" '
            'data-requires-python="&gt;=3.10">torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl</a><br/>'
            '<a href="../../files/filelock-3.0.tar.gz">filelock-3.0.tar.gz</a><a '
            'href="/whl/cu130/">not a file</a>')
    files = parse_page(page, "http://h/simple/torch/")
    assert [(f.filename, f.url, f.sha256, f.requires_python) for f in files] == [
        ("torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
         "http://h/whl/cu130/torch-2.13.0%2Bcu130-cp311-cp311-manylinux_2_28_x86_64.whl", "abc123",
         ">=3.10"),
        ("filelock-3.0.tar.gz", "http://h/files/filelock-3.0.tar.gz", None, None)]


# ---------------------------------------------------------------- e. what a hostile tester tried


@pytest.mark.parametrize(
    ("backend", "label", "what"),
    [("cuda", "cpu", "is a cpu index (+cpu builds)"),
     ("cuda", "rocm7.2", "is a ROCm index (+rocm7.2 builds)"),
     ("cuda", "xpu", "ends in 'xpu', not a build label kdkit can read (cuXYZ, rocmX.Y, cpu)"),
     ("cpu", "cu130", "is a CUDA index (+cu130 builds)")],
    ids=["cuda-cpu", "cuda-rocm", "cuda-xpu", "cpu-cu130"],
)
def test_an_index_of_another_family_is_refused_before_pip_compile(clean_pip: Served, tmp_path: Path,
                                                                  backend: str,
                                                                  label: str, what: str) -> None:
    """cuda with .../whl/cpu wrote cuda.txt with +cpu torch and exited 0; now: exit 2, no request made."""
    index = clean_pip.torch_index(label)
    project = make_project(tmp_path / "proj", backend, index)
    before, seen = tree_snapshot(project), len(clean_pip.requests)
    result = invoke("lock", project, "--backend", backend)
    assert result.exit_code == 2, result.stderr
    want = {"cuda": "a CUDA index (cuXYZ, e.g. cu130), e.g. https://download.pytorch.org/whl/cu130",
            "cpu": "a cpu index, e.g. https://download.pytorch.org/whl/cpu"}[backend]
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'kdkit.json'}: $.backends.{backend}.torch_index {index} {what}: a "
        f"{backend} backend needs {want}")
    assert tree_snapshot(project) == before and clean_pip.requests[seen:] == []


def test_the_label_check_after_pip_compile_refuses_an_unreadable_label(tmp_path: Path) -> None:
    from kdkit.config.project import load_project
    from kdkit.core.lockfile import parse_lock_text
    from kdkit.lock.lock import check_torch_label

    project = make_project(tmp_path / "proj", "cuda", "https://download.pytorch.org/whl/xpu")
    lock = parse_lock_text("torch==2.13.0+xpu \\\n    --hash=sha256:" + "0" * 64 + "\n", project
                           / "cuda.txt")
    with pytest.raises(
        BadInput, match=r"torch_index https://download.pytorch.org/whl/xpu ends in 'xpu'"):
        check_torch_label(lock, load_project(project).backend("cuda"), project / "kdkit.json")


@pytest.mark.parametrize("tail", ["?x=1", "#frag"])
def test_an_index_url_with_a_query_or_fragment_is_refused(
    clean_pip: Served, tmp_path: Path, tail: str) -> None:
    index = clean_pip.torch_index("cu130") + tail
    project = make_project(tmp_path / "proj", "cuda", index)
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'kdkit.json'}: $.backends.cuda.torch_index {index} has a query or "
        f"fragment ({tail}), which no index URL takes: give the index's plain URL, e.g. "
        "https://download.pytorch.org/whl/cu130")


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that reads each request's head and lets ``answer`` write to the socket
    (until the block ends); yields its base URL."""
    done = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)

    def serve_one(conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head and (data := conn.recv(4096)):
                head += data
            with contextlib.suppress(OSError):
                answer(conn, done)

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        thread.join(timeout=2)
        listener.close()


def _trickle(conn: socket.socket, done: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n")
    while not done.wait(0.5):
        conn.sendall(b"<")


def test_a_page_that_trickles_fails_within_the_timeout(clean_pip: Served,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """A torch/ page sent a byte every 0.5 s kept `kdkit lock` running for minutes (each byte reset the socket's
    timeout): the whole fetch is bounded by the wall clock (pip's 2 s here, to keep the test short; 10.9 s
    with the default 10 s)."""
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with raw_server(_trickle) as base:
        url = f"{base}/whl/cu130"
        project = make_project(tmp_path / "proj", "cuda", url)
        result, elapsed = _timed_lock(project)
    assert result.exit_code == 3, result.stderr  # type: ignore[attr-defined]
    assert elapsed < HANG_S, f"took {elapsed:.1f} s"
    assert re.fullmatch(
        fr"Error: {re.escape(url)}/torch/ \(backends\.cuda\.torch_index in .*kdkit\.json\): the "
        r"page was not "
        r"complete after 2 s \(\d+ bytes came\); nothing was locked: .*",
        result.stderr.splitlines()[-1]), result.stderr  # type: ignore[attr-defined]


def _huge(conn: socket.socket, done: threading.Event) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n")
    block = b"<a href='x'>x</a>\n" * 4096
    for _ in range((33 << 20) // len(block) + 1):
        if done.is_set():
            return
        conn.sendall(block)


def test_a_page_over_32_mib_is_refused(clean_pip: Served, tmp_path: Path) -> None:
    """A 200 MB page was read whole into memory (646 MB RSS); now reading stops past 32 MiB."""
    with raw_server(_huge) as base:
        url = f"{base}/whl/cu130"
        project = make_project(tmp_path / "proj", "cuda", url)
        result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 3, result.stderr  # type: ignore[attr-defined]
    assert result.stderr.splitlines()[-1].startswith(  # type: ignore[attr-defined]
        f"Error: {url}/torch/ (backends.cuda.torch_index in {project / 'kdkit.json'}): the page is "
        "over 32 MiB, no index page is that large; nothing was locked: ")


def _one_wheel_index(root: Path, served: Served, attributes: str, *, fragment: bool = True) -> Path:
    """/whl/cu130/torch/ with the standard cu130 torch wheel, its anchor carrying ``attributes`` (and its
    sha256 fragment unless ``fragment`` is False)."""
    tag = python_tag()
    wheel = f"torch-2.13.0+cu130-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    folder = root / "whl" / "cu130"
    (folder / "torch").mkdir(parents=True)
    (folder / wheel).write_bytes((served.root / "whl" / "cu130" / wheel).read_bytes())
    (folder / "torch" / "index.html").write_text(
        f'<a href="/whl/cu130/{wheel.replace("+", "%2B")}{"#sha256=" + sha256(folder / wheel) if fragment else ""}" '
        f'{attributes}>{wheel}</a>\n',
        encoding="utf-8")
    return folder / wheel


def test_a_build_for_another_python_by_its_requires_python_is_refused(
    clean_pip: Served, tmp_path: Path) -> None:
    """The only cu130 wheel says data-requires-python >=3.(N+1): pip skips it and took PyPI's label-less torch
    (exit 1, confusing); the preflight now says which Requires-Python excluded it."""
    major, minor = sys.version_info[:2]
    wheel = _one_wheel_index(tmp_path
                             / "idx", clean_pip, f'data-requires-python="&gt;={major}.{minor + 1}"')
    with serve(tmp_path / "idx") as served:
        index = served.torch_index("cu130")
        project = make_project(tmp_path / "proj", "cuda", index)
        result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'kdkit.json'}: backends.cuda.torch_index {index} serves no torch "
        f"2.13.0 for Python {major}.{minor} on linux-x86_64: {wheel.name} has Requires-Python "
        f">={major}.{minor + 1} (data-requires-python), and kdkit.json's python is "
        f"{major}.{minor}; change kdkit.json's python or the torch requirement in the input files")


def test_a_yanked_build_counts_only_for_an_exact_pin(clean_pip: Served, tmp_path: Path) -> None:
    from kdkit.lock.fetch import Network
    from kdkit.lock.pages import Requirement
    from kdkit.lock.preflight import preflight

    _one_wheel_index(tmp_path / "idx", clean_pip, 'data-yanked="broken"')
    python = ".".join(map(str, sys.version_info[:2]))
    with serve(tmp_path / "idx") as served:
        index = served.torch_index("cu130")
        args = (python, ("linux", "x86_64"), Network(), tmp_path / "kdkit.json")
        # pip takes it: pinned
        assert preflight(index, "cuda", Requirement((("==", "2.13.0"),)), *args).files
        with pytest.raises(BadInput, match=r"cu130 serves no torch>=2\.13 for Python"):
            preflight(index, "cuda", Requirement(((">=", "2.13"),)), *args)


def test_unpinned_torch_taken_from_pypi_names_the_input_and_a_build_that_exists(clean_pip: Served,
                                                                               tmp_path: Path) -> None:
    """cu128 has 2.12.0+cu128 for this Python (2.13.0+cu128 for another only); pip took /simple/'s label-less
    2.13.0 and the fix said "pin torch==2.13.0+cu128 in cuda.txt": no such build, and not the input file."""
    index = clean_pip.torch_index("cu128")
    project = make_project(tmp_path / "proj", "cuda", index, "torch\n")
    result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 1, result.stderr
    python = ".".join(map(str, sys.version_info[:2]))
    assert result.stderr.splitlines()[-1] == (
        "Error: pip-compile resolved torch==2.13.0 (no local label) for backend cuda, whose index "
        f"{index} serves +cu128 builds; pin torch==2.12.0+cu128 in requirements/base.in (the "
        f"newest build {index} serves for Python {python}) or check the indexes in your pip "
        "configuration")
    assert not (project / "requirements" / "cuda.txt").exists()


def test_a_password_in_the_torch_index_is_refused_as_validate_refuses_it(
    clean_pip: Served, tmp_path: Path) -> None:
    """http://user:pw@host/whl/cu130 in kdkit.json gave exit 3 "cannot resolve host 127.0.0.1"."""
    index = clean_pip.torch_index("cu130").replace("http://", "http://user:pw@")
    project = make_project(tmp_path / "proj", "cuda", index)
    before = tree_snapshot(project)
    validated = invoke("validate", project)
    result = invoke("lock", project, "--backend", "cuda")
    assert validated.exit_code == 2 and result.exit_code == 2, result.stderr
    line = result.stderr.splitlines()[-1]
    assert line == (f"Error: {project / 'kdkit.json'}: $.backends.cuda.torch_index: value looks "
                    "like a password inside a URL; remove it and put it in .env (see "
                    ".env.example), passed at run time with --env-file (the value reads "
                    f"'http://user:<redacted>@{index.split('@')[1]}'); nothing was locked"), line
    assert ":pw@" not in result.output and tree_snapshot(project) == before


def test_the_users_index_with_a_password_is_asked_with_basic_auth(clean_pip: Served,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    """PIP_INDEX_URL=http://alice:pw@127.0.0.1:PORT/simple/: the preflight sends alice:pw as Basic auth (urllib
    took "alice:pw@127.0.0.1" for the host: exit 3), pip-compile resolves, and the lock, which would carry the
    password, is refused without printing it."""
    with serve(clean_pip.root, basic_auth="alice:s3cr3t-Pa55") as guarded:
        user = guarded.simple.replace("http://", "http://alice:s3cr3t-Pa55@")
        monkeypatch.setenv("PIP_INDEX_URL", user)
        project = make_project(tmp_path / "proj", "cuda", clean_pip.torch_index("cu130"))
        result = invoke("lock", project, "--backend", "cuda")
    assert "/simple/torch/" in guarded.authorized  # the preflight's request, authorized
    assert result.exit_code == 2, result.stderr
    assert "s3cr3t-Pa55" not in result.output
    assert result.stderr.splitlines()[-1].startswith(
        f"Error: {project / 'requirements' / 'cuda.txt'}:") and "the lock would carry a password inside a URL" \
        in result.stderr


def test_torch_find_links_must_hold_the_build(hostile_pip: Machine, tmp_path: Path) -> None:
    """An empty --torch-find-links folder exited 0 with torch from pip's find-links, the header saying
    `find-links (replaces torch-index)`."""
    empty = tmp_path / "empty"
    empty.mkdir()
    project = make_project(tmp_path / "proj", "cuda", "https://download.pytorch.org/whl/cu130")
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cuda", "--torch-find-links", empty)
    assert result.exit_code == 2, result.stderr
    python = ".".join(map(str, sys.version_info[:2]))
    assert result.stderr.splitlines()[-1] == (
        f"Error: --torch-find-links {empty}: no torch 2.13.0 +cu130 wheel for Python {python} on "
        "linux-x86_64 (it holds no torch wheel); put that wheel there, or lock from the torch "
        "index without --torch-find-links")
    assert tree_snapshot(project) == before


def test_torch_not_from_the_named_folder_is_refused(hostile_pip: Machine, tmp_path: Path,
                                                    torch_index_server: Served) -> None:
    """The folder holds 2.13.0+cu130, pip's find-links a newer 2.13.1+cu130 that pip prefers: not the folder's."""
    folder = tmp_path / "mine"
    folder.mkdir()
    for wheel in (torch_index_server.root / "whl" / "cu130").glob("*.whl"):
        (folder / wheel.name).write_bytes(wheel.read_bytes())
    project = make_project(tmp_path / "proj",
                           "cuda", "https://download.pytorch.org/whl/cu130", "torch>=2.13,<2.14\n")
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cuda", "--torch-find-links", folder)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'requirements' / 'cuda.txt'}: torch==2.13.1+cu130 came only from "
        f"find-links {hostile_pip.links} (pip's configuration), not from --torch-find-links "
        f"{folder}; nothing was written: remove that source from pip's configuration (`pip config "
        "list`), or put the torch you want in the folder")
    assert tree_snapshot(project) == before


def test_pips_proxy_is_used_whatever_no_proxy_says(clean_pip: Served,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """PIP_PROXY with NO_PROXY=127.0.0.1: urllib bypassed the proxy, pip's --proxy does not; a dead proxy is named
    as what refused, not the index."""
    dead = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("PIP_PROXY", dead)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    index = clean_pip.torch_index("cu130")
    project = make_project(tmp_path / "proj", "cuda", index)
    seen = len(clean_pip.requests)
    result, elapsed = _timed_lock(project)
    assert result.exit_code == 3 and elapsed < HANG_S, result.stderr  # type: ignore[attr-defined]
    assert result.stderr.splitlines()[-1] == (  # type: ignore[attr-defined]
        f"Error: {index}/torch/ (backends.cuda.torch_index in {project / 'kdkit.json'}): the proxy "
        f"{dead} (pip's proxy) refused the connection; nothing was locked: check the URL, the "
        "network and the proxy (HTTPS_PROXY, pip's proxy), or lock from a local folder with "
        "--torch-find-links")
    assert clean_pip.requests[seen:] == []  # nothing went around the proxy
    from kdkit.lock.fetch import Network

    # a live "proxy" (the stand-in server records the absolute URL a proxy is asked for), NO_PROXY still set
    assert Network(
        proxy=clean_pip.url).get("http://index.invalid/whl/cu130/torch/", "a test") is None
    assert clean_pip.requests[-1] == "http://index.invalid/whl/cu130/torch/"


def test_a_stray_local_torch_is_named_when_the_index_gives_no_hashes(hostile_pip: Machine,
                                                                     tmp_path: Path,
                                                                     torch_index_server: Served) -> None:
    """An index page without sha256 fragments: the find-links torch of the same name (other bytes) went unwarned."""
    _one_wheel_index(tmp_path / "idx", torch_index_server, "", fragment=False)
    with serve(tmp_path / "idx") as served:
        index = served.torch_index("cu130")
        project = make_project(tmp_path / "proj", "cuda", index)
        result = invoke("lock", project, "--backend", "cuda")
    assert result.exit_code == 0, result.stderr
    name = hostile_pip.torch_same_name.name
    assert (f"cuda.txt: {index}/torch/ gives no sha256 of its files, so torch==2.13.0+cu130's "
            f"hashes cannot be attributed to the torch index; {name} in find-links "
            f"{hostile_pip.links} (pip's configuration) is a file of this machine that pip may "
            "install here instead") in " ".join(result.stderr.split())


def test_backend_all_says_which_locks_were_written_before_a_failure(
    clean_pip: Served, tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", "cuda", clean_pip.torch_index("cu130"))
    set_torch_index(project, "rocm", clean_pip.torch_index("rocm6.4"))  # lacks the build: exit 2
    result = invoke("lock", project, "--backend", "all")
    assert result.exit_code == 2, result.stderr
    assert (project / "requirements" / "cuda.txt").is_file()
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"Error: {project / 'kdkit.json'}: backends.rocm.torch_index "), last
    assert last.endswith(
        " [backend rocm; before it, kdkit lock wrote cuda (requirements/cuda.txt), which stays]")
