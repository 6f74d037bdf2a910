"""verify-env's fast paths (bench/bench_verify_env.py holds their speed; this file their truth).

Each fast path is a shortcut beside a full rule, and must answer as the full rule does wherever it answers
at all: the lock line reader against the regular-expression one, on real locks; the PEP 440 pre-check
against kdkit.core.versions; the command-line reader against argparse; the name normalizer against
PEP 503's own expression; torch's version.py read as text against the real file; the other
interpreter's answer through its encoding; the spawner against programs that flood, hang or are missing.
And the fast paths must stay fast: the in-container check and `kdkit verify-env` load none of the modules
whose import costs more than the check itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kdkit.core import envinfo
from kdkit.core.errors import BadInput, Unavailable
from kdkit.core.lockfile import _full_pin, _plain_pin, _plain_version, logical_lines, normalize_name, parse_lock
from kdkit.core.parsers import quick_parse
from kdkit.core.spawn import capture
from kdkit.core.versions import InvalidVersion, Version
from kdkit.probe.env.verify import OPTIONS, build_parser, read_torch_build
from tests.tinywheels import build_wheel, lock_line, make_venv, pip_install

REPO = Path(__file__).resolve().parents[3]
LOCKS = Path(__file__).resolve().parents[2] / "data" / "locks"
REAL_LOCKS = [LOCKS / "warehouse-main.txt", LOCKS / "uv-universal.txt",
              REPO / "requirements" / "dev.txt",
              REPO / "requirements" / "runtime.txt"]
HEAVY = ("re", "typing", "json", "argparse", "pathlib", "ast", "subprocess",
         "dataclasses", "enum", "click")


def pin_lines(path: Path) -> list[tuple[int, str]]:
    return [(number, line) for number, line in logical_lines(path.read_text(encoding="utf-8"))
            if line.strip() and not line.lstrip().startswith(("#", "-"))]


# ---------------------------------------------------------------- the lock line reader


@pytest.mark.parametrize("path", REAL_LOCKS, ids=lambda p: p.name)
def test_every_line_of_a_real_lock_reads_the_same_fast_and_in_full(path: Path) -> None:
    lines = pin_lines(path)
    assert len(lines) > 10
    fast = 0
    for number, line in lines:
        full = _full_pin(f"{path}:{number}", number, line.strip())
        plain = _plain_pin(number, line.strip())
        if plain is not None:
            assert plain == full, line
            fast += 1
    # pip-compile's output, no marker: every line takes the fast path
    if "universal" not in path.name:
        assert fast == len(lines)
    else:  # uv's universal lock: the lines under a marker are the full reader's
        assert fast == sum(";" not in line for _n, line in lines) and fast < len(lines)


@pytest.mark.parametrize("line", [
    "torch==2.13.0+cpu --hash=sha256:" + "a" * 64,
    "torch==2.13.0+cpu --hash sha256:" + "A" * 64,
    "Foo_Bar.baz==1.0.post2.dev3 --hash=sha256:" + "0" * 64 + " --hash=sha512:" + "f" * 128,
    "x==1.0rc1 --hash=sha384:" + "1" * 96,
    "x==1.0 --hash=sha256:00",  # a short digest: refused, as uv refuses it
    "x[-]==1.0 --hash=sha256:" + "0" * 64,  # an extra that is no name
    "x==1.0\u00a0--hash=sha256:" + "0" * 64,  # a no-break space: pip and uv take no such separator
    "x==1.0 --hash=md5:" + "0" * 32,  # an algorithm pip does not take
    "x == 1.0 --hash=sha256:" + "0" * 64,
    "x[extra]==1.0 --hash=sha256:" + "0" * 64,
    "x==1.0;python_version<'3.12' --hash=sha256:" + "0" * 64,
    "x==1.0 ; python_version < '3.12' --hash=sha256:" + "0" * 64,
    "x===1.0 --hash=sha256:" + "0" * 64,
    "x==1.0 --hash=sha256:" + "0" * 64 + " --no-deps",
    "x @ https://example.org/x-1.0.tar.gz --hash=sha256:" + "0" * 64,
    "x==1.0--hash=sha256:" + "0" * 64,
    "-x==1.0 --hash=sha256:" + "0" * 64,
    "x==1.0",
    "x>=1.0 --hash=sha256:" + "0" * 64,
    "x==v1.0 --hash=sha256:" + "0" * 64,
    "x==1.0b1rc2 --hash=sha256:" + "0" * 64,
    "x==1.0+Local --hash=sha256:" + "0" * 64,
    "x==1!2.0 --hash=sha256:" + "0" * 64,
    "x==1..0 --hash=sha256:" + "0" * 64,
    "x==1.0+ --hash=sha256:" + "0" * 64,
])
def test_the_fast_reader_answers_as_the_full_rules_or_not_at_all(line: str) -> None:
    try:
        full: object = _full_pin("lock:1", 1, line)
    except BadInput as exc:
        full = exc
    plain = _plain_pin(1, line)
    if plain is not None:
        assert plain == full, line
    elif "a" * 64 in line or "A" * 64 in line:
        pytest.fail(f"the fast reader should take {line!r}")


@pytest.mark.parametrize("text",
                         ["1", "2.13.0", "2.13.0+cu130", "2.13.0+rocm7.2", "1.0a1", "1.0b2",
                          "1.0rc10",
                          "1.0.post1", "1.0.dev0", "1.0rc1.post2.dev3", "2026.6", "0.0.0+a.b.c",
                          "01.2",
                          "1.0b1rc2", "1.0.", ".1", "1..0", "1.0+", "1.0+a..b", "1.0.post", "1.0-1",
                          "v1.0",
                          "1.0a", "1!1.0", "1.0RC1", "1.0_1", "1.0+a-b", "", "+cpu",
                          "1.0.dev1.post1",
                          "1.0.post1a1"])
def test_the_plain_version_check_is_a_subset_of_pep_440(text: str) -> None:
    try:
        Version.parse(text)
        valid = True
    except InvalidVersion:
        valid = False
    if _plain_version(text):
        assert valid, text


def test_the_plain_version_check_takes_what_the_tools_write() -> None:
    for text in ("2.13.0", "2.13.0+cu130", "1.0rc1", "1.0.post2", "25.1.dev0", "2026.6", "0.1.2"):
        assert _plain_version(text), text


@pytest.mark.parametrize("name",
                         ["six", "Six", "typing_extensions", "zope.interface", "A__b..C", "a-_-b",
                          "Foo.-_Bar", "x"])
def test_name_normalization_is_pep_503s(name: str) -> None:
    assert normalize_name(name) == re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize("argv", [
    ["--lock", "a.txt"], ["--lock=a.txt"],
    ["--lock", "a.txt", "--python", "/p/python", "--strict", "--json"],
    ["--json", "--lock", "a.txt", "--lock", "b.txt"], ["--lock=-odd"],
    ["--strict", "--strict", "--lock", "x"],
    ["--lock"], ["--lock", "-x"], [], ["--python", "p"], ["--lock", "a", "extra"],
    ["--strict=yes", "--lock", "a"],
    ["--lo", "a"], ["-h"], ["--help"], ["--lock", "a", "--"], ["--lock", "-"],
])
def test_the_quick_reader_answers_as_argparse_or_leaves_it_to_argparse(argv: list[str]) -> None:
    quick = quick_parse(argv, OPTIONS)
    try:
        expected: dict[str, object] | None = vars(build_parser().parse_args(argv))
    except SystemExit:
        expected = None
    if quick is not None:
        assert vars(quick) == expected
    common = argv[:1] in (["--lock"],
                          ["--json"], ["--lock=a.txt"]) and expected is not None and "-" not in argv
    assert quick is not None or not common, argv


# ---------------------------------------------------------------- torch's version.py


def test_torch_version_py_is_read_as_the_real_file_says() -> None:
    torch = pytest.importorskip("torch")
    location = str(Path(torch.__file__).parent.parent)
    assert read_torch_build(location) == {"__version__": torch.__version__,
                                          "cuda": torch.version.cuda,
                                           "hip": torch.version.hip,
                                          "rocm": getattr(torch.version, "rocm", None)}


@pytest.mark.parametrize(("text", "expected"), [
    ("__version__ = '2.13.0+cu130'\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n",
     {"__version__": "2.13.0+cu130", "cuda": "13.0", "hip": None, "rocm": None}),
    ('__version__ = "2.9.1+rocm6.4"  # a comment\ncuda = None\nhip = "6.4.43484-123"\n',
     {"__version__": "2.9.1+rocm6.4", "cuda": None, "hip": "6.4.43484-123", "rocm": None}),
    ("cuda = '13.0'\nhip = None\n", None),  # no __version__: not torch's file
    ("__version__ = '2.13.0'\ncuda = get_cuda()\n", None),  # an expression is never guessed
    ("__version__ = '2.13.0'\ncuda = 'a\\'b'\n", None),
    ("__version__ = '2.13.0'\nif True:\n    cuda = '12.8'\n",
     {"__version__": "2.13.0", "cuda": None, "hip": None, "rocm": None}),
])
def test_torch_version_py_read_as_text(tmp_path: Path, text: str,
                                       expected: dict[str, str | None] | None) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text(text, encoding="utf-8")
    assert read_torch_build(str(tmp_path)) == expected


# ---------------------------------------------------------------- the other interpreter's answer


def test_the_interpreters_answer_round_trips_whatever_its_paths_hold() -> None:
    info: dict[str, object] = {"executable": "/opt/py thon/bin/python",
                               "prefix": "/opt/\u00e9t\u00e9",
                               "sys_path": ["/a\tb", "/new\nline",
                                            "C:\\back\\slash", "/\udc80surrogate", "/\u4e2d"],
                               "markers": {
                                   **envinfo.marker_environment(), "platform_version": "#1 SMP\tx"}}
    text = envinfo.encode(info)
    assert text.isascii() and len(text.splitlines()) == 1 + 2 + 5 + len(
        envinfo.marker_environment())
    assert envinfo.decode(text) == info
    short = "".join(line + "\n" for line in text.splitlines()
                    if not line.startswith("marker:sys_platform"))
    assert envinfo.decode(short) is None  # a marker variable missing would compare as ""
    assert envinfo.decode(envinfo.encode(envinfo.describe())) == envinfo.describe()


@pytest.mark.parametrize("text",
                         ["", "hello\n", '{"sys_path": []}', "kdkit-envinfo 1\nno tab here\n",
                          "kdkit-envinfo 2\nprefix\t/x\n", "kdkit-envinfo 1\nprefix\t\\N{bogus}\n"])
def test_anything_else_is_not_an_answer(text: str) -> None:
    assert envinfo.decode(text) is None


# ---------------------------------------------------------------- the spawner


def test_capture_reads_both_streams_whatever_their_size_and_keeps_a_bounded_part() -> None:
    """Both pipes read as the program writes (a full pipe would block it); stdout kept up to KEEP_STDOUT, stderr's
    last KEEP_STDERR bytes (its last line is what a message shows): a flood never fills memory."""
    from kdkit.core.spawn import KEEP_STDERR, KEEP_STDOUT

    script = (
        "import sys; sys.stdout.write('o' * 300000); sys.stderr.write('e' * 300000 + 'last'); "
        "sys.exit(3)")
    code, out, err = capture([sys.executable, "-c", script], timeout=60)
    assert (code, len(out), set(out), len(err), err[-4:]) == (3, 300000, {"o"}, KEEP_STDERR, "last")
    flood = "import sys\nfor _ in range(200): sys.stdout.write('x' * 100000)\nprint('end')"
    code, out, _err = capture([sys.executable, "-c", flood], timeout=60)
    assert (code, len(out)) == (0, KEEP_STDOUT)


def test_capture_does_not_wait_for_what_the_program_left_behind(tmp_path: Path) -> None:
    """A wrapper that leaves a child holding its pipes: its own exit ends the wait, and the child is killed."""
    marker = tmp_path / "survived"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(f"#!/bin/sh\n(sleep 3; touch {marker}) &\necho answer\n", encoding="utf-8")
    wrapper.chmod(0o755)
    import time

    code, out, _err = capture([str(wrapper)], timeout=30)
    assert (code, out) == (0, "answer\n")
    # the wait ended with the wrapper, not with the child's 3 s (load only slows both)
    assert not marker.exists()
    time.sleep(3.5)
    assert not marker.exists()  # and the child was killed


def test_capture_kills_a_program_that_does_not_answer() -> None:
    with pytest.raises(Unavailable, match=r": no answer after 1 s$"):
        capture([sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)


def test_capture_of_a_missing_program_is_the_callers_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        capture([str(tmp_path / "nope"), "-c", "pass"], timeout=5)
    signalled = capture(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        timeout=(30))
    assert signalled[0] == -9


# ---------------------------------------------------------------- what the fast commands load


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A venv holding two tiny distributions (torch among them, with its version.py) and their lock."""
    root = tmp_path_factory.mktemp("fast")
    wheels = root / "wheels"
    six = build_wheel(wheels, "six", "1.17.0")
    torch = build_wheel(wheels, "torch", "2.13.0+cpu", {
        "torch/__init__.py": "",
        "torch/version.py": "__version__ = '2.13.0+cpu'\ncuda = None\nhip = None\n"})
    python = make_venv(root / "venv", with_pip=False)
    pip_install(python, wheels, ["six==1.17.0", "torch==2.13.0+cpu"])
    lock = root / "cpu.txt"
    lock.write_text("--index-url https://download.pytorch.org/whl/cpu\n\n"
                    + lock_line("six", "1.17.0", six)
                    + lock_line("torch", "2.13.0+cpu", torch), encoding="utf-8")
    return python, lock


