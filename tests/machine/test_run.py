"""`kdkit run`: host checks, device access per backend, env files, the printed command.

NVIDIA and AMD hardware is what this machine lacks: where a test needs it, a HostFacts stands
in for what `kdkit.machine.host.host_facts` reads from the real host (nvidia-smi, /dev/kfd, the
engine's runtimes). Everything else is real: the engine, the images, the CLI.
"""

from __future__ import annotations

import csv
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdkit.core.errors import BadInput, Unavailable
from kdkit.docker_adapter import ContainerSpec, ImageFacts, Mount, cli_arguments, connect, sdk_arguments
from kdkit.image.context import write_context
from kdkit.image.labels import resumed_command
from kdkit.machine.host import HostFacts, device_access, parse_gpus
from kdkit.machine.run import (
    HOME,
    IMAGE_UID,
    confinement,
    prepare_run,
    print_lines,
    read_env_file,
)
from tests.conftest import invoke, tree_snapshot

BASE = os.environ.get("KDKIT_TEST_BASE", "kdkit-test/debian-python:3.11")
NVIDIA_HOST = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-aaaa-1111", "1", "GPU-bbbb-2222"],
                        nvidia_driver="570.124.06", nvidia_runtime=True)
AMD_HOST = HostFacts(uid=0, gid=0, kfd=True,
                     render_nodes=["/dev/dri/renderD128", "/dev/dri/renderD129"],
                     device_gids=[44, 993])


def error_line(result: object) -> str:
    lines = [ln for ln in result.output.splitlines()
             if ln.startswith("Error: ")]  # type: ignore[attr-defined]
    assert len(lines) == 1, result.output  # type: ignore[attr-defined]
    return lines[0]


# ---------------------------------------------------------------- env files


