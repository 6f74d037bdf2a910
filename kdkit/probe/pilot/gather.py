"""`kdkit gather [RUN_DIR...] [--from DIR]`: prove that the workers of one run answered every ID
exactly once.

Each worker (``kdkit pilot --worker I --workers N``, or placed by a launcher) wrote its own run
folder. The folders given and those found below ``--from`` must first be the workers of one run,
each share once (kdkit.probe.pilot.collect: bad input otherwise, nothing written). Gathering then
checks, in this order, and names every failure:

1. each folder against its SHA256SUMS (a worker that did not finish has none): nothing is
   counted from a folder that is not intact;
2. each worker 0..N-1 has its folder (a missing share is named);
3. the project's pilot config and manifest are still the ones the workers ran;
4. every manifest ID was answered by exactly one worker, the one whose share holds it, and
   the whole passes the pilot's own accounting (categories, reasons, expectations, quality).

It writes one summary for the whole run (summary.json, summary.md, SHA256SUMS) into a new
folder, made under a temporary name and renamed into place without replacing anything: never
half-written; of two gatherings to one --out one is refused; --force replaces only the earlier
gathering it checked (kdkit.probe.pilot.gathering, on kdkit.core.staging.staged_folder).
Standard library only: it runs on the host, in the image, or on the results copied back.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdkit.core import runfolder as rf
from kdkit.core.checksums import SUMS
from kdkit.core.errors import BadInput, CheckFailed
from kdkit.core.outputfiles import OUTPUTS
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.pilotconfig import Document, PilotConfig, load_pilot, params_hash
from kdkit.core.projectfiles import find_root, project_root
from kdkit.core.report import print_result
from kdkit.core.resultlines import FINISHED
from kdkit.core.runid import run_id_type
from kdkit.core.runresults import RunFolder
from kdkit.probe.pilot.accounting import Accounting, account, not_answered_line
from kdkit.probe.pilot.collect import Worker, collect
from kdkit.probe.pilot.gathering import check_out, default_out, summary_data, write_summary
from kdkit.probe.pilot.shares import worker_of
from kdkit.probe.results.copyout import read_sums, verify_folder

SHOWN = 10  # IDs named per problem line before "+N more"
EPILOG = """\
refused first (exit 2, nothing written): folders of another run, manifest, pilot config or
world size; two different folders for one share (two machines given the same rank); two
copies of one folder, byte for byte, count once.
checks: SHA256SUMS of each folder; workers 0..N-1 each present; every manifest ID answered by
exactly one worker, the one whose share holds it; the pilot's accounting over the whole manifest.

examples:
  kdkit gather runs/R-w0of2 runs/R-w1of2                    -> runs/R-gathered/
  kdkit gather backup/R-w* --project . --out results/R       results copied back
  kdkit gather --from copies --run-id R --project .         each machine's runs/ copied under copies/

