"""Which CPU a lock or an image was made for, against the hosts a card comes in.

A lock records the platform it was resolved on (``linux-x86_64``, the lock header's ``platform``);
an image records its OS and architecture (``linux``/``amd64``). A GH200 or GB200 host is aarch64
(Grace): an x86_64 lock or image does not install there. ``kdkit check`` fails such a pair; ``kdkit
lock`` and ``kdkit build`` say so when kdkit.json's target_gpu comes in hosts of another CPU.
"""

from __future__ import annotations

from kdkit.config.project import Project
from kdkit.core.errors import BadInput
from kdkit.facts.catalog import load_catalog

ARCH_NAMES = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
DOCKER_NAMES = {"x86_64": "amd64", "aarch64": "arm64"}


def docker_arch(cpu_arch: str) -> str:
    """Docker's name of a CPU architecture (``aarch64`` -> ``arm64``, ``x86_64`` -> ``amd64``)."""
    return DOCKER_NAMES.get(cpu_arch, cpu_arch)


def linux_arch(platform: str) -> tuple[str | None, bool]:
    """(CPU architecture, made for Linux) of a recorded platform: ``linux-x86_64`` -> ("x86_64",
    True), ``darwin-arm64`` -> (None, False), ``win32-AMD64`` -> (None, False), ``""`` -> (None,
    True)."""
    system, _, machine = platform.strip().partition("-")
    if not machine:
        return None, True  # nothing recorded: unknown, not wrong
    if system.lower() != "linux":
        return None, False
    return ARCH_NAMES.get(machine.lower()), True


def image_environment(python: str, platform: str = "") -> dict[str, str]:
    """The PEP 508 marker variables of a kdkit image, known before it exists: Linux, CPython
    ``python`` (kdkit.json's "python", e.g. "3.11"), on the CPU of ``platform`` (a lock header's
    ``linux-aarch64``; x86_64 when unsaid or not Linux, as every image kdkit builds is Linux). Read
    a lock's pin for the image with it: ``lock.pin_for("torch", image_environment(project.python,
    lock.header.get("platform", "")))``.

    The values are those CPython gives on Linux
    (https://peps.python.org/pep-0508/#environment-markers); the patch release is not known before
    the image is built, so ``python_full_version`` is the ``.0`` release and the kernel's
    ``platform_release``/``platform_version`` are empty.
    """
    machine = linux_arch(platform)[0] or "x86_64"
    return {"implementation_name": "cpython", "implementation_version": f"{python}.0",
            "os_name": "posix",
            "platform_machine": machine, "platform_python_implementation": "CPython",
            "platform_release": "",
            "platform_system": "Linux", "platform_version": "",
            "python_full_version": f"{python}.0",
            "python_version": python, "sys_platform": "linux", "extra": ""}


def cpu_mismatch(project: Project, made_for: str, what: str) -> str | None:
    """Why a lock or image made for ``made_for`` (``linux-x86_64``, ``amd64``) will not install on
    the hosts of the project's target_gpu, with how to target theirs; None when they agree or no
    target is set."""
    target = project.config.get("target_gpu")
    if not target:
        return None
    try:
        offer = load_catalog(project.root).find(str(target))
    except BadInput:
        return None  # `kdkit validate` and `kdkit check` report an unknown target_gpu
    here = linux_arch(made_for if "-" in made_for else f"linux-{made_for}")[0]
    if here is None or here == offer.cpu_arch:
        return None
    docker = docker_arch(offer.cpu_arch)
    return (f"{what} is for {here}, but kdkit.json's target_gpu {offer.name} comes in "
            f"{offer.cpu_arch} hosts, where it will not install: make the lock and the image on "
            f"linux/{docker} (run `kdkit lock --in-container` and `kdkit build` on an "
            f"{offer.cpu_arch} machine, or in a linux/{docker} container through QEMU binfmt)")
