"""Why pip inside a build failed, in one line: its first real cause, not its last line.

pip behind a TLS-intercepting proxy, or without a route to its index, ends with ``ERROR: Could not
find a version that satisfies the requirement X`` (every page it could not fetch is skipped); the
cause is an earlier ``Could not fetch URL ...: There was a problem confirming the ssl certificate:
[SSL: CERTIFICATE_VERIFY_FAILED]`` or a ``Retrying ... after connection broken by`` warning
(pypa/pip ``src/pip/_internal/index/collector.py``, ``_handle_get_simple_fail``; urllib3's retry
warning).
:func:`first_cause` finds such a line in a build's transcript and says what to do about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

TLS = re.compile(r"CERTIFICATE_VERIFY_FAILED|SSLCertVerificationError|certificate verify failed")
UNREACHABLE = re.compile(r"Failed to establish a new connection|Name or service not known|"
                         r"Temporary failure in name resolution|Connection refused|Network is "
                         r"unreachable|"
                         r"No route to host|timed out")
URL = re.compile(r"https?://[^\s'\"]+")
FIX_TLS = ("pip inside the build could not verify the index's TLS certificate "
           "(CERTIFICATE_VERIFY_FAILED: a TLS-intercepting proxy?){url}; pass that proxy's CA with "
           "--ca-bundle FILE, or build offline with --wheelhouse DIR (kdkit wheelhouse)")
FIX_NET = ("pip inside the build could not reach its index{url} ({what}); check the network the "
           "build uses (--network host), or build offline with --wheelhouse DIR (kdkit wheelhouse)")


def first_cause(lines: Iterable[str]) -> str | None:
    """The first line saying why pip could not fetch, as what to do; None when none does."""
    for line in lines:
        if "Could not fetch URL" not in line and "Retrying" not in line \
                and "connection broken" not in line:
            continue
        found = URL.search(line)
        url = f" ({found.group(0).rstrip(':')})" if found else ""
        if TLS.search(line):
            return FIX_TLS.format(url=url)
        unreachable = UNREACHABLE.search(line)
        if unreachable:
            return FIX_NET.format(url=url, what=unreachable.group(0))
    return None