def test_env_file_is_read_like_docker_does(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text("# comment\n\n  HF_TOKEN=abc=def\nQUOTED=\"kept\"\nEMPTY=\n", encoding="utf-8")
    assert read_env_file(path) == {"HF_TOKEN": "abc=def", "QUOTED": '"kept"', "EMPTY": ""}


@pytest.mark.parametrize("line",
                         ["export TOKEN=hunter2", "TOKEN", "1TOKEN=hunter2", "TO KEN=hunter2"])
def test_a_malformed_env_line_names_its_number_never_its_value(tmp_path: Path, line: str) -> None:
    path = tmp_path / ".env"
    path.write_text(f"OK=1\n{line}\n", encoding="utf-8")
    with pytest.raises(BadInput) as caught:
        read_env_file(path)
    assert str(
        caught.value) == (f"--env-file {path}:2: expected NAME=VALUE (NAME of letters, digits and "
                                 "_); fix or comment out that line")
    assert "hunter2" not in str(caught.value)


def test_run_refuses_a_malformed_env_file_before_anything(project: Path, tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("TOKEN hunter2\n", encoding="utf-8")
    before = tree_snapshot(project)
    result = invoke("run", project, "--env-file", env)
    assert result.exit_code == 2
    assert error_line(
        result) == (f"Error: --env-file {env}:1: expected NAME=VALUE (NAME of letters, digits "
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
    host = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-1"],
                     nvidia_driver="570.1", nvidia_runtime=False)
    with pytest.raises(Unavailable) as caught:
        device_access("cuda", host, None, {})
    assert 'could not select device driver "" with capabilities: [[gpu]]' in str(caught.value)
    assert "nvidia-ctk runtime configure --runtime=docker" in str(caught.value)


def test_cuda_gpus_must_exist() -> None:
    assert device_access("cuda", NVIDIA_HOST,
                         ["1", "GPU-aaaa-1111"], {})["gpus"] == ["1", "GPU-aaaa-1111"]
    with pytest.raises(BadInput) as caught:
        device_access("cuda", NVIDIA_HOST, ["0", "7"], {})
    assert str(
        caught.value) == "--gpus 0,7: no GPU 7 on this host (GPUs: 0, 1); see `nvidia-smi -L`"


def test_cuda_driver_older_than_the_image_needs() -> None:
    old = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-1"],
                    nvidia_driver="470.57.02", nvidia_runtime=True)
    with pytest.raises(Unavailable) as caught:
        device_access("cuda", old, None, {"dev.kdkit.torch.cuda": "12.8"})
    assert str(
        caught.value).startswith("NVIDIA driver 470.57.02 is older than CUDA 12.8 in the image "
                                        "needs (>= 525.60.13); upgrade the driver")
    assert device_access("cuda", NVIDIA_HOST, None,
                         {"dev.kdkit.torch.cuda": "12.8"}) == {"gpus": "all"}


def test_rocm_needs_kfd_and_existing_render_nodes() -> None:
    with pytest.raises(Unavailable, match=r"^/dev/kfd: not present"):
        device_access("rocm", HostFacts(uid=0, gid=0), None, {})
    with pytest.raises(BadInput) as caught:
        device_access("rocm", AMD_HOST, ["2"], {})
    assert str(
        caught.value) == ("--gpus 2: no GPU 2 on this host (render nodes: /dev/dri/renderD128, "
                                 "/dev/dri/renderD129); see `rocm-smi`")
    chosen = device_access("rocm", AMD_HOST, ["1"], {})
    assert chosen == {"devices": ["/dev/kfd", "/dev/dri/renderD129"], "group_add": ["44", "993"]}
    # All GPUs: the render nodes, never the whole of /dev/dri; no seccomp=unconfined (AMD: optional).
    assert device_access("rocm", AMD_HOST, None, {}) == {
        "devices": ["/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"],
        "group_add": ["44", "993"]}
    with pytest.raises(
        Unavailable, match=r"^/dev/dri/renderD\*: no render node, so no AMD GPU is usable"):
        device_access("rocm", HostFacts(uid=0, gid=0, kfd=True), None, {})


def test_cpu_takes_no_gpus() -> None:
    with pytest.raises(BadInput, match=r"^--gpus all: the cpu backend uses no GPU"):
        device_access("cpu", HostFacts(uid=0, gid=0), "all", {})


def test_sdk_and_cli_describe_the_same_container(tmp_path: Path) -> None:
    spec = ContainerSpec(image="p:rocm-1", network="none", env_file=tmp_path / ".env",
                         env={"TOKEN": "hunter2"},
                         **confinement(HostFacts(uid=0, gid=0), 1000, 1000),
                         **device_access("rocm", AMD_HOST, None, {}))
    argv = cli_arguments(spec)
    sdk = sdk_arguments(spec)
    assert argv[:7] == ["docker", "run", "--rm", "--pull", "never", "--network", "none"]
    assert argv[-1] == "p:rocm-1"
    for flag, value in (("--device", "/dev/kfd"), ("--device", "/dev/dri/renderD129"),
                        ("--group-add", "44"),
                        ("--security-opt", "no-new-privileges"), ("--shm-size", "1024m"),
                        ("--cap-drop", "ALL"), ("--pids-limit", "4096"), ("--user", "1000:1000"),
                        ("--env-file", str(tmp_path / ".env"))):
        assert argv[argv.index(value) - 1] == flag
    assert "--read-only" in argv and "seccomp=unconfined" not in argv and "/dev/dri" not in argv
    assert "hunter2" not in " ".join(argv) and "hunter2" not in repr(spec)
    assert sdk["devices"] == ["/dev/kfd:/dev/kfd:rwm",
                              "/dev/dri/renderD128:/dev/dri/renderD128:rwm",
                              "/dev/dri/renderD129:/dev/dri/renderD129:rwm"]
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
        events = list(
            engine.build(context, dockerfile="Dockerfile", buildargs={},
                         nocache=False, network="none"))
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
                                  "dev.kdkit.lock.sha256); it was not made by `kdkit build`; build "
                                  "the project's image with `kdkit build`")


