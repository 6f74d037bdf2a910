"""The facts kdkit carries about torch builds: sourced, in one place, and the template made from them.

Every pairing, arch set and driver floor of kdkit/data/pairings.json names a source of its
"sources"; the scaffold's torch pin, wheel indexes and base images are chosen from the pairings'
"template", so a template that names a build PyTorch never published fails here, not on a user's
first `kdkit lock`.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kdkit.config.shipped import data_file, dockerfile, template_dir
from kdkit.core import builds
from kdkit.facts.pairings import load_pairings
from kdkit.project.init import init_project, template_builds

ROOT = Path(__file__).resolve().parents[2]
PAIRINGS = json.loads(data_file("pairings.json").read_text(encoding="utf-8"))


def _cited(text: str) -> set[str]:
    return {key for key in PAIRINGS["sources"]
            if re.search(rf"(^|[\s,(;:]){re.escape(key)}($|[\s,);:])", text)}


def test_every_fact_names_a_source_of_the_sources_table() -> None:
    for name, arch_set in PAIRINGS["arch_sets"].items():
        if name != "cpu":
            assert _cited(
                arch_set["source"]), f"arch set {name}: {arch_set['source']!r} cites no source"
    for minor, row in PAIRINGS["torch"].items():
        assert _cited(row["source"]), f"torch {minor}: {row['source']!r} cites no source"
    for section in ("drivers", "architecture_drivers"):
        for key, entry in PAIRINGS[section].items():
            assert _cited(entry["source"]), f"{section}.{key} cites no source"
    for label, index in PAIRINGS["indexes"].items():
        if "base_image" in index:
            assert index["base_image_source"] in PAIRINGS["sources"], label
    assert _cited(PAIRINGS["template"]["source"])


def test_sources_are_public_never_a_path_of_this_machine() -> None:
    for key, citation in PAIRINGS["sources"].items():
        assert re.search(r"https?://|[\w.-]+/[\w.-]+ [.\w/-]+ @[0-9a-f]{40}",
                         citation), f"{key}: no URL or repo@commit"
        assert not re.search(r"(^|\s)/(work|tmp|home|root|opt|srv)/",
                             citation), f"{key}: names a local path"
    commits = re.findall(r"@([0-9a-f]+)", json.dumps(PAIRINGS["sources"]))
    assert commits and all(len(c) == 40 for c in commits)


def test_pairings_cover_torch_2_5_to_2_14_with_the_matrix_builds() -> None:
    pairings = load_pairings()
    assert pairings.releases() == ["2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11",
                                   "2.12", "2.13", "2.14"]
    # The release matrix: 2.14 CUDA 12.6, 13.0, 13.2 and ROCm 7.2, 7.14 (test-infra's 2.14 matrix; cu134 built, not
    # advertised); 2.13 12.6, 13.0, exp. 13.2, ROCm 7.1 (test-infra's release matrix) and 7.2; 2.11 12.6, 12.8, 13.0
    # and ROCm 7.2. No cu128 and no rocm6 after 2.11.
    assert [b.name for b in pairings.builds() if b.torch == "2.13"] == [
        "2.13 cpu", "2.13 cu126", "2.13 cu130",
        "2.13 cu132 (experimental)", "2.13 rocm7.1", "2.13 rocm7.2"]
    assert [b.name for b in pairings.builds() if b.torch == "2.14"] == [
        "2.14 cpu", "2.14 cu126", "2.14 cu130", "2.14 cu132", "2.14 rocm7.2", "2.14 rocm7.14"]
    assert {b.label for b in pairings.builds()
            if b.torch == "2.11"} == {"cpu", "cu126", "cu128", "cu130",
                                                                         "rocm7.1", "rocm7.2"}
    for later in ("2.12", "2.13", "2.14"):
        assert not [la for la in pairings.labels(later) if la == "cu128" or la.startswith("rocm6")]


def test_rocm7_wheels_carry_the_instinct_and_radeon_targets() -> None:
    rocm72 = set(
        load_pairings().build("2.13.0", "rocm7.2").architectures)  # type: ignore[union-attr]
    # uv's list measured on the rocm7.2 wheel (astral-sh/uv#18730): the builder's gfx1103 is not in it
    assert rocm72 == {"gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030",
                      "gfx1100", "gfx1101",
                      "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}
    rocm71 = set(
        load_pairings().build("2.13.0", "rocm7.1").architectures)  # type: ignore[union-attr]
    # measured on rocm7.0/7.1 wheels: no Strix (Halo) code
    assert rocm71 == rocm72 - {"gfx1150", "gfx1151"}


# ---------------------------------------------------------------- the template, by construction


def test_template_names_published_builds_of_one_release() -> None:
    pairings = load_pairings()
    torch = PAIRINGS["template"]["torch"]
    for backend in builds.BACKENDS:
        build = pairings.template_build(backend)
        assert build.backend == backend and not build.experimental
        assert build.label in pairings.labels(torch)
    assert (PAIRINGS["template"]["builds"]["cuda"],
            PAIRINGS["template"]["builds"]["rocm"]) == ("cu130", "rocm7.2")


def test_a_template_naming_an_unpublished_build_is_refused(tmp_path: Path) -> None:
    from kdkit.core.errors import BadInput

    (tmp_path / "pairings.json").write_text(json.dumps({"template": {"torch": "2.13.0", "builds": {
        "cuda": "cu128", "rocm": "rocm7.2", "cpu": "cpu"}}}))
    with pytest.raises(BadInput,
                       match=r"\$\.template names torch 2\.13\.0 cu128 for backend cuda, which is "
                             r"not a "
                             r"cuda build under \$\.torch"):
        load_pairings(tmp_path).template_build("cuda")


@pytest.mark.parametrize("backend", builds.BACKENDS)
def test_a_new_project_pins_the_template_build(tmp_path: Path, backend: str) -> None:
    root = init_project(tmp_path / "p", backend=backend)
    config = json.loads((root / "kdkit.json").read_text())
    pairings = load_pairings()
    base_in = (root / "requirements" / "base.in").read_text()
    assert re.search(r"^torch==(\S+)$",
                     base_in,
                     re.M).group(1) == PAIRINGS["template"]["torch"]  # type: ignore[union-attr]
    for spec in config["backends"].values():
        label = builds.index_label(spec["torch_index"])
        assert label is not None and pairings.build(
            PAIRINGS["template"]["torch"], label) is not None, spec
        assert spec["torch_index"] == builds.TORCH_INDEX_URL.format(label=label)
        assert spec["base_image"] == pairings.base_image(label, config["python"])
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".in", ".md", ".py", ".example"):
            assert "{{" not in path.read_text(encoding="utf-8"), path


def test_template_files_name_no_build_of_their_own() -> None:
    """The torch pin and the indexes come only from the pairings: no literal build in the template."""
    for path in template_dir().rglob("*"):
        if path.is_file() and path.suffix in (".json", ".in"):
            text = path.read_text(encoding="utf-8")
            assert not re.search(r"download\.pytorch\.org|torch==\d|cu1\d\d|rocm\d", text), path


@pytest.mark.parametrize("backend", ["cuda", "rocm", "cpu"])
def test_dockerfile_default_base_is_the_templates(backend: str) -> None:
    """For the Python a hand build defaults to (Dockerfile.common's KDKIT_PYTHON), so that build works."""
    python = re.search(r"^ARG KDKIT_PYTHON=(\S+)$", (ROOT / "Dockerfile.common").read_text(), re.M)
    line = re.search(r"^ARG BASE_IMAGE=(\S+)$", dockerfile(backend).read_text(), re.M)
    assert python is not None and line is not None
    assert line.group(1) == template_builds(python.group(1))[f"{backend}_image"]


# ---------------------------------------------------------------- one home each


def _python_sources() -> list[Path]:
    return [p for p in (ROOT / "kdkit").rglob("*.py") if "__pycache__" not in p.parts]


def test_driver_floors_live_only_in_pairings() -> None:
    """They once lived three times and disagreed (runner 580.65.06, gpurules and pairings 580)."""
    for path in _python_sources():
        text = path.read_text(encoding="utf-8")
        for floor in ("450.80.02", "525.60.13", "580.65.06"):
            assert floor not in text, f"{path.relative_to(ROOT)} repeats the driver floor {floor}"


def test_label_parsing_backends_and_proxies_have_one_home() -> None:
    label_regex = re.compile(r"cu\(\\d|rocm\(\\d|rocm\[0-9")
    for path in _python_sources():
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        if rel != "kdkit/core/builds.py":
            assert not label_regex.search(text), f"{rel} parses torch labels itself"
            for node in ast.walk(tree):
                if isinstance(node, (ast.Tuple, ast.List)) \
                        and all(isinstance(e, ast.Constant) for e in node.elts):
                    values = [e.value for e in node.elts]  # type: ignore[attr-defined]
                    assert values[:3] != [
                        "cuda", "rocm", "cpu"], f"{rel}:{node.lineno} repeats the backend list"
        if rel != "kdkit/core/proc.py":
            assert '"HTTPS_PROXY", "NO_PROXY"' not in text, f"{rel} repeats the proxy variables"


@pytest.mark.parametrize(("label", "parsed"), [
    ("cu130", ("cuda", "13.0")), ("cu118", ("cuda", "11.8")), ("cu132", ("cuda", "13.2")),
    ("rocm7.2", ("rocm", "7.2")),
    ("rocm6.2.4", ("rocm", "6.2.4")), ("rocm7.14", ("rocm", "7.14")), ("cpu", ("cpu", None)),
    ("xpu", None),
    ("cu12", None), ("rocm", None), ("cu130.post1", None),
])
def test_the_one_label_parser(label: str, parsed: tuple[str, str | None] | None) -> None:
    assert builds.parse_label(label) == parsed


# ---------------------------------------------------------------- the thresholds of `diagnose --accept`


def test_every_acceptance_rule_has_a_value_and_a_public_source() -> None:
    """kdkit/data/acceptance.json: each rule of each section is {"value": ..., "source": ...}, the source a URL or a
    repository path (a shipped table of kdkit's, or owner/repo path), never a path of this machine."""
    acceptance = json.loads(data_file("acceptance.json").read_text(encoding="utf-8"))
    sections = {name: rules for name, rules in acceptance.items() if isinstance(rules, dict)}
    assert {"health", "load"} <= set(sections) and all(sections.values())
    for section, rules in sections.items():
        for name, rule in rules.items():
            where = f"acceptance.json {section}.{name}"
            assert "value" in rule, f"{where} has no value"
            source = rule.get("source")
            assert isinstance(source, str) and source.strip(), f"{where} names no source"
            assert re.search(r"https?://|\bkdkit/data/\w+\.json\b|[\w.-]+/[\w.-]+ [\w./-]+",
                             source), \
                f"{where}: {source!r} is no URL or repository path"
            assert not re.search(r"(^|\s)/(work|tmp|home|root|opt|srv)/",
                                 source), f"{where}: names a local path"
