"""The resume test's loop under torchrun: how a phase starts it, what is checked before anything
runs, and the line that names what a failed worker said.

torchrun is the console script of ``torch.distributed.run``, and ``python -m torch.distributed.run``
is the same launcher (https://docs.pytorch.org/docs/stable/elastic/run.html); started by the loop's
interpreter it is that environment's torchrun, whatever PATH holds. ``--standalone`` runs the
rendezvous on a free port of this machine (one node), ``--nproc-per-node N`` starts N workers,
``-m`` runs the loop as ``python
-m`` does; ``--log-dir DIR --tee 3`` keeps each worker's stdout and stderr in a file of its own
below DIR and shows them line by line, each line prefixed with the worker (``[default0]:``), so two
tracebacks never mix within a line. The workers join with gloo on a CPU and NCCL on a GPU (the
template's ``join``), one process per CPU or GPU.

Standard library only: torch is asked about in the loop's interpreter, never imported here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.proc import Completed, run
from kdkit.probe.measure.options import require_gpu

TORCHRUN = ("-m", "torch.distributed.run", "--standalone")
OPTION = "--nproc-per-node"
# What the loop's interpreter can launch, as one JSON line: a missing torch or torchrun is a fact,
# not a crash.
PROBE = """\
import json
facts = {"torchrun": False, "gpus": 0}
try:
    import torch
    import torch.distributed as dist
    facts["torch"] = torch.__version__
    facts["gpus"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not dist.is_available():
        raise ImportError(f"torch {torch.__version__} is built without torch.distributed")
    import torch.distributed.run
    facts.update(torchrun=True, gloo=dist.is_gloo_available(), nccl=dist.is_nccl_available())
except Exception as exc:
    facts["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
print(json.dumps(facts))
"""


def launcher(python: str, nproc: int | None, module: str, logs: Path) -> list[str]:
    """How a phase starts the loop: ``python -m MODULE`` alone, or torchrun's ``nproc`` workers each
    running it, their output kept below ``logs``."""
    if nproc is None:
        return [python, "-m", module]
    return [python, *TORCHRUN, OPTION, str(nproc), "--log-dir", str(logs), "--tee",
            "3", "-m", module]


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, which the workers inherit), else all of the
    machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_launch(python: str, nproc: int, device: str) -> None:
    """Refuse a launch that cannot run here before anything is written: a count below 1, a device
    that pins every worker to one GPU, torchrun or the backend missing in ``python``, more workers
    than CPUs (gloo) or GPUs (NCCL)."""
    if nproc < 1:
        raise BadInput(f"{OPTION} {nproc}: needs at least 1 process; e.g. {OPTION} 2")
    if device.startswith("cuda:"):
        raise BadInput(f"--device {device} with {OPTION}: each process takes cuda:LOCAL_RANK; give "
                       "--device cuda (or auto)")
    facts = _facts(python)
    if not facts.get("torchrun"):
        raise Unavailable(f"{python}: torchrun is missing (python -m torch.distributed.run: "
                          f"{facts.get('error', 'not importable')}); it comes with torch: install "
                          "the project's torch in that environment (pip install torch) or give "
                          "--python the interpreter that has it")
    gpus = int(str(facts.get("gpus", 0)))
    if device == "cuda" or (device == "auto" and gpus > 0):
        check_gpus(python, nproc, device, gpus, bool(facts.get("nccl")), facts.get("torch"))
    else:
        _check_cpus(python, nproc, facts)


def _facts(python: str) -> dict[str, object]:
    done = run([python, "-c", PROBE], timeout=300)
    lines = done.stdout.strip().splitlines()
    try:
        facts: dict[str, object] = json.loads(lines[-1]) if done.ok and lines else {}
    except ValueError:
        facts = {}
    return facts or {"error": done.first_error_line()}


def check_gpus(python: str, nproc: int, device: str, gpus: int, nccl: bool, torch: object) -> None:
    """``nproc`` workers on the ``gpus`` that ``python``'s torch sees: NCCL there, and one GPU for
    each."""
    require_gpu(device, gpus)  # none at all: Unavailable, as for one process ("auto" found some)
    if not nccl:
        raise Unavailable(f"{python}: torch {torch} has no NCCL, which the workers need on a GPU; "
                          "install a CUDA build of torch or use --device cpu")
    if nproc > gpus:
        # NCCL refuses two ranks on one GPU ("Duplicate GPU detected", NVIDIA/Megatron-LM#661).
        raise BadInput(f"{OPTION} {nproc} with --device {device}: torch sees {gpus} GPU(s) here "
                       f"and NCCL needs one per process; give at most {gpus}, or --device cpu")


def _check_cpus(python: str, nproc: int, facts: dict[str, object]) -> None:
    if not facts.get("gloo"):
        raise Unavailable(f"{python}: torch {facts.get('torch')} has no gloo, which the workers "
                          "need on a CPU; install a torch build with it")
    cpus = usable_cpus()
    if nproc > cpus:
        raise BadInput(f"{OPTION} {nproc}: {cpus} CPU(s) are usable here and gloo on the CPU runs "
                       f"one process per CPU; give at most {cpus}")


def worker_output(done: Completed) -> Completed:
    """The stderr of the worker that failed, as torchrun showed it: the first with a traceback, else
    the first that said anything; torchrun's own when no worker said a word (one killed by a
    signal). torchrun's own ChildFailedError traceback names no cause."""
    workers: dict[str, list[str]] = {}
    for line in done.stderr.splitlines():
        worker, mark, rest = line.partition("]:")
        if line.startswith("[") and mark and " " not in worker:
            # torch's own ``[rankN]:`` once the group is joined
            while rest.startswith("[") and "]:" in rest[:24]:
                rest = rest.split("]:", 1)[1].lstrip(" ")
            workers.setdefault(worker, []).append(rest)
    said = [lines for lines in workers.values() if any(line.strip() for line in lines)]
    tracebacks = [lines for lines in said
                  if any(line.startswith("Traceback (most recent call") for line in lines)]
    if not said:
        return done
    return Completed(done.args, done.returncode, "", "\n".join((tracebacks or said)[0]))
