"""`kdkit build`, `kdkit wheelhouse`, `kdkit inspect` and the end-to-end path, against a real engine.

One image is built per session (init -> lock -> wheelhouse -> build, offline) and shared: the
torch wheel is ~190 MB and CI has 2 cores. Tests that need the engine use the `docker_engine`
fixture (loud skip without one; failure with KDKIT_REQUIRE_DOCKER=1). Base image:
KDKIT_TEST_BASE (default kdkit-test/debian-python:3.11, made by `make engine`).
"""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import proc
from kdkit.image.build import render_dockerfile
from kdkit.image.labels import LABEL
from tests.conftest import BASE, TORCH_WHEELS, invoke, tree_snapshot

# a pull fails at once, without leaving this machine
MISSING_BASE = "localhost:1/kdkit-no-such-base:none"

needs_torch_wheels = pytest.mark.skipif(not any(TORCH_WHEELS.glob("torch-*.whl")),
                                        reason=(
                                            f"no torch wheel in {TORCH_WHEELS} "
                                            "(KDKIT_TEST_TORCH_WHEELS)"))


def error_line(result: Any) -> str:
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error: ")]
    assert len(lines) == 1, result.output
    return lines[0]


def engine_tags() -> set[str]:
    done = proc.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"])
    return set(done.stdout.split())


# ---------------------------------------------------------------- session fixtures



