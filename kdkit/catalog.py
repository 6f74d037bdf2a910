"""The GPU catalog and the torch build pairings: shipped data, extended by the user's own files.

Both are JSON validated by a schema (schemas/catalog.schema.json, schemas/pairings.schema.json),
never code, so a new card or a new torch release is a data change. Precedence, lowest first:

1. the file shipped with kdkit (kdkit/data/catalog.json, kdkit/data/pairings.json);
2. ``catalog.json`` / ``pairings.json`` at the project root, when there is one;
3. the file given with ``--catalog FILE`` / ``--pairings FILE``.

A catalog offer of the same name (ignoring case, spaces and dashes) replaces the earlier one
whole; other offers are added. Pairings merge key by key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kdkit.errors import BadInput
from kdkit.resources import data_file

DURATIONS = (3, 7, 30)


def normalize_name(name: str) -> str:
    """``"RTX-4090"``, ``"rtx 4090"`` and ``"RTX4090"`` all name the same offer."""
    return re.sub(r"[\s_-]+", "", name).lower()


def _layer_paths(kind: str, project_root: Path | None, extra: Path | None) -> list[Path]:
    paths = [data_file(f"{kind}.json")]
    if project_root is not None and (project_root / f"{kind}.json").is_file():
        paths.append(project_root / f"{kind}.json")
    if extra is not None:
        paths.append(extra)
    return paths


def _load_checked(path: Path, schema: str) -> dict[str, Any]:
    """Load one layer and check it against its schema; the first problem is the error."""
    from kdkit.validate import load_valid

    return load_valid(path, schema, what=f"{schema} file")


# ---------------------------------------------------------------- the catalog


@dataclass(frozen=True)
class Offer:
    """One orderable GPU offer. Prices are per LOT (a lot may hold several cards)."""

    name: str
    vendor: str
    backend: str
    memory_gb: float
    architecture: str
    cards_per_lot: int
    prices: dict[int, Decimal | None]
    generation: str = ""
    aliases: tuple[str, ...] = ()
    nominal: dict[str, Any] | None = None
    note: str = ""
    origin: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any], origin: Path) -> Offer:
        prices = data["price_per_lot_usd"]
        return cls(
            name=data["name"],
            vendor=data["vendor"],
            backend=data["backend"],
            memory_gb=data["memory_gb"],
            architecture=data["architecture"],
            cards_per_lot=data["cards_per_lot"],
            # str() first: the JSON literal 47.14 becomes exactly Decimal("47.14").
            prices={d: None if prices[str(d)] is None else Decimal(str(prices[str(d)])) for d in DURATIONS},
            generation=data.get("generation", ""),
            aliases=tuple(data.get("aliases", ())),
            nominal=data.get("nominal"),
            note=data.get("note", ""),
            origin=str(origin),
        )

    def match_keys(self) -> set[str]:
        return {normalize_name(n) for n in (self.name, *self.aliases)}

    def price(self, days: int) -> Decimal | None:
        return self.prices.get(days)

    def summary(self) -> dict[str, Any]:
        """The fields an order records about the offer."""
        return {"name": self.name, "vendor": self.vendor, "backend": self.backend,
                "memory_gb": self.memory_gb, "architecture": self.architecture,
                "cards_per_lot": self.cards_per_lot}

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "generation": self.generation, "aliases": list(self.aliases),
                "price_per_lot_usd": {str(d): None if p is None else str(p) for d, p in self.prices.items()},
                "nominal": self.nominal, "note": self.note, "origin": self.origin}


def closest_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Candidates most similar to ``name`` (difflib), compared in normalized form."""
    by_key: dict[str, str] = {}
    for candidate in candidates:
        by_key.setdefault(normalize_name(candidate), candidate)
    keys = difflib.get_close_matches(normalize_name(name), list(by_key), n=n, cutoff=0.4)
    return [by_key[k] for k in keys]


@dataclass
class Catalog:
    offers: list[Offer]
    files: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return [o.name for o in self.offers]

    def find(self, name: str) -> Offer:
        """The offer called ``name`` (or one of its aliases); BadInput with the closest names."""
        key = normalize_name(name)
        for offer in self.offers:
            if key in offer.match_keys():
                return offer
        aliases = [a for o in self.offers for a in (o.name, *o.aliases)]
        near = closest_names(name, aliases)
        offered = [self._owner(n) for n in near]
        hint = f"closest: {', '.join(dict.fromkeys(offered))}" if offered else \
            f"offers: {', '.join(self.names())}"
        raise BadInput(f"--gpu {name!r}: no such offer in the catalog; {hint} "
                       "(add your own with a project catalog.json or --catalog FILE)")

    def _owner(self, alias: str) -> str:
        key = normalize_name(alias)
        return next(o.name for o in self.offers if key in o.match_keys())