exit: 0 pass, 1 fail (each problem named), 2 bad input"""  # noqa: E501 (verbatim text, as printed)


@dataclass
class Gathered:
    summary: dict[str, Any]
    out: Path


# ---------------------------------------------------------------- reading the folders


def integrity_problems(worker: Worker) -> list[str]:
    """The folder against its SHA256SUMS; a folder without one was never closed."""
    if not (worker.path / SUMS).is_file():
        share = worker.share
        return [f"{worker.path}: not closed (no {SUMS}); worker {share.worker} of {share.workers} "
                f"did not finish: resume it with `kdkit pilot --resume {worker.name} --worker "
                f"{share.worker} --workers {share.workers}`"]
    try:
        return verify_folder(worker.path, read_sums(worker.path))
    except CheckFailed as exc:
        return [str(exc)]


def coverage_problems(workers: Sequence[Worker]) -> list[str]:
    """Each share 0..N-1 missing from the folders (kdkit.probe.pilot.collect gave each at most
    once)."""
    count, have = workers[0].share.workers, {worker.share.worker for worker in workers}
    base = workers[0].run
    return [f"worker {i} of {count}: no run folder given (expected "
            f"{rf.worker_folder(base, i, count)}); run or resume it" for i in range(count)
            if i not in have]


def project_problems(cfg: PilotConfig, workers: Sequence[Worker]) -> list[str]:
    """The project's pilot parameters must be the ones the workers ran (so its manifest is
    theirs)."""
    digest, recorded = params_hash(cfg.resolved()), workers[0].params.get(rf.PARAMS_HASH)
    if digest == recorded:
        return []
    return [f"{cfg.config_path}: the project's pilot parameters (hash {digest[:8]}) are not the "
            f"workers' ({str(recorded)[:8]}): the config or the manifest changed since; gather "
            "against the project at the revision the workers ran (--project)"]


# ---------------------------------------------------------------- the IDs


@dataclass
class Tally:
    """Which workers answered each ID (a finished record), filled while the accounting streams."""

    known: frozenset[str]
    by: dict[str, list[int]] = field(default_factory=dict)

    def records(self, workers: Sequence[Worker]) -> Iterator[dict[str, Any]]:
        for index, worker in enumerate(workers):
            for record in RunFolder(worker.path).records():
                ident = record.get("id")
                if record.get("outcome") in FINISHED and isinstance(ident, str) \
                        and ident in self.known:
                    answered = self.by.setdefault(ident, [])
                    if index not in answered:
                        answered.append(index)
                        worker.answered += 1
                    if not worker.share.holds(ident):
                        worker.outside.append(ident)
                yield record


def _some(ids: Sequence[str]) -> str:
    return ", ".join(ids[:SHOWN]) + (f" (+{len(ids) - SHOWN} more)" if len(ids) > SHOWN else "")


def _missing_line(ids: Sequence[str], owner: int, count: int) -> str:
    """The IDs of one share that no worker answered, in one line (all are in summary.json's
    not_answered)."""
    if len(ids) == 1:
        return (
            f"{ids[0]}: no result from any worker (its share: worker {owner} of {count}; resume "
            "that worker)")
    return (f"worker {owner} of {count}: {len(ids):,} IDs of its share with no result from any "
            f"worker ({_some(ids)}); resume that worker")


def id_problems(documents: Sequence[Document], workers: Sequence[Worker], tally: Tally,
                acc: Accounting) -> list[str]:
    """Missing, answered by two workers, answered outside its share; then the accounting's own
    problems."""
    count, problems, named = workers[0].share.workers, [], set()
    for worker in workers:
        if worker.outside:
            problems.append(f"{worker.name}: {len(worker.outside)} ID(s) outside its share "
                            f"{worker.share.label} ({_some(worker.outside)}); it ran with another "
                            "share, N or manifest")
            named.update(worker.outside)
    missing: dict[int, list[str]] = {}
    for doc in documents:
        answered = tally.by.get(doc.id, [])
        if not answered:
            missing.setdefault(worker_of(doc.id, count), []).append(doc.id)
        elif len(answered) > 1:
            problems.append(f"{doc.id}: answered by {len(answered)} workers "
                            f"({', '.join(workers[i].name for i in answered)}); every ID must "
                            "appear exactly once")
            named.add(doc.id)
    problems += [_missing_line(ids, owner, count) for owner, ids in sorted(missing.items())]
    # the same IDs, said above per share
    said = not_answered_line(acc.not_answered) if acc.not_answered else None
    problems += [p for p in acc.problems if p != said and p.split(": ", 1)[0] not in named]
    return problems


# ---------------------------------------------------------------- the whole


def find_project(given: Path | None, first: Path) -> Path:
    """--project, else the project around the first run folder (runs/ lives in it), else around
    cwd."""
    if given is not None:
        return project_root(given)
    found = find_root(first) or find_root()
    if found is None:
        raise BadInput(f"{first}: no kdkit project around it or the current folder; pass --project "
                       "DIR (the project the workers ran, for its manifest)")
    return found


def judge(cfg: PilotConfig, workers: Sequence[Worker]) -> tuple[Accounting | None, list[str]]:
    """Every check in order; a step that fails stops before counting what it could not trust."""
    problems = [p for worker in workers for p in integrity_problems(worker)]
    problems = problems or coverage_problems(workers) or project_problems(cfg, workers)
    if problems:
        return None, problems
    tally = Tally(frozenset(doc.id for doc in cfg.documents))
    acc = account(cfg.documents, tally.records(workers), cfg.min_quality, cfg.output)
    problems = id_problems(cfg.documents, workers, tally, acc)
    problems += [f"{w.name}: stopped early: {w.summary[rf.STOPPED].get(rf.REASON)}; resume it"
                 for w in workers if w.summary and w.summary.get(rf.STOPPED)]
    return acc, problems


def gather(run_dirs: Sequence[Path], out: Path | None = None, project: Path | None = None,
           force: bool = False, *, roots: Sequence[Path] = (),
           run_id: str | None = None) -> Gathered:
    """Check the workers' folders of one run (``run_dirs``, and those below ``roots``: --from) and
    write its one summary; see the module's docstring."""
    workers = collect(run_dirs, roots, run_id)
    destination = check_out(out
                            or default_out(workers, roots if not run_dirs else ()), workers, force)
    config = workers[0].params.get("params", {}).get("config_file")
    cfg = load_pilot(find_project(project, workers[0].path),
                     Path(config) if isinstance(config, str) else None)
    acc, problems = judge(cfg, workers)
    summary = summary_data(workers[0].run, cfg, workers, acc, problems)
    # each worker's vectors, verified first
    vectors = [(w.share.worker, w.path / rf.VECTORS, w.path / rf.VECTOR_IDS) for w in workers
               if (w.path / rf.VECTORS).is_file()] if acc is not None else []
    # each worker's outputs, verified by judge, as the vectors
    outputs = [(w.name, w.path, read_sums(w.path)) for w in workers
               if (w.path / OUTPUTS).is_dir()] if acc is not None else []
    write_summary(destination, summary, force, vectors, outputs)
    return Gathered(summary, destination)


