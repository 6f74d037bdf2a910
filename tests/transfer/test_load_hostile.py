"""`kdkit verify-bundle` and `kdkit load` against a tamperer who re-signs SHA256SUMS (issue 24, items 2, 3, 11):
an archive that names another tag, a decompression bomb, a bundle.json of the wrong shapes.

Every refusal is one line: exit 1 for an archive that is not the bundle's (a check that failed), exit 2 for
a bundle.json that does not match schemas/bundle.schema.json; and every refusal leaves the bundle's files as
they were and the engine as it was: the bundle's image is absent before and after (no image of its id,
tagged or not), and the victim tag still names its own image. The bundle's image is a tiny real image
(FROM scratch, one file, the project's labels) under a tag unique to this run; the victim tag too.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kdkit.core.errors import CheckFailed
from kdkit.core.jsonio import sha256_file
from kdkit.transfer.imagearchive import expected, rewritten
from tests.conftest import BASE, invoke, reseal, tree_snapshot
from tests.transfer.test_bundle import ready_to_bundle

# One per session, and the same on every pytest-xdist worker (their collections must agree, and this names
# parametrized tests): xdist's run ID where there is one.
RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)[:12]
REF = f"kdkit-test/load-hostile-{RUN}:cpu"
VICTIM = f"victim-{RUN}:latest"
Members = list[tuple[tarfile.TarInfo, bytes]]

pytestmark = pytest.mark.docker


# ---------------------------------------------------------------- the engine, the image, the bundle


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def _image_id(name: str) -> str | None:
    done = _docker("image", "inspect", "-f", "{{.Id}}", name)
    return done.stdout.strip() if done.returncode == 0 else None


def _engine(image_id: str) -> dict[str, Any]:
    """What a refused load must leave as it was: the bundle's ref and image (absent), the victim's image,
    every tag of this run."""
    tags = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    return {"ref": _image_id(REF), "image": _image_id(image_id), "victim": _image_id(VICTIM),
            "tags": sorted(t for t in tags if RUN in t)}


def _tiny_image(project: Path) -> None:
    """FROM scratch, one file, the labels `kdkit build` gives this project: a real image of a few KB."""
    import docker

    from kdkit.config.project import load_project
    from kdkit.image.labels import image_labels

    loaded = load_project(project)
    backend = loaded.backend("cpu")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY marker /marker\n"),
                           ("marker", RUN.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client = docker.from_env()
    client.images.build(fileobj=context, custom_context=True, tag=REF, rm=True, pull=False,
                        labels=image_labels(loaded, backend, sha256_file(backend.lock)))
    client.close()


@pytest.fixture(scope="module")
def made(
    tmp_path_factory: pytest.TempPathFactory, docker_engine: None) -> Iterator[tuple[Path, str]]:
    """A bundle of the tiny image, and the image's id; the image is then removed from the engine, and the
    victim tag set on the base image."""
    from kdkit.project.init import init_project

    root = init_project(tmp_path_factory.mktemp("load-hostile") / "proj",
                        name="proj", backend="cpu")
    ready_to_bundle(root)
    _tiny_image(root)
    out = root.parent / "bundle"
    result = invoke("bundle", root, "--out", out, "--image", REF, "--no-kdkit-wheels", "--json")
    assert result.exit_code == 0, result.output
    image_id = json.loads(result.stdout)["image"]["id"]
    assert _docker("tag", BASE, VICTIM).returncode == 0
    try:
        yield out, image_id
    finally:
        _docker("rmi", "-f", REF, VICTIM)
        _docker("rmi", "-f", image_id)


@pytest.fixture
def bundle(made: tuple[Path, str], tmp_path: Path) -> Iterator[Path]:
    """A private copy of the bundle; the bundle's image is not on the engine when the test starts."""
    out = Path(shutil.copytree(made[0], tmp_path / "bundle"))
    _docker("rmi", "-f", REF)
    _docker("rmi", "-f", made[1])
    assert _image_id(made[1]) is None
    yield out
    _docker("rmi", "-f", REF)


@pytest.fixture
def image_id(made: tuple[Path, str]) -> str:
    return made[1]


