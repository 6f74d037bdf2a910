"""`kdkit run`: host checks, device access per backend, env files, the printed command.

NVIDIA and AMD hardware is what this machine lacks: where a test needs it, a HostFacts stands
in for what `kdkit.runner.host_facts` reads from the real host (nvidia-smi, /dev/kfd, the
engine's runtimes). Everything else is real: the engine, the images, the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.docker_adapter import ContainerSpec, cli_arguments, connect, sdk_arguments
from kdkit.errors import BadInput, Unavailable
from kdkit.images import write_context
from kdkit.runner import (
    IMAGE_UID,
    HostFacts,
    device_access,
    parse_gpus,
    prepare_run,
    print_lines,
    read_env_file,
)
from tests.conftest import invoke, tree_snapshot

BASE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
NVIDIA_HOST = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-aaaa-1111", "1", "GPU-bbbb-2222"],
                        nvidia_driver="570.124.06", nvidia_runtime=True)
AMD_HOST = HostFacts(uid=0, gid=0, kfd=True, render_nodes=["/dev/dri/renderD128", "/dev/dri/renderD129"],
                     device_gids=[44, 993])


def error_line(result: object) -> str:
    lines = [ln for ln in result.output.splitlines() if ln.startswith("Error: ")]  # type: ignore[attr-defined]
    assert len(lines) == 1, result.output  # type: ignore[attr-defined]
    return lines[0]


# ---------------------------------------------------------------- env files


def test_env_file_is_read_like_docker_does(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("# comment\n\n  HF_TOKEN=abc=def\nQUOTED=\"kept\"\nEMPTY=\n", encoding="utf-8")
    assert read_env_file(path) == {"HF_TOKEN": "abc=def", "QUOTED": '"kept"', "EMPTY": ""}


@pytest.mark.parametrize("line", ["export TOKEN=hunter2", "TOKEN", "1TOKEN=hunter2", "TO KEN=hunter2"])
def test_a_malformed_env_line_names_its_number_never_its_value(tmp_path: Path, line: str) -> None:
    path = tmp_path / ".env"
    path.write_text(f"OK=1\n{line}\n", encoding="utf-8")
    with pytest.raises(BadInput) as caught:
        read_env_file(path)
    assert str(caught.value) == (f"--env-file {path}:2: expected NAME=VALUE (NAME of letters, digits and _); "
                                 "fix or comment out that line")
    assert "hunter2" not in str(caught.value)


def test_run_refuses_a_malformed_env_file_before_anything(project: Path, tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("TOKEN hunter2\n", encoding="utf-8")
    before = tree_snapshot(project)
    result = invoke("run", project, "--env-file", env)
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: --env-file {env}:1: expected NAME=VALUE (NAME of letters, digits "
                                  "and _); fix or comment out that line")
    assert "hunter2" not in result.output
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- --gpus and device access


def test_gpus_syntax() -> None:
    assert parse_gpus("all") == "all"
    assert parse_gpus("0, 1") == ["0", "1"]
    assert parse_gpus("GPU-aaaa-1111") == ["GPU-aaaa-1111"]
    for bad in ("0,,1", "first", "-1"):
        with pytest.raises(BadInput, match=r"expected all or a comma list of GPU indexes or UUIDs"):
            parse_gpus(bad)


def test_cuda_without_the_nvidia_runtime_quotes_the_error_users_meet() -> None:
    host = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-1"], nvidia_driver="570.1", nvidia_runtime=False)
    with pytest.raises(Unavailable) as caught:
        device_access("cuda", host, None, {})
    assert 'could not select device driver "" with capabilities: [[gpu]]' in str(caught.value)
    assert "nvidia-ctk runtime configure --runtime=docker" in str(caught.value)


def test_cuda_gpus_must_exist() -> None:
    assert device_access("cuda", NVIDIA_HOST, ["1", "GPU-aaaa-1111"], {})["gpus"] == ["1", "GPU-aaaa-1111"]
    with pytest.raises(BadInput) as caught:
        device_access("cuda", NVIDIA_HOST, ["0", "7"], {})
    assert str(caught.value) == "--gpus 0,7: no GPU 7 on this host (GPUs: 0, 1); see `nvidia-smi -L`"


def test_cuda_driver_older_than_the_image_needs() -> None:
    old = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-1"], nvidia_driver="470.57.02", nvidia_runtime=True)
    with pytest.raises(Unavailable) as caught:
        device_access("cuda", old, None, {"dev.kdkit.torch.cuda": "12.8"})
    assert str(caught.value).startswith("NVIDIA driver 470.57.02 is older than CUDA 12.8 in the image needs "
                                        "(>= 525.60.13); upgrade the driver")
    assert device_access("cuda", NVIDIA_HOST, None, {"dev.kdkit.torch.cuda": "12.8"}) == {"gpus": "all"}


def test_rocm_needs_kfd_and_existing_render_nodes() -> None:
    with pytest.raises(Unavailable, match=r"^/dev/kfd: not present"):
        device_access("rocm", HostFacts(uid=0, gid=0), None, {})
    with pytest.raises(BadInput) as caught:
        device_access("rocm", AMD_HOST, ["2"], {})
    assert str(caught.value) == ("--gpus 2: no GPU 2 on this host (render nodes: /dev/dri/renderD128, "
                                 "/dev/dri/renderD129); see `rocm-smi`")
    chosen = device_access("rocm", AMD_HOST, ["1"], {})
    assert chosen == {"devices": ["/dev/kfd", "/dev/dri/renderD129"], "group_add": ["44", "993"],
                      "security_opt": ["seccomp=unconfined"]}


def test_cpu_takes_no_gpus() -> None:
    with pytest.raises(BadInput, match=r"^--gpus all: the cpu backend uses no GPU"):
        device_access("cpu", HostFacts(uid=0, gid=0), "all", {})


def test_sdk_and_cli_describe_the_same_container(tmp_path: Path) -> None:
    spec = ContainerSpec(image="p:rocm-1", network="none", user="1000:1000", env_file=tmp_path / ".env",
                         env={"TOKEN": "hunter2"}, shm_size="8g", **device_access("rocm", AMD_HOST, None, {}))
    argv = cli_arguments(spec)
    sdk = sdk_arguments(spec)
    assert argv[:7] == ["docker", "run", "--rm", "--pull", "never", "--network", "none"]
    assert argv[-1] == "p:rocm-1"
    for flag, value in (("--device", "/dev/kfd"), ("--device", "/dev/dri"), ("--group-add", "44"),
                        ("--security-opt", "seccomp=unconfined"), ("--shm-size", "8g"),
                        ("--env-file", str(tmp_path / ".env"))):
        assert argv[argv.index(value) - 1] == flag
    assert "hunter2" not in " ".join(argv) and "hunter2" not in repr(spec)
    assert sdk["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert sdk["environment"] == {"TOKEN": "hunter2"}
    cuda = ContainerSpec(image="p:cuda-1", gpus=["0", "1"])
    assert cli_arguments(cuda)[cli_arguments(cuda).index("--gpus") + 1] == '"device=0,1"'
    request = sdk_arguments(cuda)["device_requests"][0]
    assert (request["DeviceIDs"], request["Capabilities"]) == (["0", "1"], [["gpu"]])
    everything = sdk_arguments(ContainerSpec(image="p:cuda-1", gpus="all"))["device_requests"][0]
    assert everything["Count"] == -1


# ---------------------------------------------------------------- against the engine


def _labelled_image(tag: str, labels: dict[str, str]) -> None:
    import tempfile

    text = f"FROM {BASE}\nLABEL " + " ".join(f'{k}="{v}"' for k, v in labels.items()) + "\n"
    with tempfile.TemporaryFile() as context:
        write_context([("Dockerfile", text.encode())], context)
        engine = connect()
        events = list(engine.build(context, dockerfile="Dockerfile", buildargs={}, nocache=False, network="none"))
        image_id = next(e["aux"]["ID"] for e in events if "aux" in e)
        engine.tag(image_id, tag)


@pytest.fixture(scope="session")
def labelled(docker_engine: None) -> Iterator[dict[str, str]]:
    """Tiny images carrying kdkit's labels for each backend (no torch inside: only host checks run)."""
    tags = {}
    for backend, cuda in (("cuda", "12.8"), ("rocm", ""), ("cpu", "")):
        tag = f"kdkit-test/labelled:{backend}"
        _labelled_image(tag, {"dev.kdkit.backend": backend, "dev.kdkit.lock.sha256": "0" * 64,
                              "dev.kdkit.torch.cuda": cuda})
        tags[backend] = tag
    yield tags
    engine = connect()
    for tag in tags.values():
        engine.remove_image(tag)


