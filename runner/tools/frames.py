"""A run's frame to the broker, decoded within bounds: pure functions over its bytes.

A frame's decoding is done on the event loop every run and client shares, and costs far more for some
values than for their bytes: an empty list is 3 bytes and some 0.06-0.9 us of the loop (the more, the
more the garbage collector walks the ones made before it), and the SDK's dump to forward it as much
again. Found by a review: one frame of 16 MiB of ``[],``, within a run's budget of bytes, held the loop
3.5 s (a ping meanwhile 7 s) and took 450 MB; four runs at once, 3.5 GB. So a frame's values are counted
first, from its bytes (`runner.jsonvalues`), and one of more than MOST_VALUES is refused undecoded (a
frame within it still holds the loop while it decodes: a million floats 0.2-0.4 s, measured); what is
decoded is decoded with the collector paused. What a decoded frame holds that no tool server should be
sent (arguments nested past what parsers take, a lone surrogate) is told by `unsendable`.
"""

from __future__ import annotations

import gc
import json
import math
import re
from typing import Any

from runner.jsonvalues import json_depth, json_values

# A call's values (strings, and `{`, `[`, `,`, `:`), at most: 300,000 numbers or strings in a list are
# within it; a list of 100,000 records of a few fields each is not.
MOST_VALUES = 1_000_000
# How deep a call's arguments may nest: tool servers' parsers stop somewhere (pydantic's at 200 levels
# of a message, its arguments' third; found by a review: a Python SDK server dropped a call nested 199
# deep unanswered, which waited out the run's timeout), and no tool's arguments need more.
MOST_DEPTH = 100
PAUSED_PAST = 64 << 10  # bytes of a frame past which the garbage collector is paused while it is decoded
# A \uD800-\uDFFF escape: JSON may spell a lone surrogate, which no UTF-8 holds (the SDK could not
# send it on, and its stdio transport would end over it).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


class NotJson(ValueError):
    """The frame is no JSON this server takes."""


def too_many(body: bytes) -> str:
    """Why the frame `body` is refused undecoded for its values ('' if it is not)."""
    # Each value takes a byte at least: a frame of fewer bytes is not counted (most are, on a call's way).
    if len(body) <= MOST_VALUES or json_values(body, MOST_VALUES) <= MOST_VALUES:
        return ""
    return f"the run sent a call of more than {MOST_VALUES:,} JSON values; send them in smaller calls"


def unsendable(body: bytes, arguments: dict[str, Any]) -> str:
    """Why the `arguments` of the call frame `body` (decoded) may not be sent on, whatever the tool's
    schema says ('' if they may): nested too deep, or holding a lone surrogate."""
    # The frame's own object is the first level, its arguments' the second.
    if (depth := json_depth(body, MOST_DEPTH + 1) - 1) > MOST_DEPTH:
        return f"the arguments nest {depth:,} levels deep, more than {MOST_DEPTH}, which a tool server may not parse"
    if _SURROGATE.search(body) and not _unicode(arguments):
        return "the arguments hold a lone surrogate, which is not Unicode text"
    return ""


def decode(body: bytes) -> Any:
    """The frame `body`, decoded (its values counted by `too_many` first) as strict UTF-8
    (UnicodeDecodeError); NotJson if it is no JSON, or holds NaN, Infinity or a number too large for a
    float, which Python writes into JSON and the SDK would send on as null (found by a review: ``1e400``
    reached a tool as null)."""
    text = body.decode()
    # Each float looked at in Python only where one could be too large: some 0.3 us a number more.
    decoder = _CHECKED if _may_overflow(body) else _DECODER
    # What the decoder makes is all new, and held: nothing for the collector to find. A small frame
    # makes too few objects to wake it.
    collecting = len(body) > PAUSED_PAST and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        return decoder.decode(text)
    except (ValueError, RecursionError) as exc:
        raise NotJson(str(exc)[:200]) from None
    finally:
        if collecting:
            gc.enable()


def _may_overflow(body: bytes) -> bool:
    """Whether `body` may hold a number too large for a float, or an integer too long to decode at
    ease: one of DBL_MAX's magnitude, past 10**308, has an exponent of three digits or more, or (its
    exponent at most 99) 210 digits or more before its point; so an exponent of three digits, or
    LONG_DIGITS digits in a row (in a string, or not), found at C's pace. Found by a second look: a run
    of 260 digits, then ``.5e50``, was missed, and went on as null."""
    zeroed = body.translate(_ZEROED)
    return any(mark in zeroed for mark in _LARGE)


def _unicode(value: Any) -> bool:
    """Whether `value`'s text is all Unicode (no lone surrogate), as UTF-8 must hold it."""
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]} is too large for a number")
    return value


def _short(text: str) -> int:
    if len(text.lstrip("-")) > MOST_DIGITS:
        raise ValueError(f"an integer of {len(text):,} digits is longer than {MOST_DIGITS:,}")
    return int(text)


# Digits in a row that make a frame's numbers looked at one by one (`_may_overflow`); an integer's most
# digits (found by a second look: 3,800 integers of 4,299 digits, 15.6 MiB, took 0.56 s to decode).
LONG_DIGITS = 200
MOST_DIGITS = 1000
_ZEROED = bytes.maketrans(b"123456789", b"000000000")
_LARGE = (b"e000", b"e+000", b"E000", b"E+000", b"0" * LONG_DIGITS)
_DECODER = json.JSONDecoder(parse_constant=_not_json)  # one of each, not one a call
_CHECKED = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite, parse_int=_short)
