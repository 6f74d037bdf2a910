"""docs/launchers.md: its examples parse, start the container `kdkit run` starts, pass the container exactly
the variables kdkit's launcher table reads, and end with a gathering kdkit accepts; the torchrun example
runs for real.

Shell with `bash -n` and shlex, YAML with PyYAML; the `docker run` words are compared with those of
kdkit.image.container (what `kdkit run --print` and RUN.md print), so a flag changed there fails here.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdkit.image.container import APP, HOME, IMAGE_UID, portable_line, portable_spec, shell_prelude
from kdkit.probe.pilot.gather import build_parser as gather_parser
from kdkit.probe.pilot.launchers import LAUNCHERS, LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR, RUN_ID_VAR, WORKERS_VAR
from kdkit.probe.pilot.options import build_parser as pilot_parser
from tests.conftest import REPO
from tests.machine.test_workers import use_oracle
from tests.probe.pilot.test_launcher_runs import env, exactly_once

DOC = REPO / "docs" / "launchers.md"
IMAGE = "$KDKIT_IMAGE"
ROW = {launcher.name: set(launcher.variables) for launcher in LAUNCHERS}
BLOCK = re.compile(r"^```(sh|yaml)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def examples() -> dict[str, str]:
    """Each example of the page by the name on its `# file:` line."""
    found = {}
    for _kind, body in BLOCK.findall(DOC.read_text(encoding="utf-8")):
        name = re.search(r"^# file: (\S+)$", body, re.MULTILINE)
        assert name, f"an example without its `# file:` line: {body[:60]!r}"
        found[name.group(1)] = body
    return found


EXAMPLES = examples()


def script_of(name: str) -> str:
    """The shell an example runs: a shell file, or the script inside a YAML task."""
    body = EXAMPLES[name]
    if name.endswith((".yaml", ".yml")):
        task = yaml.safe_load(body)
        return "\n".join([task.get("setup", ""), task.get("run", ""), *task.get("commands", [])])
    return body


def shell_lines(script: str) -> list[str]:
    return [line.strip() for line in script.replace("\\\n", " ").splitlines()]


def docker_runs(script: str) -> list[list[str]]:
    return [shlex.split(line) for line in shell_lines(script) if line.startswith("docker run ")]


def kdkit_words() -> list[str]:
    """`kdkit run`'s container for the cuda backend, the host's facts as the prelude's variables."""
    words = shlex.split(
        portable_line(portable_spec("IMAGE", "$PWD", "data/pilot", "runs", "cuda"), "cuda"))
    return [IMAGE if word == "IMAGE" else word for word in words]


def split_run(words: list[str]) -> tuple[list[str], set[str], list[str]]:
    """(the words before the image without the ``--env NAME`` pairs, those NAMEs, the command after the image)."""
    at = words.index(IMAGE)
    before, passed, i = [], set(), 0
    while i < at:
        if words[i] == "--env" and "=" not in words[i + 1]:
            passed.add(words[i + 1])
            i += 2
            continue
        before.append(words[i])
        i += 1
    return before, passed, words[at + 1:]


def gather_args(name: str) -> list[Any]:
    """Each `kdkit gather` of an example, parsed by gather's own parser (which checks a run ID), its
    variables expanded as the shell would on a job: ``$NAME`` to ``NAME-4242``, which says where it
    came from."""
    script = script_of(name)
    parsed = []
    for line in shell_lines(script):
        expanded = re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", r"\1-4242", line)
        words = shlex.split(expanded) if "kdkit gather" in line else []
        if words:
            parsed.append(gather_parser().parse_args(words[words.index("gather") + 1:]))
    return parsed


# ---------------------------------------------------------------- the tables


