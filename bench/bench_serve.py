"""`kdkit serve-test`'s own speed: the in-process generator alone, the HTTP mode side by side with wrk, and the
in-process and HTTP modes agreeing on the template app.

1. Generator: the real engine (kdkit.probe.serve.engine: Run, Bounds, play on the RealClock) with a no-op serve
   function, Poisson arrivals at 20,000 requests/s (and 50,000/s, and 200,000/s, beyond what one Python thread
   can play, whose achieved rate is the ceiling), batch policy (1, 0 ms).
   Figures: achieved rate (answered / wall seconds of play) and the added latency (end - scheduled arrival,
   microseconds, p50 and p99). Goal: keeps up with 20,000/s (achieved >= 99 % of the offered rate: a schedule
   at exactly 20,000/s cannot finish faster than its last arrival) and a median added latency <= 50 us.
2. HTTP: the template project's app behind tests/serve_server.py's LocalServer, in a process of its own (client
   and server in one process would share the GIL), POST /predict with {"text": ...}, no delay. At each rate
   (200 and 500/s) kdkit's drive() and wrk (Debian's wrk 4.1.0; wrk2, the fixed-rate fork, is not packaged)
   take turns. wrk is paced by a Lua delay() hook: each of C = rate x 0.25 s connections waits an exponential
   time of mean C / rate before each request, so the connections together send a Poisson-like stream.
   Semantics differ: wrk's pacing is closed loop per connection (the next delay starts when the answer came,
   so it achieves C / (C / rate + latency), a little under the rate) and its latency counts from the send;
   kdkit's arrivals are open loop and its latency counts from the scheduled arrival. At a rate the server
   sustains easily they should agree. Goal: kdkit / wrk within 10 % on achieved rate and on median latency
   (kdkit's, from the scheduled arrival). To place a difference, kdkit's latency is also given from the send
   (record "start", as wrk counts it) and the send lag (start - scheduled arrival) apart; ``met_from_send`` is
   the goal judged on the latency from the send.
3. Agreement: the in-process mode (the project's predict through kdkit.probe.serve.app.AppServer, real clock)
   and the HTTP mode (drive() against the same app behind LocalServer) at 50/s, 200 requests, policy (1, 0 ms),
   the pilot's inputs in the same order: the median latency of each and their difference in ms (HTTP adds the
   network stack and the server's threads; reported, no goal).

Every Poisson schedule is scaled to end exactly at count / rate, so that the offered rate is the rate asked
for (the noise of a Poisson count is not the generator's). Runs take turns; the figures are medians. The generator
spins the last half millisecond before each arrival (engine.SPIN), so on a machine whose cores are busy with other
work its latencies take the scheduler's time slices: the 1-minute load average at the start and at the end are
written with the result.

    .venv/bin/python bench/bench_serve.py [--runs 5] [--count 100000] [--seconds 6]

Writes bench/results/serve.json; exits 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import REPO, machine, write_result

from kdkit.core.serviceconfig import Objective, Policy
from kdkit.probe.serve import stats
from kdkit.probe.serve.arrivals import poisson_arrivals
from kdkit.probe.serve.engine import Bounds, RealClock, Request, Run, play
from kdkit.probe.serve.http import drive

GENERATOR_RATE, CEILING_RATE, SATURATE_RATE = 20_000.0, 50_000.0, 200_000.0
GENERATOR_MEDIAN_US = 50.0
KEEP_UP = 0.99  # achieved over offered, for "keeps up with the rate"
HTTP_RATES = (200.0, 500.0)
WITHIN = 0.10  # kdkit / wrk within 10 %
WRK_SPREAD_S = 0.25  # each wrk connection waits this much on average: C = rate x this
AGREE_RATE, AGREE_COUNT = 50.0, 200
LOOSE = (Objective(99.0, 60_000.0),)
ONE = Policy(1, 0.0)
TEXT = "Please pay invoice 42 by Friday."
SERVER = """import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from tests.serve_server import LocalServer
with LocalServer(Path(sys.argv[2])) as server:
    print(server.url, flush=True)
    sys.stdin.read()
