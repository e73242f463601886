"""The run's report (the value of its last expression, its figures, its files), read back and checked:
pure functions over bytes, no I/O.

The report is written by the bootstrap inside the run (`runner.inrun.harvest`), framed as the wire
says (`runner.inrun.wire`, which reads the frame back too), where the code could have written one
of its own first. So nothing in it is trusted: every size is checked against
the blobs and the call's budgets, image sizes are read from the images themselves, and what a file
is (image, text, bytes) is decided here from its name and content. A report that does not hold
together is dropped whole, with a note; it can never make the call fail.
"""

from __future__ import annotations

import dataclasses
import json
import math
import posixpath
from dataclasses import dataclass
from typing import Any

from runner.execution.capture import shown, shown_name
from runner.inrun.images import PNG_MAGIC, image_size, image_type, refused
from runner.inrun.tables import MAX_COLUMNS, MAX_INDEX_LEVELS
from runner.inrun.wire import (
    LIMITS_MET,
    MAX_HEADER_BYTES,
    MAX_LINKED,
    MAX_NAME_CHARS,
    MAX_OMITTED,
    Budgets,
    read_end,
    split_report,
)
from runner.outcome import Attachment, Cell, Omitted, Table

_TEXT_TYPES = {
    ".csv": "text/csv",
    ".tsv": "text/tab-separated-values",
    ".json": "application/json",
    ".md": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".xml": "application/xml",
    ".svg": "image/svg+xml",
    ".py": "text/x-python",
    ".txt": "text/plain",
    ".log": "text/plain",
    ".yaml": "application/yaml",
    ".yml": "application/yaml",
}
_BINARY_TYPES = {
    ".pdf": "application/pdf",
    ".zip": "application/zip",
    ".gz": "application/gzip",
    ".parquet": "application/vnd.apache.parquet",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".npy": "application/octet-stream",
    ".pkl": "application/octet-stream",
}


@dataclass(frozen=True, slots=True)
class Returned:
    """What came back besides the output."""

    result: str | None = None
    result_chars: int = 0
    attachments: tuple[Attachment, ...] = ()
    omitted: tuple[Omitted, ...] = ()
    end: RunEnd | None = None
    # Over a budget, sent whole to be kept and linked (`note`: which budget); the driver keeps them.
    linked: tuple[Attachment, ...] = ()
    table: Table | None = None


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The run's own account of its end, sent once its output was flushed and closed."""

    status: int  # its exit status, 0-255
    cpu_seconds: float  # of itself and every child it reaped
    peak_memory_bytes: int
    # The limit its code's uncaught exception says it met: "memory" (a MemoryError, numpy's and pandas'
    # subclasses included, or ENOMEM), "file_size" (EFBIG), "" (none, or one the code raised itself), or
    # "exit" (its code ended itself with a failure: a child's limit, maybe, read from stderr).
    limit: str = ""


NOTHING = Returned()


def parse_report(data: bytes | bytearray, budgets: Budgets) -> Returned:
    """What a complete report (as `wire.report_length` measured it) says, checked; NOTHING for no report."""
    if not data:
        return NOTHING
    try:
        # Most runs return nothing but their end, in the one form the wire reads without the JSON
        # decoder (`read_end`); anything else, that form's values out of range included, goes the
        # whole way.
        end = read_end(data)
        if end is not None:
            return Returned(end=RunEnd(end[0], end[1], end[2] * 1024, end[3]))
        return _parse(data, budgets)  # not copied: only the blobs it keeps are
    except (ValueError, KeyError, TypeError, RecursionError) as exc:  # RecursionError: JSON nested deep
        return Returned(omitted=(Omitted("(the run's report)", len(data), f"malformed, dropped: {exc}"),))


