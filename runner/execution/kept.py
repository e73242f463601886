"""Whole output kept on disk: a stream the answer shows only the head and tail of is kept whole
(up to `RUNNER_MAX_KEPT_OUTPUT_MB`) in a directory of the server's, for its caller to read back as a
resource (`resources/read` on the link the result carries).

A `Spool` takes one stream as it is read: in memory up to `SPOOL_MEMORY`, then in a file written
through, so a run's output never sits in the server's memory whole. When the run has ended, a
stream whose shown text was cut is handed to the `OutputStore` (the spool's file, or its bytes
written out); any other spool is deleted. The store binds each kept stream to its caller, under a
random URI, for `RUNNER_KEPT_OUTPUT_SECONDS` (deleted when they have passed); its bytes count
against a budget per caller and in all, and the oldest go first when a new one would not fit.
Reading an expired, evicted, foreign or never made URI is "not found" alike. The directory is made
empty when the pool starts and removed when it stops.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import quote

import anyio

from runner.config import KeptConfig
from runner.execution.leftovers import HeldDirectory
from runner.outcome import KeptOutput

URI_PREFIX = "runner://output/"
KEPT_PREFIX = "python-runner-kept-"
SPOOL_MEMORY = 64 * 1024
# The shortest wait between two sweeps of what has expired: a wake a little before an entry's time
# sweeps nothing, and must not spin.
MIN_SWEEP_WAIT = 0.05


class Spool:
    """One stream of one run, whole up to `limit` bytes: in memory first, then in a file."""

    def __init__(self, directory: str, limit: int) -> None:
        self._directory = directory
        self._limit = limit
        self._memory = bytearray()
        self._fd = -1
        self.path: str | None = None
        self.size = 0  # bytes kept
        self.total = 0  # bytes the stream carried

    def feed(self, chunk: bytes) -> None:
        """Add the next chunk the run wrote; what goes past the limit is counted, not kept."""
        self.total += len(chunk)
        room = self._limit - self.size
        if room <= 0:
            return
        chunk = chunk[:room]
        self.size += len(chunk)
        if self._fd < 0:
            self._memory += chunk
            if len(self._memory) <= SPOOL_MEMORY:
                return
            try:
                self._open()
            except OSError:  # no file to be had (a full disk, no inode): what is in memory is what is kept
                self.size = len(self._memory) - len(chunk)
                self._memory = self._memory[: self.size]
                self._limit = self.size
                return
            chunk, self._memory = bytes(self._memory), bytearray()
        try:
            _write_all(self._fd, chunk)
        except OSError:
            # A full disk: what was kept before this chunk is what there is (a part of it written
            # would make the file longer than `size` says).
            self.size -= len(chunk)
            self._limit = self.size
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self.size)

    def _open(self) -> None:
        fd, path = tempfile.mkstemp(prefix="spool-", dir=self._directory)
        self._fd, self.path = fd, path

    def settle(self) -> str | None:
        """The file holding what was kept (written out now if it was all in memory), the store's from
        now on; None if none could be written. The spool is done either way."""
        try:
            if self._fd < 0:
                self._open()
                _write_all(self._fd, bytes(self._memory))
                self._memory = bytearray()
        except OSError:
            self.discard()
            return None
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
        path, self.path = self.path, None
        return path

    def discard(self) -> None:
        """Delete what was kept (a stream shown whole, or a run that did not end)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.path = None
        self._memory = bytearray()


# What one kept entry counts against the budgets at least, whatever its size: a run that links a
# thousand 1-byte files must not hold a thousand entries for nothing (each costs the server memory and
# a file), and budgets of bytes alone would let it.
MIN_CHARGE = 64 * 1024


@dataclass(frozen=True, slots=True)
class _Entry:
    caller: str | None
    path: str
    kept: KeptOutput
    expires: float

    @property
    def charge(self) -> int:
        return max(self.kept.size, MIN_CHARGE)


