"""The torch build pairings (kdkit/data/pairings.json), extended by the user's own files.

Which builds each torch release has, which architectures each carries, the driver floors and the
template's defaults are data, each fact with its public source; a new torch release is a data
change. Precedence, lowest first: the shipped file, ``pairings.json`` at the project root, then
``--pairings FILE``; the layers merge key by key (a torch release's builds merge label by label).

The rules that read these facts (labels, driver floors) live in :mod:`kdkit.core.builds`, shared
with the in-container side; the rule of which code runs on which card is diagnose's own
(:mod:`kdkit.core.gpurules`), so a card judged here before ordering is judged the same way on
the machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.builds import driver_floor, minor_key, parse_label, torch_minor
from kdkit.core.errors import BadInput

if TYPE_CHECKING:
    from collections.abc import Mapping

_SECTIONS = ("sources", "drivers", "architecture_drivers", "indexes", "arch_sets")


def code_for(card: str, carried: Iterable[str]) -> str | None:
    """How a build carrying ``carried`` runs on ``card`` ("cubin sm_86", "PTX compute_120, ..."),
    or None when it has no code the card can execute (cubins run on the same major with an equal
    or newer minor, PTX is compiled for newer cards, ROCm needs the exact gfx target)."""
    from kdkit.core.gpurules import cuda_arch_verdict, rocm_arch_verdict

    arch_list = list(carried)
    match = re.fullmatch(r"sm_([0-9]+)", card)
    if match is not None:
        verdict = cuda_arch_verdict(divmod(int(match.group(1)), 10), arch_list)
    else:
        verdict = rocm_arch_verdict(card, arch_list, None)
    return verdict.how if verdict.ok else None


@dataclass(frozen=True)
class Build:
    """One torch release built against one wheel index, for one CPU architecture."""

    torch: str
    label: str
    backend: str
    toolkit: str
    architectures: tuple[str, ...]
    complete: bool
    source: str
    experimental: bool = False
    cpu_arch: str = "x86_64"

    def code_for(self, card: str) -> str | None:
        """How this build runs on ``card``, or None (see the module function)."""
        return code_for(card, self.architectures)

    @property
    def name(self) -> str:
        """``2.13 cu130`` (with ``experimental`` and the CPU architecture when they apply)."""
        extra = [w for w in ("experimental" if self.experimental else "",
                             self.cpu_arch if self.cpu_arch != "x86_64" else "") if w]
        return f"{self.torch} {self.label}" + (f" ({', '.join(extra)})" if extra else "")


def _row(value: dict[str, Any]) -> dict[str, Any]:
    """A torch release's entry in the current form; the older {label: arch set} form is its
    builds."""
    if "builds" in value:
        return value
    return {"builds": dict(value)}


def _ref(value: Any) -> tuple[str, bool]:
    """(arch set name, experimental) of one build reference."""
    if isinstance(value, dict):
        return str(value["arch_set"]), bool(value.get("experimental", False))
    return str(value), False


@dataclass
class Pairings:
    data: dict[str, Any]
    files: list[str] = field(default_factory=list)

    def index(self, label: str) -> dict[str, str] | None:
        found: dict[str, str] | None = self.data["indexes"].get(label)
        return found

    def releases(self) -> list[str]:
        """The torch minor releases kdkit knows, oldest first."""
        return sorted(self.data["torch"], key=minor_key)

    def labels(self, torch_version: str, cpu_arch: str = "x86_64") -> list[str]:
        """The index labels ``torch_version`` (any patch release) is published for on
        ``cpu_arch``."""
        row = self.data["torch"].get(torch_minor(torch_version))
        if row is None:
            return []
        labels = list(row["builds"])
        return labels if cpu_arch == "x86_64" else [la for la in labels
                                                    if la in row.get("aarch64", ())]

    def build(self, torch_version: str, label: str, cpu_arch: str = "x86_64") -> Build | None:
        """The build of ``torch_version`` from index ``label`` for ``cpu_arch``, if it is known to
        exist."""
        minor = torch_minor(torch_version)
        row = self.data["torch"].get(minor)
        if row is None or label not in self.labels(torch_version, cpu_arch):
            return None
        set_name, experimental = _ref(row["builds"][label])
        arch_set, index = self.data["arch_sets"][set_name], self.data["indexes"][label]
        if cpu_arch == "x86_64":
            archs, complete = arch_set["architectures"], arch_set["complete"]
        else:  # an aarch64 wheel whose arch list kdkit does not know yet is partial, never empty
            archs, complete = (arch_set.get("aarch64", []),
                               arch_set["complete"] and "aarch64" in arch_set)
        return Build(minor, label, index["backend"], index["version"], tuple(archs), complete,
                     arch_set["source"], experimental, cpu_arch)

    def builds(self, cpu_arch: str = "x86_64") -> list[Build]:
        """Every known build for ``cpu_arch``, oldest torch first."""
        out = []
        for minor in self.releases():
            for label in self.labels(minor, cpu_arch):
                build = self.build(minor, label, cpu_arch)
                if build is not None:
                    out.append(build)
        return out

    def builds_for(self, card: str, backend: str, cpu_arch: str = "x86_64") -> list[Build]:
        """The builds of ``backend`` that carry code for ``card``, oldest torch first."""
        return [b for b in self.builds(cpu_arch) if b.backend == backend
                and b.code_for(card) is not None]

    def pypi_entry(self, torch_version: str, cpu_arch: str = "x86_64") -> dict[str, Any]:
        """The ``pypi`` fact of ``torch_version``'s minor release on ``cpu_arch``: {"label": "cu130"
        or None (unknown), "source": ...}, or {} when kdkit has none."""
        entry: dict[str, Any] = (self.data.get("pypi", {}).get(torch_minor(torch_version))
                                 or {}).get(cpu_arch) or {}
        return entry

    def pypi_label(self, torch_version: str, cpu_arch: str = "x86_64") -> str | None:
        """The index label of the build PyPI serves as plain ``torch==<version>`` on ``cpu_arch``
        (2.13 x86_64: cu130), or None where kdkit does not know it."""
        label = self.pypi_entry(torch_version, cpu_arch).get("label")
        return str(label) if label else None

    def pypi_header_problem(self, torch_version: str, cpu_arch: str,
                            recorded: str | None) -> str | None:
        """Why a lock's recorded ``torch-build`` for PyPI's plain ``torch==<version>`` is not the
        build the facts know PyPI serves on ``cpu_arch`` (a header edited by hand, or facts that
        moved), or None."""
        known = self.pypi_label(torch_version, cpu_arch)
        if recorded is None or known is None or recorded == known:
            return None
        source = self.pypi_entry(torch_version, cpu_arch).get("source", "")
        return (f"its header says torch-build = {recorded}, but PyPI's torch {torch_version} on "
                f"{cpu_arch} is the {known} build (pairings.json pypi: {source})")

    def pypi_build(self, torch_version: str, cpu_arch: str = "x86_64") -> Build | None:
        """The build PyPI's plain ``torch==<version>`` is on ``cpu_arch``: the architectures the
        PyPI artifact carries (``arch_set``: PyPI's cu130 has no PTX where download.pytorch.org's
        has), else its label's build; None where kdkit does not know it."""
        entry = self.pypi_entry(torch_version, cpu_arch)
        label = entry.get("label")
        if not label or not entry.get("arch_set"):
            return self.build(torch_version, label, cpu_arch) if label else None
        arch_set, index = self.data["arch_sets"][entry["arch_set"]], self.data["indexes"][label]
        archs = arch_set["architectures"] if cpu_arch == "x86_64" else arch_set.get("aarch64", [])
        complete = arch_set["complete"] and (cpu_arch == "x86_64" or "aarch64" in arch_set)
        return Build(torch_minor(torch_version), label, index["backend"], index["version"],
                     tuple(archs), complete,
                     arch_set["source"], False, cpu_arch)

    def driver_floor(self, cuda_version: str,
                     architecture: str | None = None) -> tuple[str, str] | None:
        """(minimum driver, why) for a CUDA build on ``architecture`` (see kdkit.core.builds)."""
        return driver_floor(cuda_version, architecture, self.data)

    def template_build(self, backend: str) -> Build:
        """The build `kdkit init` pins for ``backend``; BadInput when the template names one that
        does not exist."""
        template = self.data.get("template") or {}
        torch, label = template.get("torch"), (template.get("builds") or {}).get(backend)
        build = self.build(torch, label) if torch and label else None
        if build is None or build.backend != backend:
            where = self.files[-1] if self.files else "pairings.json"
            raise BadInput(f"{where}: $.template names torch {torch} {label} for backend "
                           f"{backend}, which is not a {backend} build under $.torch; name a "
                           "published build")
        return build

    def base_image(self, label: str, python: str) -> str | None:
        """The base image paired with ``label``'s build ({python} filled in), or None."""
        image = (self.index(label) or {}).get("base_image")
        return image.replace("{python}", python) if image else None


