"""A stand-in for download.pytorch.org and PyPI on 127.0.0.1: tiny torch wheels named, tagged and
described like the real ones, served as PEP 503 pages by a plain ``http.server``.

Wheels (deterministic: fixed zip timestamps, sorted members, so the same call gives the same sha256):

    torch_wheel(dest, "2.13.0+cu130", arches=["sm_75", ..., "sm_120"])
        torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl (the running interpreter's tag)
        with torch/version.py in the form real wheels have, and for CUDA labels
        torch/include/ATen/cuda/CUDAConfig.h with the NVCC_FLAGS_EXTRA line of the real header.
    dependency_wheel(dest, "nvidia-cudnn-cu13", "9.13.0.50")

The index (``LocalIndex``) has the layout of the real one:

    /whl/<label>/torch/            that label's torch files only (cu126, cu130, rocm7.2, cpu, ...)
    /whl/<label>/<dependency>/     dependencies the label's torch requires, as the real index serves them
    /whl/torch/                    every torch build of every label
    /simple/<name>/                the user's index (PyPI-like): dependencies, and PyPI's label-less torch
    /files/<file>                  the files /simple/ links to (``../../files/NAME#sha256=HEX``)

Hrefs quote ``+`` as ``%2B`` as the real pages do. Use it as a pytest plugin
(``pytest_plugins = ("localindex",)``) for the ``torch_index_server`` fixture, or serve a folder
of your own with :func:`serve`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import shutil
import sys
import threading
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

# the earliest a zip can hold: fixed, so every build is byte-identical
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
LINUX = "manylinux_2_28_x86_64"
# what the stand-in +cu13x torch requires, as the real one does
CUDNN = ("nvidia-cudnn-cu13", "9.13.0.50")
# Compiled architectures by CUDA major, as the real builds list them (the caller may pass its own).
DEFAULT_ARCHES = {
    "12": ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
    "13": ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"),
}


def python_tag(version: str | None = None) -> str:
    """``cp311`` for Python 3.11; the running interpreter when ``version`` is None."""
    if version is None:
        return f"cp{sys.version_info[0]}{sys.version_info[1]}"
    major, minor = version.split(".")[:2]
    return f"cp{major}{minor}"


def dist_name(name: str) -> str:
    """The file-name form of a project name (``nvidia-cudnn-cu13`` -> ``nvidia_cudnn_cu13``)."""
    return name.replace("-", "_").replace(".", "_")


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_wheel(dest: Path, name: str, version: str, tag: str, files: dict[str, str], *,
                requires: Sequence[str] = (), requires_python: str | None = None,
                purelib: bool = True,
                summary: str = "") -> Path:
    """``{dist}-{version}-{tag}.whl`` in ``dest`` with a proper .dist-info (METADATA, WHEEL, RECORD)."""
    dist = dist_name(name)
    info = f"{dist}-{version}.dist-info"
    contents = dict(files)
    metadata = ["Metadata-Version: 2.4", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Summary: {summary}"] if summary else []
    metadata += [f"Requires-Python: {requires_python}"] if requires_python else []
    metadata += [f"Requires-Dist: {requirement}" for requirement in requires]
    contents[f"{info}/METADATA"] = "\n".join(metadata) + "\n\n"
    contents[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: kdkit-tests (1.0)\n"
                                 f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n")
    contents[f"{info}/top_level.txt"] = name.split("-")[0].split(".")[0] + "\n"
    record = [f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path,
              text in sorted(contents.items())]
    contents[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in [*sorted(p for p in contents if ".dist-info/" not in p),
                     *sorted(p for p in contents if ".dist-info/" in p
                             and not p.endswith("RECORD")),
                     f"{info}/RECORD"]:
            member = zipfile.ZipInfo(path, date_time=ZIP_TIME)
            member.external_attr = 0o644 << 16
            member.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(member, contents[path])
    return wheel


def version_py(version: str, cuda: str | None, hip: str | None,
               rocm: str | None, git_version: str) -> str:
    """torch/version.py as real wheels write it (2.9 onwards, with ``rocm``)."""
    return ("from typing import Optional\n\n"
            "__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
            f"__version__ = {version!r}\n"
            "debug = False\n"
            f"cuda: Optional[str] = {cuda!r}\n"
            f"git_version = {git_version!r}\n"
            f"hip: Optional[str] = {hip!r}\n"
            f"rocm: Optional[str] = {rocm!r}\n"
            "xpu: Optional[str] = None\n")


def cuda_config_h(arches: Sequence[str]) -> str:
    """torch/include/ATen/cuda/CUDAConfig.h of a CUDA build; ``arches`` like ``["sm_75", "sm_120"]``."""
    numbers = [arch.removeprefix("sm_").removeprefix("compute_") for arch in arches]
    flags = ";".join(f"-gencode;arch=compute_{n},code=sm_{n}" for n in numbers)
    return ("#pragma once\n\n"
            "// Test these using #if AT_CUDNN_ENABLED(), not #ifdef, so that it's\n"
            "// obvious if you forgot to include Config.h\n"
            "//    c.f. https://stackoverflow.com/questions/33759787/generating-an-error-if-checked-boolean-macro-is-not-defined\n"
            "//\n"
            "// NB: This header MUST NOT be included from other headers; it should\n"
            "// only be included from C++ files.\n"
            "#define AT_CUDNN_ENABLED() 1\n"
            "#define AT_CUSPARSELT_ENABLED() 1\n"
            "#define AT_HIPSPARSELT_ENABLED() 0\n"
            "#define AT_ROCM_ENABLED() 0\n"
            "#define AT_MAGMA_ENABLED() 1\n\n"
            "// Needed for hipMAGMA to correctly identify implementation\n"
            "#if (AT_ROCM_ENABLED() && AT_MAGMA_ENABLED())\n"
            "#define HAVE_HIP 1\n"
            "#endif\n\n"
            f'#define NVCC_FLAGS_EXTRA "{flags}"\n')


def _build_facts(label: str | None) -> tuple[str | None, str | None, str | None]:
    """(cuda, hip, rocm) of torch/version.py for a local label."""
    from kdkit.core.builds import parse_label

    # PyPI's label-less Linux torch is a CUDA build
    parsed = parse_label(label) if label else ("cuda", "13.0")
    if parsed is None or parsed[0] == "cpu":
        return None, None, None
    kind, number = parsed
    if kind == "cuda":
        return number, None, None
    assert number is not None
    parts = number.split(".")
    rocm = ".".join([*parts, "0"][:3])
    return None, f"{parts[0]}.{parts[1]}.{43482 + len(number)}-0f2d60242", rocm


def torch_wheel(dest: Path, version: str, *, python: str | None = None, platform: str = LINUX,
                arches: Sequence[str] | None = None, requires: Sequence[str] | None = None) -> Path:
    """A stand-in torch ``torch-{version}-{cpXY}-{cpXY}-{platform}.whl`` (importable, nothing heavy in it).

    ``python`` is ``"3.11"`` style (default: the running interpreter); ``arches`` the compiled
    architectures of a CUDA build (default: those of its CUDA major); ``requires`` its Requires-Dist
    (default: the stand-in cuDNN for +cu13x builds, nothing otherwise).
    """
    public, _plus, label = version.partition("+")
    cuda, hip, rocm = _build_facts(label or None)
    git = hashlib.sha1(version.encode()).hexdigest()
    files = {
        "torch/__init__.py": ('"""A stand-in torch built by kdkit\'s tests: its metadata and build '
                              'facts, no tensors."""\n\nfrom torch import version as version\n\n'
                              "__version__ = version.__version__\n"),
        "torch/version.py": version_py(version, cuda, hip, rocm, git),
    }
    if cuda is not None:
        chosen = arches if arches is not None else DEFAULT_ARCHES.get(
            cuda.split(".")[0], DEFAULT_ARCHES["13"])
        files["torch/include/ATen/cuda/CUDAConfig.h"] = cuda_config_h(chosen)
    if requires is None:
        requires = ([f'{CUDNN[0]}=={CUDNN[1]}; platform_system == "Linux"']
                    if (cuda or "").startswith("13") else [])
    tag = python_tag(python)
    return build_wheel(dest, "torch", version, f"{tag}-{tag}-{platform}", files, requires=requires,
                       requires_python=">=3.10", purelib=False,
                       summary=(
                           f"Tensors and Dynamic neural networks in Python ({public}, kdkit test "
                           "stand-in)"))


