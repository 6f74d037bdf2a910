"""`kdkit serve-test --url`: a running service driven over HTTP (kdkit.probe.serve.http), against a real local
server (tests/serve_server.py) holding the template project's app."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.serviceconfig import Objective
from kdkit.probe.serve import stats
from kdkit.probe.serve.http import check_url, drive, endpoint, load_template, probe, request_body
from tests.serve_server import LocalServer, Predict, load_app

TEXTS = [("a", "Please pay invoice 42 by Friday."),
         ("b", "The parties agree to the terms of this contract."),
         ("c", 'My "laptop" will not start;\nplease help. Ünïcode ✓')]
LOOSE = (Objective(95.0, 60_000.0),)
KEYS = {"index", "id", "bytes", "arrival", "start", "end", "batch", "outcome", "quality", "status"}
CATEGORIES = {"invoice", "contract", "research", "support"}


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Predict]:
    """The template project (as `kdkit init` writes it) and its predict, loaded once for the module."""
    from kdkit.project.init import init_project

    root = init_project(tmp_path_factory.mktemp("serve-http") / "proj", name="proj", backend="cpu")
    return root, load_app(root)


def serve(app: tuple[Path, Predict], **knobs: Any) -> LocalServer:
    return LocalServer(app[0], predict=app[1], **knobs)


def run(url: str, api: str = "json", arrivals: list[float] | None = None,
        texts: list[tuple[str, str]] | None = None,
        **options: Any) -> list[dict[str, Any]]:
    settings: dict[str, Any] = {"max_request_bytes": 65536, "timeout_s": 5.0, "max_seconds": 20.0,
                                "objectives": LOOSE, "template": None}
    settings.update(options)
    template = settings.pop("template")
    times = arrivals if arrivals is not None else [i * 0.02 for i in range(12)]
    return drive(url, api, template, texts or TEXTS, times, **settings)


def outcomes(records: list[dict[str, Any]]) -> list[str]:
    return [r["outcome"] for r in records]


@pytest.fixture
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


def test_json_mode_answers_every_request_with_complete_records(app: tuple[Path, Predict]) -> None:
    with serve(app, delay_s=0.05) as server:
        records = run(server.url + "/predict")
    assert outcomes(records) == ["answered"] * 12
    for i, record in enumerate(records):
        assert set(record) >= KEYS and record["index"] == i and record["id"] == TEXTS[i % 3][0]
        assert record["status"] == 200 and record["batch"] == 1 and record["quality"] is None
        assert record["bytes"] == len(json.dumps({"text": TEXTS[i % 3][1]}, ensure_ascii=False,
                                                 separators=(",", ":")).encode())
        assert record["arrival"] <= record["start"] <= record["end"]
        # the server's delay, counted from the scheduled arrival
        assert record["end"] - record["arrival"] >= 0.05
        assert "beyond_limit" not in record
    assert sorted(body["text"]
                  for body in server.bodies) == sorted(TEXTS[i % 3][1] for i in range(12))
    summary = stats.summarize(records, LOOSE, None)
    assert summary["meets"] and summary["outcomes"]["answered"] == 12 and summary["latency_ms"]["p50"] >= 50


def test_a_template_is_filled_as_json_wherever_the_placeholder_stands(app: tuple[Path, Predict],
                                                                       tmp_path: Path) -> None:
    path = tmp_path / "body.json"
    path.write_text(
        json.dumps({"text": "{{text}}", "meta": ["re: {{text}}!", 3, None, {"{{text}}": "k"}]}))
    template = load_template(path)
    with serve(app) as server:
        records = run(server.url + "/predict", template=path, arrivals=[0.0], texts=[TEXTS[2]])
    assert outcomes(records) == ["answered"]
    text = TEXTS[2][1]
    assert server.bodies == [{"text": text, "meta": [f"re: {text}!", 3, None, {"{{text}}": "k"}]}]
    assert json.loads(request_body("json", text, template)) == server.bodies[0]


@pytest.mark.parametrize(("api", "suffix"),
                         [("completions", ""), ("chat", "/v1"), ("chat", "/v1/chat/completions")])
def test_streams_record_time_to_first_token_and_between_tokens(app: tuple[Path, Predict], api: str,
                                                                suffix: str) -> None:
    with serve(app, token_delay_s=0.01) as server:
        records = run(server.url + suffix, api, arrivals=[0.0, 0.03, 0.06], model="m", max_tokens=4)
    assert outcomes(records) == ["answered"] * 3
    for record in records:
        latency = record["end"] - record["arrival"]
        assert isinstance(record["ttft"], float) and 0 < record["ttft"] <= latency
        category = predicted(app, TEXTS[record["index"]][1])
        assert len(record["itl"]) == len(category) - 1 and all(gap >= 0 for gap in record["itl"])
    assert all(body["model"] == "m" and body["stream"] is True and body["max_tokens"] == 4
               for body in server.bodies)
    sent = sorted(body["messages"][0]["content"] if api == "chat" else body["prompt"]
                  for body in server.bodies)
    assert sent == sorted(text for _, text in TEXTS)
    assert all(len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
               for body in server.bodies
               if api == "chat")
    summary = stats.summarize(records, LOOSE, None)
    assert summary["ttft_ms"]["max"] is not None and summary["itl_ms"]["max"] is not None


def predicted(app: tuple[Path, Predict], text: str) -> str:
    category: str = app[1]([{"id": "r", "text": text, "sha256": ""}])[0]["category"]
    assert category in CATEGORIES
    return category


def test_the_openai_endpoints_are_found_under_the_urls_path() -> None:
    assert endpoint(check_url("http://h:8000"), "completions") == "/v1/completions"
    assert endpoint(check_url("http://h:8000/v1/"), "chat") == "/v1/chat/completions"
    assert endpoint(
        check_url("http://h/base/v1/completions?k=1"), "completions") == "/base/v1/completions?k=1"
    assert endpoint(check_url("http://h:8000/predict?x=1"), "json") == "/predict?x=1"
    assert "model" not in json.loads(request_body("completions", "t"))


def test_a_body_over_the_services_limit_is_refused_as_too_large(app: tuple[Path, Predict]) -> None:
    texts = [("small", "short text"), ("big", "word " * 200)]
    with serve(app, max_bytes=300) as server:
        records = run(server.url + "/predict", arrivals=[0.0, 0.02, 0.04, 0.06],
                      texts=texts, max_request_bytes=300)
    assert outcomes(records) == ["answered", "rejected_too_large"] * 2
    assert [r["status"] for r in records] == [200, 413] * 2
    # refused by the declared limit: not judged
    assert stats.summarize(records, LOOSE, None)["meets"]


def test_a_body_over_the_declared_limit_that_is_answered_is_flagged(
    app: tuple[Path, Predict]) -> None:
    texts = [("small", "short text"), ("big", "word " * 200)]
    with serve(app) as server:
        records = run(server.url + "/predict", arrivals=[0.0, 0.02],
                      texts=texts, max_request_bytes=300)
    assert outcomes(records) == ["answered", "answered"]
    assert "beyond_limit" not in records[0] and records[1]["beyond_limit"] is True


def test_a_service_at_capacity_is_counted_as_refusing(app: tuple[Path, Predict]) -> None:
    with serve(app, capacity=1, delay_s=1.0) as server:
        # no early stop
        records = run(server.url + "/predict", arrivals=[0.0, 0.05, 0.1, 0.15], objectives=())
    assert outcomes(records).count("answered") >= 1 and outcomes(records).count(
        "rejected_at_capacity") >= 2
    assert all(r["status"] == 503 for r in records if r["outcome"] == "rejected_at_capacity")
    summary = stats.summarize(records, LOOSE, None)
    # late: p95 not met
    assert not summary["meets"] and summary["outcomes"]["rejected_at_capacity"] >= 2


@pytest.mark.parametrize("url",
                         ["ftp://127.0.0.1/x", "file:///etc/passwd", "http://",
                          "127.0.0.1:8000/predict",
                          "http://user:pw@127.0.0.1/", "http://127.0.0.1:99999/", "http://h/a b"])
def test_a_url_that_is_not_http_with_a_host_is_bad_input(url: str) -> None:
    with pytest.raises(BadInput) as caught:
        check_url(url)
    assert caught.value.exit_code == 2 and "\n" not in str(caught.value)
    with pytest.raises(BadInput):
        run(url)


def test_a_url_where_nothing_answers_is_unavailable_without_hanging(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/predict"
    began = time.monotonic()
    with pytest.raises(Unavailable) as caught:
        probe(url, timeout=2)
    # a hang only: a closed port refuses at once, the probe's timeout is 2 s
    assert time.monotonic() - began < 120
    assert caught.value.exit_code == 3 and url in str(caught.value) and "\n" not in str(
        caught.value)
    with pytest.raises(Unavailable):
        probe("http://nothing-here.invalid/predict", timeout=2)
    # driven anyway: every request fails, none hangs
    records = run(url, arrivals=[0.0, 0.01], objectives=())
    assert outcomes(records) == ["error", "error"] and all(
        r["start"] is None and r["error"] for r in records)


def test_probe_passes_a_url_where_a_service_listens(app: tuple[Path, Predict]) -> None:
    with serve(app) as server:
        assert probe(server.url + "/predict").port == int(server.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("content", ["{not json", '{"text": "no placeholder"}', "\udcff"])
def test_a_template_that_is_not_a_json_template_is_bad_input(tmp_path: Path, content: str) -> None:
    path = tmp_path / "template.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(BadInput) as caught:
        load_template(path)
    assert str(path) in str(caught.value) and caught.value.exit_code == 2
    with pytest.raises(BadInput):
        run("http://127.0.0.1:1/", template=path)


def stalled_run(app: tuple[Path, Predict], **options: Any) -> list[dict[str, Any]]:
    texts = [(f"t{i}", f"invoice number {i}" + (" STALL" if i == 1 else "")) for i in range(8)]
    with serve(app, stall_marker="STALL", stall_s=1.0) as server:
        return run(server.url + "/predict", arrivals=[i * 0.05 for i in range(8)],
                   texts=texts, **options)


def test_a_stalled_request_does_not_hold_back_the_ones_after_it(app: tuple[Path, Predict]) -> None:
    records = stalled_run(app)
    assert outcomes(records) == ["answered"] * 8
    stalled = records[1]
    assert stalled["end"] - stalled["arrival"] >= 1.0
    # sent on schedule, on other connections, while the stalled one was out
    for record in records[2:]:
        assert record["start"] < stalled["end"]


def test_latency_counts_from_the_scheduled_arrival_when_sending_falls_behind(
    app: tuple[Path, Predict]) -> None:
    # one connection: the rest wait behind the stalled request
    records = stalled_run(app, concurrency_limit=1)
    assert outcomes(records) == ["answered"] * 8
    stalled = records[1]
    for record in records[2:]:
        assert record["start"] >= stalled["end"]
        assert record["end"] - record["arrival"] >= stalled["end"] - record["arrival"] >= 1.0 - 0.35
    summary = stats.summarize(records, LOOSE, None)
    assert summary["queue_ms"]["max"] >= 600


def test_a_lost_objective_stops_the_run_and_cuts_the_rest(app: tuple[Path, Predict]) -> None:
    strict = (Objective(99.0, 10.0),)
    with serve(app, delay_s=0.3) as server:
        records = run(server.url + "/predict",
                      arrivals=[i * 0.01 for i in range(200)], objectives=strict)
    cut = [r for r in records if r["outcome"] == "cut"]
    assert len(cut) >= 100 and server.requests < 100
    assert all(r["start"] is None and r["end"] is None and "p99 <= 10 ms already lost" in r["error"]
               for r in cut)
    assert [r["arrival"] for r in records] == [i * 0.01 for i in range(200)]
    # the ones in flight finished
    assert {r["outcome"] for r in records if r["outcome"] != "cut"} == {"answered"}
    summary = stats.summarize(records, strict, None)
    assert not summary["meets"] and any("cut" in reason for reason in summary["reasons"])


def test_the_time_bound_stops_sending_and_cuts_the_rest(app: tuple[Path, Predict]) -> None:
    with serve(app) as server:
        records = run(server.url + "/predict",
                      arrivals=[0.0, 0.05, 0.1] + [3 + i for i in range(10)],
                      max_seconds=0.6)
    assert outcomes(records) == ["answered"] * 3 + ["cut"] * 10
    assert all("time bound" in r["error"] and r["start"] is None for r in records[3:])
    assert server.requests == 3 and [r["arrival"]
                                     for r in records[3:]] == [3 + i for i in range(10)]


def test_a_request_answered_too_slowly_times_out_as_an_error(app: tuple[Path, Predict]) -> None:
    with serve(app, delay_s=1.0) as server:
        records = run(server.url + "/predict", arrivals=[0.0], timeout_s=0.2)
    assert outcomes(records) == ["error"] and "within 0.2 s" in records[0]["error"]


def test_many_requests_a_second_are_all_accounted_for(app: tuple[Path, Predict]) -> None:
    with serve(app) as server:
        records = run(server.url + "/predict", arrivals=[i * 0.002 for i in range(400)])
    assert len(records) == 400 and set(outcomes(records)) <= set(stats.OUTCOMES)
    assert outcomes(records).count("answered") >= 300
    assert all(isinstance(r["end"], float) for r in records if r["outcome"] == "answered")


def test_a_connection_the_server_closed_while_idle_is_replaced(app: tuple[Path, Predict]) -> None:
    with serve(app, idle_s=0.1) as server:
        records = run(server.url + "/predict", arrivals=[0.0, 0.4, 0.8])
    assert outcomes(records) == ["answered"] * 3
