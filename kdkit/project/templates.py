"""The apps `kdkit init --template NAME` starts a project from.

``project-template/`` is the classify template, whole. Every other template is an overlay inside it,
``project-template/templates/NAME/``, holding only the files that differ: the base is copied first,
less the paths the template replaces (``leaves_out``), then the overlay over it. The ``templates/``
folder itself never reaches a project.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kdkit.core.errors import BadInput

OVERLAYS = "templates"  # the folder of project-template/ that holds the overlays
DEFAULT = "classify"


@dataclass(frozen=True)
class Template:
    """One template: its name and the base paths its overlay replaces (``kdkit init --help`` says
    what each app does)."""

    name: str
    # relative to project-template/: a file, or a folder and all below it
    leaves_out: tuple[str, ...] = ()


_APP_FILES = ("src/classify.py", "src/examples.jsonl", "data/pilot")
TEMPLATES = {
    "classify": Template("classify"),  # project-template/ itself
    "embed": Template("embed", _APP_FILES),  # a text embedder: output kind vector
    # a character-level text generator: output kind text
    "generate": Template("generate", _APP_FILES),
}


def find(name: str) -> Template:
    """The template called ``name``; BadInput naming the known ones when there is none."""
    known = TEMPLATES.get(name)
    if known is None:
        said = repr(name[:40] + "...") if len(name) > 40 else repr(name)
        raise BadInput(f"--template {said}: unknown template; choose one of {', '.join(TEMPLATES)}")
    return known


def template_files(base: Path, template: Template) -> Iterator[tuple[Path, Path]]:
    """(source, path in the project) for every file and folder of ``template``, the base's first,
    then its overlay's: an overlay file comes after the base file it replaces. Caches and the
    overlays are skipped."""
    yield from _walk(base,
                     lambda rel: rel.parts[0] == OVERLAYS or _left_out(rel, template.leaves_out))
    if template.name != DEFAULT:
        yield from _walk(base / OVERLAYS / template.name, lambda rel: False)


def _walk(source: Path, skip: Callable[[Path], bool]) -> Iterator[tuple[Path, Path]]:
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        if "__pycache__" in rel.parts or path.suffix == ".pyc" or skip(rel):
            continue
        yield path, rel


def _left_out(rel: Path, leaves_out: tuple[str, ...]) -> bool:
    text = rel.as_posix()
    return any(text == gone or text.startswith(gone + "/") for gone in leaves_out)
