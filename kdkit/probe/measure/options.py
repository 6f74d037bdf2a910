"""What `kdkit sweep` and `kdkit resume-test` share, defined once: the project they measure
(PROJECT_DIR, else the root found upward from the current folder), its runs folder, counts read like
every numeric option of kdkit (one line and exit 2 for NaN, 1e999, ""), and how a report is shown.
The folder each measurement writes is named and made by kdkit.core.runfolder.new_run_folder, the one
rule.

Standard library only: both commands run on the host (``kdkit sweep``), inside the image
(``python -m kdkit.probe sweep``) and from the bundle's zipapp (``python3 kdkit.pyz sweep``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, CheckFailed, Unavailable
from kdkit.core.jsonio import whole_number
from kdkit.core.pilotconfig import config_file, config_problems, places
from kdkit.core.projectfiles import (
    MARKER,
    config_path,
    load_object,
    require_real_inside,
    runs_problem,
)
from kdkit.core.report import print_result

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TypeVar

    # a command's report: a TypedDict of its own (records.py) or a plain dict
    Report = TypeVar("Report", bound=Mapping[str, Any])

DEFAULT_TRAIN = "src.train"


def require_gpu(device: str, count: int, where: str = "--device") -> None:
    """A ``cuda``/``cuda:N`` device must exist where the work runs: none at all is Unavailable (exit
    3), an index beyond the GPUs there is BadInput (exit 2), as `kdkit run --gpus` says."""
    if not device.startswith("cuda"):
        return
    index = int(device.partition(":")[2] or 0)
    if count == 0:
        raise Unavailable(f"{where} {device}: torch sees no GPU here; run where the GPU is (`kdkit "
                          "diagnose` says why not) or use cpu")
    if index >= count:
        raise BadInput(f"{where} {device}: torch sees {count} GPU(s) here "
                       f"(cuda:0..cuda:{count - 1}); choose one of them")


class Count:
    """An argparse ``type`` for a count: kdkit.core.jsonio.whole_number, whose refusal names an
    example."""

    integral = True

    def __init__(self, option: str, example: str) -> None:
        self.option, self.example = option, example

    def __call__(self, text: str) -> int:
        try:
            return whole_number(self.option)(text)
        except BadInput as exc:
            raise BadInput(f"{exc}; e.g. {self.option} {self.example}") from None


def add_project(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("project_dir", nargs="?", type=Path, default=None, metavar="PROJECT_DIR",
                        help="the project (default: the one found upward from the current folder)")


def train_module(root: Path, given: str | None) -> str:
    """--module, else ``"train"`` in kdkit.json, else src.train; a dotted module name."""
    chosen = given or str(load_object(root / MARKER, "project file").get("train", DEFAULT_TRAIN))
    if not all(part.isidentifier() for part in chosen.split(".")):
        raise BadInput(f"--module {chosen!r}: not a dotted module name (e.g. src.train)")
    return chosen


def runs_dir(root: Path) -> Path:
    """The pilot config's runs folder, held to the one containment rule (inside the project, links
    resolved)."""
    config = config_file(root, None)
    data = load_object(config, "pilot config")
    relative = data.get("runs", "runs")
    if not isinstance(relative, str):
        raise BadInput(
            f"{config}: $.runs: expected a folder path inside the project; run `kdkit validate`")
    folder = require_real_inside(root,
                                 config_path(root, relative, config, "$.runs"), config, "$.runs")
    # the pilot's own rule reports a bad config
    named = places(data) if not config_problems(data) else ()
    if (problem := runs_problem(root, relative,
                                (*named, config.relative_to(root).as_posix()))) is not None:
        raise BadInput(f"{config}: $.runs: {problem}")
    return folder


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{float(value):.3f} s"


def text_table(rows: list[list[str]], right: frozenset[int] = frozenset()) -> str:
    """Rows of plain text in aligned columns (the columns numbered in ``right`` aligned right)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) if i in right else cell.ljust(width)
                               for i,
                               (cell, width) in enumerate(zip(row, widths, strict=True))).rstrip()
                     for row in rows)


def say(message: str) -> None:
    """Progress, on stderr (stdout is the report)."""
    print(f"  {message}", file=sys.stderr, flush=True)


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, reading an option's value as the host's click does: the next
    word, even one that starts with "-" (``--steps -inf`` is refused as a number, not as an unknown
    option)."""
    takes = {flag for action in parser._actions if action.nargs is None
             for flag in action.option_strings}
    joined, index = [], 0
    while index < len(argv):
        if argv[index] == "--":
            joined += argv[index:]
            break
        if argv[index] in takes and index + 1 < len(argv):
            joined.append(f"{argv[index]}={argv[index + 1]}")
            index += 2
        else:
            joined.append(argv[index])
            index += 1
    return parser.parse_args(joined)


def show(report: Report, as_json: bool, text: Callable[[Report], str], failed: str) -> int:
    """Print the report (JSON or ``text``); a report that is not ok is CheckFailed (exit 1) saying
    ``failed``."""
    print_result(as_json, report, lambda: text(report))
    if not report["ok"]:
        raise CheckFailed(failed)
    return 0
