"""`kdkit check`: will the project's torch build run on a GPU offer, before anyone pays for it?

Two sources of truth, in order of strength. An image that exists carries the compiled architecture
list of the torch installed in it (the ``dev.kdkit.torch.arch_list`` label `kdkit build` records),
its CPU architecture and its CUDA version: ``--image IMG`` judges the card from those. Before any
image exists, the lock's torch pin (release and local label) is looked up in the pairings
(kdkit/data/pairings.json): which architectures that published build carries, which driver it
needs. Each point is ok, fail, unknown (cannot be shown to hold) or note (to confirm), with the
reason it was given and the fix. The subject judged (the lock's torch pin or the image's torch) is
read by :mod:`kdkit.order.checksubject`.
"""

from __future__ import annotations

from dataclasses import replace
from os import environ
from pathlib import Path
from typing import TYPE_CHECKING

from kdkit.config.project import Project
from kdkit.core.builds import (
    TORCH_INDEX_URL,
    label_backend,
    parse_label,
    split_version,
    torch_minor,
    version_tuple,
)
from kdkit.core.errors import BadInput
from kdkit.core.finding import Finding, finding_json
from kdkit.core.lockfile import parse_lock
from kdkit.core.safetext import printable
from kdkit.facts.catalog import Catalog, Offer, load_catalog
from kdkit.facts.pairings import Build, Pairings, code_for, load_pairings
from kdkit.facts.platforms import docker_arch, linux_arch
from kdkit.order.checkmodel import Subject, check_point
from kdkit.order.checksubject import image_subject, lock_subject

if TYPE_CHECKING:
    from kdkit.order.checkrecords import CheckReport

OFF = ("", "0", "false", "no", "off")  # KDKIT_OFFLINE values that leave the network on


# ---------------------------------------------------------------- what to lock instead


def _preferred(builds: list[Build], subject: Subject | None, pairings: Pairings) -> Build:
    """The build to suggest: the same torch release, else the template's, else the newest stable
    one."""
    stable = [b for b in builds if not b.experimental] or builds
    if subject is not None:
        same = [b for b in stable if b.torch == torch_minor(subject.version)]
        if same:
            return same[-1]
    template = pairings.data.get("template", {})
    for build in stable:
        if build.torch == torch_minor(template.get("torch", "")) and \
                build.label == template.get("builds", {}).get(build.backend):
            return build
    return stable[-1]


def instead(offer: Offer, pairings: Pairings, subject: Subject | None = None) -> str:
    """What to lock instead: a published build known to carry code for the card, and the range of
    them."""
    cpu_arch = offer.cpu_arch
    builds = pairings.builds_for(offer.architecture, offer.backend, cpu_arch)
    if not builds:
        return (f"no {cpu_arch} build in kdkit's pairings carries {offer.architecture}; add one to "
                "a project pairings.json")
    pick = _preferred(builds, subject, pairings)
    template = pairings.data.get("template", {})
    if subject is not None and pick.torch == torch_minor(subject.version) \
            and not _prerelease(subject.version):
        pin = split_version(subject.version)[0]
    elif pick.torch == torch_minor(template.get("torch", "")):
        pin = template["torch"]
    else:
        pin = f"{pick.torch}.*"
    return (f"lock torch {pin} from {pick.label} (published builds that carry "
            f"{offer.architecture}: {_ranges(builds)}): set backends.{offer.backend}.torch_index "
            f"to {TORCH_INDEX_URL.format(label=pick.label)}, pin torch=={pin} in "
            f"requirements/base.in, then `kdkit lock --backend {offer.backend}`")


def _prerelease(version: str) -> bool:
    """A nightly or release candidate (``2.13.0.dev20260101``, ``2.13.0rc1``): not on the release
    indexes."""
    from kdkit.core.versions import InvalidVersion, Version

    try:
        parsed = Version.parse(split_version(version)[0])
    except InvalidVersion:
        return True
    return parsed.pre is not None or parsed.dev is not None


def _ranges(builds: list[Build]) -> str:
    """``cu126 2.6-2.14, cu128 2.7-2.11 (2.7 experimental)``: each label with the releases that have
    it."""
    by_label: dict[str, list[Build]] = {}
    for build in builds:
        by_label.setdefault(build.label, []).append(build)
    parts = []
    def key(label: str) -> tuple[str, tuple[int, ...]]:
        parsed = parse_label(label) or ("", None)
        return parsed[0], version_tuple(parsed[1] or "")

    for label in sorted(by_label, key=key):
        found = by_label[label]
        span = found[0].torch if len(found) == 1 else f"{found[0].torch}-{found[-1].torch}"
        experimental = [b.torch for b in found if b.experimental]
        parts.append(f"{label} {span}"
                     + (f" ({', '.join(experimental)} experimental)" if experimental else ""))
    return ", ".join(parts)