def test_an_image_without_kdkit_labels_is_refused(docker_engine: None, project: Path) -> None:
    result = invoke("run", project, "--image", BASE)
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: image {BASE}: has no kdkit labels (dev.kdkit.backend, "
                                  "dev.kdkit.lock.sha256); it was not made by `kdkit build`; build the "
                                  "project's image with `kdkit build`")


def test_a_missing_image_is_exit_3(docker_engine: None, project: Path) -> None:
    result = invoke("run", project, "--image", "kdkit-test/never-built:none")
    assert result.exit_code == 3
    assert error_line(result).startswith("Error: image kdkit-test/never-built:none: not on this Docker engine;")


def test_cuda_on_a_host_without_the_nvidia_runtime(labelled: dict[str, str], project: Path) -> None:
    if "nvidia" in connect().runtimes():
        pytest.skip("this engine has the NVIDIA runtime")
    before = tree_snapshot(project)
    result = invoke("run", project, "--image", labelled["cuda"])
    assert result.exit_code == 3
    assert 'could not select device driver "" with capabilities: [[gpu]]' in error_line(result)
    assert tree_snapshot(project) == before


def test_rocm_on_a_host_without_kfd(labelled: dict[str, str], project: Path) -> None:
    if Path("/dev/kfd").exists():
        pytest.skip("this host has /dev/kfd")
    result = invoke("run", project, "--image", labelled["rocm"])
    assert result.exit_code == 3
    assert error_line(result).startswith("Error: /dev/kfd: not present, so no AMD GPU is usable here")


