"""On the rented machine: time to verdict from a bundle, rebuild after a one-package change, image size.

Three measures on a scaffolded cpu project (locked with torch from the local wheels, built
offline from a wheelhouse, as tests/conftest.py does), each against its floor measured in the
same run, the two taking turns so that drift in the machine's load hits both:

1. verdict: a bundle made once by `kdkit bundle`; each repetition first removes the image from
   the engine (`docker rmi`, untimed), then times
     kdkit:  kdkit verify-bundle B && kdkit load B && (cd B/project && kdkit run --image REF)
     floor:  sha256sum -c --quiet SHA256SUMS && zstd -dc image.tar.zst | docker load
             && <the lines `kdkit run --print` gives: the same docker run, mounts and flags>
   Both must exit 0 with one new run folder whose summary says pass. Goal: kdkit <= 1.25x floor.
2. rebuild: `kdkit build --no-cache` (full) against `kdkit build` after one small pure-Python
   package is added to requirements/base.in and the project locked again (a different package
   each repetition, so no earlier build holds it). Goal: rebuild <= 1/5 of the full build.
3. size: the image (`docker image inspect` Size) against the base image plus the environment inside
   it, /opt/kdkit/venv (torch's part) and /opt/kdkit/deps (the rest of the lock), its files' bytes,
   counted as the engine sizes a layer. Goal: overhead <= 1 %.

    .venv/bin/python bench/bench_rented.py [--repeat N] [--quick] [--only verdict|rebuild|size]

Defaults: 5 repetitions for verdict, 3 for rebuild; --quick is 1 of each (a smoke run, labelled
so in its results). Progress on stderr. Everything lives in a temporary folder removed at the end.
Every build starts from a base of the bench's own (the base image plus one label, no new layer), so
no other build on the engine caches on the bench's images and the bench finds every one of them
(the label is inherited) and removes it at the end; nothing else on the engine is touched. Exit 3 without an
engine, the base image or the torch wheel; exit 1 when a measure is invalid (no PASS). Writes
bench/results/rented_<measure>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import REPO, interleaved, machine, medians, rounded, timed, write_result
from bench_build import BASE, KDKIT, WHEELS, ran

from kdkit.core.runverify import read_run

MEASURES = ("verdict", "rebuild", "size")
DEFAULT_REPEAT = {"verdict": 5, "rebuild": 3, "size": 1}
# (what is compared, the goal: the ratio or percent must be at most this)
GOALS = {"verdict": ("kdkit / floor", 1.25), "rebuild": ("one-package rebuild / full build", 0.2),
         "size": ("overhead, % of the image", 1.0)}
# Small pure-Python wheels with no dependencies, none of them in the torch lock: one per rebuild.
EXTRA_PACKAGES = ("termcolor", "tabulate", "six", "toolz", "humanize", "idna", "appdirs",
                  "colorama",
                  "iniconfig", "decorator")
NAME = "bench-rented"
MARK = "dev.kdkit.bench"  # the label of the bench's own base, and so of every image built from it


class Invalid(Exception):
    """A measure whose runs did not reach what they must (a PASS verdict): no figure is given."""


def say(message: str) -> None:
    print(f"bench_rented: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- pure parts (tests/test_bench_rented.py)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, metavar="N",
                        help="repetitions of each measure (default: 5 for verdict, 3 for rebuild)")
    parser.add_argument("--quick", action="store_true", help="one repetition of each: a smoke run")
    parser.add_argument("--only", choices=MEASURES, help="run this measure only")
    args = parser.parse_args(argv)
    if args.repeat is not None and not 1 <= args.repeat <= len(EXTRA_PACKAGES):
        parser.error(f"--repeat {args.repeat}: give 1 to {len(EXTRA_PACKAGES)}")
    if args.quick and args.repeat not in (None, 1):
        parser.error("--quick is one repetition: give --quick or --repeat, not both")
    return args


def repeats(args: argparse.Namespace, measure: str) -> int:
    if args.quick:
        return 1
    return (int(args.repeat) if args.repeat is not None and measure != "size"
            else DEFAULT_REPEAT[measure])


def judged(measure: str, value: float) -> dict[str, Any]:
    """The goal of ``measure`` and whether ``value`` (a ratio, or a percent for size) meets it."""
    what, limit = GOALS[measure]
    return {"compared": what, "value": value, "goal": f"<= {limit}", "passed": value <= limit}


def versus(measure: str, times: dict[str, list[float]], mine: str, floor: str) -> dict[str, Any]:
    """Medians of interleaved times, and ``mine``'s median over ``floor``'s judged against the goal."""
    median = medians(times)
    ratio = round(median[mine] / median[floor], 3)
    return {"seconds": {name: rounded(values, 2) for name, values in times.items()},
            "median_s": {name: round(value, 2) for name, value in median.items()},
            **judged(measure, ratio)}


def table(measure: str, result: dict[str, Any]) -> str:
    """A short markdown table of one measure's result (its medians, or its sizes), the goal and the verdict."""
    smoke = " (SMOKE RUN, --quick: 1 repetition, not a measurement)" if result.get("smoke") else ""
    lines = [f"## {measure}{smoke}", ""]
    if not result.get("valid", True):
        return "\n".join([*lines, f"INVALID: {result['reason']}", ""])
    if "median_s" in result:
        lines += ["| case | median s | runs |", "| --- | ---: | ---: |"]
        lines += [f"| {name} | {value:.2f} | {len(result['seconds'][name])} |"
                  for name, value in result["median_s"].items()]
    else:
        lines += ["| part | MB |", "| --- | ---: |"]
        lines += [f"| {name} | {value / 1e6:.1f} |" for name, value in result["bytes"].items()]
    verdict = "PASS" if result["passed"] else "FAIL"
    return "\n".join(
        [*lines,
         "", f"{result['compared']}: {result['value']} (goal {result['goal']}): {verdict}", ""])


