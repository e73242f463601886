"""The `files` argument, checked: every entry a relative path inside the run's directory, decoded,
within the call's limits. Pure: what the schema cannot say (path parts, duplicates, decoded sizes).

A bad entry is an `ArgumentError` naming it, and nothing runs: a call never half-writes its files.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

from runner.errors import ArgumentError
from runner.logs import SHOWN_CHARS, cut
from runner.outcome import InputFile

MAX_FILES = 1000
MAX_PATH_CHARS = 1024
MAX_PART_BYTES = 255  # NAME_MAX: a longer part cannot be made on Linux


def check_files(entries: Sequence[dict[str, Any]], max_bytes: int, max_file_bytes: int) -> tuple[InputFile, ...]:
    """The files of a call whose `files` argument passed the schema; ArgumentError naming the first bad one.

    `max_bytes` bounds all of them together, decoded; `max_file_bytes` each one (RLIMIT_FSIZE of the
    run, which would otherwise kill it while its files are written).
    """
    files: list[InputFile] = []
    paths: set[str] = set()
    directories: set[str] = set()
    total = 0
    for index, entry in enumerate(entries):
        path = entry["path"]
        where = f"invalid argument 'files[{index}]' ({cut(path, SHOWN_CHARS)!r})"
        _check_path(path, where)
        parts = path.split("/")
        parents = {"/".join(parts[:n]) for n in range(1, len(parts))}
        if path in paths:
            raise ArgumentError(f"{where}: the same path is given twice")
        if path in directories or parents & paths:
            raise ArgumentError(f"{where}: a file cannot also be a directory of another file")
        data = _decode(entry["content"], entry.get("encoding", "utf-8"), where)
        if len(data) > max_file_bytes:
            raise ArgumentError(
                f"{where}: {len(data):,} bytes, more than a run may write to one file ({max_file_bytes:,})"
            )
        total += len(data)
        if total > max_bytes and not max_bytes:  # found by a first hour: "more than the limit of 0 bytes"
            raise ArgumentError(f"{where}: this server takes no files (RUNNER_MAX_INPUT_MB=0): call without 'files'")
        if total > max_bytes:
            raise ArgumentError(f"{where}: the files come to more than the limit of {max_bytes:,} bytes together")
        paths.add(path)
        directories |= parents
        files.append(InputFile(path, data))
    return tuple(files)


def _check_path(path: str, where: str) -> None:
    if "\x00" in path:
        raise ArgumentError(f"{where}: a path cannot hold a NUL character")
    if path.startswith("/"):
        raise ArgumentError(f"{where}: an absolute path; give one relative to the run's directory")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ArgumentError(f"{where}: every part of the path must be a name (no '..', '.' or empty part)")
        try:
            size = len(part.encode("utf-8"))
        except UnicodeEncodeError:
            raise ArgumentError(f"{where}: the path holds a lone surrogate (not valid Unicode)") from None
        if size > MAX_PART_BYTES:
            raise ArgumentError(f"{where}: a part of the path is {size} bytes long, more than {MAX_PART_BYTES}")


def _decode(content: str, encoding: str, where: str) -> bytes:
    if encoding == "base64":
        try:
            return base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ArgumentError(f"{where}: content is not valid base64 ({exc})") from None
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentError(f"{where}: content holds a lone surrogate at character {exc.start}") from None
