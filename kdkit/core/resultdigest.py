"""results.jsonl's SHA-256 as the harness knows it (kdkit.core.runresults.RunFolder keeps one): the
prefix kept from earlier sessions, hashed in a helper thread while a resumed run starts, then every
byte this session appended. The file is checked against both before SHA256SUMS lists it, so a
results file changed behind the harness's back is never sealed as the run's.
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

EMPTY_SHA256 = hashlib.sha256().hexdigest()


class ResultDigest:
    """What results.jsonl must be, and whether it is."""

    def __init__(self, results: Path) -> None:
        self.results = results
        # results.jsonl as it must be: the prefix kept from earlier sessions (hashed in the
        # background while the run starts), then every byte this session appended.
        self._prefix: tuple[int, Future[str]] | None = None
        self._appended = hashlib.sha256()
        self._results_digest: str | None = None  # the whole file's sha256, once checked

    def add(self, payload: bytes) -> None:
        """Bytes this session appended to results.jsonl."""
        self._appended.update(payload)

    def hash_prefix(self, data: bytes, cut: int) -> None:
        """SHA-256 of the kept prefix in a helper thread (hashlib lets go of the GIL): a
        million-line resume does not wait for it; the run is judged only once it is known."""
        if cut == 0:
            return
        hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kdkit-hash")
        self._prefix = (cut,
                        hasher.submit(lambda: hashlib.sha256(memoryview(data)[:cut]).hexdigest()))
        hasher.shutdown(wait=False)  # the thread ends with its one task

    def holds_only_appended(self) -> bool:
        """Whether results.jsonl is exactly what it must be: the prefix this session started from,
        then the bytes it appended (each part's SHA-256 against what the harness knows)."""
        if not self.results.is_file() or self.results.is_symlink():
            return False
        cut, expected = (self._prefix[0],
                         self._prefix[1].result()) if self._prefix else (0, EMPTY_SHA256)
        whole, head, tail, read = hashlib.sha256(), hashlib.sha256(), hashlib.sha256(), 0
        with self.results.open("rb") as handle:
            while block := handle.read(1 << 20):
                whole.update(block)
                split = max(0, min(len(block), cut - read))
                head.update(block[:split])
                tail.update(block[split:])
                read += len(block)
        # sealed as it is: when not intact, the run has failed for it
        self._results_digest = whole.hexdigest()
        return (read >= cut and head.hexdigest() == expected
                and tail.hexdigest() == self._appended.hexdigest())

    def sealed(self) -> str:
        """The whole file's SHA-256 for SHA256SUMS, checked first if it was not yet (when not
        intact, the file is sealed as it is: the run has failed for it)."""
        if self._results_digest is None:
            self.holds_only_appended()
        return self._results_digest or EMPTY_SHA256