# ---------------------------------------------------------------- the points


def _backend_point(offer: Offer, backend: str, project: Project) -> Finding:
    if offer.backend == backend:
        return check_point(
            "backend", "ok", f"{offer.name} ({offer.vendor}) runs the {backend} backend")
    first = ("" if offer.backend in project.config["backends"] else
             f"add backends.{offer.backend} to kdkit.json (see `kdkit init --help` for its "
             "fields), then ")
    return check_point("backend", "fail",
                       f"{offer.name} is an {offer.vendor.upper()} card: it runs the "
                       f"{offer.backend} backend, not {backend}",
                       f"{first}check and lock the {offer.backend} backend: `kdkit lock --backend "
                       f"{offer.backend}`, then `kdkit check --gpu {offer.name!r} --backend "
                       f"{offer.backend}`")


def _cpu_point(offer: Offer, subject: Subject) -> Finding:
    docker = docker_arch(offer.cpu_arch)
    if not linux_arch(subject.platform)[1]:
        return check_point("cpu", "fail",
                           f"{subject.what} was made on {subject.platform}, not Linux: its wheels "
                           f"and markers are that system's, and {offer.name} hosts run Linux on "
                           f"{offer.cpu_arch}",
                           f"lock for linux/{docker}: `kdkit lock --in-container` (resolves inside "
                           "the backend's Linux base image) on a machine with a Docker engine")
    if subject.cpu_arch is None:
        return check_point("cpu", "unknown",
                           f"{subject.what} does not say which CPU architecture it was made for; "
                           f"{offer.name} hosts are {offer.cpu_arch}",
                           "re-lock with `kdkit lock`, which records it")
    if subject.cpu_arch == offer.cpu_arch:
        return check_point(
            "cpu", "ok", f"{subject.what} is for {subject.cpu_arch}, as {offer.name} hosts are")
    host = f"{offer.name} hosts are {offer.cpu_arch}" + (
        " (Grace)" if offer.cpu_arch == "aarch64" else "")
    return check_point("cpu", "fail",
                       f"{subject.what} is for {subject.cpu_arch} but {host}: its wheels and "
                       "binaries do not run there",
                       f"make the lock and the image on linux/{docker}: run `kdkit lock "
                       f"--in-container` and `kdkit build` on an {offer.cpu_arch} machine (or in a "
                       f"linux/{docker} container through QEMU binfmt)")


def _build_point(offer: Offer, subject: Subject, pairings: Pairings) -> Finding:
    index = pairings.index(subject.label)
    backend = index["backend"] if index else label_backend(subject.label) or "cpu"
    if backend != offer.backend:
        return check_point("build", "fail",
                           f"{subject.what} has torch {subject.version}, a {backend} build; "
                           f"{offer.name} ({offer.architecture}) needs a {offer.backend} build",
                           instead(offer, pairings, subject))
    return check_point(
        "build", "ok", f"{subject.what} has torch {subject.version}, a {backend} build")


def _kernel_point(offer: Offer, subject: Subject, pairings: Pairings) -> Finding:
    card = offer.architecture
    # a lock: its torch wheel, read on its index
    if subject.arch_list is None and subject.wheel_lock is not None:
        from kdkit.lock.wheelarch import WheelReading, read_locked_wheel

        reading = WheelReading(None) if subject.offline else \
            read_locked_wheel(subject.wheel_lock, subject.python, subject.label)
        # offline (the user's choice: no note), or the reason it could not be read
        if reading.arch_list is None:
            point = _table_kernel_point(offer, subject, pairings)
            why = (
                f"; the locked wheel was not read ({reading.reason}), so this is the pairings' "
                "answer")
            return point._replace(why=point.why + (why if reading.reason else ""), source="facts")
        subject = replace(subject, arch_list=reading.arch_list, arch_source=reading.where())
    # the image's own torch, or the locked wheel: the strongest evidence there is
    if subject.arch_list is not None:
        image = subject.what.startswith("image ")
        whose, source = (("the image's torch", "image") if image
                         else (f"torch {subject.version}", "wheel"))
        carried = ", ".join(subject.arch_list) or "no GPU code"
        code = code_for(card, subject.arch_list)
        if code is not None:
            return check_point("kernels", "ok", f"{whose} carries {code}, which runs on {card} "
                               f"(read from {subject.arch_source or 'the image'}: {carried})",
                               source=(source))
        return check_point("kernels", "fail",
                           f"{whose} carries {carried} (read from "
                           f"{subject.arch_source or 'the image'}): no code for {offer.name}'s "
                           f"{card}; on the machine this is 'no kernel image is available for "
                           "execution on the device'", instead(offer, pairings, subject),
                           source=(source))
    point = _table_kernel_point(offer, subject, pairings)._replace(source="facts")
    # an image whose own list is not known: say so, then the table's answer
    if subject.what.startswith("image "):
        why = (subject.arch_source
               or "no dev.kdkit.torch.arch_list label: built before kdkit recorded it")
        point = point._replace(why=f"{point.why}; the image's own arch list is unknown ({why}), so "
                                   "this is the pairings' answer")
    return point


