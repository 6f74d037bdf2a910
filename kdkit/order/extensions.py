"""`kdkit check`'s extension points: every extension kdkit.json lists and every one the lock pins,
judged against the offer with the facts of kdkit/data/extensions.json (kdkit.facts.extensions).

Each becomes a point named ``extension <name>``: ok, fail with the reason, note, or unknown. An
extension kdkit has no facts for is unknown ("your diagnose will import it on the machine"), never
ok. An unknown extension does not stop the check (exit 0, the summary names it): diagnose proves it
on arrival. A failing one does (exit 1).
"""

from __future__ import annotations

from kdkit.config.project import Project
from kdkit.core.finding import Finding
from kdkit.core.lockfile import Lock
from kdkit.facts.catalog import Offer
from kdkit.facts.extensions import (
    Extension,
    ExtensionFacts,
    Verdict,
    judge,
    judge_pair,
    label_verdict,
    load_extension_facts,
)
from kdkit.order.checkmodel import Subject, check_point

PREFIX = "extension "
DIAGNOSE = "your diagnose will import it on the machine"


def blocks(name: str, status: str) -> bool:
    """Whether a point stops the order: a fail, or an unknown that is not an extension's."""
    return status == "fail" or (status == "unknown" and not name.startswith(PREFIX))


def _lock_versions(lock: Lock | None, python: str, facts: ExtensionFacts) -> dict[str, str]:
    """{extension name: locked version (its local label included)} of the packages the parsed lock
    pins for the image (None: an image is judged, or there is no lock)."""
    from kdkit.facts.platforms import image_environment

    if lock is None:
        return {}
    environment = image_environment(python, lock.header.get("platform", ""))
    found: dict[str, str] = {}
    for key in lock.candidates:
        ext = facts.by_package(key)
        pin = lock.pin_for(key, environment) if ext is not None else None
        if ext is not None and pin is not None and pin.version:
            found[ext.name] = pin.version
    return found


def _verdict(ext: Extension, offer: Offer, subject: Subject, pinned: str | None) -> Verdict:
    labelled = label_verdict(ext.name, pinned, subject.version, subject.label) if pinned else None
    if labelled is not None:
        return labelled
    version = pinned.partition("+")[0] if pinned else None
    if ext.torch_pairs:
        return judge_pair(ext, subject.version, version)
    from kdkit.core.builds import parse_label

    parsed = parse_label(subject.label)
    toolkit = parsed[1] if parsed is not None and parsed[0] == offer.backend else None
    return judge(ext, offer.backend, offer.architecture, version, toolkit)


def _point(ext: Extension, offer: Offer, subject: Subject,
           version: str | None, where: str) -> Finding:
    verdict = _verdict(ext, offer, subject, version)
    detail = verdict.reason
    if version is None and not ext.torch_pairs:
        detail += f"; {where} pins no {ext.name}, so its release is not known"
    fix: str | None = None
    if verdict.status == "unknown":
        detail += f"; {DIAGNOSE}"
        fix = (f"pin {ext.name} in requirements/base.in and re-lock, or let `kdkit diagnose` prove "
               "it on arrival (kdkit.json extensions)")
    elif verdict.status == "fail":
        fix = (f"choose a card {ext.name} supports, or a release of {ext.name} that supports "
               f"{offer.name} ({offer.architecture}), then `kdkit lock`")
    return check_point(PREFIX + ext.name, verdict.status, detail, fix)


def _unknown_module(module: str) -> Finding:
    return check_point(PREFIX + module, "unknown", f"no facts for {module}; {DIAGNOSE}",
                       "`kdkit diagnose` on arrival imports it (and calls its smoke function when "
                       "kdkit.json names one)")


def extension_points(project: Project, offer: Offer, subject: Subject | Finding,
                     lock: Lock | None) -> list[Finding]:
    """One point per extension kdkit.json lists or the parsed ``lock`` pins (None when an image is
    judged), each judged once; none when the lock itself failed (``subject`` is that failing
    point)."""
    if isinstance(subject, Finding):
        return []
    where = subject.what
    facts = load_extension_facts()
    versions = _lock_versions(lock, project.python, facts)
    points: dict[str, Finding] = {}
    for item in project.extensions:
        module = str(item["module"])
        ext = facts.by_module(module)
        if ext is None:
            points.setdefault(module, _unknown_module(module))
        else:
            points.setdefault(ext.name, _point(ext, offer, subject, versions.get(ext.name), where))
    for name, version in versions.items():
        points.setdefault(name, _point(facts.extensions[name], offer, subject, version, where))
    return list(points.values())
