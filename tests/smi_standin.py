"""A stand-in for ``nvidia-smi``, ``amd-smi`` and ``rocm-smi`` on a machine without GPUs: an executable of that
name, first on PATH, that answers each command line kdkit sends from a scenario's recorded files, and fails
as the real program does for what the recorded driver does not know.

``install(bin_dir, scenario)`` writes one executable per program folder of ``tests/data/smi/<scenario>/``.
The files of a program's folder (tests/data/smi/README.md says where each format comes from):

- ``query-gpu.tsv``, ``query-remapped-rows.tsv`` (nvidia-smi): tab-separated; the first line names the
  fields this driver knows (a field's other spellings joined by ``|``), then one line per GPU as nvidia-smi
  prints the values with ``nounits``. ``--query-gpu=a,b --format=csv,noheader,nounits`` prints the asked
  columns joined by ", "; a field not in the first line is refused as nvidia-smi refuses it (``Field "x" is
  not a valid field to query.``, exit 2). A line ``#print <text>`` is printed as it is (a warning among the
  answers); a cell ``<<cut>>`` ends its line there (a line missing columns).
- ``answers.json``: ``{"<arguments joined by spaces>": "<file>"}``: every other command line, answered with
  that file's text; a command line not listed fails as an unknown option does (exit 2).
- ``behaviour.json`` (optional): ``{"hang": true}`` never answers; ``{"exit": N, "stdout": "...",
  "stderr": "..."}`` answers every command line so (a driver that is not loaded).

With ``SMI_STANDIN_PHASE=load`` in the environment a recorded file ``<stem>.load.<ext>`` replaces
``<stem>.<ext>`` where it exists: the readings under load. With ``SMI_STANDIN_LOG=<file>`` each command line
is appended to that file (how many times kdkit ran the program, and with what).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "data" / "smi"
PHASE = "SMI_STANDIN_PHASE"
LOG = "SMI_STANDIN_LOG"
USAGE = {"nvidia-smi": "Invalid combination of input arguments. Please run 'nvidia-smi -h' for "
                       "help.",
         "amd-smi": "amd-smi: error: unrecognized arguments: {args}",
         "rocm-smi": "rocm-smi: error: unrecognized arguments: {args}"}


def install(bin_dir: Path, scenario: str) -> Path:
    """Executables for the programs recorded in ``scenario`` in ``bin_dir``; returns ``bin_dir``."""
    folder = SCENARIOS / scenario
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program in sorted(path.name for path in folder.iterdir() if path.is_dir()):
        script = bin_dir / program
        script.write_text(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(HERE)!r})\n"
                          f"import smi_standin\nsys.exit(smi_standin.main({program!r}, "
                          f"{str(folder)!r}, sys.argv[1:]))\n", encoding="utf-8")
        script.chmod(0o755)
    return bin_dir


def recorded(folder: Path, name: str) -> Path:
    """The recorded file ``name``, its ``.load`` variant under load."""
    if os.environ.get(PHASE) == "load":
        stem, dot, ext = name.partition(".")
        loaded = folder / f"{stem}.load{dot}{ext}"
        if loaded.is_file():
            return loaded
    return folder / name


def main(program: str, scenario: str, args: list[str]) -> int:
    folder = Path(scenario) / program
    sys.stdout.reconfigure(
        errors=(
            "surrogateescape"))  # type: ignore[union-attr]  # a recorded stray byte goes out as is
    if os.environ.get(LOG):
        with open(os.environ[LOG], "a", encoding="utf-8") as log:
            log.write(" ".join([program, *args]) + "\n")
    behaviour = folder / "behaviour.json"
    if behaviour.is_file():
        rules = json.loads(behaviour.read_text(encoding="utf-8"))
        if rules.get("hang"):
            time.sleep(3600)
        sys.stdout.write(rules.get("stdout", ""))
        sys.stderr.write(rules.get("stderr", ""))
        return int(rules.get("exit", 0))
    if program == "nvidia-smi" and len(args) == 2 and args[0].startswith("--query-"):
        return query(folder, args[0], args[1])
    answers = json.loads((folder / "answers.json").read_text(encoding="utf-8"))
    name = answers.get(" ".join(args))
    if name is None:
        print(USAGE[program].format(args=" ".join(args)),
              file=sys.stderr if program != "nvidia-smi" else sys.stdout)
        return 2
    sys.stdout.write(recorded(folder, name).read_text(encoding="utf-8", errors="surrogateescape"))
    return 0


def query(folder: Path, switch: str, fmt: str) -> int:
    """``--query-<what>=<fields> --format=csv,noheader,nounits`` from ``query-<what>.tsv``."""
    what, _, fields = switch[len("--query-"):].partition("=")
    table = recorded(folder, f"query-{what}.tsv")
    if fmt != "--format=csv,noheader,nounits" or not table.is_file():
        print(USAGE["nvidia-smi"])
        return 2
    lines = table.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    header = [cell.split("|") for cell in lines[0].split("\t")]
    columns = []
    for field in fields.split(","):
        found = [at for at, names in enumerate(header) if field in names]
        if not found:
            print(f'Field "{field}" is not a valid field to query.\n')
            return 2
        columns.append(found[0])
    for line in lines[1:]:
        if line.startswith("#print "):
            print(line[len("#print "):])
            continue
        cells = line.split("\t")
        shown = []
        for at in columns:
            if cells[at] == "<<cut>>":
                break
            shown.append(cells[at])
        print(", ".join(shown))
    return 0
