"""One member of a zip read from its end, through byte ranges, never the whole file: the
end-of-central-directory record (and the ZIP64 locator and record when present), the central
directory, then the member's local header and data, inflated and held to its CRC-32 and size.

The ranges come from a :class:`Ranges` (:class:`kdkit.lock.wheelarch.RangeReader` reads them over
HTTP). Each read is bounded (:data:`MAX_TAIL`, :data:`MAX_DIRECTORY`, :data:`MAX_MEMBER`), and
whatever does not fit the format is an :class:`Unread` with its reason (one line); a structure cut
short raises :class:`struct.error`, which the caller names.
"""

from __future__ import annotations

import struct
import zlib
from typing import Protocol

# the EOCD with the longest comment, the ZIP64 locator and record
MAX_TAIL = (1 << 16) + 22 + 20 + 56
MAX_DIRECTORY = 16 << 20  # bytes: a real torch wheel's central directory is a few MB
MAX_MEMBER = 1 << 20  # bytes, compressed and uncompressed: the header is a few kB
_EOCD = struct.Struct("<4s4H2LH")
_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")


class Unread(Exception):
    """Why the wheel could not be read (one line)."""


class Ranges(Protocol):
    """Byte ranges of one file: its last bytes, a span of it, its size once an answer gave it."""

    size: int | None

    def tail(self, length: int) -> tuple[int, bytes]: ...

    def read(self, start: int, length: int) -> bytes: ...


def _directory_place(reader: Ranges, tail_at: int, tail: bytes) -> tuple[int, int]:
    """(offset, size) of the central directory, from the EOCD (and the ZIP64 record when it says
    so)."""
    at = tail.rfind(b"PK\x05\x06", 0, max(0, len(tail) - _EOCD.size + 4))
    if at < 0:
        raise Unread("no end-of-central-directory record: not a zip file")
    _sig, _disk, _cd_disk, _here, entries, size, offset, _comment = _EOCD.unpack_from(tail, at)
    if 0xFFFF not in (entries, _here) and 0xFFFFFFFF not in (size, offset):
        return offset, size
    if at < _LOCATOR.size or tail[at - _LOCATOR.size:at - _LOCATOR.size + 4] != b"PK\x06\x07":
        raise Unread("a ZIP64 archive without its ZIP64 end-of-central-directory locator")
    _sig, _disk, record_at, _disks = _LOCATOR.unpack_from(tail, at - _LOCATOR.size)
    if tail_at <= record_at <= tail_at + len(tail) - _EOCD64.size:
        record = tail[record_at - tail_at:record_at - tail_at + _EOCD64.size]
    else:
        record = reader.read(record_at, _EOCD64.size)
    if record[:4] != b"PK\x06\x06":
        raise Unread("the ZIP64 locator points at no ZIP64 end-of-central-directory record")
    fields = _EOCD64.unpack(record)
    return fields[9], fields[8]


def _zip64_extra(extra: bytes, needed: list[bool]) -> list[int]:
    """The ZIP64 extended-information values (uncompressed, compressed, offset) for the fields that
    need them."""
    at = 0
    while at + 4 <= len(extra):
        kind, size = struct.unpack_from("<HH", extra, at)
        if kind == 1:
            values = [struct.unpack_from("<Q", extra, at + 4 + 8 * i)[0]
                      for i in range(min(sum(needed), size // 8))]
            if len(values) < sum(needed):
                break
            return values
        at += 4 + size
    raise Unread("a ZIP64 member without its extended-information field")


def find_member(directory: bytes, name: str) -> tuple[int, int, int, int, int]:
    """(local header offset, compressed size, uncompressed size, method, crc32) of ``name``."""
    wanted, at = name.encode("utf-8"), 0
    while at < len(directory):
        fields = (_CENTRAL.unpack_from(directory, at) if at + _CENTRAL.size <= len(directory)
                  else (b"",))
        if fields[0] != b"PK\x01\x02":
            raise Unread(f"the central directory is damaged at byte {at}")
        flags, method, crc, compressed, size = fields[3], fields[4], fields[7], fields[8], fields[9]
        name_len, extra_len, comment_len, offset = fields[10], fields[11], fields[12], fields[16]
        start = at + _CENTRAL.size
        if directory[start:start + name_len] == wanted:
            if flags & 1:
                raise Unread(f"{name} is encrypted")
            big = [size == 0xFFFFFFFF, compressed == 0xFFFFFFFF, offset == 0xFFFFFFFF]
            if any(big):
                values = iter(
                    _zip64_extra(directory[start + name_len:start + name_len + extra_len], big))
                size, compressed, offset = (next(values) if b else v
                                            for b,
                                            v in zip(big, (size, compressed, offset), strict=True))
            return offset, compressed, size, method, crc
        at = start + name_len + extra_len + comment_len
    raise Unread(f"the wheel has no {name}")


def read_member(reader: Ranges, name: str) -> bytes:
    """The uncompressed bytes of ``name``: the tail, the central directory, the member (2 to 4
    requests)."""
    tail_at, tail = reader.tail(MAX_TAIL)
    offset, size = _directory_place(reader, tail_at, tail)
    if size > MAX_DIRECTORY:
        raise Unread(
            f"a central directory of {size} bytes, over kdkit's bound of {MAX_DIRECTORY >> 20} MiB")
    if tail_at <= offset and offset + size <= tail_at + len(tail):
        directory = tail[offset - tail_at:offset - tail_at + size]
    else:
        directory = reader.read(offset, size)
    local_at, compressed, length, method, crc = find_member(directory, name)
    if compressed > MAX_MEMBER or length > MAX_MEMBER:
        raise Unread(
            f"{name} is {max(compressed, length)} bytes, over kdkit's bound of {MAX_MEMBER >> 10} "
            "KiB")
    # the local header, its name and (usually) its extra field
    slack = 30 + len(name.encode("utf-8")) + 1024
    chunk = reader.read(local_at, min(slack + compressed, (reader.size or 0) - local_at))
    if chunk[:4] != b"PK\x03\x04":
        raise Unread(f"no local header where the central directory puts {name}")
    fields = _LOCAL.unpack_from(chunk)
    start = _LOCAL.size + fields[9] + fields[10]
    if start + compressed > len(chunk):
        chunk += reader.read(local_at + len(chunk), start + compressed - len(chunk))
    return _inflate(chunk[start:start + compressed], method, length, crc, name)


def _inflate(data: bytes, method: int, length: int, crc: int, name: str) -> bytes:
    if method == 0:
        plain = data
    elif method == 8:
        try:
            plain = zlib.decompressobj(-15).decompress(data, MAX_MEMBER + 1)
        except zlib.error as exc:
            raise Unread(f"{name} does not inflate ({exc})") from None
    else:
        raise Unread(f"{name} is compressed with method {method}, not stored or deflate")
    if len(plain) != length or zlib.crc32(plain) != crc:
        raise Unread(f"{name} does not match its CRC-32 and size in the central directory")
    return plain
