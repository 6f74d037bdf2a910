"""kdkit.core.lockfile and the vendored PEP 440 / PEP 508 pieces it stands on."""

from __future__ import annotations

from pathlib import Path

import pytest

from kdkit.core.errors import BadInput
from kdkit.core.lockfile import normalize_name, parse_lock
from kdkit.core.markers import InvalidMarker, evaluate, parse_marker
from kdkit.core.versions import Version, compare

H1 = "sha256:" + "a" * 64
H2 = "sha256:" + "b" * 64

GOOD = f"""\
# Hashed lock written by `kdkit lock`; do not edit.
# kdkit: kdkit-version = 0.1.0
# kdkit: backend = cuda
# kdkit: input:requirements/base.in = {"c" * 64}

--index-url https://download.pytorch.org/whl/cu128
--extra-index-url https://pypi.org/simple

Jinja2==3.1.6 \\
    --hash={H1} \\
    --hash={H2}
    # via torch
torch==2.8.0+cu128 ; python_version >= "3.9" \\
    --hash={H1}
    # via -r requirements/base.in
zope.interface==7.0 --hash={H2}  # a trailing comment
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cuda.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_parses_pins_header_and_options(tmp_path: Path) -> None:
    lock = parse_lock(write(tmp_path, GOOD))
    assert sorted(lock.pins) == ["jinja2", "torch", "zope-interface"]
    torch = lock.pins["torch"]
    assert (torch.name, torch.version,
            torch.public_version, torch.local) == ("torch", "2.8.0+cu128", "2.8.0", "cu128")
    assert torch.marker == 'python_version >= "3.9"'
    assert torch.hashes == [H1] and torch.line == 13
    assert lock.pins["jinja2"].hashes == [H1, H2] and lock.pins["jinja2"].local is None
    assert lock.header == {"kdkit-version": "0.1.0", "backend": "cuda",
                           "input:requirements/base.in": "c" * 64}
    assert lock.inputs() == {"requirements/base.in": "c" * 64}
    assert lock.options == [("--index-url", "https://download.pytorch.org/whl/cu128"),
                            ("--extra-index-url", "https://pypi.org/simple")]


def test_same_version_twice_merges_hashes(tmp_path: Path) -> None:
    lock = parse_lock(write(tmp_path, f"six==1.16.0 --hash={H1}\nSix==1.16 --hash={H2}\n"))
    assert lock.pins["six"].hashes == [H1, H2]


def test_same_version_under_two_markers_applies_under_either(tmp_path: Path) -> None:
    """The line order does not matter: the pin applies when either marker holds."""
    win, linux = 'sys_platform == "win32"', 'sys_platform == "linux"'
    for first, second in ((win, linux), (linux, win)):
        lock = parse_lock(
            write(tmp_path,
                  f"six==1.17.0 ; {first} --hash={H1}\nsix==1.17.0 ; {second} --hash={H2}\n"))
        assert lock.pins["six"].marker == f"({first}) or ({second})" and lock.pins["six"].hashes == [H1, H2]
        assert lock.pin_for("six", ENV) == lock.pins["six"]
        assert lock.pin_for("six", {**ENV, "sys_platform": "darwin"}) is None
    unmarked = parse_lock(
        write(tmp_path, f"six==1.17.0 ; {win} --hash={H1}\nsix==1.17.0 --hash={H2}\n"))
    assert unmarked.pins["six"].marker is None


def test_universal_lock_one_version_per_environment(tmp_path: Path) -> None:
    """What `uv pip compile --universal` writes: one name, two versions, disjoint markers."""
    text = (f"numpy==1.26.4 ; python_version < '3.11' --hash={H1}\n"
            f"numpy==2.2.0 ; python_version >= '3.11' --hash={H2}\n")
    lock = parse_lock(write(tmp_path, text))
    assert [p.version
            for p in lock.every_pin()] == ["1.26.4",
                                           "2.2.0"] and lock.pins["numpy"].version == "1.26.4"
    assert lock.pin_for("numpy", ENV).version == "2.2.0"  # type: ignore[union-attr]
    assert lock.pin_for("numpy",
                        {**ENV,
                         "python_version": "3.10"}).version == "1.26.4"  # type: ignore[union-attr]


def test_overlapping_markers_refused_where_both_hold(tmp_path: Path) -> None:
    path = write(tmp_path,
                 f"six==1.16.0 ; os_name == 'posix' --hash={H1}\nsix==1.17.0 ; sys_platform == "
                 f"'linux' --hash={H2}\n")
    lock = parse_lock(path)
    assert lock.pin_for("six", {**ENV, "os_name": "nt", "sys_platform": "win32"}) is None
    with pytest.raises(BadInput) as caught:
        lock.pin_for("six", ENV)
    assert str(
        caught.value) == (f"{path}:2: six is pinned to 1.16.0 (line 1) and 1.17.0 and both markers "
                                 "hold for this interpreter; make the markers disjoint (regenerate "
                                 "with `kdkit lock`)")


def test_bom_and_require_hashes_accepted(tmp_path: Path) -> None:
    path = tmp_path / "cuda.txt"
    path.write_bytes(f"\ufeff--require-hashes\nsix==1.16.0 --hash={H1}\n".encode())
    lock = parse_lock(path)
    assert lock.options == [("--require-hashes", "")] and list(lock.pins) == ["six"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("six==1.16.0\n", "{p}:1: 'six==1.16.0' has no --hash; kdkit locks are always hashed "
                          "(regenerate with `kdkit lock`)"),
        (f"\n\nsix>=1.0 --hash={H1}\n", "{p}:3: cannot parse 'six>=1.0'; pin it as name==version "
                                         "(regenerate with `kdkit lock`)"),
        (f"!!! --hash={H1}\n",
         "{p}:1: cannot parse '!!!'; expected name==version --hash=sha256:... "
          "(regenerate with `kdkit lock`)"),
        ("-e ./src\n",
         "{p}:1: editable requirement '-e ./src' refused; kdkit locks install only hashed, "
         "pinned releases (remove -e and pin the release, then `kdkit lock`)"),
        (f"six @ https://example.org/six-1.16.0-py3-none-any.whl --hash={H1}\n",
         "{p}:1: URL, path or VCS requirement 'six @ "
         "https://example.org/six-1.16.0-py3-none-any.whl' refused; kdkit locks name releases from "
         "an index (pin the release, then `kdkit lock`)"),
        (f"git+https://github.com/x/y.git#egg=y --hash={H1}\n",
         "{p}:1: URL, path or VCS requirement 'git+https://github.com/x/y.git#egg=y' refused; "
         "kdkit locks name releases from an index (pin the release, then `kdkit lock`)"),
        (f"six==1.16.0 --hash={H1}\nsix==1.17.0 \\\n  --hash={H2}\n",
         "{p}:2: six pinned twice with different versions (1.16.0 at line 1, 1.17.0 here); keep "
         "one, or put each under a marker (regenerate with `kdkit lock`)"),
        ("-r other.txt\n", "{p}:1: -r includes another file; a lock must be self-contained "
                           "(regenerate it with `kdkit lock`)"),
        (f"six==1.16.0 ; python_version <<< '3' --hash={H1}\n",
         "{p}:1: marker \"python_version <<< '3'\": "
          "expected a variable or a quoted string, found '<'"),
        ("six==1.16.0 --hash=md5:abc\n",
         "{p}:1: bad hash 'md5:abc'; expected sha256:<64 hex digits> (or sha384, "
          "sha512)"),
        ("six==1.16.0 --hash=sha256:abc\n",
         "{p}:1: bad hash 'sha256:abc'; expected sha256:<64 hex digits> (or "
          "sha384, sha512)"),
        (f"six==one --hash={H1}\n", "{p}:1: 'one' is not a PEP 440 version"),
    ],
    ids=["no-hash", "not-pinned", "unparsable", "editable", "url", "vcs", "twice", "include",
         "marker",
         "bad-hash", "short-hash", "bad-version"],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(BadInput) as caught:
        parse_lock(path)
    assert str(caught.value) == message.format(p=path)
    assert "\n" not in str(caught.value)


def test_missing_lock(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"cuda.txt: lock not found; create it with `kdkit lock`$"):
        parse_lock(tmp_path / "cuda.txt")


def test_normalize_name() -> None:
    assert normalize_name("Zope.Interface") == normalize_name("zope_interface") == "zope-interface"


@pytest.mark.parametrize(
    ("left", "op", "right", "expected"),
    [
        ("1.0", "==", "1.0.0", True),
        ("2.8.0+cu128", "==", "2.8.0", True),  # PEP 440: a spec without a label matches any label
        ("2.8.0+cpu", "==", "2.8.0+cu128", False),
        ("3.11", ">=", "3.9", True),
        ("3.9", "<", "3.10", True),
        ("3.11.7", "==", "3.11.*", True),
        ("3.12.0", "==", "3.11.*", False),
        ("3.11.7", "~=", "3.11.0", True),
        # PEP 440's exclusive ordered comparison: <V allows no pre-release of V, >V no post-release of V.
        ("1.0rc1", "<", "1.0", False),
        ("1.0rc1", "<=", "1.0", True),
        ("1.0.post1", ">", "1.0", False),
        ("1.0.post1", ">=", "1.0", True),
        ("1.0.dev1", "<", "1.0a1", True),
    ],
)
def test_version_compare(left: str, op: str, right: str, expected: bool) -> None:
    assert compare(left, op, right) is expected


def test_version_keeps_local_label_in_equality() -> None:
    assert Version.parse("2.8.0+cu128") != Version.parse("2.8.0")
    assert Version.parse("2.8.0+CU128") == Version.parse("2.8.0+cu128")
    assert Version.parse("2.8.0+cu128").public == "2.8.0"


ENV = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
       "os_name": "posix",
       "platform_machine": "x86_64", "platform_system": "Linux",
       "implementation_name": "cpython", "extra": ""}


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('python_version >= "3.9"', True),
        ('python_version < "3.10"', False),
        ("sys_platform == 'win32' or (platform_machine == 'x86_64' and os_name == 'posix')", True),
        ('"linux" in sys_platform and platform_system != "Darwin"', True),
        ('python_full_version ~= "3.11.0"', True),
        ('extra == "Dev_Tools"', False),
    ],
)
def test_markers(marker: str, expected: bool) -> None:
    assert evaluate(marker, ENV) is expected


def test_bad_marker_variable() -> None:
    with pytest.raises(InvalidMarker, match="unknown marker variable 'python_vers'"):
        parse_marker('python_vers > "3"')