def test_a_missing_image_is_exit_3(docker_engine: None, project: Path) -> None:
    result = invoke("run", project, "--image", "kdkit-test/never-built:none")
    assert result.exit_code == 3
    assert error_line(result).startswith(
        "Error: image kdkit-test/never-built:none: not on this Docker engine;")


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
    assert error_line(result).startswith(
        "Error: /dev/kfd: not present, so no AMD GPU is usable here")


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
    assert error_line(
        result) == (f"Error: --backend cuda: image {labelled['cpu']} was built for cpu; pass "
                                  "--backend cpu or the image of that backend")


def test_the_plan_for_a_cuda_gpu_host(labelled: dict[str, str],
                                      project: Path, tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("HF_TOKEN=hunter2\n", encoding="utf-8")
    plan = prepare_run(project, image=labelled["cuda"], gpus="0,1", env_file=env, host=NVIDIA_HOST)
    line = print_lines(plan)[-1]
    assert f"--mount 'type=bind,\"source={project / 'data/pilot'}\",target=/app/data/pilot,readonly'" in line
    assert f"--mount 'type=bind,\"source={project / 'runs'}\",target=/app/runs' " in line
    assert "--gpus '\"device=0,1\"'" in line and "--network none" in line
    assert "hunter2" not in line and f"--env-file {env}" in line


def test_root_hands_runs_to_the_image_user_and_others_run_as_themselves(
        labelled: dict[str, str], project: Path) -> None:
    as_root = prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=0, gid=0))
    # the image's own non-root user, said explicitly
    assert as_root.spec.user == f"{IMAGE_UID}:{IMAGE_UID}"
    assert as_root.spec.extra_env["HOME"] == HOME and "KDKIT_LAUNCH" in as_root.spec.extra_env
    assert as_root.spec.tmpfs[HOME] == f"rw,exec,nosuid,nodev,size=1024m,uid={IMAGE_UID},gid={IMAGE_UID},mode=0700"
    # kdkit.machine.mounts: the on-disk cache, handed over like runs/
    cache = project.resolve() / ".kdkit-cache"
    assert print_lines(as_root)[:-1] == [f"chown {IMAGE_UID}:{IMAGE_UID} {project / 'runs'}",
                                         f"mkdir -p {cache}",
                                         f"chown {IMAGE_UID}:{IMAGE_UID} {cache}"]
    as_user = prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=1234, gid=1234))
    assert as_user.spec.user == "1234:1234" and as_user.spec.extra_env["HOME"] == HOME
    assert as_user.spec.tmpfs[HOME].endswith(",uid=1234,gid=1234,mode=0700")
    # theirs: no chown
    assert print_lines(as_user)[:-1] == [f"mkdir -p {project.resolve() / '.kdkit-cache'}"]


def test_a_writable_folder_named_with_mount_keeps_its_owner(project: Path, tmp_path: Path,
                                                           labelled: dict[str, str]) -> None:
    """Root runs kdkit: the project's writable folders are handed to the image's user, a folder the user named
    outside the project never is (its owner is theirs to change): refused with the line that would do it."""
    import json

    config = json.loads((project / "kdkit.json").read_text(encoding="utf-8"))
    (project
     / "kdkit.json").write_text(json.dumps({**config, "mounts": {"out-dir": {"writable": True}}}))
    mine = tmp_path / "my results"
    mine.mkdir()
    before = mine.stat()
    with pytest.raises(BadInput, match="kdkit changes no owner outside the project") as refused:
        prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=0, gid=0),
                    mounts=[f"{mine}:out-dir"])
    assert f"chown 10001:10001 '{mine}'" in str(refused.value)
    assert (mine.stat().st_uid, mine.stat().st_gid) == (before.st_uid, before.st_gid)
    os.chown(mine, 10001, 10001)  # given to it by its owner: accepted, nothing to change
    plan = prepare_run(project, image=labelled["cpu"], host=HostFacts(uid=0, gid=0),
                       mounts=[f"{mine}:out-dir"])
    assert not any(str(mine) in step.shell for step in plan.host_steps)


# ---------------------------------------------------------------- confinement: one description, two translations