def test_the_page_lists_exactly_the_launchers_table_of_the_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in ROW:
            rows[cells[0]] = (set(re.findall(r"`([A-Z_]+)`", cells[2])), cells[3])
    assert rows == {launcher.name: (set(launcher.variables), launcher.source)
                    for launcher in LAUNCHERS}
    own = [line for line in text.splitlines() if line.startswith("| `KDKIT_")]
    assert set(re.findall(r"`(KDKIT_[A-Z_]+)`", "\n".join(line.split("|")[1] for line in own))) == {
        RUN_ID_VAR, WORKERS_VAR, LOCAL_WORKER_VAR, LOCAL_WORKERS_VAR}


def test_every_example_is_there_and_every_shell_parses() -> None:
    assert set(EXAMPLES) == {"torchrun.sh", "torchrun-docker.sh", "kdkit-node.sh", "pilot.sbatch",
                             "kdkit-pilot-job.yaml", "kdkit-gather-job.yaml", "kubernetes.sh",
                             "kdkit-pilot.sky.yaml",
                             "skypilot.sh", "kdkit-pilot.dstack.yml", "dstack.sh"}
    for name in EXAMPLES:
        checked = subprocess.run(["bash", "-n"], input=script_of(name),
                                 text=True, capture_output=True)
        assert checked.returncode == 0, (name, checked.stderr)


# ---------------------------------------------------------------- the container on every node


@pytest.mark.parametrize(("name", "launcher", "command"), [
    ("kdkit-node.sh", "slurm", ["$@"]),
    ("kdkit-pilot.sky.yaml", "skypilot", []),
    ("kdkit-pilot.dstack.yml", "dstack", []),
    ("torchrun-docker.sh", None, None),
])
def test_each_node_starts_kdkit_runs_container_with_exactly_its_launchers_variables(
        name: str, launcher: str | None, command: list[str] | None) -> None:
    script = script_of(name)
    (words,) = docker_runs(script)
    before, passed, after = split_run(words)
    expected = kdkit_words()
    assert before == expected[:expected.index(IMAGE)]
    # torchrun sets its own inside the container
    assert passed == (ROW[launcher] if launcher else set())
    if command is not None:
        assert after == command
    prelude = [line.strip() for line in shell_prelude("runs", "cuda")]
    lines = shell_lines(script)
    assert lines[lines.index(prelude[0]):lines.index(prelude[0]) + len(prelude)] == prelude


def test_torchrun_in_the_image_runs_the_images_own_steps_then_the_pilot_under_torchrun() -> None:
    (words,) = docker_runs(script_of("torchrun-docker.sh"))
    shell, flag, chain = split_run(words)[2]
    cmd = re.search(r'^CMD \["/bin/sh", "-c", "(.*)"\]$',
                    (REPO / "Dockerfile.common").read_text(), re.MULTILINE)
    assert cmd is not None
    image_chain = cmd.group(1).replace('\\"', '"')
    steps, pilot = chain.split(" && exec ")
    assert (shell, flag) == ("/bin/sh", "-c") and image_chain == f"{steps} && exec kdkit pilot /app"
    launch = shlex.split(pilot)
    at = launch.index("--no-python")
    assert launch[:2] == ["torchrun", "--standalone"] and launch[at + 1:at + 3] == ["kdkit",
                                                                                    "pilot"]
    args = pilot_parser().parse_args(launch[at + 3:])
    assert (args.project_dir, args.run_id) == (Path(APP), "pilot-1")
    assert [(g.roots, g.run_id)
            for g in gather_args("torchrun-docker.sh")] == [([Path("runs")], "pilot-1")]


def test_slurm_runs_one_task_per_node_and_gathers_its_job() -> None:
    sbatch = EXAMPLES["pilot.sbatch"]
    options = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?$", sbatch, re.MULTILINE))
    assert options["ntasks-per-node"] == "1" and int(
        options["nodes"]) >= 2 and "exclusive" in options
    assert "srun bash kdkit-node.sh" in sbatch
    (gathered,) = gather_args("pilot.sbatch")
    assert (gathered.roots,
            gathered.run_id, gathered.project) == ([Path("/app/runs")], "SLURM_JOB_ID-4242",
                                                   Path(APP))


