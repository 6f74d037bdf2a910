"""pypa/packaging's own parametrised test vectors, run against kdkit's PEP 440/508 code with the installed
``packaging`` (a test dependency, requirements/dev.in) as the oracle.

The vectors are data: tests/data/packaging/test_{version,specifiers,markers}.json, the
``pytest.mark.parametrize`` values of the named tests of pypa/packaging's tests/test_*.py, each file naming
the repository, path and commit it was copied from (tests/data/packaging/extract.py copies them again).
Every vector is judged by the oracle, not by the ``expected`` column: that column is packaging's answer
under its pre-release policy (``prereleases=None``), which kdkit does not have (below).

kdkit's API differs from packaging's: :class:`kdkit.core.versions.Version` (``parse``, ``public``, ``base``,
``epoch``, ``release``, ``pre``, ``post``, ``dev``, ``local``), ``compare``/``satisfies``/``specifier_clauses``
for specifiers, ``parse_marker``/``evaluate`` for markers.

Deliberate deviations (each asserted as kdkit's own behaviour where it applies):

* No pre-release policy. kdkit answers "does this installed or locked version meet the clause", never
  "which versions to offer", so it compares as packaging does with ``prereleases=True`` (the way
  packaging evaluates markers, ``_eval_op``); the oracle is called so.
* A version that is not PEP 440 raises ``InvalidVersion`` from ``compare``/``satisfies`` where packaging's
  ``contains`` answers False: the caller says what it means (a pin that is not a version is one line,
  exit 2; a marker gives False as packaging's does, kdkit.core.markers._compare).
* ``===`` (arbitrary equality) compares case-insensitively after stripping the spec, as packaging does; a
  ``===`` clause is not parsed as a version by either.
* Marker parsing: packaging's PEP 345 / setuptools aliases that kdkit does not read, and the other
  differences of :data:`MARKER_PARSE_DEVIATIONS`, each with its reason.
"""

from __future__ import annotations

import json
import operator
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import InvalidMarker as PInvalidMarker
from packaging.markers import Marker, default_environment
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version as PVersion

from kdkit.core.markers import InvalidMarker, current_environment, evaluate, parse_marker
from kdkit.core.versions import InvalidVersion, Version, satisfies, specifier_clauses

DATA = Path(__file__).resolve().parents[1] / "data" / "packaging"


def _vectors(file: str, test: str) -> list[Any]:
    data = json.loads((DATA / file).read_text(encoding="utf-8"))
    return list(data["vectors"][test]["values"])


def test_the_data_names_its_source() -> None:
    for file in ("test_version.json", "test_specifiers.json", "test_markers.json"):
        data = json.loads((DATA / file).read_text(encoding="utf-8"))
        assert data["repository"] == "pypa/packaging" and re.fullmatch(
            r"[0-9a-f]{40}", data["commit"])
        assert data["source"].endswith(data["path"]) and data["vectors"]


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize("text", _vectors("test_version.json", "TestVersion.test_valid_versions"))
def test_valid_version(text: str) -> None:
    assert str(Version.parse(text)) == str(PVersion(text))


@pytest.mark.parametrize("text", _vectors("test_version.json", "TestVersion.test_invalid_versions"))
def test_invalid_version(text: str) -> None:
    with pytest.raises(InvalidVersion):
        Version.parse(text)


@pytest.mark.parametrize(("text", "normalized"),
                         _vectors("test_version.json", "TestVersion.test_normalized_versions"))
def test_normalized_version(text: str, normalized: str) -> None:
    assert str(Version.parse(text)) == str(PVersion(text)) == normalized


_PARTS = ["public", "base_version", "epoch", "release", "local", "pre", "dev", "post"]


