"""Issue 13, items 4 and 5: torch in a layer of its own, and lean GPU images.

The lock is split in two (kdkit.image.layers): torch's part, installed first into the venv, and the
rest, installed beside it. A small dependency change reruns only the rest: proved here with the CPU
torch, a real engine and the classic builder's own "Using cache" lines, from the session's image
(`built`) to a rebuild with one more small package.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kdkit.core import proc
from kdkit.core.lockfile import parse_lock_text
from kdkit.image.build import render_dockerfile
from kdkit.image.layers import has_requirements, split_lock_text, torch_keys
from tests.conftest import BASE, TORCH_WHEELS, invoke

H = "    --hash=sha256:" + "0" * 64
LOCK = f"""# kdkit: backend = cuda
--index-url https://pypi.org/simple

filelock==3.20.0 \\
{H}
    # via torch
flask==3.1.0 \\
{H}
    # via -r requirements/base.in
jinja2==3.1.6 \\
{H}
    # via
    #   flask
    #   torch
markupsafe==3.0.2 \\
{H}
    # via
    #   flask
    #   jinja2
nvidia-cublas==13.1.1.3 ; platform_system == "Linux" \\
{H}
    # via cuda-toolkit
networkx==3.5 \\
{H}
    # via flask, torch
cuda-toolkit==13.0.3.0 \\
{H}
    # via torch
torch==2.13.0 \\
{H}
    # via -r requirements/base.in
triton==3.7.1 ; platform_system == "Linux" \\
{H}
    # via torch

# The following packages are considered to be unsafe in a requirements file:
setuptools==80.9.0 \\
{H}
    # via torch
"""


def _blocks(part: str) -> list[str]:
    return re.findall(r"^[a-z][^\n]*(?:\n {4}--hash=[^\n]*)*", part, re.M)


def test_torch_part_is_the_seeds_and_what_they_require() -> None:
    assert torch_keys(LOCK) == {"torch", "triton", "cuda-toolkit", "nvidia-cublas", "filelock",
                                "jinja2",
                                "markupsafe", "networkx", "setuptools"}
    torch_part, rest = split_lock_text(LOCK)
    assert [b.split("==")[0] for b in _blocks(rest)] == ["flask"]
    # each is a lock: the index option kept, every hash line as written
    for part in (torch_part, rest):
        assert "--index-url https://pypi.org/simple\n" in part and "# via" not in part
        assert all(block in LOCK for block in _blocks(part))
        parse_lock_text(part, Path("part.txt"))
    assert len(_blocks(torch_part)) + len(_blocks(rest)) == 10


def test_a_small_package_added_or_bumped_leaves_the_torch_part_as_it_was() -> None:
    torch_part = split_lock_text(LOCK)[0]
    added = (
        LOCK.replace("jinja2==3.1.6",
                     f"idna==3.10 \\\n{H}\n    # via -r requirements/base.in\njinja2==3.1.6"))
    bumped = LOCK.replace("flask==3.1.0", "flask==3.1.2")
    for text in (added, bumped):
        assert split_lock_text(text)[0] == torch_part
        assert split_lock_text(text)[1] != split_lock_text(LOCK)[1]
    alone = "\n".join([*LOCK.splitlines()[:3], "torch==2.13.0 \\", H])
    assert has_requirements(split_lock_text(alone)[0]) and not has_requirements(
        split_lock_text(alone)[1])


# ---------------------------------------------------------------- the images (engine)


def _layer(ref: str, folder: str) -> str:
    """The image's history entry (id, command) of a folder's copy: the classic builder names what it copied by
    its content's hash (``COPY dir:<sha256> in /opt/kdkit/venv``)."""
    done = proc.run(["docker", "history", "--no-trunc", "--format", "{{.ID}} {{.CreatedBy}}", ref])
    assert done.returncode == 0, done.stderr
    rows = [row for row in done.stdout.splitlines() if f" in {folder} " in row + " "]
    assert len(rows) == 1, done.stdout
    return rows[0]


def _venv_layer(ref: str) -> str:
    return _layer(ref, "/opt/kdkit/venv")


def _step(data: dict[str, Any], pattern: str) -> dict[str, Any]:
    found = [s for s in data["steps"] if re.search(pattern, s["instruction"])]
    assert len(found) == 1, (pattern, [s["instruction"][:60] for s in data["steps"]])
    step: dict[str, Any] = found[0]
    return step


@pytest.mark.skipif(
    not any(TORCH_WHEELS.glob("torch-*.whl")), reason=f"no torch wheel in {TORCH_WHEELS}")
