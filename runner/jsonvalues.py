"""How many values a JSON text would parse into, counted from its bytes without parsing it: a pure
function, for what reads JSON from a party it does not trust (an HTTP body: `runner.transports`; a run's
frame to the tools broker: `runner.tools.frames`) before anything builds it."""

from __future__ import annotations

# Bytes that begin a value outside a string, or part values: the structure JSON parses into objects.
_STRUCTURAL = (b"{", b"[", b",", b":")


def json_values(body: bytes, limit: int) -> int:
    """How many values parsing `body` would make, about (its strings, and its `{`, `[`, `,` and `:`
    outside them), in linear time and without parsing it: more than `limit` exactly when that count
    is, else at most `limit` (counting what strings hold too, when even so it is no more). A parse
    makes an object of 64 bytes of each `{}` written in two: this bounds what a body can become in
    memory before anything builds it.

    Exact for valid JSON (escapes are paired as a parser pairs them); a body whose quotes do not pair
    is counted as if it held no string, which only counts more."""
    total = sum(body.count(mark) for mark in _STRUCTURAL)
    if total + body.count(b'"') // 2 <= limit:  # more than the count: what strings hold is in it
        return total + body.count(b'"') // 2
    if b"\\" in body:
        # Removing each escaped backslash, then each escaped quote, leaves exactly the quotes that
        # open or close strings: a maximal run of backslashes pairs left to right, as a parser reads it.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    quotes = body.count(b'"')
    if quotes % 2 or quotes // 2 > limit:
        return max(total, quotes // 2)
    values, start = quotes // 2, 0
    while values <= limit:
        opened = body.find(b'"', start)
        end = len(body) if opened < 0 else opened
        values += sum(body.count(mark, start, end) for mark in _STRUCTURAL)
        if opened < 0:
            break
        start = body.index(b'"', opened + 1) + 1  # past the string's closing quote
    return values