def _cli_as_sdk(argv: list[str]) -> dict[str, object]:
    """Read a `docker run` line back into the SDK's keyword arguments: each flag, what it sets."""
    from docker.types import DeviceRequest
    from docker.types import Mount as SdkMount

    assert argv[:5] == ["docker", "run", "--rm", "--pull", "never"]
    out: dict[str, object] = {}
    rest = argv[5:]
    lists = {"--cap-drop": "cap_drop", "--security-opt": "security_opt", "--group-add": "group_add"}
    scalars = {"--network": "network_mode", "--user": "user", "--workdir": "working_dir",
               "--shm-size": "shm_size",
               "--ipc": "ipc_mode", "--name": "name"}
    while rest and rest[0].startswith("--"):
        flag = rest.pop(0)
        if flag in ("--read-only", "--init"):
            out[flag[2:].replace("-", "_")] = True
            continue
        value = rest.pop(0)
        if flag in lists:
            out.setdefault(lists[flag], []).append(value)  # type: ignore[union-attr]
        elif flag in scalars:
            out[scalars[flag]] = value
        elif flag == "--pids-limit":
            out["pids_limit"] = int(value)
        elif flag == "--tmpfs":
            path, _, options = value.partition(":")
            out.setdefault("tmpfs", {})[path] = options  # type: ignore[index]
        elif flag == "--label":
            key, _, text = value.partition("=")
            out.setdefault("labels", {})[key] = text  # type: ignore[index]
        elif flag == "--device":
            out.setdefault("devices", []).append(f"{value}:{value}:rwm")  # type: ignore[union-attr]
        elif flag == "--mount":
            # the docker CLI reads --mount as one CSV record (docker/cli opts/mount.go)
            fields = dict(part.partition("=")[::2] for part in next(csv.reader([value])))
            mount = SdkMount(fields["target"], fields["source"], type=fields["type"],
                             read_only="readonly" in fields)
            out.setdefault("mounts", []).append(mount)  # type: ignore[union-attr]
        elif flag == "--env-file":
            out.setdefault("environment", {}).update(
                read_env_file(Path(value)))  # type: ignore[union-attr]
        elif flag == "--env":
            name, _, text = value.partition("=")
            out.setdefault("environment", {})[name] = text  # type: ignore[index]
        elif flag == "--gpus":
            ids = value.strip('"').removeprefix("device=")
            out["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])
                                      if ids == "all" else
                                      DeviceRequest(device_ids=ids.split(","),
                                                    capabilities=[["gpu"]])]
        else:
            raise AssertionError(f"{flag}: a flag this reading does not know; teach it")
    out["image"], out["command"] = rest[0], rest[1:] or None
    return {key: value for key, value in out.items() if value is not None}


@pytest.mark.parametrize("backend", ["rocm", "cuda", "cpu"])
def test_every_field_of_the_spec_is_translated_the_same_both_ways(
    tmp_path: Path, backend: str) -> None:
    import dataclasses

    env_file = tmp_path / ".env"
    env_file.write_text("HF_TOKEN=hunter2\n", encoding="utf-8")
    host = {"rocm": AMD_HOST, "cuda": NVIDIA_HOST, "cpu": HostFacts(uid=0, gid=0)}[backend]
    gpus = {"rocm": ["1"], "cuda": ["0", "1"], "cpu": None}[backend]
    spec = ContainerSpec(
        image=f"p:{backend}-1", command=["kdkit", "diagnose"], network="bridge",
        mounts=[Mount(tmp_path / "data", "/app/data", True),
                Mount(tmp_path / "runs", "/app/runs", False)],
        workdir="/app", env_file=env_file, env=read_env_file(env_file), extra_env={"HOME": HOME},
        security_opt=["label=disable"], ipc_mode="private", init=True, name="kdkit-r1",
        labels={"dev.kdkit.run-id": "r1",
                "dev.kdkit.project": str(tmp_path / "a b"), "dev.kdkit.role": "run"},
        **confinement(HostFacts(uid=0, gid=0, cpus=96, memory_bytes=512 << 30), 4321, 4322),
        **device_access(backend, host, gpus, {}))
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING
                else f.default_factory()  # type: ignore[misc]
                for f in dataclasses.fields(ContainerSpec) if f.name != "image"}
    unset = [name for name, default in defaults.items() if getattr(spec, name) == default]
    assert unset == {"rocm": ["gpus"], "cuda": ["devices", "group_add"],
                     "cpu": ["gpus", "devices", "group_add"]
                     # every other field is set: a new field must be added here and to both translations
                     }[backend]
    assert _cli_as_sdk(cli_arguments(spec)) == sdk_arguments(spec)
    assert sdk_arguments(spec)["security_opt"] == ["no-new-privileges", "label=disable"]
    assert sdk_arguments(spec)["tmpfs"] == {"/tmp": "rw,exec,nosuid,nodev,size=65536m,mode=1777",
                                            HOME: "rw,exec,nosuid,nodev,size=65536m,uid=4321,gid=4322,mode=0700"}
    assert "hunter2" not in " ".join(cli_arguments(spec))


