"""Credentials: the one place that knows what a leaked secret looks like, and how to hide one.

Two tables, each the only copy of its fact (the third, the names of files that hold secrets, is
:data:`kdkit.core.secretnames.SECRET_FILES`):

* :data:`TOKENS`: the shapes of tokens that services issue with a recognisable prefix;
* :data:`SECRET_NAME`: the names of keys and variables that hold a secret (``password=``,
  ``api_key=``, ``AWS_SECRET_ACCESS_KEY=`` ...), whose value counts as a secret unless it is empty
  or a placeholder (``${X}``, ``$X``, ``<x>``, ``{{x}}``, ``%X%``, ``***``).

Besides the prefixed tokens, :func:`find` knows private key blocks (PEM, OpenSSH, PGP), URLs with
a password in their userinfo (``https://user:pass@host/``) and 40 random base64 characters, the
shape of an AWS secret access key (mixed case and digits, Shannon entropy of at least 4.2 bits per
character: a 40-digit git revision or a path does not pass).

:func:`redact` replaces every finding in a text by a form that keeps what it is and hides what it
holds: ``https://user:<redacted>@host/``, ``password=<redacted>``, ``<redacted: a GitHub token, 40
characters>``. `kdkit validate` names findings that way, and the two places that print an error
for a person (the click group and the probe's command runner) pass every line through it, so no
message of kdkit carries a credential shape, whatever echoed it.

The token formats come from their issuers' public documentation:

* GitHub ``ghp_ gho_ ghu_ ghs_ ghr_`` and ``github_pat_``: "Behind GitHub's new authentication token
  formats", https://github.blog/2021-04-05-behind-githubs-new-authentication-token-formats/ and
  https://github.blog/changelog/2021-03-31-authentication-token-format-updates-are-generally-available
* GitLab ``glpat-`` and the other ``gl*-`` prefixes:
  https://docs.gitlab.com/security/tokens/#token-prefixes
* Hugging Face ``hf_``: https://huggingface.co/docs/hub/security-tokens
* OpenAI ``sk-`` / ``sk-proj-``: https://platform.openai.com/docs/api-reference/authentication
* Anthropic ``sk-ant-``: https://docs.anthropic.com/en/api/overview (keys are shown as
  ``sk-ant-api03-...``)
* AWS access key IDs ``AKIA`` / ``ASIA`` / ``ABIA`` / ``ACCA`` and the 40-character secret access
  key:
  https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids
  and https://docs.aws.amazon.com/STS/latest/APIReference/API_GetAccessKeyInfo.html
* Slack ``xoxb- xoxp- xoxa- xoxe- ...``: https://api.slack.com/authentication/token-types
* Google API keys ``AIza...`` (39 characters): https://cloud.google.com/docs/authentication/api-keys
* Stripe ``sk_live_`` / ``rk_live_`` (and their ``_test_`` twins): https://docs.stripe.com/keys
* npm ``npm_``: https://github.blog/changelog/2021-09-23-npm-has-a-new-access-token-format/
* PyPI ``pypi-AgE...`` (a macaroon whose serialisation starts so): https://pypi.org/help/#apitoken
* JSON web tokens (``eyJ``, the base64url of ``{"``): RFC 7519,
  https://www.rfc-editor.org/rfc/rfc7519
* PEM private key blocks: RFC 7468, https://www.rfc-editor.org/rfc/rfc7468 (OpenSSH and PGP keys
  use the same armour)

A password belongs in an environment variable: pip expands ``${VAR}`` in requirements files
(https://pip.pypa.io/en/stable/reference/requirements-file-format/#using-environment-variables),
so ``https://user:${PIP_PASSWORD}@host/simple`` is a placeholder, never a finding.

Standard library only: the in-container side redacts its error lines too.
"""

from __future__ import annotations

import math
import re
import sys
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from kdkit.core.errors import BadInput


