"""The lock split in two for the image's layers: torch's part, installed first, and the rest.

The builder installs torch with its big runtime wheels in one layer and everything else in a later
one, so adding or bumping a small package reuses the torch layer from the builder's cache (a CUDA
torch with its ``nvidia-*`` wheels is about 2.7 GB of downloads). One rule, here:

* the **seeds**: ``torch``, the Triton builds that go with it (``triton``, ``pytorch-triton``,
  ``pytorch-triton-rocm``), every ``nvidia-*`` and ``cuda-*`` distribution (PyTorch's CUDA wheels on
  PyPI require ``cuda-toolkit[...]``, ``cuda-bindings``, ``nvidia-cudnn-cu13``,
  ``nvidia-nccl-cu13``...: torch 2.13.0's METADATA, https://pypi.org/project/torch/2.13.0/), and the
  venv's own tools (``pip``, ``setuptools``, ``wheel``: they live in the venv the torch layer
  makes);
* and every pin the lock says is required by a member (pip-compile's ``# via`` annotations,
  https://pip-tools.readthedocs.io/ "annotate"), so the torch part imports on its own: the image's
  ``kdkit torch-arch`` step runs on that layer alone.

A pin stays in torch's part while any of its parents is there, so adding a package that shares a
dependency with torch (``jinja2``, ``typing-extensions``) does not move it. Each part keeps the
lock's requirement lines byte for byte (its ``--hash`` lines included) and its index options, and
drops comments: the torch part's text is the same before and after a small change, which is what
the builder's cache compares.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.core.jsonio import read_text_file
from kdkit.core.lockfile import Lock, normalize_name, parse_lock_text

if TYPE_CHECKING:
    from kdkit.lock.locked import LockInput

# The locks `kdkit build` installs from (--lock-format): the requirements lock, split here, or the
# backend's PEP 751 lock, split by kdkit.image.pylockparts.
LOCK_FORMATS = ("requirements", "pylock")
SEEDS = frozenset(
    {"torch", "triton", "pytorch-triton", "pytorch-triton-rocm", "pip", "setuptools", "wheel"})
SEED_PREFIXES = ("nvidia-", "cuda-")
HEADER = ("# {part} of the project's lock, derived by `kdkit build` (kdkit.image.layers); the "
          "builder installs it with --require-hashes --no-deps\n")
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
_VIA_ONE = re.compile(r"^\s+#\s+via\s+(\S.*)$")
_VIA_START = re.compile(r"^\s+#\s+via\s*$")
_VIA_MORE = re.compile(r"^\s+#\s{2,}(\S+)")


def is_seed(key: str) -> bool:
    return key in SEEDS or key.startswith(SEED_PREFIXES)


def _parents(line: str, collecting: bool) -> tuple[list[str] | None, bool]:
    """(the parents a ``# via`` line names, or None for any other line; whether a ``# via`` list
    goes on)."""
    # "# via torch", or "# via jinja2, torch" (line style)
    if (via := _VIA_ONE.match(line)) is not None:
        return [p.strip() for p in via.group(1).split(",")], False
    if _VIA_START.match(line):  # the split style: "# via" then one "#   name" per line
        return [], True
    if collecting and (more := _VIA_MORE.match(line)) is not None:
        return [more.group(1)], True
    return None, False


def _blocks(text: str) -> tuple[list[str], list[tuple[str, list[str], set[str]]]]:
    """(the lock's option lines, its requirements as (key, physical lines, parents named by ``#
    via``))."""
    options: list[str] = []
    blocks: list[tuple[str, list[str], set[str]]] = []
    continued = collecting = False
    for line in text.splitlines():
        if continued:
            blocks[-1][1].append(line)
            continued = line.rstrip().endswith("\\")
            continue
        if (match := _REQUIREMENT.match(line)) is not None:
            blocks.append((normalize_name(match.group(1)), [line], set()))
            continued, collecting = line.rstrip().endswith("\\"), False
            continue
        if line.startswith("-"):
            options.append(line)
            continue
        parents, collecting = _parents(line, collecting)
        if parents is not None and blocks:
            blocks[-1][2].update(parents)
    return options, blocks


def torch_keys(text: str) -> set[str]:
    """The normalized names in torch's part of a lock's text (the seeds and what they require)."""
    _options, blocks = _blocks(text)
    parents: dict[str, set[str]] = {key: set() for key, _lines, _via in blocks}
    for key, _lines, via in blocks:
        parents[key] |= {normalize_name(re.sub(r"\[.*$", "", p)) for p in via
                         if not p.startswith("-")}
    part = {key for key in parents if is_seed(key)}
    grown = True
    while grown:
        more = {key for key, named in parents.items() if key not in part and named & part}
        part |= more
        grown = bool(more)
    return part


def split_lock_text(text: str) -> tuple[str, str]:
    """(torch's part, the rest) of a lock's text; each a lock of its own, hash lines kept as
    written."""
    options, blocks = _blocks(text)
    keys = torch_keys(text)
    parts: dict[bool, list[str]] = {True: [], False: []}
    for key, lines, _via in blocks:
        parts[key in keys].extend(lines)
    head = [line for line in options if line.strip()]
    torch_part, rest = (HEADER.format(part=name)
                        + "".join(f"{line}\n" for line in head + parts[which])
                        for name, which in (("torch's part", True), ("the rest", False)))
    return torch_part, rest


def torch_sublock(lock: Path) -> str:
    """The text of torch's part of ``lock``, as `kdkit build` writes it into the build context."""
    return split_lock_text(read_text_file(lock, "lock"))[0]


def has_requirements(part: str) -> bool:
    return any(_REQUIREMENT.match(line) for line in part.splitlines())


def check_part(part: str, lock: Path, name: str) -> None:
    """BadInput (file and line) when a part does not parse as a lock; an empty part is allowed."""
    if has_requirements(part):
        parse_lock_text(part, lock.with_name(f"{lock.name} ({name})"))


def split_files(files: Iterable[Path], lock: Lock, keys: set[str]) -> tuple[list[Path], list[Path]]:
    """(torch's files, the rest) of a wheelhouse's files for ``lock``: by the wheel's name, or its
    hash."""
    from kdkit.core.jsonio import sha256_file
    from kdkit.lock.wheelhouse import locked_hashes

    by_hash: dict[str, str] | None = None
    ours: list[Path] = []
    rest: list[Path] = []
    for path in files:
        # PEP 427: {distribution}-{version}-..., the name escaped with "_"
        if path.name.endswith(".whl"):
            key = normalize_name(path.name.split("-", 1)[0])
        else:
            by_hash = by_hash if by_hash is not None else locked_hashes(lock)
            key = by_hash.get(sha256_file(path), "")
        (ours if key in keys else rest).append(path)
    return ours, rest


def ca_entries(ca_bundle: bytes | None) -> Iterator[tuple[str, Path | bytes]]:
    """build/ca/: the builder stage's CA bundle (--ca-bundle: its bytes, as checked), whatever the
    lock's format."""
    yield ("build/ca/README",
           b"Builder-stage input: ca.pem (--ca-bundle), never in the final image.\n")
    if ca_bundle is not None:
        yield "build/ca/ca.pem", ca_bundle


def builder_entries(lock: LockInput, ca_bundle: bytes | None,
                    wheels: list[Path]) -> Iterator[tuple[str, Path | bytes]]:
    """The builder stage's part of the build context: build/ca/, build/torch/ and build/rest/
    (Dockerfile.common).

    Each install step copies only its own folder, so torch's step is reused from the cache while its
    part of the lock and its wheels are unchanged, whatever the rest does.
    """
    keys = torch_keys(lock.text)
    parts = split_lock_text(lock.text)
    for part, name in zip(parts, ("torch's part", "the rest"), strict=True):
        check_part(part, lock.path, name)
    yield from ca_entries(ca_bundle)
    for folder, part, files in zip(("torch", "rest"), parts,
                                   split_files(wheels, lock.lock, keys), strict=True):
        yield f"build/{folder}/requirements.lock", part.encode("utf-8")
        for wheel in files:
            yield f"build/{folder}/wheels/{wheel.name}", wheel
