"""PEP 508 environment markers, vendored: parse and evaluate ``; python_version < "3.12"``.

Standard library only, for the same reason as :mod:`kdkit.core.versions`: the
environment being inspected may not have ``packaging``. The environment itself
is a plain dict, so the host can evaluate markers for another interpreter from
the values that interpreter reported (:func:`current_environment` run there).

``extras`` and ``dependency_groups`` are sets of names, defined only where a PEP 751
lock's ``packages.marker`` is evaluated, and there the legacy ``extra`` is refused: the
only comparisons of a set are ``"name" in extras`` and ``"name" not in extras``, names
PEP 503-normalized, and any other comparison of a set is false
(https://packaging.python.org/en/latest/specifications/dependency-specifiers/#marker-comparisons).
A marker may name them when its environment defines them (``lock_file``), as the
specification says: "an error except when defined by the context interpreting the specifier".

Comparisons follow packaging's ``_eval_op`` (26.x): ``python_version``, ``python_full_version``,
``implementation_version`` and ``platform_release`` compare as PEP 440 versions when the right side
makes a valid specifier clause; any other comparison is of strings, which are not ordered.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from kdkit.core.envinfo import marker_environment
from kdkit.core.versions import InvalidVersion, clause_is_valid, compare

if TYPE_CHECKING:  # a name for annotations only: nothing to build at import
    from collections.abc import Mapping

    Environment = Mapping[str, str | frozenset[str]]

VARIABLES = (
    "implementation_name",
    "implementation_version",
    "os_name",
    "platform_machine",
    "platform_python_implementation",
    "platform_release",
    "platform_system",
    "platform_version",
    "python_full_version",
    "python_version",
    "sys_platform",
    "extra",
)
# Sets of names, defined only for the markers of a PEP 751 lock's packages (where ``extra`` is not).
SET_VARIABLES = ("extras", "dependency_groups")
_LOCK_VARIABLES = frozenset(VARIABLES).difference({"extra"}).union(SET_VARIABLES)
# Aliases PEP 345 / old setuptools still emit.
_ALIASES = {"os.name": "os_name", "sys.platform": "sys_platform",
            "platform.version": "platform_version",
            "platform.machine": "platform_machine", "platform.python_implementation":
            "platform_python_implementation",
            "python_implementation": "platform_python_implementation"}
# Compared as PEP 440 versions when the right side is a valid clause (packaging's
# MARKERS_REQUIRING_VERSION).
_VERSION_VARIABLES = {"python_version",
                      "python_full_version", "implementation_version", "platform_release"}

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'[^']*'|"[^"]*")
    | (?P<op>===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b)
    | (?P<bool>and\b|or\b)
    | (?P<paren>[()])
    | (?P<var>[A-Za-z_][A-Za-z0-9_.]*)
    )""",
    re.VERBOSE,
)


class InvalidMarker(ValueError):
    """The text is not a PEP 508 marker."""


Token = tuple[str, str]  # ("var" | "string" | "op" | "bool" | "paren", text)


class Compare(NamedTuple):
    """``left op right``; operands are ("var", name) or ("string", value)."""

    left: Token
    op: str
    right: Token


class BoolOp(NamedTuple):
    """``left and right`` / ``left or right``."""

    op: str
    left: Node
    right: Node


Node = Compare | BoolOp