def _refused(command: str, out: Path, image_id: str, code: int, *, loaded: bool = False) -> str:
    """Run ``command`` on the bundle: exit ``code``, one error line, the bundle's files and the engine as they
    were (the bundle's image absent, unless ``loaded`` before). Returns the message."""
    before, engine = tree_snapshot(out), _engine(image_id)
    result = invoke(command, out)
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert "Traceback" not in result.output
    assert tree_snapshot(out) == before
    assert _engine(image_id) == engine
    assert (engine["image"] is not None) is loaded and engine["victim"] is not None
    return errors[0].removeprefix("Error: ")


# ---------------------------------------------------------------- a tamperer's tools


def _members(out: Path) -> Members:
    raw = subprocess.run(["zstd", "-q", "-dc", out / "image.tar.zst"],
                         capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"")
                for m in tar.getmembers()]  # type: ignore[union-attr]


def _pack(members: Members, global_pax: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w",
                      format=tarfile.PAX_FORMAT, pax_headers=global_pax) as tar:
        for info, data in members:
            info = (info if info.isfile() and info.pax_headers else tarfile.TarInfo(info.name)
                    if info.isfile() else info)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data or info.isfile() else None)
    return buffer.getvalue()


def _describe(out: Path, change: Callable[[dict[str, Any]], object]) -> None:
    path = out / "bundle.json"
    info = json.loads(path.read_text(encoding="utf-8"))
    change(info)
    path.write_text(json.dumps(info), encoding="utf-8")
    reseal(out)


def _store(out: Path, archive: bytes, compress: tuple[str, ...] = ("zstd", "-q", "-c")) -> None:
    """Compress ``archive`` into the bundle, with bundle.json's sizes and SHA256SUMS made to agree, as a
    tamperer who knows the format would."""
    packed = subprocess.run(compress, input=archive, capture_output=True, check=True).stdout
    (out / "image.tar.zst").write_bytes(packed)
    _describe(out, lambda d: d["image"].update(bytes=len(packed), archive_bytes=len(archive)))


def _with_manifest(
    change: Callable[[list[dict[str, Any]]], object]) -> Callable[[Members], Members]:
    def edit(members: Members) -> Members:
        result = []
        for info, data in members:
            if info.name == "manifest.json":
                manifest = json.loads(data)
                change(manifest)
                data = json.dumps(manifest).encode()
            result.append((info, data))
        return result
    return edit


def _put(name: str, content: Callable[[Members], object], *, first: bool = False,
         again: bool = False) -> Callable[[Members], Members]:
    """``name`` holding ``content`` as JSON: in place of the member of that name (or beside it, ``again``), at
    the end or ``first``."""
    def edit(members: Members) -> Members:
        item = (tarfile.TarInfo(name), json.dumps(content(members)).encode())
        rest = members if again else [(i, d) for i, d in members if i.name != name]
        return [item, *rest] if first else [*rest, item]
    return edit


def _manifest(members: Members) -> list[dict[str, Any]]:
    return json.loads(
        next(data for info,
             data in members if info.name == "manifest.json"))  # type: ignore[no-any-return]


def _tags(*tags: str | None) -> Callable[[list[dict[str, Any]]], object]:
    return lambda m: m[0].update(RepoTags=list(tags) if tags != (None,) else None)


def _victim_second(members: Members) -> object:
    return [{**_manifest(members)[0], "RepoTags": [REF, VICTIM]}]


def _linked_manifest(members: Members) -> Members:
    """manifest.json a link to another member that names a victim: an extractor follows it."""
    link = tarfile.TarInfo("manifest.json")
    link.type, link.linkname = tarfile.SYMTYPE, "evil.json"
    rest = [(i, d) for i, d in members if i.name != "manifest.json"]
    return [*rest, (tarfile.TarInfo("evil.json"), json.dumps(_victim_second(members)).encode()),
            (link, b"")]