def _parse(data: bytes | bytearray, budgets: Budgets) -> Returned:
    head_size, blob_size, header, blobs = split_report(data)
    _require(head_size <= MAX_HEADER_BYTES + 6 * budgets.result_chars, "header too large")
    _require(blob_size <= budgets.call_bytes + budgets.kept_bytes, "more bytes than the call's budgets")
    head = json.loads(header)
    _require(len(blobs) == blob_size, "blobs cut short")
    _require(isinstance(head, dict), "header is not an object")
    result = head.get("result")
    _require(result is None or isinstance(result, str), "result is not text")
    result_chars = 0
    if result is not None:
        # Shown as its output is, and cut to the budget as shown (escapes included); `result_chars` is
        # what is shown plus what was cut, so that the line saying the cut counts what it left out
        # (found by a review: escaped after the cut, a cut result of 100,000 surrogates said none).
        whole = max(_count(head.get("result_chars", 0)), len(result))
        result, kept = _shown_within(result[: budgets.result_chars], budgets.result_chars)
        result_chars = len(result) + whole - kept
    attachments: list[Attachment] = []
    at = 0
    table: Table | None = None
    dropped: list[Omitted] = []
    if head.get("table") is not None:
        at = _count(head["table"])
        _require(at <= budgets.table_bytes, "a table over its budget")
        try:
            table = parse_table(blobs[:at], budgets.table_rows)
        except (ValueError, TypeError, RecursionError) as exc:  # the rest of the report stands
            dropped.append(Omitted("(the last value's table)", at, f"malformed, dropped: {exc}"))
    for entry in _entries(head, "images"):
        size = _count(entry["bytes"])
        png = bytes(blobs[at : at + size])
        at += size
        _require(png.startswith(PNG_MAGIC), "a figure is not a PNG")
        width, height = image_size(png, "image/png")
        attachments.append(Attachment(_name(entry["name"]), png, "image/png", "image", width, height, _text(entry)))
    for entry in _entries(head, "files"):
        size = _count(entry["bytes"])
        attachments.append(classify_file(_name(entry["path"]), bytes(blobs[at : at + size])))
        at += size
    _require(at <= budgets.call_bytes, "more bytes than the call's budget")
    inline = at
    linked: list[Attachment] = []
    too_large: list[Omitted] = []
    for entry in _entries(head, "linked")[:MAX_LINKED]:
        size = _count(entry["bytes"])
        file = classify_file(_name(entry["name"]), bytes(blobs[at : at + size]))
        at += size
        why = refused(file.width, file.height) if file.kind == "image" else None
        if why is not None:  # a link to it would be decoded as the image itself
            too_large.append(Omitted(file.name, size, why))
        else:  # a reason always: it is what marks a link as a file's, not a stream's
            reason = _text(entry, "reason") or "over what the answer carries"
            linked.append(dataclasses.replace(file, note=reason))
    _require(at - inline <= budgets.kept_bytes, "more bytes linked than the call's budget to keep")
    _require(at == blob_size, "sizes do not add up to the blobs")
    attachments, over = _within_budgets(attachments, budgets)
    omitted = [Omitted(_name(e["name"]), _count(e["bytes"]), _text(e, "reason")) for e in _entries(head, "omitted")]
    omitted += over + too_large + dropped
    more = _count(head.get("more_omitted", 0))
    if more:
        omitted.append(Omitted(f"{more:,} more", 0, "not listed"))
    omitted = omitted[: MAX_OMITTED + 1]
    end = _end(head.get("end"))
    return Returned(result, result_chars, tuple(attachments), tuple(omitted), end, tuple(linked), table)