def _tokenize(text: str, known: frozenset[str] | tuple[str, ...]) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise InvalidMarker(f"cannot read marker {text!r} at column {pos + 1}")
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "var":
            value = _ALIASES.get(value, value)
            if value not in known:
                raise InvalidMarker(f"unknown marker variable {value!r} in {text!r}")
        if kind == "op":
            value = " ".join(value.split())
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class _Parser:
    """Recursive descent: or_expr := and_expr ('or' and_expr)*; and_expr := atom ('and' atom)*."""

    def __init__(self, text: str, lock_file: bool) -> None:
        self.text = text
        self.tokens = _tokenize(text, _LOCK_VARIABLES if lock_file else VARIABLES)
        self.pos = 0

    def _peek(self) -> Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self, kind: str) -> str:
        token = self._peek()
        if token is None or token[0] != kind:
            found = "the end" if token is None else repr(token[1])
            raise InvalidMarker(f"marker {self.text!r}: expected {kind}, found {found}")
        self.pos += 1
        return token[1]

    def parse(self) -> Node:
        node = self._or()
        if self._peek() is not None:
            raise InvalidMarker(f"marker {self.text!r}: unexpected {self.tokens[self.pos][1]!r}")
        return node

    def _or(self) -> Node:
        return self._chain("or", self._and)

    def _and(self) -> Node:
        return self._chain("and", self._atom)

    def _chain(self, word: str, operand: Callable[[], Node]) -> Node:
        """``operand (word operand)*``, grouped from the left."""
        node = operand()
        while self._peek() == ("bool", word):
            self.pos += 1
            node = BoolOp(word, node, operand())
        return node

    def _atom(self) -> Node:
        if self._peek() == ("paren", "("):
            self.pos += 1
            node = self._or()
            self._take("paren")
            return node
        left = self._operand()
        op = self._take("op")
        return Compare(left, op, self._operand())

    def _operand(self) -> Token:
        token = self._peek()
        if token is None or token[0] not in ("var", "string"):
            found = "the end" if token is None else repr(token[1])
            raise InvalidMarker(f"marker {self.text!r}: expected a variable or a quoted string, "
                                f"found {found}")
        self.pos += 1
        return token if token[0] == "var" else ("string", token[1][1:-1])


def parse_marker(text: str, lock_file: bool = False) -> Node:
    """Parse a marker; raise InvalidMarker with the place that went wrong. ``lock_file``: a PEP 751
    ``packages.marker``, where ``extras`` and ``dependency_groups`` are known and ``extra`` is
    not."""
    return _Parser(text, lock_file).parse()


def _compare(left: str, op: str, right: str, versiony: bool) -> bool:
    """packaging's ``_eval_op``: for a version variable, when ``op right`` is a valid specifier
    clause, the PEP 440 comparison, false for a left side that is not a version (packaging 26: "an
    unparsable version now returns False"; ``platform_release`` is often "6.8.0-1015-azure");
    otherwise strings, unordered."""
    if op == "in":
        return left in right
    if op == "not in":
        return left not in right
    if versiony and clause_is_valid(op, right):
        try:
            return compare(left, op, right)
        except InvalidVersion:
            return False
    # Strings are not ordered (packaging 26, pypa/packaging#939): < and > are false, <= and >= are
    # ==.
    table = {"==": left == right, "!=": left != right, "<": False, "<=": left == right, ">": False,
             ">=": left == right}
    if op not in table:  # ~= and ===: packaging's UndefinedComparison
        raise InvalidMarker(f"operator {op!r} needs versions on both sides ({left!r}, {right!r})")
    return table[op]


def _member(op: str, left: str | frozenset[str], right: str | frozenset[str]) -> bool:
    """``"name" in extras`` / ``not in``: the one comparison of a set; every other one is false."""
    if op not in ("in", "not in") or not isinstance(left, str) or isinstance(right, str):
        return False
    found = _normalize_extra(left) in {_normalize_extra(name) for name in right}
    return found if op == "in" else not found


def _evaluate(node: Node, env: Environment) -> bool:
    if isinstance(node, BoolOp):
        if node.op == "and":
            return _evaluate(node.left, env) and _evaluate(node.right, env)
        return _evaluate(node.left, env) or _evaluate(node.right, env)
    names = [value for kind, value in (node.left, node.right) if kind == "var"]
    left, right = (env.get(v, "") if k == "var" else v for k, v in (node.left, node.right))
    if not isinstance(left, str) or not isinstance(right, str):
        return _member(node.op, left, right)
    if "extra" in names:
        left, right = _normalize_extra(left), _normalize_extra(right)
    return _compare(left, node.op, right, versiony=bool(_VERSION_VARIABLES.intersection(names)))


def _normalize_extra(value: str) -> str:
    return re.sub(r"[-_.]+", "-", value).lower()


def evaluate(marker: str, env: Environment) -> bool:
    """True when ``marker`` holds in ``env`` (a dict of the PEP 508 variables; with the sets
    ``extras`` and ``dependency_groups`` when it evaluates a PEP 751 lock's package markers)."""
    return _evaluate(parse_marker(marker, lock_file="dependency_groups" in env), env)


def current_environment() -> dict[str, str]:
    """The marker variables of the running interpreter (``extra`` empty)."""
    return {**marker_environment(), "extra": ""}
