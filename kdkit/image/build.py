"""`kdkit build`, its plan: the project's image, made from its lock.

A build happens in two halves. :func:`plan_build` does every host-side check
(fresh and hashed lock, PEM bundle, wheelhouse coverage, tag) and computes
the build arguments and labels, without an engine: bad input costs nothing
and leaves nothing. :func:`kdkit.image.buildrun.build_image` then runs the plan
against the engine (the context, the classic builder, the tag once the image is complete).

The build context (what travels and the tar it travels in) is :mod:`kdkit.image.context`; the lock
split into torch's layer and the rest, :mod:`kdkit.image.layers`; the labels and `kdkit inspect`,
:mod:`kdkit.image.labels`; the build's run against the engine, :mod:`kdkit.image.buildrun`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kdkit.config.project import Backend, Project, load_project
from kdkit.config.shipped import data_root, dockerfile
from kdkit.core import proc
from kdkit.core.credentials import refuse_credentials_in
from kdkit.core.errors import BadInput, KdkitError
from kdkit.facts.platforms import cpu_mismatch
from kdkit.image.context import PROJECT_FOLDERS, SHIM, probe_files, project_files
from kdkit.image.labels import LABEL, OCI, default_tag, image_labels, project_labels
from kdkit.image.layers import LOCK_FORMATS, builder_entries
from kdkit.image.preflight import check_ca_bundle
from kdkit.image.pylockparts import plan_pylock_build, require_image_python
from kdkit.lock.locked import LockInput, read_locked
from kdkit.lock.wheelhouse import wheelhouse_files

INCLUDE = re.compile(r"^# kdkit:include (?P<name>\S+)[ \t]*$", re.MULTILINE)
# A Docker reference: [registry[:port]/]name[/name...][:tag], lowercase repository.
REFERENCE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


# ---------------------------------------------------------------- the plan (host-side, no engine)


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build needs, checked; made by :func:`plan_build`."""

    project: Project
    backend: Backend
    lock_sha256: str
    base_image: str
    tag: str
    dockerfile: str
    buildargs: dict[str, str]
    labels: dict[str, str]
    ca_bundle: Path | None = None
    # its bytes, read once: checked, then sent
    ca_data: bytes | None = field(default=None, repr=False)
    # the lock the image installs, then its twin
    inputs: tuple[LockInput, ...] = field(default=(), repr=False)
    # the project's files, read once
    files: list[tuple[str, bytes]] = field(default_factory=list, repr=False)
    wheels: list[Path] = field(default_factory=list)
    no_cache: bool = False
    # secret-shaped files of config/ and src/, never sent
    left_out: list[str] = field(default_factory=list)
    # e.g. the target card's hosts have another CPU
    warnings: list[str] = field(default_factory=list)
    # or "pylock": the backend's PEP 751 lock (kdkit.image.pylockparts)
    lock_format: str = "requirements"
    pip: str | None = None  # with a pylock: the version of kdkit's own pip, which the builder runs

    @property
    def lock(self) -> Path:
        """The lock the image installs, whose path and sha256 its labels name."""
        return self.backend.pylock if self.lock_format == "pylock" else self.backend.lock

    @property
    def lock_input(self) -> LockInput:
        """The lock the image installs, read once: its sha256 is the label's, its bytes the
        context's."""
        return self.inputs[0]

    @property
    def twin_input(self) -> LockInput:
        """The backend's requirements lock, read once (the lock itself, or the one a pylock was made
        from)."""
        return self.inputs[-1]

    @property
    def network(self) -> str:
        """No network at all from a wheelhouse; else the host's, so a proxy on its loopback is
        reachable."""
        return "none" if self.wheels else "host"


def render_dockerfile(backend: str) -> str:
    """The backend's Dockerfile with its ``# kdkit:include`` line replaced by the shared body."""
    text = dockerfile(backend).read_text(encoding="utf-8")

    def include(match: re.Match[str]) -> str:
        return (data_root() / match.group("name")).read_text(encoding="utf-8")

    return INCLUDE.sub(include, text)



def check_tag(tag: str) -> str:
    if not REFERENCE.fullmatch(tag) or len(tag) > 255:
        raise BadInput(f"--tag {tag!r}: not a valid image reference; use lowercase name[:tag], "
                       "e.g. myproj:cuda-test")
    return tag


# Build arguments of Dockerfile.common -> the label that holds each value (one source of truth).
BUILD_ARGS = {"KDKIT_PYTHON": "python", "KDKIT_BACKEND": "backend", "KDKIT_LOCK": "lock.path",
              "KDKIT_PROJECT": "project", "KDKIT_LOCK_SHA256": "lock.sha256",
              "KDKIT_TORCH_VERSION": "torch.version",
              "KDKIT_TORCH_CUDA": "torch.cuda",
              "KDKIT_TORCH_ROCM": "torch.rocm", "KDKIT_VERSION": "version"}
