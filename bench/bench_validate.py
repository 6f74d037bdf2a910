"""`kdkit validate` of a project whose pilot manifest lists 100,000 documents (a file each, 20-200 bytes, the
template's twelve among them), timed as a whole process (the median of N), against the pilot's own read of the
same project: ``load_pilot`` in a fresh interpreter (the config, its manifest and every document's place).
Goal (issue 31 §8): validate within 2x the pilot's own read. Both sides are compiled to bytecode first, as
`pip install` leaves them.

    .venv/bin/python bench/bench_validate.py [--runs 5] [--documents 100000]

Writes bench/results/validate.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from _common import BIN, REPO, interleaved, machine, medians, timed, write_result

from kdkit.project.init import init_project

GOAL_RATIO = 2.0
CATEGORIES = ("invoice", "contract", "research", "support")
READ = ("import sys; from pathlib import Path; from kdkit.core.pilotconfig import load_pilot; "
        "load_pilot(Path(sys.argv[1]).resolve())")


def make_project(tmp: Path, documents: int) -> Path:
    """kdkit init's project, its manifest grown to ``documents`` entries (a small file each)."""
    project = tmp / "p"
    init_project(project, backend="cpu")
    folder = project / "data" / "pilot"
    manifest = folder / "manifest.json"
    entries = json.loads(manifest.read_text(encoding="utf-8"))["documents"]
    for n in range(len(entries) + 1, documents + 1):
        name = f"doc-{n:06d}.txt"
        category = CATEGORIES[n % len(CATEGORIES)]
        (folder / name).write_text(f"{category} {n} " + "word " * (n % 40), encoding="utf-8")
        entries.append({"id": f"doc-{n:06d}", "file": name, "label": category, "expect": "accept"})
    manifest.write_text(json.dumps({"documents": entries}, indent=2) + "\n", encoding="utf-8")
    return project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--documents", type=int, default=100_000)
    options = parser.parse_args()
    subprocess.run([str(BIN / "python"), "-m", "compileall", "-q", str(REPO / "kdkit"),
                    sysconfig.get_paths()["purelib"]], check=False, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        project = make_project(Path(tmp), options.documents)
        cases = {
            "kdkit validate": lambda: timed([str(BIN / "kdkit"), "validate", str(project)]),
            "load_pilot": lambda: timed([str(BIN / "python"), "-c", READ, str(project)], cwd=REPO),
        }
        times = interleaved(cases, options.runs, warm=True)
    median = medians(times)
    ratio = median["kdkit validate"] / median["load_pilot"]
    print(f"kdkit validate over {options.documents} documents: median "
          f"{median['kdkit validate']:.3f} s; the pilot's own read (load_pilot) "
          f"{median['load_pilot']:.3f} s; ratio {ratio:.2f} (goal <= {GOAL_RATIO:g})")
    out = write_result("validate", {
        "command": "kdkit validate PROJECT", "peer": "python -c 'load_pilot(Path(PROJECT))'",
        "documents": options.documents, "runs": options.runs,
        "median_seconds": {name: round(value, 4) for name, value in median.items()},
        "seconds": {name: [round(v, 4) for v in values] for name, values in times.items()},
        "ratio": round(ratio, 3), "goal_ratio": GOAL_RATIO, "met": ratio <= GOAL_RATIO,
        "machine": machine(load=True)})
    print(f"written to {out.relative_to(REPO)}")
    sys.exit(0 if ratio <= GOAL_RATIO else 1)


if __name__ == "__main__":
    main()
