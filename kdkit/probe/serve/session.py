"""One ``kdkit serve-test``: every input checked first, then each batching policy at each rate
(lowest first), each configuration's requests appended to ``requests.jsonl`` as it ends, the report
written last.

A policy whose rate missed the objectives is not tried at higher rates (they are listed as not
tried, with the rate that failed): with the early stop of a lost objective and the time bound per
rate, a test never runs for hours. Standard library only (torch where present).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.jsonio import atomic_write_json
from kdkit.core.pilotconfig import PilotConfig, load_pilot
from kdkit.core.runfolder import new_run_folder, new_run_id
from kdkit.core.safetext import printable
from kdkit.core.serviceconfig import Policy, ServiceConfig
from kdkit.core.staging import require_writable
from kdkit.probe.measure.memory import Memory
from kdkit.probe.measure.sweep import pick_device, readable_items
from kdkit.probe.pilot.harness import (
    EntryError,
    Item,
    load_entry,
    set_device,
    with_params,
    with_scorer,
)
from kdkit.probe.serve import stats
from kdkit.probe.serve.app import AppOutput, AppServer, BatchTimeout, input_order, requests_for
from kdkit.probe.serve.arrivals import poisson_arrivals, trace_rate
from kdkit.probe.serve.engine import Bounds, RealClock, Run, VirtualClock, play

if TYPE_CHECKING:
    from typing import TypedDict

    from kdkit.probe.serve.stats import PolicyShown, Result

    class NotTried(TypedDict):
        """A rate a policy was not tried at, and why."""

        rate: float
        policy: str
        reason: str

    class WhyNot(TypedDict):
        """Why one measured configuration was not chosen."""

        rate: float
        policy: str
        reasons: list[str]

    class InProcessHead(TypedDict):
        """The report's fields of a test through the project's own predict."""

        mode: str
        clock: str
        entry: str
        device: str
        memory_kind: str
        warmup_seconds: float
        app_errors: list[str]
        app_output: str | None

    class HttpHead(TypedDict):
        """The report's fields of a test against a URL."""

        mode: str
        url: str
        api: str
        at_capacity: str
        min_quality: None
        quality: str

RUNS = "runs folder (pilot config's runs)"
REQUESTS = "requests.jsonl"
REPORT = "serve-test.json"
APP_OUTPUT = "app-output.log"  # what the app printed, kept off the terminal
Progress = Callable[[str], None]


@dataclass(frozen=True)
class ServeTest:
    """A serve test whose every input is checked; nothing has run and nothing is written yet."""

    service: ServiceConfig
    pilot: PilotConfig
    inputs: list[Item]
    skipped: list[dict[str, str]]
    device: str
    trace: list[float] | None  # arrival times replacing the rates' Poisson arrivals
    # real: waits slept, as a request feels them; virtual: waits simulated (engine.py)
    clock: str = "real"

    @property
    def rates(self) -> tuple[float, ...]:
        return (trace_rate(self.trace),) if self.trace is not None else self.service.rates

    def arrivals(self, rate: float) -> list[float]:
        if self.trace is not None:
            return self.trace
        return poisson_arrivals(rate, self.service.requests_per_rate, self.service.seed)


def prepare(root: Path, service: ServiceConfig, *, trace: list[float] | None = None,
            device: str | None = None, clock: str = "real") -> ServeTest:
    """The pilot config, its readable inputs and the device; BadInput before anything runs or is
    written."""
    pilot = with_scorer(load_pilot(root))
    inputs, skipped = readable_items(pilot)
    if not inputs:
        raise BadInput(f"{pilot.config_path}: none of the pilot's inputs can be read "
                       f"({len(skipped)} skipped); serve-test sends the pilot's inputs as requests")
    where = "--device" if device is not None else f"{pilot.config_path}: $.device"
    require_writable(pilot.runs_dir / new_run_id("serve-test"), RUNS)  # refused before the work
    return ServeTest(service, pilot, inputs, skipped,
                     pick_device(device or pilot.device, where), trace, clock)


