"""PyPI as a torch source: a backend whose ``torch_index`` is PyPI's simple index (or the index the
user's pip configuration names, a mirror of it) locks a plain ``torch==2.13.0``, whose build is read
from the facts.

PyPI's Linux torch wheel carries no local label in its file name, yet it is one build: 2.13.0 for
x86_64 is the +cu130 build inside (its ``torch/version.py``), with its CUDA libraries as
``nvidia-*`` and ``cuda-toolkit`` wheels. Which build each release is, per CPU, is data
(kdkit/data/pairings.json ``pypi``, read from the released artifacts). The lock's header records it
(``# kdkit: torch-build = cu130 (...)``), so ``check``, ``build``, ``verify-env`` and ``diagnose``
read the build from the lock, as they read a label. No click here; errors are kdkit errors with
one-line messages.
"""

from __future__ import annotations

from pathlib import Path

from kdkit.core.builds import PYPI_SIMPLE, is_pypi, label_backend
from kdkit.core.errors import BadInput
from kdkit.facts.pairings import Pairings, load_pairings


def mirrors(pip_config: dict[str, str]) -> tuple[str, ...]:
    """The indexes taken as PyPI besides PyPI's own: the ``index-url`` of the user's pip
    configuration (a company mirror of PyPI), when it names one."""
    user = pip_config.get("index-url", "")
    return (user,) if user else ()


def pypi_backends(pairings: Pairings) -> set[str]:
    """The backends whose torch PyPI serves on some release (today: cuda), from the ``pypi``
    facts."""
    found = set()
    for platforms in pairings.data.get("pypi", {}).values():
        for entry in platforms.values():
            label = entry.get("label") if isinstance(entry, dict) else None
            if label and (family := label_backend(label)):
                found.add(family)
    return found


def refuse_pypi_backend(torch_index: str, backend: str, config_file: Path) -> None:
    """BadInput when PyPI's torch is never a build of ``backend`` (a rocm or cpu backend on PyPI
    would lock PyPI's CUDA torch)."""
    if backend in pypi_backends(load_pairings(config_file.parent)):
        return
    raise BadInput(f"{config_file}: $.backends.{backend}.torch_index {torch_index} is PyPI's "
                   f"index, whose Linux torch is a CUDA build (pairings $.pypi): a {backend} "
                   "backend needs PyTorch's index of its build (.../whl/<label>); PyPI serves only "
                   "a cuda backend")


def pypi_build_line(version: str, cpu_arch: str, backend: str, config_file: Path,
                    index: str = PYPI_SIMPLE) -> str:
    """The header value of the ``torch-build`` line for PyPI's plain ``torch==version`` on
    ``cpu_arch`` (``cu130 (PyPI torch 2.13 on x86_64: pypi_2_13_0, pypi_artifacts: 2.13.0+cu130)``);
    BadInput, one line, when the facts do not know that release's build or it is not a ``backend``
    build."""
    pairings = load_pairings(config_file.parent)
    entry = pairings.pypi_entry(version, cpu_arch)
    label = pairings.pypi_label(version, cpu_arch)
    minor = ".".join(version.split("+")[0].split(".")[:2])
    if label is None:
        raise BadInput(f"{config_file}: torch=={version} from PyPI ({index}) is a build kdkit has "
                       f"no facts for on {cpu_arch} (pairings.json $.pypi.{minor}.{cpu_arch}); pin "
                       f"a release it knows ({known_releases(pairings, cpu_arch)}), add the fact "
                       "to the project's pairings.json, or set the torch_index to PyTorch's index "
                       "of the build (.../whl/<label>)")
    if label_backend(label) != backend:
        raise BadInput(f"{config_file}: torch=={version} from PyPI is the +{label} build on "
                       f"{cpu_arch} (pairings.json $.pypi.{minor}.{cpu_arch}), not a {backend} "
                       f"build; set backends.{backend}.torch_index to PyTorch's index of the build "
                       "you want (.../whl/<label>)")
    return f"{label} (PyPI torch {minor} on {cpu_arch}: {entry.get('source', 'pairings $.pypi')})"


def known_releases(pairings: Pairings, cpu_arch: str) -> str:
    """``2.5-2.15`` style list of the releases whose PyPI build on ``cpu_arch`` kdkit knows."""
    known = [minor for minor in pairings.data.get("pypi", {})
             if pairings.pypi_label(minor, cpu_arch)]
    return f"{known[0]}-{known[-1]}" if known else "none"


def is_pypi_source(torch_index: str, pip_config: dict[str, str]) -> bool:
    """Whether a backend's ``torch_index`` is PyPI (or the mirror the user's pip configuration
    names)."""
    return is_pypi(torch_index, mirrors(pip_config))


def locked_build(version: str, local: str | None, platform: str, backend: str, config_file: Path,
                 tool: str, index: str = PYPI_SIMPLE) -> str:
    """The ``torch-build`` header value of a torch ``version`` locked from PyPI for ``platform``
    (``linux-x86_64``); KdkitError when the resolver took a labelled build instead (from another
    index of pip's configuration), BadInput when the facts do not know the plain release's build."""
    from kdkit.core.errors import KdkitError

    if local is not None:
        raise KdkitError(f"{tool} resolved torch=={version} (+{local}) for backend {backend}, "
                         "whose index is PyPI (plain versions, no local label); check the indexes "
                         "in your pip configuration")
    cpu_arch = platform.rsplit("-", 1)[-1] or "x86_64"
    return pypi_build_line(version, cpu_arch, backend, config_file, index)
