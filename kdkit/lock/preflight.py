"""The preflight of `kdkit lock`: before pip-compile, whether the backend's torch index answers and
serves a torch build the project can install, read the way pip reads it.

pip waits minutes on an index that does not answer (its timeout times its retries, for every page),
then takes whatever a find-links folder of its configuration holds. kdkit asks first
(:class:`kdkit.lock.fetch.Network`): the torch index's ``torch/`` page (PEP 503), filtered by the
requirement on torch in the input files, the project's Python and the image's platform. An index
that does not answer is ``Unavailable`` (exit 3), one that answers without such a build is
``BadInput`` (exit 2) naming the builds the index family offers: the ``torch/`` page beside the
label (``.../whl/torch/`` for ``.../whl/cu130``) lists them all, as download.pytorch.org does.

After pip-compile, :mod:`kdkit.lock.provenance` says where each locked file came from.
No click here; errors are kdkit errors with one-line messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from kdkit.core.builds import (
    PYPI_SIMPLE,
    TORCH_INDEX_URL,
    index_label,
    is_pypi,
    label_backend,
    minor_key,
    parse_label,
    split_version,
)
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.versions import InvalidVersion, Version
from kdkit.facts.pairings import load_pairings
from kdkit.lock.fetch import INDEX_FIX, Network
from kdkit.lock.pages import (
    IndexFile,
    Requirement,
    and_list,
    fits,
    parse_filename,
    parse_page,
    python_allows,
)


@dataclass(frozen=True)
class TorchPage:
    """The torch index's ``torch/`` page as the preflight read it."""

    index: str
    url: str
    files: tuple[IndexFile, ...]
    # versions of the torch builds that fit the requirement, Python and label
    builds: tuple[str, ...] = ()

    def newest(self) -> str | None:
        """The newest of :attr:`builds` (``2.12.0+cu128``), or None."""
        try:
            return max(self.builds, key=Version.parse, default=None)
        except InvalidVersion:
            return self.builds[-1] if self.builds else None

    def by_hash(self) -> dict[str, IndexFile]:
        return {f.sha256: f for f in self.files if f.sha256}


def _torch_builds(files: Iterable[IndexFile], requirement: Requirement, python: str,
                  target: tuple[str, str], *,
                  requires_python: bool = True) -> list[tuple[str, IndexFile]]:
    """(version, file) of the torch wheels that ``requirement`` allows and the image can install, as
    pip chooses them: a yanked file only for an exact pin, a file whose Requires-Python excludes
    ``python`` never (unless ``requires_python`` is False)."""
    found = []
    for item in files:
        parsed = parse_filename(item.filename)
        if parsed is None or parsed[0] != "torch" or parsed[2] is None:
            continue
        if item.yanked and not requirement.pinned():
            continue
        if requires_python and not python_allows(item.requires_python, python):
            continue
        if requirement.allows(parsed[1]) and fits(parsed[2], python, target):
            found.append((parsed[1], item))
    return found


def _label_key(label: str) -> tuple[int, ...]:
    """Sort key of build labels by their number: cu126 < cu130, rocm6.4 < rocm7.2."""
    parsed = parse_label(label)
    return minor_key(parsed[1] or "") if parsed else ()


_FAMILY = {"cuda": "CUDA index (cuXYZ, e.g. cu130)",
           "rocm": "ROCm index (rocmX.Y, e.g. rocm7.2)", "cpu": "cpu index"}


def example_index(backend: str, project_root: Path | None = None) -> str:
    """The torch index `kdkit init` would write for ``backend`` (the pairings' template build)."""
    try:
        return TORCH_INDEX_URL.format(
            label=load_pairings(project_root).template_build(backend).label)
    except BadInput:
        return TORCH_INDEX_URL.format(
            label={"cuda": "cu130", "rocm": "rocm7.2"}.get(backend, "cpu"))


def refuse_foreign_index(torch_index: str, backend: str, config_file: Path, *,
                         torch_needed: bool = True,
                         mirrors: tuple[str, ...] = ()) -> None:
    """BadInput unless ``torch_index`` is a plain URL whose build label is of ``backend``'s family:
    a cuda backend with ``.../whl/cpu`` would lock +cpu torch, one with ``.../whl/xpu`` +xpu. PyPI's
    index (or one of ``mirrors``, the index pip's configuration names) serves a plain torch whose
    build the pairings' ``pypi`` facts give: accepted for the backends it builds
    (:mod:`kdkit.lock.pypitorch`). An index whose label kdkit cannot read is refused only when
    ``torch_needed`` (the inputs name torch): without torch it is any package index."""
    place = f"{config_file}: $.backends.{backend}.torch_index {torch_index}"
    example = example_index(backend, config_file.parent)
    parts = urlsplit(torch_index)
    if parts.query or parts.fragment:
        extra = ("?" + parts.query if parts.query
                 else "") + ("#" + parts.fragment if parts.fragment else "")
        raise BadInput(f"{place} has a query or fragment ({extra}), which no index URL takes: give "
                       f"the index's plain URL, e.g. {example}")
    label = index_label(torch_index)
    if label is None and is_pypi(torch_index, mirrors):
        if torch_needed:
            from kdkit.lock.pypitorch import refuse_pypi_backend

            refuse_pypi_backend(torch_index, backend, config_file)
        return
    family = label_backend(label) if label else None
    if family == backend or (label is None and not torch_needed):
        return
    want = f"a {backend} backend needs a {_FAMILY.get(backend, backend + ' index')}, e.g. {example}"
    if family is not None:
        raise BadInput(f"{place} is a {_FAMILY[family].split(' (')[0]} (+{label} builds): {want}")
    tail = parts.path.rstrip("/").rsplit("/", 1)[-1] or parts.path
    if (parts.hostname or "").lower() == "pypi.org" and backend == "cuda":
        want += f", or PyPI's own index, {PYPI_SIMPLE}"
    raise BadInput(
        f"{place} ends in {tail!r}, not a build label kdkit can read (cuXYZ, rocmX.Y, cpu): {want}")


