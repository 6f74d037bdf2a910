"""The GPU catalog: the offers people rent, shipped as data and extended by the user's own files.

The catalog, like the torch build pairings (kdkit.facts.pairings), is JSON validated by a schema
(schemas/catalog.schema.json), never code, so a new card is a data change. Precedence, lowest first:

1. the file shipped with kdkit (kdkit/data/catalog.json, kdkit/data/pairings.json);
2. ``catalog.json`` / ``pairings.json`` at the project root, when there is one;
3. the file given with ``--catalog FILE`` / ``--pairings FILE``.

A catalog offer of the same name (ignoring case, spaces and dashes) replaces the earlier one
whole; other offers are added. Pairings merge key by key.

An offer's ``figure_sources`` names, for each figure it carries (``memory_gb``, ``architecture``,
each nominal figure), the keys of ``sources`` (of its own file or an earlier layer) that state it.
The shipped catalog gives it for every offer; a user's offer may leave it out, but one that gives it
must cover every non-null figure and name only known sources, or the file is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.config.schemas import load_valid, secret_problems
from kdkit.config.shipped import data_file
from kdkit.core.errors import BadInput

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.facts.catalogrecords import NominalFigures, OfferEntry, OfferRow, OfferSummary

DURATIONS = (3, 7, 30)
# The most a lot may cost (the catalog's prices and ``kdkit plan --price``): refuses typos, and
# keeps Decimal's 28 digits exact for a plan's total (1e26 is finite, but no cent of it can be
# computed).
MAX_LOT_PRICE = Decimal(10_000_000)


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
    nominal: NominalFigures | None = None
    note: str = ""
    origin: str = ""
    cpu_arch: str = "x86_64"  # of the host the card comes in (GH200: aarch64)
    figure_sources: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: OfferEntry, origin: Path) -> Offer:
        prices = data["price_per_lot_usd"]
        return cls(
            name=data["name"],
            vendor=data["vendor"],
            backend=data["backend"],
            memory_gb=data["memory_gb"],
            architecture=data["architecture"],
            cards_per_lot=data["cards_per_lot"],
            # str() first: the JSON literal 47.14 becomes exactly Decimal("47.14").
            prices={d: None if prices[str(d)] is None else Decimal(str(prices[str(d)]))
                    for d in DURATIONS},
            generation=data.get("generation", ""),
            aliases=tuple(data.get("aliases", ())),
            nominal=data.get("nominal"),
            note=data.get("note", ""),
            origin=str(origin),
            cpu_arch=data.get("cpu_arch", "x86_64"),
            figure_sources={key: tuple(keys) for key,
                            keys in data.get("figure_sources", {}).items()},
        )

    def match_keys(self) -> set[str]:
        return {normalize_name(n) for n in (self.name, *self.aliases)}

    def price(self, days: int) -> Decimal | None:
        return self.prices.get(days)

    def summary(self) -> OfferSummary:
        """The fields an order records about the offer."""
        return {"name": self.name, "vendor": self.vendor, "backend": self.backend,
                "memory_gb": self.memory_gb, "architecture": self.architecture,
                "cpu_arch": self.cpu_arch,
                "cards_per_lot": self.cards_per_lot}

    def as_dict(self) -> OfferRow:
        return {**self.summary(), "generation": self.generation, "aliases": list(self.aliases),
                "price_per_lot_usd": {str(d): None if p is None else str(p) for d,
                                      p in self.prices.items()},
                "nominal": self.nominal, "note": self.note, "origin": self.origin,
                "figure_sources": {key: list(keys) for key, keys in self.figure_sources.items()}}


_TOKEN = re.compile(r"[A-Za-z]*[0-9][A-Za-z0-9]*")


def model_token(name: str) -> str:
    """The word of a name that holds its model number: ``"RTX 4090"`` -> ``4090``, ``"A100-80GB"``
    -> ``a100``, ``"T4"`` -> ``t4`` (empty when the name has no digit)."""
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


_SIZE = re.compile(r"(\d+)\s*gb\b", re.IGNORECASE)
_FORMS = ("pcie", "sxm", "nvl", "oam")
_GENERATIONS = ("turing", "volta", "ampere", "ada", "hopper", "blackwell", "cdna", "rdna")


# Words that make another card of the same model number (an RTX 4080 SUPER is no RTX 4080, a 3090 Ti
# no 3090, an RTX 4090 D no RTX 4090); kdkit.probe.diagnose.nominal.TIERS holds the same words for
# the driver's names.
_TIERS = {"ti", "super", "d"}

# Words that say nothing about which card it is: vendors and brands, memory kinds, filler.
_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro", "amd", "radeon", "instinct", "gb", "hbm",
                 "gddr", "edition",
                 "generation", "gpu", "card"}


def _words(name: str) -> set[str]:
    """The letter words of a name that tell cards apart (``rtx``, ``pro``, ``sxm``), vendor words
    left out."""
    return {w for w in re.findall(r"[a-z]{2,}", name.lower()) if w not in _VENDOR_WORDS}


def contradicts(name: str, offer: Offer) -> bool:
    """Whether ``name`` states something the offer is not: another memory size (``80GB``), another
    form (``PCIe``, ``SXM4``, ``NVL``) or another generation (``Ada``)."""
    words = re.findall(r"[a-z]+", name.lower())
    if _TIERS & set(words) != _TIERS & set(re.findall(r"[a-z]+", offer.name.lower())):
        return True
    sizes = {int(size) for size in _SIZE.findall(name)}
    if sizes and round(offer.memory_gb) not in sizes:
        return True
    form = str((offer.nominal or {}).get("form_factor", "")).lower()
    stated = {f for f in _FORMS for word in words if word.startswith(f)}
    if stated and form and not any(form.startswith(f) for f in stated):
        return True
    if any(word == g and g not in offer.generation.lower() for word in words for g in _GENERATIONS):
        return True
    # Every distinguishing word of the name must be one of the offer's (``RTX PRO 6000`` is no ``RTX
    # 6000 Ada``).
    own = set().union(*(_words(spelling) for spelling in (offer.name, *offer.aliases)),
                      {offer.generation.lower()})
    return not all(any(o.startswith(w) for o in own) for w in _words(name))


@dataclass
class Catalog:
    offers: list[Offer]
    files: list[str] = field(default_factory=list)

    def names(self) -> list[str]:
        return [o.name for o in self.offers]

    def candidates(self, name: str) -> list[Offer]:
        """The offers ``name`` fits: the one it names (name or alias), else every offer of the same
        model that the name does not contradict (``V100``: the SXM2 16/32 GB and PCIe offers), else
        none."""
        key = normalize_name(name)
        exact = [offer for offer in self.offers if key and key in offer.match_keys()]
        if exact:
            return exact[:1]
        model = model_token(name)
        return [o for o in self.offers if not contradicts(name, o)
                and any(same_model(model, model_token(spelling))
                        for spelling in (o.name, *o.aliases))]

    def find_architecture(self, name: str) -> tuple[Offer, tuple[str, ...]]:
        """For judging the architecture only (``kdkit check``): the offer ``name`` names, or, when a
        bare name fits several offers that share architecture, backend and host CPU (``V100``: SXM2
        16/32 GB, PCIe), the first of them and the names of all (memory and price then differ: the
        caller names the choices). Otherwise as :meth:`find` (BadInput). ``plan`` keeps
        :meth:`find`: it needs the one offer."""
        key = normalize_name(name)
        fits = self.candidates(name) if key else []
        # "V100", not "V100 A100"
        named = all(any(k.startswith(key) for k in o.match_keys()) for o in fits)
        if len(fits) > 1 and named \
                and len({(o.architecture, o.backend, o.cpu_arch) for o in fits}) == 1:
            return fits[0], tuple(o.name for o in fits)
        offer = self.find(name)
        return offer, (offer.name,)

    def find(self, name: str) -> Offer:
        """The offer called ``name`` (or one of its aliases).

        BadInput otherwise: a name that fits several offers (``A100``: 40 or 80 GB, PCIe or SXM)
        lists them and asks; an unknown one names close spellings of the same card, never another
        card."""
        key = normalize_name(name)
        if not key:
            raise BadInput(
                "--gpu: empty name; pass an offer of the catalog, e.g. --gpu \"RTX 4090\"")
        name = name if len(name) <= 80 else name[:77] + "..."
        for offer in self.offers:
            if key in offer.match_keys():
                return offer
        near = [o.name for o in self.candidates(name)]
        fix = (
            "pass one of them as --gpu (add your own with a project catalog.json or --catalog "
            "FILE)")
        if len(near) > 1:
            raise BadInput(f"--gpu {name!r}: fits {len(near)} offers: {', '.join(near)}; {fix}")
        if near:
            raise BadInput(f"--gpu {name!r}: no such offer in the catalog; did you mean "
                           f"{near[0]!r}? pass that name (or add your own with a project "
                           "catalog.json or --catalog FILE)")
        raise BadInput(f"--gpu {name!r}: no such offer in the catalog (offers: "
                       f"{', '.join(self.names())}); add your own with a project catalog.json or "
                       "--catalog FILE")


def load_catalog(project_root: Path | None = None, extra: Path | None = None) -> Catalog:
    """The shipped catalog, then the project's catalog.json, then ``extra`` (see module doc)."""
    merged: dict[str, Offer] = {}
    files = []
    sources: set[str] = set()
    for path in layer_paths("catalog", project_root, extra):
        data = load_checked(path, "catalog")
        # sources and notes are shown and stored with orders
        for secret in secret_problems(data, path)[:1]:
            raise BadInput(f"{path}: {secret.name}: {secret.why.split(';')[0]}; a catalog names "
                           "where its figures are published, never a credential: remove it")
        files.append(str(path))
        sources |= set(data.get("sources", {}))
        for number, entry in enumerate(data["offers"]):
            where, problem = f"$.offers[{number}]", _incoherent(entry) or unsourced(entry, sources)
            if not problem:
                where, problem = _unusable(entry, where)
            if problem:
                raise BadInput(f"{path}: {where}: {problem}")
            offer = Offer.from_json(entry, path)
            merged[normalize_name(offer.name)] = offer
    owners: dict[str, Offer] = {}
    for offer in merged.values():
        for key in offer.match_keys():
            other = owners.setdefault(key, offer)
            if other is not offer:
                raise BadInput(f"{offer.origin}: offer {offer.name!r} answers to {key!r} like "
                               f"{other.name!r} of {other.origin}; rename one (an alias must name "
                               "one card)")
    return Catalog(list(merged.values()), files)