@pytest.mark.parametrize("part", _PARTS)
def test_version_parts(part: str) -> None:
    for text, _expected in _vectors("test_version.json", f"TestVersion.test_version_{part}"):
        mine, theirs = Version.parse(text), PVersion(text)
        have = {"public": lambda v: v.public, "base_version": lambda v: str(v.base)}.get(
            part, lambda v: getattr(v, part))(mine)
        assert have == getattr(theirs, part), (text, part)


def test_version_order_over_every_pair() -> None:
    texts = _vectors("test_version.json", "VERSIONS (ascending order)")
    mine, theirs = [Version.parse(t) for t in texts], [PVersion(t) for t in texts]
    for op in (operator.lt, operator.le, operator.eq, operator.ne, operator.ge, operator.gt):
        for i in range(len(texts)):
            for j in range(len(texts)):
                assert op(mine[i], mine[j]) == op(theirs[i],
                                                  theirs[j]), (texts[i], op.__name__, texts[j])


# ---------------------------------------------------------------- specifiers


def _valid_for_packaging(spec: str) -> bool:
    try:
        SpecifierSet(spec)
    except InvalidSpecifier:
        return False
    return True


def _valid_for_kdkit(spec: str) -> bool:
    try:
        specifier_clauses(spec)
    except InvalidVersion:
        return False
    return True


@pytest.mark.parametrize("spec",
                         _vectors("test_specifiers.json", "TestSpecifier.test_specifiers_valid")
                         + _vectors("test_specifiers.json",
                                    "TestSpecifier.test_specifiers_invalid"))
def test_specifier_validity(spec: str) -> None:
    assert _valid_for_kdkit(spec) == _valid_for_packaging(spec)


_CONTAINS = ([(v, s) for v, s,
              _ in _vectors("test_specifiers.json", "TestSpecifier.test_specifiers")]
             + [(v, s) for v, s,
                _ in _vectors("test_specifiers.json", "TestSpecifier.test_arbitrary_equality")]
             + [(v, s) for s, v, _ in _vectors("test_specifiers.json",
                                               "TestSpecifier.test_arbitrary_equality_normalization")]
             + [(v, s) for s, _, v, _ in _vectors("test_specifiers.json",
                                                  "TestSpecifierSet.test_contains_exclusionary_bridges")]
             + [(v, s) for s, v, _ in _vectors("test_specifiers.json",
                                               "TestSpecifierSet.test_contains_post_release_boundary_intersection")]
             + [(v, s) for v, s, _ in _vectors("test_specifiers.json",
                                               "TestSpecifierSet.test_comparison_ignores_local")]
             + [(v, s) for s, v,
                _ in _vectors("test_specifiers.json", "test_boundary_closure_short_release")])


@pytest.mark.parametrize(("version", "spec"), _CONTAINS)
def test_specifier_contains(version: str, spec: str) -> None:
    assert satisfies(version, spec) == SpecifierSet(spec).contains(version, prereleases=True)


@pytest.mark.parametrize(("spec", "version", "_expected"),
                         _vectors("test_specifiers.json", "TestSpecifier.test_invalid_version"))
def test_a_version_that_is_not_one(spec: str, version: str, _expected: bool) -> None:
    theirs = SpecifierSet(spec).contains(version, prereleases=True)
    if spec.startswith("==="):  # a string comparison for both: no version is parsed
        assert satisfies(version, spec) == theirs
        return
    assert not theirs
    # deviation: the caller decides (see the module's docstring)
    with pytest.raises(InvalidVersion):
        satisfies(version, spec)


# ---------------------------------------------------------------- markers

# marker text -> why kdkit reads it differently from packaging
MARKER_PARSE_DEVIATIONS: dict[str, str] = {}


def _parses(marker: str) -> bool:
    try:
        parse_marker(marker)
    except InvalidMarker:
        return False
    return True


def _packaging_parses(marker: str) -> bool:
    try:
        Marker(marker)
    except PInvalidMarker:
        return False
    return True