REPO, TAG = REF.rsplit(":", 1)
NAMED_IN = "not only the bundle's own"
ARCHIVES: list[tuple[str, Callable[[Members], Members], str]] = [
    ("a second tag",
     _with_manifest(_tags(REF, VICTIM)),
     f'its manifest.json names the image "{VICTIM}", {NAMED_IN}'),
    ("only a foreign tag",
     _with_manifest(_tags(VICTIM)), f'its manifest.json names the image "{VICTIM}", {NAMED_IN}'),
    ("no tag at all",
     _with_manifest(_tags()), "its manifest.json names no tag: loading it would leave an image "
     "without a name"),
    ("RepoTags null", _with_manifest(_tags(None)), "its manifest.json names no tag"),
    ("the own name without its tag (:latest)",
     _with_manifest(_tags(REPO)), f'names the image "{REPO}", {NAMED_IN}'),
    ("the own name on another registry", _with_manifest(_tags(f"registry.example.org/{REF}")),
     f'names the image "registry.example.org/{REF}", {NAMED_IN}'),
    ("the own tag on another name",
     _with_manifest(_tags(f"kdkit-test/other-{RUN}:{TAG}")), NAMED_IN),
    ("a victim in repositories",
     _put("repositories", lambda _m: {REPO: {TAG: "x"}, f"victim-{RUN}": {"latest": "x"}}),
     f'its repositories names the image "{VICTIM}", {NAMED_IN}'),
    ("a victim in index.json (containerd's name)",
     _put("index.json", lambda _m: {"schemaVersion": 2, "manifests": [
        {"annotations": {"io.containerd.image.name": f"docker.io/library/{VICTIM}"}}]}),
     f'its index.json names the image "docker.io/library/{VICTIM}", {NAMED_IN}'),
    ("a victim in index.json (OCI's ref.name)",
     _put("index.json", lambda _m: {"schemaVersion": 2, "manifests": [
        {"annotations": {"org.opencontainers.image.ref.name": VICTIM}}]}),
     f'its index.json names the image "{VICTIM}"'),
    ("a bare tag in index.json that is not the own",
     _put("index.json", lambda _m: {"schemaVersion": 2, "manifests": [
        {"annotations": {"org.opencontainers.image.ref.name": "latest"}}]}),
     'its index.json names the image "latest"'),
    ("manifest.json first, naming a victim", _put("manifest.json", _victim_second, first=True),
     f'its manifest.json names the image "{VICTIM}"'),
    ("manifest.json twice, the second naming a victim",
     _put("manifest.json", _victim_second, again=True),
     "holds \"manifest.json\" twice"),
    ("manifest.json again as ./manifest.json", _put("./manifest.json", _victim_second, again=True),
     "holds \"./manifest.json\" twice"),
    ("manifest.json again as x/../manifest.json",
     _put("x/../manifest.json", _victim_second, again=True),
     "holds \"x/../manifest.json\" twice"),
    ("manifest.json a link to a file naming a victim", _linked_manifest,
     "its manifest.json is not a file of at most"),
    ("two images in manifest.json", _with_manifest(lambda m: m.append({**m[0], "RepoTags": None})),
     "its manifest.json does not list exactly one image"),
    ("no manifest.json", lambda m: [(i, d) for i, d in m if i.name != "manifest.json"],
     "holds no manifest.json: not an archive `docker save` wrote"),
    ("another image's config", _with_manifest(lambda m: m[0].update(Config="0" * 64 + ".json")),
     "its manifest.json does not give the bundle's image"),
    ("a member outside the archive",
     _put("../escape", lambda _m: {}), 'holds a member named "../escape", outside'),
]


@pytest.mark.parametrize(("edit", "problem"), [a[1:] for a in ARCHIVES],
                         ids=[a[0] for a in ARCHIVES])
def test_an_archive_naming_anything_but_its_own_image_is_never_loaded(
        bundle: Path, image_id: str, edit: Callable[[Members], Members], problem: str) -> None:
    _store(bundle, _pack(edit(_members(bundle))))
    for command in ("verify-bundle", "load"):
        message = _refused(command, bundle, image_id, code=1)
        assert message.startswith(f"{bundle / 'image.tar.zst'}: "), message
        assert problem in message, message
        assert message.endswith("; the bundle was changed or damaged in transfer: copy it again")