def test_one_more_small_package_reuses_the_torch_layers_and_the_image_still_passes(
        built: dict[str, Any], locked_copy: Path, tmp_path: Path,
        ca_bundle: tuple[Path, bytes]) -> None:
    base_in = locked_copy / "requirements/base.in"
    base_in.write_text(base_in.read_text(encoding="utf-8") + "idna==3.10\n", encoding="utf-8")
    locked = invoke("lock", locked_copy, "--backend", "cpu", "--torch-find-links", TORCH_WHEELS)
    assert locked.exit_code == 0, locked.output
    wheels = invoke("wheelhouse", locked_copy, "--out", tmp_path / "wh", "--json")
    assert wheels.exit_code == 0, wheels.output
    result = invoke("build", locked_copy, "--backend", "cpu", "--base-image", BASE, "--wheelhouse",
                    tmp_path / "wh",
                    "--ca-bundle", ca_bundle[0], "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    try:
        assert data["tag"] != built["tag"]  # a new lock, a new image
        for pattern in (r"^COPY build/torch/", r"^RUN .*/tmp/kdkit-build/torch;",
                        r"^COPY --from=builder /opt/kdkit/venv "):
            assert _step(data, pattern)["cached"], pattern  # the classic builder said "Using cache"
        # The rest is another layer (idna in it). Not asserted through "Using cache": an engine that built this
        # very lock before (an earlier session) serves the rest from its cache too, rightly.
        assert _layer(data["tag"], "/opt/kdkit/deps") != _layer(built["tag"], "/opt/kdkit/deps")
        # the very layer, shared by both images
        assert _venv_layer(data["tag"]) == _venv_layer(built["tag"])
        # unless kdkit's own files changed since the session's build
        if _step(data, r"^COPY kdkit/ ")["cached"]:
            assert _step(data, r"^RUN .*torch-arch")["cached"]
        assert data["labels"]["dev.kdkit.torch.arch_source"] == "cpu build"
        run = invoke("run", locked_copy)
        assert run.exit_code == 0, run.output
        # verify-env sees torch's part and the rest (with idna)
        assert "MATCH: 0 error(s)" in run.output
        assert "PASS: every ID exactly once" in run.output
    finally:
        proc.run(["docker", "image", "rm", "-f", data["tag"]])


def test_the_cuda_image_refuses_a_driver_older_than_its_torch(
    docker_engine: None, tmp_path: Path) -> None:
    """Dockerfile.cuda's closing part, built for real: NVIDIA_REQUIRE_CUDA from the lock's CUDA version."""
    from kdkit.docker_adapter import connect
    from kdkit.image.context import write_context

    tail = render_dockerfile("cuda").split("ARG KDKIT_PYTHON=3.11 KDKIT_PROJECT=unknown", 1)[1]
    tail = tail[tail.index("\nENV NVIDIA_VISIBLE_DEVICES"):]
    engine = connect()
    for cuda, expected in (("13.0", "cuda>=13.0"), ("", "")):
        dockerfile = f"FROM {BASE}\nARG KDKIT_TORCH_CUDA=\n{tail}"
        with (tmp_path / f"ctx{cuda}").open("w+b") as context:
            write_context([("Dockerfile", dockerfile.encode())], context)
            events = list(engine.build(context, dockerfile="Dockerfile",
                                       buildargs={"KDKIT_TORCH_CUDA": cuda},
                                       nocache=False, network="none"))
        image = next(e["aux"]["ID"] for e in events if isinstance(e.get("aux"), dict)
                     and "ID" in e["aux"])
        done = proc.run(["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image])
        env = dict(item.split("=", 1) for item in json.loads(done.stdout))
        assert env["NVIDIA_REQUIRE_CUDA"] == expected
        assert (env["NVIDIA_VISIBLE_DEVICES"],
                env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "compute,utility")


def test_the_pilot_is_execd_so_docker_stop_reaches_it() -> None:
    """/bin/sh as PID 1 forwards no signal; exec'd, the pilot is PID 1 (the shim is a Python script), and
    `kdkit run --resume` still finds its tail (kdkit.image.labels.PILOT_TAIL; tests/machine/test_run.py runs it)."""
    from kdkit.image.context import SHIM
    from kdkit.image.labels import PILOT_TAIL

    line = re.search(r"^CMD (\[.*\])$", render_dockerfile("cpu"), re.M)
    assert line is not None
    shell, flag, chain = json.loads(line.group(1))
    assert (shell, flag) == ("/bin/sh", "-c") and chain.endswith(f" && exec {PILOT_TAIL}")
    # the kernel starts Python itself: no shell between
    assert SHIM.startswith("#!/opt/kdkit/venv/bin/python\n")
