"""The steps of `kdkit diagnose` that read the machine, not torch: interpreter, environment, driver.

They use only the standard library (the driver step may run nvidia-smi through
kdkit.core.proc), so they report even where torch cannot be imported. The driver step
runs after the build step, whose CUDA version sets the driver minimum.
"""

from __future__ import annotations

import os
import platform
import stat
import sys
from pathlib import Path

from kdkit.core import gpurules
from kdkit.core.builds import version_tuple
from kdkit.core.errors import KdkitError, Unavailable
from kdkit.core.finding import Finding
from kdkit.core.projectfiles import load_object
from kdkit.probe.diagnose.core import Context, StepFailed, env, ok, skip, warn

ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)
# DataLoader workers pass batches through /dev/shm; Docker's default is 64 MiB.
SHM_MINIMUM = 1 << 30
PROC_NVIDIA = Path("/proc/driver/nvidia/version")
KFD = Path("/dev/kfd")
KFD_FIX = ("on a host: sudo usermod -aG render,video $USER, then log in again (AMD: "
           "rocm.docs.amd.com/projects/install-on-linux/en/latest/install/prerequisites.html, "
           "setting permissions for groups)")


# ---------------------------------------------------------------- interpreter and environment


def interpreter(ctx: Context) -> Finding:
    venv = sys.prefix != sys.base_prefix
    libc, libc_version = platform.libc_ver()
    facts = {
        "executable": sys.executable,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "venv": venv,
        "conda_prefix": env("CONDA_PREFIX"),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "libc": f"{libc} {libc_version}".strip() or None,
    }
    ctx.facts["interpreter"] = facts
    detail = (f"{sys.executable}, Python {facts['python']}, {'venv' if venv else 'no venv'}, "
              f"{facts['platform']}, {facts['libc'] or 'libc unknown'}")
    wanted = _project_python(ctx)
    here = ".".join(platform.python_version_tuple()[:2])
    if wanted and wanted != here:
        return (
            warn(f"{detail}; the project is made for Python {wanted} (kdkit.json), this is {here}"))
    return ok(detail)


def _project_python(ctx: Context) -> str | None:
    if ctx.project is None:
        return None
    try:
        value = load_object(ctx.project / "kdkit.json", "project file").get("python")
    except KdkitError:
        return None
    return value if isinstance(value, str) else None


def hardware_hints() -> list[str]:
    """Which GPU vendors this machine exposes, from device nodes alone (before torch)."""
    hints = []
    dev = Path("/dev")
    nvidia_nodes = dev.is_dir() and any(p.name[6:].isdigit() for p in dev.glob("nvidia[0-9]*"))
    if PROC_NVIDIA.exists() or nvidia_nodes or (dev / "dxg").exists():
        hints.append("nvidia")
    if KFD.exists():
        hints.append("amd")
    return hints


def shm_bytes() -> int | None:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_frsize * stat.f_blocks


def environment(ctx: Context) -> Finding:
    values = {name: env(name) for name in ENV_VARS}
    hints = hardware_hints()
    shm = shm_bytes()
    ctx.facts["environment"] = {"variables": values, "gpu_hints": hints, "shm_bytes": shm}
    if ctx.expect != "auto":
        ctx.expected = ctx.expect
    elif hints:
        ctx.expected = "cuda" if "nvidia" in hints else "rocm"
    notes = _visibility_notes(values)
    caps = values["NVIDIA_DRIVER_CAPABILITIES"]
    if gpurules.capabilities_lack_compute(caps):
        problem = (f"NVIDIA_DRIVER_CAPABILITIES={caps} lacks 'compute': the container gets no CUDA "
                   "driver libraries")
        fix = (
            "set NVIDIA_DRIVER_CAPABILITIES=compute,utility (docker run -e ... or in the image), "
            "or unset it")
        if ctx.expected == "cuda":
            raise StepFailed(problem, fix)
        notes.append(problem)
    if shm is not None and shm < SHM_MINIMUM:
        notes.append(f"/dev/shm is {gpurules.gib(shm)}: DataLoader workers need more; run the "
                     "container with --shm-size=8g or --ipc=host")
    ctx.causes.extend(n for n in notes if "VISIBLE" in n)
    seen = ", ".join(f"{k}={v}" for k,
                     v in values.items() if v is not None) or "no GPU variables set"
    detail = f"{seen}; GPU device nodes: {', '.join(hints) or 'none'}; /dev/shm " + (
        gpurules.gib(shm) if shm is not None else "absent")
    return warn(f"{detail}; " + "; ".join(notes)) if notes else ok(detail)


