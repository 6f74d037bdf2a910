"""Issue 24 §1: no value of a config reaches a shell.

A lock path or a runs folder holding shell syntax (``requirements/cpu.txt;touch PWNED;#.txt``,
``runs$(touch PWNED2)``) passed `kdkit validate` and was written unquoted into RUN.md, whose blocks run as
written on the rented host. Now every path a config names is held to one safe set
(kdkit.core.projectfiles.SAFE_PATH) by `validate` and again by each command that reads it, and every value
RUN.md's blocks interpolate is one shell word whatever it holds.

Here: the hostile values, made from each path-valued key's own value, and that the rule refuses every one of
them. Each command's own tests use them:

* `validate` refuses each, in each key (exit 2, one line, nothing written): tests/project/test_validate_paths.py;
* so do `bundle` (tests/transfer/test_bundle.py), `pilot` (tests/probe/pilot/test_pilot_escapes.py) and `lock`
  (tests/lock/test_hostile_locks.py) reading a config edited after `validate`; the schema and the pilot model
  agree (tests/core/test_pilot_config_model.py);
* RUN.md rendered with hostile values put straight into its renderer (past every rule) runs, block by block
  in a real shell with every program it calls stood in for by a recorder, exactly the intended programs with
  the values as single arguments, and a bundle made from allowed but unusual paths has blocks that ``bash -n``
  and ``sh -n`` read: tests/transfer/test_run_md.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kdkit.core.projectfiles import SAFE_PATH
from tests.conftest import invoke, tree_snapshot

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
    return text.replace(latin,
                        {"a": "\u0430", "e": "\u0435", "o": "\u043e", "u": "\u0443"}[latin], 1)


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


CASES = [(file, where, name, make(value)) for file, where, value in PATH_KEYS for name,
         make in HOSTILE.items()]


def _id(case: tuple[str, str, str, str]) -> str:
    return f"{case[1]}-{case[2]}"


def test_every_hostile_value_is_one_the_rule_refuses() -> None:
    """The cases really are hostile (none slips into the safe set unchanged)."""
    for _file, where, name, value in CASES:
        assert SAFE_PATH.fullmatch(value) is None, (where, name, value)


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


USED = ["semicolon", "command substitution", "backticks", "space", "newline", "leading dash",
        "dotdot inside",
        "fullwidth look-alike", "glob star", "colon (a mount's separator)"]
