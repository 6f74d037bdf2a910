"""The values of `kdkit check`: a point of its report (a finding) and the subject judged (a lock's
torch pin or an image's torch). Kept apart from kdkit.order.check so that the point makers beside
it (kdkit.order.extensions) import them without importing check back."""

from __future__ import annotations

from dataclasses import dataclass

from kdkit.core.finding import Finding
from kdkit.core.lockfile import Lock


def check_point(name: str, verdict: str, why: str, fix: str | None = None,
                source: str | None = None) -> Finding:
    """One point of ``kdkit check``, a finding of its ``check`` section: ok, fail, unknown (cannot
    be shown to hold) or note (to confirm). ``source``: the kernels point's evidence, "image",
    "wheel" (the locked wheel read) or "facts"."""
    return Finding("check", name, None, None, "", None, verdict, why, fix, source=source)


@dataclass(frozen=True)
class Subject:
    """What is judged against the card: a lock's torch pin or an image's installed torch."""

    what: str  # "requirements/cuda.txt" or "image myproj:cuda-0123"
    version: str  # "2.13.0+cu130"
    label: str  # "cu130"
    cpu_arch: str | None  # "x86_64", "aarch64", or None when unknown
    arch_list: tuple[str, ...] | None = None  # from the image's own torch; None: use the pairings
    arch_source: str = ""
    platform: str = ""  # as recorded: "linux-x86_64" (a lock's header), "linux-amd64" (an image)
    # the lock whose torch wheel is read on its index (None: offline, or an image)
    wheel_lock: Lock | None = None
    python: str = ""  # the image's Python, which chooses that wheel
    # a plain pin (PyPI's torch): its build is the pairings' ``pypi`` fact, not the index's
    pypi: bool = False
    offline: bool = False  # --offline or KDKIT_OFFLINE: the wheel is not read, the pairings answer
