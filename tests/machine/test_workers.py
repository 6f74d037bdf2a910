"""Workers: shares of the manifest, `kdkit pilot --worker I --workers N`, `kdkit gather`, `kdkit run --workers N`.

Every pilot run is real (the oracle app on CPU, fsynced results, SIGKILL of a real process).
NVIDIA and AMD hardware is stood in for by a HostFacts, as in tests/machine/test_run.py; the Docker
test runs N real containers of the session's end-to-end image on the cpu backend.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import BadInput
from kdkit.machine.host import HostFacts
from kdkit.machine.workers import Prefixed, check_workers, gpu_count
from kdkit.probe.pilot.shares import Share, parse_share, worker_of
from kdkit.probe.results.copyout import verify_copy
from tests.conftest import DATA, REPO, invoke, reseal, tree_snapshot, wait_for_lines

TWELVE = [f"doc-{n:02d}" for n in range(1, 13)]
# sha256(id) % 2 == 1
SHARE_1_OF_2 = ["doc-01", "doc-04", "doc-05", "doc-06", "doc-09", "doc-10", "doc-11"]
NVIDIA_HOST = HostFacts(uid=0, gid=0, nvidia_gpus=["0", "GPU-aaaa-1111", "1", "GPU-bbbb-2222"],
                        nvidia_driver="570.124.06", nvidia_runtime=True)
AMD_HOST = HostFacts(uid=0, gid=0, kfd=True,
                     render_nodes=["/dev/dri/renderD128", "/dev/dri/renderD129"],
                     device_gids=[44])


def use_oracle(project: Path, name: str = "oracle", **config: Any) -> Path:
    """The correct test app, device cpu; ``name`` another app of tests/data/apps built on it."""
    for app in {"oracle", name}:
        shutil.copy(DATA / "apps" / f"{app}.py", project / "src" / f"{app}.py")
    path = project / "config" / "pilot.json"
    data = json.loads(path.read_text())
    data.update(entry=f"src.{name}:predict", device="cpu", **config)
    path.write_text(json.dumps(data, indent=2))
    return project


def pilot(project: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = invoke("pilot", project, "--json", "--quiet", *args)
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else {}


def workers_run(project: Path, run_id: str = "R", workers: int = 2) -> list[Path]:
    for i in range(workers):
        code, summary = pilot(project, "--run-id", run_id, "--worker", str(i), "--workers",
                              str(workers))
        assert code == 0, summary
    return [project / "runs" / f"{run_id}-w{i}of{workers}" for i in range(workers)]


def gather(*args: str | Path) -> tuple[int, dict[str, Any], str]:
    result = invoke("gather", *args, "--json")
    return (result.exit_code,
            json.loads(result.stdout) if result.stdout.strip() else {}, result.stderr)


def ids(run_dir: Path) -> Counter[str]:
    return Counter(json.loads(line)["id"]
                   for line in (run_dir / "results.jsonl").read_text().splitlines())


def edit_results(run_dir: Path, keep: Callable[[str], bool] = lambda line: True,
                 extra: Sequence[str] = ()) -> None:
    """Rewrite a closed run's results.jsonl and its SHA256SUMS: a worker that closed with these results."""
    lines = [ln for ln in (run_dir / "results.jsonl").read_text().splitlines()
             if keep(ln)] + list(extra)
    (run_dir / "results.jsonl").write_text("\n".join(lines) + "\n")
    reseal(run_dir)


# ---------------------------------------------------------------- shares


def test_every_id_is_in_exactly_one_share() -> None:
    idents = [f"item-{n}" for n in range(3000)]
    for workers in (1, 2, 3, 8):
        shares = [[i for i in idents if Share(w, workers).holds(i)] for w in range(workers)]
        # each once, none lost
        assert Counter(i for share in shares for i in share) == Counter(idents)
        assert all(abs(len(s) - len(idents) / workers) < 0.15 * len(idents) / workers
                   for s in shares)
    assert [worker_of(i, 2) for i in TWELVE].count(1) == len(SHARE_1_OF_2)
    # pinned: a new hash would move IDs
    assert [i for i in TWELVE if worker_of(i, 2) == 1] == SHARE_1_OF_2


