"""PEP 440 versions, vendored: the part kdkit needs to compare pins and evaluate markers.

Standard library only. The inspected environment may not have ``packaging``, and
kdkit must never depend on what it is inspecting, so this is a small,
self-contained subset: parsing, normalization, ordering, and the specifier
operators that appear in PEP 508 markers (``<``, ``<=``, ``>``, ``>=``,
``==`` with ``.*``, ``!=``, ``~=``, ``===``), with PEP 440's exclusive ``<V`` and ``>V``
(no pre-release of V below it, no post-release or local version of V above it).
pypa/packaging is the reference: tests/core/test_packaging_vectors.py runs its own test vectors
against this module with packaging as the oracle, and lists where kdkit deliberately differs.
"""

from __future__ import annotations

import re
from functools import total_ordering

# The version itself is ASCII (``(?a:...)``, as packaging's VERSION_PATTERN): without it, IGNORECASE
# lets a dotless "ı" match "i" and a Kelvin sign match "k" ("1.2.3prevıew1" was read, then failed on
# its name). The whitespace around it is any (str.strip's, as packaging's ``\s*`` outside that
# group).
_BODY = r"""
    v?(?a:
    (?:(?P<epoch>[0-9]+)!)?
    (?P<release>[0-9]+(?:\.[0-9]+)*)
    (?:[-_.]?(?P<pre_l>alpha|a|beta|b|preview|pre|c|rc)[-_.]?(?P<pre_n>[0-9]+)?)?
    (?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?
    (?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?
    (?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?
    )"""
_VERSION = re.compile(r"^\s*" + _BODY + r"\s*$", re.VERBOSE | re.IGNORECASE)
_PRE_NAMES = {"a": "a", "alpha": "a", "b": "b", "beta": "b",
              "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}


class InvalidVersion(ValueError):
    """The text is not a PEP 440 version."""


def _local_key(part: str) -> tuple[int, int | str]:
    # PEP 440: numeric segments sort after alphanumeric ones and compare as numbers.
    return (1, int(part)) if part.isdigit() else (0, part)


@total_ordering
class Version:
    """A parsed PEP 440 version; equality and order follow the PEP (``1.0 == 1.0.0``).

    A plain class, not a dataclass: importing dataclasses costs the in-container check
    more start-up time than all of its work on a hundred distributions."""

    __slots__ = ("dev", "epoch", "local", "post", "pre", "release")

    def __init__(self, epoch: int, release: tuple[int, ...], pre: tuple[str, int] | None,
                 post: int | None,
                 dev: int | None, local: str | None) -> None:
        self.epoch, self.release, self.pre, self.post, self.dev, self.local = (
            epoch, release, pre, post, dev, local)

    def __repr__(self) -> str:
        return f"Version({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _VERSION.match(text)
        if match is None:
            raise InvalidVersion(f"{text!r} is not a PEP 440 version")
        g = match.groupdict()
        try:
            pre = (_PRE_NAMES[g["pre_l"].lower()], int(g["pre_n"] or 0)) if g["pre_l"] else None
            post_n = g["post_n1"] or g["post_n2"]
            post = int(post_n or 0) if (g["post_l"] or g["post_n1"]) else None
            dev = int(g["dev_n"] or 0) if g["dev_l"] else None
            release = tuple(int(p) for p in g["release"].split("."))
            epoch = int(g["epoch"] or 0)
            # packaging: a local segment of digits is an integer, shown without leading zeros (+01
            # -> +1)
            local = ".".join(str(int(p)) if p.isdigit() else p
                             for p in re.split(r"[-_.]",
                                               g["local"].lower())) if g["local"] else None
        except ValueError:  # a number past Python's limit on the digits int() reads (sys.int_info)
            raise InvalidVersion(
                f"{text[:40]!r}...: a number in it is too long to be a version") from None
        return cls(epoch, release, pre, post, dev, local)

    @property
    def public(self) -> str:
        """The normalized version without its local label (``2.8.0+cu128`` -> ``2.8.0``)."""
        text = (f"{self.epoch}!" if self.epoch else "") + ".".join(map(str, self.release))
        if self.pre:
            text += f"{self.pre[0]}{self.pre[1]}"
        if self.post is not None:
            text += f".post{self.post}"
        if self.dev is not None:
            text += f".dev{self.dev}"
        return text

    @property
    def base(self) -> Version:
        """The version without pre, post, dev and local parts."""
        return Version(self.epoch, self.release, None, None, None, None)

    def public_version(self) -> Version:
        return Version(self.epoch, self.release, self.pre, self.post, self.dev, None)

    def __str__(self) -> str:
        return self.public + (f"+{self.local}" if self.local else "")

    def _key(self) -> tuple[object, ...]:
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        # Sort order of PEP 440: dev-only releases first, then pre, then final, then post.
        if self.pre is None and self.post is None and self.dev is not None:
            pre: tuple[object, ...] = (-1, "")
        elif self.pre is None:
            pre = (1, "")
        else:
            pre = (0, self.pre[0], self.pre[1])
        post = (-1,) if self.post is None else (0, self.post)
        dev = (1,) if self.dev is None else (0, self.dev)
        local = () if self.local is None else tuple(_local_key(p) for p in self.local.split("."))
        return (self.epoch, tuple(release), pre, post, dev, local)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Version) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __lt__(self, other: Version) -> bool:
        return self._key() < other._key()


def _prefix_match(version: Version, wanted: Version) -> bool:
    """``==X.Y.*``: the public release starts with X.Y (zero-padded, PEP 440), in the same epoch."""
    n = len(wanted.release)
    have = version.release + (0,) * max(0, n - len(version.release))
    return version.epoch == wanted.epoch and have[:n] == wanted.release