@pytest.mark.parametrize(("cpus", "memory", "pids", "size"), [
    (1, 0, 4096, "1024m"),  # nothing known: the floors
    (16, 64 << 30, 4096, "16384m"),  # an RTX 4090 box: 16 cores, 64 GiB
    (96, 6 << 30, 6144, "1536m"),
    (384, 2 << 40, 24576, "65536m"),  # an 8-GPU node: 384 threads, 2 TiB; memory capped at 64 GiB
    (2, 3 << 30, 4096, "1024m"),  # a quarter of 3 GiB is under the floor
])
def test_pids_limit_and_scratch_sizes_follow_the_host(cpus: int, memory: int,
                                                      pids: int, size: str) -> None:
    fields = confinement(
        HostFacts(uid=0, gid=0, cpus=cpus, memory_bytes=memory), IMAGE_UID, IMAGE_UID)
    assert (fields["pids_limit"], fields["shm_size"]) == (pids, size)
    assert all(f"size={size}," in options for options in fields["tmpfs"].values())
    assert fields["user"] == "10001:10001" and fields["cap_drop"] == [
        "ALL"] and fields["read_only"] is True


# ---------------------------------------------------------------- confinement, for real

# Run inside the container: who it is, what it may do, where it can write and load compiled code from.
PROBE = r'''
import _ctypes, ctypes, json, os, shutil
from torch._inductor.runtime.cache_dir_utils import cache_dir

def status(key):
    return next(line.split()[1] for line in open("/proc/self/status") if line.startswith(key + ":"))

def write(path):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("x")
        return "ok"
    except OSError as exc:
        return exc.strerror

def load(folder):  # what Inductor and Triton do with what they compile: dlopen it from where it was written
    try:
        os.makedirs(folder, exist_ok=True)
        shutil.copyfile(_ctypes.__file__, folder + "/probe.so")
        ctypes.CDLL(folder + "/probe.so")
        return "ok"
    except OSError as exc:
        return str(exc).rsplit(": ", 1)[-1]

def options(point):
    line = next(line.split() for line in open("/proc/self/mountinfo") if line.split()[4] == point)
    kept = {o for o in line[-1].split(",") if o.split("=")[0] in ("size", "mode", "uid", "gid")}
    return sorted(set(line[5].split(",")) | kept)

home, inductor = os.environ["HOME"], cache_dir()
pids = next(open(p).read().strip() for p in ("/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max")
            if os.path.exists(p))
shm = os.statvfs("/dev/shm")
print("PROBE " + json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "home": home, "inductor": inductor,
    "caps": sorted({status(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}),
    "no_new_privs": status("NoNewPrivs"), "pids_max": pids, "shm_bytes": shm.f_frsize * shm.f_blocks,
    "root": "ro" if "ro" in options("/") else "rw", "tmp": options("/tmp"), "home_mount": options(home),
    "writes": {p: write(p) for p in ("/app/x", "/etc/x", "/opt/kdkit/x", "/usr/x", "/home/x", "/app/data/pilot/x",
                                      "/tmp/x", home + "/.cache/torch/x", home + "/.triton/cache/x", inductor + "/x",
                                      "/dev/shm/x")},
    "loads": {f: load(f) for f in ("/tmp/lib", home + "/.triton/cache/lib", home + "/.cache/lib", inductor)},
}, sort_keys=True))
'''


