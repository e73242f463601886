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
    index = None if _default_index(head.index, pandas) else head.index
    table: dict[str, Any] = {"columns": columns, "dtypes": dtypes, "shape": list(value.shape), "rows": []}
    if index is not None:
        table["index"] = {"names": [None if name is None else _label(name) for name in index.names], "rows": []}
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    size = len(dumps(table).encode("utf-8")) + 16  # the index's own brackets, the last row's comma
    if size > max_bytes:
        return None
    cell = _converter(pandas)
    rows, keys = table["rows"], table["index"]["rows"] if index is not None else None
    for row, key in _rows(head, index, cell):
        size += len(dumps(row).encode("utf-8")) + 1 + (len(dumps(key).encode("utf-8")) + 1 if keys is not None else 0)
        if size > max_bytes:
            break
        rows.append(row)
        if keys is not None:
            keys.append(key)
    return dumps(table).encode("utf-8")


def _rows(head: Any, index: Any, cell: Callable[[object], object]) -> Iterator[tuple[list[object], list[object]]]:
    """Each row of `head` (a DataFrame's or a Series') as JSON values, with its index key (empty where
    `index` is None), converted CHUNK_ROWS at first, then twice as many each time."""
    frame = head.ndim == 2
    levels = index.nlevels if index is not None else 0
    start, size = 0, CHUNK_ROWS
    while start < len(head):
        chunk = head.iloc[start : start + size]
        # Column by column (one tolist() each, in C), then turned into rows; no columns: rows of nothing.
        data = [chunk.iloc[:, at].tolist() for at in range(chunk.shape[1])] if frame else [chunk.tolist()]
        cells = zip(*data, strict=True) if data else ((),) * len(chunk)
        keys = index[start : start + size].tolist() if index is not None else [()] * len(chunk)
        for values, key in zip(cells, keys, strict=True):
            parts = (key if levels > 1 else (key,)) if index is not None else ()
            yield [cell(v) for v in values], [cell(part) for part in parts]
        start, size = start + size, size * 2


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
            return int(value)
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
    if value != value:  # NaN
        return None
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value
