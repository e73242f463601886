"""The first rows of a run's last value, when it is a pandas DataFrame or Series, as a table an app view
can sort, filter and page (`structuredContent.table`): JSON bytes, within the call's budgets.

Standard library only, and pandas only through the value itself: a run that never imported pandas
cannot have a DataFrame for its last value (`sys.modules` tells), and one that did has it loaded
already, so nothing here imports it. Runs under the run's limits, as the rest of the harvest
(`harvest.gather`): a column of objects whose ``__str__`` never returns costs the run, not the server.
The server checks every byte again (`runner.execution.report`).
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# What one table may hold besides its byte budget: columns (a wider frame says its width in `shape`),
# characters of one cell's text, of a column's name and of its dtype's.
MAX_COLUMNS = 200
MAX_CELL_CHARS = 1000
MAX_LABEL_CHARS = 200
# A cell cut to MAX_CELL_CHARS ends with this.
CUT = "\u2026"


def table_of(value: object, max_rows: int, max_bytes: int) -> bytes | None:
    """``{"columns", "dtypes", "shape", "rows"}`` (and ``"index"`` where the value's index is not the
    default 0, 1, 2, ...) of `value`'s first `max_rows` rows, as compact JSON of at most `max_bytes`
    (fewer rows where all would not fit); None where `value` is neither a DataFrame nor a Series, or
    not even its header fits.

    Values are JSON: NaN, None, NaT and NA as null, infinities as the text ``"inf"``/``"-inf"``,
    datetimes, dates and times as ISO text, numbers as numbers, anything else as its ``str()``.
    """
    pandas = sys.modules.get("pandas")
    if pandas is None or max_rows <= 0 or max_bytes <= 0:
        return None
    if isinstance(value, pandas.DataFrame):
        head = value.iloc[:max_rows, :MAX_COLUMNS]
        columns = [_label(name) for name in head.columns]
        dtypes = [_label(dtype) for dtype in head.dtypes]
        data = [head.iloc[:, at].tolist() for at in range(head.shape[1])]
    elif isinstance(value, pandas.Series):
        head = value.iloc[:max_rows]
        columns = [_label(value.name) if value.name is not None else ""]
        dtypes = [_label(value.dtype)]
        data = [head.tolist()]
    else:
        return None
    missing = (pandas.NaT, pandas.NA)
    # Column by column, then turned into rows; a frame with no columns still has its rows.
    rows = [[_cell(cell, missing) for cell in row] for row in zip(*data, strict=True)] if data else [[]] * len(head)
    table: dict[str, Any] = {"columns": columns, "dtypes": dtypes, "shape": list(value.shape), "rows": []}
    index = None if _default_index(head.index, pandas) else head.index
    if index is not None:
        names = [None if name is None else _label(name) for name in index.names]
        levels = len(names)
        keys = [list(key) if levels > 1 else [key] for key in index.tolist()]
        table["index"] = {"names": names, "rows": []}
        rows = [[*(_cell(part, missing) for part in key), *row] for key, row in zip(keys, rows, strict=True)]
    return _within(table, rows, len(index.names) if index is not None else 0, max_bytes)


def _within(table: dict[str, Any], rows: list[list[Any]], levels: int, max_bytes: int) -> bytes | None:
    """The table as JSON with as many of `rows` as fit in `max_bytes`, each row's first `levels` cells
    its index key."""
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    size = len(dumps(table).encode("utf-8")) + 16  # the index's own brackets, the last row's comma
    if size > max_bytes:
        return None
    taken = 0
    for row in rows:
        size += len(dumps(row).encode("utf-8")) + 1 + (len(dumps(row[:levels]).encode("utf-8")) + 1 if levels else 0)
        if size > max_bytes:
            break
        taken += 1
    table["rows"] = [row[levels:] for row in rows[:taken]]
    if levels:
        table["index"]["rows"] = [row[:levels] for row in rows[:taken]]
    return dumps(table).encode("utf-8")


def _default_index(index: Any, pandas: Any) -> bool:
    """Whether `index` is the one pandas gives a frame by default: 0, 1, 2, ... and no name."""
    return isinstance(index, pandas.RangeIndex) and index.start == 0 and index.step == 1 and index.name is None


def _label(value: object) -> str:
    """A column's name, or a dtype, as text: a MultiIndex's tuple as its parts joined."""
    text = " / ".join(str(part) for part in value) if isinstance(value, tuple) else str(value)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + CUT


def _cell(value: object, missing: tuple[object, ...]) -> object:
    """One value as JSON can carry it."""
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
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return None if value.is_nan() else str(value)
    if type(value).__module__ == "numpy":  # a NumPy scalar in a column of objects
        if type(value).__name__ in ("datetime64", "timedelta64"):
            text = str(value)
            return None if text == "NaT" else text
        item = getattr(value, "item", None)
        plain = item() if callable(item) else value
        if isinstance(plain, (bool, int, float)):
            return _cell(plain, missing)
    return _text(str(value))


def _text(text: str) -> str:
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + CUT


def _number(value: float) -> object:
    if math.isnan(value):
        return None
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value