@pytest.mark.parametrize("seed", ["0", "12345"])
def test_shares_are_the_same_in_another_process_under_any_hash_seed(seed: str) -> None:
    code = "import json,sys; from kdkit.probe.pilot.shares import worker_of; " \
           "print(json.dumps([worker_of(f'item-{n}', 5) for n in range(500)]))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=REPO,
                          env={**os.environ, "PYTHONHASHSEED": seed})
    assert json.loads(done.stdout) == [worker_of(f"item-{n}", 5) for n in range(500)]


@pytest.mark.parametrize(("args", "message"), [
    (("--worker", "0"),
     "Error: --worker and --workers go together: give both (e.g. --worker 0 --workers 2) or "
     "neither"),
    (("--worker", "2", "--workers", "2"),
     "Error: --worker 2: expected 0..1 for --workers 2 (workers count from 0)"),
    (("--worker", "0", "--workers", "0"), "Error: --workers 0: expected a whole number >= 1"),
    (("--worker", "4", "--workers", "20"),
     "Error: --worker 4 --workers 20: this share of the manifest is empty "
     "(12 IDs); use fewer workers"),
])
def test_bad_worker_options_are_exit_2_and_write_nothing(
    project: Path, args: tuple[str, ...], message: str) -> None:
    before = tree_snapshot(project)
    result = invoke("pilot", project, *args)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == message
    assert tree_snapshot(project) == before


def test_parse_share_without_options_is_the_whole_manifest() -> None:
    assert parse_share(None, None) is None
    assert parse_share(1, 3) == Share(1, 3)


# ---------------------------------------------------------------- the pilot's share and the gathering


def test_workers_answer_their_shares_and_the_gathering_passes(project: Path) -> None:
    use_oracle(project)
    w0, w1 = workers_run(project)
    assert ids(w1) == Counter(SHARE_1_OF_2) and ids(w0) == Counter(
        sorted(set(TWELVE) - set(SHARE_1_OF_2)))
    assert json.loads((w1 / "params.json").read_text())["share"] == {"worker": 1, "workers": 2}
    assert json.loads((w1 / "summary.json").read_text())["total"] == 7

    code, summary, _ = gather(w0, w1)
    assert code == 0, summary["problems"]
    assert (summary["verdict"], summary["total"], summary["accepted"],
            summary["rejected"]) == ("pass", 12, 11, 1)
    assert [w["answered"] for w in summary["per_worker"]] == [5, 7]
    out = Path(summary["out"])
    assert out == project / "runs" / "R-gathered"
    assert sorted(p.name for p in out.iterdir()) == ["SHA256SUMS", "summary.json", "summary.md"]
    assert verify_copy(out) == 2
    assert "# Gathered run R: PASS" in (out / "summary.md").read_text()


def test_a_second_gathering_needs_force(project: Path) -> None:
    folders = workers_run(use_oracle(project))
    assert gather(*folders)[0] == 0
    result = invoke("gather", *folders)
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: {project / 'runs' / 'R-gathered'}: exists; add "
                                     "--force to replace an earlier gathering")
    assert gather(*folders, "--force")[0] == 0


def _drop_doc_01(w0: Path, w1: Path) -> None:
    edit_results(w1, keep=lambda line: '"id":"doc-01"' not in line)


def _doc_02_twice(w0: Path, w1: Path) -> None:
    (line,) = [ln for ln in (w0 / "results.jsonl").read_text().splitlines()
               if '"id":"doc-02"' in ln]
    edit_results(w1, extra=[line])


def _w1_is_a_copy_of_w0(w0: Path, w1: Path) -> None:
    shutil.rmtree(w1)
    shutil.copytree(w0, w1)
    params = json.loads((w1 / "params.json").read_text())
    params["share"] = {"worker": 1, "workers": 2}
    (w1 / "params.json").write_text(json.dumps(params))
    reseal(w1)


