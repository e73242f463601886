"""What a session's anchor says to the server, parsed: one line a message (`runner/inrun/anchor.py` has
the wire). Sans-IO: bytes in, a frozen message out, or `Malformed`.

Every byte of it is hostile input. The anchor runs no user code, but it relays what a session's keeper
and calls say, and a call's code can write on its channel to the anchor whatever it likes; the server
must never take a field on trust. So each line is checked whole: its length, its tag, its exact number
of fields, each field's type and range. A line that fails any check ends that one session
(`SessionKeeper`), never the server.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# The longest line the anchor may send (its longest is a P, V or E line with a reason cut to 400 bytes).
MAX_LINE = 1024
# Linux's pid_max is at most 2**22.
MAX_PID = 1 << 22
# CPU seconds and peak memory beyond any run's limits, yet far from float or int trouble.
MAX_SECONDS = 1e9
MAX_MAXRSS_KB = MAX_HELD_KB = 1 << 40
MAX_WHY = 400

_UNSIGNED = re.compile(rb"[0-9]{1,20}")
_SECONDS = re.compile(rb"[0-9]{1,12}(\.[0-9]{1,20})?(e[+-]?[0-9]{1,3})?")


class Malformed(ValueError):
    """A line that is not one of the anchor's messages, exactly as the wire has them."""


@dataclass(frozen=True, slots=True)
class Ready:
    """``R``: the anchor is ready."""


@dataclass(frozen=True, slots=True)
class Started:
    """``S <pid>``: the last call was forked, with this pid."""

    pid: int


@dataclass(frozen=True, slots=True)
class Ended:
    """``X <pid> <wait status> <utime> <stime> <maxrss>``: a call ended."""

    pid: int
    status: int
    cpu_seconds: float
    maxrss_kb: int


@dataclass(frozen=True, slots=True)
class Said:
    """``P <0|1> <threads> <KiB> <why>`` (whether the last call can be kept, as it ends, and the memory
    its state would hold) or ``V <0|1> <threads> <KiB> <why>`` (whether it was kept, after the verdict,
    and what the session holds now, kept or rolled back, its /dev/shm and /run too): yes or no,
    whether the call left threads (which a kept state does not carry), why not (``-`` on the wire: no
    reason), and the bytes held."""

    tag: bytes
    yes: bool
    threads: bool
    why: str
    held_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Lost:
    """``E <why>``: the session's state is lost."""

    why: str


Message = Ready | Started | Ended | Said | Lost


def parse(line: bytes) -> Message:
    """The message `line` (without its newline) says; `Malformed` with what is wrong otherwise."""
    if len(line) > MAX_LINE:
        raise Malformed(f"a line of {len(line)} bytes, more than {MAX_LINE}")
    tag, _, rest = line.partition(b" ")
    if tag == b"R" and not rest and line == b"R":
        return Ready()
    if tag == b"S":
        (pid,) = _fields(line, 1)
        return Started(_pid(pid))
    if tag == b"X":
        pid, status, utime, stime, maxrss = _fields(line, 5)
        cpu = _seconds(utime) + _seconds(stime)
        return Ended(_pid(pid), _unsigned(status, 0xFFFF), cpu, _unsigned(maxrss, MAX_MAXRSS_KB))
    if tag in (b"P", b"V"):
        count = 4
        fields = rest.split(b" ", count - 1)
        if len(fields) != count or fields[0] not in (b"0", b"1") or fields[1] not in (b"0", b"1") or not fields[-1]:
            raise Malformed(f"not a {tag.decode()} line: {_shown(line)}")
        held = _unsigned(fields[2], MAX_HELD_KB) * 1024
        why = _text(fields[-1])
        return Said(tag, fields[0] == b"1", fields[1] == b"1", "" if why == "-" else why, held)
    if tag == b"E":
        return Lost(_text(rest) or "the session's state was lost")
    raise Malformed(f"an unknown message: {_shown(line)}")


def _fields(line: bytes, count: int) -> list[bytes]:
    fields = line.split(b" ")[1:]
    if len(fields) != count:
        raise Malformed(f"{len(fields)} fields where {count} belong: {_shown(line)}")
    return fields


def _unsigned(field: bytes, most: int) -> int:
    if not _UNSIGNED.fullmatch(field) or int(field) > most:
        raise Malformed(f"not a whole number from 0 to {most}: {_shown(field)}")
    return int(field)


def _pid(field: bytes) -> int:
    pid = _unsigned(field, MAX_PID)
    if pid == 0:
        raise Malformed("pid 0")
    return pid


def _seconds(field: bytes) -> float:
    if not _SECONDS.fullmatch(field):
        raise Malformed(f"not a number of seconds: {_shown(field)}")
    seconds = float(field)
    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise Malformed(f"not a number of seconds: {_shown(field)}")
    return seconds


def _text(field: bytes) -> str:
    return field[:MAX_WHY].decode("utf-8", errors="replace")


def _shown(data: bytes) -> str:
    """`data` as a log or a message may show it: short, and printable."""
    return repr(data[:80]) + ("..." if len(data) > 80 else "")
