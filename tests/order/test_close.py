"""`kdkit close`: the campaign report from runs/ and the order, which is never rewritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.checksums import write_sums
from kdkit.core.errors import BadInput
from kdkit.core.pilotconfig import load_pilot, params_hash
from kdkit.order.close import load_report, render_markdown
from tests.conftest import invoke, tree_snapshot


def _order(tmp_path: Path, *args: str) -> Path:
    path = tmp_path / "order.json"
    result = invoke("plan", "--gpu", "RTX 4090", "--days", "3", "--lots", "1",
                    *args, "--save", path)
    assert result.exit_code == 0, result.output
    return path


def _run(project: Path, run_id: str, *, params: object = None, summary: object = None,
         stop: object = None) -> None:
    """A run folder left open (never closed by SHA256SUMS): what a stopped or crashed pilot leaves."""
    folder = project / "runs" / run_id
    folder.mkdir(parents=True)
    for name, data in (("params.json", params), ("summary.json", summary), ("stop.json", stop)):
        if data is not None:
            (folder / name).write_text(data if isinstance(data, str) else json.dumps(data))


def config_hash(config: str) -> str:
    return params_hash({"config": config})


def closed_run(project: Path, run_id: str, config: str, *, verdict: str = "pass",
               seconds: float = 60,
               total: int = 12, rejected: int = 1) -> Path:
    """A run folder closed as the pilot closes one: every file it holds, self-consistent, sealed by SHA256SUMS
    (tests/order/test_close_verified.py builds real ones with `kdkit pilot`)."""
    folder = project / "runs" / run_id
    folder.mkdir(parents=True)
    params = {"run_id": run_id, "params": {"config": config}, "params_hash": config_hash(config)}
    lines = [{"id": f"doc-{n:02d}", "outcome": "rejected" if n <= rejected else "accepted",
              "batch": n, "lines": 1}
             for n in range(1, total + 1)]
    summary = {"run_id": run_id, "kind": "pilot", "verdict": verdict, "total": total,
               "accepted": total - rejected,
               "rejected": rejected, "problems": [] if verdict == "pass" else ["a problem"],
               "timings": {"seconds": seconds}, "stopped": None,
               "files": ["SHA256SUMS", "env.json", "params.json",
                         "results.jsonl", "summary.json", "summary.md"]}
    files = {"params.json": json.dumps(params), "env.json": "{}",
             "summary.json": json.dumps(summary),
             "results.jsonl": "".join(json.dumps(line) + "\n" for line in lines),
             "summary.md": "# run\n"}
    for name, text in files.items():
        (folder / name).write_text(text)
    write_sums(folder, [(name, folder / name) for name in files])
    return folder


def _campaign(project: Path) -> None:
    """Two distinct passing configurations, one repeat, one stopped run, one crashed run."""
    closed_run(project, "20250101T080000Z-aaaaaa", "a", seconds=7200)
    closed_run(project, "20250101T120000Z-bbbbbb", "b", seconds=10800)
    closed_run(project, "20250101T160000Z-aaaaaa", "a", seconds=3600)
    _run(project, "20250101T180000Z-cccccc", params={"params_hash": "cccccc"},
         stop={"reason": "max_rejected exceeded (4 > 3)"})
    _run(project, "20250101T190000Z-dddddd",
         params={"params_hash": "dddddd"}, summary='{"verdict": "pa')


def _close(project: Path, order: Path, *args: str) -> dict[str, Any]:
    result = invoke("close", project, "--order", order, *args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_report_counts_each_configuration_once_and_lists_deviations(
    project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path, "--hours", "5", "--accepted", "2")
    order_bytes = order.read_bytes()
    _campaign(project)
    report = _close(project, order)
    # the synthetic runs ran configs "a" and "b", not the project's
    now = params_hash(load_pilot(project).resolved())
    assert report["accepted_outputs"] == {"count": 2, "source": "runs",
                                          "counted_runs": ["20250101T080000Z-aaaaaa",
                                                           "20250101T120000Z-bbbbbb"]}
    assert report["cost"] == {"accepted": 2, "per_output_usd": "23.57",
                              "cost_incurred_usd": "47.14", "reason": None}
    assert report["hours"] == {"window": 72, "booked": 5, "observed": 6.0,
                               "observed_minus_booked": 1.0,
                               "runs_without_duration": ["20250101T180000Z-cccccc",
                                                         "20250101T190000Z-dddddd"],
                               "not_counted": None}
    runs = {r["run_id"]: r for r in report["runs"]}
    assert runs["20250101T120000Z-bbbbbb"]["config_hash"] == config_hash("b")
    assert runs["20250101T180000Z-cccccc"]["verdict"] == "stopped"
    assert runs["20250101T180000Z-cccccc"]["stop_reason"] == "max_rejected exceeded (4 > 3)"
    assert runs["20250101T190000Z-dddddd"]["verdict"] == "incomplete"
    assert report["deviations"] == [
        "observed 6.0 h exceeds the 5 h booked by 1.0 h",
        "no duration recorded for 20250101T180000Z-cccccc, 20250101T190000Z-dddddd: observed hours "
        "undercount",
        "run 20250101T180000Z-cccccc stopped: max_rejected exceeded (4 > 3)",
        "run 20250101T190000Z-dddddd has no readable summary.json: unfinished or crashed; resume "
        "it or explain",
        *(f"run {run} ran another pilot configuration or manifest than the project's now (params "
          f"hash {config_hash(c)[:8]}, now {now[:8]}): its 12 ID(s) are not checked against a "
          "manifest"
          for run, c in (("20250101T080000Z-aaaaaa", "a"), ("20250101T120000Z-bbbbbb", "b"))),
        "run 20250101T160000Z-aaaaaa repeats the configuration of run 20250101T080000Z-aaaaaa "
        f"(hash {config_hash('a')}): not counted as another accepted output",
    ]
    assert order.read_bytes() == order_bytes  # the plan is never rewritten
    assert report["order"] == json.loads(order_bytes)


def test_markdown_and_json_are_written_and_the_json_reloads(project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path, "--hours", "48")
    _campaign(project)
    result = invoke("close", project, "--order", order)
    assert result.exit_code == 0
    md, js = (project / "reports" / "campaign-report.md",
              project / "reports" / "campaign-report.json")
    report = load_report(js)
    assert result.stdout.splitlines() == [
        "5 run(s), 2 accepted output(s), 47.14 USD spent, 23.57 USD per accepted output, 6 "
        "deviation(s).",
        # the union, gaps shown (issue 28)
        "Observed 6.0 h of machine time (48 h booked); idle 3.0 h in 2 gap(s).",
        # campaign.json's
        *([f"Conclusion: {report['campaign']['conclusion']}"] if report["campaign"] else []),
        f"Wrote {md}", f"Wrote {js}"]
    report = load_report(js)
    assert md.read_text() == render_markdown(report)
    text = md.read_text()
    for needle in (f"| 20250101T120000Z-bbbbbb | {config_hash('b')} | pass | — | 11 | 1 | 10800.0 "
                   "|",
                   "| 20250101T180000Z-cccccc | cccccc | stopped | max_rejected exceeded (4 > 3) |",
                   "| 72 h | 48 h | 6.0 h | -42.0 h |", "- cost per accepted output: 23.57 USD"):
        assert needle in text
    assert sorted(p.name
                  for p in md.parent.iterdir()) == ["campaign-report.json", "campaign-report.md"]


def test_zero_accepted_is_undefined_with_the_cost_shown(project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path)
    closed_run(project, "20250101T080000Z-aaaaaa", "a", verdict="fail")
    report = _close(project, order)
    assert report["cost"]["per_output_usd"] is None
    assert report["cost"]["cost_incurred_usd"] == "47.14"
    assert "run 20250101T080000Z-aaaaaa failed" in report["deviations"]
    assert report["deviations"][-1] == report["cost"]["reason"]
    md = (project / "reports" / "campaign-report.md").read_text()
    assert "- cost per accepted output: undefined — 0 accepted outputs: 47.14 USD was spent" in md


def test_declared_accepted_outputs_override_the_count(project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path, "--accepted", "2")
    report = _close(project, order, "--accepted", "4", "--out", str(tmp_path / "out"))
    assert report["accepted_outputs"]["source"] == "--accepted"
    assert report["cost"]["per_output_usd"] == "11.79"  # 47.14 / 4 = 11.785, rounded half up
    assert "planned 2 accepted output(s), got 4" in report["deviations"]
    assert "no run folders: nothing was executed through kdkit" in report["deviations"]


def test_load_report_refuses_other_json(tmp_path: Path) -> None:
    other = tmp_path / "x.json"
    other.write_text("{}")
    with pytest.raises(BadInput, match=r"\$\.kdkit_report: not a kdkit campaign report"):
        load_report(other)


# ---------------------------------------------------------------- bad input: exit 2, nothing written


def test_invalid_order_exits_2_and_writes_nothing(project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path)
    data = json.loads(order.read_text())
    data["total_usd"] = 94.28
    order.write_text(json.dumps(data))
    before = tree_snapshot(project)
    result = invoke("close", project, "--order", order)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: {order}: $.total_usd: expected string, got float "
                                     "94.28; write it with `kdkit plan --save`")
    assert tree_snapshot(project) == before


def test_missing_order_exits_2(project: Path, tmp_path: Path) -> None:
    result = invoke("close", project, "--order", tmp_path / "none.json")
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: {tmp_path / 'none.json'}: order file not found; "
                                     "create it or pass the right path")
    assert not (project / "reports").exists()


def test_report_never_overwrites_the_order(project: Path, tmp_path: Path) -> None:
    order = _order(tmp_path)
    clash = tmp_path / "campaign-report.json"
    order.rename(clash)
    before = clash.read_bytes()
    result = invoke("close", project, "--order", clash, "--out", tmp_path)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: --out {tmp_path}: the report would overwrite the "
                                     f"order {clash}; choose another folder")
    assert clash.read_bytes() == before and not (tmp_path / "campaign-report.md").exists()


def test_sweep_and_resume_test_folders_are_not_campaign_runs(project: Path, tmp_path: Path) -> None:
    _campaign(project)
    (project / "runs" / "sweep-20250101-090000").mkdir()
    (project / "runs" / "sweep-20250101-090000" / "sweep.json").write_text("{}")
    (project / "runs" / "resume-test-20250101-090000").mkdir()
    order = _order(tmp_path)
    result = invoke("close", project, "--order", order, "--json")
    ids = [run["run_id"] for run in json.loads(result.stdout)["runs"]]
    assert not any(i.startswith(("sweep-", "resume-test-")) for i in ids)