def dependency_wheel(dest: Path, name: str, version: str,
                     tag: str = "py3-none-manylinux_2_27_x86_64") -> Path:
    """A stand-in dependency wheel (e.g. ``nvidia-cudnn-cu13``), a namespace-style package with one module."""
    parts = name.split("-")
    # nvidia-cudnn-cu13 installs nvidia/cudnn/, as the real one does
    module = "nvidia/" + "_".join(p for p in parts[1:]
                                  if not p[2:].isdigit()) if parts[0] == "nvidia" \
        else dist_name(name)
    files = {f"{module}/__init__.py": f'"""{name} {version}, a test stand-in."""\n'}
    return build_wheel(dest, name, version, tag, files, requires_python=">=3.8")


# ---------------------------------------------------------------- the index folder


def _normalize(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _project_of(wheel: Path) -> str:
    return _normalize(wheel.name.split("-", 1)[0])


def _anchor(href: str, wheel: Path, requires_python: str | None) -> str:
    data = f' data-requires-python="{html.escape(requires_python)}"' if requires_python else ""
    return f'    <a href="{href}#sha256={sha256(wheel)}"{data}>{html.escape(wheel.name)}</a><br/>\n'


def _page(title: str, anchors: Sequence[str]) -> str:
    return (f"<!DOCTYPE html>\n<html>\n  <head><title>{html.escape(title)}</title></head>\n  "
            f"<body>\n    <h1>{html.escape(title)}</h1>\n{''.join(anchors)}  </body>\n</html>\n")


@dataclass
class LocalIndex:
    """A folder laid out like download.pytorch.org plus a PyPI-like ``/simple/``; :meth:`write` makes the pages."""

    root: Path
    whl: dict[str, list[Path]] = field(default_factory=dict)  # label -> files of /whl/<label>/
    simple: list[Path] = field(default_factory=list)  # files of /simple/ (in /files/)

    def add_whl(self, label: str, wheel: Path) -> Path:
        """Put ``wheel`` (torch or a dependency) in ``/whl/<label>/``."""
        target = self.root / "whl" / label / wheel.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wheel, target)
        self.whl.setdefault(label, []).append(target)
        return target

    def add_simple(self, wheel: Path) -> Path:
        """Put ``wheel`` on the user's index ``/simple/`` (file under ``/files/``)."""
        target = self.root / "files" / wheel.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(wheel, target)
        self.simple.append(target)
        return target

    def write(self) -> LocalIndex:
        """(Re)write every index page from the files added so far."""
        all_torch: list[str] = []
        for label, wheels in sorted(self.whl.items()):
            projects: dict[str, list[str]] = {}
            for wheel in sorted(wheels, key=lambda w: w.name):
                href = f"/whl/{label}/{quote(wheel.name)}"
                anchor = _anchor(href, wheel, ">=3.10" if _project_of(wheel) == "torch" else None)
                projects.setdefault(_project_of(wheel), []).append(anchor)
                if _project_of(wheel) == "torch":
                    all_torch.append(anchor)
            for project, anchors in projects.items():
                _write(self.root / "whl" / label / project / "index.html",
                       _page(f"Links for {project}", anchors))
            _write(self.root / "whl" / label / "index.html",
                   _page("Simple index",
                         [f'    <a href="/whl/{label}/{p}/">{p}</a><br/>\n'
                          for p in sorted(projects)]))
        _write(self.root / "whl" / "torch" / "index.html",
               _page("Links for torch", sorted(all_torch)))
        by_project: dict[str, list[str]] = {}
        for wheel in sorted(self.simple, key=lambda w: w.name):
            by_project.setdefault(_project_of(wheel), []).append(
                _anchor(f"../../files/{quote(wheel.name)}", wheel, None))
        for project, anchors in by_project.items():
            _write(self.root / "simple" / project / "index.html",
                   _page(f"Links for {project}", anchors))
        _write(self.root / "simple" / "index.html",
               _page("Simple index",
                     [f'    <a href="{p}/">{p}</a><br/>\n' for p in sorted(by_project)]))
        return self


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def standard_index(root: Path, python: str | None = None) -> LocalIndex:
    """The builds the tests lock against, for the running interpreter (``python`` to choose another):

    torch 2.13.0 as +cu126, +cu130 (requiring the stand-in cuDNN, which /whl/cu130/ and /simple/
    both serve), +rocm7.2 and +cpu; /whl/cu128/ holds only 2.12.0+cu128 and a 2.13.0+cu128 for
    another Python; /simple/ holds PyPI's label-less torch 2.13.0 as well.
    """
    build = root / "build"
    index = LocalIndex(root / "index")
    for label in ("cu126", "cu130", "rocm7.2", "cpu"):
        index.add_whl(label, torch_wheel(build / label, f"2.13.0+{label}", python=python))
    cudnn = dependency_wheel(build / "deps", *CUDNN)
    index.add_whl("cu130", cudnn)
    index.add_simple(cudnn)
    index.add_whl("cu128", torch_wheel(build / "cu128", "2.12.0+cu128", python=python))
    other = "3.14" if python_tag(python) != "cp314" else "3.13"
    index.add_whl("cu128", torch_wheel(build / "cu128-other", "2.13.0+cu128", python=other))
    index.add_simple(torch_wheel(build / "pypi", "2.13.0", python=python))
    return index.write()