def _merge(merged: dict[str, Any], layer: Mapping[str, Any]) -> None:
    for section in _SECTIONS:
        merged[section].update(layer.get(section, {}))
    for minor, value in layer.get("torch", {}).items():
        row, into = _row(value), merged["torch"].setdefault(minor, {"builds": {}})
        into["builds"].update(row["builds"])
        for key in ("source", "aarch64"):
            if key in row:
                into[key] = row[key]
    for minor, value in layer.get("pypi", {}).items():
        merged["pypi"].setdefault(minor, {}).update(value)
    if "template" in layer:
        merged["template"] = layer["template"]


def _contradiction(merged: Mapping[str, Any]) -> str | None:
    """The first index whose backend or toolkit version is not what its label says (cu130 is CUDA
    13.0)."""
    for label, index in merged["indexes"].items():
        parsed = parse_label(label)
        if parsed is None:
            return f"$.indexes.{label}: not a build label kdkit can read (cpu, cuXYZ, rocmX.Y)"
        backend, version = parsed
        if index["backend"] != backend or index["version"] != (version or ""):
            return (f"$.indexes.{label}: says backend {index['backend']} "
                    f"{index['version'] or '(no version)'}, but {label} is {backend} "
                    f"{version or '(no version)'}; fix the entry")
    return None


