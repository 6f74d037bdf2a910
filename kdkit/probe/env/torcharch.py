"""``torch-arch``: the GPU architectures the installed torch was compiled for, without a GPU.

Standard library only; torch is imported in a subprocess of the inspected interpreter, never
here. Two readers, in this order:

1. ``python -I -c SCRIPT`` imports torch (bounded by a timeout) and calls
   ``torch._C._cuda_getArchFlags()``, the string ``torch.cuda.get_arch_list()`` splits. It is
   called directly because older releases gate ``get_arch_list()`` on a GPU being present (an
   empty list without one), while the compiled string needs no GPU. On ROCm builds the same
   function holds the gfx targets. A CPU build has no such string (None, or no function).
2. When torch cannot be imported (a missing CUDA library, a crash, the timeout) or does not say,
   the header ``torch/include/ATen/cuda/CUDAConfig.h`` of the installed distribution is read as a
   file (found on the interpreter's ``sys.path`` without importing torch): its
   ``NVCC_FLAGS_EXTRA`` holds the nvcc ``-gencode`` pairs, turned into torch's own tokens
   (``code=sm_90`` -> ``sm_90``; ``code=compute_90``, PTX, -> ``compute_90``).

Anything else is "unknown" with the reason; a list is never guessed. ``kdkit build`` runs this
once in the image and records the result as the labels ``dev.kdkit.torch.arch_list`` and
``dev.kdkit.torch.arch_source``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kdkit.core.errors import BadInput, KdkitError
from kdkit.core.parsers import add_json, command_parser
from kdkit.core.report import print_result

if TYPE_CHECKING:
    from typing import TypedDict

    class Known(TypedDict, total=False):
        """What is known of a torch besides its architectures (report's keyword arguments)."""

        torch: str | None
        cuda: str | None
        hip: str | None
        python: str
        import_error: str | None

    class ArchAnswer(TypedDict):
        """The one shape of an answer (report): ``arch_list`` None when it is not known."""

        arch_list: list[str] | None
        source: str
        torch: str | None
        cuda: str | None
        hip: str | None
        python: str
        reason: str | None
        import_error: str | None

SOURCE_FLAGS = "torch._C._cuda_getArchFlags"
SOURCE_HEADER = "torch/include/ATen/cuda/CUDAConfig.h"
SOURCE_CPU = "cpu build"
UNKNOWN = "unknown"
IMPORT_TIMEOUT_S = 180.0  # a CUDA torch on a cold, slow disk; a CPU torch imports in seconds
MARKER = "KDKIT-TORCH-ARCH "

# What torch itself may print: sm_90, sm_90a, sm_100f, compute_120, gfx942, gfx90a:xnack-.
# An architecture name as torch prints it: a cubin (sm_90, sm_90a), PTX (compute_120) or a ROCm
# target with its features (gfx942, gfx90a:sramecc+:xnack-). Anything else in a list is not
# believed.
TORCH_TOKEN = re.compile(r"^(?:(?:sm|compute)_\d{2,4}[a-z]?|gfx[0-9a-f]{3,4}(?::[a-z]+[+-])*)$")
# What a -gencode code= may name: a cubin (sm_XY) or PTX (compute_XY), with an arch suffix.
CODE_TOKEN = re.compile(r"^(?:sm|compute)_\d{2,4}[a-z]?$")
NVCC_FLAGS = re.compile(
    r'^[ \t]*#[ \t]*define[ \t]+NVCC_FLAGS_EXTRA[ \t]+"(?P<flags>[^"\n]*)"[ \t]*$', re.MULTILINE)
ROCM_ENABLED = re.compile(r"^[ \t]*#[ \t]*define[ \t]+AT_ROCM_ENABLED\(\)[ \t]+1\b", re.MULTILINE)
GENCODE = re.compile(r"arch=(?P<arch>[^,;\s]*),code=(?P<code>\[[^\]]*\]|[^;\s]*)")

DESCRIPTION = "Show the GPU architectures the installed torch was compiled for; no GPU needed."
EPILOG = """\
Reads torch._C._cuda_getArchFlags() (what torch.cuda.get_arch_list() splits) by importing torch
in a subprocess of the interpreter; when the import fails, reads the -gencode flags of the
installed torch/include/ATen/cuda/CUDAConfig.h. Tokens are torch's own: sm_90 (a cubin),
compute_90 (PTX), gfx942 (ROCm). A CPU build has none.

Exit codes: 0 the list is known (empty for a CPU build); 3 it is unknown (torch missing, not
importable and its header unreadable); 2 --python is not an interpreter.

Examples:
  kdkit torch-arch
  kdkit torch-arch --json --python /opt/kdkit/venv/bin/python
"""

# Run under ``python -I -c``: imports torch and prints one marked JSON line. Catches everything,
# so a failed import is a fact and not a traceback.
_SCRIPT = r"""
import json, sys
facts = {}
try:
    import torch
except BaseException as exc:
    facts["error"] = "%s: %s" % (type(exc).__name__, exc)
else:
    version = getattr(torch, "version", None)
    facts["torch"] = str(getattr(torch, "__version__", ""))
    facts["cuda"] = getattr(version, "cuda", None)
    facts["hip"] = getattr(version, "hip", None)
    flags = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    facts["has_flags"] = callable(flags)
    if callable(flags):
        try:
            value = flags()
            facts["flags"] = value if value is None or isinstance(value, str) else repr(value)
        except BaseException as exc:
            facts["flags_error"] = "%s: %s" % (type(exc).__name__, exc)
sys.stdout.write("\nKDKIT-TORCH-ARCH " + json.dumps(facts, default=str) + "\n")
"""


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def report(arch_list: list[str] | None, source: str, *, torch: str | None = None,
           cuda: str | None = None,
           hip: str | None = None, python: str = "", reason: str | None = None,
           import_error: str | None = None) -> ArchAnswer:
    """The one shape of an answer: ``arch_list`` None and ``source`` "unknown" when it is not
    known."""
    return {"arch_list": arch_list, "source": source, "torch": torch, "cuda": cuda, "hip": hip,
            "python": python,
            "reason": reason, "import_error": import_error}


def unknown(reason: str, **facts: Any) -> ArchAnswer:
    return report(None, UNKNOWN, reason=_one_line(reason), **facts)


# ---------------------------------------------------------------- 1. importing torch


def import_facts(python: str, timeout: float = IMPORT_TIMEOUT_S) -> dict[str, Any] | str:
    """What ``python`` says about its torch once imported, or why it could not say (one line)."""
    from kdkit.core import proc  # subprocess only when another interpreter is asked

    try:
        done = proc.run([python, "-I", "-c", _SCRIPT], timeout=timeout)
    # not runnable, or no answer in time (proc.run's message quotes the script)
    except KdkitError as exc:
        if "no answer after" in str(exc):
            return f"importing torch in {python} gave no answer within {timeout:g} s"
        return _one_line(f"cannot run {python}: {str(exc).rsplit(': ', 1)[-1]}")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                facts = json.loads(line[len(MARKER):])
            except json.JSONDecodeError:
                break
            if isinstance(facts, dict):
                return facts
            break
    how = (f"killed by signal {-done.returncode}" if done.returncode < 0
           else f"exit status {done.returncode}")
    said = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return _one_line(f"importing torch in {python} ended without an answer ({how}: {said})")


def from_import(facts: dict[str, Any], python: str) -> ArchAnswer | str:
    """The answer from an imported torch's facts, or why they do not give one (then the header is
    read)."""
    if "error" in facts:
        return _one_line(f"import torch failed: {facts['error']}")
    torch, cuda, hip = _text(facts.get("torch")), _text(facts.get("cuda")), _text(facts.get("hip"))
    known: Known = {"torch": torch, "cuda": cuda, "hip": hip, "python": python}
    flags = facts.get("flags")
    if isinstance(flags, str) and flags.strip():
        tokens = flags.split()
        odd = [t for t in tokens if not TORCH_TOKEN.fullmatch(t)]
        if odd:
            return _one_line(f"{SOURCE_FLAGS}() returned {flags[:80]!r}, with {odd[0][:40]!r} not "
                             "an architecture name")
        return report(list(dict.fromkeys(tokens)), SOURCE_FLAGS, **known)
    if cuda is None and hip is None:
        return report([], SOURCE_CPU, **known)
    build = f"a CUDA {cuda} build" if cuda else f"a ROCm build (HIP {hip})"
    if "flags_error" in facts:
        return _one_line(
                   f"torch {torch} is {build} but {SOURCE_FLAGS}() failed: {facts['flags_error']}")
    if not facts.get("has_flags"):
        return f"torch {torch} is {build} but torch._C has no _cuda_getArchFlags"
    return f"torch {torch} is {build} but {SOURCE_FLAGS}() returned nothing"


# ---------------------------------------------------------------- 2. the installed files


def parse_config_header(text: str) -> list[str]:
    """torch's architecture tokens from the text of CUDAConfig.h; ValueError saying what is
    wrong."""
    if ROCM_ENABLED.search(text):
        raise ValueError(
            "it is a ROCm build's header (AT_ROCM_ENABLED() 1), which holds no gfx targets")
    defines = NVCC_FLAGS.findall(text)
    if not defines:
        raise ValueError("no #define NVCC_FLAGS_EXTRA \"...\" line")
    if len(defines) > 1:
        raise ValueError(f"#define NVCC_FLAGS_EXTRA appears {len(defines)} times")
    flags = defines[0]
    pairs = list(GENCODE.finditer(flags))
    if not pairs:
        raise ValueError(f"NVCC_FLAGS_EXTRA holds no arch=...,code=... pair ({flags[:80]!r})")
    tokens: list[str] = []
    for pair in pairs:
        arch, code = pair["arch"], pair["code"]
        codes = code[1:-1].split(",") if code.startswith("[") else [code]
        if not re.fullmatch(r"compute_\d{2,4}[a-z]?", arch) or not codes or \
                not all(CODE_TOKEN.fullmatch(c) for c in codes):
            raise ValueError(
                f"-gencode entry {pair.group(0)[:80]!r} is not "
                "arch=compute_XY,code=sm_XY|compute_XY")
        tokens += codes
    leftover = [part for part in re.split(r"[;\s]+", GENCODE.sub("", flags))
                if part not in ("", "-gencode", "--generate-code", "--generate-code=")]
    if leftover:
        raise ValueError(
            f"NVCC_FLAGS_EXTRA holds more than -gencode pairs ({';'.join(leftover)[:80]!r})")
    return list(dict.fromkeys(tokens))


def _interpreter_sys_path(python: str | None) -> list[str]:
    from kdkit.probe.env.verify import inspect_interpreter

    return [str(p) for p in inspect_interpreter(python)["sys_path"]]


def from_files(python: str | None, why: str) -> ArchAnswer:
    """The answer from the installed distribution's files (version.py, CUDAConfig.h), torch not
    imported."""
    from kdkit.probe.env.installed import read_installed, read_torch_build

    shown = python or sys.executable
    installed = read_installed(_interpreter_sys_path(python)).get("torch")
    if installed is None:
        return unknown(f"torch is not installed for {shown} (no torch distribution on its "
                       f"sys.path); {why}",
                       python=shown, import_error=why)
    build = read_torch_build(installed.location) or {}
    known: Known = {"torch": build.get("__version__") or installed.version,
                    "cuda": build.get("cuda"),
             "hip": build.get("hip"), "python": shown, "import_error": why}
    if build and not build.get("cuda") and not build.get("hip"):
        return report([], SOURCE_CPU, **known)
    if build.get("hip"):
        return unknown(f"torch {known['torch']} is a ROCm build (HIP {build['hip']}): its gfx "
                       f"targets are read only by importing it, and that failed: {why}", **known)
    header = Path(installed.location) / SOURCE_HEADER
    try:
        if not stat.S_ISREG(os.stat(header).st_mode):  # a FIFO would block the read
            return unknown(f"{why}; and {header} is not a regular file", **known)
        with header.open(encoding="utf-8", errors="replace") as handle:
            text = handle.read(1 << 20)
    except OSError as exc:
        return unknown(f"{why}; and {header} cannot be read ({exc.strerror or exc})", **known)
    try:
        tokens = parse_config_header(text)
    except ValueError as exc:
        return unknown(f"{why}; and {header}: {exc}", **known)
    return report(tokens, SOURCE_HEADER, **known)


# ---------------------------------------------------------------- the reader


def _require_interpreter(python: str) -> None:
    path = Path(python)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise BadInput(
            f"--python {python}: not an executable file; give the path of a Python interpreter")


def read_arch_list(python: str | None = None, *,
                   timeout: float = IMPORT_TIMEOUT_S) -> ArchAnswer:
    """The compiled architecture list of the torch that ``python`` (default: this interpreter)
    imports.

    ``{"arch_list": [...] | None, "source": SOURCE_FLAGS | SOURCE_HEADER | SOURCE_CPU | "unknown",
    "torch", "cuda", "hip", "python", "reason" (when unknown), "import_error" (when the header was
    read)}``. Never raises for what it finds; BadInput only when ``python`` is not an executable
    file.
    """
    interpreter = python or sys.executable
    if python is not None:
        _require_interpreter(python)
    facts = import_facts(interpreter, timeout)
    answer = from_import(facts, interpreter) if isinstance(facts, dict) else facts
    if isinstance(answer, dict):
        return answer
    try:
        return from_files(python, answer)
    # --python names a program that is not a Python interpreter: the user's input is wrong
    except BadInput:
        raise
    except KdkitError as exc:  # the interpreter would not describe its sys.path
        return unknown(f"{answer}; and its installed files cannot be listed ({exc})",
                       python=interpreter,
                       import_error=answer)


def render_text(result: ArchAnswer) -> str:
    build = (f"CUDA {result['cuda']}" if result.get("cuda") else
             f"ROCm, HIP {result['hip']}" if result.get("hip") else "no GPU runtime")
    torch = f"torch {result['torch']} ({build})" if result.get("torch") else "torch"
    lines = [f"Python: {result['python']}"]
    if result["arch_list"] is None:
        lines.append(f"{torch}: architectures unknown: {result['reason']}")
    elif not result["arch_list"]:
        lines.append(f"{torch}: no GPU architectures ({SOURCE_CPU})")
    else:
        lines.append(f"{torch}: {' '.join(result['arch_list'])}")
        lines.append(f"Source: {result['source']}")
    if result.get("import_error") and result["arch_list"] is not None:
        lines.append(f"(torch was not imported: {result['import_error']})")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("torch-arch", DESCRIPTION, EPILOG)
    parser.add_argument("--python", metavar="PATH", default=None,
                        help="interpreter whose torch to read (default: this one); torch is "
                             "imported only in a subprocess of it, under -I")
    parser.add_argument("--timeout", type=float, default=IMPORT_TIMEOUT_S, metavar="S",
                        help=f"seconds the torch import may take before the header is read instead "
                             f"(default {IMPORT_TIMEOUT_S:.0f})")
    add_json(parser, "the answer as one JSON document", dest="as_json")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not (0 < args.timeout < 86400):
        raise BadInput(f"--timeout {args.timeout}: give a number of seconds between 0 and 86400")
    result = read_arch_list(args.python, timeout=args.timeout)
    print_result(args.as_json, result, lambda: render_text(result))
    return 0 if result["arch_list"] is not None else 3
