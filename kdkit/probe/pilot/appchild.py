"""The application's own process: the pilot's diagnose and the app's ``predict`` run here, never in
the harness.

Whatever the app does in this process (returns, raises anything, calls ``sys.exit`` or
``os._exit``, crashes the interpreter or a CUDA context, is killed by the out-of-memory killer,
hangs) the harness in the parent process keeps its run folder, its accounting and its verdict:
see kdkit/probe/pilot/supervisor.py, the other end of the pipes.

The wire: each message is a frame, 12 bytes of lengths (``>IQ``: header, payload), a JSON
header and raw payload bytes. Requests come on this process's stdin, replies go to its stdout;
before the app is imported, fd 1 is pointed at stderr, so whatever the app prints lands in the
log and never in a reply (or in ``kdkit pilot --json``). Answers travel as JSON: values JSON
cannot carry (objects, tensors, NaN) are sent as their short repr, marked as such, so the parent
never unpickles anything the app made.

Standard library only (plus torch, imported by diagnose and by the app).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import struct
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from kdkit.core.runfolder import BYTES, DEVICE
from kdkit.probe.pilot.harness import short_text

FRAME = struct.Struct(">IQ")
LIST_DEPTH = 4  # nesting of lists carried as lists in a tagged answer (a vector is one)
PR_SET_PDEATHSIG = 1

if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Literal, NotRequired, TypedDict

    class ErrorReply(TypedDict):
        """The exception predict raised ("raised"), or the one that ends the app's process."""

        op: Literal["raised", "fatal"]
        type: str
        message: str
        code: int | str | None

    class AnswersReply(TypedDict):
        """predict's answers that are not plain JSON: not a list, or each value tagged."""

        op: Literal["answers"]
        not_list: NotRequired[str]
        tagged: NotRequired[list[list[Any]]]

    class DiagnosedReply(TypedDict):
        """The diagnose's report, as the app's process ran it."""

        op: Literal["diagnosed"]
        report: Mapping[str, Any]

    class LoadReply(TypedDict):
        """The entry imported ("loaded"), or why it cannot be ("entry_error")."""

        op: Literal["loaded", "entry_error"]
        message: NotRequired[str]

    class PeakReply(TypedDict):
        """The app process's peak memory (see :func:`peak_memory`)."""

        op: Literal["peak"]
        memory: dict[str, str | int]

    Reply = ErrorReply | AnswersReply | DiagnosedReply | LoadReply | PeakReply


# ---------------------------------------------------------------- the wire


def frame(header: Mapping[str, Any] | bytes, payload_size: int = 0) -> bytes:
    """One message's lengths and header (``header`` already encoded when it is bytes); its
    ``payload_size`` bytes of payload are sent after it as they are, never copied into one
    message."""
    data = header if isinstance(header, bytes) else encode(header)
    return FRAME.pack(len(data), payload_size) + data


def encode(message: Mapping[str, Any]) -> bytes:
    """JSON with finite numbers; a report holding NaN (a failed measurement) is sent with null
    there."""
    try:
        return json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError):
        return json.dumps(_plain(message), separators=(",", ":"), allow_nan=False).encode()


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return short_text(value)


def _read_exactly(stream: IO[bytes], size: int) -> bytearray | None:
    """``size`` bytes read into one buffer made once (never chunks joined: a big batch is held
    once)."""
    buffer = bytearray(size)
    with memoryview(buffer) as view:
        got = 0
        while got < size:
            # a raw FileIO: blocks, never None
            count = stream.readinto(view[got:])  # type: ignore[attr-defined]
            if not count:
                return None
            got += count
    return buffer


def read_frame(stream: IO[bytes]) -> tuple[dict[str, Any], bytearray] | None:
    """The next request, or None at end of input (the supervisor is gone or done)."""
    head = _read_exactly(stream, FRAME.size)
    if head is None:
        return None
    header_size, payload_size = FRAME.unpack(head)
    header, payload = _read_exactly(stream, header_size), _read_exactly(stream, payload_size)
    if header is None or payload is None:
        return None
    message: dict[str, Any] = json.loads(header)
    return message, payload


# ---------------------------------------------------------------- answers as data




