"""`kdkit lock --resolver uv` beside pip-tools: the same pins, header, index lines, checks and atomic write.

Both resolvers run for real on the same project and pip configuration: from a local folder of torch wheels
(--torch-find-links, with this machine's pip configuration, as tests/lock/test_lock.py), and through the stand-in
torch index of tests/localindex.py served on 127.0.0.1 (as tests/lock/test_lock_index.py). uv is the one kdkit
finds (KDKIT_UV, the uv package of this interpreter, PATH); the dev lock installs it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import Result

from kdkit.config.project import load_project
from kdkit.core.errors import Unavailable
from kdkit.core.lockfile import Lock, parse_lock
from kdkit.lock import uvcompile
from kdkit.lock.pipcompile import version as pip_tools_version
from tests.conftest import invoke, tree_snapshot
from tests.localindex import LocalIndex, Served, dependency_wheel, serve, sha256, standard_index, torch_index_server
from tests.lock.test_lock import TORCH_WHEELS, needs_torch_wheels
from tests.lock.test_lock_index import Machine, clean_pip, hostile_pip, isolate_pip, make_project, set_torch_index

# fixtures of tests/lock/test_lock_index.py, used here too
__all__ = ["clean_pip", "hostile_pip", "torch_index_server"]

try:
    UV_VERSION: str | None = uvcompile.uv_version(uvcompile.find_uv())
except Unavailable:
    UV_VERSION = None
needs_uv = pytest.mark.skipif(UV_VERSION is None,
                              reason="uv not found: `pip install uv` (the uv column is NOT "
                                     "checked)")


def lock(project: Path, resolver: str, *extra: str | os.PathLike[str],
         backend: str = "cpu") -> Result:
    return invoke("lock", project, "--backend", backend, "--resolver", resolver, *extra)


def lock_both(project: Path, *extra: str | os.PathLike[str],
              backend: str = "cpu") -> dict[str, Lock]:
    """The project locked with pip-tools then uv, each from no previous lock; the two locks, parsed."""
    path = load_project(project).backend(backend).lock
    locks = {}
    for resolver in ("pip-tools", "uv"):
        path.unlink(missing_ok=True)
        result = lock(project, resolver, *extra, backend=backend)
        assert result.exit_code == 0, f"{resolver}: {result.stderr}"
        locks[resolver] = parse_lock(path)
    return locks


def refusals(project: Path, backend: str, code: int) -> dict[str, str]:
    """Each resolver's last line on ``project``, which must fail with exit ``code``."""
    lines = {}
    for resolver in ("pip-tools", "uv"):
        result = lock(project, resolver, backend=backend)
        assert result.exit_code == code, f"{resolver}: {result.stderr}"
        lines[resolver] = result.stderr.splitlines()[-1]
    return lines


def pins(lock: Lock) -> dict[str, str]:
    return {key: pin.version for key, pin in lock.pins.items()}


def assert_same_but_the_resolver(locks: dict[str, Lock]) -> None:
    """Every pin (name==version) the same, the same index lines, headers that differ in `resolver` only."""
    tools, uv = locks["pip-tools"], locks["uv"]
    assert pins(uv) == pins(tools) and len(pins(uv)) > 0
    assert uv.options == tools.options
    assert {k: v for k, v in uv.header.items() if k != "resolver"} == \
        {k: v for k, v in tools.header.items() if k != "resolver"}
    assert tools.header["resolver"] == pip_tools_version() and tools.header["resolver"].startswith(
        "pip-tools 7.")
    assert uv.header["resolver"] == UV_VERSION and re.fullmatch(
        r"uv \d+\.\d+\.\d+", uv.header["resolver"])
    assert all(pin.hashes for pin in uv.pins.values())


# ---------------------------------------------------------------- the same lock either way


@needs_uv
@needs_torch_wheels
def test_same_lock_from_torch_find_links(project: Path) -> None:
    """The scaffolded project, torch from the folder, the rest through this machine's pip configuration."""
    locks = lock_both(project, "--torch-find-links", TORCH_WHEELS)
    assert_same_but_the_resolver(locks)
    assert locks["uv"].pins["torch"].version == "2.13.0+cpu"
    assert locks["uv"].header["torch-source"] == "find-links (replaces torch-index)"
    # remote indexes come before a local mirror for uv, so it hashes every file of a version as pip-compile does
    assert {k: sorted(p.hashes) for k, p in locks["uv"].pins.items()} == \
        {k: sorted(p.hashes) for k, p in locks["pip-tools"].pins.items()}


