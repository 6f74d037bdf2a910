"""The GPU catalog: the offers people rent, shipped as data and extended by the user's own files.

The catalog, like the torch build pairings (kdkit.pairings), is JSON validated by a schema
(schemas/catalog.schema.json), never code, so a new card is a data change. Precedence, lowest first:

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


def layer_paths(kind: str, project_root: Path | None, extra: Path | None) -> list[Path]:
    paths = [data_file(f"{kind}.json")]
    if project_root is not None and (project_root / f"{kind}.json").is_file():
        paths.append(project_root / f"{kind}.json")
    if extra is not None:
        paths.append(extra)
    return paths


def load_checked(path: Path, schema: str) -> dict[str, Any]:
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
    cpu_arch: str = "x86_64"  # of the host the card comes in (GH200: aarch64)

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
            cpu_arch=data.get("cpu_arch", "x86_64"),
        )

    def match_keys(self) -> set[str]:
        return {normalize_name(n) for n in (self.name, *self.aliases)}

    def price(self, days: int) -> Decimal | None:
        return self.prices.get(days)

    def summary(self) -> dict[str, Any]:
        """The fields an order records about the offer."""
        return {"name": self.name, "vendor": self.vendor, "backend": self.backend,
                "memory_gb": self.memory_gb, "architecture": self.architecture, "cpu_arch": self.cpu_arch,
                "cards_per_lot": self.cards_per_lot}

    def as_dict(self) -> dict[str, Any]:
        return {**self.summary(), "generation": self.generation, "aliases": list(self.aliases),
                "price_per_lot_usd": {str(d): None if p is None else str(p) for d, p in self.prices.items()},
                "nominal": self.nominal, "note": self.note, "origin": self.origin}


_TOKEN = re.compile(r"[A-Za-z]*[0-9][A-Za-z0-9]*")


def model_token(name: str) -> str:
    """The word of a name that holds its model number: ``"RTX 4090"`` -> ``4090``, ``"A100-80GB"`` -> ``a100``,
    ``"T4"`` -> ``t4`` (empty when the name has no digit)."""
    match = _TOKEN.search(name)
    return match.group().lower() if match else ""


def same_model(a: str, b: str) -> bool:
    """Whether two model words name one card family: equal, or one extends the other with letters
    (``mi300`` / ``mi300x``, ``7900`` / ``7900xtx``), never with digits (``a10`` is no ``a100``,
    ``t4`` no ``4090``)."""
    if not a or not b:
        return False
    short, long = sorted((a, b), key=len)
    return long.startswith(short) and not long[len(short):len(short) + 1].isdigit()


def closest_names(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Spellings of the same card as ``name``: the same model word, and, where some are closer than
    others, those containing the name or a few characters from it (difflib). Never another model."""
    key, model = normalize_name(name), model_token(name)
    by_key: dict[str, str] = {}
    for candidate in candidates:
        if same_model(model, model_token(candidate)):
            by_key.setdefault(normalize_name(candidate), candidate)
    close = [k for k in by_key if key in k or k in key]
    close += [k for k in difflib.get_close_matches(key, list(by_key), n=n, cutoff=0.6) if k not in close]
    return [by_key[k] for k in close] or list(by_key.values())


@dataclass
class Catalog:
    offers: list[Offer]
    files: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return [o.name for o in self.offers]

    def find(self, name: str) -> Offer:
        """The offer called ``name`` (or one of its aliases).

        BadInput otherwise: a name that fits several offers (``A100``: 40 or 80 GB, PCIe or SXM) lists
        them and asks; an unknown one names close spellings of the same card, never another card."""
        key = normalize_name(name)
        for offer in self.offers:
            if key in offer.match_keys():
                return offer
        near = list(dict.fromkeys(self._owner(n) for n in closest_names(name, self._spellings())))
        fix = "pass one of them as --gpu (add your own with a project catalog.json or --catalog FILE)"
        if len(near) > 1:
            raise BadInput(f"--gpu {name!r}: fits {len(near)} offers: {', '.join(near)}; {fix}")
        if near:
            raise BadInput(f"--gpu {name!r}: no such offer in the catalog; did you mean {near[0]!r}? pass that name "
                           "(or add your own with a project catalog.json or --catalog FILE)")
        raise BadInput(f"--gpu {name!r}: no such offer in the catalog (offers: {', '.join(self.names())}); "
                       "add your own with a project catalog.json or --catalog FILE")

    def _spellings(self) -> list[str]:
        return [a for o in self.offers for a in (o.name, *o.aliases)]

    def _owner(self, alias: str) -> str:
        key = normalize_name(alias)
        return next(o.name for o in self.offers if key in o.match_keys())


def load_catalog(project_root: Path | None = None, extra: Path | None = None) -> Catalog:
    """The shipped catalog, then the project's catalog.json, then ``extra`` (see module doc)."""
    merged: dict[str, Offer] = {}
    files = []
    for path in layer_paths("catalog", project_root, extra):
        data = load_checked(path, "catalog")
        files.append(str(path))
        for entry in data["offers"]:
            offer = Offer.from_json(entry, path)
            merged[normalize_name(offer.name)] = offer
    return Catalog(list(merged.values()), files)