# ---------------------------------------------------------------- the server


class _QuietHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler that records each request path instead of logging it to stderr."""

    requests: list[str]
    # the Authorization header every request must carry (None: any)
    authorization: str | None = None
    authorized: list[str]  # the paths asked with it (set per server by serve)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if self.authorization is not None:
            if self.headers.get("Authorization") != self.authorization:
                self.send_error(401, "Unauthorized")
                return
            type(self).authorized.append(self.path)
        super().do_GET()


@dataclass
class Served:
    """A running index: its base URL and the paths requested so far."""

    root: Path
    url: str
    requests: list[str]
    authorized: list[str] = field(default_factory=list)

    def torch_index(self, label: str) -> str:
        """A backend's ``torch_index`` on this server (``cu130`` -> ``http://127.0.0.1:PORT/whl/cu130``)."""
        return f"{self.url}/whl/{label}"

    @property
    def simple(self) -> str:
        return f"{self.url}/simple/"


@contextmanager
def serve(root: Path, basic_auth: str | None = None) -> Iterator[Served]:
    """Serve ``root`` on 127.0.0.1 (a free port) from a thread until the block ends; with ``basic_auth``
    (``user:password``) every request must carry it, as Basic auth (``Served.authorized`` lists those that did)."""
    expected = "Basic " + base64.b64encode(basic_auth.encode()).decode() if basic_auth else None
    handler = type("Handler", (_QuietHandler,),
                   {"requests": [], "authorization": expected, "authorized": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="localindex", daemon=True)
    thread.start()
    try:
        yield Served(root, f"http://127.0.0.1:{server.server_address[1]}",
                     handler.requests, handler.authorized)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def torch_index_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The standard index (see :func:`standard_index`), served for the whole session."""
    index = standard_index(tmp_path_factory.mktemp("localindex"))
    with serve(index.root) as served:
        yield served