# ---------------------------------------------------------------- command line


def render_text(gathered: Gathered) -> str:
    summary = gathered.summary
    folders = summary["per_worker"]
    lines = [f"Gathered {len(folders)} folder(s) of the {summary['workers']} worker(s) of run "
             f"{summary['run_id']} into {gathered.out}"]
    if summary["accepted"] is not None:  # None: a check failed before the IDs were counted
        lines += [f"  {w['folder']}: {w['answered']} IDs" for w in folders]
    lines += [f"  - {p}" for p in summary["problems"][:20]]
    if len(summary["problems"]) > 20:
        lines.append(f"  ... {len(summary['problems']) - 20} more in summary.json")
    lines.append(f"PASS: all {summary['total']} IDs exactly once across the workers, expectations "
                 "met"
                 if summary["verdict"] == "pass"
                 else f"FAIL: {len(summary['problems'])} problem(s)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "gather",
        "Prove that the workers of one pilot run (kdkit pilot --worker I --workers N) answered "
        "every manifest ID exactly once, and write one summary for the whole run.", EPILOG)
    parser.add_argument("run_dirs", type=Path, nargs="*",
                        metavar="RUN_DIR", help="each worker's run folder")
    parser.add_argument("--from", dest="roots", type=Path, action="append", default=[],
                        metavar="DIR",
                        help="also every worker folder found below DIR, in any layout "
                             "(repeatable): the folders copied back from several machines")
    parser.add_argument("--run-id", metavar="ID", type=run_id_type("--run-id"),
                        help="only the workers of run ID (among those found by --from)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="the summary's new folder (default: <run-id>-gathered in the first "
                             "--from DIR, else next to the first RUN_DIR)")
    parser.add_argument("--project", type=Path, metavar="DIR",
                        help=(
                            "the project the workers ran, for its manifest (default: found upward "
                            "from RUN_DIR)"))
    parser.add_argument("--force",
                        action="store_true", help="replace an earlier gathering in --out")
    add_json(parser, 'summary.json (with "out")')
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    gathered = gather(args.run_dirs, args.out, args.project, args.force, roots=args.roots,
                      run_id=args.run_id)
    print_result(args.json, {"out": str(gathered.out), **gathered.summary},
                 lambda: render_text(gathered),
                 ascii_only=False)
    return 0 if gathered.summary["verdict"] == "pass" else 1