def _flip_a_byte(w0: Path, w1: Path) -> None:
    data = bytearray((w1 / "results.jsonl").read_bytes())
    data[10] ^= 1
    (w1 / "results.jsonl").write_bytes(bytes(data))


@pytest.mark.parametrize(("damage", "expected"), [
    (_drop_doc_01,
     ["doc-01: no result from any worker (its share: worker 1 of 2; resume that worker)"]),
    (_doc_02_twice,
     ["R-w1of2: 1 ID(s) outside its share w1of2 (doc-02); it ran with another share, N or manifest",
      "doc-02: answered by 2 workers (R-w0of2, R-w1of2); every ID must appear exactly once"]),
    (_w1_is_a_copy_of_w0,
     ["R-w1of2: 5 ID(s) outside its share w1of2 (doc-02, doc-03, doc-07, doc-08, doc-12); "
      "it ran with another share, N or manifest"]),
    (_flip_a_byte, ["{w1}/results.jsonl: SHA-256"]),
], ids=["missing-id", "duplicate-across-workers", "wrong-share", "altered-byte"])
def test_each_failure_is_named(project: Path, damage: Any, expected: list[str]) -> None:
    w0, w1 = workers_run(use_oracle(project))
    damage(w0, w1)
    code, summary, _ = gather(w0, w1)
    assert code == 1
    assert summary["verdict"] == "fail"
    for line in expected:
        line = line.format(w1=w1)
        assert any(p.startswith(line) for p in summary["problems"]), (line, summary["problems"])


def _refused(*args: str | Path) -> str:
    """A gathering refused as bad input: exit 2, one line on stderr, no summary written anywhere."""
    result = invoke("gather", *args)
    assert result.exit_code == 2, result.output
    assert not result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ")
    return lines[0].removeprefix("Error: ")


def test_workers_of_another_config_manifest_run_or_world_size_are_refused(project: Path) -> None:
    use_oracle(project, batch_size=4)
    pilot(project, "--run-id", "P", "--worker", "0", "--workers", "2")
    pilot(project, "--run-id", "R", "--worker", "0", "--workers", "2")
    pilot(project, "--run-id", "T", "--worker", "1", "--workers", "3")
    use_oracle(project, batch_size=2)
    pilot(project, "--run-id", "P", "--worker", "1", "--workers", "2")
    manifest = project / "data" / "pilot" / "manifest.json"
    manifest.write_text(manifest.read_text() + "\n")
    pilot(project, "--run-id", "R", "--worker", "1", "--workers", "2")
    pilot(project, "--run-id", "M", "--worker", "1", "--workers", "2")
    runs = project / "runs"
    before = tree_snapshot(project)
    hashes = [json.loads((runs / f"P-w{i}of2" / "params.json").read_text())["params_hash"][:12]
              for i in (0, 1)]
    assert _refused(runs / "P-w0of2", runs / "P-w1of2") == (
        f"{runs / 'P-w1of2'}: params hash {hashes[1]} differs from {runs / 'P-w0of2'}'s "
        f"{hashes[0]}; every worker of a run must run the same pilot config")
    message = _refused(runs / "R-w0of2", runs / "R-w1of2")
    assert message.startswith(f"{runs / 'R-w1of2'}: manifest sha256 ")
    assert message.endswith("every worker of a run must read the same manifest")
    assert _refused(runs / "R-w0of2", runs / "M-w1of2") == (
        f"{runs / 'M-w1of2'}: a worker of run M, not of run R ({runs / 'R-w0of2'}); gather the "
        "folders of one run")
    t_folder = runs / "T-w1of3"
    params = json.loads((t_folder / "params.json").read_text())
    params["run_id"] = "P-w1of3"  # a folder of run P, but one of 3 workers
    (t_folder / "params.json").write_text(json.dumps(params))
    assert _refused(runs / "P-w0of2", t_folder) == (
        f"{t_folder}: one of 3 workers, but {runs / 'P-w0of2'} is one of 2: another world size; "
        "gather the folders of one launch")
    (t_folder / "params.json").write_bytes(before["runs/T-w1of3/params.json"])
    assert tree_snapshot(project) == before