def parse_table(data: bytes | bytearray | memoryview, max_rows: int) -> Table:
    """A table as `runner.inrun.tables` writes it, checked: column names and dtypes as text, the same
    number of cells in every row, at most `max_rows` rows, every cell a JSON scalar (no NaN or infinity,
    which JSON has not either), every text Unicode. Raises ValueError (or TypeError) naming what is wrong."""

    def no_constants(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    value = json.loads(bytes(data), parse_constant=no_constants)
    _require(isinstance(value, dict), "not an object")
    columns = _labels(value.get("columns"), "columns")
    _require(len(columns) <= MAX_COLUMNS, f"more than {MAX_COLUMNS} columns")
    dtypes = _labels(value.get("dtypes"), "dtypes")
    _require(len(dtypes) == len(columns), "a dtype for each column")
    shape = value.get("shape")
    _require(isinstance(shape, list) and 1 <= len(shape) <= 2, "shape is not one or two counts")
    shape = tuple(_count(n) for n in shape)
    rows = _rows(value.get("rows"), len(columns), max_rows)
    _require(len(rows) <= shape[0], "more rows than its shape")
    index = value.get("index")
    if index is None:
        return Table(columns, dtypes, shape, rows)
    _require(isinstance(index, dict), "index is not an object")
    names = index.get("names")
    _require(isinstance(names, list) and 0 < len(names) <= MAX_INDEX_LEVELS, "index names are not a list")
    index_names = tuple(None if name is None else _labels([name], "index names")[0] for name in names)
    keys = _rows(index.get("rows"), len(index_names), max_rows)
    _require(len(keys) == len(rows), "an index key for each row")
    return Table(columns, dtypes, shape, rows, index_names, keys)


def _labels(value: object, what: str) -> tuple[str, ...]:
    _require(isinstance(value, list) and all(isinstance(v, str) for v in value), f"{what} are not text")
    assert isinstance(value, list)
    return tuple(_unicode(v) for v in value)


def _rows(value: object, width: int, max_rows: int) -> tuple[tuple[Cell, ...], ...]:
    _require(isinstance(value, list) and len(value) <= max_rows, f"rows are not a list of at most {max_rows:,}")
    assert isinstance(value, list)
    rows: list[tuple[Cell, ...]] = []
    for row in value:
        _require(type(row) is list and len(row) == width, f"a row is not a list of {width} cells")
        # What json.loads makes, by exact type: most cells need no more than this look.
        if all(type(v) in _PLAIN or (type(v) is float and -_INFINITY < v < _INFINITY) for v in row):
            rows.append(tuple(row))
        else:
            rows.append(tuple(_cell(v) for v in row))
    return tuple(rows)


# Cells json.loads made that are good as they are: ints, booleans, null (floats are checked for
# infinities, text for what is not Unicode).
_PLAIN = frozenset({int, bool, type(None)})
_INFINITY = float("inf")


def _cell(value: object) -> Cell:
    if type(value) is str:
        return value if value.isascii() else _unicode(value)
    return _scalar(value)


def _scalar(value: object) -> Cell:
    _require(value is None or isinstance(value, (bool, int, float)), "a cell is not a JSON scalar")
    # 1e400 reads as an infinity, which JSON cannot carry back out (the run writes "inf" as text).
    _require(not isinstance(value, float) or math.isfinite(value), "a cell is not a finite number")
    return value  # type: ignore[return-value]  # checked above


def _end(value: object) -> RunEnd | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError("end is not an object")
    status, cpu = value.get("status"), value.get("cpu")
    if not (isinstance(status, int) and not isinstance(status, bool) and 0 <= status <= 255):
        raise ValueError("an exit status out of range")
    if not (isinstance(cpu, (int, float)) and not isinstance(cpu, bool) and 0 <= cpu < 1e9):
        raise ValueError("CPU is not a number")
    limit = value.get("limit", "")
    if limit not in LIMITS_MET:
        raise ValueError("an unknown limit met")
    return RunEnd(status, float(cpu), _count(value.get("maxrss_kb")) * 1024, limit)


def _within_budgets(attachments: list[Attachment], budgets: Budgets) -> tuple[list[Attachment], list[Omitted]]:
    """What fits the budgets, in order, and what does not (the run keeps to them too: this is for a
    report the code wrote itself)."""
    kept: list[Attachment] = []
    over: list[Omitted] = []
    images = files = 0
    for attachment in attachments:
        size = len(attachment.data)
        why = refused(attachment.width, attachment.height) if attachment.kind == "image" else None
        if why is not None:
            over.append(Omitted(attachment.name, size, why))
        elif attachment.kind == "image" and images >= budgets.images:
            plural = "s" if budgets.images != 1 else ""
            over.append(Omitted(attachment.name, size, f"more than {budgets.images} image{plural} in one call"))
        elif attachment.kind == "image" and size > budgets.image_bytes:
            over.append(Omitted(attachment.name, size, f"over the {budgets.image_bytes:,}-byte image budget"))
        elif attachment.kind != "image" and files + size > budgets.file_bytes:
            reason = f"over what is left of the call's {budgets.file_bytes:,}-byte budget for files"
            over.append(Omitted(attachment.name, size, reason))
        else:
            kept.append(attachment)
            images += attachment.kind == "image"
            files += 0 if attachment.kind == "image" else size
    return kept, over


def classify_file(path: str, data: bytes) -> Attachment:
    """An image if its bytes say so, text if it is UTF-8 without NUL, else bytes; typed by its name."""
    suffix = posixpath.splitext(path)[1].lower()
    mime = image_type(data)
    if mime is not None:
        return Attachment(path, data, mime, "image", *image_size(data, mime))
    if b"\x00" not in data:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return Attachment(path, data, _TEXT_TYPES.get(suffix, "text/plain"), "text")
    return Attachment(path, data, _BINARY_TYPES.get(suffix, "application/octet-stream"), "blob")


def _require(condition: bool, problem: str) -> None:
    if not condition:
        raise ValueError(problem)


def _entries(head: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = head.get(key, [])
    if not (isinstance(value, list) and all(isinstance(e, dict) for e in value)):
        raise ValueError(f"{key} is not a list of objects")
    return value


def _count(value: object) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        raise ValueError("a size is not a count")
    return value


def _name(value: object) -> str:
    _require(isinstance(value, str) and 0 < len(value) <= MAX_NAME_CHARS and "\x00" not in value, "a bad name")
    return _printable(str(value))


def _text(entry: dict[str, Any], key: str = "note") -> str:
    value = entry.get(key, "")
    _require(isinstance(value, str), f"{key} is not text")
    return _printable(value[:500])


def _shown_within(text: str, most: int) -> tuple[str, int]:
    """`text` as shown (`shown`: controls and what is not Unicode escaped), its longest prefix that is at
    most `most` characters so; and how many of `text`'s characters that prefix holds."""
    said = shown(_unicode(text))
    if len(said) <= most:
        return said, len(text)
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if len(shown(_unicode(text[:middle]))) <= most:
            low = middle
        else:
            high = middle - 1
    return shown(_unicode(text[:low])), low


def _printable(text: str) -> str:
    """A name as shown (`shown_name`: controls, bidirectional and invisible characters escaped; a file name
    may hold any), and what is not Unicode (a name's undecodable bytes, as lone surrogates) as `\\udcXX`:
    no JSON or URI encoder downstream may fail on it."""
    return shown_name(_unicode(text))


def _unicode(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