def _table_kernel_point(offer: Offer, subject: Subject, pairings: Pairings) -> Finding:
    """The kernels point from the published builds kdkit knows (before any image exists)."""
    card = offer.architecture
    cpu = subject.cpu_arch or "x86_64"
    build = (subject.pypi and pairings.pypi_build(subject.version, cpu)) or \
        pairings.build(subject.version, subject.label, cpu)
    if build is None:
        known = ", ".join(pairings.labels(subject.version, cpu))
        if known:
            where = f"torch {torch_minor(subject.version)} is published for {known}"
        elif torch_minor(subject.version) in pairings.releases():
            where = f"kdkit's pairings list no {cpu} builds of torch {torch_minor(subject.version)}"
        else:
            where = f"kdkit knows torch releases {', '.join(pairings.releases())}"
        return check_point("kernels", "unknown",
                           f"kdkit's pairings know no {subject.cpu_arch or 'x86_64'} build of "
                           f"torch {subject.version} from {subject.label} ({where})",
                           "build the image and run `kdkit check --image IMG`, which reads the "
                           "architectures of the torch installed in it; or "
                           + instead(offer, pairings, subject))
    code = build.code_for(card)
    source = f"pairings: torch {build.name}, {build.source}"
    if code is not None:
        return check_point(
            "kernels", "ok",
            f"torch {subject.version} carries {code}, which runs on {card} ({source})")
    carried = ", ".join(build.architectures) or "no GPU code"
    if not build.complete:
        return check_point("kernels", "unknown",
                           f"{card} is not among the targets kdkit knows for torch {build.name} "
                           f"({carried}); that list is partial ({source})",
                           "build the image and run `kdkit check --image IMG` (it reads the "
                           "installed torch's own list)")
    return check_point("kernels", "fail",
                       f"torch {subject.version} carries {carried}: no code for {offer.name}'s "
                       f"{card} ({source}); on the machine this is 'no kernel image is available "
                       "for execution on the device'",
                       instead(offer, pairings, subject))


def _driver_point(offer: Offer, subject: Subject, pairings: Pairings) -> Finding:
    if offer.backend == "rocm":
        return check_point("driver", "note",
                           "the host needs the amdgpu kernel driver and /dev/kfd access",
                           "ask the provider; `kdkit diagnose` checks /dev/kfd on arrival (add the "
                           "render group)")
    parsed = parse_label(subject.label)
    toolkit = parsed[1] if parsed and parsed[0] == "cuda" else None
    if toolkit is None:
        return check_point("driver", "unknown", f"the CUDA version of {subject.label} is not known",
                           "add the index to a project pairings.json")
    floor = pairings.driver_floor(toolkit, offer.architecture)
    if floor is None:
        return check_point("driver", "unknown", f"no minimum driver known for CUDA {toolkit}",
                           "add it under drivers in a project pairings.json")
    minimum, why = floor
    return check_point("driver", "note",
                       f"torch {subject.version} (CUDA {toolkit}) on {offer.name} needs an NVIDIA "
                       f"host driver >= {minimum} (the floor of {why}, pairings.json drivers)",
                       "ask the provider for the driver version; `kdkit diagnose` checks it on "
                       "arrival")