def _value(value: Any, depth: int = 0) -> list[Any]:
    """One tagged value: ``["v", scalar]``; ``["j", data]`` for a dict or list that is plain JSON;
    ``["f", "nan"|"inf"|"-inf"]`` (named, so a vector's NaN is its
    reason); ``["l", [tagged...]]`` for a list, or an array's ``tolist()`` (numpy, torch); else its
    repr (a tuple's too, as JSON-less answers always were)."""
    if value is None or isinstance(value, (bool, int, str)) \
            or (isinstance(value, float) and math.isfinite(value)):
        return ["v",
                value if type(value) in (bool, int, float, str, type(None)) else _scalar(value)]
    # plain JSON data goes as it is, whatever its neighbours in the batch are
    if type(value) in (dict, list):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return ["j", value]
    if isinstance(value, float):
        return ["f", repr(float(value))]
    if depth < LIST_DEPTH and not isinstance(value, list) \
            and callable(getattr(value, "tolist", None)):
        try:
            value = value.tolist()
        except Exception:
            return ["r", short_text(value)]
        if not isinstance(value, list):
            return _value(value, LIST_DEPTH)  # a 0-d array's number
    if isinstance(value, list) and depth < LIST_DEPTH:
        return ["l", [_value(item, depth + 1) for item in value]]
    return ["r", short_text(value)]


