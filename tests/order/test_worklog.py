"""When recorded work ran (issue 28 §3): kdkit.order.worklog reads each kind's own records, and the machine's
observed time is the union of the intervals (parallel work counted once), with the idle gaps between.
Run folders are written here with controlled timestamps (their files' times set with os.utime); the build
record is the one kdkit.image.buildlog appends for `kdkit build`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from kdkit.image.buildlog import BUILDS, recorded
from kdkit.order.worklog import Interval, gaps, hours_by, last_metric_time, observed_hours, work_log

DAY = datetime(2025, 3, 1, tzinfo=timezone.utc)


def at(hour: float) -> datetime:
    return DAY + timedelta(hours=hour)


def iso(hour: float) -> str:
    return at(hour).isoformat(timespec="seconds")


def write(folder: Path, files: dict[str, Any], when: float | None = None) -> Path:
    """``files`` (JSON objects, or text) in ``folder``, each with its modification time at hour ``when``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        path = folder / name
        path.write_text(data if isinstance(data, str) else json.dumps(data))
        if when is not None:
            os.utime(path, (at(when).timestamp(), at(when).timestamp()))
    return folder


@dataclass(frozen=True)
class Result:
    """What kdkit.image.buildrun.BuildResult carries that the record reads."""

    tag: str
    image_id: str
    seconds: float


def build_record(root: Path, tag: str, start: float, end: float) -> None:
    line = {"tag": tag, "image_id": "sha256:00", "started": iso(start), "ended": iso(end),
            "seconds": (end - start) * 3600, "backend": "cpu"}
    (root / BUILDS).parent.mkdir(parents=True, exist_ok=True)
    with (root / BUILDS).open("a") as handle:
        handle.write(json.dumps(line) + "\n")


def campaign_folders(root: Path) -> None:
    """A build 8:00-8:30, two workers 9:00-10:00 and 9:10-10:10 (parallel), a training 12:00-14:00 beside a
    sweep 13:50-14:30, a killed training 16:00-16:30, a resume test 17:00-17:15."""
    runs = root / "runs"
    build_record(root, "proj:cpu-1", 8, 8.5)
    for worker, start in ((0, 9), (1, 9 + 1 / 6)):
        write(runs / f"20250301T090000Z-abcdef12-w{worker}of2", {
            "params.json": {"created": iso(start), "params_hash": "abcdef12"},
            "summary.json": {"verdict": "pass", "timings": {"seconds": 3600.0}}})
    write(runs / "train-20250301-120000", {
        "params.json": {"kind": "train", "created": iso(12), "variant": "control"},
        "summary.json": {"kind": "train", "verdict": "pass", "started": iso(12), "ended": iso(14),
                         "timings": {"seconds": 7200}}})
    write(runs / "sweep-20250301-143000", {"sweep.json": {
        "warmup_seconds": 600, "rows": [{"seconds": 1800}, {"seconds": 0}]}}, when=14.5)
    killed = {"params.json": {"kind": "train", "created": iso(16), "variant": "high-lr"},
              "metrics.jsonl": "".join(json.dumps({"step": n, "t": n * 60.0, "loss": 1.0}) + "\n"
                                       for n in range(31)),
              "stop.json": {"reason": "killed", "at": iso(16.25)}}
    write(runs / "train-20250301-160000", killed, when=16.1)
    write(runs / "resume-test-20250301-170000", {"report.json": {"ok": True}}, when=17.25)
    write(runs / "20250301T090000Z-abcdef12-gathered", {"summary.json": {"kind": "gathered"}})


def test_each_kind_is_read_from_its_own_records(tmp_path: Path) -> None:
    campaign_folders(tmp_path)
    log = work_log(tmp_path)
    got = [(i.kind, i.name, i.start, i.end, i.open) for i in log.intervals]
    assert got == [
        ("build", "proj:cpu-1", at(8), at(8.5), False),
        ("worker", "20250301T090000Z-abcdef12-w0of2", at(9), at(10), False),
        ("worker", "20250301T090000Z-abcdef12-w1of2", at(9 + 1 / 6), at(10 + 1 / 6), False),
        ("train", "train-20250301-120000", at(12), at(14), False),
        ("sweep", "sweep-20250301-143000", at(14.5) - timedelta(seconds=2400), at(14.5), False),
        # metrics.jsonl's last t (1800 s) is latest
        ("train", "train-20250301-160000", at(16), at(16.5), True),
        ("resume-test", "resume-test-20250301-170000", at(17), at(17.25), False),
    ]
    assert [i.variant for i in log.intervals if i.kind == "train"] == ["control", "high-lr"]
    assert log.unread == []


def test_observed_hours_are_the_union_and_the_gaps_are_idle_time(tmp_path: Path) -> None:
    campaign_folders(tmp_path)
    intervals = work_log(tmp_path).intervals
    # 0.5 build + 1h10 workers (not 2 h) + 12:00-14:30 training and sweep (not 2h40) + 0.5 killed + 0.25
    assert observed_hours(intervals) == pytest.approx(0.5 + 7 / 6 + 2.5 + 0.5 + 0.25)
    assert sum(i.hours for i in intervals) == pytest.approx(0.5 + 2 + 2 + 2 / 3 + 0.5 + 0.25)
    assert [(g.start, g.end) for g in gaps(intervals)] == [
        (at(8.5), at(9)), (at(10 + 1 / 6), at(12)), (at(14.5), at(16)), (at(16.5), at(17))]
    by_kind = hours_by(intervals)
    assert by_kind["worker"] == pytest.approx(7 / 6) and by_kind["train"] == pytest.approx(2.5)
    assert hours_by(intervals, key="stage")["control"] == pytest.approx(2)