def test_gpus_naming_a_device_that_does_not_exist(labelled: dict[str, str], project: Path) -> None:
    before = tree_snapshot(project)
    with pytest.raises(BadInput, match=r"^--gpus 3: no GPU 3 on this host \(GPUs: 0, 1\)"):
        prepare_run(project, image=labelled["cuda"], gpus="3", host=NVIDIA_HOST)
    result = invoke("run", project, "--image", labelled["cpu"], "--gpus", "0")
    assert result.exit_code == 2
    assert error_line(result).startswith("Error: --gpus 0: the cpu backend uses no GPU")
    assert tree_snapshot(project) == before


def test_backend_must_match_the_image(labelled: dict[str, str], project: Path) -> None:
    result = invoke("run", project, "--backend", "cuda", "--image", labelled["cpu"])
    assert result.exit_code == 2
    assert error_line(result) == (f"Error: --backend cuda: image {labelled['cpu']} was built for cpu; pass "
                                  "--backend cpu or the image of that backend")


def test_the_plan_for_a_cuda_gpu_host(labelled: dict[str, str], project: Path, tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("HF_TOKEN=hunter2\n", encoding="utf-8")
    plan = prepare_run(project, image=labelled["cuda"], gpus="0,1", env_file=env, host=NVIDIA_HOST)
    line = print_lines(plan)[-1]
    assert f"--mount type=bind,source={project / 'data/pilot'},target=/app/data/pilot,readonly" in line
    assert f"--mount type=bind,source={project / 'runs'},target=/app/runs " in line
    assert "--gpus '\"device=0,1\"'" in line and "--network none" in line
    assert "hunter2" not in line and f"--env-file {env}" in line


def test_root_hands_runs_to_the_image_user_and_others_run_as_themselves(
        labelled: dict[str, str], project: Path) -> None:
    as_root = prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=0, gid=0))
    assert as_root.spec.user is None  # the image's own non-root user
    assert print_lines(as_root)[:-1] == [f"chown {IMAGE_UID}:{IMAGE_UID} {project / 'runs'}"]
    as_user = prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=1234, gid=1234))
    assert as_user.spec.user == "1234:1234" and as_user.spec.extra_env == {"HOME": "/tmp"}
    assert print_lines(as_user)[:-1] == []