class OutputStore:
    """The kept streams and files of one pool, in its own directory: keep, read, list, expire, evict.
    Every operation but `close` costs what it frees, not what the store holds: totals are kept as it
    goes, each caller's entries in order, and entries expire in the order they were made (they all
    last the same)."""

    def __init__(self, kept: KeptConfig, directory: str, held: HeldDirectory | None = None) -> None:
        self.directory = directory
        self._held = held  # the lock that tells the next start this server lives (leftovers.py)
        self._per_call = kept.per_call_bytes
        self._per_caller = kept.max_kept_caller_bytes
        self._total = kept.max_kept_total_bytes
        self._seconds = kept.kept_output_seconds
        # A replica's name leads its URIs (runner://output/NAME.…), as it does session handles: a proxy
        # routes resources/read on the Mcp-Name header, which carries the URI.
        self._replica = kept.replica + "." if kept.replica else ""
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # oldest first
        self._by_caller: dict[str | None, OrderedDict[str, None]] = {}
        self._charged: dict[str | None, int] = {}
        self._charged_total = 0

    @classmethod
    def made(cls, config: KeptConfig, work_dir: str) -> OutputStore:
        """A store in a new, empty directory of its own (mode 0700) under `work_dir` (RUNNER_WORK_DIR)."""
        held = HeldDirectory(KEPT_PREFIX, work_dir)
        return cls(config, held.path, held)

    @property
    def enabled(self) -> bool:
        return self._per_call > 0  # 0 unless the configuration keeps output (`KeptConfig.keeps_output`)

    def spool(self) -> Spool:
        return Spool(self.directory, self._per_call)

    def keep_file(self, caller: str | None, name: str, data: bytes, mime_type: str, reason: str) -> KeptOutput | None:
        """Keep a file the run made (or a figure at full size) that is over what the answer carries:
        written out as it is, no copy of it made; None if it cannot be kept (over a budget, or the disk)."""
        now = time.monotonic()
        self.expire(now)
        if len(data) > self._per_call or max(len(data), MIN_CHARGE) > min(self._per_caller, self._total):
            return None
        try:
            fd, path = tempfile.mkstemp(prefix="file-", dir=self.directory)
        except OSError:
            return None
        try:
            _write_all(fd, data)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        os.close(fd)
        return self._add(caller, name, path, len(data), len(data), now, mime_type=mime_type, reason=reason)

    def keep_stream(
        self,
        caller: str | None,
        stream: str,
        spool: Spool,
        now: float | None = None,
    ) -> KeptOutput | None:
        """Keep `spool` (settled here) for `caller`, evicting the oldest that would not leave room;
        None if it cannot be kept (larger than a budget, or not written)."""
        now = time.monotonic() if now is None else now
        self.expire(now)
        if max(spool.size, MIN_CHARGE) > min(self._per_caller, self._total):
            spool.discard()
            return None
        path = spool.settle()
        if path is None:
            return None
        return self._add(caller, stream, path, spool.size, spool.total, now)

    def _add(
        self,
        caller: str | None,
        name: str,
        path: str,
        size: int,
        total: int,
        now: float,
        *,
        mime_type: str = "text/plain",
        reason: str = "",
    ) -> KeptOutput:
        charge = max(size, MIN_CHARGE)
        mine = self._by_caller.setdefault(caller, OrderedDict())
        while mine and self._charged.get(caller, 0) + charge > self._per_caller:
            self._evict(next(iter(mine)))
        while self._entries and self._charged_total + charge > self._total:
            self._evict(next(iter(self._entries)))
        # The name quoted whole ("/" too): a forged "../x" stays one segment a client cannot normalize away.
        uri = f"{URI_PREFIX}{self._replica}{secrets.token_urlsafe(18)}/{quote(name, safe='')}"
        kept = KeptOutput(uri, name, size, total, self._seconds, mime_type, reason, file=bool(reason))
        entry = _Entry(caller, path, kept, now + self._seconds)
        self._entries[uri] = entry
        self._by_caller.setdefault(caller, OrderedDict())[uri] = None
        self._charged[caller] = self._charged.get(caller, 0) + entry.charge
        self._charged_total += entry.charge
        return kept

    def open(self, uri: str, caller: str | None, now: float | None = None) -> tuple[KeptOutput, int] | None:
        """The kept stream `uri` of `caller` and an fd open on its bytes (the caller closes it); None
        if there is none for this caller (never made, expired, evicted or another's)."""
        self.expire(time.monotonic() if now is None else now)
        entry = self._entries.get(uri)
        if entry is None or entry.caller != caller:
            return None
        try:
            return entry.kept, os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def listed(self, caller: str | None, now: float | None = None) -> list[KeptOutput]:
        """The caller's live kept streams and files, oldest first."""
        self.expire(time.monotonic() if now is None else now)
        return [self._entries[uri].kept for uri in self._by_caller.get(caller, ())]

    def expire(self, now: float) -> None:
        # Every entry lasts as long: the oldest are the first to expire.
        while self._entries:
            uri, entry = next(iter(self._entries.items()))
            if entry.expires > now:
                break
            self._evict(uri)

    def next_expiry(self) -> float | None:
        """When the oldest entry expires (time.monotonic()); None when nothing is kept."""
        return next(iter(self._entries.values())).expires if self._entries else None

    async def expire_forever(self) -> None:
        """Delete each entry when its time comes, whether or not the store is used then (found by a
        review: an idle server kept expired output on disk, up to RUNNER_MAX_KEPT_TOTAL_MB, until its
        next call). Every entry lasts as long, so one kept while this waits expires after the oldest."""
        while True:
            now = time.monotonic()
            self.expire(now)
            oldest = self.next_expiry()
            await anyio.sleep(max(MIN_SWEEP_WAIT, (oldest if oldest is not None else now + self._seconds) - now))

    def close(self) -> None:
        """Delete everything kept, and the directory."""
        for uri in list(self._entries):
            self._evict(uri)
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                os.unlink(os.path.join(self.directory, name))
            os.rmdir(self.directory)
        if self._held is not None:
            self._held.release()

    def _evict(self, uri: str) -> None:
        entry = self._entries.pop(uri)
        mine = self._by_caller[entry.caller]
        del mine[uri]
        if not mine:
            del self._by_caller[entry.caller]
        self._charged[entry.caller] -= entry.charge
        if not self._charged[entry.caller]:
            del self._charged[entry.caller]
        self._charged_total -= entry.charge
        # Whatever the unlink meets (a directory made read-only, a file system remounted so) fails no
        # call and no sweep: found by a review, a PermissionError here ended the pool from the sweep.
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
