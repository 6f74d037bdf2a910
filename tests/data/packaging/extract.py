"""Copy pypa/packaging's parametrised test vectors into the JSON files beside this script.

Not a test: run by hand to refresh the data of tests/test_packaging_vectors.py. ``CHECKOUT`` is a clone of
pypa/packaging; its ``src`` and its tests must import (``pip install pretend`` or a stand-in module named
``pretend``), e.g.::

    PYTHONPATH=CHECKOUT/src:CHECKOUT python tests/data/packaging/extract.py CHECKOUT [COMMIT]

(COMMIT: the commit of an export that is not a git work tree.)

Only JSON values are kept (a vector with another object in it is counted under ``skipped``).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

WANT = {
    "tests/test_version.py": [
        "TestVersion.test_valid_versions", "TestVersion.test_invalid_versions",
        "TestVersion.test_normalized_versions",
        "TestVersion.test_version_public", "TestVersion.test_version_base_version",
        "TestVersion.test_version_epoch",
        "TestVersion.test_version_release", "TestVersion.test_version_local",
        "TestVersion.test_version_pre",
        "TestVersion.test_version_dev", "TestVersion.test_version_post"],
    "tests/test_specifiers.py": [
        "TestSpecifier.test_specifiers_valid", "TestSpecifier.test_specifiers_invalid",
        "TestSpecifier.test_specifiers",
        "TestSpecifier.test_invalid_version", "TestSpecifier.test_arbitrary_equality",
        "TestSpecifier.test_arbitrary_equality_normalization",
        "TestSpecifierSet.test_contains_exclusionary_bridges",
        "TestSpecifierSet.test_contains_post_release_boundary_intersection",
        "TestSpecifierSet.test_comparison_ignores_local", "test_boundary_closure_short_release"],
    "tests/test_markers.py": [
        "TestMarker.test_parses_valid", "TestMarker.test_parses_invalid",
        "TestMarker.test_evaluates",
        "TestMarker.test_parses_pep345_valid", "TestMarker.test_evaluate_pep345_markers",
        "TestMarker.test_parses_setuptools_legacy_valid", "TestMarker.test_version_like_equality"],
}


def plain(value: Any) -> Any:
    """A JSON value of one parametrize entry (a ``pytest.param`` unwrapped); TypeError for anything else."""
    if hasattr(value, "values") and hasattr(value, "marks"):
        value = value.values if len(value.values) > 1 else value.values[0]
    if isinstance(value, (list, tuple)):
        return [plain(x) for x in value]
    if isinstance(value, dict):
        return {k: plain(x) for k, x in value.items()}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TypeError(type(value))


def vectors(test: Any) -> dict[str, Any]:
    marks = [mark for mark in test.pytestmark if mark.name == "parametrize"]
    names, values, skipped = marks[0].args[0], [], 0
    for value in marks[0].args[1]:
        try:
            values.append(plain(value))
        except TypeError:
            skipped += 1
    argnames = list(names) if isinstance(names,
                                         (list, tuple)) else [a.strip() for a in names.split(",")]
    return {"argnames": argnames, "values": values, "skipped": skipped}


def main(checkout: Path, commit: str) -> None:
    sys.path.insert(0, str(checkout))
    commit = commit or subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"],
                                      capture_output=True,
                                      text=True, check=True).stdout.strip()
    for path, names in WANT.items():
        module = importlib.import_module(path[:-3].replace("/", "."))
        data: dict[str, Any] = {
            "source": f"https://github.com/pypa/packaging/blob/{commit}/{path}",
            "repository": "pypa/packaging",
            "path": path, "commit": commit,
            "note": "pytest.mark.parametrize argument values of the named tests, copied as data by "
                    "tests/data/packaging/extract.py; values that are not JSON are left out "
                    "(counted in skipped)",
            "vectors": {}}
        if path.endswith("test_version.py"):
            data["vectors"]["VERSIONS (ascending order)"] = {"argnames": ["version"],
                                                             "values": list(module.VERSIONS),
                                                             "skipped": 0}
        for name in names:
            test: Any = module
            for part in name.split("."):
                test = getattr(test, part)
            data["vectors"][name] = vectors(test)
        out = Path(__file__).parent / f"{Path(path).stem}.json"
        out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")
