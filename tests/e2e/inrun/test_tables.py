"""A last value that is a pandas DataFrame or Series comes back as a table (runner/inrun/tables.py, read
back by runner/execution/report.py) when the call asks for one: real runs in a real pool, with the
package environment (skipped without it, failed in CI, as tests/e2e/test_data.py)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.inrun.tables import MAX_CELL_CHARS, MAX_COLUMNS
from runner.outcome import RunRequest, RunResult, Status, Table
from runner.protocol.results import structured_result
from tests.e2e.test_data import DATA_MODES, with_packages
from tests.helpers import checked

pytestmark = pytest.mark.anyio

FRAME = """
import numpy as np, pandas as pd
df = pd.DataFrame({
    "n": [1, 2, 3],
    "x": [0.5, np.nan, np.inf],
    "when": pd.to_datetime(["2026-01-02 03:04:05", None, "2026-12-31 00:00:00"]),
    "s": ["a", None, "c"],
    "flag": [True, False, None],
})
df
"""


async def table_of(pool: Pool, code: str, rows: int = 1000, **request: object) -> RunResult:
    result = checked(await pool.run(RunRequest("7ab1e000", textwrap.dedent(code), 30, table_rows=rows, **request)))
    assert result.status is Status.OK, result.stderr.text
    return result


@pytest.fixture(params=DATA_MODES)
async def data_pool(request: pytest.FixtureRequest, config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(with_packages(config, request.param), reap_strays=True) as pool:
        yield pool


@pytest.fixture
async def forked_pool(config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(with_packages(config, "fork-server"), reap_strays=True) as pool:
        yield pool


async def test_a_dataframe_comes_back_as_columns_dtypes_shape_and_json_rows_in_every_mode(data_pool: Pool) -> None:
    result = await table_of(data_pool, FRAME)
    table = result.table
    assert table is not None
    assert table.columns == ("n", "x", "when", "s", "flag")
    assert table.dtypes[:2] == ("int64", "float64")
    assert table.dtypes[2].startswith("datetime64")
    assert table.dtypes[3] in ("object", "str")  # pandas 3 has a dtype of its own for text
    assert table.dtypes[4] == "object"
    assert table.shape == (3, 5)
    assert table.rows == (
        (1, 0.5, "2026-01-02T03:04:05", "a", True),
        (2, None, None, None, False),
        (3, "inf", "2026-12-31T00:00:00", "c", None),
    )
    assert table.index_names == ()
    assert result.result is not None
    assert "2026-01-02 03:04:05" in result.result, "the text stays as it was"


async def test_a_call_that_asks_for_no_table_gets_none(forked_pool: Pool) -> None:
    result = await table_of(forked_pool, FRAME, rows=0)
    assert result.table is None
    assert "table" not in structured_result(result)


async def test_a_value_that_is_no_dataframe_or_series_gets_no_table(forked_pool: Pool) -> None:
    for code in ("[1, 2, 3]", "import numpy as np\nnp.arange(3)", "import pandas as pd\npd.Index([1, 2])", "None"):
        assert (await table_of(forked_pool, code)).table is None, code


async def test_only_the_first_rows_come_and_the_shape_says_how_many_there_are(forked_pool: Pool) -> None:
    result = await table_of(forked_pool, "import pandas as pd\npd.DataFrame({'i': range(2_000_000)})", rows=1000)
    assert result.table is not None
    assert result.table.shape == (2_000_000, 1)
    assert [row[0] for row in result.table.rows] == list(range(1000))


async def test_a_series_and_a_meaningful_index_come_with_the_index_s_names_and_keys(forked_pool: Pool) -> None:
    series = await table_of(
        forked_pool, "import pandas as pd\npd.Series([3, 1], index=pd.Index(['b', 'a'], name='k'), name='count')"
    )
    assert series.table == Table(("count",), ("int64",), (2,), ((3,), (1,)), ("k",), (("b",), ("a",)))
    grouped = await table_of(
        forked_pool,
        """
        import pandas as pd
        df = pd.DataFrame({"a": ["x", "x", "y"], "b": [1, 2, 1], "v": [1.0, 2.0, 3.0]})
        df.groupby(["a", "b"]).sum()
        """,
    )
    assert grouped.table is not None
    assert grouped.table.index_names == ("a", "b")
    assert grouped.table.index_rows == (("x", 1), ("x", 2), ("y", 1))
    assert grouped.table.rows == ((1.0,), (2.0,), (3.0,))
    plain = await table_of(forked_pool, "import pandas as pd\npd.DataFrame({'v': [1]})")
    assert plain.table is not None
    assert plain.table.index_names == (), "0, 1, 2, ... is no index worth showing"


async def test_a_wide_frame_comes_with_its_first_columns_and_a_long_cell_is_cut(forked_pool: Pool) -> None:
    wide = await table_of(forked_pool, f"import pandas as pd\npd.DataFrame([[1] * {MAX_COLUMNS + 50}])")
    assert wide.table is not None
    assert wide.table.shape == (1, MAX_COLUMNS + 50)
    assert len(wide.table.columns) == len(wide.table.rows[0]) == MAX_COLUMNS
    long = await table_of(forked_pool, "import pandas as pd\npd.DataFrame({'s': ['x' * 5000]})")
    assert long.table is not None
    [[cell]] = long.table.rows
    assert isinstance(cell, str)
    assert len(cell) == MAX_CELL_CHARS
    assert cell.endswith("\u2026")


async def test_rows_that_would_pass_half_the_returned_bytes_are_left_out_and_the_rest_fit(
    config: Config, no_leaks: None
) -> None:
    small = with_packages(config, "fork-server", max_returned_bytes=64 * 1024)
    async with Pool.open(small, reap_strays=True) as pool:
        result = await table_of(pool, "import pandas as pd\npd.DataFrame({'s': ['y' * 900] * 1000})")
    assert result.table is not None
    assert 0 < len(result.table.rows) < 1000
    assert result.table.shape == (1000, 1)
    carried = json.dumps(structured_result(result)["table"], ensure_ascii=False).encode()
    assert len(carried) <= 32 * 1024


async def test_a_session_call_s_dataframe_comes_back_as_a_table(forked_pool: Pool) -> None:
    first = await table_of(forked_pool, "import pandas as pd\ndf = pd.DataFrame({'v': [1, 2]})\ndf", session="new")
    assert first.table is not None
    assert first.table.rows == ((1,), (2,))
    assert first.session is not None
    again = await table_of(forked_pool, "df['w'] = df['v'] * 10\ndf", session=first.session.handle)
    assert again.table is not None
    assert again.table.rows == ((1, 10), (2, 20))
    await forked_pool.close_session(first.session.handle, None)


async def test_cells_of_objects_numpy_scalars_and_decimals_become_json(forked_pool: Pool) -> None:
    result = await table_of(
        forked_pool,
        """
        import decimal, datetime, numpy as np, pandas as pd
        pd.Series([np.int64(3), np.float32(0.5), np.bool_(True), decimal.Decimal("1.10"), datetime.date(2026, 1, 2),
                   pd.NA, pd.NaT, np.datetime64("NaT"), (1, 2), b"x"], dtype=object)
        """,
    )
    assert result.table is not None
    assert [row[0] for row in result.table.rows] == [
        3,
        0.5,
        True,
        "1.10",
        "2026-01-02",
        None,
        None,
        None,
        "(1, 2)",
        "b'x'",
    ]


async def test_a_value_the_table_cannot_show_well_still_returns_its_figures_and_files(forked_pool: Pool) -> None:
    # Found by a review: a column of arrays (embeddings) or text that is not Unicode made the table fail,
    # and with it the call's figures and files.
    result = await table_of(
        forked_pool,
        """
        import numpy as np, pandas as pd, matplotlib.pyplot as plt
        plt.plot([1, 2])
        open("out.txt", "w").write("kept")
        class Opaque:
            def __str__(self):
                raise RuntimeError("no text")
        pd.DataFrame({"\\udcff": [np.array([1, 2]), "caf\\udce9", Opaque()]})
        """,
    )
    assert [a.name for a in result.attachments] == ["figure-1.png", "out.txt"]
    assert result.table is not None
    assert result.table.columns == ("\\udcff",)
    assert [row[0] for row in result.table.rows] == ["[1 2]", "caf\\udce9", "<Opaque>"]
    assert result.omitted == ()


async def test_a_wide_long_frame_costs_the_run_the_rows_that_fit_not_every_row_asked_for(
    config: Config, no_leaks: None
) -> None:
    # Found by a review: every cell of the rows asked for was made a Python object before the byte budget
    # applied: 100,000 rows of 200 floats took 7 s and some 800 MB in the run to send 67 of them.
    async with Pool.open(with_packages(config, "fork-server"), reap_strays=True) as pool:
        result = await table_of(
            pool, "import numpy as np, pandas as pd\npd.DataFrame(np.ones((60_000, 200)))", rows=100_000
        )
    assert result.table is not None
    assert result.table.shape == (60_000, 200)
    assert 0 < len(result.table.rows) < 1000


async def test_a_table_fills_its_budget_and_odd_values_keep_it(config: Config, no_leaks: None) -> None:
    # Found by a second review: a table without an index was charged a comma for keys it never writes
    # (some 120 bytes left unused); a longdouble column or an int of 5,000 digits lost the whole table; a
    # one-level MultiIndex's keys came as "(1,)"; a MultiIndex deeper than the server takes dropped it.
    small = with_packages(config, "fork-server", max_returned_bytes=8 * 1024)  # a table of at most 4 KiB
    async with Pool.open(small, reap_strays=True) as pool:
        filled = await table_of(pool, "import pandas as pd\npd.Series([1] * 5000)", rows=5000)
        odd = await table_of(
            pool,
            """
            import numpy as np, pandas as pd
            pd.DataFrame({"big": [10 ** 5000, 7], "long": np.array([1.5, np.inf], dtype=np.longdouble)},
                         index=pd.MultiIndex.from_tuples([("a",), ("b",)], names=["k"]))
            """,
        )
        deep = await table_of(
            pool, "import pandas as pd\npd.Series([1], index=pd.MultiIndex.from_tuples([tuple(range(70))]))"
        )
    assert filled.table is not None
    written = len(json.dumps(structured_result(filled)["table"], separators=(",", ":")).encode())
    assert 4096 - len("[1],") < written <= 4096
    assert odd.table is not None
    assert odd.table.rows == (("<int of 16,610 bits>", 1.5), (7, "inf"))
    assert odd.table.index_rows == (("a",), ("b",))
    assert deep.table is not None
    assert deep.table.rows == ((1,),)
    assert deep.table.index_names == ()
