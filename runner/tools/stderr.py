"""A stdio tool server's stderr, in our log under its name: read at a pace, its lines at a rate, every
credential of its entry masked before a line is cut, the last line kept for why it went down."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import anyio
import anyio.abc

from runner.logs import log_event
from runner.rates import Pace, Rate

MAX_STDERR_LINE = 2000
STDERR_LEFT_BYTES = 1 << 20  # what of it is read once the server has gone, at most
STDERR_LEFT_LINES = 5  # a stdio server's lines read once it has gone (`_read_left`), at most
# Its lines logged as a rate (a second's worth at once, then so many a second); the rest dropped, counted.
STDERR_LINES = (1000, 100.0)
STDERR_BYTES = 8 << 20  # of its stderr read a second, and at once (a legitimate server's logging waits not)
STDERR_READ = 64 << 10  # a read of its stderr at most, and as paced
TOLD = (1, 0.1)  # how often what was dropped is logged


async def stderr_to_log(
    stack: contextlib.AsyncExitStack, logger: logging.Logger, name: str, secrets: list[str], last: list[str]
) -> Any:
    """A file for a stdio server's stderr whose lines go to our log under the server's `name`; the last
    one kept in `last`, for why it went down (`downstream.Connection._reason`): once it has gone, what it
    wrote that was not read yet is read then (`_read_left`)."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    stack.callback(os.close, read_end)
    held = [b""]  # the start of a line `_log_lines` has read, not ended yet (masked where it can be)
    stack.callback(_read_left, read_end, logger, name, secrets, last, held)
    errlog = os.fdopen(write_end, "w")
    stack.callback(errlog.close)
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.push_async_callback(_cancel_soon, tg)
    tg.start_soon(_log_lines, read_end, logger, name, secrets, last, held)
    return errlog


def _read_left(
    fd: int, logger: logging.Logger, name: str, secrets: list[str], last: list[str], held: list[bytes]
) -> None:
    """The last of what a stdio server that has gone wrote on its stderr (`fd`) that `_log_lines` had not
    read (the SDK can end the connection first): its last words, why it could not start, say. Read
    without waiting, after the line `_log_lines` `held` (a credential may span the two: found by a
    review, 16 of a key's 24 characters went to the log and to runs), at most STDERR_LEFT_BYTES, its end
    kept back where more may follow, as `_log_lines` does; at most STDERR_LEFT_LINES lines logged."""
    left, more = held[0], True
    while more and len(left) < STDERR_LEFT_BYTES:
        try:
            chunk = os.read(fd, STDERR_READ)
        except OSError:  # nothing more now (BlockingIOError), or no pipe
            break
        more = bool(chunk)
        left += chunk
    masked, keep = _stderr_masks(secrets)
    for secret, mask in masked:
        left = left.replace(secret, mask)
    *ended, tail = left.split(b"\n")
    if more:  # cut short: the end of a line not ended yet could be the start of a credential
        tail = tail[: max(0, len(tail) - keep)]
    lines = [line[:MAX_STDERR_LINE].decode("utf-8", "replace").rstrip() for line in (*ended, tail) if line.strip()]
    for text in lines[-STDERR_LEFT_LINES:]:
        log_event(logger, logging.INFO, "tool server stderr", server=name, line=text)
        last[:] = [text]


def _stderr_masks(secrets: list[str]) -> tuple[list[tuple[bytes, bytes]], int]:
    """Each credential in bytes, with its mask; and the bytes at the end of a read that may start one."""
    masked = [(secret.encode(), b"***") for secret in secrets]
    return masked, max((len(secret) for secret, _ in masked), default=1) - 1


async def _log_lines(
    fd: int, logger: logging.Logger, name: str, secrets: list[str], last: list[str], held: list[bytes]
) -> None:
    """Log each line a stdio server writes on its stderr (`fd`), at a rate (`STDERR_LINES`), with
    every credential of its entry (`secrets`) masked before the line is cut; the last one logged in
    `last`, the start of the one not ended yet in `held` (for `_read_left`)."""
    pending = b""
    rate, told = Rate(*STDERR_LINES), Rate(*TOLD)
    paced = Pace(STDERR_BYTES, STDERR_BYTES, anyio.current_time())
    # The end of a long line waits for what follows (`keep` bytes): it may be the start of a credential.
    masked, keep = _stderr_masks(secrets)
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, STDERR_READ)
        except BlockingIOError:
            continue
        if not chunk:
            break
        pending += chunk
        for secret, mask in masked:
            pending = pending.replace(secret, mask)
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_STDERR_LINE + keep:
            lines.append(pending[: len(pending) - keep])
            pending = pending[len(pending) - keep :]
        held[0] = pending
        for n, line in enumerate(lines):
            # A blank line is charged as any other (found by a review: skipped before the rate, a flood
            # of them cost the event loop 3.6 times a flood of text lines' CPU).
            if not rate.take():
                rate.dropped += len(lines) - n - 1  # the rest, not looked at one by one (blank or not)
                break
            if not line.strip():
                continue
            text = line[:MAX_STDERR_LINE].decode("utf-8", "replace").rstrip()
            log_event(logger, logging.INFO, "tool server stderr", server=name, line=text)
            last[:] = [text]
        if rate.dropped and told.take():
            log_event(logger, logging.WARNING, "tool server stderr not logged", server=name, lines=rate.dropped)
            rate.dropped = 0
        # Read at a pace, not as fast as it comes: a flood's reads cost the event loop 99% of it; and
        # each read as if it were a full one, a byte at a time cost it 80%.
        wait = paced.spend(max(len(chunk), STDERR_READ), anyio.current_time())
        if wait:
            await anyio.sleep(wait)


async def _cancel_soon(tg: anyio.abc.TaskGroup) -> None:
    tg.cancel_scope.cancel()