def _probe(output: str) -> dict[str, object]:
    import json

    lines = [line for line in output.splitlines() if line.startswith("PROBE ")]
    assert len(lines) == 1, output
    data: dict[str, object] = json.loads(lines[0][len("PROBE "):])
    return data


def _expected(uid: int, gid: int, host: HostFacts) -> dict[str, object]:
    size = confinement(host, uid, gid)["shm_size"]
    kib = f"size={int(size[:-1]) * 1024}k"
    inductor = "/tmp/torchinductor_kdkit" if uid == IMAGE_UID else f"/tmp/torchinductor_uid_{uid}"
    return {
        "uid": uid, "gid": gid, "home": HOME, "inductor": inductor,
        # no capability in any set: effective, permitted, bounding, ambient
        "caps": ["0000000000000000"],
        "no_new_privs": "1", "pids_max": str(confinement(host, uid, gid)["pids_limit"]),
        "shm_bytes": int(size[:-1]) << 20, "root": "ro",
        "tmp": sorted(["nodev", "nosuid", "relatime", "rw", kib]),  # exec: no noexec
        "home_mount": sorted(
            ["nodev", "nosuid", "relatime", "rw", kib, "mode=700", f"uid={uid}", f"gid={gid}"]),
        "writes": {**{p: "Read-only file system"
                      for p in ("/app/x", "/etc/x", "/opt/kdkit/x", "/usr/x", "/home/x",
                                 "/app/data/pilot/x")},
                   **{p: "ok"
                      for p in ("/tmp/x", f"{HOME}/.cache/torch/x", f"{HOME}/.triton/cache/x",
                                 f"{inductor}/x", "/dev/shm/x")}},
        "loads": {f: "ok"
                  for f in ("/tmp/lib",
                            f"{HOME}/.triton/cache/lib", f"{HOME}/.cache/lib", inductor)},
    }


def _engine_host() -> HostFacts:
    from kdkit.machine.host import host_facts

    return host_facts(connect(), "cpu")


