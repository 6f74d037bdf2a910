"""config/service.json (kdkit.core.serviceconfig, issue 29): the service `kdkit serve-test` measures. Every key read,
the defaults, the policy list; a bad file is BadInput in one line naming the file and the JSON path, `kdkit validate`
reports it (exit 2), and schemas/service.schema.json agrees with the loader on the scaffold and on every bad case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.schemas import _validator
from kdkit.config.shipped import template_dir
from kdkit.core.errors import BadInput
from kdkit.core.serviceconfig import SERVICE_CONFIG, Objective, Policy, load_service
from tests.conftest import invoke, tree_snapshot

EXAMPLE: dict[str, Any] = {
    "max_request_bytes": 65536, "latency": {"p99_ms": 1000, "p95_ms": 300},
    "at_capacity": {"reject": 64},
    "batching": {"max_batch": [8, 1, 4], "max_wait_ms": [20, 5]}, "rates": [50, 5, 20],
    "requests_per_rate": 400,
    "seed": 1}
MINIMAL: dict[str, Any] = {"max_request_bytes": 1024, "latency": {"p99.9_ms": 50}, "rates": [10]}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "service.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def with_(**changes: Any) -> dict[str, Any]:
    """The example with top-level keys replaced (a value of ... removes the key)."""
    data = {**EXAMPLE, **changes}
    return {key: value for key, value in data.items() if value is not ...}


def schema_errors(data: Any) -> list[str]:
    return [error.message for error in _validator("service").iter_errors(data)]


def test_the_example_is_read_sorted(tmp_path: Path) -> None:
    cfg = load_service(write(tmp_path, {**EXAMPLE, "$schema": "x", "description": "a service",
                                        "max_seconds_per_rate": 30}))
    assert cfg.max_request_bytes == 65536 and cfg.requests_per_rate == 400 and cfg.seed == 1
    assert cfg.objectives == (Objective(95.0, 300.0), Objective(99.0, 1000.0))
    assert cfg.reject_at == 64 and cfg.capacity == "reject beyond 64 waiting"
    assert cfg.rates == (5, 20, 50) and cfg.max_seconds_per_rate == 30.0
    assert cfg.policies == (Policy(1, 0.0), Policy(4, 5.0), Policy(4, 20.0), Policy(8, 5.0),
                            Policy(8, 20.0))
    assert [o.name for o in cfg.objectives] == ["p95 <= 300 ms", "p99 <= 1000 ms"]
    assert schema_errors(EXAMPLE) == []


def test_the_defaults(tmp_path: Path) -> None:
    cfg = load_service(write(tmp_path, MINIMAL))
    assert (cfg.requests_per_rate, cfg.seed,
            cfg.max_seconds_per_rate, cfg.reject_at) == (400, 0, 60.0, 64)
    assert cfg.policies == (Policy(1, 0.0),) and cfg.objectives == (Objective(99.9, 50.0),)
    unbounded = load_service(write(tmp_path, {**MINIMAL, "at_capacity": {"queue": "unbounded"}}))
    assert unbounded.reject_at is None and unbounded.capacity == "an unbounded queue"
    assert schema_errors(MINIMAL) == [] and schema_errors(
        {**MINIMAL, "at_capacity": {"queue": "unbounded"}}) == []


def test_every_batch_with_every_wait_and_a_batch_of_one_never_waits(tmp_path: Path) -> None:
    cfg = load_service(
        write(tmp_path, with_(batching={"max_batch": [1, 4], "max_wait_ms": [5, 20]})))
    assert cfg.policies == (Policy(1, 0.0), Policy(4, 5.0), Policy(4, 20.0))
    assert [p.name
            for p in cfg.policies] == [
                "batch 1, wait 0 ms", "batch 4, wait 5 ms", "batch 4, wait 20 ms"]
    no_wait = load_service(write(tmp_path, with_(batching={"max_batch": [4, 4]})))
    # no max_wait_ms: a batch goes when full or at once
    assert no_wait.policies == (Policy(4, 0.0),)


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("rate zero", with_(rates=[5, 0]), "$.rates[1]"),
    ("rate negative", with_(rates=[-5]), "$.rates[0]"),
    ("rate a string", with_(rates=["x"]), "$.rates[0]"),
    ("rate null", with_(rates=[None]), "$.rates[0]"),
    ("rate a boolean", with_(rates=[True]), "$.rates[0]"),
    ("rate too high", with_(rates=[2_000_000]), "$.rates[0]"),
    ("no rate", with_(rates=[]), "$.rates"),
    ("rates missing", with_(rates=...), "$.rates"),
    ("percentile 0", with_(latency={"p0_ms": 300}), "$.latency.p0_ms"),
    ("percentile 0.0", with_(latency={"p95_ms": 300, "p0.0_ms": 3}), "$.latency.p0.0_ms"),
    ("percentile 100", with_(latency={"p100_ms": 300}), "$.latency.p100_ms"),
    ("percentile 150", with_(latency={"p150_ms": 300}), "$.latency.p150_ms"),
    ("no objective", with_(latency={}), "$.latency"),
    ("objective without percentile", with_(latency={"ms": 300}), "$.latency.ms"),
    ("objective not a number", with_(latency={"p95_ms": "300"}), "$.latency.p95_ms"),
    ("objective zero", with_(latency={"p95_ms": 0}), "$.latency.p95_ms"),
    ("latency missing", with_(latency=...), "$.latency"),
    ("capacity 0", with_(at_capacity={"reject": 0}), "$.at_capacity.reject"),
    ("capacity not whole", with_(at_capacity={"reject": 6.5}), "$.at_capacity.reject"),
    ("queue bounded", with_(at_capacity={"queue": "bounded"}), "$.at_capacity.queue"),
    ("capacity both", with_(at_capacity={"reject": 4, "queue": "unbounded"}), "$.at_capacity"),
    ("unknown capacity key", with_(at_capacity={"drop": 4}), "$.at_capacity.drop"),
    ("unknown top key", with_(rate=[5]), "$.rate"),
    ("unknown batching key",
     with_(batching={"max_batch": [1], "wait_ms": [5]}), "$.batching.wait_ms"),
    ("max_batch not whole", with_(batching={"max_batch": [1, 1.5]}), "$.batching.max_batch[1]"),
    ("max_batch zero", with_(batching={"max_batch": [0]}), "$.batching.max_batch[0]"),
    ("max_batch missing", with_(batching={"max_wait_ms": [5]}), "$.batching.max_batch"),
    ("max_wait_ms negative",
     with_(batching={"max_batch": [4], "max_wait_ms": [5, -1]}), "$.batching.max_wait_ms[1]"),
    ("max_wait_ms null",
     with_(batching={"max_batch": [4], "max_wait_ms": None}), "$.batching.max_wait_ms"),
    ("max_request_bytes missing", with_(max_request_bytes=...), "$.max_request_bytes"),
    ("max_request_bytes zero", with_(max_request_bytes=0), "$.max_request_bytes"),
    ("requests_per_rate not whole", with_(requests_per_rate=2.5), "$.requests_per_rate"),
    ("seed negative", with_(seed=-1), "$.seed"),
    ("seconds per rate zero", with_(max_seconds_per_rate=0), "$.max_seconds_per_rate"),
    ("seconds per rate over a day", with_(max_seconds_per_rate=90_000), "$.max_seconds_per_rate"),
    ("not an object", [EXAMPLE], "$"),  # type: ignore[list-item]
]


@pytest.mark.parametrize(("data", "where"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_bad_input_is_one_line_naming_file_and_path_and_the_schema_agrees(tmp_path: Path, data: Any,
                                                                          where: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(BadInput) as caught:
        load_service(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {where}: ") and "\n" not in message
    assert schema_errors(data), "the schema accepts what the loader refuses"


@pytest.mark.parametrize("text", ['{"rates": [NaN]}', '{"rates": [1], "rates": [2]}', "{nope", ""])
def test_what_is_not_strict_json_is_bad_input_naming_the_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(BadInput, match="^" + str(path)) as caught:
        load_service(path)
    assert "\n" not in str(caught.value)


def test_a_missing_file_says_how_to_get_one(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="not found; `kdkit init` writes an example"):
        load_service(tmp_path / "none.json")


def test_the_scaffold_passes_the_loader_and_the_schema_and_is_small(project: Path) -> None:
    shipped = template_dir() / SERVICE_CONFIG
    assert (project / SERVICE_CONFIG).read_bytes() == shipped.read_bytes()  # `kdkit init` writes it
    data = json.loads(shipped.read_text(encoding="utf-8"))
    assert schema_errors(data) == []
    cfg = load_service(project / SERVICE_CONFIG)
    # the open-loop schedule alone: every policy offers requests_per_rate at every rate, one after another
    schedule = len(cfg.policies) * sum(cfg.requests_per_rate / rate for rate in cfg.rates)
    assert schedule <= 40 and max(cfg.requests_per_rate / rate
                                  for rate in cfg.rates) <= cfg.max_seconds_per_rate
    assert invoke("validate", project).exit_code == 0


@pytest.mark.parametrize(("data", "where"), [
    (with_(rates=[0]), "$.rates[0]"),
    (with_(latency={"p100_ms": 300}), "$.latency.p100_ms"),
    (with_(latency={}), "$.latency"),
    (with_(at_capacity={"reject": 0}), "$.at_capacity.reject"),
    (with_(batching={"max_batch": [1.5]}), "$.batching.max_batch[0]"),
    (with_(batching={"max_batch": [4], "max_wait_ms": [-1]}), "$.batching.max_wait_ms[0]"),
    (with_(colour="red"), "$.colour"),
])
def test_validate_reports_a_bad_service_file_in_one_line(
    project: Path, data: dict[str, Any], where: str) -> None:
    service = project / SERVICE_CONFIG
    service.write_text(json.dumps(data), encoding="utf-8")
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2
    named = [line for line in result.stderr.splitlines() if "service.json" in line]
    assert named == [line for line in named
                     if line.startswith(f"{service}: {where}: ")] and len(named) == 1
    assert "1 problem(s) found" in result.stderr
    assert tree_snapshot(project) == before  # validate writes nothing


def test_validate_reports_malformed_json_at_its_line(project: Path) -> None:
    service = project / SERVICE_CONFIG
    service.write_text('{"rates": [1],\n  "seed": }\n', encoding="utf-8")
    result = invoke("validate", project)
    assert result.exit_code == 2 and f"{service}: line 2 column " in result.stderr


def test_a_project_without_a_service_file_is_valid(project: Path) -> None:
    (project / SERVICE_CONFIG).unlink()
    assert invoke("validate", project).exit_code == 0