def test_a_name_two_tar_readers_read_apart_is_given_to_the_engine_as_checked(
    bundle: Path, image_id: str) -> None:
    """A global pax header's path renames members for Python's tarfile, not for Go's (the engine's, which passes
    over global headers): the engine is given the archive as kdkit read it, so it is held to the same. Which
    member is refused first (a folder or a file now named manifest.json) follows the archive's order."""
    members = _members(bundle)
    extra = tarfile.TarInfo("extra.json")
    extra.pax_headers = {"comment": "renamed by the global header, for one reader"}
    _store(bundle, _pack([*members, (extra, json.dumps(_victim_second(members)).encode())],
                         global_pax={"path": "manifest.json"}))
    for command in ("verify-bundle", "load"):
        message = _refused(command, bundle, image_id, code=1)
        assert 'holds "manifest.json" twice' in message or "its manifest.json is not a file of at most" in message, \
            message


@pytest.mark.parametrize("name", [f"docker.io/{REF}", f"index.docker.io/{REF}"])
def test_the_own_reference_spelt_in_full_is_the_own(bundle: Path, image_id: str, name: str) -> None:
    """The engine reads ``docker.io/x/y:t`` as ``x/y:t``: the same name, loaded."""
    _store(bundle, _pack(_with_manifest(_tags(name))(_members(bundle))))
    assert invoke("verify-bundle", bundle).exit_code == 0
    result = invoke("load", bundle, "--json")
    assert result.exit_code == 0, result.output
    assert _image_id(REF) == image_id and _image_id(VICTIM) is not None


def test_an_index_json_naming_the_own_image_is_the_own(bundle: Path, image_id: str) -> None:
    """Docker 25 and later write index.json beside manifest.json: containerd's full name, OCI's tag alone."""
    notes = {
        "io.containerd.image.name": f"docker.io/{REF}", "org.opencontainers.image.ref.name": TAG}
    index = _put("index.json",
                 lambda _m: {"schemaVersion": 2, "manifests": [{"annotations": notes}]})
    _store(bundle, _pack(index(_members(bundle))))
    assert invoke("verify-bundle", bundle).exit_code == 0
    assert invoke("load", bundle).exit_code == 0
    assert _image_id(REF) == image_id