"""
WRK_LUA = """wrk.method = "POST"
wrk.body = '%(body)s'
wrk.headers["Content-Type"] = "application/json"
local mean = %(mean_ms)f
function init(args) math.randomseed(tonumber(args[1]) or 1) end
function delay() return math.floor(-mean * math.log(1 - math.random()) + 0.5) end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %%d, "duration_us": %%d, "p50_us": %%d, "p90_us": %%d, "errors": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    e.connect + e.read + e.write + e.status + e.timeout))
end
"""


def scheduled(rate: float, count: int, seed: int) -> list[float]:
    """Seeded Poisson arrivals, scaled so that the last is at exactly count / rate."""
    times = poisson_arrivals(rate, count, seed)
    scale = count / rate / times[-1]
    return [at * scale for at in times]


def noop(indexes: Sequence[int]) -> list[tuple[str, float | None]]:
    return [(stats.ANSWERED, None)] * len(indexes)


def generator_run(rate: float, count: int, seed: int) -> dict[str, float]:
    """One play of the real engine with a no-op server: achieved rate, added latency p50/p99 in us."""
    requests = [Request(i, str(i), 10, at) for i, at in enumerate(scheduled(rate, count, seed))]
    run = Run(requests, ONE, None, 65536, Bounds(600.0, LOOSE, count))
    started = time.perf_counter()
    records = play(run, noop, RealClock())
    wall = time.perf_counter() - started
    answered = [r for r in records if r["outcome"] == stats.ANSWERED]
    added = sorted(r["end"] - r["arrival"] for r in answered)
    return {"achieved_per_second": len(answered) / wall,
            "p50_us": stats.percentile(added, 50) * 1e6,
            "p99_us": stats.percentile(added, 99) * 1e6, "answered": len(answered)}


def median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def generator_section(runs: int, count: int) -> dict[str, Any]:
    """Both rates, taking turns, ``runs`` times; medians and the goal."""
    rates = (GENERATOR_RATE, CEILING_RATE, SATURATE_RATE)
    got: dict[float, list[dict[str, float]]] = {rate: [] for rate in rates}
    for k in range(runs):
        for rate in rates:
            got[rate].append(generator_run(rate, count, k))
    at_goal, ceiling, saturated = (median_of(got[rate]) for rate in rates)
    met = (at_goal["achieved_per_second"] >= KEEP_UP * GENERATOR_RATE
           and at_goal["p50_us"] <= GENERATOR_MEDIAN_US)
    return {"count": count, "offered_per_second": GENERATOR_RATE, "median": at_goal,
            "ceiling": {"offered_per_second": CEILING_RATE, "median": ceiling},
            "saturated": {"offered_per_second": SATURATE_RATE, "median": saturated},
            "goal": {"achieved_at_least_per_second": KEEP_UP * GENERATOR_RATE,
                     "median_at_most_us": GENERATOR_MEDIAN_US},
            "met": met, "all_runs": {f"{rate:g}": got[rate] for rate in rates}}


def start_server(root: Path) -> tuple[subprocess.Popen[str], str]:
    """LocalServer with the project's app in a process of its own; the process and its URL."""
    process = subprocess.Popen([sys.executable, "-c", SERVER, str(REPO), str(root)],
                               stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    url = process.stdout.readline().strip()
    if not url.startswith("http://"):
        process.kill()
        raise SystemExit("the local server did not start")
    return process, url


def stop_server(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def kdkit_http(url: str, rate: float, seconds: float, seed: int) -> dict[str, float]:
    """drive() at ``rate`` for ``seconds``: achieved rate, latency p50/p90 in ms (from the scheduled arrival)."""
    arrivals = scheduled(rate, int(rate * seconds), seed)
    records = drive(url + "/predict", "json", None, [("t", TEXT)], arrivals,
                    max_request_bytes=65536,
                    timeout_s=10.0, max_seconds=seconds * 3 + 10, objectives=LOOSE)
    answered = [r for r in records if r["outcome"] == stats.ANSWERED]
    span = max(r["end"] for r in answered)

    def ms(p: float, since: str = "arrival", until: str = "end") -> float:
        return stats.percentile(sorted(r[until] - r[since] for r in answered), p) * 1000

    return {"achieved_per_second": len(answered) / span, "p50_ms": ms(50), "p90_ms": ms(90),
            "p50_from_send_ms": ms(50, "start"), "p90_from_send_ms": ms(90, "start"),
            "send_lag_p50_ms": ms(50, until="start"), "not_answered": len(records) - len(answered)}


def wrk_http(url: str, rate: float, seconds: float, seed: int, script: Path) -> dict[str, float]:
    """wrk paced by the Lua delay() hook at ``rate`` for ``seconds``: achieved rate, latency p50/p90 in ms."""
    connections = max(1, round(rate * WRK_SPREAD_S))
    body = json.dumps({"text": TEXT})
    script.write_text(WRK_LUA
                      % {"body": body, "mean_ms": connections / rate * 1000}, encoding="utf-8")
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s",
            str(script),
            url + "/predict", "--", str(seed + 1)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=seconds * 3 + 30)
    line = next((x for x in done.stdout.splitlines() if x.startswith("{")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(
            f"{' '.join(argv)} exited "
            f"{done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    got = json.loads(line)
    return {"achieved_per_second": got["requests"] / (got["duration_us"] / 1e6),
            "p50_ms": got["p50_us"] / 1000,
            "p90_ms": got["p90_us"] / 1000, "errors": got["errors"], "connections": connections}


def http_section(url: str, runs: int, seconds: float, work: Path) -> dict[str, Any]:
    """kdkit and wrk taking turns at each rate; medians, ratios kdkit / wrk and the goal."""
    out: dict[str, Any] = {"seconds_per_run": seconds, "rates": {}}
    for rate in HTTP_RATES:
        got: dict[str, list[dict[str, float]]] = {"kdkit": [], "wrk": []}
        for k in range(runs):
            got["kdkit"].append(kdkit_http(url, rate, seconds, k))
            got["wrk"].append(wrk_http(url, rate, seconds, k, work / "pace.lua"))
        kdkit, wrk = median_of(got["kdkit"]), median_of(got["wrk"])
        ratios = {"achieved": round(kdkit["achieved_per_second"] / wrk["achieved_per_second"], 4),
                  "p50": round(kdkit["p50_ms"] / wrk["p50_ms"], 4),
                  "p90": round(kdkit["p90_ms"] / wrk["p90_ms"], 4),
                  "p50_from_send": round(kdkit["p50_from_send_ms"] / wrk["p50_ms"], 4)}
        met = abs(ratios["achieved"] - 1) <= WITHIN and abs(ratios["p50"] - 1) <= WITHIN
        from_send = abs(ratios["achieved"]
                        - 1) <= WITHIN and abs(ratios["p50_from_send"] - 1) <= WITHIN
        out["rates"][f"{rate:g}"] = {"kdkit": kdkit, "wrk": wrk, "ratio_kdkit_over_wrk": ratios,
                                     "met": met,
                                     "met_from_send": from_send, "all_runs": got}
    out["goal"] = f"kdkit / wrk within {WITHIN:.0%} on achieved rate and median latency"
    out["met"] = all(r["met"] for r in out["rates"].values())
    return out


def agreement_section(root: Path, url: str, runs: int) -> dict[str, Any]:
    """The template app in process and over HTTP at the same rate and inputs; median latencies and the gap."""
    from kdkit.core.pilotconfig import load_pilot
    from kdkit.probe.measure.sweep import readable_items
    from kdkit.probe.pilot.harness import load_entry, with_params, with_scorer
    from kdkit.probe.serve.app import AppServer, input_order, requests_for

    pilot = with_scorer(load_pilot(root))
    inputs, _ = readable_items(pilot)
    predict = with_params(load_entry(root, pilot.entry), pilot.params)
    predict([inputs[0].app_item()])  # the template app trains at first use
    server = AppServer(predict, pilot, [])
    texts = [(item.doc.id, item.text) for item in input_order(inputs, 0)]
    got: dict[str, list[float]] = {"in_process": [], "http": []}
    for k in range(runs):
        arrivals = scheduled(AGREE_RATE, AGREE_COUNT, k)
        requests, server.items = requests_for(inputs, arrivals, 0)
        records = play(Run(requests, ONE, None, 65536, Bounds(600.0, LOOSE, len(requests))),
                       server, RealClock())
        got["in_process"].append(_median_ms(records))
        got["http"].append(_median_ms(drive(url + "/predict", "json", None, texts, arrivals,
                                            max_request_bytes=65536,
                                            timeout_s=10.0, max_seconds=60.0, objectives=LOOSE)))
    in_process, over_http = statistics.median(got["in_process"]), statistics.median(got["http"])
    return {"rate": AGREE_RATE, "count": AGREE_COUNT, "policy": ONE.name, "median_p50_ms": {
            "in_process": round(in_process, 3), "http": round(over_http, 3)},
            "http_minus_in_process_ms": round(over_http - in_process, 3), "all_runs_p50_ms": got}


def _median_ms(records: list[dict[str, Any]]) -> float:
    latency = sorted(r["end"] - r["arrival"] for r in records if r["outcome"] == stats.ANSWERED)
    return stats.percentile(latency, 50) * 1000 if latency else math.nan


def report(result: dict[str, Any]) -> None:
    """The one-line figures, a line a section."""
    gen = result["generator"]
    med, ceil, sat = gen["median"], gen["ceiling"]["median"], gen["saturated"]["median"]
    print(f"generator at {GENERATOR_RATE:,.0f}/s: achieved {med['achieved_per_second']:,.0f}/s, "
          f"added latency p50 {med['p50_us']:.1f} us p99 {med['p99_us']:.1f} us (goal >= "
          f"{KEEP_UP * GENERATOR_RATE:,.0f}/s, p50 <= {GENERATOR_MEDIAN_US:g} us: "
          f"{'met' if gen['met'] else 'MISSED'}); at {CEILING_RATE:,.0f}/s offered: "
          f"{ceil['achieved_per_second']:,.0f}/s, p50 {ceil['p50_us']:.1f} us; saturated "
          f"({SATURATE_RATE:,.0f}/s offered): {sat['achieved_per_second']:,.0f}/s")
    for rate, row in result["http"]["rates"].items():
        kd, wr, ratio = row["kdkit"], row["wrk"], row["ratio_kdkit_over_wrk"]
        print(f"HTTP at {rate}/s: kdkit {kd['achieved_per_second']:.1f}/s p50 {kd['p50_ms']:.3f} "
              f"ms p90 {kd['p90_ms']:.3f} ms; wrk {wr['achieved_per_second']:.1f}/s p50 "
              f"{wr['p50_ms']:.3f} ms p90 {wr['p90_ms']:.3f} ms; kdkit/wrk rate "
              f"{ratio['achieved']:.3f} p50 {ratio['p50']:.3f} p90 {ratio['p90']:.3f} "
              f"({'met' if row['met'] else 'MISSED'}, goal within {WITHIN:.0%}); kdkit from the "
              f"send p50 {kd['p50_from_send_ms']:.3f} ms (/wrk {ratio['p50_from_send']:.3f}), send "
              f"lag p50 {kd['send_lag_p50_ms']:.3f} ms")
    agree = result["agreement"]
    print(f"template app at {AGREE_RATE:g}/s: p50 in process "
          f"{agree['median_p50_ms']['in_process']:.3f} ms, over HTTP "
          f"{agree['median_p50_ms']['http']:.3f} ms (+{agree['http_minus_in_process_ms']:.3f} ms)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--count", type=int, default=100_000, help="requests a generator run")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds an HTTP run")
    options = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    from kdkit.project.init import init_project

    load_at_start = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {"runs": options.runs,
                              "generator": generator_section(options.runs, options.count)}
    with tempfile.TemporaryDirectory(prefix="bench-serve.") as tmp:
        root = init_project(Path(tmp) / "proj", name="proj", backend="cpu")
        process, url = start_server(root)
        try:
            result["http"] = http_section(url, options.runs, options.seconds, Path(tmp))
            result["agreement"] = agreement_section(root, url, options.runs)
        finally:
            stop_server(process)
    result["wrk"] = subprocess.run(["wrk", "-v"], capture_output=True,
                                   text=True, check=False).stdout.split("\n")[0]
    result["met"] = result["generator"]["met"] and result["http"]["met"]
    result["machine"] = machine(load=True, load_average_1m_at_start=load_at_start)
    report(result)
    out = write_result("serve", result)
    print(
        f"written to {out.relative_to(REPO)} (load {result['machine']['load_average_1m_at_end']})")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
