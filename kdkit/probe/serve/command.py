"""``kdkit serve-test``: the same command on the host, as ``python -m kdkit.probe serve-test`` in
the image and as ``python3 kdkit.pyz serve-test`` from the bundle. Standard library only (matplotlib
for --plot, lazily)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kdkit.core.errors import BadInput
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.pilotconfig import check_device
from kdkit.core.projectfiles import project_root
from kdkit.core.safetext import printable
from kdkit.core.serviceconfig import SERVICE_CONFIG, load_service
from kdkit.probe.measure.options import Count, add_project, parse, say, show, text_table
from kdkit.probe.measure.plot import check_plot_path, written
from kdkit.probe.serve.arrivals import read_trace
from kdkit.probe.serve.session import Remote, measure_in_process, prepare, run_serve_test

DESCRIPTION = """\
An interactive service before you pay for it: latency with its queue, the request-size
limit, the behaviour at capacity, and the configuration meeting quality and latency.

config/service.json declares the objective (e.g. p95 within 300 ms), the largest request,
what happens at capacity (reject beyond N waiting, or queue), the batching policies (max
batch, max wait) and the arrival rates. Each policy at each rate is played in real time:
Poisson arrivals (seeded; or --trace), the pilot's inputs as requests, the project's own
predict(items) as the server. Latency and queue time are counted from each request's
scheduled arrival, so a stall shows in everyone's wait. A request refused, failed or cut
counts as late. A rate stops as soon as its objective is lost; a policy that missed is not
tried at higher rates. The chosen configuration: the highest rate meeting the objectives and
the pilot's min_quality. Saved to runs/serve-test-<time>/ (serve-test.json, requests.jsonl).
Exit 1 when no configuration meets them.

--url drives a service you already run instead (a JSON POST from a template, or the
OpenAI-compatible completions/chat APIs streamed, with time to first token and between
tokens): the same arrivals and statistics, its own batching and capacity, bounded in
count and time, and sent to that URL only."""
CLOCKS = ("real", "virtual")
EPILOG = """examples:
  kdkit serve-test
  kdkit serve-test --config config/service.json --plot latency.png
  kdkit serve-test --trace arrivals.txt
  kdkit serve-test --clock virtual        # a first look in seconds; confirm with the real clock
  kdkit serve-test --url http://127.0.0.1:8000/predict --template body.json
  kdkit serve-test --url http://127.0.0.1:8000 --api chat --model my-model"""


class Positive(Count):
    """A count of at least 1 (a timeout of 0 s would fail every request; 0 tokens would ask for
    nothing)."""

    def __call__(self, text: str) -> int:
        value = super().__call__(text)
        if value < 1:
            raise BadInput(f"{self.option} {printable(text)[:40]}: must be at least 1; e.g. "
                           f"{self.option} {self.example}")
        return value


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("serve-test", DESCRIPTION, EPILOG)
    add_project(parser)
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help=f"the service file (default: {SERVICE_CONFIG} in the project)")
    parser.add_argument("--trace", type=Path, default=None, metavar="FILE",
                        help=(
                            "arrival times in seconds, one per line, never going backwards: "
                            "replaces the rates"))
    parser.add_argument("--clock", default="real", metavar="real|virtual",
                        help="real (default): waits slept, what a request feels; virtual: each "
                             "batch's service timed for real, the waits between simulated: many "
                             "rates in seconds, blind to what idle time does to a device")
    parser.add_argument("--url", default=None, metavar="URL",
                        help="drive a service you already run at this http(s) URL instead of the "
                             "project's predict (its own batching and capacity; kdkit sends "
                             "nothing anywhere else)")
    parser.add_argument("--api", default="json", metavar="json|completions|chat",
                        help="with --url: a JSON POST from --template (default), or "
                             "OpenAI-compatible /v1/completions or /v1/chat/completions streamed "
                             "(time to first token, between tokens)")
    parser.add_argument("--template", type=Path, default=None, metavar="FILE",
                        help='with --api json: the request body, "{{text}}" in a string replaced '
                             'by each input (default: {"text": "{{text}}"})')
    parser.add_argument("--model",
                        default=None,
                        help=("with --api completions or chat: the model field to send"))
    parser.add_argument("--max-tokens", type=Positive("--max-tokens", "16"), default=16,
                        metavar="N",
                        help=(
                            "with --api completions or chat: tokens asked per request (default: "
                            "16)"))
    parser.add_argument("--timeout", type=Positive("--timeout", "30"), default=30, metavar="S",
                        help=(
                            "with --url: seconds a request may take from its scheduled arrival "
                            "(default: 30)"))
    parser.add_argument("--device",
                        default=None,
                        help=("auto, cpu, cuda or cuda:N (default: the pilot config's)"))
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="write a PNG: latency percentiles against rate, one line per policy")
    parser.add_argument("--force",
                        action="store_true", help="with --plot: replace an existing file")
    add_json(parser)
    return parser