@pytest.mark.parametrize("group", ["TestMarker.test_parses_valid", "TestMarker.test_parses_invalid",
                                   "TestMarker.test_parses_pep345_valid",
                                   "TestMarker.test_parses_setuptools_legacy_valid"])
def test_marker_parsing(group: str) -> None:
    disagree = [m for m in _vectors("test_markers.json", group)
                if _parses(m) != _packaging_parses(m) and m not in MARKER_PARSE_DEVIATIONS]
    assert not disagree, disagree[:20]


_EVALUATE = [(m, e)
             for group in ("TestMarker.test_evaluates", "TestMarker.test_evaluate_pep345_markers",
                           "TestMarker.test_version_like_equality")
             for m, e, _ in _vectors("test_markers.json", group)]


@pytest.mark.parametrize(("marker", "environment"), _EVALUATE)
def test_marker_evaluation(marker: str, environment: dict[str, str] | None) -> None:
    theirs = Marker(marker).evaluate(environment)
    mine = evaluate(marker,
                    {**current_environment(), **default_environment(), "extra": "",
                     **(environment or {})})
    assert mine == theirs


# ---------------------------------------------------------------- kdkit's own grid, same oracle

_GRID_VERSIONS = ["1.0", "1.0.0", "1.0.dev0", "1.0.dev1", "1.0a1", "1.0a1.dev1", "1.0a1.post1",
                  "1.0rc2", "1.0.post1",
                  "1.0.post1.dev0", "1.0.post2", "1.0+loc", "1.0.post1+loc", "1.0.dev1+x",
                  "1.0a1+l", "0.9", "1.1",
                  "1.1.dev0", "2.0", "1!1.0", "1!2.0", "1!2.5", "1!3.0",
                  "3.14.0rc2", "3.14", "6.8.0-1015-azure"]
_GRID_OPS = ["<", "<=", ">", ">=", "==", "!=", "~=", "==="]
_GRID_SPECS = ["1.0", "1.0a1", "1.0.post1", "1.0.dev1", "1.0a1.dev1", "1.0a1.post1", "1!2.0",
               "3.14", "1.0.0", "0.9",
               "1.0+loc", "1.0.*", "1!2.*", "1", "6.8.0-1015-azure"]


@pytest.mark.parametrize("op", _GRID_OPS)
def test_clause_grid(op: str) -> None:
    """Every operator on every pairing of pre, post, dev, local and epoch versions; clause validity too."""
    for spec in _GRID_SPECS:
        valid = _valid_for_packaging(op + spec)
        assert _valid_for_kdkit(op + spec) == valid, op + spec
        for version in _GRID_VERSIONS if valid else ():
            theirs = SpecifierSet(op + spec).contains(version, prereleases=True)
            try:
                mine = satisfies(version, op + spec)
            except InvalidVersion:  # deviation: see the module's docstring
                mine = False
                assert not _is_version(version)
            assert mine == theirs, (version, op + spec)


def _is_version(text: str) -> bool:
    try:
        PVersion(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("variable",
                         ["python_version", "python_full_version", "implementation_version",
                          "platform_release", "platform_version", "os_name"])
def test_marker_comparison_grid(variable: str) -> None:
    """packaging's _eval_op: a version variable compares as PEP 440 when the right side makes a valid clause
    (False for a value that is not a version), as strings otherwise; other variables as strings."""
    base = {**default_environment(), "extra": ""}
    for value in _GRID_VERSIONS:
        env = {**base, variable: value}
        for op in [o for o in _GRID_OPS if o != "~="] + ["~="]:
            for spec in _GRID_SPECS:
                marker = f"{variable} {op} '{spec}'"
                try:
                    theirs: bool | None = Marker(marker).evaluate(env)
                except Exception:  # packaging's UndefinedComparison: ~= on strings
                    theirs = None
                try:
                    mine: bool | None = evaluate(marker, {**current_environment(), **env})
                except InvalidMarker:
                    mine = None
                assert mine == theirs, (marker, value)