_VENDOR_RULES = {"nvidia": ("cuda", "sm_"), "amd": ("rocm", "gfx")}


def _incoherent(entry: OfferEntry) -> str | None:
    """Why an offer contradicts itself (an NVIDIA card with a gfx target, a blank name), or None."""
    if not normalize_name(entry["name"]):
        return "name is blank; give the card's name"
    backend, prefix = _VENDOR_RULES[entry["vendor"]]
    if entry["backend"] != backend or not entry["architecture"].startswith(prefix):
        return (f"{entry['vendor']} card {entry['name']!r} has backend {entry['backend']} and "
                f"architecture {entry['architecture']}; an {entry['vendor']} card runs {backend} "
                f"with an {prefix}... architecture")
    return None


def _unusable(entry: OfferEntry, where: str) -> tuple[str, str | None]:
    """(JSON path, why) of a field kdkit could not use: a device_pattern that is no regular
    expression, a price above MAX_LOT_PRICE; (where, None) when none."""
    pattern = entry.get("device_pattern")
    if isinstance(pattern, str):
        try:
            re.compile(pattern, re.IGNORECASE)
        except (re.error, RecursionError, OverflowError) as error:
            return f"{where}.device_pattern", (f"not a regular expression ({error}); write one "
                                               "that matches the device name the driver prints, "
                                               "e.g. \\bRTX 4090\\b")
    for days, price in entry["price_per_lot_usd"].items():
        if price is not None \
                and (not Decimal(str(price)).is_finite() or Decimal(str(price)) > MAX_LOT_PRICE):
            return f"{where}.price_per_lot_usd.{days}", (f"{price} USD for one lot is more than "
                                                         f"{MAX_LOT_PRICE} USD; give the "
                                                         "provider's price of one lot (or null)")
    return where, None


