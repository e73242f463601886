"""Capped capture of a run's output, and its safe decoding: pure functions over bytes, no I/O.

A stream keeps its first and last bytes (so a final traceback survives a flood) and counts the
rest. Memory per stream is bounded by twice `keep_bytes` whatever the run writes.
"""

from __future__ import annotations

import itertools
import re

from runner.outcome import StreamText

# The characters shown as escapes in a run's text (its streams, its result, the names of its files):
# every one Unicode calls a control (Cc), a format character (Cf) or a line or paragraph separator (Zl,
# Zp), what corrupts a terminal or a JSON consumer, reorders text as it is shown, hides, or ends a line
# where the text says none; but the format characters words are written with (WRITTEN: the soft hyphen,
# and the joiners of emoji sequences and of Persian and Indic scripts), and in a stream its tabs, newlines
# and carriage returns. Found by reviews: NEL and U+2028 made a forged `--- exit_code` line of a run's
# output, ESC, a CSI (U+009B) and a right-to-left override reached the result as they were, and a file
# `invoice_\u202egpj.exe` showed as `invoice_exe.jpg`. One rule, written out as ranges for Unicode
# 14.0.0 (Python 3.11's `unicodedata`: looking each character up is 0.1 s at start), which a test holds
# to the rule (tests/unit/execution/test_capture.py).
UNSAFE_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp"))
WRITTEN = "\u00ad\u200c\u200d"
_UNSAFE_RANGES = (
    "\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b"
    "\u200e-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U00013438\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE = re.compile(f"[{_UNSAFE_RANGES}]")  # in a stream: its lines keep their tabs, newlines and CRs
_UNSAFE_IN_NAMES = re.compile(f"[\t\n\r{_UNSAFE_RANGES}]")  # a name: no line of its own
_CHAR_START = re.compile(rb"[^\x80-\xbf]")


class OutputCap:
    """Accumulates one stream, keeping at most `keep_bytes` of head and of tail."""

    def __init__(self, keep_bytes: int) -> None:
        self._keep = keep_bytes
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Add the next chunk the run wrote."""
        self.total += len(chunk)
        room = self._keep - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk[-self._keep :]
            if len(self._tail) > 2 * self._keep:
                # Trim in batches so a flood of small chunks costs amortised O(1) per byte.
                del self._tail[: len(self._tail) - self._keep]

    def latest_lines(self, max_lines: int, max_bytes: int) -> str:
        """The last `max_lines` lines written so far, from at most their last `max_bytes` bytes (a line
        cut there starts where a character does), decoded safely; '' before any output (for progress)."""
        dropped = self.total > len(self._head) + len(self._tail)
        kept = self._tail if dropped else self._head + self._tail
        recent = bytes(kept[-max_bytes:])
        if len(kept) > max_bytes:
            start = _CHAR_START.search(recent)
            recent = recent[start.start() :] if start else b""
        lines = recent.splitlines()
        while lines and not lines[-1].strip():
            lines.pop()
        return decode_safely(b"\n".join(lines[-max_lines:]))

    def parts(self) -> tuple[bytes, bytes]:
        """The kept head and tail (the tail is empty when nothing was dropped between them)."""
        return bytes(self._head), bytes(self._tail[-self._keep :])


def decode_safely(data: bytes) -> str:
    """Decode UTF-8 for display: invalid bytes and unsafe characters (`shown`) become visible escapes."""
    return shown(data.decode("utf-8", "backslashreplace"))


def shown(text: str) -> str:
    """`text` with each unsafe character (`_UNSAFE`) as a visible escape: ``\\x1b``, ``\\u2028``."""
    return _UNSAFE.sub(_escaped, text)


def shown_name(text: str) -> str:
    """A name (a file's, a column's) as `shown`, its tabs, newlines and carriage returns escaped too."""
    return _UNSAFE_IN_NAMES.sub(_escaped, text)


def _escaped(unsafe: re.Match[str]) -> str:
    code = ord(unsafe.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _prefix_of_chars(data: bytes, chars: int) -> bytes:
    """The longest prefix holding at most `chars` characters, cut on a character boundary."""
    if chars <= 0:
        return b""
    for count, match in enumerate(_CHAR_START.finditer(data)):
        if count == chars:
            return data[: match.start()]
    return data


def _suffix_of_chars(data: bytes, chars: int) -> bytes:
    """The longest suffix holding at most `chars` characters, starting on a character boundary."""
    if chars <= 0:
        return b""
    starts = [m.start() for m in _CHAR_START.finditer(data)]
    if len(starts) <= chars:
        # Skip continuation bytes orphaned by where the tail buffer happened to start.
        return data[starts[0] :] if starts else b""
    return data[starts[-chars] :]


DROP_MARKER = "\n... [{dropped:,} bytes dropped] ...\n"
FIT_PIECE = 512  # characters measured at once where escapes make a stream's text longer than its bytes (`_fitted`)


def render_stream(cap: OutputCap, max_chars: int, marker: str = DROP_MARKER) -> StreamText:
    """Turn a capture into at most `max_chars` characters of text (plus a drop marker), keeping head and tail.

    A character here is a UTF-8 sequence start; an invalid byte counts as one character.
    """
    head, tail = cap.parts()
    whole = head + tail if len(head) + len(tail) == cap.total else None
    if whole is not None and _count_chars(whole) <= max_chars:
        text = decode_safely(whole)
        if len(text) <= max_chars:
            return StreamText(text, cap.total, 0)
    source_head = head if whole is None else whole
    source_tail = tail if whole is None else whole
    head_part = _fitted(source_head, max_chars - max_chars // 2, tail=False)
    tail_part = _fitted(source_tail, max_chars // 2, tail=True)
    if whole is not None and len(head_part) + len(tail_part) > len(whole):
        tail_part = whole[len(head_part) :]
    dropped = cap.total - len(head_part) - len(tail_part)
    head_text = decode_safely(head_part)
    text = head_text + marker.format(dropped=dropped) + decode_safely(tail_part)
    return StreamText(text, cap.total, dropped, len(head_text))


def _fitted(data: bytes, chars: int, tail: bool) -> bytes:
    """The longest prefix of `data` (its suffix if `tail`) whose text as shown is at most `chars`
    characters: an escaped byte or character is shown in 4 to 10 (found by a review: 100,000 NUL bytes
    were 80,032 characters against a cap of 20,000). Where escapes make it longer, measured a piece of
    FIT_PIECE characters at a time from the kept end, then by halving within the piece that passes."""
    taken = _suffix_of_chars(data, chars) if tail else _prefix_of_chars(data, chars)
    if len(decode_safely(taken)) <= chars:
        return taken
    # Where characters start (and the ends: a head may begin with bytes that continue none).
    starts = sorted({0, *(match.start() for match in _CHAR_START.finditer(taken)), len(taken)})
    bounds = starts[::FIT_PIECE]
    if bounds[-1] != len(taken):
        bounds.append(len(taken))
    pieces = list(itertools.pairwise(bounds))
    counted = 0  # characters of the pieces that fit, as shown
    for begin, end in reversed(pieces) if tail else pieces:
        length = len(decode_safely(taken[begin:end]))
        if counted + length <= chars:
            counted += length
            continue
        inner = [at for at in starts if begin <= at <= end]
        low, high = (0, len(inner) - 1)
        if tail:  # the first start from which the rest of the piece fits
            while low < high:
                middle = (low + high) // 2
                if counted + len(decode_safely(taken[inner[middle] : end])) <= chars:
                    high = middle
                else:
                    low = middle + 1
            return taken[inner[low] :]
        while low < high:  # the last start up to which the piece fits
            middle = (low + high + 1) // 2
            if counted + len(decode_safely(taken[begin : inner[middle]])) <= chars:
                low = middle
            else:
                high = middle - 1
        return taken[: inner[low]]
    return taken


def _count_chars(data: bytes) -> int:
    return len(_CHAR_START.findall(data))


def keep_bytes_for(max_chars: int) -> int:
    """Bytes to keep per end so that `max_chars` characters of up to 4 bytes each always fit."""
    return 4 * (max_chars - max_chars // 2) + 4