LOADED = textwrap.dedent("""\
    import sys
    heavy = {heavy!r}
    sys.argv = {argv!r}
    try:
        from {module} import main
        code = main()
    except SystemExit as exc:
        code = exc.code
    print(code, sorted(name for name in heavy if name in sys.modules))
""")


@pytest.mark.parametrize("where", ["container", "host"])
def test_verify_env_loads_nothing_heavy(plain_venv: tuple[Path, Path], where: str) -> None:
    """In the image: the venv's own interpreter runs the check (kdkit's probe on its path); on the host,
    `kdkit verify-env --python VENV` through kdkit's console entry, which skips click for it."""
    python, lock = plain_venv
    if where == "container":
        argv, module, interpreter = ["kdkit", "verify-env", "--lock",
                                     str(lock)], "kdkit.probe.entry", str(python)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
    else:
        argv = ["kdkit", "verify-env", "--lock", str(lock), "--python", str(python)]
        module, interpreter, env = "kdkit.__main__", sys.executable, None
    code = LOADED.format(heavy=HEAVY, argv=argv, module=module)
    done = subprocess.run([interpreter, "-c", code], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert "MATCH: 0 error(s), 0 warning(s)" in done.stdout


def test_the_fast_host_path_says_what_the_probe_says(
    plain_venv: tuple[Path, Path], tmp_path: Path) -> None:
    python, lock = plain_venv
    bad = tmp_path / "bad.txt"
    bad.write_text("six>=1\n", encoding="utf-8")
    for args in (["--lock", str(lock), "--python", str(python), "--json"], ["--lock", str(bad)],
                 ["--lock"],
                 ["--lock", str(lock), "--python", str(tmp_path)]):
        host = subprocess.run([sys.executable, "-m", "kdkit", "verify-env", *args],
                              capture_output=True, text=True,
                              timeout=120, check=False)
        probe = subprocess.run([sys.executable, "-m", "kdkit.probe", "verify-env", *args],
                               capture_output=True,
                               text=True, timeout=120, check=False)
        assert (host.returncode,
                host.stdout, host.stderr) == (probe.returncode, probe.stdout, probe.stderr), args
    assert parse_lock(lock).pins["torch"].version == "2.13.0+cpu"


def test_the_zipapp_carries_byte_code_and_still_sends_envinfos_source(plain_venv: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    """kdkit.pyz holds each module's byte code beside its source (zipimport cannot cache what it compiles); the
    envinfo module, loaded from its .pyc, is still sent to the other interpreter as source."""
    import zipfile

    from kdkit.transfer.zipapp import build_zipapp

    python, lock = plain_venv
    build_zipapp(tmp_path / "kdkit.pyz")
    names = set(zipfile.ZipFile(tmp_path / "kdkit.pyz").namelist())
    assert {
        "kdkit/core/envinfo.py", "kdkit/core/envinfo.pyc", "kdkit/probe/env/verify.pyc"} <= names
    done = subprocess.run([sys.executable, "-I", str(tmp_path / "kdkit.pyz"), "verify-env",
                           "--lock", str(lock),
                           "--python", str(python)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and "MATCH: 0 error(s), 0 warning(s)" in done.stdout, done.stdout + done.stderr