def _dangling(merged: Mapping[str, Any]) -> str | None:
    """The first torch entry naming an unknown index or arch set, described."""
    for minor, platforms in merged["pypi"].items():
        for cpu_arch, entry in platforms.items():
            if not isinstance(entry, dict):
                continue  # the release's note
            if entry.get("label") and entry["label"] not in merged["indexes"]:
                return (
                    f"$.pypi.{minor}.{cpu_arch}.label: index {entry['label']!r} is not under "
                    "$.indexes; add it there")
            if entry.get("arch_set") and entry["arch_set"] not in merged["arch_sets"]:
                return (f"$.pypi.{minor}.{cpu_arch}.arch_set: {entry['arch_set']!r} is not under "
                        "$.arch_sets; add it there")
    for minor, row in merged["torch"].items():
        for label, ref in row["builds"].items():
            set_name = _ref(ref)[0]
            if label not in merged["indexes"]:
                return (
                    f"$.torch.{minor}.{label}: index {label!r} is not under $.indexes; add it "
                    "there")
            if set_name not in merged["arch_sets"]:
                return (
                    f"$.torch.{minor}.{label}: arch set {set_name!r} is not under $.arch_sets; add "
                    "it there")
    return None


def load_pairings(project_root: Path | None = None, extra: Path | None = None) -> Pairings:
    """The shipped pairings, then the project's pairings.json, then ``extra``, merged key by key."""
    from kdkit.facts.catalog import layer_paths, load_checked

    merged: dict[str, Any] = {section: {} for section in (*_SECTIONS, "torch", "pypi")}
    files = []
    for path in layer_paths("pairings", project_root, extra):
        _merge(merged, load_checked(path, "pairings"))
        files.append(str(path))
        problem = _contradiction(merged)
        if problem is not None:
            raise BadInput(f"{path}: {problem}")
    # after every layer: a project file may use an index of --pairings FILE
    problem = _dangling(merged)
    if problem is not None:
        raise BadInput(f"{files[-1]}: {problem}")
    return Pairings(merged, files)
