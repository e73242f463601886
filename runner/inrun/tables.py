"""The first rows of a run's last value, when it is a pandas DataFrame or Series, as a table an app view
can sort, filter and page (`structuredContent.table`): JSON bytes, within the call's budgets.

Standard library only, and pandas only through the value itself: a run that never imported pandas
cannot have a DataFrame for its last value (`sys.modules` tells), and one that did has it loaded
already, so nothing here imports it. Runs under the run's limits, as the rest of the harvest
(`harvest.gather`): a column of objects whose ``__str__`` never returns costs the run, not the server.
The server checks every byte again (`runner.execution.report`).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

# What one table may hold besides its byte budget: columns (a wider frame says its width in `shape`),
# characters of one cell's text, of a column's name and of its dtype's.
MAX_COLUMNS = 200
MAX_CELL_CHARS = 1000
MAX_LABEL_CHARS = 200
# Levels of an index shown (a deeper one is left out: the rows stand without it).
MAX_INDEX_LEVELS = 64
# Bits of an integer shown as a number: Python writes no more than 4,300 digits of one.
MAX_INT_BITS = 14_000
# A cell cut to MAX_CELL_CHARS ends with this.
CUT = "\u2026"
# Rows converted at first, twice as many each time after: the conversion stops at the byte budget, so a
# frame of wide rows pays for about the rows that fit, not for every row asked for.
CHUNK_ROWS = 64


def table_of(value: object, max_rows: int, max_bytes: int) -> bytes | None:
    """``{"columns", "dtypes", "shape", "rows"}`` (and ``"index"`` where the value's index is not the
    default 0, 1, 2, ...) of `value`'s first `max_rows` rows, as compact JSON of at most `max_bytes`
    (fewer rows where all would not fit); None where `value` is neither a DataFrame nor a Series, or
    not even its header fits.

    Values are JSON: NaN, None, NaT and NA as null, infinities as the text ``"inf"``/``"-inf"``,
    datetimes, dates and times as ISO text, numbers as numbers, anything else as its ``str()``. Text
    that is not Unicode (lone surrogates, from undecodable file names) comes with them escaped.
    """
    pandas = sys.modules.get("pandas")
    if pandas is None or max_rows <= 0 or max_bytes <= 0:
        return None
    # Imported here, not with the module: every spawned run loads this module, few return a table, and
    # pandas has imported these already.
    import json

    if isinstance(value, pandas.DataFrame):
        head = value.iloc[:max_rows, :MAX_COLUMNS]
        columns = [_label(name) for name in head.columns]
        dtypes = [_label(dtype) for dtype in head.dtypes]
    elif isinstance(value, pandas.Series):
        head = value.iloc[:max_rows]
        columns = [_label(value.name) if value.name is not None else ""]
        dtypes = [_label(value.dtype)]
    else:
        return None
    shown = not _default_index(head.index, pandas) and head.index.nlevels <= MAX_INDEX_LEVELS
    index = head.index if shown else None
    names = [None if name is None else _label(name) for name in index.names] if index is not None else None
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    # Written from its parts: each chunk of rows encoded once, as it is measured.
    opening = dumps({"columns": columns, "dtypes": dtypes, "shape": list(value.shape)})[:-1] + ',"rows":['
    closing = "]" + (',"index":{"names":' + dumps(names) + ',"rows":[' if names is not None else "")
    # The closing brackets: the rows' (in `closing`), and the index's and the table's where there is an
    # index, the table's alone where not; a comma between rows (and between keys) after the first.
    size = len(opening.encode("utf-8")) + len(closing.encode("utf-8")) + (3 if names is not None else 1)
    commas = 2 if names is not None else 1
    if size > max_bytes:
        return None
    rows: list[str] = []
    keys: list[str] = []
    multi = isinstance(head.index, pandas.MultiIndex)
    for chunk_rows, chunk_keys in _chunks(head, index, multi, _converter(pandas)):
        encoded = dumps(chunk_rows)[1:-1], dumps(chunk_keys)[1:-1] if names is not None else ""
        more = len(encoded[0].encode("utf-8")) + len(encoded[1].encode("utf-8")) + (commas if rows else 0)
        if size + more <= max_bytes:  # the whole chunk fits
            size += more
            rows.append(encoded[0])
            keys.append(encoded[1])
            continue
        for row, key in zip(chunk_rows, chunk_keys, strict=True):  # the rows of it that fit
            one = dumps(row), dumps(key) if names is not None else ""
            size += len(one[0].encode("utf-8")) + len(one[1].encode("utf-8")) + (commas if rows else 0)
            if size > max_bytes:
                break
            rows.append(one[0])
            keys.append(one[1])
        break
    # Each entry is a chunk's rows (or keys) or one row's (key's): never empty, but for the keys of a table
    # without an index, which are not written.
    text = opening + ",".join(rows) + closing
    if names is not None:
        text += ",".join(keys) + "]}"
    return (text + "}").encode("utf-8")


def _chunks(
    head: Any, index: Any, multi: bool, cell: Callable[[object], object]
) -> Iterator[tuple[list[Any], list[Any]]]:
    """The rows of `head` (a DataFrame's or a Series') as JSON values, and their index keys (empty where
    `index` is None; a tuple each where it is a MultiIndex, of one level even): CHUNK_ROWS at first, then
    twice as many each time."""
    frame = head.ndim == 2
    start, size = 0, CHUNK_ROWS
    while start < len(head):
        chunk = head.iloc[start : start + size]
        # Column by column (one tolist() each, in C, and a loop made for its dtype), then turned into rows;
        # no columns: rows of nothing.
        columns = [chunk.iloc[:, at] for at in range(chunk.shape[1])] if frame else [chunk]
        data = [_column(column.tolist(), column.dtype, cell) for column in columns]
        rows = [list(values) for values in zip(*data, strict=True)] if data else [[] for _ in range(len(chunk))]
        if index is None:
            yield rows, [[]] * len(rows)
        else:
            keys = index[start : start + size].tolist()
            yield rows, [[cell(part) for part in (key if multi else (key,))] for key in keys]
        start, size = start + size, size * 2


def _column(values: list[Any], dtype: Any, cell: Callable[[object], object]) -> list[Any]:
    """One column's values (its `tolist()`) as JSON values. A NumPy integer or boolean column lists Python
    ints and bools, a float one Python floats: those need no more than a look at NaN and infinities."""
    kind = getattr(dtype, "kind", "") if type(dtype).__module__.startswith("numpy") else ""
    if kind in ("i", "u", "b"):
        return values
    if kind == "f":
        if getattr(dtype, "itemsize", 8) > 8:  # longdouble lists NumPy scalars, not floats
            values = [float(v) for v in values]
        return [v if -_INFINITY < v < _INFINITY else None if v != v else "inf" if v > 0 else "-inf" for v in values]
    return [cell(v) for v in values]


_INFINITY = float("inf")


def _default_index(index: Any, pandas: Any) -> bool:
    """Whether `index` is the one pandas gives a frame by default: 0, 1, 2, ... and no name."""
    return isinstance(index, pandas.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def _label(value: object) -> str:
    """A column's name, or a dtype, as text: a MultiIndex's tuple as its parts joined."""
    try:
        text = " / ".join(str(part) for part in value) if isinstance(value, tuple) else str(value)
    except Exception:
        text = f"<{_type_name(value)}>"
    return _text(text, MAX_LABEL_CHARS)


def _converter(pandas: Any) -> Callable[[object], object]:
    """What turns one value into what JSON can carry (`table_of` says how)."""
    import datetime
    import decimal

    missing = (pandas.NaT, pandas.NA)
    dates = (datetime.datetime, datetime.date, datetime.time)

    def cell(value: object) -> object:
        if value is None or value is True or value is False:
            return value
        if isinstance(value, str):
            return _text(value)
        if isinstance(value, int):  # bool is handled above; NumPy's integers are not int (below)
            number = int(value)
            return number if number.bit_length() < MAX_INT_BITS else f"<int of {number.bit_length():,} bits>"
        if isinstance(value, float):  # NumPy's float64 is one
            return _number(float(value))
        if any(value is m for m in missing):  # before datetime: pandas' NaT is one
            return None
        if isinstance(value, dates):
            return _text(value.isoformat())
        if isinstance(value, decimal.Decimal):
            return None if value.is_nan() else str(value)
        if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # a NumPy scalar
            if type(value).__name__ in ("datetime64", "timedelta64"):
                text = str(value)
                return None if text == "NaT" else text
            plain = value.item()  # type: ignore[attr-defined]  # every NumPy scalar has it
            if isinstance(plain, (bool, int, float)):
                return cell(plain)
        return _text(str(value))

    def guarded(value: object) -> object:
        # A value whose __str__ (or isoformat, or item) raises is shown as what it is, not as its text.
        try:
            return cell(value)
        except Exception:
            return f"<{_type_name(value)}>"

    return guarded


def _type_name(value: object) -> str:
    try:
        return str(type(value).__name__)
    except Exception:
        return "value"


def _text(text: str, limit: int = MAX_CELL_CHARS) -> str:
    """`text` cut to `limit` characters, what is not Unicode in it (lone surrogates) escaped."""
    text = str.__str__(text)  # a subclass's own methods never run here
    if len(text) > limit:
        text = text[: limit - 1] + CUT
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _number(value: float) -> object:
    if -_INFINITY < value < _INFINITY:
        return value
    return None if value != value else "inf" if value > 0 else "-inf"