def preflight(torch_index: str, backend: str, requirement: Requirement | None, python: str,
              target: tuple[str, str], network: Network, config_file: Path,
              mirrors: tuple[str, ...] = ()) -> TorchPage:
    """Refuse, before pip-compile runs, an index that does not answer (Unavailable) or serves no
    build of ``requirement`` for ``python`` on ``target`` (BadInput); ``requirement`` None: the
    index must only answer. PyPI (or one of ``mirrors``): its plain-version torch wheels are the
    builds."""
    refuse_foreign_index(torch_index, backend, config_file,
                         torch_needed=requirement is not None, mirrors=mirrors)
    plain = index_label(torch_index) is None and is_pypi(torch_index, mirrors)
    place = f"backends.{backend}.torch_index in {config_file}"
    index = torch_index.rstrip("/")
    page_url = f"{index}/torch/"
    text = network.get(page_url, place)
    files = tuple(parse_page(text, page_url)) if text is not None else ()
    wanted = requirement or Requirement(())
    label = index_label(index)
    builds = _torch_builds(files, wanted, python, target)
    if label is not None or plain:
        builds = [(v, f) for v, f in builds if split_version(v)[1] == label]
    if requirement is None or builds:
        return TorchPage(index, page_url, files, tuple(sorted({v for v, _f in builds})))
    for_what = f"{wanted.text()} for Python {python} on {'-'.join(target)}"
    served = "has no torch/ page" if text is None else f"serves no {for_what}"
    message = f"{config_file}: backends.{backend}.torch_index {index} {served}"
    excluded = sorted({f"{item.filename} has Requires-Python {item.requires_python}"
                       for version,
                       item in _torch_builds(files, wanted, python, target, requires_python=False)
                       if (label is None and not plain) or split_version(version)[1] == label})
    if excluded:
        raise BadInput(f"{message}: {and_list(excluded)} (data-requires-python), and kdkit.json's "
                       f"python is {python}; change kdkit.json's python or the torch requirement "
                       "in the input files")
    if label is None:
        plain_fix = "pin a torch release PyPI serves for that Python, or " if plain else ""
        raise BadInput(f"{message}; {plain_fix}point it at the PyTorch index of the build you want "
                       "(e.g. .../whl/cu130)")
    _refuse_with_the_family(message, index, label, backend, wanted, python, target, network, place)


def _refuse_with_the_family(message: str, index: str, label: str, backend: str, wanted: Requirement,
                            python: str,
                            target: tuple[str, str], network: Network, place: str) -> NoReturn:
    """BadInput naming the builds of ``wanted`` that the index family's ``torch/`` page (beside
    ``label``) lists: the backend's own (set the index to the newest), another backend's, or
    none."""
    family = index[: -len(label)].rstrip("/")
    listing = f"{family}/torch/"
    try:
        every = network.get(listing, f"the torch builds beside {place}")
    except Unavailable:
        every = None
    labels = sorted({split_version(v)[1] or "" for v,
                     _f in _torch_builds(parse_page(every or "", listing), wanted,
                                       python, target)} - {""}, key=_label_key)
    mine = [lb for lb in labels if (parse_label(lb) or ("",))[0] == backend]
    if mine:
        raise BadInput(f"{message}; {wanted.text()} has {and_list(['+' + lb for lb in mine])} at "
                       f"{listing}; set backends.{backend}.torch_index to {family}/{mine[-1]}")
    if labels:
        raise BadInput(f"{message}; {listing} has {wanted.text()} only as "
                       f"{and_list(['+' + lb for lb in labels])}; change the torch requirement in "
                       "the input files or the backend")
    if every is None:
        raise BadInput(f"{message}, and {listing} lists no builds: point it at a PyTorch wheel "
                       "index (.../whl/<label>, e.g. cu130, rocm7.2, cpu)")
    raise BadInput(f"{message}; {listing} lists no {backend} build of it for that Python either: "
                   "change the torch requirement in the input files or kdkit.json's python")


def check_find_links(folder: Path, label: str | None, requirement: Requirement | None, python: str,
                     target: tuple[str, str], *, plain: bool = False) -> None:
    """BadInput unless the folder of ``--torch-find-links`` holds a torch wheel that ``requirement``
    allows, with the backend's ``label`` (``plain``: PyPI's, with no label), for ``python`` on
    ``target``: pip would take torch from anywhere else."""
    if requirement is None:
        return
    files = [IndexFile(entry.name, entry.as_uri(), None) for entry in sorted(folder.iterdir())
             if entry.is_file()]
    builds = _torch_builds(files, requirement, python, target)
    if any((label is None and not plain) or split_version(version)[1] == label
           for version, _f in builds):
        return
    torch = [f.filename for f in files if (parsed := parse_filename(f.filename))
             and parsed[0] == "torch"]
    holds = f"it holds {and_list(torch)}" if torch else "it holds no torch wheel"
    build = f" +{label}" if label else " plain-version (PyPI's, no local label)" if plain else ""
    raise BadInput(f"--torch-find-links {folder}: no {requirement.text()}{build} wheel for Python "
                   f"{python} on {'-'.join(target)} ({holds}); put that wheel there, or lock from "
                   "the torch index without --torch-find-links")


def check_answers(url: str, place: str, network: Network) -> None:
    """Unavailable unless the index at ``url`` answers (any HTTP status does): pip would wait
    minutes on it."""
    network.get(f"{url.rstrip('/')}/torch/", place, body=False, fix=INDEX_FIX)