def load_catalog(project_root: Path | None = None, extra: Path | None = None) -> Catalog:
    """The shipped catalog, then the project's catalog.json, then ``extra`` (see module doc)."""
    merged: dict[str, Offer] = {}
    files = []
    for path in _layer_paths("catalog", project_root, extra):
        data = _load_checked(path, "catalog")
        files.append(str(path))
        for entry in data["offers"]:
            offer = Offer.from_json(entry, path)
            merged[normalize_name(offer.name)] = offer
    return Catalog(list(merged.values()), files)


# ---------------------------------------------------------------- pairings


def code_for(card: str, carried: Iterable[str]) -> str | None:
    """How a build carrying ``carried`` runs on ``card`` ("cubin sm_86", "PTX compute_120, ..."),
    or None when it has no code the card can execute.

    The rules are diagnose's own (kdkit.probe.gpurules), so a card judged here before ordering
    is judged the same way on the machine: a cubin runs on the same major with an equal or newer
    minor, PTX is compiled for newer cards, ROCm needs the exact gfx target.
    """
    from kdkit.probe.gpurules import cuda_arch_verdict, rocm_arch_verdict

    arch_list = list(carried)
    match = re.fullmatch(r"sm_([0-9]+)", card)
    if match is not None:
        verdict = cuda_arch_verdict(divmod(int(match.group(1)), 10), arch_list)
    else:
        verdict = rocm_arch_verdict(card, arch_list, None)
    return verdict.how if verdict.ok else None


@dataclass(frozen=True)
class Build:
    """One torch release built against one wheel index."""

    torch: str
    label: str
    backend: str
    toolkit: str
    architectures: tuple[str, ...]
    complete: bool
    source: str

    def code_for(self, card: str) -> str | None:
        """How this build runs on ``card``, or None (see the module function)."""
        return code_for(card, self.architectures)


def torch_minor(version: str) -> str:
    """``"2.6.0+cu124"`` -> ``"2.6"``."""
    parts = version.split("+", 1)[0].split(".")
    return ".".join(parts[:2])


def _minor_key(minor: str) -> tuple[int, ...]:
    return tuple(int(p) for p in minor.split("."))


@dataclass
class Pairings:
    data: dict[str, Any]
    files: list[str] = field(default_factory=list)

    def index(self, label: str) -> dict[str, str] | None:
        found: dict[str, str] | None = self.data["indexes"].get(label)
        return found

    def build(self, torch_version: str, label: str) -> Build | None:
        """The build of ``torch_version`` (any patch release) from index ``label``, if known."""
        minor = torch_minor(torch_version)
        set_name = self.data["torch"].get(minor, {}).get(label)
        if set_name is None:
            return None
        arch_set, index = self.data["arch_sets"][set_name], self.data["indexes"][label]
        return Build(minor, label, index["backend"], index["version"], tuple(arch_set["architectures"]),
                     arch_set["complete"], arch_set["source"])

    def builds(self) -> list[Build]:
        """Every known build, oldest torch first."""
        out = []
        for minor in sorted(self.data["torch"], key=_minor_key):
            for label in self.data["torch"][minor]:
                build = self.build(minor, label)
                if build is not None:
                    out.append(build)
        return out

    def builds_for(self, card: str, backend: str) -> list[Build]:
        """The builds of ``backend`` that carry code for ``card``, oldest torch first."""
        return [b for b in self.builds() if b.backend == backend and b.code_for(card) is not None]

    def min_driver(self, cuda_version: str) -> str | None:
        found: str | None = self.data["drivers"].get(cuda_version.split(".")[0])
        return found

    def known_torch(self) -> list[str]:
        return sorted(self.data["torch"], key=_minor_key)


_PAIRING_SECTIONS = ("sources", "drivers", "indexes", "arch_sets")


def _merge_pairings(merged: dict[str, Any], layer: dict[str, Any]) -> None:
    for section in _PAIRING_SECTIONS:
        merged[section].update(layer.get(section, {}))
    for minor, labels in layer.get("torch", {}).items():
        merged["torch"].setdefault(minor, {}).update(labels)


def _dangling(merged: dict[str, Any]) -> str | None:
    """The first torch entry naming an unknown index or arch set, described."""
    for minor, labels in merged["torch"].items():
        for label, set_name in labels.items():
            if label not in merged["indexes"]:
                return f"$.torch.{minor}.{label}: index {label!r} is not under $.indexes; add it there"
            if set_name not in merged["arch_sets"]:
                return f"$.torch.{minor}.{label}: arch set {set_name!r} is not under $.arch_sets; add it there"
    return None


def load_pairings(project_root: Path | None = None, extra: Path | None = None) -> Pairings:
    """The shipped pairings, then the project's pairings.json, then ``extra``, merged key by key."""
    merged: dict[str, Any] = {section: {} for section in (*_PAIRING_SECTIONS, "torch")}
    files = []
    for path in _layer_paths("pairings", project_root, extra):
        _merge_pairings(merged, _load_checked(path, "pairings"))
        files.append(str(path))
        problem = _dangling(merged)
        if problem is not None:
            raise BadInput(f"{path}: {problem}")
    return Pairings(merged, files)
