"""RUN.md: the commands for the rented machine, in the order a person types them.

Every indented block is a shell block that runs as written from the bundle's folder (a test extracts
and runs them: tests/test_rented.py), for each path the bundle serves:

* **with kdkit, with Docker**: kdkit from ``kdkit-wheels/`` (offline), then `kdkit load` and `kdkit run`,
  whose container is kdkit.image.container's spec with this host's facts;
* **with Docker only**: ``docker load`` and the same spec as one ``docker run`` line, the host's facts
  computed by shell lines made from the same rules (:func:`kdkit.image.container.portable_line`);
* **without Docker**: a venv made from the lock, then ``kdkit.pyz``.

Each path ends with its results copied out of the bundle and the copy verified.

Every value a block takes from the bundle (the lock, the runs folder, the image, kdkit-wheels/) is one
shell word quoted with :func:`shlex.quote`, even though kdkit's configs already hold paths to a safe set
(kdkit.core.projectfiles.SAFE_PATH): what a config says is never run (tests/test_hostile_config_values.py).
"""

from __future__ import annotations

import shlex
from typing import Any

from kdkit.image.container import RUNS_OWNER, portable_line, portable_spec, shell_prelude
from kdkit.transfer.format import COMPRESSORS, PROJECT, ZIPAPP

# Beside the bundle, outside it: the bundle stays exactly what SHA256SUMS lists (`kdkit load` re-checks it).
EVIDENCE = "../kdkit-evidence"  # where RUN.md copies results
KDKIT_ENV = "../kdkit-venv"  # kdkit, installed from kdkit-wheels/
LOCK_ENV = "../project-venv"  # the project's lock, for the path without Docker
CLOSE = "{kdkit} close {project} --order ../order.json --out ../kdkit-reports"
q = shlex.quote  # every value a block interpolates: one word, whatever it holds


def _block(lines: list[str]) -> list[str]:
    return [f"    {line}" for line in lines] + [""]


def _kdkit(env: str) -> str:
    """kdkit from a venv, through its Python: a venv's scripts start with a shebang that breaks on a path
    holding a space or a ``$``; ``python -m`` does not."""
    return f"{q(env + '/bin/python')} -m kdkit"


def _install_kdkit(wheels: dict[str, Any]) -> str:
    """kdkit into a fresh venv beside the bundle, offline and hash-checked, from kdkit-wheels/ (``--clear``: a
    newer wheel of the same version is installed, not skipped)."""
    return (f"python3 -m venv --clear {q(KDKIT_ENV)} && {q(KDKIT_ENV + '/bin/python')} -m pip install --quiet "
            f"--no-index --find-links {q(wheels['folder'])} --require-hashes -r {q(wheels['requirements'])}")


def _copy_out(kdkit: str, runs: str) -> list[str]:
    """Each finished run copied out once (a second paste copies only what is new), then every copy verified."""
    evidence = q(EVIDENCE)
    return [f"mkdir -p {evidence}",
            f'for run in {q(f"{PROJECT}/{runs}")}/*/; do [ -d "$run" ] && [ ! -e {evidence}/"$(basename "$run")" ] '
            f'|| continue; {kdkit} copy-out "$run" {evidence}; done',
            f'for copy in {evidence}/*/; do [ ! -d "$copy" ] || {kdkit} copy-out --verify "$copy"; done']


def _header(info: dict[str, Any]) -> list[str]:
    revision = info["revision"] or "(not a git checkout)"
    return [f"# {info['project']}: bundle for the {info['backend']} backend", "",
            f"Made by kdkit {info['kdkit_version']} on {info['created']} from revision {revision}.",
            "Every block below runs as written from this folder (the one holding RUN.md); each starts here.", "",
            "## Check the copy before anything else", "",
            *_block(["sha256sum -c --quiet SHA256SUMS"])]


def _pythons(wheels: dict[str, Any]) -> str:
    served = f"python3 {', '.join(wheels['pythons'])} on {wheels['arch']} Linux"
    missing = sorted(wheels.get("pythons_missing") or {})
    return served + (f", not {', '.join(missing)} (a locked wheel has no build for it)" if missing else "")


def _with_kdkit(info: dict[str, Any], image: dict[str, Any], runs: str) -> list[str]:
    wheels, kdkit = info["kdkit_wheels"], _kdkit(KDKIT_ENV)
    return ["## With Docker, through kdkit (recommended)", "",
            f"kdkit itself travels in `{wheels['folder']}/` and installs offline, hash-checked, for "
            f"{_pythons(wheels)}; "
            "with another python3, or where `python3 -m venv` fails (`apt-get install python3-venv`), use the "
            "Docker-only way below. `kdkit load` needs `zstd` for the image (`apt-get install zstd`). "
            "`kdkit run` starts the container confined, with the pilot inputs read-only and "
            f"`{PROJECT}/{runs}` writable. {RUNS_OWNER}. `--print` shows its `docker run` line.", "",
            *_block([_install_kdkit(wheels),
                     f"{kdkit} load .",
                     f"{kdkit} run {q(PROJECT)} --image {q(image['ref'])}"]),
            "The container runs diagnose, then verify-env against the lock, then the pilot; its exit code is the "
            f"verdict (`kdkit run --resume RUN_ID` finishes an interrupted run). Keep the evidence (`{EVIDENCE}`):",
            "", *_block(_copy_out(kdkit, runs)),
            f"After the campaign, with the order that `kdkit plan --save order.json` wrote copied beside this folder: "
            f"`{CLOSE.format(kdkit=kdkit, project=q(PROJECT))}`.", ""]


