"""How many values a JSON text would parse into, and how deep they nest, counted from its bytes without
parsing it: pure functions, for what reads JSON from a party it does not trust (an HTTP body:
`runner.transports`; a run's frame to the tools broker: `runner.tools.frames`) before anything builds it,
or sends it on."""

from __future__ import annotations

import re
from itertools import accumulate

# Bytes that begin a value outside a string, or part values: the structure JSON parses into objects.
_STRUCTURAL = (b"{", b"[", b",", b":")
# A string, once its escaped backslashes and quotes are gone: quote to quote.
_STRING = re.compile(rb'"[^"]*"')
_OPENERS = (b"{", b"[")
# For `bytes.translate`'s delete: every byte but quotes and brackets. And a bracket's step in depth, by byte.
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
_STEP = [1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256)]


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
    body = _unescaped(body)
    quotes = body.count(b'"')
    if quotes % 2 or quotes // 2 > limit:
        return max(total, quotes // 2)
    # What is left outside the strings, each removed whole at C's pace (found by a second look: a loop
    # over them in Python took 0.77 s for half a million strings full of commas; this, 0.16 s).
    outside = _STRING.sub(b"", body)
    return quotes // 2 + sum(outside.count(mark) for mark in _STRUCTURAL)


def json_depth(body: bytes, limit: int) -> int:
    """How deep the arrays and objects of `body` nest (`{}` is 1, `[{}]` 2), counted from its bytes
    without parsing it: more than `limit` exactly when that depth is, else at most `limit`. Exact for
    valid JSON, in linear time whatever its shape: some 30-70 ms for a million brackets, 80 ms for 16
    MiB of strings that hold brackets (only a body of more than `limit` brackets is looked into)."""
    openers = sum(body.count(mark) for mark in _OPENERS)
    if openers <= limit:  # what strings hold is in it: the depth is no more
        return openers
    # Quotes and brackets alone, then no empty string: a string's removal has little left to read
    # (found by a second look: removing the strings of 110,000 records first took 87 ms, this 23 ms).
    # Dropping `""` anywhere is right: two strings side by side become one, whose brackets stay in one.
    structure = _unescaped(body).translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    brackets = _STRING.sub(b"", structure)
    # Each bracket's depth, summed at C's pace: replacing innermost pairs again and again took 0.25 s
    # for a million brackets in chains 99 deep; this, 30 ms for any.
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _unescaped(body: bytes) -> bytes:
    """`body` without its escaped backslashes and quotes (a maximal run of backslashes pairs left to
    right, as a parser reads it), which leaves exactly the quotes that open or close strings."""
    if b"\\" not in body:
        return body
    return body.replace(b"\\\\", b"").replace(b'\\"', b"")