def serve_test(args: argparse.Namespace) -> dict[str, Any]:
    """Check every option and input, measure, keep the run folder and draw the plot when asked."""
    if args.clock not in CLOCKS:
        raise BadInput(f"--clock {printable(args.clock)[:40]}: give real (what a request feels) or "
                       "virtual (waits simulated, services timed)")
    if args.device is not None:
        check_device(args.device)
    plot = check_plot_path(args.plot, args.force)
    root = project_root(args.project_dir)
    service = load_service(args.config if args.config is not None else root / SERVICE_CONFIG)
    trace = read_trace(args.trace) if args.trace is not None else None
    remote = _remote(args)
    test = prepare(root, service, trace=trace, device=args.device if remote is None else "cpu",
                   clock=args.clock)
    report = run_serve_test(test, measure_in_process if remote is None else remote.measure, say)
    if plot is not None:
        from kdkit.probe.serve.plot import latency_plot

        written(plot, lambda: latency_plot(report, plot))
        report["plot"] = str(plot)
    return report


def _remote(args: argparse.Namespace) -> Remote | None:
    """--url and its options checked (the URL probed: exit 3 within seconds when nothing answers
    there)."""
    if args.url is None:
        for option, given in (("--template", args.template), ("--model", args.model)):
            if given is not None:
                raise BadInput(
                    f"{option}: only with --url (the in-process mode calls the project's predict)")
        return None
    from kdkit.probe.serve.http import API_KINDS, load_template, probe

    if args.api not in API_KINDS:
        raise BadInput(f"--api {printable(args.api)[:40]}: give one of {', '.join(API_KINDS)}")
    if args.template is not None and args.api != "json":
        raise BadInput(
            f"--template: only with --api json (--api {args.api} sends the OpenAI-compatible body)")
    template = load_template(args.template) if args.template is not None else None
    probe(args.url)
    return Remote(args.url, args.api, template, args.model, args.max_tokens, float(args.timeout))


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def render(report: dict[str, Any]) -> str:
    """One row per configuration (latency and queue time apart), then the choice and why the others
    fail."""
    rows = [["rate/s", "policy", "answered", "refused", "cut", "p50 ms", "p95 ms", "p99 ms",
             "queue p95", "quality",
             "meets"]]
    for result in report["results"]:
        s = result["summary"]
        refused = s["outcomes"]["rejected_at_capacity"] + s["outcomes"]["rejected_too_large"]
        rows.append([f"{result['rate']:g}", result["policy"]["name"],
                     f"{s['outcomes']['answered']}/{s['requests']}",
                     str(refused), str(s["outcomes"]["cut"]), _ms(s["latency_ms"]["p50"]),
                     _ms(s["latency_ms"]["p95"]),
                     _ms(s["latency_ms"]["p99"]), _ms(s["queue_ms"]["p95"]),
                     "-" if s["quality"] is None else f"{s['quality']:.3f}",
                     "yes" if s["meets"] else "no"])
    target = report.get("url") or report.get("entry")
    lines = [f"Serve test of {target} ({report['mode']}, {report.get('device', 'remote')}): "
             f"{', '.join(report['objectives'])}; at capacity: {report['at_capacity']}",
             text_table(rows, right=frozenset({0, 2, 3, 4, 5, 6, 7, 8}))]
    chosen = report["chosen"]
    if chosen is None:
        lines.append("No configuration meets the objectives and the quality criterion.")
    else:
        judged = report.get("min_quality") is not None and chosen["summary"]["quality"] is not None
        quality = (f" and quality >= {report['min_quality']:g}" if judged else
                   "; quality not judged: " + ("over HTTP" if report["mode"] == "http" else
                                                "no answer had an expected value"))
        lines.append(f"Chosen: {chosen['policy']['name']} at {chosen['rate']:g} requests/s "
                     f"(the highest rate meeting {', '.join(report['objectives'])}{quality})")
    lines += [f"  {w['policy']} at {w['rate']:g}/s: {'; '.join(w['reasons'])}"
              for w in report["why_not"]]
    lines += [f"  {n['policy']} at {n['rate']:g}/s: not tried ({n['reason']})"
              for n in report["not_tried"]]
    if report.get("app_errors"):
        lines.append("The app failed: " + "; ".join(printable(e) for e in report["app_errors"]))
    if report.get("app_output"):
        lines.append(f"The app's own output: {report['app_output']}")
    lines.append(f"Saved {report['out']}"
                 + (f"; plot {report['plot']}" if report.get("plot") else ""))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = parse(build_parser(), argv)
    report = serve_test(args)
    return show(report, args.json, render, "" if report["ok"] else
                "serve-test: no configuration meets the objectives and the quality criterion; see "
                "why above")


if __name__ == "__main__":
    from kdkit.core.commands import call

    sys.exit(call(main, sys.argv[1:]))