def _memory_point(project: Project, offer: Offer) -> Finding:
    """The lower bound from kdkit.json's memory section, and the pilot's measured peak, against a
    card."""
    from kdkit.order.memory import (
        DOES_NOT_FIT,
        estimate_memory,
        job_from_config,
        measured_verdict,
        pilot_peak,
    )
    from kdkit.order.plan import runs_folder

    runs = project.root / runs_folder(project)
    fix: str | None = None
    if "memory" in project.config:
        report = estimate_memory(
            job_from_config(project.config, project.root / "kdkit.json"), offer, runs)
        peak, verdict = report["pilot_peak"], report["against"]["verdict"]
        detail = (f"lower bound {report['lower_bound_gib']} GiB against {offer.memory_gb} GB per "
                  f"card: {verdict}")
    else:
        peak = pilot_peak(runs)
        verdict = None if peak is None else measured_verdict(peak, offer)
        detail = "no estimate: kdkit.json has no memory section"
        fix = ("add $.memory (parameters, dtype, train, kv) to kdkit.json or run `kdkit "
               "estimate-memory --params N --gpu NAME`; the pilot measures the real peak")
    if peak is not None:
        detail += (
            f"; pilot {peak['run_id']} measured {peak['peak_gib']} GiB on "
            f"{peak['device'] or 'an unnamed device'}")
    if verdict == DOES_NOT_FIT:
        return check_point("memory", "fail",
                           detail, "a card with more memory, a smaller batch or sequence, or "
                           "lower precision (validated on your own inputs)")
    return check_point("memory", "note", detail, fix)


def _subject_points(offer: Offer, subject: Subject, pairings: Pairings) -> list[Finding]:
    """cpu, then build, then kernels and driver: a lock for another CPU or backend is not judged
    further (its kernels would be another machine's)."""
    points = [_cpu_point(offer, subject)]
    if points[0].verdict == "fail":
        return points
    points.append(_build_point(offer, subject, pairings))
    if points[-1].verdict == "ok":
        points += [_kernel_point(offer, subject, pairings), _driver_point(offer, subject, pairings)]
    return points


# ---------------------------------------------------------------- the check


def _offers(catalog: Catalog, name: str) -> tuple[Offer, Offer, list[Finding]]:
    """The offer judged, the one whose memory is judged, and a note naming the choices: a bare name
    that fits several offers of one architecture (``V100``) is judged on their shared architecture
    and on the smallest memory among them."""
    offer, names = catalog.find_architecture(name)
    if len(names) == 1:
        return offer, offer, []
    fits = [catalog.find(n) for n in names]
    smallest = min(fits, key=lambda o: o.memory_gb)
    note = check_point("choices", "note",
                       f"{printable(name)} fits {', '.join(names)}: kernels, driver and CPU are "
                       f"judged on their shared {offer.architecture}, memory on the smallest "
                       f"({smallest.name}, {smallest.memory_gb:g} GB)",
                       "pass the exact offer as --gpu to judge its own memory")
    return offer, smallest, [note]


def check_order(project_dir: Path | None, gpu: str | None, *, backend: str | None = None,
                catalog_file: Path | None = None, pairings_file: Path | None = None,
                image: str | None = None, offline: bool = False) -> CheckReport:
    """Every point that must hold before ordering ``gpu`` for this project, each with its reason and
    fix. The kernels point reads the locked torch wheel on its index (range requests) unless
    ``offline`` (or KDKIT_OFFLINE is set), else answers from the pairings."""
    from kdkit.config.project import load_project
    from kdkit.order.extensions import blocks, extension_points

    project = load_project(project_dir)
    name = gpu if gpu is not None else project.config.get("target_gpu")
    if name is None:
        raise BadInput(
            f"{project.root / 'kdkit.json'}: $.target_gpu is null; pass --gpu NAME or set it")
    offer, smallest, choices = _offers(load_catalog(project.root, catalog_file), name)
    pairings = load_pairings(project.root, pairings_file)
    if image is not None:
        subject, labels = image_subject(image)
        chosen = project.backend(backend or labels.get("dev.kdkit.backend") or offer.backend)
    else:
        chosen = project.backend(backend or offer.backend)
    points, lock = [_backend_point(offer, chosen.name, project)], None
    if image is None:
        relative = (chosen.lock.relative_to(project.root).as_posix()
                    if chosen.lock.is_relative_to(project.root)
                    else str(chosen.lock))
        lock = parse_lock(chosen.lock) if chosen.lock.is_file() else None  # parsed once, here
        found = lock_subject(lock, relative, chosen.name, project.python, pairings)
        if isinstance(found, Subject):
            found = replace(found, wheel_lock=lock, python=project.python,
                            offline=offline
                            or environ.get("KDKIT_OFFLINE", "").strip().lower() not in OFF)
        points += [found] if isinstance(found, Finding) else _subject_points(offer, found, pairings)
    else:
        points, found = points + _subject_points(offer, subject, pairings), subject
    points += [*extension_points(project, offer, found, lock), _memory_point(project, smallest),
               *choices]
    return {"project": str(project.root), "gpu": offer.summary(), "backend": chosen.name,
            "lock": str(chosen.lock), "image": image,
            "ok": not any(blocks(p.name, p.verdict) for p in points),
            "points": [finding_json(p) for p in points]}