def _scalar(value: Any) -> Any:
    """A subclass of a JSON scalar, as the scalar (a str subclass is a str to the accounting)."""
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def encode_answers(answers: Any) -> AnswersReply | bytes:
    """What predict returned, as the reply the parent classifies.

    A list of dicts that JSON carries (the usual case) goes as it is, encoded once; anything else
    goes tagged, each value ``["v", scalar]`` or ``["r", repr]``, each dict answer ``["d", {key:
    value}]``.
    """
    if not isinstance(answers, list):
        return {"op": "answers", "not_list": type(answers).__name__}
    if all(type(a) is dict for a in answers):
        try:
            plain = json.dumps(answers, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            pass
        else:
            return b'{"op":"answers","plain":' + plain.encode() + b"}"
    tagged = []
    for answer in answers:
        if isinstance(answer, dict):
            tagged.append(["d", {k: _value(v) for k, v in answer.items() if isinstance(k, str)}])
        else:
            tagged.append(_value(answer))
    return {"op": "answers", "tagged": tagged}


# ---------------------------------------------------------------- serving


def prctl(option: int, value: int = 0, *, read: bool = False) -> int | None:
    """Linux prctl(2) through ctypes; None where there is none. With ``read``, the int it writes
    back."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if read:
            flag = ctypes.c_int(0)
            return int(flag.value) if libc.prctl(option, ctypes.byref(flag), 0, 0, 0) == 0 else None
        return int(libc.prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when the supervisor dies (even by SIGKILL), so an app
    holding a GPU never outlives the pilot that started it."""
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if os.getppid() != parent:  # the supervisor died before the request took effect
        os._exit(1)


def _items(header: dict[str, Any], payload: bytearray) -> list[dict[str, Any]]:
    """The batch's items, each value made from its part of ``payload`` (which is then let go: the
    app's process holds each input once while the app runs): a text decoded, bytes as they are,
    records json-decoded from their canonical bytes (the batch's in one call); each with its input's
    sha256 (the header's ``sha256``: 64 hex digits an item, in order) and, for the file output kind,
    its out_dir."""
    kind, digests, ids = header.get("kind", "text"), header.get("sha256", ""), header["ids"]
    parts, start = [], 0
    with memoryview(payload) as view:
        try:
            for size in header["sizes"]:
                parts.append(view[start:start + size])
                start += size
            values: list[Any] = (json.loads(b"[" + b",".join(parts) + b"]") if kind == "record" else
                                 [bytes(part) for part in parts] if kind == "bytes" else
                                 [str(part, "utf-8") for part in parts])
        finally:
            for part in parts:
                part.release()
    payload.clear()
    items = [{"id": ident, kind: value, "sha256": digests[64 * index:64 * index + 64]}
             for index, (ident, value) in enumerate(zip(ids, values, strict=True))]
    out_dirs = header.get("out_dirs")
    if isinstance(out_dirs, list):  # the file output kind: where each item's files go
        for item, out_dir in zip(items, out_dirs, strict=True):
            if out_dir is not None:
                item["out_dir"] = out_dir
    return items


def _error_reply(op: Literal["raised", "fatal"], exc: BaseException) -> ErrorReply:
    try:
        said = str(exc)
    except Exception:
        said = ""
    code = getattr(exc, "code", None) if isinstance(exc, SystemExit) else None
    return {"op": op, "type": type(exc).__name__, "message": said[:2000],
            "code": code if code is None or isinstance(code, int) else str(code)[:200]}


class Server:
    """The request loop: diagnose, load the entry, predict batch after batch, report peak memory."""

    def __init__(self, requests: IO[bytes], replies: IO[bytes]) -> None:
        self.requests, self.replies = requests, replies
        self.predict: Callable[[list[dict[str, Any]]], Any] | None = None
        self.device = "cpu"

    def reply(self, header: Reply | bytes) -> None:
        self.replies.write(frame(header))

    def serve(self) -> None:
        handlers: dict[Any, Callable[[dict[str, Any], bytearray], Reply | bytes]] = {
            "predict": self.run_predict, "diagnose": self.diagnose, "load": lambda header,
            _: self.load(header),
            "peak": lambda _header, _payload: {"op": "peak", "memory": peak_memory(self.device)}}
        while (request := read_frame(self.requests)) is not None:
            header, payload = request
            handler = handlers.get(header.get("op"))
            if handler is None:
                return
            self.reply(handler(header, payload))

    def diagnose(self, header: dict[str, Any], _payload: bytearray) -> DiagnosedReply:
        from kdkit.probe.diagnose.runner import run_diagnose

        return {"op": "diagnosed",
                "report": run_diagnose(header["expect"], project=_path(header.get("project")))}

    def load(self, header: dict[str, Any]) -> LoadReply:
        from pathlib import Path

        from kdkit.core.errors import KdkitError
        from kdkit.probe.pilot.harness import load_entry, set_device, with_params

        self.device = header["device"]
        set_device(self.device)
        try:
            self.predict = with_params(load_entry(Path(header["root"]), header["entry"]),
                                       header.get("params"))
        except KdkitError as exc:
            return {"op": "entry_error", "message": str(exc)}
        except BaseException as exc:  # the import itself exited or raised something harsher
            self.reply(_error_reply("fatal", exc))
            raise SystemExit(3) from None
        _reset_peak(self.device)
        return {"op": "loaded"}

    def run_predict(self, header: dict[str, Any],
                    payload: bytearray) -> ErrorReply | AnswersReply | bytes:
        assert self.predict is not None, "predict before load"
        items = _items(header, payload)
        try:
            answers = self.predict(items)
        except Exception as exc:
            return _error_reply("raised", exc)
        except BaseException as exc:  # sys.exit, KeyboardInterrupt, a BaseException subclass: fatal
            self.reply(_error_reply("fatal", exc))
            raise SystemExit(3) from None
        return encode_answers(answers)


def _path(value: Any) -> Any:
    from pathlib import Path

    return Path(value) if isinstance(value, str) else None


def _reset_peak(device: str) -> None:
    torch = sys.modules.get("torch")
    if torch is not None and device != "cpu" and torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def peak_memory(device: str) -> dict[str, str | int]:
    """torch's peak allocation on the GPU the app used; the app process's peak RSS on the CPU."""
    import resource

    torch = sys.modules.get("torch")
    if torch is not None and device != "cpu" and torch.cuda.is_available():
        return {DEVICE: device, "kind": "torch.cuda.max_memory_allocated",
                BYTES: int(torch.cuda.max_memory_allocated())}
    return {DEVICE: "cpu", "kind": "peak RSS of the app process (ru_maxrss)",
            BYTES: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def main(parent: int) -> None:
    """Entry of ``python -c`` (see supervisor.child_command): take the pipes, then serve. ``parent``
    is the supervisor's PID (not "whoever is PID 1": the pilot itself is PID 1 in `docker run IMAGE
    kdkit pilot`)."""
    requests = os.fdopen(os.dup(0), "rb", buffering=0)
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)  # the app's prints go to the log, never into a reply
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    _die_with_parent(parent)
    code = 0
    try:
        Server(requests, replies).serve()
    except BrokenPipeError:
        code = 1  # the supervisor is gone
    except SystemExit:
        code = 3  # the app ended its own run (reported to the supervisor just before)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    # no interpreter teardown: an app's atexit or a CUDA teardown cannot change the result
    os._exit(code)