def test_a_missing_worker_is_named(project: Path) -> None:
    use_oracle(project)
    w0, _ = workers_run(project)
    code, summary, _ = gather(w0, "--out", project / "runs" / "g1")
    assert (code, summary["problems"]) == (1,
                                           ["worker 1 of 2: no run folder given (expected "
                                            "R-w1of2); run or resume it"])


@pytest.mark.parametrize(("args", "message"), [
    (("nowhere",),
     "Error: nowhere: not a folder; give the workers' run folders (runs/<run-id>-wIofN)"),
    (("runs",), "Error: runs/params.json: not found; runs is not a pilot run folder"),
    ((),
     "Error: give the workers' run folders (RUN_DIR...) or --from DIR (e.g. runs/R-w0of2 "
     "runs/R-w1of2)"),
    (("--from", "nowhere"),
     "Error: --from nowhere: not a folder; give the folder the workers' folders were copied "
     "into"),
    (("--from", "src"),
     "Error: --from src: no worker run folder below it (a folder holding a params.json with a "
     "share)"),
])
def test_gather_bad_input_is_exit_2_and_writes_nothing(project: Path, args: tuple[str, ...],
                                                       message: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(project)
    before = tree_snapshot(project)
    result = invoke("gather", *args)
    assert result.exit_code == 2
    assert result.stderr.strip() == message
    assert tree_snapshot(project) == before


# ---------------------------------------------------------------- a worker killed and resumed


def test_a_killed_worker_is_named_then_resumed_and_gathered(project: Path) -> None:
    use_oracle(project, "hangs", batch_size=2)
    assert pilot(project, "--run-id", "R", "--worker", "0", "--workers", "2")[0] == 0
    process = subprocess.Popen(
        [sys.executable, "-m", "kdkit.probe", "pilot", str(project), "--run-id", "R", "--worker",
         "1",
         "--workers", "2", "--quiet"],
        env={**os.environ, "HANG_ON": "doc-09"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, cwd=REPO)
    w0, w1 = project / "runs" / "R-w0of2", project / "runs" / "R-w1of2"
    # doc-01, 04 | 05, 06 | then it hangs on doc-09
    wait_for_lines(w1 / "results.jsonl", 4, process)
    time.sleep(0.3)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)

    code, summary, _ = gather(w0, w1)
    assert code == 1
    assert summary["problems"] == [f"{w1}: not closed (no SHA256SUMS); worker 1 of 2 did not "
                                   "finish: resume it with `kdkit pilot --resume R-w1of2 --worker "
                                   "1 --workers 2`"]
    refused = invoke("pilot", project, "--resume", "R-w1of2")
    assert refused.exit_code == 2
    assert refused.stderr.strip() == (f"Error: {w1}/params.json: this run answers share w1of2 but "
                                      "w0of1 was asked; resume it with --worker 1 --workers 2")
    code, resumed = pilot(project, "--resume", "R", "--worker", "1", "--workers", "2")
    assert code == 0, resumed["problems"]
    assert resumed["resumed"] is True and ids(w1) == Counter(SHARE_1_OF_2)
    code, summary, _ = gather(w0, w1, "--force")
    assert (code, summary["verdict"], summary["total"]) == (0, "pass", 12)


# ---------------------------------------------------------------- kdkit run --workers (host side)


def test_gpus_are_counted_from_the_host_facts() -> None:
    assert gpu_count("cuda", NVIDIA_HOST) == 2
    assert gpu_count("rocm", AMD_HOST) == 2
    assert gpu_count("cuda", HostFacts(uid=0, gid=0)) == 0
    assert gpu_count("cpu", HostFacts(uid=0, gid=0)) is None
    check_workers(2, "cuda", NVIDIA_HOST)
    check_workers(64, "cpu", HostFacts(uid=0, gid=0))


@pytest.mark.parametrize(("backend", "host", "message"), [
    ("cuda",
     NVIDIA_HOST,
     "--workers 3: this host has 2 GPU(s) (`nvidia-smi -L`); one worker per GPU, so use "
     "--workers 2 or fewer"),
    ("rocm",
     AMD_HOST,
     "--workers 3: this host has 2 GPU(s) (/dev/dri/renderD*); one worker per GPU, so use "
     "--workers 2 or fewer"),
])
def test_more_workers_than_gpus_is_bad_input(backend: str, host: HostFacts, message: str) -> None:
    with pytest.raises(BadInput) as caught:
        check_workers(3, backend, host)
    assert str(caught.value) == message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(("args", "message"), [
    (("--workers", "0"), "Error: --workers 0: expected a whole number >= 1"),
    (("--workers", "-3"), "Error: --workers -3: expected a whole number >= 1"),
    (("--workers", "257"),
     "Error: --workers 257: at most 256 containers side by side on one host; use fewer "
     "(one per GPU)"),
    (("--workers", "1e18"),
     "Error: --workers 1000000000000000000: at most 256 containers side by side on one host; "
     "use fewer (one per GPU)"),
    (("--workers", "2", "--gpus", "0"),
     "Error: --gpus 0 with --workers: worker i uses GPU i; drop --gpus"),
    (("--workers", "2", "--", "echo", "hi"),
     "Error: --workers runs the pilot in every container; drop the "
     "command after --"),
])
def test_run_workers_bad_input_before_anything(project: Path,
                                               args: tuple[str, ...], message: str) -> None:
    before = tree_snapshot(project)
    result = invoke("run", project, *args)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == message
    assert tree_snapshot(project) == before


def test_output_is_prefixed_a_whole_line_at_a_time() -> None:
    seen: list[bytes] = []
    out = Prefixed("w1", seen.append)
    for chunk in (b"pilot: 1/7", b" IDs\nnext", b" line\n", b"tail"):
        out(chunk)
    out.flush()
    assert b"".join(seen) == b"[w1] pilot: 1/7 IDs\n[w1] next line\n[w1] tail\n"


# ---------------------------------------------------------------- kdkit run --workers 2, real containers


def test_run_workers_prints_n_docker_lines_and_the_gathering(
    built: dict[str, Any], locked_copy: Path) -> None:
    result = invoke("run", locked_copy, "--workers", "2", "--print")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    runs = [ln for ln in lines if ln.startswith("docker run ")]
    assert len(runs) == 2 and all(ln.endswith(" &") for ln in runs)
    assert "--worker 0 --workers 2" in runs[0] and "--worker 1 --workers 2" in runs[1]
    assert lines[-2] == "wait" and lines[-1].startswith("kdkit gather ")
    assert not (locked_copy / "runs").exists() or not any((locked_copy / "runs").iterdir())


def test_run_workers_2_on_cpu_gathers_one_passing_summary(
    built: dict[str, Any], locked_copy: Path) -> None:
    result = invoke("run", locked_copy, "--workers", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["container_exit_codes"] == [0, 0]
    folders = [Path(f) for f in report["run_folders"]]
    assert [f.name for f in folders] == [f"{report['run_id']}-w0of2", f"{report['run_id']}-w1of2"]
    assert ids(folders[1]) == Counter(SHARE_1_OF_2)
    assert sum(map(ids, folders), Counter()) == Counter(TWELVE)
    summary = report["summary"]
    assert (summary["verdict"], summary["total"], summary["workers"]) == ("pass", 12, 2)
    assert Path(report["gathered"]) == locked_copy / "runs" / f"{report['run_id']}-gathered"
    assert verify_copy(Path(report["gathered"])) == 2
    assert "[w0] " in result.stderr and "[w1] " in result.stderr
    if os.geteuid() == 0:  # issue 31 §6: each worker's folder is handed back, said once each
        for folder in folders:
            assert all(p.stat().st_mode & stat.S_IROTH for p in [folder, *folder.rglob("*")])
            assert f"{folder}: made readable by everyone" in result.stderr
