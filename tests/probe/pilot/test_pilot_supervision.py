"""Issue 10 §2: whatever the app does, the pilot's exit code is 0 only with a complete, passing
summary, and a run the app ended is closed with stop.json naming what happened and the batch in flight.

Each case is a real app in a scaffolded project: it answers correctly (the oracle) until it
meets doc-05, then does its one wrong thing. The pilot runs for real, the app in its own
process; nothing is mocked. Every case checks the same invariants: exit code, a failing
summary.json, stop.json with the rule, the reason and the batch/IDs in flight, the run folder
closed (copy-out --verify accepts it), and no result of the earlier batches lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA, REPO, invoke
from tests.probe.pilot.test_pilot import edit_config, pilot

TRIGGER = "doc-05"  # batch 1 with batch_size 4 (doc-05..doc-08)
APP = '''"""Correct until it meets {trigger}, then: {what}."""
import os, signal, sys, time
from src.oracle import predict as correct

def RUN_DIR():
    import glob
    runs = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs", "*")
    return max(glob.glob(runs), key=os.path.getmtime)

def predict(items):
    if os.environ.get("KDKIT_TEST_BEHAVE") != "1" and any(item["id"] == "{trigger}" for item in items):
{body}
    return correct(items)
'''


def make_app(project: Path, name: str, body: str, what: str, **config: Any) -> Path:
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    indented = "\n".join("        " + line for line in body.splitlines())
    (project / "src"
     / f"{name}.py").write_text(APP.format(trigger=TRIGGER, body=indented, what=what))
    return edit_config(project, entry=f"src.{name}:predict", device="cpu", **config)


def closed_and_failing(project: Path, run_id: str, code: int,
                       summary: dict[str, Any]) -> dict[str, Any]:
    """The invariants of a run the app ended; returns stop.json."""
    run_dir = project / "runs" / run_id
    assert code == 1, summary
    assert summary["verdict"] == "fail"
    saved = json.loads((run_dir / "summary.json").read_text())
    assert saved["verdict"] == "fail" and saved["stopped"]["rule"] == summary["stopped"]["rule"]
    stop = json.loads((run_dir / "stop.json").read_text())
    assert stop["in_flight"]["batch"] == 1 and TRIGGER in stop["in_flight"]["ids"], stop
    verified = invoke("copy-out", run_dir, "--verify")
    assert verified.exit_code == 0, verified.output
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    # batch 0 kept, batch 1 not
    assert [r["id"] for r in lines] == ["doc-01", "doc-02", "doc-03", "doc-04"]
    return stop


# (name, body, rule, words the reason must hold)
ENDINGS = [
    ("exit0", "sys.exit(0)", "app-exit", "called sys.exit(0)"),
    ("exit3", "sys.exit(3)", "app-exit", "called sys.exit(3)"),
    ("exitmsg", "sys.exit('done here')", "app-exit", "called sys.exit('done here')"),
    ("osexit0", "os._exit(0)", "app-exit", "exited with status 0"),
    ("osexit9", "os._exit(9)", "app-exit", "exited with status 9"),
    ("keyboard", "raise KeyboardInterrupt", "app-fatal", "raised KeyboardInterrupt"),
    ("genexit", "raise GeneratorExit('gen')", "app-fatal", "raised GeneratorExit: gen"),
    ("custombase",
     "class Stop(BaseException): pass\nraise Stop('custom harsh')", "app-fatal",
     "raised Stop: custom"),
    ("segv", "os.kill(os.getpid(), signal.SIGSEGV)", "app-crash", "signal 11 (SIGSEGV)"),
    ("nullread", "import ctypes\nctypes.string_at(0)", "app-crash", "signal 11 (SIGSEGV)"),
    ("oomkill", "os.kill(os.getpid(), signal.SIGKILL)", "app-crash", "out-of-memory killer"),
    ("abort", "os.abort()", "app-crash", "signal 6 (SIGABRT)"),
    ("closes",
     "os.close(1)\nos.close(0)\nfor fd in range(3, 64):\n    try: os.close(fd)\n    except "
     "OSError: pass\ntime.sleep(60)", "app-protocol",
     "closed its pipe to the harness during the batch"),
]


@pytest.mark.parametrize(("name", "body", "rule", "words"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_an_app_that_ends_its_process_never_passes_and_the_run_is_closed(
        project: Path, name: str, body: str, rule: str, words: str) -> None:
    make_app(project, name, body, f"ends the process: {name}")
    code, summary, _ = pilot(project, "--run-id", name)
    stop = closed_and_failing(project, name, code, summary)
    assert stop["rule"] == rule, stop
    assert words in stop["reason"], stop["reason"]
    assert stop["app_process"]["pid"] > 0
    if rule == "app-crash":
        assert stop["app_process"]["signal"] > 0 and stop["app_process"]["signal_name"].startswith(
            "SIG")


def test_a_stopped_run_resumes_to_a_pass_once_the_app_behaves(project: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    make_app(project, "exitonce", "sys.exit(0)", "exits once")
    code, summary, _ = pilot(project, "--run-id", "again")
    assert code == 1 and summary["stopped"]["rule"] == "app-exit"
    # not part of the config or the code: a resume may go on
    monkeypatch.setenv("KDKIT_TEST_BEHAVE", "1")
    code, summary, _ = pilot(project, "--resume", "again")
    assert code == 0, summary["problems"]
    assert summary["accepted"] == 11 and summary["resumed"] is True


def test_a_hanging_batch_hits_max_batch_seconds(project: Path) -> None:
    make_app(project, "hang", "time.sleep(3600)", "hangs",
             stop={"max_rejected": None, "max_seconds": None,
                    "max_batch_seconds": 1.5})
    started = time.monotonic()
    code, summary, _ = pilot(project, "--run-id", "hang")
    # a hang only: the app sleeps an hour, max_batch_seconds is 1.5
    assert time.monotonic() - started < 600
    stop = closed_and_failing(project, "hang", code, summary)
    assert stop["rule"] == "max_batch_seconds"
    assert stop["reason"].startswith(
        "stop rule: the app took longer than max_batch_seconds 1.5 on the batch")


def test_max_seconds_still_stops_an_app_that_hangs_while_ignoring_signals(project: Path) -> None:
    body = ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsignal.signal(signal.SIGINT, "
            "signal.SIG_IGN)\nwhile True:\n    pass")
    make_app(project, "stubborn", body, "spins", stop={"max_rejected": None, "max_seconds": 2})
    code, summary, _ = pilot(project, "--run-id", "stubborn")
    stop = closed_and_failing(project, "stubborn", code, summary)
    assert stop["rule"] == "max_seconds"


@pytest.mark.parametrize(("name", "top"), [
    ("importexit", "import sys\nsys.exit(0)\n"),
    ("import_osexit", "import os\nos._exit(0)\n"),
    ("importkill", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"),
    ("importbase", "raise KeyboardInterrupt\n"),
])
def test_an_app_that_ends_the_process_while_imported_never_passes(
    project: Path, name: str, top: str) -> None:
    (project / "src" / f"{name}.py").write_text(top + "def predict(items):\n    return []\n")
    edit_config(project, entry=f"src.{name}:predict", device="cpu")
    code, summary, _ = pilot(project, "--run-id", name)
    run_dir = project / "runs" / name
    assert code == 1 and summary["verdict"] == "fail"
    stop = json.loads((run_dir / "stop.json").read_text())
    assert "importing the entry" in stop["reason"], stop
    assert (run_dir / "results.jsonl").read_text() == ""
    assert invoke("copy-out", run_dir, "--verify").exit_code == 0


def test_answers_json_cannot_carry_are_judged_not_written_raw(project: Path) -> None:
    """NaN, objects and tuples from the app reach results.jsonl as data, and the files stay strict JSON."""
    body = ("class Thing:\n    def __repr__(self): return 'Thing()'\n"
            "return [{'id': 'doc-05', 'category': float('nan')}, {'id': 'doc-06', 'category': "
            "Thing()},\n        ('doc-07', 'invoice'), {'id': 'doc-08', 'error': float('inf')}]")
    make_app(project, "oddvalues", body, "returns values JSON cannot carry")
    code, summary, _ = pilot(project, "--run-id", "odd")
    assert code == 1
    run_dir = project / "runs" / "odd"
    def refuse(token: str) -> None:
        pytest.fail(f"a written file holds {token}")

    for path in (run_dir / "summary.json", run_dir / "results.jsonl"):
        for line in [path.read_text()] if path.suffix == ".json" else path.read_text().splitlines():
            json.loads(line, parse_constant=refuse)
    problems = "\n".join(summary["problems"])
    assert 'doc-05: category "nan" is not one of' in problems
    assert 'doc-06: category "Thing()" is not one of' in problems
    assert "malformed result \"('doc-07', 'invoice')\"" in problems
    assert "doc-08: rejected without a reason" in problems


def test_an_app_printing_to_stdout_does_not_corrupt_json_output(project: Path) -> None:
    body = (
        "print('hello from the app', flush=True)\nos.write(1, b'raw bytes on fd 1\\n')\nreturn "
        "correct(items)")
    make_app(project, "chatty", body, "prints")
    done = subprocess.run([sys.executable, "-m", "kdkit.probe", "pilot", str(project), "--json"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # the whole of stdout is the summary
    assert summary["verdict"] == "pass"
    assert "hello from the app" in done.stderr and "raw bytes on fd 1" in done.stderr


def test_an_app_writing_into_every_descriptor_is_a_protocol_stop(project: Path) -> None:
    body = ("for fd in range(0, 64):\n    try: os.write(fd, b'\\xff' * 64)\n    except OSError: "
            "pass\nreturn correct(items)")
    make_app(project, "scribbler", body, "writes into every descriptor it has")
    code, summary, _ = pilot(project, "--run-id", "scribble")
    stop = closed_and_failing(project, "scribble", code, summary)
    assert stop["rule"] == "app-protocol", stop


def test_an_app_whose_helper_outlives_it_is_killed_with_its_group(
    project: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "helper.pid"
    body = ("import subprocess\np = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(600)'])\nopen({str(pid_file)!r}, 'w').write(str(p.pid))\nreturn "
            "correct(items)")
    make_app(project, "spawner", body, "starts a helper that sleeps")
    code, summary, _ = pilot(project, "--run-id", "spawner")
    assert code == 0, summary["problems"]
    helper = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(helper):
        time.sleep(0.1)
    assert not _alive(helper), "the app's helper process outlived the pilot"


def test_sigkill_of_the_pilot_takes_the_app_process_with_it(project: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "app.pid"
    body = f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)"
    make_app(project, "sleeper", body, "sleeps")
    process = subprocess.Popen([sys.executable, "-m", "kdkit.probe", "pilot", str(project),
                                "--run-id", "k",
                                "--quiet"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    app = int(pid_file.read_text())
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(app):
        time.sleep(0.1)
    assert not _alive(app), "the app's process outlived a SIGKILLed pilot"


def test_sigterm_during_a_batch_closes_the_run_naming_the_batch(project: Path) -> None:
    make_app(project, "slowone", "time.sleep(600)", "sleeps")
    process = subprocess.Popen([sys.executable, "-m", "kdkit.probe", "pilot", str(project),
                                "--run-id", "term",
                                "--quiet"], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    results = project / "runs" / "term" / "results.jsonl"
    deadline = time.monotonic() + 120
    while not results.exists() or len(results.read_bytes().splitlines()) < 4:
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 143
    stop = json.loads((results.parent / "stop.json").read_text())
    assert stop["rule"] == "terminate" and stop["in_flight"]["batch"] == 1 and TRIGGER in stop["in_flight"]["ids"]
    assert json.loads((results.parent / "summary.json").read_text())["verdict"] == "fail"


def test_the_image_chain_reports_no_pass_for_an_exiting_app(project: Path) -> None:
    """The image's default command: diagnose && verify-env && pilot. Here the pilot part, exactly as chained."""
    make_app(project, "chain", "sys.exit(0)", "exits")
    done = subprocess.run([
        "/bin/sh", "-c", f"{sys.executable} -m kdkit.probe pilot {project} --quiet && echo PASSED"],
                          capture_output=True, text=True, cwd=REPO, timeout=300, check=False)
    assert done.returncode == 1 and "PASSED" not in done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _named(comm: str) -> list[int]:
    """The live processes named ``comm`` (prctl PR_SET_NAME; a fork keeps its parent's name)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == comm \
                    and _alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def test_a_process_that_keeps_forking_away_from_its_pid_dies_with_the_app(project: Path) -> None:
    """A chain where each process forks its next and exits at once: no pid lives long, each orphan is the
    pilot's (subreaper), and one look at the pilot's descendants finds a process that has already moved on."""
    comm = f"kdkc{os.getpid() % 10**8}"
    body = ("if os.fork() == 0:\n    os.setsid()\n    import ctypes\n"
            f"    ctypes.CDLL(None).prctl(15, {comm.encode()!r}, 0, 0, 0)\n"
            "    while True:\n        if os.fork() != 0:\n            os._exit(0)\n"
            "time.sleep(0.2)\nreturn correct(items)")
    make_app(project, "chain", body, "leaves a process that keeps forking away")
    code, summary, _ = pilot(project, "--run-id", "chain")
    left = _named(comm)
    # never left spinning, whatever the test finds: their group at once
    for _ in range(50) if left else ():
        for pid in _named(comm):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
        time.sleep(0.02)
    assert left == [], f"{len(left)} processes of the chain outlived the pilot"
    assert code == 0, summary["problems"]


# ---------------------------------------------------------------- the app against its own run folder


FORGER = '''
import glob, json, os, threading, time
from pathlib import Path
from src.oracle import labels
ROOT = Path(__file__).resolve().parents[1]

def forge():
    run = max(glob.glob(str(ROOT / "runs" / "*")), key=os.path.getmtime)
    path = os.path.join(run, "results.jsonl")
    while b"doc-11" not in open(path, "rb").read():
        time.sleep(0.001)
    lines = [json.dumps({"id": i, "outcome": "accepted", "category": c, "batch": 0, "lines": 11})
             for i, c in labels().items() if i != "doc-12"]
    lines.append(json.dumps({"id": "doc-12", "outcome": "rejected", "by": "harness", "reason": "x", "batch": 0,
                             "lines": 11}))
    data = ("\\n".join(lines) + "\\n").encode()
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, data)
    os.ftruncate(fd, len(data))
    os.close(fd)

def predict(items):
    if any(item["id"] == "doc-09" for item in items):
        threading.Thread(target=forge, daemon=True).start()
    return []  # answers nothing at all
'''


def test_an_app_that_answers_nothing_and_forges_the_results_file_fails(project: Path) -> None:
    shutil.copy(DATA / "apps" / "oracle.py", project / "src" / "oracle.py")
    (project / "src" / "forger.py").write_text(FORGER)
    edit_config(project, entry="src.forger:predict", device="cpu")
    code, summary, _ = pilot(project, "--run-id", "forged")
    assert code == 1 and summary["verdict"] == "fail"
    assert any(p.startswith("results.jsonl: not the results the harness appended")
               for p in summary["problems"])


def test_an_app_that_patches_the_server_to_forge_after_the_last_batch_fails(project: Path) -> None:
    body = ("import kdkit.probe.pilot.appchild as server\nreal = server.peak_memory\n"
            "def forged(device):\n"
            "    import glob\n    run = RUN_DIR()\n"
            "    with open(os.path.join(run, 'results.jsonl'), 'ab') as h:\n"
            "        h.write(b'{\"id\":\"doc-99\",\"outcome\":\"accepted\",\"category\":\"invoice\",'\n"
            "                b'\"batch\":9,\"lines\":1}\\n')\n"
            "    return real(device)\n"
            "server.peak_memory = forged\nreturn correct(items)")
    make_app(project, "patcher", body, "patches the harness's server")
    code, summary, _ = pilot(project, "--run-id", "patched")
    assert code == 1
    assert any(p.startswith("results.jsonl: not the results the harness appended")
               for p in summary["problems"])


@pytest.mark.parametrize(("name", "body", "problem"), [
    ("dropper", "open(os.path.join(RUN_DIR(), 'notes.txt'), 'w')"
                ".write('x')\nreturn correct(items)",
     "notes.txt (a file): in the run folder but not put there"),
    ("linker",
     "os.symlink('/etc/hostname', os.path.join(RUN_DIR(), 'summary.md'))\nreturn correct(items)",
     "summary.md (a symbolic link)"),
    ("paramsedit", "p = os.path.join(RUN_DIR(), 'params.json')\n"
                   "open(p, 'a').write(' ')\nreturn correct(items)",
     "params.json: changed by something other than"),
], ids=["drops a file", "plants a link", "edits params.json"])
def test_an_app_writing_into_its_run_folder_fails_the_run(
    project: Path, name: str, body: str, problem: str) -> None:
    make_app(project, name, body, "writes into its run folder")
    code, summary, _ = pilot(project, "--run-id", name)
    assert code == 1 and any(p.startswith(problem)
                             for p in summary["problems"]), summary["problems"]
    sums = (project / "runs" / name / "SHA256SUMS").read_text()
    assert "notes.txt" not in sums and "/etc" not in sums


def test_a_daemon_the_app_leaves_behind_dies_before_the_run_is_judged(
    project: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "daemon.pid"
    # The app answers only once its daemon is running (its pid file in place): on a loaded machine the pilot
    # could otherwise end, and kill the daemon, before the daemon ever ran a line.
    body = (f"if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
            f"        os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
            "        import glob\n        while True:\n"
            "            for s in glob.glob(os.path.join(RUN_DIR(), '..', '*', 'summary.json')):\n"
            "                open(s, 'w').write('{\"verdict\": \"pass\"}')\n"
            "            time.sleep(0.01)\n    os._exit(0)\n"
            f"while not os.path.exists({str(pid_file)!r}):\n    time.sleep(0.01)\n"
            "return correct(items)")
    make_app(project, "daemonic", body, "leaves a daemon that rewrites summaries")
    code, summary, _ = pilot(project, "--run-id", "daemon")
    assert code == 0, summary["problems"]
    daemon = int(pid_file.read_text())
    assert not _alive(daemon), "a daemon the app left behind outlived the pilot"
    time.sleep(0.3)
    assert json.loads(
        (project / "runs" / "daemon" / "summary.json").read_text())["run_id"] == "daemon"
    assert invoke("copy-out", project / "runs" / "daemon", "--verify").exit_code == 0


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1) here")
def test_a_pilot_that_is_pid_1_runs_its_app(project: Path) -> None:
    """`docker run IMAGE kdkit pilot`: the pilot is PID 1 of its namespace, so the app's parent is PID 1."""
    make_app(project, "fine", "return correct(items)", "answers")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m",
                           "kdkit.probe",
                           "pilot", str(project), "--quiet"], cwd=REPO, capture_output=True,
                          text=True, timeout=300,
                          check=False)
    if "Operation not permitted" in done.stderr:
        pytest.skip("unshare --pid is not permitted here")
    assert done.returncode == 0, done.stdout + done.stderr


