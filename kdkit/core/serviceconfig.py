"""config/service.json: the interactive service ``kdkit serve-test`` measures, declared before it is
measured (schemas/service.schema.json describes the same file). A bad file is BadInput (exit 2), one
line naming the file, the JSON path and what to do.

    {"max_request_bytes": 65536,
     "latency": {"p95_ms": 300, "p99_ms": 1000},
     "at_capacity": {"reject": 64},              # or {"queue": "unbounded"}
     "batching": {"max_batch": [1, 4, 8], "max_wait_ms": [5, 20]},
     "rates": [5, 20, 50], "requests_per_rate": 400, "seed": 1,
     "max_seconds_per_rate": 60}

The inputs and the quality criterion are the pilot's (config/pilot.json). Standard library only (the
in-container side reads it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kdkit.core.configreader import ConfigReader
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import load_json

SERVICE_CONFIG = "config/service.json"
PERCENTILE_KEY = re.compile(r"p([0-9]{1,2}(?:\.[0-9]{1,3})?)_ms")
_TOP = {"max_request_bytes", "latency", "at_capacity", "batching", "rates", "requests_per_rate",
        "seed",
        "max_seconds_per_rate", "$schema", "description"}
MAX_RATE = 1_000_000.0  # requests per second
MAX_REQUESTS = 100_000  # per rate: every request is recorded, in memory and in requests.jsonl
MAX_LIST = 32  # values of max_batch, of max_wait_ms and of rates
MAX_CONFIGURATIONS = 256  # policies x rates: each one is played for up to max_seconds_per_rate
MAX_BATCH = 1_000_000
DEFAULT_SECONDS_PER_RATE = 60.0


@dataclass(frozen=True)
class Objective:
    """``percentile`` % of requests answered within ``ms`` milliseconds, counted from their
    scheduled arrival."""

    percentile: float
    ms: float

    @property
    def name(self) -> str:
        return f"p{self.percentile:g} <= {self.ms:g} ms"


@dataclass(frozen=True)
class Policy:
    """A batch goes when it holds ``max_batch`` requests or its oldest has waited
    ``max_wait_ms``."""

    max_batch: int
    max_wait_ms: float

    @property
    def name(self) -> str:
        return f"batch {self.max_batch}, wait {self.max_wait_ms:g} ms"


@dataclass(frozen=True)
class ServiceConfig:
    source: str  # the file read, as given
    max_request_bytes: int
    objectives: tuple[Objective, ...]  # by percentile, lowest first
    # requests waiting beyond which a new one is refused; None: an unbounded queue
    reject_at: int | None
    policies: tuple[Policy, ...]  # every max_batch with every max_wait_ms
    rates: tuple[float, ...]  # requests per second, lowest first
    requests_per_rate: int
    seed: int
    max_seconds_per_rate: float

    @property
    def capacity(self) -> str:
        return ("an unbounded queue" if self.reject_at is None
                else f"reject beyond {self.reject_at} waiting")


def _positive_list(reader: ConfigReader, data: dict[str, Any], key: str, where: str, *, whole: bool,
                   top: float) -> list[float]:
    values = data.get(key)
    if not isinstance(values, list) or not values or len(values) > MAX_LIST:
        raise reader.bad(f"{where}.{key}",
                         f"must be a list of 1 to {MAX_LIST} positive numbers, e.g. [1, 4, 8]")
    out = []
    for index, item in enumerate(values):
        value = reader.checked(item, f"{where}.{key}[{index}]", whole=whole, above=True)
        if value > top:
            raise reader.bad(f"{where}.{key}[{index}]",
                             f"must be a {'whole ' if whole else ''}number above 0 and "
                             f"at most {top:,g}")
        out.append(value)
    return sorted(set(out))


def _objectives(reader: ConfigReader, data: Any) -> tuple[Objective, ...]:
    if not isinstance(data, dict) or not data:
        raise reader.bad("$.latency",
                         'must name at least one percentile objective, e.g. {"p95_ms": 300}')
    found = []
    for key in data:
        match = PERCENTILE_KEY.fullmatch(key) if isinstance(key, str) else None
        if match is None or not 0 < float(match.group(1)) < 100:
            raise reader.bad(f"$.latency.{str(key)[:40]}",
                             "must be a percentile between 0 and 100 in milliseconds, "
                             "e.g. p95_ms or p99.9_ms")
        ms = reader.number(data, key, "$.latency", above=True)
        if ms is None or ms > 86_400_000:
            raise reader.bad(f"$.latency.{key}", "must be a number of milliseconds above 0")
        found.append(Objective(float(match.group(1)), float(ms)))
    return tuple(sorted(found, key=lambda o: o.percentile))


def _capacity(reader: ConfigReader, data: Any) -> int | None:
    choices = 'give {"reject": N} (refuse a request when N wait) or {"queue": "unbounded"}'
    if data is None:
        return 64
    if not isinstance(data, dict) or len(data) != 1:
        raise reader.bad("$.at_capacity", choices)
    if "queue" in data:
        if data["queue"] != "unbounded":
            raise reader.bad("$.at_capacity.queue", choices)
        return None
    if "reject" not in data:
        raise reader.bad(f"$.at_capacity.{str(next(iter(data)))[:40]}", choices)
    limit = reader.number(data, "reject", "$.at_capacity", whole=True, above=True)
    if limit is None or limit > MAX_REQUESTS:
        raise reader.bad("$.at_capacity.reject",
                         f"must be a whole number of waiting requests from 1 to "
                         f"{MAX_REQUESTS:,}; 0 would refuse every request")
    return int(limit)


def _policies(reader: ConfigReader, data: Any) -> tuple[Policy, ...]:
    batching = reader.keys({"max_batch": [1], "max_wait_ms": [0]} if data is None else data,
                           "$.batching",
                           {"max_batch", "max_wait_ms"})
    sizes = _positive_list(reader, batching, "max_batch", "$.batching", whole=True, top=MAX_BATCH)
    waits = batching.get("max_wait_ms", [0])
    if not isinstance(waits, list) or not waits or len(waits) > MAX_LIST:
        raise reader.bad("$.batching.max_wait_ms",
                         f"must be a list of 1 to {MAX_LIST} numbers of milliseconds, e.g. "
                         "[5, 20]")
    # + 0.0: a wait of -0.0 is none, and is shown as 0
    checked = sorted({float(reader.checked(wait, f"$.batching.max_wait_ms[{i}]")) + 0.0
                      for i, wait in enumerate(waits)})
    if checked[-1] > 3_600_000:
        raise reader.bad("$.batching.max_wait_ms", "must be at most 3,600,000 ms")
    # a batch of one never waits for company: one policy per size 1, whatever the waits
    return tuple(
        dict.fromkeys(Policy(int(size), wait if size > 1 else 0.0) for size in sizes
                      for wait in checked))


def load_service(path: Path) -> ServiceConfig:
    """The service file read and checked once; BadInput (exit 2) on anything wrong, before anything
    runs."""
    if path.is_dir():
        raise BadInput(
            f"{path}: is a folder, not a service file; give the JSON file (--config FILE)")
    if not path.exists():
        raise BadInput(f"{path}: not found; `kdkit init` writes an example, or give --config FILE")
    reader = ConfigReader(path)
    data = reader.keys(load_json(path, what="service config"), "$", _TOP)
    size = reader.number(data, "max_request_bytes", "$", whole=True, above=True)
    if size is None:
        raise reader.bad("$.max_request_bytes",
                         "is required: the largest request the service accepts, in bytes")
    count = reader.number(data, "requests_per_rate", "$", whole=True, above=True) or 400
    seconds = reader.number(data, "max_seconds_per_rate",
                            "$", above=True) or DEFAULT_SECONDS_PER_RATE
    if count > MAX_REQUESTS or seconds > 86_400:
        raise reader.bad("$.requests_per_rate" if count > MAX_REQUESTS
                         else "$.max_seconds_per_rate",
                         f"at most {MAX_REQUESTS:,} requests and 86,400 seconds per rate")
    config = ServiceConfig(
        source=str(path), max_request_bytes=int(size),
        objectives=_objectives(reader, data.get("latency")),
        reject_at=_capacity(reader, data.get("at_capacity")),
        policies=_policies(reader, data.get("batching")),
        rates=tuple(_positive_list(reader, data, "rates", "$", whole=False, top=MAX_RATE)),
        requests_per_rate=int(count), seed=int(reader.number(data, "seed", "$", whole=True) or 0),
        max_seconds_per_rate=float(seconds))
    if len(config.policies) * len(config.rates) > MAX_CONFIGURATIONS:
        raise reader.bad("$.batching",
                         f"{len(config.policies)} policies x {len(config.rates)} rates make more "
                         f"than {MAX_CONFIGURATIONS} configurations; try fewer values of each")
    return config
