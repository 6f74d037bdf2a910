"""Issue 24 §1: no value of a config reaches a shell.

A lock path or a runs folder holding shell syntax (``requirements/cpu.txt;touch PWNED;#.txt``,
``runs$(touch PWNED2)``) passed `kdkit validate` and was written unquoted into RUN.md, whose blocks run as
written on the rented host. Now every path a config names is held to one safe set
(kdkit.core.projectfiles.SAFE_PATH) by `validate` and again by each command that reads it, and every value
RUN.md's blocks interpolate is one shell word whatever it holds. Proved here:

* each hostile value, in each path-valued key, is refused by `validate` (exit 2, one line, nothing written),
  and by `bundle`, `pilot` and `lock` reading a config edited after `validate`;
* RUN.md rendered with hostile values put straight into its renderer (past every rule) runs, block by block
  in a real shell with every program it calls stood in for by a recorder, exactly the intended programs with
  the values as single arguments: no ``PWNED`` file, no ``touch``;
* a bundle made from allowed but unusual paths has blocks that ``bash -n`` and ``sh -n`` read.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.schemas import _validator
from kdkit.core.pilotconfig import config_problems
from kdkit.core.projectfiles import SAFE_PATH
from kdkit.transfer.runmd import run_md
from tests.conftest import invoke, tree_snapshot
from tests.transfer.test_bundle import write_fresh_lock
from tests.transfer.test_rented import sections

# (file, JSON path, the value the template has); the JSON path is also the key's place in the file.
PATH_KEYS = [
    ("kdkit.json", "$.backends.cpu.lock", "requirements/cpu.txt"),
    ("kdkit.json", "$.backends.cuda.lock", "requirements/cuda.txt"),
    ("kdkit.json", "$.requirements", "requirements/base.in"),
    ("kdkit.json", "$.pilot_config", "config/pilot.json"),
    ("config/pilot.json", "$.inputs", "data/pilot"),
    ("config/pilot.json", "$.manifest", "data/pilot/manifest.json"),
    ("config/pilot.json", "$.runs", "runs"),
]


def _fullwidth(text: str) -> str:
    """The first letter as its fullwidth look-alike (``r`` -> U+FF52)."""
    at = next(i for i, c in enumerate(text) if c.isalpha())
    return text[:at] + chr(ord(text[at]) + 0xFEE0) + text[at + 1:]


def _cyrillic(text: str) -> str:
    """The first of a, e, o, u as its Cyrillic look-alike (U+0430, U+0435, U+043E, U+0443)."""
    latin = next(c for c in text if c in "aeou")
    return text.replace(latin, {"a": "\u0430", "e": "\u0435", "o": "\u043e", "u": "\u0443"}[latin], 1)


# How each hostile value is made from the key's own value: the cases first, then variants.
HOSTILE = {
    "semicolon": lambda v: f"{v};touch PWNED;#.txt",
    "command substitution": lambda v: f"{v}$(touch PWNED2)",
    "backticks": lambda v: f"{v}`touch PWNED`",
    "space": lambda v: f"{v} x",
    "newline": lambda v: f"{v}\n--index-url http:",
    "carriage return": lambda v: f"{v}\r",
    "tab": lambda v: f"{v}\tx",
    "leading dash": lambda v: f"-{v}",
    "dash folder": lambda v: f"sub/-rf/{v}",
    "dotdot inside": lambda v: f"sub/../{v}",
    "dotdot outside": lambda v: f"../{v}",
    "fullwidth look-alike": _fullwidth,
    "cyrillic look-alike": lambda v: _cyrillic(v),
    "division slash": lambda v: v.replace("/", "\u2215") if "/" in v else f"x\u2215{v}",
    "zero-width space": lambda v: f"{v}\u200b",
    "no-break space": lambda v: f"{v}\u00a0x",
    "right-to-left override": lambda v: f"{v}\u202etxt.exe",
    "glob star": lambda v: f"{v}*",
    "glob question": lambda v: f"{v}?",
    "glob class": lambda v: f"{v}[ab]",
    "brace": lambda v: f"{v}{{a,b}}",
    "pipe": lambda v: f"{v}|x",
    "ampersand": lambda v: f"{v}&x",
    "redirect": lambda v: f"{v}>x",
    "single quote": lambda v: f"{v}'x",
    "double quote": lambda v: f'{v}"x',
    "dollar variable": lambda v: f"{v}$HOME",
    "tilde": lambda v: f"~/{v}",
    "backslash": lambda v: f"{v}\\x",
    "colon (a mount's separator)": lambda v: f"{v}:/etc",
    "comma (a mount's field separator)": lambda v: f"{v},readonly=false",
    "hash": lambda v: f"{v}#x",
    "absolute": lambda v: f"/{v}",
    "empty folder name": lambda v: v.replace("/", "//") if "/" in v else f"x//{v}",
}


def set_key(root: Path, file: str, where: str, value: Any) -> None:
    """Write ``value`` at ``where`` (``$.a.b``, a number for a list's index) of the JSON file ``file``."""
    path = root / file
    data = json.loads(path.read_text(encoding="utf-8"))
    *parents, last = where.removeprefix("$.").split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[int(last) if isinstance(node, list) else last] = value
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


CASES = [(file, where, name, make(value)) for file, where, value in PATH_KEYS for name, make in HOSTILE.items()]


def _id(case: tuple[str, str, str, str]) -> str:
    return f"{case[1]}-{case[2]}"


def test_every_hostile_value_is_one_the_rule_refuses() -> None:
    """The cases really are hostile (none slips into the safe set unchanged)."""
    for _file, where, name, value in CASES:
        assert SAFE_PATH.fullmatch(value) is None, (where, name, value)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_validate_refuses_each_hostile_path_in_one_line(project: Path, case: tuple[str, str, str, str]) -> None:
    file, where, _name, value = case
    set_key(project, file, where, value)
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if ": git: " not in line]  # outside git: a tmp folder
    assert len(lines) == 2, result.output  # the problem, then the count: each on one line
    assert lines[0].startswith(f"{project}/{file}: {where}: "), result.output
    assert lines[1] == f"Error: {project}: 1 problem(s) found; fix them and run `kdkit validate` again"
    assert value not in result.output or (value.isascii() and value.isprintable())  # else shown escaped
    assert tree_snapshot(project) == before


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_schema_and_the_model_refuse_the_same_pilot_paths(name: str) -> None:
    """An editor reading schemas/pilot.schema.json and kdkit's pilot model agree on every hostile path."""
    template = json.loads((Path(__file__).resolve().parents[2] / "project-template/config/pilot.json").read_text())
    for key in ("inputs", "manifest", "runs"):
        data = {**template, key: HOSTILE[name](template[key])}
        assert list(_validator("pilot").iter_errors(data)) and config_problems(data), (key, data[key])


