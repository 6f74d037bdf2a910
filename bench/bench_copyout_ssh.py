"""`kdkit copy-out` to an SSH destination, and the cost of `--copy-to` to a running pilot.

1. copy-out over SSH. A run folder of 1 GB in 10,000 files (a real closed run of the scaffolded project, plus
   ``blobs/`` of 10,000 random 100 KiB files, all listed in a valid SHA256SUMS; made once under the scratch
   folder) copied to a real OpenSSH server on 127.0.0.1 (tests/sshd.py: its own port and keys) with
   ``kdkit copy-out RUN root@127.0.0.1:DEST`` (a fresh process; rsync, then sha256sum and the reload checks
   there), against the peer ``rsync -a RUN/ root@127.0.0.1:DEST/ID/`` then
   ``ssh root@127.0.0.1 'cd DEST/ID && sha256sum -c --quiet SHA256SUMS'``. The destination is emptied before
   each run (untimed); the cases take turns; medians. Goal: kdkit <= 1.2x the peer.
2. --copy-to's cost. The pilot of bench_pilot.py's 1 ms-per-item app over ``--items`` documents, its loop's
   items per second (its own clock) alone, and with kdkit.machine.copyto copying the open run folder to the SSH
   destination (the thread ``kdkit run --copy-to`` starts on the host) at the default interval (300 s: one copy
   at the first closed batch) and at ``--stress-every`` seconds. Goal: <= 5 % at the default interval.

    .venv/bin/python bench/bench_copyout_ssh.py [--runs 3] [--items 10000] [--scratch /tmp/kdkit-bench-copyout]

Needs root (sshd), rsync and rclone. Writes bench/results/copyout_ssh.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, rounded, write_result
from bench_pilot import configure, kdkit, make_project

from kdkit.core.checksums import write_digests
from kdkit.core.jsonio import sha256_file
from kdkit.machine.copyto import copy_during
from tests.sshd import SshServer

FILES, SIZE = 10_000, 100 * 1024


def make_run(scratch: Path) -> Path:
    """A closed run folder with 1 GB in 10,000 more files, listed in its SHA256SUMS (made once)."""
    marker = scratch / "run.ready"
    if marker.is_file():
        return Path(marker.read_text())
    from kdkit.project.init import init_project

    project = init_project(scratch / "proj", backend="cpu")
    done = subprocess.run([str(BIN / "kdkit"), "pilot", str(project), "--json"],
                          capture_output=True, text=True)
    run = Path(json.loads(done.stdout)["run_dir"])
    sums = dict(line.split("  ", 1)[::-1] for line in (run / "SHA256SUMS").read_text().splitlines())
    for n in range(FILES):
        path = run / "blobs" / f"{n // 100:03d}" / f"blob-{n:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(SIZE))
        sums[path.relative_to(run).as_posix()] = sha256_file(path)
    write_digests(run, sums)
    marker.write_text(str(run))
    return run


def copy_cases(server: SshServer, run: Path, scratch: Path) -> dict[str, float]:
    dest = scratch / "dest"
    env = {**os.environ, "KDKIT_SSH_CONFIG": str(server.client_config)}
    ssh = ["ssh", "-F", str(server.client_config)]

    def fresh() -> None:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()

    def with_kdkit() -> float:
        fresh()
        started = time.perf_counter()
        subprocess.run([str(BIN / "kdkit"), "copy-out", str(run), f"{server.target}:{dest}"],
                       env=env, check=True,
                       capture_output=True)
        return time.perf_counter() - started

    def peer() -> float:
        fresh()
        started = time.perf_counter()
        subprocess.run(["rsync", "-a", "-e",
                        " ".join(ssh), f"{run}/", f"{server.target}:{dest}/{run.name}/"],
                       check=True, capture_output=True)
        subprocess.run([*ssh,
                        server.target, f"cd {dest}/{run.name} && sha256sum -c --quiet SHA256SUMS"],
                       check=True, capture_output=True)
        return time.perf_counter() - started

    return {
        "kdkit copy-out": with_kdkit,
        "rsync -a + ssh sha256sum -c": peer}  # type: ignore[return-value]


def copy_to_cost(server: SshServer, scratch: Path, items: int,
                 runs: int, stress: float) -> dict[str, object]:
    project = make_project(scratch
                           / f"pilot-{items}", items, 64) if not (scratch
                                                                  / f"pilot-{items}").exists() \
        else scratch / f"pilot-{items}" / "proj"
    config = configure(project, "model_1ms", items, 64)
    os.environ["KDKIT_SSH_CONFIG"] = str(server.client_config)
    rates: dict[str, list[float]] = {"alone": [], "copy-to every 300 s": [],
                                     f"copy-to every {stress:g} s": []}
    copies: dict[str, list[int]] = {name: [] for name in rates}
    for round_ in range(runs):
        for name in rates:
            run_id = (
                f"bench-{round_}-{len(rates[name])}-{name.split()[-2] if 'every' in name else 'alone'}")
            every = 300.0 if "300" in name else stress
            dest = f"{server.target}:{scratch / 'copyto-dest'}" if "every" in name else None
            with copy_during(dest, every, project / "runs", [run_id], print) as copier:
                _, loop = kdkit(REPO, project, config, run_id)
            rates[name].append(items / loop)
            copies[name].append(copier.copies)
            shutil.rmtree(project / "runs" / run_id)
    alone = statistics.median(rates["alone"])
    return {"items": items, "items_per_second": {k: rounded(v, 1) for k, v in rates.items()},
            "median_items_per_second": {k: round(v, 1) for k, v in medians(rates).items()},
            "slowdown": {k: round(1 - statistics.median(v) / alone, 4) for k, v in rates.items()},
            "periodic_copies": copies, "goal": "<= 5 % at the default interval (300 s)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--stress-every", type=float, default=2.0)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/kdkit-bench-copyout"))
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    run = make_run(args.scratch)
    server = SshServer.start(args.scratch / f"sshd-{os.getpid()}")
    try:
        times = interleaved(copy_cases(server, run, args.scratch), args.runs, warm=True)
        mid = medians(times)
        cost = copy_to_cost(server, args.scratch, args.items, args.runs, args.stress_every)
    finally:
        server.stop()
    ratio = mid["kdkit copy-out"] / mid["rsync -a + ssh sha256sum -c"]
    result = {"machine": machine(), "run_folder": {"files": FILES, "bytes": FILES * SIZE},
              "seconds": {k: rounded(v, 2) for k, v in times.items()},
              "median_seconds": {k: round(v, 2) for k, v in mid.items()}, "ratio": round(ratio, 3),
              "goal": "<= 1.2x", "copy_to": cost}
    write_result("copyout_ssh", result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