# ---------------------------------------------------------------- the engine and the project


def run(argv: Sequence[str | Path], *, cwd: Path | None = None, stdin: str | None = None,
        env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    """stdout of ``argv`` (untimed set-up); Invalid naming it and its output's tail when it fails."""
    done = subprocess.run([str(a) for a in argv], cwd=cwd, input=stdin, env=env,
                          capture_output=True, text=True,
                          check=False, timeout=timeout)
    if done.returncode != 0:
        raise Invalid(
            f"{' '.join(map(str, argv))} exited {done.returncode}: "
            f"{(done.stdout + done.stderr)[-600:]}")
    return done.stdout


def preflight() -> str | None:
    """None when the engine, the base image, the torch wheel and the tools are here; else why not."""
    if not any(Path(WHEELS).glob("torch-*.whl")):
        return f"no torch wheel in {WHEELS} (set KDKIT_TEST_TORCH_WHEELS)"
    missing = [tool for tool in ("docker", "zstd", "sha256sum", "bash")
               if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found on PATH"
    if subprocess.run(["docker", "info"], capture_output=True,
                      check=False, timeout=30).returncode != 0:
        return "no Docker engine answers `docker info`; run `bash scripts/engine.sh`"
    if subprocess.run(["docker", "image", "inspect", BASE],
                      capture_output=True, check=False).returncode != 0:
        return f"base image {BASE} is not on the engine; run `bash scripts/engine.sh`"
    return None


def present(ref: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", ref],
                          capture_output=True, check=False).returncode == 0


class Session:
    """The bench's temporary folder, its locked project and wheelhouse, and every image it made."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.token = tmp, f"{os.getpid()}-{int(time.time())}"
        self.project, self.wheelhouse = tmp / "project", tmp / "wheelhouse"
        self.image: str | None = None  # the verdict's image, reused by size
        self.base = f"{NAME}/base:{self.token}"
        self.tags: list[str] = []

    def prepare(self) -> None:
        # A base of the bench's own (BASE plus a label: no new layer, the same bytes): every image the bench
        # builds descends from it and nobody else's build caches on them, so they can all be found and removed.
        say(f"tagging {self.base} (FROM {BASE}), scaffolding, locking (torch from the local "
            "wheels), wheelhouse")
        run(["docker", "build", "-q", "-t", self.base, "-"],
            stdin=f"FROM {BASE}\nLABEL {MARK}={self.token}\n",
            env={**os.environ, "DOCKER_BUILDKIT": "0"})
        self.tags.append(self.base)
        run([KDKIT, "init", self.project, "--backend", "cpu", "--name", NAME])
        self.lock(self.project)

    def lock(self, project: Path) -> None:
        run([KDKIT, "lock", project, "--backend", "cpu", "--torch-find-links", WHEELS])
        run([KDKIT, "wheelhouse", project, "--out", self.wheelhouse])

    def build(self, project: Path, tag: str, *extra: str) -> tuple[float, dict[str, Any]]:
        """Seconds of `kdkit build` (a fresh process) and its JSON answer; the image is recorded for removal."""
        argv = [KDKIT, "build", str(project), "--backend", "cpu", "--base-image", self.base,
                "--wheelhouse",
                str(self.wheelhouse), "--tag", f"{NAME}/{tag}:{self.token}", "--json", *extra]
        started = time.perf_counter()
        answer = json.loads(run(argv))
        seconds = time.perf_counter() - started
        self.tags.append(answer["tag"])
        return seconds, answer

    def clean(self) -> None:
        """Remove every image the bench made: its tags, then every image that carries its base's label (the
        builder's intermediate images, the builder stage's included, and the images it loaded), newest first."""
        errors: dict[str, str] = {}
        # a second pass for a parent met before its child (timestamps of one instant)
        for _ in range(2):
            for ref in [*reversed(self.tags), *self.mine()]:
                done = subprocess.run(["docker", "rmi", ref], capture_output=True,
                                      text=True, check=False)
                if done.returncode != 0 and present(ref):
                    errors[ref] = done.stderr.strip()[:200]
        left = self.mine()
        for ref in left:
            say(f"could not remove {ref}: {errors.get(ref, '?')}")
        say(f"left on the engine: {', '.join(left)}" if left
            else "every image the bench made is removed")

    def mine(self) -> list[str]:
        """The ids of the images that descend from the bench's base (labels are inherited), newest first."""
        ids = run(
            ["docker", "images", "-a", "-q",
             "--no-trunc", "--filter", f"label={MARK}={self.token}"]).split()
        if not ids:
            return []
        rows = run(
            ["docker", "image", "inspect", "--format", "{{.Created}} {{.Id}}", *dict.fromkeys(ids)])
        return [row.split()[1] for row in sorted(rows.splitlines(), reverse=True)]


# ---------------------------------------------------------------- 1. verdict


def shared_layers(image_id: str) -> dict[str, int]:
    """How many of the image's layers other images on the engine hold too (those stay after `docker rmi`,
    so `docker load` skips them, for kdkit and the floor alike)."""
    ids = set(run(["docker", "images", "-q", "--no-trunc"]).split()) - {image_id}
    layers = json.loads(
        run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", image_id]))
    others: set[str] = set()
    for row in run(
        ["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", *ids]).splitlines():
        others.update(json.loads(row) or [])
    return {"layers": len(layers), "held_by_other_images": sum(layer in others for layer in layers)}


def verdict_commands(bundle: Path, ref: str) -> dict[str, str]:
    """The two shell lines: kdkit's chain, and the same work by hand (`kdkit run --print` for the container)."""
    q, project = shlex.quote, bundle / "project"
    printed = run([KDKIT, "run", "--image", ref, "--print"], cwd=project).strip().splitlines()
    if not printed or not printed[-1].startswith("docker run "):
        raise Invalid(f"kdkit run --print gave no docker run line: {printed}")
    kdkit = (f"{q(KDKIT)} verify-bundle {q(str(bundle))} && {q(KDKIT)} load {q(str(bundle))} && "
             f"(cd {q(str(project))} && {q(KDKIT)} run --image {q(ref)})")
    floor = (f"cd {q(str(bundle))} && sha256sum -c --quiet SHA256SUMS && zstd -dc image.tar.zst | "
             "docker load && "
             + " && ".join(printed))
    return {"kdkit": kdkit, "floor": floor}


def passed_once(runs: Path, before: set[str], what: str) -> None:
    """Invalid unless exactly one run folder is new in ``runs`` and its summary's verdict is pass."""
    new = sorted(p for p in runs.iterdir() if p.is_dir()
                 and p.name not in before) if runs.is_dir() else []
    if len(new) != 1:
        raise Invalid(f"{what}: {len(new)} new run folders in {runs}, expected 1")
    verdict = read_run(new[0]).verdict
    if verdict != "pass":
        raise Invalid(f"{what}: run {new[0].name} has the verdict {verdict!r}, not pass")


def verdict_case(name: str, line: str, ref: str, runs: Path) -> Callable[[], float]:
    """One repetition: the image removed (untimed), then the line timed to its verdict, which must pass."""
    def once() -> float:
        run(["docker", "rmi", ref])
        if present(ref):
            raise Invalid(f"{ref} is still on the engine after docker rmi")
        before = {p.name for p in runs.iterdir()} if runs.is_dir() else set()
        say(f"verdict: {name}")
        try:
            seconds = timed(["bash", "-o", "pipefail", "-c", line], timeout=1800)
        except SystemExit as exc:
            raise Invalid(f"verdict, {name}: {str(exc)[-600:]}") from None
        passed_once(runs, before, f"verdict, {name}")
        return seconds
    return once


def measure_verdict(session: Session, n: int) -> dict[str, Any]:
    say("verdict: building the image with --no-cache (its layers its own, as on a fresh machine)")
    _seconds, built = session.build(session.project, "verdict", "--no-cache")
    session.image = ref = built["tag"]
    bundle = session.tmp / "bundle"
    say(f"verdict: kdkit bundle --image {ref}")
    run([KDKIT, "bundle", session.project, "--image", ref, "--out", bundle])
    layers = shared_layers(built["id"])
    lines = verdict_commands(bundle, ref)
    runs = bundle / "project" / "runs"
    times = interleaved(
        {name: verdict_case(name, line, ref, runs) for name, line in lines.items()}, n)
    return {**versus("verdict", times, "kdkit", "floor"), "image": ref, "commands": lines,
            "archive_bytes": (bundle / "image.tar.zst").stat().st_size, "image_layers": layers}


# ---------------------------------------------------------------- 2. rebuild


def measure_rebuild(session: Session, n: int) -> dict[str, Any]:
    project = Path(shutil.copytree(session.project, session.tmp / "rebuild"))
    base_in = project / "requirements" / "base.in"
    original = base_in.read_text(encoding="utf-8")
    full, one = "full build (--no-cache)", "one-package rebuild"
    times: dict[str, list[float]] = {full: [], one: []}
    steps: list[str] = []
    for i, package in enumerate(EXTRA_PACKAGES[:n]):
        base_in.write_text(original, encoding="utf-8")
        session.lock(project)
        say(f"rebuild {i + 1}/{n}: kdkit build --no-cache")
        times[full].append(session.build(project, f"full{i}", "--no-cache")[0])
        base_in.write_text(original.rstrip("\n") + f"\n{package}\n", encoding="utf-8")
        session.lock(project)
        say(f"rebuild {i + 1}/{n}: {package} added, locked again; kdkit build")
        seconds, answer = session.build(project, f"onepackage{i}")
        times[one].append(seconds)
        steps = ran(answer)
    return {**versus("rebuild", times, one, full), "packages_added": list(EXTRA_PACKAGES[:n]),
            "rebuild_ran": steps}


# ---------------------------------------------------------------- 3. size


def measure_size(session: Session, _n: int) -> dict[str, Any]:
    ref = session.image or session.build(session.project, "size")[1]["tag"]
    say(f"size: {ref}")
    image, base = (int(run(["docker", "image", "inspect", "--format", "{{.Size}}", r]))
                   for r in (ref, session.base))
    # A layer's size is its files' bytes, directories not counted (moby internal/directory/directory.go,
    # https://github.com/moby/moby/blob/v28.3.0/internal/directory/directory.go): the venv is counted alike.
    # The environment is the venv (torch's part) and deps/ (the rest of the lock, kdkit.image.layers).
    script = ("find /opt/kdkit/venv /opt/kdkit/deps ! -type d -printf '%s\\n' 2>/dev/null "
              "| awk '{s+=$1} END {print s}'; "
              "du -sbc /opt/kdkit/venv /opt/kdkit/deps 2>/dev/null | tail -n 1 | cut -f1")
    venv, du_sb = map(int,
                      run(["docker", "run", "--rm", "--pull", "never", "--network", "none", ref,
                           "sh", "-c", script]).split())
    history = run(
        ["docker", "history", "--human=false", "--no-trunc",
         "--format", "{{.Size}}\t{{.CreatedBy}}", ref])
    layer = [int(row.split("\t")[0]) for row in history.splitlines()
             if " in /opt/kdkit/venv" in row or " in /opt/kdkit/deps" in row]
    overhead = image - base - venv
    return {"image": ref,
            "bytes": {"image": image, "base": base, "venv": venv, "overhead": overhead},
            "venv_du_sb": du_sb, "venv_layer_from_history": sum(layer) if layer else None,
            **judged("size", round(100 * overhead / image, 3))}


# ---------------------------------------------------------------- main


def attempt(measure: str, session: Session, n: int, smoke: bool) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result: dict[str, Any] = {"valid": True, **MEASURE[measure](session, n)}
    except Invalid as exc:
        say(f"{measure}: INVALID: {exc}")
        result = {"valid": False, "reason": str(exc)}
    return {"measure": measure, "repeat": n, "smoke": smoke, **result,
            "wall_s": round(time.perf_counter() - started, 1),
            "machine": machine(load=True, base_image=BASE)}


MEASURE = {"verdict": measure_verdict, "rebuild": measure_rebuild, "size": measure_size}


def report(measure: str, result: dict[str, Any]) -> None:
    out = write_result(f"rented_{measure}", result)
    text = table(measure, result)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    say(f"written to {out.relative_to(REPO)} and {out.with_suffix('.md').name}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    why = preflight()
    if why is not None:
        print(f"bench_rented: {why}", file=sys.stderr)
        return 3
    valid = True
    with tempfile.TemporaryDirectory(prefix="kdkit-bench-rented-") as tmp:
        session = Session(Path(tmp))
        try:
            session.prepare()
            for measure in [args.only] if args.only else MEASURES:
                result = attempt(measure, session, repeats(args, measure), args.quick)
                report(measure, result)
                valid = valid and result["valid"]
        except Invalid as exc:
            print(f"bench_rented: set-up failed: {exc}", file=sys.stderr)
            return 1
        finally:
            session.clean()
    return 0 if valid else 1


if __name__ == "__main__":
    sys.exit(main())