def _confined(container: dict[str, Any], pod: dict[str, Any]) -> None:
    """A pod confined as `kdkit run` confines its container (kdkit.image.container.confinement)."""
    assert pod["securityContext"]["runAsUser"] == IMAGE_UID and pod["securityContext"]["runAsNonRoot"] is True
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert container["workingDir"] == APP
    assert {"name": "HOME", "value": HOME} in container["env"]
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts[f"{APP}/data/pilot"] is True and mounts[f"{APP}/runs"] is False
    assert "/tmp" in mounts and HOME in mounts


def test_the_indexed_job_says_its_count_again_and_is_confined_like_kdkit_run() -> None:
    job = yaml.safe_load(EXAMPLES["kdkit-pilot-job.yaml"])
    spec = job["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    values = {e["name"]: e.get("value") for e in container["env"]}
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == int(values[WORKERS_VAR])
    # JOB_COMPLETION_INDEX comes from the Job controller; the manifest sets the rest kdkit reads.
    assert {"JOB_COMPLETION_INDEX"} | set(values) - {"HOME"} == ROW["kubernetes"] | {RUN_ID_VAR}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and "command" not in container
    _confined(container, pod)
    gather = yaml.safe_load(EXAMPLES["kdkit-gather-job.yaml"])
    gather_pod = gather["spec"]["template"]["spec"]
    (gatherer,) = gather_pod["containers"]
    _confined(gatherer, gather_pod)
    assert gatherer["image"] == container["image"]
    assert gather_pod["volumes"][:2] == pod["volumes"][:2]
    command = gatherer["command"]
    parsed = gather_parser().parse_args(command[command.index("gather") + 1:])
    assert (parsed.roots,
            parsed.run_id, parsed.project) == ([Path("/app/runs")], values[RUN_ID_VAR], Path(APP))
    assert "kubectl apply -f kdkit-pilot-job.yaml" in EXAMPLES["kubernetes.sh"]


def test_skypilot_and_dstack_run_every_node_and_gather_the_copies() -> None:
    sky = yaml.safe_load(EXAMPLES["kdkit-pilot.sky.yaml"])
    assert sky["num_nodes"] >= 2 and sky["workdir"] == "." and "KDKIT_IMAGE" in sky["envs"]
    assert [(g.roots, g.run_id) for g in gather_args("skypilot.sh")] == [([Path("copies")], None)]
    task = yaml.safe_load(EXAMPLES["kdkit-pilot.dstack.yml"])
    assert task["type"] == "task" and task["nodes"] >= 2 and task["docker"] is True
    assert task["working_dir"] == task["volumes"][0].split(":")[1]
    assert [(g.roots, g.run_id)
            for g in gather_args("dstack.sh")] == [([Path("copies")], task["name"])]


# ---------------------------------------------------------------- the torchrun example, for real


def test_the_torchrun_example_runs_as_written(project: Path) -> None:
    if not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip("torchrun is not installed beside this interpreter")
    use_oracle(project)
    lines = [line for line in shell_lines(EXAMPLES["torchrun.sh"]) if line
             and not line.startswith("#")]
    assert len(lines) == 2 and "--nproc-per-node 4" in lines[0]
    # this machine: 2 CPU workers
    lines[0] = lines[0].replace("--nproc-per-node 4", "--nproc-per-node 2")
    for line in lines:
        done = subprocess.run(["bash", "-c", line], cwd=project, env=env(), capture_output=True,
                              text=True,
                              timeout=300)
        assert done.returncode == 0, (line, done.stderr)
    assert "PASS: all 12 IDs exactly once across the workers" in done.stdout
    exactly_once([project / "runs" / "pilot-1-w0of2", project / "runs" / "pilot-1-w1of2"])
    assert shutil.which("kdkit", path=env()["PATH"])
