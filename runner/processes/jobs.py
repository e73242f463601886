"""The job socket between the server and one run: what the server sends (the code, the call's files
and what the run may return), framed so that the run starts the moment the last byte arrives.

Standard library only: read inside the run interpreter, loaded by the bootstrap
(`bootstrap.load_sibling`). The run's report goes back on the same socket (`harvest`).
"""

from __future__ import annotations

import os


class Job:
    """One call as the run gets it: its code, its files (`frame_inputs`), and what it may return
    besides its output (`harvest.Budgets`)."""

    __slots__ = ("budgets", "code", "inputs", "socket")

    def __init__(self, code: bytearray, inputs: bytes, budgets: tuple[int, ...], socket: tuple[int, int]) -> None:
        self.code, self.inputs, self.budgets, self.socket = code, inputs, budgets, socket


NO_RETURNS = (0, 0, 0, 0, 0)


def frame_job(code: bytes, inputs: bytes = b"", budgets: tuple[int, ...] = NO_RETURNS) -> bytes:
    """What the server writes on the job socket: the sizes and budgets on one line, the code, the files.

    `budgets` are `harvest.Budgets`' numbers, in its order; all 0, the run returns its output only.
    """
    numbers = b" ".join(b"%d" % n for n in (len(code), len(inputs), *budgets))
    return numbers + b"\n" + code + inputs


def frame_code(code: bytes) -> bytes:
    """A job of code alone, returning nothing but its output."""
    return frame_job(code)


def read_job(fd: int) -> Job | None:
    """Read the job the server framed with `frame_job`; None if the socket closed before all of it came.

    The sizes let the run start as soon as the last byte arrives (waiting for the server to close
    the socket would cost a second wake-up), and the job is read into one buffer of its size. The
    socket stays open, for the report (`harvest`), but no program the code starts inherits it.
    """
    head = b""
    while b"\n" not in head:
        chunk = os.read(fd, 128)
        if not chunk:
            return None
        head += chunk
    line, _, first = head.partition(b"\n")
    numbers = tuple(int(n) for n in line.split())
    body = bytearray(numbers[0] + numbers[1])
    got = min(len(first), len(body))
    body[:got] = first[:got]
    view = memoryview(body)
    while got < len(body):
        n = os.readv(fd, [view[got:]])
        if not n:
            break
        got += n
    view.release()
    os.set_inheritable(fd, False)
    if got != len(body):
        return None
    inputs = bytes(body[numbers[0] :]) if numbers[1] else b""
    del body[numbers[0] :]
    info = os.fstat(fd)
    return Job(body, inputs, numbers[2:], (info.st_dev, info.st_ino))  # the code not copied: decode() takes a bytearray


def same_socket(fd: int, job: Job) -> bool:
    """Whether `fd` is still the socket the job came on: the code may have closed it and opened a file."""
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == job.socket


def parse_inputs(blob: bytes | bytearray) -> list[tuple[str, bytes]]:
    """The call's files as the server framed them (`frame_inputs`): (relative path, content) pairs."""
    files = []
    view = memoryview(blob)
    at = 0
    while at < len(blob):
        end = blob.index(b"\n", at)
        path_size, data_size = (int(n) for n in bytes(view[at:end]).split())
        at = end + 1
        path = bytes(view[at : at + path_size]).decode("utf-8")
        at += path_size
        files.append((path, bytes(view[at : at + data_size])))
        at += data_size
    view.release()
    return files


def frame_inputs(files: list[tuple[str, bytes]]) -> bytes:
    """What `parse_inputs` reads: for each file, its path's and its content's sizes, a newline, both."""
    parts = []
    for path, data in files:
        encoded = path.encode("utf-8")
        parts += [b"%d %d\n" % (len(encoded), len(data)), encoded, data]
    return b"".join(parts)