def _docker_only(info: dict[str, Any], image: dict[str, Any], inputs: str, runs: str) -> list[str]:
    backend = info["backend"]
    decompress = COMPRESSORS[image["compressor"]].decompress
    spec = portable_spec(image["ref"], f"$PWD/{PROJECT}", inputs, runs, backend, info.get("mounts") or ())
    return ["## With Docker only (no kdkit on this host)", "",
            "The same container as `kdkit run` starts (image id "
            f"{image['id'][:19]}); the lines before it compute what it depends on here. {RUNS_OWNER}. "
            f"`{decompress[0]}` must be installed (`apt-get install {decompress[0]}`).", "",
            *_block([f"{shlex.join(decompress)} {q(image['file'])} | docker load",
                     *shell_prelude(f"{PROJECT}/{runs}", backend),
                     portable_line(spec, backend)]),
            "Its exit code is the verdict. Keep the evidence (`python3 kdkit.pyz` copies and verifies):", "",
            *_block(_copy_out(f"python3 {q(ZIPAPP)}", runs))]


def _without_docker(info: dict[str, Any]) -> list[str]:
    backend = info["backend"]
    pyz, runs = f"{q(LOCK_ENV + '/bin/python')} {q(ZIPAPP)}", info["runs"]
    python, project, lock = q(f"python{info['python']}"), q(PROJECT), q(f"{PROJECT}/{info['lock']}")
    return [f"## Without Docker (python{info['python']} and the lock's index reachable)", "",
            f"A venv made from the lock{_pylock_note(info)}, hash-checked, then kdkit's in-container part from "
            "`kdkit.pyz`:", "",
            *_block([f"{python} -m venv {q(LOCK_ENV)} && {q(LOCK_ENV + '/bin/python')} -m pip install --quiet "
                     f"--require-hashes --no-deps -r {lock}",
                     f"{pyz} diagnose --expect {q(backend)} && {pyz} verify-env --lock {lock} "
                     f"&& {pyz} pilot {project}"]),
            "The last command's exit code is the verdict. Before the long run: "
            f"`{pyz} sweep {project} --batch-sizes 1,2,4,8` (the batch size from measurements) and "
            f"`{pyz} resume-test {project} --out ../resume-test` (training: resume in a new process). Keep the "
            "evidence:",
            "", *_block(_copy_out(pyz, runs)), *_kdkit_for_close(info)]


def _pylock_note(info: dict[str, Any]) -> str:
    """Where the bundle carries the PEP 751 lock too: why this path installs from the requirements lock."""
    if not info.get("pylock"):
        return ""
    return (f" (the requirements lock: the PEP 751 lock beside it, `{PROJECT}/{info['pylock']}`, pins the same "
            "packages, but only pip 26.1 or newer installs from it, newer than a fresh venv's)")


def _kdkit_for_close(info: dict[str, Any]) -> list[str]:
    """Without an image there is no section that installs kdkit; `kdkit close` still wants it."""
    wheels = info.get("kdkit_wheels")
    if info["image"] or not wheels:
        return []
    return [f"kdkit itself installs offline from `{wheels['folder']}/` ({_pythons(wheels)}): "
            f"`{_install_kdkit(wheels)}`; after the "
            f"campaign, with the order `kdkit plan --save order.json` wrote copied beside this folder: "
            f"`{CLOSE.format(kdkit=_kdkit(KDKIT_ENV), project=q(PROJECT))}`.", ""]


def run_md(info: dict[str, Any]) -> str:
    """RUN.md for the bundle bundle.json describes (``info``)."""
    image, inputs, runs = info["image"], info["inputs"], info["runs"]
    lines = _header(info)
    if image and info.get("kdkit_wheels"):
        lines += _with_kdkit(info, image, runs)
    if image:
        lines += _docker_only(info, image, inputs, runs)
    lines += _without_docker(info)
    return "\n".join(_numbered(lines)).rstrip("\n") + "\n"


def _numbered(lines: list[str]) -> list[str]:
    """``## Title`` -> ``## N. Title``, in order: the sections a bundle has, numbered as they come."""
    count = 0
    out = []
    for line in lines:
        if line.startswith("## "):
            count += 1
            line = f"## {count}. {line[3:]}"
        out.append(line)
    return out