@needs_uv
@pytest.mark.parametrize(("backend", "label"), [("cpu", "cpu"), ("cuda", "cu130")])
def test_same_lock_through_the_torch_index(clean_pip: Served, tmp_path: Path,
                                           backend: str, label: str) -> None:
    """The torch index path: the preflight, torch from the index (cuDNN from both indexes for cu130), its
    torch-source and index lines, for both."""
    project = make_project(tmp_path / "proj", backend, clean_pip.torch_index(label))
    seen = len(clean_pip.requests)
    locks = lock_both(project, backend=backend)
    assert_same_but_the_resolver(locks)
    index = clean_pip.torch_index(label)
    assert locks["uv"].pins["torch"].version == f"2.13.0+{label}"
    assert locks["uv"].header["torch-source"].startswith(f"{index} (torch-2.13.0+{label}-")
    assert locks["uv"].options == [("--index-url", index), ("--extra-index-url", clean_pip.simple)]
    # each run asked the torch index's page: the preflight, then the resolver
    assert clean_pip.requests[seen:].count(f"/whl/{label}/torch/") >= 4


@needs_uv
def test_the_scaffolded_project_through_the_torch_index(clean_pip: Served, project: Path) -> None:
    set_torch_index(project, "cpu", clean_pip.torch_index("cpu"))
    assert_same_but_the_resolver(lock_both(project))


@needs_uv
def test_the_label_check_holds_for_uv(clean_pip: Served, tmp_path: Path) -> None:
    """cu128 serves 2.12.0+cu128 for this Python, /simple/ a label-less 2.13.0 that an unpinned torch takes: the
    same refusal as pip-tools' (tests/lock/test_lock_index.py spells it out), naming uv, nothing written."""
    project = make_project(tmp_path / "proj", "cuda", clean_pip.torch_index("cu128"), "torch\n")
    before = tree_snapshot(project)
    lines = refusals(project, "cuda", 1)
    assert lines["uv"].startswith(
        "Error: uv pip compile resolved torch==2.13.0 (no local label) for backend cuda")
    assert lines["uv"] == lines["pip-tools"].replace(
        "Error: pip-compile ", "Error: uv pip compile ", 1)
    assert tree_snapshot(project) == before


@needs_uv
def test_provenance_holds_for_uv(hostile_pip: Machine,
                                 tmp_path: Path, torch_index_server: Served) -> None:
    """pip's find-links folder has a newer torch than the index: uv takes it as pip-compile does, and the lock
    is refused alike (torch from this machine only; tests/lock/test_lock_index.py spells the line out), nothing
    written."""
    project = make_project(tmp_path / "proj", "cuda",
                           torch_index_server.torch_index("cu130"), "torch>=2.13,<2.14\n")
    before = tree_snapshot(project)
    lines = refusals(project, "cuda", 2)
    assert lines["uv"] == lines["pip-tools"]
    assert f"torch==2.13.1+cu130 came only from find-links {hostile_pip.links} (pip's configuration)" in lines["uv"]
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- a previous lock, --upgrade-package


