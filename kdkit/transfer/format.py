"""What a bundle folder is: the names of its files, its format mark, the compressors of its image,
the labels that tie the image to it, and how kdkit tells a bundle it wrote (SHA256SUMS lists every
file; :func:`not_a_bundle`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.files import printable_name
from kdkit.core import checksums
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.jsonio import load_json

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Literal, NotRequired, TypedDict

    from kdkit.transfer.kdkitwheels import KdkitWheels
    from kdkit.transfer.localwheels import LocalWheels

    FORMAT_KEY: Literal["kdkit_bundle"]  # a key of BundleInfo (assigned below)

    class ImageRecord(TypedDict):
        """bundle.json's ``image`` as `kdkit bundle` writes it (bundle.py ``save_image``)."""

        ref: str
        id: str
        labels: dict[str, str]
        file: str
        compressor: str  # a name of COMPRESSORS
        bytes: int
        archive_bytes: int
        image_bytes: int
        seconds: float

    class BundleInfo(TypedDict):
        """bundle.json as `kdkit bundle` writes it (bundle.py ``_fill``, then ``make_bundle``),
        and what ``make_bundle`` returns: the same, plus ``out``, ``removed_staging``,
        ``seconds``."""

        kdkit_bundle: int  # FORMAT_KEY: FORMAT
        kdkit_version: str
        created: str
        project: str
        backend: str
        python: str
        revision: str | None
        source: str | None
        uncommitted: list[str]
        project_files: int
        files: list[str]
        left_out: list[dict[str, str]]  # {"file", "why"}
        outside_allow_list: list[str]
        lock: str
        lock_sha256: str
        pylock: str | None
        machine_local: list[str]
        pilot_config: str
        manifest: str
        inputs: str
        mounts: list[str]
        runs: str
        zipapp: str
        image: ImageRecord | None
        kdkit_wheels: KdkitWheels | None
        local_wheels: NotRequired[LocalWheels | None]  # set by make_bundle after _fill
        # make_bundle's return only, after bundle.json is written
        out: NotRequired[str]
        removed_staging: NotRequired[list[str]]
        seconds: NotRequired[float]

BUNDLE_JSON = "bundle.json"
RUN_MD = "RUN.md"
ZIPAPP = "kdkit.pyz"
PROJECT = "project"
# bundle.json's format key: what marks a folder as a bundle kdkit wrote (and --force may replace).
FORMAT_KEY = "kdkit_bundle"
# 3: kdkit-wheels/ (bundle.json's kdkit_wheels); a kdkit that reads only 2 refuses it as of another
# format
FORMAT = 3
READS = (2, 3)  # the formats this kdkit verifies and loads (2: a bundle without kdkit-wheels/)
# Labels that tie an image to the bundle; `kdkit load` re-checks them after loading.
TIED_LABELS = ("dev.kdkit.project", "dev.kdkit.backend", "dev.kdkit.python", "dev.kdkit.lock.path",
               "dev.kdkit.lock.sha256", "org.opencontainers.image.revision")



@dataclass(frozen=True)
class Compressor:
    """A command-line compressor: streaming, multi-threaded where it can be, present on most
    hosts."""

    name: str
    suffix: str
    compress: tuple[str, ...]
    decompress: tuple[str, ...]


COMPRESSORS = {
    # Chosen by measurement (bench/results/bundle.json): level 3 on all cores.
    "zstd": Compressor("zstd", ".tar.zst", ("zstd", "-q", "-T0", "-3", "-c"),
                       ("zstd", "-q", "-dc")),
    # The universal fallback: every engine and host reads gzip.
    "gzip": Compressor("gzip", ".tar.gz", ("gzip", "-6", "-c"), ("gzip", "-dc")),
}


@dataclass(frozen=True)
class ImageEntry:
    """bundle.json's ``image``, once it has passed schemas/bundle.schema.json."""

    ref: str
    id: str
    file: str
    compressor: Compressor
    bytes: int  # the compressed file's size
    # the `docker save` archive's, decompressed (None: a bundle made before it was recorded)
    archive_bytes: int | None
    labels: dict[str, str]

    @classmethod
    def of(cls, image: Mapping[str, Any]) -> ImageEntry:
        return cls(image["ref"], image["id"], image["file"], COMPRESSORS[image["compressor"]],
                   image["bytes"],
                   image.get("archive_bytes"), dict(image["labels"]))


def label_mismatches(labels: dict[str, str], expected: dict[str, str]) -> list[str]:
    """``name: image has X, bundle has Y`` for each tied label that disagrees."""
    return [f"{name}: image has {labels.get(name, '(none)')!r}, bundle has {value!r}"
            for name, value in expected.items() if labels.get(name) != value]


def read_sums(folder: Path) -> dict[str, str]:
    """A bundle's SHA256SUMS (kdkit.core.checksums); BadInput when it has none."""
    return checksums.read_sums(
        folder, "bundle", f"{folder} is not a kdkit bundle (made by `kdkit bundle`)")


def bundle_tree(folder: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(name, lstat) of every non-folder of a bundle, links included and never followed."""
    for base, dirs, files in os.walk(folder):
        here = Path(base)
        links = [d for d in dirs if (here / d).is_symlink()]
        dirs[:] = sorted(d for d in dirs if d not in links)
        for name in sorted([*files, *links]):
            path = here / name
            yield path.relative_to(folder).as_posix(), path.lstat()


def not_a_bundle(folder: Path) -> str | None:
    """Why ``folder`` is not exactly a bundle kdkit wrote (and so --force must not replace it), or
    None."""
    try:
        info = load_json(folder / BUNDLE_JSON, what="bundle description")
    except BadInput:
        return f"holds no readable {BUNDLE_JSON}, so kdkit did not write it as a bundle"
    if not isinstance(info, dict) or not isinstance(info.get(FORMAT_KEY), int):
        return f"its {BUNDLE_JSON} has no {FORMAT_KEY!r} key, so kdkit did not write it as a bundle"
    try:
        listed = read_sums(folder)
    except KdkitError:
        return f"its {SUMS} is missing or unreadable, so kdkit cannot tell its own files"
    foreign = [rel for rel, info_ in bundle_tree(folder)
               if rel != SUMS and (rel not in listed or stat.S_ISLNK(info_.st_mode))]
    if foreign:
        return (f"holds {len(foreign)} file(s) that `kdkit bundle` did not write (e.g. "
                f"{printable_name(foreign[0])}: results of a run, or an edit), which --force would "
                "delete")
    return None