# ---------------------------------------------------------------- refused where the value is used


def _refused(args: list[Any], watched: list[Path], where: str) -> None:
    """Exit 2, one error line naming ``where``, and nothing under ``watched`` changed or made."""
    before = [tree_snapshot(path) for path in watched]
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.stderr.splitlines()[-1] == errors[0], result.stderr
    assert f": {where}: " in errors[0] and "Traceback" not in result.output, result.output
    assert [tree_snapshot(path) for path in watched] == before


USED = ["semicolon", "command substitution", "backticks", "space", "newline", "leading dash", "dotdot inside",
        "fullwidth look-alike", "glob star", "colon (a mount's separator)"]


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize(("file", "where", "value"), PATH_KEYS, ids=[k[1] for k in PATH_KEYS])
def test_bundle_refuses_a_config_edited_after_validate(project: Path, tmp_path: Path, file: str, where: str,
                                                       value: str, name: str) -> None:
    write_fresh_lock(project)
    set_key(project, file, where, HOSTILE[name](value))
    out = tmp_path / "bundle"
    _refused(["bundle", project, "--out", out, "--no-image", "--no-kdkit-wheels"], [project], where)
    assert not out.exists() and not any(p.name.startswith(".bundle") for p in tmp_path.iterdir())


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize(("file", "where", "value"), [k for k in PATH_KEYS if k[0] != "kdkit.json" or
                                                      k[1] == "$.pilot_config"], ids=str)
def test_pilot_refuses_a_config_edited_after_validate(project: Path, file: str, where: str, value: str,
                                                      name: str) -> None:
    set_key(project, file, where, HOSTILE[name](value))
    _refused(["pilot", project, "--run-id", "hostile"], [project], where)


@pytest.mark.parametrize("name", USED)
@pytest.mark.parametrize("where", ["$.backends.cpu.lock", "$.requirements"])
def test_lock_refuses_a_config_edited_after_validate(project: Path, where: str, name: str) -> None:
    value = dict((k[1], k[2]) for k in PATH_KEYS)[where]
    set_key(project, "kdkit.json", where, HOSTILE[name](value))
    _refused(["lock", project, "--backend", "cpu"], [project], where)


# ---------------------------------------------------------------- RUN.md with hostile values, run for real