def _configuration(test: ServeTest, server: AppServer, memory: Memory, rate: float,
                   policy: Policy) -> tuple[Result, list[dict[str, Any]]]:
    """One rate under one policy, played in real time; its result and its requests' records."""
    service = test.service
    requests, server.items = requests_for(test.inputs, test.arrivals(rate), service.seed)
    run = Run(requests, policy, service.reject_at, service.max_request_bytes,
              Bounds(service.max_seconds_per_rate, service.objectives, len(requests)))
    memory.reset()
    records = play(run, server, VirtualClock() if test.clock == "virtual" else RealClock())
    summary = stats.summarize(records, service.objectives, test.pilot.min_quality)
    result: Result = {"rate": shown_rate(rate), "policy": policy_dict(policy),
                      "stopped": run.stopped, "peak_memory_bytes": memory.peak(),
                      "summary": summary}
    return result, records


def policy_dict(policy: Policy | None) -> PolicyShown:
    if policy is None:
        return {"name": "the service's own", "max_batch": None, "max_wait_ms": None}
    return {"name": policy.name, "max_batch": policy.max_batch, "max_wait_ms": policy.max_wait_ms}


class Sink:
    """Where a serve test's files go: its run folder, made when the first configuration has ended (a
    test refused or failed before then leaves nothing), each configuration's requests appended in
    one write as it ends."""

    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.made: Path | None = None

    def folder(self) -> Path:
        if self.made is None:
            self.made = new_run_folder(self.runs, "serve-test", RUNS)
        return self.made

    def append(self, result: Result, records: Sequence[dict[str, Any]]) -> None:
        """A configuration's requests, each with its rate and policy."""
        tag = {"rate": result["rate"], "policy": result["policy"]["name"]}
        lines = "".join(json.dumps({**tag, **record}, allow_nan=False) + "\n"
                        for record in sorted(records, key=lambda r: r["index"]))
        with (self.folder() / REQUESTS).open("a", encoding="utf-8") as out:
            out.write(lines)


def _started(test: ServeTest) -> tuple[AppServer, float]:
    """The project's predict imported and called once (the model loaded, outside the timings), its
    output kept apart, its calls bounded; BadInput when the entry does not import, CheckFailed when
    its first call fails."""
    set_device(test.device)
    try:
        predict = with_params(load_entry(test.pilot.root, test.pilot.entry), test.pilot.params)
    except EntryError as exc:
        raise BadInput(f"{test.pilot.config_path}: $.entry: {exc}") from None
    server = AppServer(predict, test.pilot, [], test.service.max_seconds_per_rate, AppOutput())
    started = time.perf_counter()
    try:
        server.call([test.inputs[0].app_item()])
    except BatchTimeout:
        raise CheckFailed(f"{test.pilot.entry}: its first call took longer than "
                          f"max_seconds_per_rate ({test.service.max_seconds_per_rate:g} "
                          "s)") from None
    except Exception as exc:
        said = " ".join(str(exc).split())[:200]
        raise CheckFailed(
            f"{test.pilot.entry}: its first call failed: {type(exc).__name__}: {said}") from None
    return server, time.perf_counter() - started


def measure_in_process(test: ServeTest, sink: Sink, say: Progress) -> dict[str, Any]:
    """Every policy at every rate through the project's own predict; the report (not yet
    written)."""
    server, warmup = _started(test)
    memory = Memory(test.device)
    results: list[Result]
    not_tried: list[NotTried]
    results, not_tried = [], []
    for policy in test.service.policies:
        missed: float | None = None
        for rate in test.rates:
            if missed is not None:
                not_tried.append({"rate": shown_rate(rate), "policy": policy.name,
                                  "reason": f"{policy.name} already missed the objectives at "
                                            f"{missed:g}/s"})
                continue
            say(f"{policy.name}: {rate:g} requests/s")
            result, records = _configuration(test, server, memory, rate, policy)
            sink.append(result, records)
            results.append(result)
            if not result["summary"]["meets"]:
                missed = rate
    assert server.output is not None
    printed = server.output.save(sink.folder() / APP_OUTPUT)
    return finish(test, results, not_tried, {
        "mode": "in-process", "clock": test.clock, "entry": test.pilot.entry, "device": test.device,
        "memory_kind": memory.kind, "warmup_seconds": round(warmup, 6), "app_errors": server.errors,
        "app_output": str(sink.folder() / APP_OUTPUT) if printed else None})