# ---------------------------------------------------------------- a lone surrogate is data, never a crash


@pytest.mark.parametrize("body", [
    "out = correct(items)\nout[0] = {'id': out[0]['id'], 'error': 'bad byte \\udc80 here'}\nreturn "
    "out",
    "out = correct(items)\nout[0]['category'] = 'inv\\ud800oice'\nreturn out",
    "out = correct(items)\nout.append({'id': 'doc-\\udfff', 'category': 'invoice'})\nreturn out",
    "raise ValueError('cannot read \\udc80')",
], ids=["reason", "category", "invented id", "exception"])
def test_an_app_string_with_a_lone_surrogate_is_recorded_and_the_run_closed(
    project: Path, body: str) -> None:
    make_app(project, "surrogate", body, "answers with a lone surrogate")
    code, _summary, stderr = pilot(project, "--run-id", "s")
    assert "Traceback" not in stderr and code == 1
    run = project / "runs" / "s"
    assert (run / "SHA256SUMS").is_file() and invoke("copy-out", run, "--verify").exit_code == 0
    for name in ("summary.json", "summary.md", "results.jsonl"):
        (run / name).read_bytes().decode("utf-8")  # valid UTF-8 throughout


# ---------------------------------------------------------------- nothing secret the app emits is shown


@pytest.mark.parametrize("body", [
    "return [{'id': i['id'], 'error': 'password=hunter2hunter2 at "
    "https://bob:s3cr3tpw@example.com/x'} for i in items]",
    "raise RuntimeError('AKIAIOSFODNN7EXAMPLE was refused')",
    "return [{'id': i['id'], 'category': 'ghp_' + 'a1B2c3D4e5' * 3 + 'F6g7h8'} for i in items]",
])
def test_credentials_the_app_emits_are_redacted_everywhere_the_run_shows_them(
    project: Path, body: str) -> None:
    make_app(project, "leaky", body, "emits credentials")
    result = invoke("pilot", project, "--run-id", "leak", "--json")
    run = project / "runs" / "leak"
    shown = result.output + "".join((run / n).read_text()
                                    for n in ("summary.json", "summary.md", "results.jsonl",
                                              *(["stop.json"] if (run / "stop.json").exists()
                                                else [])))
    for secret in ("hunter2hunter2", "s3cr3tpw", "AKIAIOSFODNN7EXAMPLE", "a1B2c3D4e5a1B2c3D4e5"):
        assert secret not in shown, secret
    assert "<redacted" in shown