# Values put straight into RUN.md's renderer, past every rule: each must stay one word of each command.
INJECTED = {
    "semicolon": ";touch PWNED;#",
    "command substitution": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "and": " && touch PWNED #",
    "pipe": "|touch PWNED",
    "single quotes": "'; touch PWNED; '",
    "double quotes": '"; touch PWNED; "',
    "IFS": "${IFS}$(touch${IFS}PWNED)",
    "escaped": "\\$(touch PWNED)",
    "globs": "* ?[a]{b,c}",
    "variable": "$PWD$kd_uid",
    "option-like": " -rf x",
    # allowed by the rule, and still worth a look: dashes, dots, underscores where a shell or a tool notices them
    "allowed dash dot": "-1.0_x",
    "allowed dots": "..x.",
}
# Each call to a file of its own, named by the time it began (two ends of a pipe run at once).
RECORDER = "#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > \"$KD_CALLS/$(date +%s%N).$$\"\n"


def _info(h: str) -> dict[str, Any]:
    """bundle.json's keys that RUN.md reads, each holding ``h``."""
    return {"project": "proj", "backend": f"cpu{h}", "kdkit_version": "0.1.0", "created": "2026-01-01T00:00:00Z",
            "revision": None, "python": f"3.11{h}", "lock": f"requirements/cpu{h}.txt", "pylock": None,
            "inputs": f"data{h}", "runs": f"runs{h}",
            "image": {"ref": f"proj:cpu{h}", "id": "sha256:" + "0" * 64, "file": f"image{h}.tar.zst",
                      "compressor": "zstd"},
            "kdkit_wheels": {"folder": f"kdkit-wheels{h}", "requirements": f"kdkit-wheels{h}/requirements.txt",
                             "pythons": ["3.11"], "arch": "x86_64"}}


def _stage(base: Path, h: str) -> tuple[Path, dict[str, str]]:
    """A bundle folder with one finished run and one earlier copy, and every program RUN.md calls a recorder."""
    bundle = base / "bundle"
    (bundle / "project" / f"runs{h}" / "r1").mkdir(parents=True)
    (base / "kdkit-evidence" / "r0").mkdir(parents=True)
    stubs = base / "stubs"
    stubs.mkdir()
    (base / "calls").mkdir()
    programs = [stubs / name for name in ("python3", f"python3.11{h}", "docker", "zstd", "sha256sum", "touch")]
    programs += [base / "kdkit-venv/bin/python", base / "project-venv/bin/python"]
    for program in programs:
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text(RECORDER, encoding="utf-8")
        program.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(base), "KD_CALLS": str(base / "calls"),
           "LANG": "C.UTF-8"}
    return bundle, env


def _calls(base: Path) -> list[list[str]]:
    """The calls recorded since the last look, in the order they began (and forgotten)."""
    records = sorted((base / "calls").iterdir(), key=lambda p: tuple(map(int, p.name.split("."))))
    calls = [[os.fsdecode(word) for word in record.read_bytes().split(b"\0")[:-1]] for record in records]
    for record in records:
        record.unlink()
    return calls


def _expected(h: str, stubs: Path) -> dict[str, list[list[str]]]:
    """The calls each section's blocks must make, in order: the programs RUN.md means, the values whole."""
    kv, pv, lock, runs = "../kdkit-venv/bin/python", "../project-venv/bin/python", f"project/requirements/cpu{h}.txt", \
        f"project/runs{h}/r1/"
    copies = lambda *tool: [[*tool, "copy-out", runs, "../kdkit-evidence"],  # noqa: E731
                            [*tool, "copy-out", "--verify", "../kdkit-evidence/r0/"]]
    python3 = str(stubs / "python3")
    run_id = [kv, "-c", 'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])', "../kdkit-run.json"]
    return {
        "Check the copy": [[str(stubs / "sha256sum"), "-c", "--quiet", "SHA256SUMS"]],
        "With Docker, through kdkit": [
            [python3, "-m", "venv", "--clear", "../kdkit-venv"],
            [kv, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", f"kdkit-wheels{h}",
             "--require-hashes", "-r", f"kdkit-wheels{h}/requirements.txt"],
            [kv, "-m", "kdkit", "load", "."],
            [kv, "-m", "kdkit", "run", "project", "--image", f"proj:cpu{h}", "--", "kdkit", "diagnose", "--accept",
             "--expect", f"cpu{h}"],
            [kv, "-m", "kdkit", "run", "project", "--image", f"proj:cpu{h}", "--env-file", "../.env", "--detach",
             "--json"],
            run_id, [kv, "-m", "kdkit", "status", "", "--project", "project"],  # the stub prints no run ID
            [kv, "-m", "kdkit", "wait", "", "--project", "project"],
            run_id, [kv, "-m", "kdkit", "copy-out", f"project/runs{h}/", "user@backup-host:kdkit-evidence"],
            [kv, "-m", "kdkit", "copy-out", "--verify", "user@backup-host:kdkit-evidence/"]],
        "With Docker only": [[str(stubs / "zstd"), "-q", "-dc", f"image{h}.tar.zst"], [str(stubs / "docker"), "load"],
                             ["docker run"], *copies(python3, "kdkit.pyz")],
        "Without Docker": [
            [str(stubs / f"python3.11{h}"), "-m", "venv", "../project-venv"],
            [pv, "-m", "pip", "install", "--quiet", "--require-hashes", "--no-deps", "-r", lock],
            [pv, "kdkit.pyz", "diagnose", "--expect", f"cpu{h}"], [pv, "kdkit.pyz", "verify-env", "--lock", lock],
            [pv, "kdkit.pyz", "pilot", "project"], *copies(pv, "kdkit.pyz")],
    }


