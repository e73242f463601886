"""How many reads of kept output (`resources/read`) and of task results (`tasks/get` of a completed
task) may be building or sending their answers at once: a few per caller, and a budget of bytes for all.

A kept stream's answer is JSON: a 16 MiB stream of control characters is 96 MiB of it (each one
`\\u0001`), besides its text, and the answer stays in memory until the client has read it. A client
that asks and never reads would hold that for as long as it liked, as often as it liked. So a read is
admitted against the budget for what its answer may cost at most before anything is read, charged
what it costs once built, and holds that until its answer has been sent (the transport says when,
`AfterAnswer`; where it cannot, until the handler returns). Past a bound the read is refused at once
with `READ_BUSY`, nothing read. One read is always admitted when no other is in flight, so a stream
as large as may be kept can always be read.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import mcp_types as types
from mcp.shared.exceptions import MCPError

from runner.protocol.results import MAX_TEXT_GROWTH, text_json_bytes

# A JSON-RPC error of the server's own range (-32000 to -32099; the SDK uses -32000 and -32001).
READ_BUSY = -32010
# Reads of one caller in flight at once. Not two: a gateway behind one token, or every client of a
# server without tokens (one caller), reads the links of its concurrent calls at once (eight tasks
# behind nginx had theirs refused). What bounds the memory is the budget of bytes, half for a caller.
MAX_READS_PER_CALLER = 16
# Bytes the answers of all reads in flight may cost together, at least; more where one answer of the
# largest kept stream could cost more (see `Reads.for_largest`).
MIN_BUDGET_BYTES = 256 * 1024 * 1024
# What an answer holds in the server until the client has read it, per byte of its JSON: the
# result's string, the JSON, the event around it, its bytes and the socket's buffer (measured: 5.5 for
# 8 MiB of text, and at its peak while it is built 5.2 for 8 MiB of control characters).
PER_JSON_BYTE = 6
# What an answer may cost at most, per byte kept: text is answered as text only while its JSON is at
# most MAX_TEXT_GROWTH times its bytes (base64, otherwise, is 4/3).
WORST_PER_BYTE = math.ceil(PER_JSON_BYTE * MAX_TEXT_GROWTH)

# Given the transport's request object and a callback, calls it once that request's answer has been
# sent and answers True; False where it cannot tell (the callback is then the caller's to call).
AfterAnswer = Callable[[object, Callable[[], None]], bool]


def answer_cost(data: bytes, contents: types.TextResourceContents | types.BlobResourceContents) -> int:
    """What the answer carrying `contents` (made of `data`) holds until the client has read it."""
    if isinstance(contents, types.BlobResourceContents):
        return PER_JSON_BYTE * len(contents.blob)
    return PER_JSON_BYTE * text_json_bytes(data)


@dataclass
class _Held:
    caller: str | None
    charge: int
    released: bool = False


class Reads:
    """The reads in flight: a count per caller and the bytes their answers hold."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._charged = 0
        self._count = 0
        self._by_caller: dict[str | None, int] = {}  # reads in flight
        self._charged_by: dict[str | None, int] = {}

    @classmethod
    def for_largest(cls, largest_kept_bytes: int) -> Reads:
        """A budget that admits two answers of the largest stream that may be kept, at worst: one of each
        of two callers, whatever the first holds."""
        return cls(max(MIN_BUDGET_BYTES, 2 * WORST_PER_BYTE * largest_kept_bytes))

    @property
    def charged(self) -> int:
        """The bytes the reads in flight are charged, together."""
        return self._charged

    def admit(self, caller: str | None, size: int) -> _Held:
        """Admit a read of `size` kept bytes, charged what its answer may cost at most; `MCPError`
        (READ_BUSY) when the caller has MAX_READS_PER_CALLER in flight or the budget has no room."""
        return self._admit(caller, WORST_PER_BYTE * size)

    def admit_json(self, caller: str | None, json_bytes: int) -> _Held:
        """Admit an answer that carries `json_bytes` of JSON made already (a task's result), as `admit`
        does (found by a review: tasks/get of a 1.2 MB result, asked on 500 connections that read a
        byte each 10 s, held 1.2 GB of the server's memory and 1.5 GB of the kernel's, unbounded)."""
        return self._admit(caller, PER_JSON_BYTE * json_bytes)

    def _admit(self, caller: str | None, charge: int) -> _Held:
        if self._by_caller.get(caller, 0) >= MAX_READS_PER_CALLER:
            raise _busy(f"{MAX_READS_PER_CALLER} reads of this caller are in flight")
        held = _Held(caller, charge)
        mine = self._charged_by.get(caller, 0)
        if mine and mine + held.charge > self._budget // 2:
            # Half the budget at most for one caller (one read always): another has room for one.
            raise _busy(f"this caller's reads in flight hold {mine / 2**20:,.0f} MiB")
        self._take(held.charge)
        self._count += 1
        self._by_caller[caller] = self._by_caller.get(caller, 0) + 1
        self._charged_by[caller] = mine + held.charge
        return held

    @contextlib.contextmanager
    def answering(self, held: _Held, request: object | None, after_answer: AfterAnswer | None) -> Iterator[None]:
        """Hold `held` while its answer is made in the block, and until the answer has left (the transport
        tells, `after_answer`); where it cannot tell, or the block fails, until the block ends."""
        hooked = after_answer is not None and request is not None and after_answer(request, lambda: self.release(held))
        try:
            yield
        except BaseException:
            self.release(held)
            raise
        finally:
            if not hooked:
                self.release(held)

    def charge(self, held: _Held, cost: int) -> None:
        """Charge `held` what its answer costs once built instead of its worst (less, but for the slack
        the estimate leaves)."""
        if not held.released:
            self._charged += cost - held.charge
            self._charged_by[held.caller] += cost - held.charge
            held.charge = cost

    def release(self, held: _Held) -> None:
        """Its answer has been sent (or will not be): once only."""
        if held.released:
            return
        held.released = True
        self._charged -= held.charge
        self._count -= 1
        left = self._by_caller[held.caller] - 1
        if left:
            self._by_caller[held.caller] = left
            self._charged_by[held.caller] -= held.charge
        else:
            del self._by_caller[held.caller], self._charged_by[held.caller]

    def _take(self, charge: int) -> None:
        if self._count and self._charged + charge > self._budget:
            raise _busy(
                f"the answers of reads in flight hold {self._charged / 2**20:,.0f} MiB, and this "
                f"one may take {charge / 2**20:,.0f} more, past the server's {self._budget / 2**20:,.0f} MiB"
            )
        self._charged += charge


def _busy(why: str) -> MCPError:
    return MCPError(
        READ_BUSY,
        f"busy: {why} (resources/read of kept output, tasks/get of a result); read the answers of earlier "
        "ones, then ask again",
        {"retry": True},
    )