OCI_BUILD_ARGS = {"KDKIT_REVISION": "revision",
                  "KDKIT_SOURCE": "source", "KDKIT_IMAGE_VERSION": "version"}


def build_arguments(plan_labels: dict[str, str], base_image: str) -> dict[str, str]:
    """Build arguments for Dockerfile.common, from the labels (one source of truth) and the host's
    proxy."""
    args = {"BASE_IMAGE": base_image,
            **{arg: plan_labels[f"{LABEL}{key}"] for arg, key in BUILD_ARGS.items()},
            **{arg: plan_labels[f"{OCI}{key}"] for arg, key in OCI_BUILD_ARGS.items()}}
    # Docker's predefined proxy arguments reach RUN steps but are kept out of the image's history.
    args.update({name: os.environ[name] for name in proc.PROXY_VARIABLES if os.environ.get(name)})
    return args


def plan_build(project_dir: Path | None, backend: str | None = None, *,
               base_image: str | None = None,
               tag: str | None = None, ca_bundle: Path | None = None,
               wheelhouse: Path | None = None,
               no_cache: bool = False, lock_format: str = "requirements") -> BuildPlan:
    """Check every input of a build and compute its arguments; nothing is written, no engine is
    needed. Each input of the context is read once, here: what is checked, hashed and labelled is
    what the image gets."""
    if lock_format not in LOCK_FORMATS:
        raise BadInput(f"--lock-format {lock_format}: choose one of {', '.join(LOCK_FORMATS)}")
    project = load_project(project_dir)
    chosen = project.backend(backend)
    if lock_format == "pylock":
        require_image_python(project.python, chosen.pylock, chosen.lock)
    locked = read_locked(project, chosen, lock_format)
    lock = locked.installed
    pip = plan_pylock_build(project, lock,
                            wheelhouse is not None) if lock_format == "pylock" else None
    labels = image_labels(project, chosen, lock.sha256, lock.path, lock.lock)
    base = base_image or chosen.base_image
    # and a link out or a credential is refused here, before any build
    files, left_out = project_files(project.root)
    # what `kdkit inspect` compares with the project's config/ and src/
    labels |= project_labels(files)
    refuse_credentials_in(lock.path, lock.path.relative_to(project.root).as_posix()
                          if lock.path.is_relative_to(project.root) else str(lock.path), lock.data)
    ca_path, ca_data = check_ca_bundle(ca_bundle) if ca_bundle else (None, None)
    return BuildPlan(
        project=project, backend=chosen, lock_sha256=lock.sha256, base_image=base,
        tag=check_tag(tag or default_tag(project, chosen.name, lock.sha256)),
        dockerfile=render_dockerfile(chosen.name), buildargs=build_arguments(labels, base),
        labels=labels,
        ca_bundle=ca_path, ca_data=ca_data, inputs=locked.inputs, files=files,
        wheels=wheelhouse_files(wheelhouse, lock.lock) if wheelhouse else [], no_cache=no_cache,
        left_out=left_out,
        warnings=[w for w in [_cpu_warning(project)] if w], lock_format=lock_format, pip=pip)


def _cpu_warning(project: Project) -> str | None:
    """The image is built for this engine's CPU (the local machine's); the target card's hosts may
    differ."""
    import platform

    return cpu_mismatch(project, f"linux-{platform.machine()}", "the image built here")


# ---------------------------------------------------------------- the build context


def context_entries(plan: BuildPlan,
                    pip_wheel: Path | None = None) -> Iterator[tuple[str, Path | bytes]]:
    """(name in the context, host file or bytes) for everything the Dockerfile copies;
    ``pip_wheel``: the pip that installs a pylock (:func:`kdkit.image.pylockparts.download_pip`).
    The lock, its parts, the CA bundle and the project's files are the bytes :func:`plan_build` read
    (never their paths read again); kdkit's own files and the wheels (each hash-checked by pip as it
    installs) are sent from their paths."""
    yield "Dockerfile", plan.dockerfile.encode("utf-8")
    yield f"lock/{plan.labels[f'{LABEL}lock.path']}", plan.lock_input.data
    if plan.lock_format == "pylock":
        from kdkit.image.pylockparts import pylock_builder_entries

        if pip_wheel is None:
            raise KdkitError(f"{plan.lock}: a build from a pylock needs the wheel of the pip that "
                             "installs it (kdkit.image.pylockparts.download_pip)")
        yield from pylock_builder_entries(plan.lock_input, plan.twin_input, plan.project.python,
                                          plan.ca_data,
                                          plan.wheels, pip_wheel)
    else:
        yield from builder_entries(plan.lock_input, plan.ca_data, plan.wheels)
    yield "kdkit/bin/kdkit", SHIM.encode("utf-8")
    yield from probe_files()
    yield from plan.files
    for folder in PROJECT_FOLDERS:  # COPY needs the folder even when the project has none
        yield f"project/{folder}/", b""