def test_a_good_bundle_loads_its_image_under_its_own_tag_only(bundle: Path, image_id: str) -> None:
    victim = _image_id(VICTIM)
    result = invoke("load", bundle, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["id"] == image_id and report["loaded"] == [REF]
    assert _image_id(REF) == image_id and _image_id(VICTIM) == victim


def test_the_load_pass_holds_by_itself(bundle: Path, image_id: str) -> None:
    """An archive swapped after verify-bundle read it: the stream into the engine is checked again, and broken
    off before any name reaches the engine."""
    from kdkit.docker_adapter import connect

    archive = _pack(_with_manifest(_tags(REF, VICTIM))(_members(bundle)))
    before = _engine(image_id)
    with pytest.raises(CheckFailed, match=f'names the image "{VICTIM}"'):
        connect().load_image_chunks(
            rewritten(iter([archive]), expected(REF, image_id, len(archive), None)), "test")
    assert _engine(image_id) == before and before["image"] is None


# ---------------------------------------------------------------- decompression bombs (item 3)


def _resign(out: Path) -> None:
    """SHA256SUMS written again over every file as it now is: the tamperer's last step."""
    from kdkit.core.checksums import SUMS, write_sums

    write_sums(out, [(p.relative_to(out).as_posix(), p) for p in sorted(out.rglob("*"))
                     if p.is_file() and p.name != SUMS])


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """1 GiB of zeros compressed, streamed through the compressor: a few KB (zstd) or about 1 MB (gzip),
    never 1 GiB in memory or on disk."""
    made = {}
    for name, command in (("zstd", "zstd -q -3 -c"), ("gzip", "gzip -6 -c")):
        done = subprocess.run(["sh", "-c", f"head -c {1 << 30} /dev/zero | {command}"],
                              capture_output=True,
                              check=True)
        made[name] = done.stdout
    assert len(made["zstd"]) < 100_000 and len(made["gzip"]) < 2_000_000
    return made


def _bomb(out: Path, packed: bytes, compressor: str, declared: int | None) -> None:
    """The bundle's archive replaced by ``packed``, bundle.json's sizes made to agree (``declared`` as the
    archive's length, or none, as a bundle of an older kdkit), SHA256SUMS re-signed."""
    (out / "image.tar.zst").unlink()
    name = "image.tar.zst" if compressor == "zstd" else "image.tar.gz"
    (out / name).write_bytes(packed)
    info = json.loads((out / "bundle.json").read_text(encoding="utf-8"))
    info["image"].update(file=name, compressor=compressor,
                         bytes=len(packed), archive_bytes=declared)
    if declared is None:
        del info["image"]["archive_bytes"]
    (out / "bundle.json").write_text(json.dumps(info), encoding="utf-8")
    _resign(out)


def _after_archive(out: Path) -> bytes:
    """The bundle's own archive, then 1 GiB of zeros after its end, compressed as it streams."""
    archive = subprocess.run(["zstd", "-q", "-dc", out / "image.tar.zst"],
                             capture_output=True, check=True).stdout
    (out.parent / "archive.tar").write_bytes(archive)
    done = subprocess.run([
        "sh", "-c", f"(cat archive.tar; head -c {1 << 30} /dev/zero) | zstd -q -3 -c"],
                          cwd=out.parent, capture_output=True, check=True)
    (out.parent / "archive.tar").unlink()
    return done.stdout


BOMBS: list[tuple[str, str, int | None, str]] = [
    ("declared 4 KB", "zstd",
     4096, "decompresses past the 4096 bytes bundle.json declares ($.image.archive_bytes); "
     "stopped there, nothing loaded"),
    ("no declared length (an older bundle)", "zstd", None, "decompresses past 2000 times its "),
    ("declared 1 TiB", "zstd", 1 << 40,
     "compressed bytes and 64 MiB (bundle.json declares 1099511627776); stopped there"),
    ("gzip, declared 4 KB", "gzip", 4096, "decompresses past the 4096 bytes bundle.json declares"),
]


@pytest.mark.parametrize(("compressor", "declared", "problem"), [b[1:] for b in BOMBS],
                         ids=[b[0] for b in BOMBS])
def test_a_decompression_bomb_is_stopped_early_and_nothing_loaded(
        bundle: Path, image_id: str, bombs: dict[str, bytes], compressor: str, declared: int | None,
        problem: str) -> None:
    import resource

    _bomb(bundle, bombs[compressor], compressor, declared)
    name = "image.tar.zst" if compressor == "zstd" else "image.tar.gz"
    for command in ("verify-bundle", "load"):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        message = _refused(command, bundle, image_id, code=1)
        assert message.startswith(f"{bundle / name}: ") and problem in message, message
        # KiB: streamed, never held
        assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 << 10


def test_zeros_after_the_archive_are_stopped_at_its_declared_length(
    bundle: Path, image_id: str) -> None:
    declared = len(subprocess.run(["zstd", "-q", "-dc", bundle / "image.tar.zst"],
                                  capture_output=True,
                                  check=True).stdout)
    _bomb(bundle, _after_archive(bundle), "zstd", declared)
    for command in ("verify-bundle", "load"):
        message = _refused(command, bundle, image_id, code=1)
        assert f"decompresses past the {declared} bytes bundle.json declares" in message, message


def test_an_archive_shorter_than_declared_is_refused(bundle: Path, image_id: str) -> None:
    _describe(bundle, lambda d: d["image"].update(archive_bytes=d["image"]["archive_bytes"] + 512))
    message = _refused("load", bundle, image_id, code=1)
    assert message.startswith(f"{bundle / 'image.tar.zst'}: decompresses to "), message
    assert " bytes, bundle.json declares " in message, message


# ---------------------------------------------------------------- bundle.json against its schema (item 11)


def _image(**changes: object) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["image"].update(changes)


def _labels(change: Callable[[dict[str, Any]], object]) -> Callable[[dict[str, Any]], object]:
    return lambda d: change(d["image"]["labels"])


SHAPES: list[tuple[str, Callable[[dict[str, Any]], object], str]] = [
    ("an unknown compressor", _image(compressor="evil"),
     '$.image.compressor: "evil" is not allowed; expected one of "zstd", "gzip"'),
    ("bytes as words", _image(bytes="lots"), '$.image.bytes: expected integer, got str "lots"'),
    ("bytes negative", _image(bytes=-1), "$.image.bytes: -1 is less than the minimum of 0"),
    ("bytes a fraction", _image(bytes=1.5), "$.image.bytes: expected integer, got float 1.5"),
    ("archive_bytes a boolean",
     _image(archive_bytes=True), "$.image.archive_bytes: expected integer, got bool true"),
    ("labels a list", _image(labels=["x"]), '$.image.labels: expected object, got list ["x"]'),
    ("labels empty",
     _image(labels={}), "$.image.labels: missing required key 'dev.kdkit.project', "),
    ("labels removed",
     lambda d: d["image"].pop("labels"), "$.image: missing required key 'labels'"),
    ("a tied label removed", _labels(lambda labels: labels.pop("dev.kdkit.lock.sha256")),
     "$.image.labels: missing required key 'dev.kdkit.lock.sha256'"),
    ("a label a number", _labels(lambda labels: labels.update({"dev.kdkit.project": 3})),
     "$.image.labels.dev.kdkit.project: expected string, got int 3"),
    ("a label named with control characters",
     _labels(lambda labels: labels.update({"a\n\x1b[2JPASS": 3})),
     "$.image.labels.a\\n\\x1b[2JPASS: expected string, got int 3"),
    ("an id that is no digest", _image(id="abc"), '$.image.id: "abc" does not match'),
    ("a ref with a space", _image(ref="a b"), '$.image.ref: "a b" does not match'),
    ("a file in a folder",
     _image(file="../image.tar.zst"), '$.image.file: "../image.tar.zst" does not match'),
    ("image a string",
     lambda d: d.update(image="yes"), '$.image: expected object or null, got str "yes"'),
    ("files a string", lambda d: d.update(files="x"), '$.files: expected array, got str "x"'),
    ("kdkit_wheels files a number", lambda d: d.update(kdkit_wheels={"files": 3}),
     "$.kdkit_wheels.files: expected array, got int 3"),
    ("the lock removed", lambda d: d.pop("lock"), "$: missing required key 'lock'"),
]


@pytest.mark.parametrize(("change", "problem"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_a_bundle_json_of_the_wrong_shape_is_bad_input_before_anything_loads(
        bundle: Path, image_id: str,
        change: Callable[[dict[str, Any]], object], problem: str) -> None:
    _describe(bundle, change)
    for command in ("verify-bundle", "load"):
        message = _refused(command, bundle, image_id, code=2)
        assert message.startswith(f"{bundle / 'bundle.json'}: {problem}"), message


def test_labels_removed_after_the_image_was_loaded_are_one_line(
    bundle: Path, image_id: str) -> None:
    assert invoke("load", bundle).exit_code == 0
    _describe(bundle, lambda d: d["image"].pop("labels"))
    message = _refused("load", bundle, image_id, code=2, loaded=True)
    assert message.startswith(
        f"{bundle / 'bundle.json'}: $.image: missing required key 'labels'"), message


def test_a_declared_size_that_is_not_the_file_s_is_refused(bundle: Path, image_id: str) -> None:
    size = (bundle / "image.tar.zst").stat().st_size
    _describe(bundle, _image(bytes=size + 1))
    message = _refused("verify-bundle", bundle, image_id, code=1)
    assert message.startswith(f"{bundle / 'image.tar.zst'}: {size} bytes, bundle.json declares "
                              f"{size + 1} ($.image.bytes)"), message


def test_keys_kdkit_does_not_read_steer_nothing(bundle: Path, image_id: str) -> None:
    """A newer kdkit of the same format may record more facts: a key this kdkit does not read is allowed."""
    _describe(bundle,
              lambda d: (d.update(future_fact=[1]), d["image"].update(platform="linux/amd64")))
    assert invoke("verify-bundle", bundle).exit_code == 0
    result = invoke("load", bundle, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == image_id


def test_the_schema_requires_every_tied_label_and_knows_every_compressor() -> None:
    from kdkit.config.shipped import schema_path
    from kdkit.transfer.format import COMPRESSORS, TIED_LABELS

    image = json.loads(
        schema_path("bundle").read_text(encoding="utf-8"))["$defs"]["image"]["properties"]
    assert image["labels"]["required"] == list(TIED_LABELS)
    assert image["compressor"]["enum"] == list(COMPRESSORS)