@pytest.fixture(scope="session")
def secret_run(built: dict[str, Any], locked: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One `kdkit run` of the default command with an env file holding a secret."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    env_file = tmp_path_factory.mktemp("env") / ".env"
    env_file.write_text(f"# a comment\n\nHF_TOKEN={secret}\n", encoding="utf-8")
    result = invoke("run", locked, "--env-file", env_file)
    return {"result": result, "secret": secret, "env_file": env_file}


# ---------------------------------------------------------------- the Dockerfiles (no engine)


@pytest.mark.parametrize("backend", ["cuda", "rocm", "cpu"])
def test_dockerfile_is_the_shared_body_with_backend_defaults(backend: str) -> None:
    text = render_dockerfile(backend)
    assert not re.search(r"^# kdkit:include", text, re.MULTILINE)
    assert re.search(r"^ARG BASE_IMAGE=\S+", text, re.MULTILINE)
    # no BuildKit-only syntax for the classic builder
    assert "--mount" not in text.replace("# ", "")
    assert [m.group(1) for m in re.finditer(r"^FROM \S+ AS (\w+)", text, re.MULTILINE)] == \
        ["base", "builder", "final"]
    assert "pip install --require-hashes --no-deps" in text
    assert text.index("COPY lock/ /app/") < text.index("COPY project/src/ /app/src/")
    assert re.search(r"^USER 10001:10001$", text, re.MULTILINE)
    final = text[text.index("AS final"):]
    assert "ca.pem" not in final and "/tmp/kdkit-build" not in final
    assert ("NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text) == (backend == "cuda")


def test_the_three_backend_files_share_one_body() -> None:
    bodies = {b: render_dockerfile(b) for b in ("cuda", "rocm", "cpu")}
    common = (Path(__file__).resolve().parents[2] / "Dockerfile.common").read_text(encoding="utf-8")
    for text in bodies.values():
        assert common in text


# ---------------------------------------------------------------- bad input (no engine needed)


def test_build_refuses_a_missing_lock(project: Path) -> None:
    before = tree_snapshot(project)
    result = invoke("build", project, "--backend", "cpu")
    assert result.exit_code == 2
    assert error_line(
        result) == (f"Error: {project / 'requirements/cpu.txt'}: no lock for backend cpu; "
                                  "run `kdkit lock --backend cpu`")
    assert tree_snapshot(project) == before


def test_build_refuses_an_unknown_backend(project: Path) -> None:
    result = invoke("build", project, "--backend", "tpu")
    assert result.exit_code == 2
    assert "'tpu' is not one of 'cuda', 'rocm', 'cpu'" in result.output


def test_build_refuses_a_stale_lock(locked_copy: Path) -> None:
    base_in = locked_copy / "requirements/base.in"
    base_in.write_text(base_in.read_text(encoding="utf-8") + "numpy\n", encoding="utf-8")
    before = tree_snapshot(locked_copy)
    result = invoke("build", locked_copy, "--backend", "cpu")
    assert result.exit_code == 2
    assert error_line(
        result) == (f"Error: {locked_copy / 'requirements/cpu.txt'}: stale: requirements/base.in "
                                  "changed since this lock was written; run `kdkit lock --backend "
                                  "cpu`")
    assert tree_snapshot(locked_copy) == before


def test_build_refuses_an_unhashed_lock(locked_copy: Path) -> None:
    lock = locked_copy / "requirements/cpu.txt"
    text = re.sub(r" \\\n\s+--hash=sha256:[0-9a-f]+", "", lock.read_text(encoding="utf-8"))
    lock.write_text(text, encoding="utf-8")
    result = invoke("build", locked_copy, "--backend", "cpu")
    assert result.exit_code == 2
    assert "has no --hash; kdkit locks are always hashed" in error_line(result)


def test_build_refuses_a_ca_bundle_that_is_not_pem(locked_copy: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "ca.der"
    bogus.write_bytes(b"\x30\x82\x01\x0a not a PEM file")
    before = tree_snapshot(locked_copy)
    result = invoke("build", locked_copy, "--backend", "cpu", "--ca-bundle", bogus)
    assert result.exit_code == 2
    assert error_line(result) == (
        f"Error: --ca-bundle {bogus}: not a PEM bundle (no -----BEGIN CERTIFICATE----- block); "
        "give the CA file your proxy's certificate chains to, e.g. "
        "/etc/ssl/certs/ca-certificates.crt")
    assert tree_snapshot(locked_copy) == before


def test_build_refuses_a_wheelhouse_missing_a_locked_file(
    locked_copy: Path, tmp_path: Path) -> None:
    empty = tmp_path / "wh"
    empty.mkdir()
    result = invoke("build", locked_copy, "--backend", "cpu", "--wheelhouse", empty)
    assert result.exit_code == 2
    assert re.fullmatch(fr"Error: --wheelhouse {empty}: no file with a locked hash for \S+==\S+ "
                        r"\(and 9 more\); "
                        rf"run `kdkit wheelhouse {locked_copy} --backend cpu --out {empty}`",
                        error_line(result))
    # issue 31: the hint works as printed
    (fill,) = re.findall(r"`kdkit ([^`]+)`", error_line(result))
    assert invoke(*shlex.split(fill)).exit_code == 0
    from kdkit.lock.wheelhouse import wheelhouse_files

    assert len(wheelhouse_files(empty, locked_copy / "requirements/cpu.txt")) == 10


def test_build_refuses_an_invalid_tag(locked_copy: Path) -> None:
    result = invoke("build", locked_copy, "--backend", "cpu", "--tag", "Bad Tag!")
    assert result.exit_code == 2
    assert error_line(
        result) == ("Error: --tag 'Bad Tag!': not a valid image reference; use lowercase "
                                  "name[:tag], e.g. myproj:cuda-test")


def test_engine_unreachable_is_exit_3(locked_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/kdkit-test.sock")
    for args in (("build", locked_copy, "--backend", "cpu"), ("run", locked_copy),
                 ("inspect", "x:y")):
        result = invoke(*args)
        assert result.exit_code == 3, result.output
        assert error_line(result).startswith(
            "Error: Docker engine not reachable at unix:///nonexistent/kdkit-test.sock (")
        assert error_line(result).endswith("or set DOCKER_HOST")


# ---------------------------------------------------------------- wheelhouse


@needs_torch_wheels
def test_wheelhouse_holds_exactly_the_locked_files(wheelhouse: Path, locked: Path) -> None:
    from kdkit.core.jsonio import sha256_file
    from kdkit.core.lockfile import parse_lock

    pins = parse_lock(locked / "requirements/cpu.txt").pins
    hashes = {h.split(":", 1)[1] for pin in pins.values() for h in pin.hashes}
    files = sorted(wheelhouse.iterdir())
    assert len(files) == len(pins)
    assert all(sha256_file(f) in hashes for f in files)
    assert not list(wheelhouse.parent.glob(".cpu.*"))  # no staging folder left behind


# ---------------------------------------------------------------- the end-to-end path


def test_build_labels_and_tag(built: dict[str, Any], locked: Path) -> None:
    from kdkit.core.jsonio import sha256_file

    lock_sha = sha256_file(locked / "requirements/cpu.txt")
    assert built["tag"] == f"kdkit-e2e:cpu-{lock_sha[:12]}"
    assert built["network"] == "none"  # from the wheelhouse: no network at all
    labels = built["labels"]
    assert labels[f"{LABEL}lock.sha256"] == lock_sha
    assert labels[f"{LABEL}backend"] == "cpu"
    assert labels[f"{LABEL}project"] == "kdkit-e2e"
    assert labels[f"{LABEL}lock.path"] == "requirements/cpu.txt"
    assert labels[f"{LABEL}python"] == "3.11"
    assert labels[f"{LABEL}torch.version"] == "2.13.0+cpu"
    assert labels[f"{LABEL}torch.cuda"] == "" and labels[f"{LABEL}torch.rocm"] == ""
    assert labels[f"{LABEL}version"] and labels["org.opencontainers.image.revision"]
    assert labels["org.opencontainers.image.version"] == f"cpu-{lock_sha[:12]}"


def test_inspect_reports_labels_and_the_lock_match(built: dict[str, Any], locked: Path) -> None:
    result = invoke("inspect", built["tag"], "--project", locked, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["user"] == "10001:10001"
    assert report["kdkit"]["backend"] == "cpu"
    assert report["lock"]["matches"] is True


def test_inspect_says_when_the_project_lock_moved_on(
    built: dict[str, Any], locked_copy: Path) -> None:
    lock = locked_copy / "requirements/cpu.txt"
    lock.write_text(lock.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    result = invoke("inspect", built["tag"], "--project", locked_copy)
    assert result.exit_code == 1
    assert error_line(result).startswith(f"Error: image {built['tag']}: built from lock ")
    assert error_line(result).endswith("rebuild with `kdkit build`")


def test_run_in_the_container_passes_and_writes_the_run_folder(
    secret_run: dict[str, Any], locked: Path) -> None:
    result = secret_run["result"]
    assert result.exit_code == 0, result.output
    assert "PASS: torch computes on cpu" in result.output  # diagnose
    assert "MATCH: 0 error(s)" in result.output  # verify-env against the baked lock
    folders = re.findall(r"new run folders: (\S+)", result.output)
    assert folders, result.output
    summary = json.loads((Path(folders[0]) / "summary.json").read_text(encoding="utf-8"))
    assert (summary["verdict"], summary["accepted"], summary["rejected"]) == ("pass", 11, 1)
    assert Path(folders[0]).parent == locked / "runs"
    assert secret_run["secret"] not in result.output


def test_container_user_is_not_root(built: dict[str, Any], locked: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(locked / "src")  # the project is found upward; `--` ends kdkit's arguments
    result = invoke("run", "--", "id", "-u")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[0] != "0"


def test_env_file_values_reach_the_container_only(built: dict[str, Any],
                                                  locked: Path, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("HF_TOKEN=abc=def\"q\"\n", encoding="utf-8")
    result = invoke("run", locked, "--env-file", env_file, "--",
                    "sh", "-c", 'printf "%s" "$HF_TOKEN"')
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith('abc=def"q"')  # taken as written, like docker run --env-file
    printed = invoke("run", locked, "--env-file", env_file, "--print")
    assert "abc=def" not in printed.output and f"--env-file {env_file}" in printed.output


class _Chunks(io.RawIOBase):
    """A read-only file over an iterator of byte chunks (the `docker save` stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._rest = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._rest:
            self._rest = next(self._chunks, b"")
            if not self._rest:
                return 0
        n = min(len(buffer), len(self._rest))
        buffer[:n], self._rest = self._rest[:n], self._rest[n:]
        return n


def _found(handle: Any, needles: list[bytes]) -> set[bytes]:
    """The needles a file holds, read in chunks (libtorch is hundreds of MB)."""
    overlap, tail, found = max(map(len, needles)) - 1, b"", set()
    while block := handle.read(1 << 20):
        window = tail + block
        found |= {n for n in needles if n in window}
        tail = window[-overlap:]
    return found


def files_holding(chunks: Iterator[bytes], needles: list[bytes]) -> dict[bytes, list[str]]:
    """For each needle, the files of a `docker save` stream (and of each layer in it) that hold it.

    Streamed: nothing is written to disk and no file is held whole in memory.
    """
    hits: dict[bytes, list[str]] = {n: [] for n in needles}
    with tarfile.open(fileobj=io.BufferedReader(_Chunks(chunks), 1 << 20), mode="r|") as outer:
        for member in outer:
            if not member.isfile():
                continue
            handle = outer.extractfile(member)
            if member.name.endswith(".tar"):
                with tarfile.open(fileobj=handle, mode="r|") as layer:
                    for inner in layer:
                        if inner.isfile():
                            for needle in _found(layer.extractfile(inner), needles):
                                hits[needle].append(f"{member.name}:{inner.name}")
            else:
                for needle in _found(handle, needles):
                    hits[needle].append(member.name)
    return hits


def test_no_layer_holds_the_ca_bundle_or_an_env_file_value(
        built: dict[str, Any], secret_run: dict[str, Any], ca_bundle: tuple[Path, bytes]) -> None:
    from kdkit.docker_adapter import connect

    # the baked lock's header: proves the scan sees file contents
    present = b"# kdkit: backend = cpu"
    secret = secret_run["secret"].encode()
    hits = files_holding(connect().save_image_chunks(built["tag"]), [ca_bundle[1], secret, present])
    assert hits[ca_bundle[1]] == []  # any copy of the bundle would hold its marker line
    assert hits[secret] == []
    assert any(name.endswith("app/requirements/cpu.txt") for name in hits[present])


def test_print_gives_the_same_verdict_through_the_docker_cli(
    secret_run: dict[str, Any], locked: Path) -> None:
    printed = invoke("run", locked, "--env-file", secret_run["env_file"], "--print")
    assert printed.exit_code == 0, printed.output
    lines = printed.stdout.strip().splitlines()
    assert lines[-1].startswith("docker run --rm --pull never --init --network none ")
    done = proc.run(["sh", "-c", " && ".join(lines)], timeout=600)
    assert done.returncode == secret_run["result"].exit_code == 0, done.stdout + done.stderr
    assert "PASS: every ID exactly once" in done.stdout


def test_no_op_and_source_only_rebuilds_reuse_the_installed_dependencies(
        built: dict[str, Any], locked_copy: Path, wheelhouse: Path,
        ca_bundle: tuple[Path, bytes]) -> None:
    args = ("build", locked_copy, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
            wheelhouse,
            "--ca-bundle", ca_bundle[0], "--tag", "kdkit-e2e:source-change", "--json")
    # the first may pick up kdkit's own files edited since the session's build
    for _attempt in range(2):
        again = invoke(*args)
        assert again.exit_code == 0, again.output
    noop = json.loads(again.stdout)
    # runs nothing
    assert noop["ran"] == [], [s for s in noop["steps"] if s["number"] in noop["ran"]]
    (locked_copy / "src/classify.py").write_text(
        (locked_copy / "src/classify.py").read_text(encoding="utf-8")
        + "\n# changed\n", encoding="utf-8")
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    ran = [s["instruction"] for s in data["steps"] if s["number"] in data["ran"]]
    assert not any("pip install" in s or s.startswith("COPY build/") or s.startswith("COPY --from")
                   for s in ran)
    # torch's architectures are read again only for a new venv
    assert not any("torch-arch" in s for s in ran)
    assert (data["labels"][f"{LABEL}torch.arch_list"],
            data["labels"][f"{LABEL}torch.arch_source"]) == ("", "cpu build")
    assert "COPY project/src/ /app/src/" in ran
    from kdkit.docker_adapter import connect

    connect().remove_image("kdkit-e2e:source-change")


# ---------------------------------------------------------------- failures leave nothing tagged


def test_a_base_image_that_cannot_be_pulled_is_exit_3(docker_engine: None, locked_copy: Path,
                                                       wheelhouse: Path) -> None:
    # from the wheelhouse: the lock's torch is on this machine only (refused before a pull)
    before = engine_tags()
    result = invoke("build", locked_copy, "--backend", "cpu", "--base-image",
                    MISSING_BASE, "--wheelhouse", wheelhouse)
    assert result.exit_code == 3
    assert error_line(
        result).startswith(f"Error: image {MISSING_BASE}: not on this Docker engine and it cannot "
                                         "be pulled (")
    assert error_line(result).endswith("`docker load` it or pass another --base-image")
    assert engine_tags() == before


def test_a_failed_build_keeps_its_log_and_tags_nothing(docker_engine: None, locked_copy: Path,
                                                       wheelhouse: Path) -> None:
    config = json.loads((locked_copy / "kdkit.json").read_text(encoding="utf-8"))
    config["python"] = "3.12"  # the base has 3.11: the builder stage stops with kdkit's message
    (locked_copy / "kdkit.json").write_text(json.dumps(config), encoding="utf-8")
    before = engine_tags()
    result = invoke("build", locked_copy, "--backend", "cpu", "--base-image", BASE, "--tag",
                    "kdkit-e2e:broken",
                    # the torch of the lock is on this machine only (see below)
                    "--wheelhouse", wheelhouse)
    assert result.exit_code == 1
    line = error_line(result)
    assert re.match(r"Error: build of kdkit-e2e:broken failed at step \d+/\d+ \(RUN set -eu; .*\): "
                    r"ERROR: kdkit: "
                    r"the base image's Python is 3\.11 \(/usr/bin/python3\) but the lock is for "
                    r"Python 3\.12;", line)
    log = Path(line.rsplit("full log: ", 1)[1])
    assert "Step 1/" in log.read_text(encoding="utf-8")
    assert engine_tags() == before


def test_a_machine_local_torch_is_refused_before_a_layer_and_the_hint_builds(docker_engine: None,
                                                                              locked_copy: Path) -> None:
    """Issue 31 §1: a lock whose torch came from --torch-find-links started a build that failed at its install
    layer with `Could not find a version`. It is refused before the first layer (no step runs, nothing is
    tagged), and the commands of the message, run as printed after the copy it asks for, build the image."""
    before = engine_tags()
    result = invoke("build", locked_copy, "--backend", "cpu", "--base-image", BASE)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    folder = locked_copy / "wheelhouse" / "cpu"
    assert line.startswith(f"Error: {locked_copy / 'requirements/cpu.txt'}: torch came only from a "
                           "folder of the machine that locked it (the lock's machine-local), so "
                           "the build's pip cannot fetch it")
    assert "Step 1/" not in result.output and engine_tags() == before
    wheelhouse_cmd, build_cmd = re.findall(r"`kdkit ([^`]+)`", line)
    folder.mkdir(parents=True)
    # "copy its files from the folder you locked with"
    for wheel in TORCH_WHEELS.glob("torch-*.whl"):
        (folder / wheel.name).symlink_to(wheel)
    assert invoke(*shlex.split(wheelhouse_cmd)).exit_code == 0
    built = invoke(*shlex.split(build_cmd), "--base-image", BASE,
                   "--tag", "kdkit-e2e:hint", "--json")
    assert built.exit_code == 0, built.output
    proc.run(["docker", "rmi", "-f", "kdkit-e2e:hint"], timeout=120)


# ---------------------------------------------------------------- the corporate-proxy case, for real


def _intercepted(index: str) -> bool:
    """Whether a TLS-intercepting proxy stands between here and ``index``: pip's own CA list refuses it."""
    import ssl
    import urllib.error
    import urllib.request

    from kdkit.image.fetchable import build_trust

    try:
        context = ssl.create_default_context(cafile=build_trust(None)[0])
        urllib.request.urlopen(urllib.request.Request(index, method="HEAD"),
                               timeout=60, context=context).close()
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ssl.SSLCertVerificationError)
    return False


def test_build_through_the_intercepting_proxy_with_the_ca_bundle(
        docker_engine: None, project: Path, ca_bundle: tuple[Path, bytes]) -> None:
    """No wheelhouse: pip in the builder stage reaches the index through this machine's TLS-intercepting
    proxy, trusting it only through --ca-bundle; the bundle stays out of the final image."""
    from kdkit.docker_adapter import connect
    from kdkit.lock.pipconfig import pip_default_index

    # small: no torch
    (project / "requirements/base.in").write_text("idna==3.10\n", encoding="utf-8")
    # No PyTorch index is reachable here (and none is needed without torch): the backend's index is
    # pip's own default, so every request goes to the package index through the proxy, nowhere else.
    config = json.loads((project / "kdkit.json").read_text())
    config["backends"]["cpu"]["torch_index"] = pip_default_index()
    (project / "kdkit.json").write_text(json.dumps(config, indent=2))
    assert invoke("lock", project, "--backend", "cpu").exit_code == 0
    before = engine_tags()
    untrusted = invoke("build", project, "--backend", "cpu", "--base-image",
                       BASE, "--tag", "kdkit-e2e:proxy")
    # issue 31 §1: named before the first layer, with --ca-bundle
    if _intercepted(pip_default_index()):
        assert untrusted.exit_code == 3, untrusted.output
        line = error_line(untrusted)
        assert "TLS certificate not trusted" in line and "pass the proxy's CA with --ca-bundle FILE" in line
        assert "Step 1/" not in untrusted.output and engine_tags() == before
    result = invoke("build", project, "--backend", "cpu", "--base-image", BASE, "--ca-bundle",
                    ca_bundle[0],
                    "--tag", "kdkit-e2e:proxy", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["network"] == "host"
    try:
        assert files_holding(connect().save_image_chunks("kdkit-e2e:proxy"),
                             [ca_bundle[1]]) == {ca_bundle[1]: []}
    finally:
        connect().remove_image("kdkit-e2e:proxy")


def test_the_next_line_after_a_tagged_build_runs_as_printed(
        built: dict[str, Any], locked_copy: Path, wheelhouse: Path,
        ca_bundle: tuple[Path, bytes]) -> None:
    """`build --tag` used to say `Next: kdkit run --backend cpu`, which looked for the default tag (exit 3); the
    line now names the project and the image, and running it literally passes the pilot."""
    import shlex

    result = invoke("build", locked_copy, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                    wheelhouse,
                    "--ca-bundle", ca_bundle[0], "--tag", "kdkit-e2e:next-hint")
    assert result.exit_code == 0, result.output
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("Next: ")]
    command = shlex.split(line.removeprefix("Next: ").split("   (or ")[0])
    assert command[:2] == ["kdkit", "run"] and "kdkit-e2e:next-hint" in command
    ran = invoke(*command[1:])
    assert ran.exit_code == 0, ran.output
    assert "PASS: every ID exactly once" in ran.stdout