def _same_release(a: Version, b: Version) -> bool:
    return a.epoch == b.epoch and a.base == b.base


def _less_than(version: Version, spec: Version) -> bool:
    """``<V`` (PEP 440 exclusive ordered comparison): below V, and no pre-release of V unless V is
    one (``<3.14`` excludes 3.14.0rc2: packaging's bound is V.dev0)."""
    if spec.pre is not None or spec.dev is not None:
        return version < spec
    return version < Version(spec.epoch, spec.release, None, spec.post, 0, None)


def _greater_than(version: Version, spec: Version) -> bool:
    """``>V``: above V, and no post-release nor local version of V unless V is a post-release (then
    no local of it); for a dev V, no local of it."""
    mine = version.public_version()
    if not mine > spec:
        return False
    if spec.dev is not None or spec.post is not None:
        return True
    return not (_same_release(mine, spec) and mine.pre == spec.pre)


def _compatible(version: Version, spec: Version, spec_text: str) -> bool:
    """``~=V.N``: ``>=V.N, ==V.*``, epoch kept (``~=1!2.0`` is ``>=1!2.0, ==1!2.*``)."""
    if len(spec.release) < 2:
        raise InvalidVersion(f"~={spec_text}: needs at least two release segments")
    prefix = Version(spec.epoch, spec.release[:-1], None, None, None, None)
    return version.public_version() >= spec and _prefix_match(version, prefix)


def compare(version_text: str, op: str, spec_text: str) -> bool:
    """Evaluate ``version op spec`` as a PEP 440 specifier clause; raise InvalidVersion."""
    if op == "===":  # packaging: the version as given, the spec without its surrounding blanks
        return version_text.lower() == spec_text.strip().lower()
    version = Version.parse(version_text)
    spec_text = spec_text.strip()  # packaging strips the clause's blanks before it looks for .*
    if op in ("==", "!=") and spec_text.endswith(".*"):
        matched = _prefix_match(version, Version.parse(spec_text[:-2]))
        return matched if op == "==" else not matched
    spec = Version.parse(spec_text)
    if op in ("==", "!="):
        # A spec without a local label matches any local label of that version.
        mine = version if spec.local else version.public_version()
        return (mine == spec) if op == "==" else (mine != spec)
    if op == "~=":
        return _compatible(version, spec, spec_text)
    if op == "<":
        return _less_than(version, spec)
    if op == ">":
        return _greater_than(version, spec)
    mine = version.public_version()
    if op == "<=":
        return mine <= spec
    if op == ">=":
        return mine >= spec
    raise InvalidVersion(f"unknown version operator {op!r}")


_CLAUSE_FORMS = {
    "==": r"(?:{release}\.\*|{version}(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?)",
    "~=": r"(?:v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)+{tail})",
    "<": r"{version}",
}


def clause_is_valid(op: str, spec_text: str) -> bool:
    """Whether ``op spec_text`` is a clause packaging's ``Specifier`` accepts: a local label and
    ``.*`` only with ``==``/``!=`` (``.*`` right after the release), two release segments at least
    for ``~=``, and ``===`` takes any text without blanks, ``;`` or ``)``."""
    if op == "===":
        return re.fullmatch(r"\s*[^\s;)]+\s*", spec_text) is not None
    tail = r"(?:[-_.]?(?:alpha|a|beta|b|preview|pre|c|rc)[-_.]?[0-9]*)?" \
        r"(?:-[0-9]+|[-_.]?(?:post|rev|r)[-_.]?[0-9]*)?(?:[-_.]?dev[-_.]?[0-9]*)?"
    release = r"v?(?:[0-9]+!)?[0-9]+(?:\.[0-9]+)*"
    form = {"==": "==", "!=": "==", "~=": "~=", "<": "<", ">": "<", "<=": "<", ">=": "<"}.get(op)
    if form is None:
        return False
    pattern = _CLAUSE_FORMS[form].format(release=release, version=release + tail, tail=tail)
    return re.fullmatch(r"\s*(?ai:" + pattern + r")\s*", spec_text) is not None


def specifier_clauses(text: str) -> list[tuple[str, str]]:
    """The ``(operator, version)`` clauses of a PEP 440 specifier set (``>=3.10, <4``,
    ``==3.12.*``), each checked; raise InvalidVersion naming the clause that is not one.
    https://packaging.python.org/en/latest/specifications/version-specifiers/"""
    clauses = []
    for piece in text.split(","):
        # compiled on first use, not import
        match = re.match(r"^\s*(===|==|!=|~=|<=|>=|<|>)\s*(\S+)\s*$", piece)
        if match is None:
            raise InvalidVersion(
                f"{piece.strip()!r} is not a version specifier (expected e.g. >=3.10)")
        op, version = match.groups()
        if op != "===":
            compare("0", op, version)  # parses the version, and refuses ~=3 (one segment)
        if not clause_is_valid(op, version):  # a local label or .* where PEP 440 allows none
            raise InvalidVersion(f"{piece.strip()!r} is not a version specifier (a +local label or "
                                 ".* only with == and !=, .* right after the release)")
        clauses.append((op, version))
    return clauses


def satisfies(version_text: str, specifiers: str) -> bool:
    """Whether ``version_text`` meets every clause of the specifier set ``specifiers``; raise
    InvalidVersion."""
    return all(compare(version_text, op, spec) for op, spec in specifier_clauses(specifiers))