def _visibility_notes(values: dict[str, str | None]) -> list[str]:
    return [
        f"{name}={values[name]!r} hides every GPU; unset it or list the GPUs to use"
        for name in ("CUDA_VISIBLE_DEVICES",
                     "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
        if gpurules.hides_all_devices(name, values[name])
    ]


# ---------------------------------------------------------------- driver


def driver(ctx: Context) -> Finding:
    if ctx.expected == "rocm":
        return _amd_driver(ctx)
    if ctx.expected != "cuda":
        return skip(f"{ctx.expected} expected; no GPU driver needed")
    version, source = _nvidia_driver_version()
    cuda = ctx.facts["build"]["cuda"]
    ctx.facts["driver"] = {"nvidia": version, "source": source}
    if version is None:
        ctx.causes.append("no NVIDIA driver found (/proc/driver/nvidia/version and nvidia-smi "
                          "absent): on a host install the driver; in a container run it with "
                          "--gpus all (NVIDIA Container Toolkit)")
        return warn("no NVIDIA driver found (no /proc/driver/nvidia/version, no nvidia-smi)")
    minimum = gpurules.driver_minimum(cuda) if cuda else None
    if minimum is None:
        return ok(f"NVIDIA driver {version} (from {source}); no CUDA build to compare with")
    if not gpurules.driver_new_enough(version, minimum):
        raise StepFailed(
            f"NVIDIA driver {version} is older than {minimum}, the minimum for CUDA "
            f"{version_tuple(cuda)[0]}.x builds (this torch is built for CUDA {cuda}); torch will "
            "say \"The NVIDIA driver on your system is too old\"",
            f"ask for a machine with driver >= {minimum}, or install a torch build for an older "
            "CUDA (another torch_index in kdkit.json, then `kdkit lock`)",
        )
    return ok(f"NVIDIA driver {version} (from {source}) >= {minimum} needed by CUDA {cuda}")


def _nvidia_driver_version() -> tuple[str | None, str | None]:
    try:
        found = gpurules.driver_from_proc(PROC_NVIDIA.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        found = None
    if found:
        return found, str(PROC_NVIDIA)
    from kdkit.core.proc import run

    try:
        done = run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], timeout=30)
    except KdkitError:
        return None, None
    first = done.stdout.strip().splitlines()[:1]
    return (first[0].strip(), "nvidia-smi") if done.ok and first else (None, None)


def _amd_driver(ctx: Context) -> Finding:
    version = _read_first_line(Path("/sys/module/amdgpu/version"))
    renders = sorted(p.name
                     for p in Path("/dev/dri").glob("renderD*")) if Path(
                         "/dev/dri").is_dir() else []
    ctx.facts["driver"] = {"amdgpu": version, "kfd": KFD.exists(), "render_nodes": renders}
    if not KFD.exists():
        ctx.causes.append("/dev/kfd is absent: run the container with --device /dev/kfd --device "
                          "/dev/dri (or install the amdgpu driver on the host)")
        return warn("/dev/kfd is absent")
    try:
        fd = os.open(KFD, os.O_RDWR)
        os.close(fd)
    except PermissionError:
        raise kfd_refused(KFD) from None
    except OSError as exc:
        raise StepFailed(f"cannot open /dev/kfd: {exc}",
                         "check the amdgpu driver is loaded (dmesg)") from None
    readable = f"amdgpu {version}" if version else "amdgpu version not readable (in-kernel driver)"
    return (
        ok(f"/dev/kfd opens read-write; {readable}; render nodes: {', '.join(renders) or 'none'}"))


def kfd_refused(path: Path) -> StepFailed:
    """Why this process may not open ``path`` (/dev/kfd) read-write: the group that owns it, by name
    and gid, and the fix; exit 3 (Unavailable), since the machine is fine and only the account lacks
    the group.

    The group is ``render`` on current systems, ``video`` on older ones (Ubuntu moved /dev/kfd from
    video to render in 20.04: ROCm/ROCT-Thunk-Interface README). AMD's fix is to add the user to
    both and log in again:
    rocm.docs.amd.com/projects/install-on-linux/en/latest/install/prerequisites.html, "Setting
    permissions for groups"; a container gets the group with ``docker run --group-add``
    (ROCm/ROCm-docker#90).
    """
    import grp

    try:
        info = path.stat()
    except OSError:
        return StepFailed(f"{path}: cannot open it read-write (Permission denied)", KFD_FIX)
    try:
        group = f"{grp.getgrgid(info.st_gid).gr_name} (gid {info.st_gid})"
    except KeyError:  # a gid this system's group database does not name (a container's, often)
        group = f"gid {info.st_gid}"
    return StepFailed(f"{path}: cannot open it read-write (Permission denied): it belongs to group "
                      f"{group}, mode {stat.S_IMODE(info.st_mode):04o}, and this process (uid "
                      f"{os.getuid()}, groups "
                      f"{', '.join(map(str, sorted(set(os.getgroups()) | {os.getgid()})))}) is not "
                      "in it",
                      f"{KFD_FIX}; in a container: docker run --group-add {info.st_gid} (kdkit run "
                      "adds it)",
                      exit_code=Unavailable.exit_code)


def _read_first_line(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip().splitlines()[0]
    except (OSError, IndexError):
        return None