FIGURES = ("memory_gb", "architecture", "tf32_dense_tflops", "fp16_dense_tflops",
           "bf16_dense_tflops",
           "memory_bandwidth_gb_s")


def carried_figures(entry: OfferEntry) -> list[str]:
    """The figures an offer states (not null): memory and architecture always, the nominal ones it
    gives."""
    nominal: Mapping[str, object] = entry.get("nominal") or {}
    return [f for f in FIGURES
            if (entry.get(f) if f in ("memory_gb", "architecture") else nominal.get(f)) is not None]


def unsourced(entry: OfferEntry, sources: set[str]) -> str | None:
    """Why an offer's ``figure_sources`` does not hold (a figure it carries without a source, a
    source key that no ``sources`` names), or None; an offer without ``figure_sources`` is not
    judged here."""
    cited = entry.get("figure_sources")
    if cited is None:
        return None
    missing = [f for f in carried_figures(entry) if f not in cited]
    if missing:
        return (f"figure_sources names no source for {', '.join(missing)}; add the keys of "
                "$.sources that state them (or remove figure_sources from this offer)")
    unknown = sorted({key for keys in cited.values() for key in keys} - sources)
    if unknown:
        return (f"figure_sources cites {', '.join(unknown)}, which no $.sources names; add them to "
                "$.sources (a key and where the figure is published)")
    return None
