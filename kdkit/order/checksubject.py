"""What `kdkit check` judges: the subject, read from the lock's torch pin or from an image's labels.

:func:`lock_subject` takes the parsed lock's torch pin for the image (Linux, kdkit.json's Python,
the lock's CPU) and its build label (the pin's local label, the header's ``torch-build`` for PyPI's
plain torch, else the lock's index); a lock that cannot be judged is the failing point that stops
the check. :func:`image_subject` takes an image's installed torch from the labels `kdkit build`
wrote, with the compiled architecture list its torch reported. :mod:`kdkit.order.check` judges them.
"""

from __future__ import annotations

from kdkit.core.builds import header_build, index_label, is_pypi, parse_label, split_version
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding
from kdkit.core.lockfile import Lock
from kdkit.facts.pairings import Pairings, load_pairings
from kdkit.facts.platforms import image_environment, linux_arch
from kdkit.order.checkmodel import Subject, check_point

ARCH_LABEL = "dev.kdkit.torch.arch_list"
ARCH_SOURCE_LABEL = "dev.kdkit.torch.arch_source"


def lock_subject(lock: Lock | None, relative: str, backend: str, python: str,
                 pairings: Pairings | None = None) -> Subject | Finding:
    """The parsed lock's torch pin for the image (Linux, CPython ``python``, the lock's CPU: a lock
    for several environments pins one torch per marker) as a subject, or the failing point that
    stops the check (None: no lock yet)."""
    if lock is None:
        return check_point("lock",
                           "fail", f"{relative}: no lock yet", f"`kdkit lock --backend {backend}`")
    platform = lock.header.get("platform", "")
    pin = lock.pin_for("torch", image_environment(python, platform))
    if pin is None:
        where = f" for the image (Linux, Python {python})" if "torch" in lock.candidates else ""
        return check_point("lock", "fail", f"{relative}: torch is not pinned{where}",
                           "add torch to requirements/base.in, then `kdkit lock`")
    if not pin.version:
        return check_point("lock", "fail",
                           f"{relative}:{pin.line}: torch comes from {pin.source}, with no version "
                           "kdkit can judge against a card",
                           "lock a torch release (torch==<version>+<label>), then `kdkit lock`")
    # The build: the pin's local label, else (a hashed pin fixes the file) the build the header
    # records for PyPI's plain torch, else the torch index the lock names.
    recorded = None if pin.local else header_build(lock.header)
    problem = (pairings
               or load_pairings()).pypi_header_problem(pin.version,
                                                       linux_arch(platform)[0] or "x86_64",
                                                                recorded)
    if problem is not None:
        return check_point("lock",
                           "fail", f"{relative}: {problem}",
                           f"re-lock with `kdkit lock --backend {backend}`")
    label = pin.local or recorded or _index_build(lock.options, pin.version, platform, pairings)
    if not label or parse_label(label) is None:
        return check_point("lock", "fail",
                           f"{relative}:{pin.line}: torch=={pin.version} has no build label kdkit "
                           "can read, so it also matches +cpu and +rocm builds",
                           "re-lock with `kdkit lock`, which pins the label")
    version = pin.version if pin.local else f"{pin.version}+{label}"
    return Subject(relative, version, label, linux_arch(platform)[0], platform=platform,
                   pypi=not pin.local)


def _index_build(options: list[tuple[str, str]], version: str, platform: str,
                 pairings: Pairings | None) -> str | None:
    """The build label of the lock's ``--index-url``: PyTorch's index names it; PyPI's plain torch
    is the build the pairings' ``pypi`` facts give for the lock's CPU (a lock without kdkit's
    torch-build line)."""
    url = next((value for option, value in options if option == "--index-url"), "")
    if index_label(url) or not is_pypi(url):
        return index_label(url)
    return (pairings or load_pairings()).pypi_label(version, linux_arch(platform)[0] or "x86_64")


def image_subject(ref: str) -> tuple[Subject, dict[str, str]]:
    """An image's installed torch as a subject (labels written by `kdkit build`), and its labels."""
    from kdkit.docker_adapter import connect
    from kdkit.image.labels import LABEL, require_kdkit_labels

    facts = connect().require_image(ref)
    require_kdkit_labels(ref, facts.labels)
    version = facts.labels.get(f"{LABEL}torch.version", "")
    label = split_version(version)[1] or ""
    if not version or parse_label(label) is None:
        raise BadInput(f"image {ref}: its torch ({version or 'none'}) carries no build label kdkit "
                       "can read; rebuild it from a lock made by `kdkit lock`")
    from kdkit.probe.env.torcharch import TORCH_TOKEN

    raw = facts.labels.get(ARCH_LABEL)
    tokens = None if raw is None or raw.strip() == "unknown" else tuple(
        raw.replace(",", " ").split())
    arch_list = tokens if tokens is not None and all(TORCH_TOKEN.fullmatch(t)
                                                     for t in tokens) else None
    platform = f"{facts.os}-{facts.architecture}" if facts.os and facts.architecture else ""
    return (Subject(f"image {ref}", version, label, linux_arch(platform)[0], arch_list,
                    facts.labels.get(ARCH_SOURCE_LABEL, ""), platform), facts.labels)