def test_union_arithmetic() -> None:
    def iv(a: float, b: float) -> Interval:
        return Interval("pilot", f"{a}-{b}", at(a), at(b))

    assert observed_hours([]) == 0 and gaps([]) == []
    assert observed_hours(
        [iv(0, 2), iv(1, 3), iv(3, 4), iv(6, 7), iv(6.5, 6.75)]) == pytest.approx(5)
    assert gaps([iv(6, 7), iv(0, 2), iv(1, 3)]) == [(at(3), at(6))]
    # three parallel workers: one hour
    assert observed_hours([iv(0, 1), iv(0, 1), iv(0, 1)]) == pytest.approx(1)


def test_pilot_runs_open_resumed_and_named_by_time(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write(runs / "20250301T100000Z-aaaaaaaa", {"params.json": {},  # no "created": its ID's time
                                                "summary.json": {
                                                    "verdict": "fail",
                                                    "timings": {"seconds": 1800}}})
    write(runs / "resumed", {"params.json": {"created": iso(11)}, "stop-1.json": {"at": iso(11.5)},
                             "env-2.json": {"started": iso(12)}, "stop-2.json": {"at": iso(12.25)},
                             "summary.json": {"verdict": "pass", "resumed": True,
                                              "timings": {"seconds": 900}}},
          when=13)
    write(runs / "open", {"params.json": {"created": iso(14)}, "results.jsonl": "{}\n"}, when=14.2)
    write(runs / "open", {"heartbeat.json": {"started": iso(14), "updated": iso(14.75)}}, when=14.1)
    write(runs / "nothing", {"params.json": {}})
    log = work_log(tmp_path)
    got = [(i.name, i.start, i.end, i.open) for i in log.intervals]
    assert got == [("20250301T100000Z-aaaaaaaa", at(10), at(10.5), False),
                   ("resumed", at(11), at(11.5), False),  # its first session, to where it stopped
                   # its second: from its env report to its stop
                   ("resumed", at(12), at(12.25), False),
                   # its last, to its summary
                   ("resumed", at(13) - timedelta(seconds=900), at(13), False),
                   ("open", at(14), at(14.75), True)]  # to its heartbeat, later than its files
    assert log.unread == [f"{runs / 'nothing'}: no start or end time recorded; not counted"]


def test_a_metrics_series_is_read_by_its_tail_only(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    with path.open("w") as handle:
        for step in range(20000):
            handle.write(json.dumps({"step": step, "t": step * 0.5, "loss": 0.1}) + "\n")
        handle.write('{"step": 20000, "t": 99')  # torn by a kill
    assert last_metric_time(path) == 19999 * 0.5
    assert last_metric_time(tmp_path / "none.jsonl") is None


def test_build_records_are_appended_and_torn_lines_named(tmp_path: Path) -> None:
    result = Result("proj:cpu-0123", "sha256:ab", 90.0)
    assert recorded(tmp_path, "cpu", result) is result
    assert recorded(tmp_path, "cuda", Result("proj:cuda-0123", "sha256:cd", 30.0)) is not None
    with (tmp_path / BUILDS).open("a") as handle:
        handle.write('{"tag": "torn", "started": "2025-')
    lines = (tmp_path / BUILDS).read_text().splitlines()
    first = json.loads(lines[0])
    assert sorted(first) == ["backend", "ended", "image_id", "seconds", "started", "tag"]
    assert (first["tag"], first["image_id"], first["backend"],
            first["seconds"]) == ("proj:cpu-0123", "sha256:ab",
                                                                                     "cpu", 90.0)
    log = work_log(tmp_path)
    assert [(i.kind, i.name, round(i.hours * 3600)) for i in log.intervals] == [
        ("build", "proj:cpu-0123", 90), ("build", "proj:cuda-0123", 30)]
    assert log.unread == [f"{tmp_path / BUILDS}: line 3: no started/ended times; not counted"]


def test_a_refused_build_record_costs_the_build_nothing(tmp_path: Path) -> None:
    (tmp_path / ".kdkit-logs").write_text("a file where the folder goes")
    result = Result("proj:cpu-0123", "sha256:ab", 1.0)
    assert recorded(tmp_path, "cpu", result) is result


def test_parallel_appends_never_interleave(tmp_path: Path) -> None:
    script = ("import sys\nfrom pathlib import Path\nfrom kdkit.image.buildlog import recorded\n"
              "class R:\n    tag = 'p:' + 'x' * 2000\n    image_id = 'sha256:1'\n    seconds = "
              "1.0\nfor _ in range(50):\n    recorded(Path(sys.argv[1]), 'cpu', R())\n")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path)]) for _ in range(4)]
    assert all(p.wait() == 0 for p in procs)
    lines = (tmp_path / BUILDS).read_text().splitlines()
    assert len(lines) == 200 and all(json.loads(line)["image_id"] == "sha256:1" for line in lines)


def test_a_serve_test_counts_from_its_id_to_its_report(tmp_path: Path) -> None:
    """kdkit serve-test's folder (serve-test-<time>): the time in its ID to serve-test.json, like a resume test;
    one without its report yet is open until its newest file."""
    runs = tmp_path / "runs"
    write(runs / "serve-test-20250301-180000", {"serve-test.json": {"ok": True}}, when=18.5)
    write(runs / "serve-test-20250301-190000", {"requests.jsonl": "{}\n"}, when=19.25)
    got = [(i.kind, i.name, i.start, i.end, i.open) for i in work_log(tmp_path).intervals]
    assert got == [("serve-test", "serve-test-20250301-180000", at(18), at(18.5), False),
                   ("serve-test", "serve-test-20250301-190000", at(19), at(19.25), True)]