def shown_rate(rate: float) -> float:
    """A rate as reports give it: six significant digits (1e-9 stays 1e-09, not 0)."""
    return float(f"{rate:.6g}")


@dataclass(frozen=True)
class Remote:
    """The service a user already runs: its URL (checked and probed), the kind of API, its request
    template."""

    url: str
    api: str = "json"
    template: Any = None  # a loaded JSON template (json only); None: {"text": "{{text}}"}
    model: str | None = None
    max_tokens: int = 16
    timeout_s: float = 30.0

    def measure(self, test: ServeTest, sink: Sink, say: Progress) -> dict[str, Any]:
        """Every rate against the URL (the service's own batching and capacity), open loop, lowest
        rate first; a rate that misses ends the test. The report (not yet written)."""
        from kdkit.probe.serve.http import drive

        service = test.service
        texts = [(item.doc.id, item.text) for item in input_order(test.inputs, service.seed)]
        results: list[Result] = []
        not_tried: list[NotTried] = []
        policy = policy_dict(None)
        for rate in test.rates:
            if results and not results[-1]["summary"]["meets"]:
                not_tried.append({"rate": shown_rate(rate), "policy": policy["name"],
                                  "reason": "the service already missed the objectives at "
                                            f"{results[-1]['rate']:g}/s"})
                continue
            say(f"{printable(self.url)}: {rate:g} requests/s")
            records = drive(self.url, self.api, self.template, texts, test.arrivals(rate),
                            max_request_bytes=service.max_request_bytes, timeout_s=self.timeout_s,
                            max_seconds=service.max_seconds_per_rate, objectives=service.objectives,
                            model=self.model, max_tokens=self.max_tokens)
            cut = next(
                (r["error"] for r in records if r["outcome"] == stats.CUT and r.get("error")), None)
            result: Result = {"rate": shown_rate(rate), "policy": policy, "stopped": cut,
                              "peak_memory_bytes": None,
                              "summary": stats.summarize(records, service.objectives, None)}
            sink.append(result, records)
            results.append(result)
        return finish(test, results, not_tried, {"mode": "http", "url": self.url, "api": self.api,
                                                 "at_capacity": "the service's own",
                                                 "min_quality": None,
                                                 "quality": "not judged over HTTP (the pilot "
                                                            "judges the answers)"})


def finish(test: ServeTest, results: list[Result], not_tried: list[NotTried],
           head: InProcessHead | HttpHead) -> dict[str, Any]:
    """The report: the configurations, the knees, the chosen one and why each other fails."""
    service = test.service
    chosen = stats.choose(results)
    why_not: list[WhyNot] = [{"rate": r["rate"], "policy": r["policy"]["name"],
                              "reasons": r["summary"]["reasons"]
                              + ([f"stopped early: {r['stopped']}"] if r["stopped"] else [])}
                             for r in results if not r["summary"]["meets"]]
    return {"service_config": service.source, "objectives": [o.name for o in service.objectives],
            "at_capacity": service.capacity, "max_request_bytes": service.max_request_bytes,
            "min_quality": test.pilot.min_quality, **head,
            "requests_per_rate": service.requests_per_rate,
            "seed": service.seed, "trace": test.trace is not None, "skipped_inputs": test.skipped,
            "results": results, "not_tried": not_tried, "knees": stats.knees(results),
            "chosen": None if chosen is None
            else {"rate": chosen["rate"], "policy": chosen["policy"],
                  "summary": chosen["summary"]},
            "why_not": why_not, "ok": chosen is not None}


def run_serve_test(test: ServeTest, measure: Callable[[ServeTest, Sink, Progress], dict[str, Any]],
                   say: Progress) -> dict[str, Any]:
    """Measure (in process or against a URL), the run folder made as the first configuration ends,
    the report written last; return it."""
    sink = Sink(test.pilot.runs_dir)
    report = measure(test, sink, say)
    folder = sink.folder()
    report["out"] = str(folder)
    report["requests"] = str(folder / REQUESTS)
    atomic_write_json(folder / REPORT, report)
    return report
