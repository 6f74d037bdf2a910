"""RUN.md: the commands for the rented machine, in the order a person types them.

Every indented block is a shell block that runs as written from the bundle's folder (a test extracts
and runs them: tests/transfer/test_rented.py), for each path the bundle serves:

* **with kdkit, with Docker**: kdkit from ``kdkit-wheels/`` (offline), then `kdkit load` and `kdkit
  run`, whose container is kdkit.image.container's spec with this host's facts;
* **with Docker only**: ``docker load`` and the same spec as one ``docker run`` line, the host's
  facts computed by shell lines made from the same rules
  (:func:`kdkit.image.container.portable_line`);
* **without Docker**: a venv made from the lock, then ``kdkit.pyz``.

Each path ends with its results copied out of the bundle and the copy verified; the kdkit path
copies them off the machine (``user@backup-host:kdkit-evidence``, which the user replaces with their
own place and the rented-host test with its SSH server) and verifies them there. The kdkit path is
the rented hour in order: kdkit installed offline, the image loaded, the user's secrets in
``../.env`` (made on the host, never in the bundle), the machine accepted (`kdkit diagnose --accept`
in the image), the run detached (its ID kept in ``../kdkit-run.json``) and followed with `kdkit
status` and `kdkit wait`, then the evidence.

Every value a block takes from the bundle (the lock, the runs folder, the image, kdkit-wheels/) is
one shell word quoted with :func:`shlex.quote`, even though kdkit's configs already hold paths to a
safe set (kdkit.core.projectfiles.SAFE_PATH): what a config says is never run
(tests/transfer/test_run_md.py).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from kdkit.image.container import RUNS_OWNER, portable_line, portable_spec, shell_prelude
from kdkit.transfer.format import COMPRESSORS, PROJECT, ZIPAPP

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kdkit.transfer.format import BundleInfo, ImageRecord
    from kdkit.transfer.kdkitwheels import KdkitWheels

# Beside the bundle, outside it: the bundle stays exactly what SHA256SUMS lists (`kdkit load`
# re-checks it).
# a copy on the same machine: the paths without kdkit, and the fallback
EVIDENCE = "../kdkit-evidence"
# A place off the machine, written by the user (tests/transfer/test_rented.py puts its SSH server
# there).
BACKUP = "user@backup-host:kdkit-evidence"
ENV_FILE = "../.env"  # the user's secrets, made on the rented host, beside the bundle: never in it
RUN_RECORD = "../kdkit-run.json"  # what `kdkit run --detach --json` printed: the run ID
# the run ID, in a script
_RUN_ID = ("run_id=$({python} -c "
           """'import json, sys; print(json.load(open(sys.argv[1]))["run_id"])' """
           + RUN_RECORD + ")")
KDKIT_ENV = "../kdkit-venv"  # kdkit, installed from kdkit-wheels/
LOCK_ENV = "../project-venv"  # the project's lock, for the path without Docker
CLOSE = "{kdkit} close {project} --order ../order.json --out ../kdkit-reports"
_SAME = (f"`{EVIDENCE}` is on this same machine and is lost with it; copy each run off it too, to "
         f"a place you control (`copy-out RUN {BACKUP}`, then `copy-out --verify {BACKUP}/RUN_ID` "
         "there; or an rclone `remote:path`).")
q = shlex.quote  # every value a block interpolates: one word, whatever it holds


def _block(lines: list[str]) -> list[str]:
    return [f"    {line}" for line in lines] + [""]


def _kdkit(env: str) -> str:
    """kdkit from a venv, through its Python: a venv's scripts start with a shebang that breaks on a
    path holding a space or a ``$``; ``python -m`` does not."""
    return f"{q(env + '/bin/python')} -m kdkit"


def _install_kdkit(wheels: KdkitWheels) -> str:
    """kdkit into a fresh venv beside the bundle, offline and hash-checked, from kdkit-wheels/
    (``--clear``: a newer wheel of the same version is installed, not skipped)."""
    return (f"python3 -m venv --clear {q(KDKIT_ENV)} && {q(KDKIT_ENV + '/bin/python')} -m pip "
            f"install --quiet --no-index --find-links {q(wheels['folder'])} --require-hashes -r "
            f"{q(wheels['requirements'])}")


def _copy_out(kdkit: str, runs: str) -> list[str]:
    """Each finished run copied out once (a second paste copies only what is new), then every copy
    verified."""
    evidence = q(EVIDENCE)
    return [f"mkdir -p {evidence}",
            f'for run in {q(f"{PROJECT}/{runs}")}/*/; do [ -d "$run" ] && [ ! -e '
            f'{evidence}/"$(basename "$run")" ] || continue; {kdkit} copy-out "$run" {evidence}; '
            'done',
            f'for copy in {evidence}/*/; do [ ! -d "$copy" ] || {kdkit} copy-out --verify "$copy"; '
            'done']


def _header(info: BundleInfo) -> list[str]:
    revision = info["revision"] or "(not a git checkout)"
    return [f"# {info['project']}: bundle for the {info['backend']} backend", "",
            f"Made by kdkit {info['kdkit_version']} on {info['created']} from revision {revision}.",
            "Every block below runs as written from this folder (the one holding RUN.md); each "
            "starts here.", "",
            "## Check the copy before anything else", "",
            *_block(["sha256sum -c --quiet SHA256SUMS"])]


def _pythons(wheels: KdkitWheels) -> str:
    served = f"python3 {', '.join(wheels['pythons'])} on {wheels['arch']} Linux"
    missing = sorted(wheels.get("pythons_missing") or {})
    return served + (f", not {', '.join(missing)} (a locked wheel has no build for it)" if missing
                     else "")


def _with_kdkit(info: Mapping[str, Any], image: ImageRecord, runs: str) -> list[str]:
    """The rented hour in order: kdkit installed offline, the image loaded, the secrets, the machine
    accepted, the run detached and followed, its evidence copied off the machine and verified
    there."""
    wheels, kdkit = info["kdkit_wheels"], _kdkit(KDKIT_ENV)
    run = f"{kdkit} run {q(PROJECT)} --image {q(image['ref'])}"
    return ["## With Docker, through kdkit (recommended)", "",
            f"**Install kdkit, load the image.** kdkit itself travels in `{wheels['folder']}/` and "
            f"installs offline, hash-checked, for {_pythons(wheels)}; "
            "with another python3, or where `python3 -m venv` fails (`apt-get install "
            "python3-venv`), use the Docker-only way below. `kdkit load` needs `zstd` for the "
            "image (`apt-get install zstd`).", "",
            *_block([_install_kdkit(wheels), f"{kdkit} load ."]),
            *_secrets(),
            *_accept(run, info["backend"]),
            *_detached(kdkit, run),
            *_evidence(kdkit, runs),
            "After the campaign, with the order that `kdkit plan --save order.json` wrote copied "
            f"beside this folder: `{CLOSE.format(kdkit=kdkit, project=q(PROJECT))}`.", ""]


def _secrets() -> list[str]:
    return ["**Your secrets.** A token the app needs (a Hugging Face token, an API key) never "
            f"travels in the bundle or the project: on this host, put it in `{ENV_FILE}`, beside "
            f"this folder, as `NAME=VALUE` lines (`nano {ENV_FILE}`), taken from your own password "
            "manager, or from the provider's dashboard for the provider's own keys. This block "
            f"makes the file, readable by you only (an empty one is fine); `--env-file {ENV_FILE}` "
            "hands it to the container at run time only: never printed, logged or baked.", "",
            *_block([f"umask 077; [ -e {q(ENV_FILE)} ] || echo '# NAME=VALUE lines (HF_TOKEN=...): "
                     f"from your password manager or the provider dashboard' > {q(ENV_FILE)}"])]


def _accept(run: str, backend: str) -> list[str]:
    return ["**Accept the machine, in the first hour.** The acceptance test runs in the image (its "
            "torch, your GPUs): diagnose, the driver's health, then a sustained load. Exit 0: "
            "accepted. Exit 1 (refused, degraded or incomplete): the report names each point, with "
            "a paragraph for the provider; stop here and ask them for another machine or a refund "
            "while the first hour lasts.", "",
            *_block([f"{run} -- kdkit diagnose --accept --expect {q(backend)}"])]


def _detached(kdkit: str, run: str) -> list[str]:
    return ["**Run it, detached.** `--detach` starts the container and returns at once with the "
            f"run ID (kept in `{RUN_RECORD}`); the container runs diagnose, then verify-env "
            f"against the lock, then the pilot. {RUNS_OWNER}. `kdkit status` shows where it "
            "stands, `kdkit wait` returns its verdict as the exit code.",
            "",
            *_block([f"{run} --env-file {q(ENV_FILE)} --detach --json > {q(RUN_RECORD)}",
                     _RUN_ID.format(
            python=q(KDKIT_ENV + "/bin/python")),
                     f'{kdkit} status "$run_id" --project {q(PROJECT)}',
            f'{kdkit} wait "$run_id" --project {q(PROJECT)}']),
            "A dropped connection loses nothing: the container runs on. From a new connection, in "
            "this folder, the block's second line gives the run ID again; then its `status` and "
            f'`wait` lines, or `{kdkit} logs "$run_id" -f --project {q(PROJECT)}` to follow its '
            "output. `kdkit run --resume RUN_ID` finishes a run that was cut off; `kdkit run "
            "--print` shows the `docker run` line.", ""]


def _evidence(kdkit: str, runs: str) -> list[str]:
    folder = q(f"{PROJECT}/{runs.rstrip('/')}")
    return ["**The evidence, off this machine.** Copy the run to a place you control that outlives "
            "the rental (your own server over SSH, with rsync where it is installed; or any rclone "
            "remote: S3, GCS, B2, Drive, with your own rclone config) and verify it there: the "
            "hashes are read back at the destination and every file is reloaded. Write your own "
            f"place for `{BACKUP}`; copy during the pilot too, not only at the end (`kdkit run ... "
            f"--copy-to {BACKUP}`).", "",
            *_block([_RUN_ID.format(python=q(KDKIT_ENV + "/bin/python")),
                     f'{kdkit} copy-out {folder}/"$run_id" {BACKUP}',
                     f'{kdkit} copy-out --verify {BACKUP}/"$run_id"']),
            f"With rclone: `{kdkit} copy-out {folder}/RUN_ID myremote:kdkit-evidence`, then "
            f"`{kdkit} copy-out --verify myremote:kdkit-evidence/RUN_ID`. A copy on this same "
            f"machine (`{kdkit} copy-out {folder}/RUN_ID {q(EVIDENCE)}`) is a fallback only: it is "
            "lost with the machine.",
            ""]


def _docker_only(info: BundleInfo, image: ImageRecord, inputs: str, runs: str) -> list[str]:
    backend = info["backend"]
    decompress = COMPRESSORS[image["compressor"]].decompress
    spec = portable_spec(image["ref"], f"$PWD/{PROJECT}", inputs, runs, backend,
                         info.get("mounts") or ())
    return ["## With Docker only (no kdkit on this host)", "",
            "The same container as `kdkit run` starts (image id "
            f"{image['id'][:19]}); the lines before it compute what it depends on here. "
            f"{RUNS_OWNER}. `{decompress[0]}` must be installed (`apt-get install "
            f"{decompress[0]}`).", "",
            *_block([f"{shlex.join(decompress)} {q(image['file'])} | docker load",
                     *shell_prelude(f"{PROJECT}/{runs}", backend),
                     portable_line(spec, backend)]),
            "Its exit code is the verdict. Keep the evidence (`python3 kdkit.pyz` copies and "
            f"verifies): {_SAME}", "",
            *_block(_copy_out(f"python3 {q(ZIPAPP)}", runs))]


def _machine_local(info: BundleInfo) -> list[str]:
    """The section without Docker for a lock whose pins only the locking machine had: what fails,
    and why."""
    pins, lock = ", ".join(info["machine_local"]), f"{PROJECT}/{info['lock']}"
    use = ("Use the image (above)" if info["image"]
           else "Bundle again with the image (without --no-image)")
    return ["## Without Docker: not possible with this lock", "",
            f"`{lock}` pins {pins} from a folder on the machine that locked it (its header's "
            "`machine-local`); no index serves those files, so a venv made from the lock fails "
            f"here with `No matching distribution`. {use}, bundle again with `--wheelhouse DIR` "
            "(the lock's files, from `kdkit wheelhouse`) to carry them, or lock where the PyTorch "
            f"index is reachable (`kdkit lock --backend {info['backend']}` without "
            "--torch-find-links).", "", *_kdkit_for_close(info)]


def _without_docker(info: BundleInfo) -> list[str]:
    carried = info.get("local_wheels")
    if info.get("machine_local") and not carried:
        return _machine_local(info)
    backend = info["backend"]
    pyz, runs = f"{q(LOCK_ENV + '/bin/python')} {q(ZIPAPP)}", info["runs"]
    python, project, lock = q(f"python{info['python']}"), q(PROJECT), q(f"{PROJECT}/{info['lock']}")
    links = f" --find-links {q(carried['folder'])}" if carried else ""
    local = (f" ({', '.join(info['machine_local'])} from `{carried['folder']}/`, which this bundle "
             "carries: no index has it)") if carried else ""
    return [f"## Without Docker (python{info['python']} and the lock's index reachable)", "",
            f"A venv made from the lock{_pylock_note(info)}{local}, hash-checked, then kdkit's "
            "in-container part from `kdkit.pyz`:", "",
            *_block([f"{python} -m venv {q(LOCK_ENV)} && {q(LOCK_ENV + '/bin/python')} -m pip "
                     f"install --quiet --require-hashes --no-deps{links} -r {lock}",
                     f"{pyz} diagnose --expect {q(backend)} && {pyz} verify-env --lock {lock} "
                     f"&& {pyz} pilot {project}"]),
            "The last command's exit code is the verdict. Before the long run: "
            f"`{pyz} sweep {project} --batch-sizes 1,2,4,8` (the batch size from measurements) and "
            f"`{pyz} resume-test {project} --out ../resume-test` (training: resume in a new "
            f"process). Keep the evidence: {_SAME}",
            "", *_block(_copy_out(pyz, runs)), *_kdkit_for_close(info)]


def _pylock_note(info: BundleInfo) -> str:
    """Where the bundle carries the PEP 751 lock too: why this path installs from the requirements
    lock."""
    if not info.get("pylock"):
        return ""
    return (f" (the requirements lock: the PEP 751 lock beside it, `{PROJECT}/{info['pylock']}`, "
            "pins the same packages, but only pip 26.1 or newer installs from it, newer than a "
            "fresh venv's)")


def _kdkit_for_close(info: BundleInfo) -> list[str]:
    """Without an image there is no section that installs kdkit; `kdkit close` still wants it."""
    wheels = info.get("kdkit_wheels")
    if info["image"] or not wheels:
        return []
    return [f"kdkit itself installs offline from `{wheels['folder']}/` ({_pythons(wheels)}): "
            f"`{_install_kdkit(wheels)}`; after the "
            "campaign, with the order `kdkit plan --save order.json` wrote copied beside this "
            f"folder: `{CLOSE.format(kdkit=_kdkit(KDKIT_ENV), project=q(PROJECT))}`.", ""]


def run_md(info: BundleInfo) -> str:
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
    """``## Title`` -> ``## N. Title``, in order: the sections a bundle has, numbered as they
    come."""
    count = 0
    out = []
    for line in lines:
        if line.startswith("## "):
            count += 1
            line = f"## {count}. {line[3:]}"
        out.append(line)
    return out