def _mounts(words: list[str]) -> dict[str, dict[str, str]]:
    """docker run's --mount values (CSV records, as the docker CLI reads them) by target."""
    found = {}
    for flag, value in itertools.pairwise(words):
        if flag == "--mount":
            fields = dict(field.split("=", 1) if "=" in field else (field, "") for field in next(csv.reader([value])))
            found[fields["target"]] = fields
    return found


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("h", list(INJECTED.values()), ids=list(INJECTED))
def test_each_run_md_block_runs_only_its_commands_whatever_the_values(tmp_path: Path, h: str, shell: str) -> None:
    text = run_md(_info(h))
    bundle, env = _stage(tmp_path, h)
    expected = _expected(h, tmp_path / "stubs")
    found = sections(text)
    assert [t.split(" (")[0].split(",")[0] for t in found] == ["Check the copy before anything else",
                                                              "With Docker", "With Docker only", "Without Docker"]
    for title, blocks in found.items():
        for block in blocks:
            done = subprocess.run([shell, "-n", "-c", block], capture_output=True, text=True, check=False)
            assert done.returncode == 0, (block, done.stderr)
            done = subprocess.run([shell, "-e", "-c", block], cwd=bundle, env=env, capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, (title, block, done.stderr)
        calls = _calls(tmp_path)
        want = next(v for k, v in expected.items() if title.startswith(k))
        if title.startswith("With Docker only"):
            assert sorted(calls[:2]) == sorted(want[:2]), calls  # zstd | docker load: either may record first
            calls[:2], run = want[:2], calls.pop(2)
            assert run[:2] == [str(tmp_path / "stubs/docker"), "run"] and run[-1] == f"proj:cpu{h}", run
            mounts = _mounts(run)
            assert mounts[f"/app/data{h}"]["source"] == f"{bundle}/project/data{h}", mounts
            assert mounts[f"/app/runs{h}"]["source"] == f"{bundle}/project/runs{h}", mounts
            assert "readonly" in mounts[f"/app/data{h}"] and "readonly" not in mounts[f"/app/runs{h}"]
            want = [c for c in want if c != ["docker run"]]
        assert calls == want, title
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith("PWNED")], "an injected command ran"


def test_allowed_values_are_written_as_they_are() -> None:
    """What the rule allows needs no quoting: RUN.md shows the paths people wrote, as they wrote them."""
    h = INJECTED["allowed dash dot"]
    assert shlex.quote(f"project/requirements/cpu{h}.txt") == f"project/requirements/cpu{h}.txt"
    assert f"-r project/requirements/cpu{h}.txt" in run_md(_info(h))


# ---------------------------------------------------------------- a real bundle of allowed, unusual paths


def test_a_bundle_of_allowed_unusual_paths_gives_blocks_every_shell_reads(project: Path, tmp_path: Path) -> None:
    lock = "requirements/.v1/cpu..lock-1_x.txt"
    (project / lock).parent.mkdir()
    shutil.move(write_fresh_lock(project), project / lock)
    (project / "data/pilot").rename(project / "data/.p-1_x")
    set_key(project, "kdkit.json", "$.backends.cpu.lock", lock)
    set_key(project, "config/pilot.json", "$.inputs", "data/.p-1_x")
    set_key(project, "config/pilot.json", "$.manifest", "data/.p-1_x/manifest.json")
    set_key(project, "config/pilot.json", "$.runs", "._runs-1/x_/")
    set_key(project, "campaign.json", "$.corpus.manifest", "data/.p-1_x/manifest.json")  # the campaign's corpus too
    assert invoke("validate", project).exit_code == 0
    result = invoke("bundle", project, "--out", tmp_path / "bundle", "--no-image", "--no-kdkit-wheels")
    assert result.exit_code == 0, result.output
    text = (tmp_path / "bundle/RUN.md").read_text(encoding="utf-8")
    assert f"-r project/{lock}" in text and "for run in project/._runs-1/x_/*/" in text
    blocks = [block for found in sections(text).values() for block in found]
    assert len(blocks) == 3  # the check, the venv and its pilot, the copies (no image: no Docker sections)
    for shell in ("sh", "bash"):
        for block in blocks:
            done = subprocess.run([shell, "-n", "-c", block], capture_output=True, text=True, check=False)
            assert done.returncode == 0, (shell, block, done.stderr)