def test_the_container_is_confined_and_print_gives_the_same(
    built: dict[str, object], locked: Path) -> None:
    result = invoke("run", locked, "--", "python", "-c", PROBE)
    assert result.exit_code == 0, result.output
    seen = _probe(result.stdout)
    assert seen == _expected(IMAGE_UID, IMAGE_UID, _engine_host())
    # The printed line, run by the real docker CLI, makes the same container.
    from kdkit.core import proc

    printed = invoke("run", locked, "--print", "--", "python", "-c", PROBE)
    assert printed.exit_code == 0, printed.output
    # the lines as a script: the probe spans lines
    done = proc.run(["sh", "-ec", printed.stdout], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _probe(done.stdout) == seen


def test_a_container_cannot_outgrow_its_pids_limit(built: dict[str, object], locked: Path) -> None:
    limit = confinement(_engine_host(), IMAGE_UID, IMAGE_UID)["pids_limit"]
    # Threads count against the limit: start them until the kernel refuses one.
    script = ("import threading, time\nn = 0\ntry:\n    while True:\n"
              "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += "
              "1\nexcept RuntimeError:\n    print('THREADS', n)\n")
    result = invoke("run", locked, "--", "python", "-c", script)
    assert result.exit_code == 0, result.output
    started = int(result.stdout.split("THREADS ")[1].split()[0])
    assert limit - 16 <= started < limit  # the limit, less the few tasks already running


@pytest.fixture
def owned_copy(locked: Path) -> Iterator[tuple[Path, int]]:
    """A copy of the locked project owned by a non-root uid that has no name in the image, in a folder it can reach."""
    import tempfile

    uid = 4321
    base = Path(tempfile.mkdtemp(prefix="kdkit-owned-"))
    base.chmod(0o755)
    root = Path(shutil.copytree(locked, base / "kdkit-e2e", ignore=shutil.ignore_patterns("runs")))
    (base / "home").mkdir()
    for path in [base / "home", root, *root.rglob("*")]:
        os.chown(path, uid, uid, follow_symlinks=False)
    yield root, uid
    shutil.rmtree(base)


def test_a_non_root_person_runs_it_as_themself_and_the_pilot_passes(
        built: dict[str, object], owned_copy: tuple[Path, int]) -> None:
    """The real CLI as another user (setpriv), with only the docker group: container as that uid:gid."""
    import grp
    import json
    import subprocess

    from tests.conftest import REPO

    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    root, uid = owned_copy
    docker_gid = grp.getgrnam("docker").gr_gid
    env = {**os.environ, "HOME": str(root.parent / "home")}
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={docker_gid}",
               str(REPO / ".venv/bin/kdkit")]
    probe = subprocess.run([*as_user, "run", str(root), "--", "python", "-c", PROBE],
                           capture_output=True,
                           text=True, env=env, timeout=300)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert _probe(probe.stdout) == _expected(uid, uid, _engine_host())
    pilot = subprocess.run([*as_user, "run", str(root)], capture_output=True, text=True,
                           env=env, timeout=600)
    assert pilot.returncode == 0, pilot.stdout + pilot.stderr
    assert "Host: " not in pilot.stderr  # nothing to chown: runs/ is theirs
    (folder,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    assert (summary["verdict"], summary["accepted"], summary["rejected"]) == ("pass", 11, 1)
    assert {p.stat().st_uid for p in [folder, *folder.iterdir()]} == {uid}


# ---------------------------------------------------------------- kdkit run --resume


def _facts(command: tuple[str, ...]) -> ImageFacts:
    return ImageFacts("proj:cpu-0123", "sha256:" + "0" * 64, {}, "kdkit", 1, [], "",
                      "amd64", "linux", command)


def test_resume_keeps_the_images_own_chain_and_finishes_the_named_run() -> None:
    own = ("/bin/sh", "-c", 'kdkit diagnose --expect "$KDKIT_BACKEND" && kdkit pilot /app')
    assert resumed_command(_facts(own), "20260101T120000Z-1a2b3c4d") == \
        ["/bin/sh", "-c", 'kdkit diagnose --expect "$KDKIT_BACKEND" && kdkit pilot /app --resume '
                          "20260101T120000Z-1a2b3c4d"]
    with pytest.raises(
        BadInput, match=r"its command is not kdkit's \(`python serve.py`\); resume by hand"):
        resumed_command(_facts(("python", "serve.py")), "R")


def test_run_resume_prints_the_images_chain_with_the_pilot_resuming(built: dict[str, object],
                                                                   locked_copy: Path) -> None:
    printed = invoke("run", locked_copy, "--resume", "20260101T120000Z-1a2b3c4d", "--print")
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.rstrip().endswith("kdkit pilot /app --resume 20260101T120000Z-1a2b3c4d'")


@pytest.mark.parametrize(("args", "message"), [
    (("--resume", "../elsewhere"), "--resume '../elsewhere'"),
    (("--resume", "R", "--", "id"), "--resume ID and a command after --: give one or the other"),
    (("--resume", "R", "--workers", "2"), "--resume with --workers"),
])
def test_run_resume_refuses_before_anything_starts(built: dict[str, object], locked_copy: Path,
                                                   args: tuple[str, ...],
                                                   message: str) -> None:
    before = tree_snapshot(locked_copy)
    result = invoke("run", locked_copy, *args)
    assert result.exit_code == 2
    assert message in error_line(result)
    assert tree_snapshot(locked_copy) == before


def test_run_resume_reaches_the_pilot_in_the_container_after_diagnose_and_verify_env(built: dict[str, object],
                                                                                    locked_copy: Path) -> None:
    result = invoke("run", locked_copy, "--resume", "20260101T120000Z-00000000")
    # the pilot's own refusal: there is no such run to finish
    assert result.exit_code == 2, result.output
    assert "20260101T120000Z-00000000: no such run (params.json missing)" in result.output
    assert "PASS: torch computes on cpu" in result.output  # diagnose ran first, as in every run