class _Lazy:
    """A pattern compiled on first use: these are large, and most runs of kdkit print no error and
    scan nothing, so importing this module (every command's error path does) costs no compile."""

    __slots__ = ("_compiled", "args")

    def __init__(self, *args: Any) -> None:
        self.args = args
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(*self.args)
        return self._compiled

    def match(self, text: str) -> re.Match[str] | None:
        return self.compiled.match(text)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled.fullmatch(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled.finditer(text)


# Every pattern starts at a boundary and bounds its repeats: scanning stays linear in the text's
# length, whatever a hostile value holds (a test times 20 000-character worst cases).
_START = r"(?<![A-Za-z0-9])"
_END = r"(?![A-Za-z0-9])"

# (what it is, its shape). Order breaks ties between shapes that match the same span.
TOKENS: tuple[tuple[str, _Lazy], ...] = (
    ("an Anthropic API key", _Lazy(_START + r"sk-ant-[A-Za-z0-9_-]{20,}")),
    ("an OpenAI API key",
     _Lazy(_START + r"sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z_-]*[0-9])[A-Za-z0-9_-]{20,}")),
    ("a GitHub token",
     _Lazy(_START + r"(?:gh[pousr]_[A-Za-z0-9]{36,251}|github_pat_[A-Za-z0-9_]{22,})" + _END)),
    ("a GitLab token",
     _Lazy(_START + r"gl(?:pat|dt|ptt|rt|soat|cbt|ffct|agent|imt|oas|wt)-[A-Za-z0-9_.-]{20,}")),
    ("a Hugging Face token", _Lazy(_START + r"hf_[A-Za-z0-9]{30,}" + _END)),
    ("a Slack token", _Lazy(_START + r"xox[a-z](?:\.xox[a-z])?-[A-Za-z0-9-]{10,}")),
    ("a Slack webhook URL", _Lazy(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{10,}")),
    ("a Google API key", _Lazy(_START + r"AIza[0-9A-Za-z_-]{35}" + r"(?![A-Za-z0-9_-])")),
    ("a Stripe secret key", _Lazy(_START + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}" + _END)),
    ("an npm token", _Lazy(_START + r"npm_[A-Za-z0-9]{36}" + _END)),
    ("a PyPI token", _Lazy(_START + r"pypi-AgE[A-Za-z0-9_-]{50,}")),
    ("an AWS access key ID", _Lazy(_START + r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _END)),
    ("a JSON web token",
     _Lazy(_START + r"eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*")),
)
PRIVATE_KEY = _Lazy(r"-----BEGIN (?P<kind>(?:[A-Z0-9]+ )*)PRIVATE KEY(?: BLOCK)?-----"
                         r"(?:.*?-----END (?P=kind)PRIVATE KEY(?: BLOCK)?-----|.*)", re.DOTALL)
URL_PASSWORD = _Lazy(r"(?P<head>(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://"
                     r"[^/\s:@'\"]{0,256}:)(?P<password>[^/\s@'\"]{1,256})@")
# An http(s) URL whose user part is the secret: an index token given as the user name, with no
# password or an empty one (https://TOKEN@host/simple/, https://TOKEN:@pypi.fury.io/USER/, as
# Gemfury documents it for pip).
URL_TOKEN = _Lazy(r"(?P<head>(?<![A-Za-z0-9+.-])[Hh][Tt][Tt][Pp][Ss]?://)"
                  r"(?P<token>[^/\s:@'\"]{1,256}):?@")
AWS_SECRET_SHAPE = _Lazy(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
# bits per character: of 10 000 random keys, none scored below 4.15; 40 hex digits 4.0
MIN_ENTROPY = 4.2
# Names of keys and variables that hold a secret: JSON keys in the configs, ``NAME=value`` in text.
SECRET_NAME = re.compile(
    r"(token|passw(or)?d|passphrase|secret|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credential|auth)",
    re.IGNORECASE,
)
_ASSIGNED_NAME = (r"(?:[A-Za-z0-9]{1,32}[_.-]){0,6}"
                  r"(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|"
                  r"access[_-]?key|secret[_-]?key|private[_-]?key|client[_-]?secret)")
# ``name=value`` (value quoted or bare) or ``name: "value"`` (quoted only: ``$.token: key ...`` is
# prose).
ASSIGNMENT = _Lazy(
    r"(?<![A-Za-z0-9_])(?P<name>(?i:" + _ASSIGNED_NAME + r"))(?P<close>[\"']?)"
    r"(?:(?P<eq>\s*=\s*)(?P<value>\"[^\"\n]*\"|'[^'\n]*'|(?:\$\{[^}\s]{0,128}\}"
    r"|<[^<>\n]{0,128}>|\{\{[^}\n]{0,128}\}\}|[^\s\"',;&)\]}$<{]|[$<{])+)"
    r"|(?P<colon>\s*:\s*)(?P<quoted>\"[^\"\n]*\"|'[^'\n]*'))"
)
PLACEHOLDER = _Lazy(
    r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|<[^>]*>|\{\{[^}]*\}\}|%[A-Za-z_][A-Za-z0-9_]*%"
    r"|%\([^)]*\)s"
    r"|\*+|x+|X+|\.+|(?i:null|none|true|false|changeme|redacted)"
)
AWS_SECRET = "an AWS secret access key"

# a file this large is data, not configuration: it is not read for credentials
SCANNED_BYTES = 8 << 20


@dataclass(frozen=True)
class Span:
    """Where a credential shape lies in a text: what it is, its bounds, and the text to show
    instead. A scanner's match, not a check's finding: `kdkit validate` makes config findings of
    them (kdkit.config.schemas.secret_problems)."""

    what: str
    start: int
    end: int
    redacted: str


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_enough(text: str) -> bool:
    """Mixed case and digits, spread out, and not a path (a key has few slashes, rarely at an
    end)."""
    pathlike = text.count("/") >= 3 or text.startswith("/") or text.endswith("/")
    return (not pathlike and any(c.isupper() for c in text) and any(c.islower() for c in text)
            and any(c.isdigit() for c in text) and _entropy(text) >= MIN_ENTROPY)


def is_placeholder(value: str) -> bool:
    """Whether ``value`` stands for a secret given elsewhere (``${X}``, ``<x>``, ``***``), or is
    empty."""
    return not value.strip() or PLACEHOLDER.fullmatch(value.strip()) is not None


def _label(what: str, length: int) -> str:
    return f"<redacted: {what}, {length} characters>"


def _shape(value: str) -> str | None:
    """What ``value`` is when the whole of it is one known token shape."""
    for what, pattern in TOKENS:
        if (found := pattern.match(value)) and found.end() == len(value):
            return what
    if AWS_SECRET_SHAPE.fullmatch(value) and _random_enough(value):
        return AWS_SECRET
    return None


def _candidates(text: str) -> list[tuple[int, int, Span]]:
    found: list[tuple[int, int, Span]] = []
    for order, (what, pattern) in enumerate(TOKENS):
        for match in pattern.finditer(text):
            found.append((match.start(), order, Span(what, match.start(), match.end(),
                                                        _label(what, match.end() - match.start()))))
    for match in PRIVATE_KEY.finditer(text):
        found.append((match.start(), -3, Span("a private key block", match.start(), match.end(),
                                                 "<redacted: a private key block>")))
    for match in URL_PASSWORD.finditer(text):
        if not is_placeholder(match["password"]):
            found.append((match.start(), -2,
                          Span("a password inside a URL", match.start(), match.end(),
                                  f"{match['head']}<redacted>@")))
    for match in URL_TOKEN.finditer(text):  # a token of a known shape is named by its shape instead
        if not is_placeholder(match["token"]) and _shape(match["token"]) is None:
            found.append((match.start(), -2,
                          Span("a user name or token inside a URL", match.start(), match.end(),
                                  f"{match['head']}<redacted>@")))
    for match in ASSIGNMENT.finditer(text):
        raw = match["value"] if match["value"] is not None else match["quoted"]
        value = raw[1:-1] if raw[:1] in "\"'" and len(raw) >= 2 else raw
        if is_placeholder(value):
            continue
        name = match["name"]
        shape = _shape(value)
        aws = re.search(r"aws", name, re.IGNORECASE) and re.search(r"secret", name, re.IGNORECASE)
        what = shape or (AWS_SECRET if aws else f"a secret assigned to {name}")
        shown = _label(shape, len(value)) if shape else "<redacted>"
        quote = raw[0] if raw[:1] in "\"'" else ""
        head = text[match.start():match.start("value" if match["value"] is not None else "quoted")]
        found.append(
            (match.start(), -1,
             Span(what, match.start(), match.end(), f"{head}{quote}{shown}{quote}")))
    for match in AWS_SECRET_SHAPE.finditer(text):
        if _random_enough(match.group()):
            found.append((match.start(), len(TOKENS), Span(
                f"{AWS_SECRET} (40 random characters)", match.start(), match.end(),
                _label(AWS_SECRET, 40))))
    return found


def find(text: str) -> list[Span]:
    """Every credential shape in ``text``, in order, none overlapping (the longest wins at one
    place)."""
    chosen: list[Span] = []
    for _start, _order, span in sorted(_candidates(text),
                                       key=lambda c: (c[0], -(c[2].end - c[0]), c[1])):
        if not chosen or span.start >= chosen[-1].end:
            chosen.append(span)
    return chosen


def redact(text: str) -> str:
    """``text`` with every credential shape replaced by its redacted form; the rest unchanged."""
    spans = find(text)
    if not spans:
        return text
    parts, last = [], 0
    for span in spans:
        parts += [text[last:span.start], span.redacted]
        last = span.end
    return "".join([*parts, text[last:]])


# characters past a cut redacted with what is kept: over ten times the longest bounded shape
REDACT_MARGIN = 8 << 10
# Appended where a text was cut, before finding: it closes what the cut left open, a quoted value
# (either quote) or a JSON web token's segments, so a shape that needs its end still matches up to
# the cut.
CUT_CLOSER = ".eyJAAAAAAAAAA.\"'"


def redact_head(text: str, limit: int, mark: str = "...") -> str:
    """The first ``limit`` characters of ``text`` redacted, with ``mark`` when anything was cut.

    Only what is kept is redacted, never the whole of a huge text (redaction costs in proportion to
    what it reads): ``text`` is cut ``REDACT_MARGIN`` characters past the limit, redacted, then cut
    to the limit. A credential shape that starts in the kept part and crosses the first cut is whole
    in the margin (every bounded shape is far shorter) or still matches up to the cut (a prefixed
    token, a bare ``name=value``, a private key block run to the end; a quoted value or a token's
    segments closed by CUT_CLOSER), and is replaced from its start: none of it is kept unredacted.
    """
    window = text[:limit + REDACT_MARGIN]
    cut = len(window) < len(text)
    parts, last = [], 0
    for finding in find(window + CUT_CLOSER if cut else window):
        if finding.start >= len(window):
            break
        parts += [window[last:finding.start], finding.redacted]
        last = min(finding.end, len(window))
    head = "".join([*parts, window[last:]])
    if len(head) > limit:
        return head[:limit] + mark
    return head + (mark if cut else "")


def redacting_excepthook(kind: type[BaseException], value: BaseException,
                         tb: TracebackType | None) -> None:
    """``sys.excepthook`` for kdkit's entry points: a crash's traceback, redacted (it may echo a
    value)."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))


def file_finding(path: Path, rel: str) -> str | None:
    """The first credential shape in a text file that is about to travel (into a bundle or an
    image), as ``rel:line: what (redacted)``, or None. Binary files (a NUL byte) and files over
    SCANNED_BYTES are not read: weights and data are not where a key is pasted."""
    try:
        if path.stat().st_size > SCANNED_BYTES:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return data_finding(data, rel)


def data_finding(data: bytes, rel: str) -> str | None:
    """:func:`file_finding` for a file's bytes already read (what is checked is then what
    travels)."""
    if len(data) > SCANNED_BYTES or b"\0" in data:
        return None
    return text_finding(data.decode("utf-8", "replace"), rel)


def text_finding(text: str, rel: str) -> str | None:
    """The first credential shape in a file's text already read, as ``rel:line: what (redacted)``,
    or None."""
    for number, line in enumerate(text.splitlines(), start=1):
        found = find(line)
        if found:
            return f"{rel}:{number}: {found[0].what} ({found[0].redacted})"
    return None


CREDENTIAL_FIX = ("a secret never travels in a project: put it in .env and pass it at run time "
                  "with --env-file; in requirements use ${VARIABLE} (pip expands it), e.g. "
                  "https://user:${PIP_PASSWORD}@host/simple")


def refuse_credentials_in(path: Path, rel: str, data: bytes | None = None) -> None:
    """BadInput naming the first credential shape in a file that is about to travel (redacted);
    ``data``: the file's bytes, already read (so what is checked is what travels)."""
    finding = file_finding(path, rel) if data is None else data_finding(data, rel)
    if finding is not None:
        raise BadInput(f"{finding}: a credential would travel; {CREDENTIAL_FIX}")