@pytest.fixture
def demo_index(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[tuple[LocalIndex, Served]]:
    """The standard stand-in index plus kdkit-demo 1.0 on its /simple/, served; pip configured for it alone."""
    index = standard_index(tmp_path / "idx")
    index.add_simple(dependency_wheel(tmp_path / "build", "kdkit-demo", "1.0", "py3-none-any"))
    index.write()
    isolate_pip(monkeypatch, tmp_path)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    with serve(index.root) as served:
        monkeypatch.setenv("PIP_INDEX_URL", served.simple)
        yield index, served


def _demo_hash(index: LocalIndex, version: str) -> str:
    return "sha256:" + sha256(index.root / "files" / f"kdkit_demo-{version}-py3-none-any.whl")


@needs_uv
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_the_previous_lock_holds_until_upgrade_package(demo_index: tuple[LocalIndex, Served],
                                                       tmp_path: Path,
                                                       resolver: str) -> None:
    index, served = demo_index
    project = make_project(tmp_path / "proj", "cpu",
                           served.torch_index("cpu"), "torch==2.13.0\nkdkit-demo\n")
    assert lock(project, resolver).exit_code == 0
    lock_path = project / "requirements" / "cpu.txt"
    assert parse_lock(lock_path).pins["kdkit-demo"].version == "1.0"
    index.add_simple(dependency_wheel(tmp_path / "build", "kdkit-demo", "1.1", "py3-none-any"))
    index.write()
    assert lock(project, resolver).exit_code == 0
    kept = parse_lock(lock_path)
    assert kept.pins["kdkit-demo"].version == "1.0" and kept.header["resolver"].startswith(
        resolver.split("-")[0])
    assert kept.pins["kdkit-demo"].hashes == [_demo_hash(index, "1.0")]
    upgraded = lock(project, resolver, "--upgrade-package", "kdkit-demo")
    assert upgraded.exit_code == 0, upgraded.stderr
    assert parse_lock(lock_path).pins["kdkit-demo"].version == "1.1"
    assert parse_lock(lock_path).pins["kdkit-demo"].hashes == [_demo_hash(index, "1.1")]
    assert parse_lock(lock_path).pins["torch"].version == "2.13.0+cpu"


@needs_uv
def test_uv_hashes_a_kept_pin_from_the_index_not_from_the_previous_lock(demo_index: tuple[LocalIndex, Served],
                                                                       tmp_path: Path) -> None:
    """uv takes the hashes of a pin it keeps from an existing output file; kdkit hands it the pins alone."""
    index, served = demo_index
    project = make_project(tmp_path / "proj", "cpu",
                           served.torch_index("cpu"), "torch==2.13.0\nkdkit-demo\n")
    assert lock(project, "uv").exit_code == 0
    lock_path = project / "requirements" / "cpu.txt"
    right = _demo_hash(index, "1.0")
    lock_path.write_text(
        lock_path.read_text(encoding="utf-8").replace(right, "sha256:" + "0" * 64),
        encoding=("utf-8"))
    assert lock(project, "uv").exit_code == 0
    assert parse_lock(lock_path).pins["kdkit-demo"].hashes == [right]


@needs_uv
def test_pips_constraint_option_applies_to_neither(demo_index: tuple[LocalIndex, Served],
                                                   tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """pip-compile does not apply pip's `constraint` option (pip install does), so kdkit does not hand it to
    uv: the two resolvers pin the same."""
    index, served = demo_index
    index.add_simple(dependency_wheel(tmp_path / "build", "kdkit-demo", "1.1", "py3-none-any"))
    index.write()
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("kdkit-demo<1.1\n", encoding="utf-8")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    project = make_project(tmp_path / "proj", "cpu",
                           served.torch_index("cpu"), "torch==2.13.0\nkdkit-demo\n")
    locks = lock_both(project)
    assert_same_but_the_resolver(locks)
    assert locks["uv"].pins["kdkit-demo"].version == "1.1"


@needs_uv
def test_a_resolution_that_fails_is_one_line(clean_pip: Served, tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"),
                           "torch==2.13.0\nkdkit-no-such-package==1.0\n")
    before = tree_snapshot(project)
    result = lock(project, "uv")
    assert result.exit_code == 1, result.stderr
    line = result.stderr.splitlines()[-1]
    assert line.startswith("Error: uv pip compile failed for requirements/base.in: No solution "
                           "found when resolving dependencies: ") and "kdkit-no-such-package" in line, line
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- choosing the resolver, refusals


def _set_config(project: Path, **values: str) -> None:
    path = project / "kdkit.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config.update(values)
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")


@needs_uv
def test_kdkit_json_chooses_and_the_option_wins(clean_pip: Served, tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", "cpu", clean_pip.torch_index("cpu"))
    _set_config(project, resolver="uv")
    assert invoke("lock", project, "--backend", "cpu").exit_code == 0
    assert parse_lock(project / "requirements" / "cpu.txt").header["resolver"] == UV_VERSION
    assert lock(project, "pip-tools").exit_code == 0
    assert parse_lock(project / "requirements"
                      / "cpu.txt").header["resolver"] == pip_tools_version()


def test_uv_missing_is_exit_3_naming_how_to_install_it(project: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDKIT_UV", "/nonexistent")
    before = tree_snapshot(project)
    result = lock(project, "uv")
    assert result.exit_code == 3
    assert result.stderr.splitlines()[-1] == (
        "Error: KDKIT_UV=/nonexistent: no executable uv there; point KDKIT_UV at the uv binary, or "
        "unset it and install it with `pip install 'kdkit[uv]'` (or `pip install uv`), or lock "
        "with --resolver pip-tools")
    assert tree_snapshot(project) == before


def test_a_binary_that_is_not_uv_is_exit_3(project: Path,
                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "uv"
    fake.write_text("#!/bin/sh\necho 'not it'\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("KDKIT_UV", str(fake))
    before = tree_snapshot(project)
    result = lock(project, "uv")
    assert result.exit_code == 3
    assert result.stderr.splitlines()[-1].startswith(
        f"Error: {fake} --version: 'not it', not uv's answer; install")
    assert tree_snapshot(project) == before


def test_an_unknown_resolver_option_is_exit_2(project: Path) -> None:
    before = tree_snapshot(project)
    result = lock(project, "poetry")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == "Error: Invalid value for '--resolver': 'poetry' is not one of " \
                                             "'pip-tools', 'uv'."
    assert tree_snapshot(project) == before


def test_an_unknown_resolver_in_kdkit_json_is_exit_2(project: Path) -> None:
    _set_config(project, resolver="poetry")
    before = tree_snapshot(project)
    result = invoke("lock", project, "--backend", "cpu")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        f"Error: {project / 'kdkit.json'}: $.resolver: \"poetry\" is not allowed; expected one of "
        "\"pip-tools\", \"uv\"")
    assert tree_snapshot(project) == before


def test_the_choices_are_the_schemas() -> None:
    from kdkit.config.shipped import schema_path
    from kdkit.lock.resolvers import DEFAULT_RESOLVER, RESOLVERS

    schema = json.loads(schema_path("kdkit").read_text(encoding="utf-8"))
    assert tuple(
        schema["properties"]["resolver"]["enum"]) == RESOLVERS and DEFAULT_RESOLVER in RESOLVERS


# ---------------------------------------------------------------- what uv is given


def test_uv_arguments_carry_pips_configuration(project: Path) -> None:
    backend = load_project(project).backend("cpu")
    config = {"index-url": "https://mirror.example/simple", "find-links": "/srv/a /srv/b",
              "extra-index-url": "file:///srv/pypi/simple https://extra.example/simple",
              "trusted-host": "h.example",
              "timeout": "3"}
    args = uvcompile.uv_arguments(backend, config, None, True, ["numpy"], None)
    assert args == [*uvcompile.UV_FLAGS, "--find-links", "/srv/a", "--find-links", "/srv/b",
                    "--index", backend.torch_index, "--index", "https://mirror.example/simple",
                    "--index", "https://extra.example/simple", "--default-index",
                    "file:///srv/pypi/simple",
                    "--system-certs", "--allow-insecure-host", "h.example",
                    "--upgrade", "--upgrade-package", "numpy"]
    assert "unsafe-best-match" in args and "--no-config" in args
    local = uvcompile.uv_arguments(backend, {"index-url": "https://pypi.example/simple"},
                                   Path("/srv/torch"),
                                   False, [], "/etc/ca.pem")
    assert local[len(uvcompile.UV_FLAGS):] == ["--find-links", "/srv/torch", "--default-index",
                                               "https://pypi.example/simple", "--cert",
                                               "/etc/ca.pem"]
    assert uvcompile.uv_index_arguments(backend,
                                        {"no-index": "true", "find-links": "/srv/a"}, None) == \
        ["--no-index", "--find-links", "/srv/a"]


def test_uv_environment_has_pips_network_and_none_of_uvs_own() -> None:
    base = {"PATH": "/usr/bin", "UV_INDEX_URL": "https://elsewhere.example/simple",
            "UV_CACHE_DIR": "/c",
            "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    env = uvcompile.uv_environment(
        {"timeout": "2.5", "proxy": "proxy.example:3128", "client-cert": "/k.pem"}, base)
    assert env["PATH"] == "/usr/bin" and env["UV_CACHE_DIR"] == "/c" and "UV_INDEX_URL" not in env
    assert env["UV_HTTP_TIMEOUT"] == "3" and env["UV_HTTP_RETRIES"] == "1"
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://proxy.example:3128"
    assert "NO_PROXY" not in env and "no_proxy" not in env and env["SSL_CLIENT_CERT"] == "/k.pem"
    # the variables hold without pip's proxy
    assert uvcompile.uv_environment({}, base)["NO_PROXY"] == "127.0.0.1"
    # bounded
    assert uvcompile.uv_environment({"default-timeout": "180"}, {})["UV_HTTP_TIMEOUT"] == "10"


@needs_uv
@needs_torch_wheels
def test_in_container(project: Path, docker_engine: None) -> None:
    """uv inside the backend's base image (the local test base), the host's uv version brought in as a wheel."""
    image = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    config["backends"]["cpu"]["base_image"] = image
    (project / "kdkit.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    result = lock(project, "uv", "--torch-find-links", TORCH_WHEELS, "--in-container",
                  "--ca-bundle",
                  "/etc/ssl/certs/ca-certificates.crt", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)["locks"][0]
    assert report["resolved_in"] == f"container {image}" and report["torch"] == "2.13.0+cpu"
    header = parse_lock(project / "requirements" / "cpu.txt").header
    assert header["resolved-in"] == f"container {image}" and header["resolver"] == UV_VERSION
