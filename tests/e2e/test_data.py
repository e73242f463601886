"""Data work: numpy, pandas and matplotlib from the package environment (RUNNER_PACKAGES), the
preloading zygote, figures as images, and limits that mean what they meant without them.

Needs the environment `make sandbox-env` builds (`make test` builds it and points
RUNNER_TEST_PACKAGES at it); without it these tests are skipped, saying so.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from runner.config import Config
from runner.config.disk import open_environment
from runner.errors import ConfigError
from runner.execution.pool import Pool
from runner.inrun.images import image_size
from runner.outcome import RunRequest, RunResult, Status
from tests.conftest import REPO
from tests.helpers import checked, children_of, in_mode

pytestmark = pytest.mark.anyio

PACKAGES = os.environ.get("RUNNER_TEST_PACKAGES") or str(REPO / ".sandbox-env")
# Every mode data work runs in: the preloading zygote plain and namespaced, and a fresh interpreter
# per run, plain and in bubblewrap (those import what they need themselves).
DATA_MODES = ("fork-server", "namespaces", "posix-spawn", "bwrap")


def with_packages(config: Config, mode: str, **changes: object) -> Config:
    if not os.path.isdir(os.path.join(PACKAGES, "site-packages")):
        if os.environ.get("CI"):
            pytest.fail(f"CI must build the package environment: no {PACKAGES} (make sandbox-env)")
        pytest.skip(f"no package environment at {PACKAGES}: make sandbox-env builds it")
    packaged = open_environment(Config.from_env({"RUNNER_PACKAGES": PACKAGES}))
    return in_mode(
        dataclasses.replace(
            config, packages=packaged.packages, packages_site=packaged.packages_site, preload=packaged.preload
        ),
        mode,
        **changes,
    )


@pytest.fixture(params=DATA_MODES)
async def data_pool(request: pytest.FixtureRequest, config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(with_packages(config, request.param), reap_strays=True) as pool:
        yield pool


@pytest.fixture
async def preloading_pool(config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(with_packages(config, "fork-server"), reap_strays=True) as pool:
        yield pool


async def run(pool: Pool, code: str, timeout: float = 60) -> RunResult:
    return checked(await pool.run(RunRequest("da7a0001", textwrap.dedent(code), timeout)))


async def test_pandas_under_the_default_memory_limit_and_a_plot_never_shown_comes_back(data_pool: Pool) -> None:
    code = """
        import numpy as np, pandas as pd
        import matplotlib.pyplot as plt
        frame = pd.DataFrame({"x": np.arange(1000), "y": np.arange(1000) ** 0.5})
        frame.plot(x="x", y="y")
        frame.describe()
    """
    result = await run(data_pool, code)
    assert result.status is Status.OK, result.to_text()
    assert result.result is not None
    assert result.result.splitlines()[0].split() == ["x", "y"]
    assert "count  1000.000000  1000.000000" in result.result  # the DataFrame's own text table
    [image] = result.images
    assert (image.name, image.mime_type, image.width, image.height) == ("figure-1.png", "image/png", 640, 480)
    assert image.data.startswith(b"\x89PNG")
    assert "--- images: figure-1.png (640x480, " in result.to_text()
    assert result.stderr.text == ""  # no warning from matplotlib about its cache or the backend


async def test_every_shown_figure_comes_back_even_when_closed_after_show(data_pool: Pool) -> None:
    code = """
        import matplotlib.pyplot as plt
        for n in range(2):
            plt.figure(figsize=(2, 1))
            plt.plot([0, n])
            plt.show()
            plt.close()
        plt.figure(figsize=(3, 1))
        fig = plt.gcf()
        fig.savefig("saved.png")
    """
    result = await run(data_pool, code)
    assert result.status is Status.OK, result.to_text()
    # Two shown, one only saved to a file by the code itself: that file comes back, not a copy of it.
    assert [(i.name, i.width, i.height) for i in result.images] == [
        ("figure-1.png", 200, 100),
        ("figure-2.png", 200, 100),
        ("saved.png", 300, 100),
    ]


async def test_fifty_figures_come_back_as_the_first_four_and_a_note(preloading_pool: Pool) -> None:
    code = """
        import matplotlib.pyplot as plt
        for n in range(50):
            plt.figure(figsize=(1, 1)).gca().plot([0, n])
    """
    result = await run(preloading_pool, code)
    assert result.status is Status.OK, result.to_text()
    assert [i.name for i in result.images] == [f"figure-{n}.png" for n in range(1, 5)]
    assert [(o.name, o.reason) for o in result.omitted] == [("46 more figures", "more than 4 images in one call")]
    assert "--- not returned: 46 more figures: more than 4 images in one call ---" in result.to_text()


async def test_a_thousand_open_figures_that_use_up_the_memory_still_bring_back_four_and_count_the_rest(
    data_pool: Pool,
) -> None:
    # Before: `error`, and every figure lost (rendering them needed memory the figures held).
    code = """
        import matplotlib.pyplot as plt
        for n in range(1000):
            figure = plt.figure(figsize=(2, 2))
            figure.gca().plot([0, n])
            figure.ballast = bytearray(1 << 20)  # what a figure of a large image holds
    """
    result = await run(data_pool, code)
    assert result.status is Status.MEMORY_LIMIT, result.to_text()
    assert [i.name for i in result.images] == [f"figure-{n}.png" for n in range(1, 5)], result.to_text()
    [(left_out, reason)] = [(o.name, o.reason) for o in result.omitted]
    assert re.fullmatch(r"[1-9][0-9]* more figures", left_out), left_out
    assert reason == "more than 4 images in one call"


async def test_a_figure_of_twenty_thousand_pixels_square_is_drawn_smaller_and_says_so(preloading_pool: Pool) -> None:
    code = """
        import matplotlib.pyplot as plt
        plt.figure(figsize=(200, 200), dpi=100).gca().plot([0, 1])
    """
    result = await run(preloading_pool, code)
    assert result.status is Status.OK, result.to_text()
    [image] = result.images
    assert image.width * image.height <= 4_000_000
    assert len(image.data) <= 256 * 1024
    assert image.note.startswith("20000x20000 px at full size: rendered at dpi")


async def test_a_figure_over_the_image_budget_comes_back_smaller_with_its_full_size_png_linked(
    preloading_pool: Pool,
) -> None:
    code = """
        import matplotlib.pyplot as plt, numpy as np
        plt.figure(figsize=(12, 9), dpi=150)
        plt.imshow(np.random.default_rng(1).random((300, 300)))
    """
    result = await run(preloading_pool, code)
    assert result.status is Status.OK, result.to_text()
    [image] = result.images
    assert len(image.data) <= 256 * 1024
    assert image.note.startswith("1800x1350 px at full size: rendered at dpi")
    [full] = result.kept
    assert (full.stream, full.mime_type) == ("figure-1-full.png", "image/png")
    assert full.reason == "full size; over the 262,144-byte image budget"
    found = await preloading_pool.read_output(full.uri, None)
    assert found is not None
    png = found[1]
    assert png.startswith(b"\x89PNG")
    assert len(png) == full.size > 256 * 1024
    assert image_size(png, "image/png") == (1800, 1350)
    assert "--- linked, not inline: figure-1-full.png" in result.to_text()


async def test_a_call_that_imports_a_preloaded_module_goes_to_the_preloading_zygote(preloading_pool: Pool) -> None:
    probe = "import sys\nprint(sorted(m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules))"
    lean = await run(preloading_pool, probe)
    data = await run(preloading_pool, "import json\nimport numpy\n" + probe)
    assert (lean.stdout.text, data.stdout.text) == ("[]\n", "['matplotlib', 'numpy', 'pandas']\n")


async def test_the_preloading_zygote_has_one_thread_and_runs_cannot_import_the_server(preloading_pool: Pool) -> None:
    result = await run(preloading_pool, "import numpy, os\nprint(os.getppid())")
    zygote = int(result.stdout.text)
    assert zygote in children_of(os.getpid())
    status = Path(f"/proc/{zygote}/status").read_text()
    assert re.search(r"^Threads:\s+1$", status, re.MULTILINE), status
    code = """
        import numpy
        for name in ("mcp", "pydantic", "runner", "anyio", "jsonschema", "bootstrap", "zygote", "preload"):
            try:
                __import__(name)
                print(name, "imported")
            except ImportError:
                pass
        print("done")
    """
    assert (await run(preloading_pool, code)).stdout.text == "done\n"


async def test_every_run_draws_fresh_random_numbers(preloading_pool: Pool) -> None:
    code = "import random, numpy as np\nprint(random.random(), np.random.random(), np.random.default_rng().random())"
    draws = [(await run(preloading_pool, code)).stdout.text.split() for _ in range(3)]
    for column in zip(*draws, strict=True):
        assert len(set(column)) == 3, draws


async def test_a_run_that_monkeypatches_pandas_leaves_the_next_run_a_clean_pandas(preloading_pool: Pool) -> None:
    spoil = "import pandas\npandas.DataFrame = None\npandas.read_csv = lambda *a: 'spoiled'\nprint('spoiled')"
    assert (await run(preloading_pool, spoil)).stdout.text == "spoiled\n"
    after = await run(preloading_pool, "import pandas\nprint(pandas.DataFrame.__name__, pandas.read_csv.__name__)")
    assert after.stdout.text == "DataFrame read_csv\n"


async def test_twice_the_memory_limit_is_still_the_memory_limit_in_both_zygotes(preloading_pool: Pool) -> None:
    limit = 256 * 1024 * 1024
    for imports in ("", "import pandas\n"):
        result = await run(preloading_pool, f"{imports}b = bytearray({2 * limit})")
        assert result.status is Status.MEMORY_LIMIT, (imports, result.to_text())
    # What the limit means with pandas loaded: this much on top of it.
    result = await run(preloading_pool, f"import pandas\nb = bytearray({limit * 3 // 4})\nprint(len(b))")
    assert (result.status, result.stdout.text) == (Status.OK, f"{limit * 3 // 4}\n"), result.to_text()


@pytest.mark.parametrize(
    "code",
    [
        "import numpy as np\nnp.zeros((6000, 6000)).sum()",
        "import pandas as pd\npd.DataFrame({'v': range(100_000_000)})",
    ],
    ids=["numpy", "pandas"],
)
async def test_numpy_and_pandas_running_out_of_memory_is_the_memory_limit_not_an_error(
    data_pool: Pool, code: str
) -> None:
    # Found by a new user: numpy's _ArrayMemoryError (a MemoryError subclass) ended as `error`, the
    # status read from the last line of stderr, which did not start with "MemoryError".
    result = await run(data_pool, code)
    assert result.status is Status.MEMORY_LIMIT, result.to_text()
    assert "MemoryError" in result.stderr.text
    assert "--- memory_limit: memory limit of 256 MiB exceeded ---" in result.to_text()


async def test_in_a_session_numpy_out_of_memory_is_the_memory_limit_and_the_call_is_rolled_back(
    data_pool: Pool,
) -> None:
    opened = checked(await data_pool.run(RunRequest("da7a0002", "import numpy as np\nn = 1", 60, session="new")))
    assert opened.session is not None
    handle = opened.session.handle
    code = "n = 2\nnp.zeros((6000, 6000)).sum()"
    result = checked(await data_pool.run(RunRequest("da7a0003", code, 60, session=handle)))
    assert result.status is Status.MEMORY_LIMIT, result.to_text()
    assert result.session is not None
    assert not result.session.kept
    after = checked(await data_pool.run(RunRequest("da7a0004", "print(n)", 60, session=handle)))
    assert after.stdout.text == "1\n"


@pytest.mark.parametrize("mode", ["namespaces", "bwrap"])
async def test_the_package_environment_is_read_only_to_a_sandboxed_run(
    config: Config, mode: str, no_leaks: None
) -> None:
    code = f"""
        import os
        target = os.path.join({PACKAGES!r}, "site-packages", "pandas", "__init__.py")
        try:
            open(target, "a").write("# planted")
            print("written")
        except OSError as exc:
            print(type(exc).__name__)
    """
    async with Pool.open(with_packages(config, mode), reap_strays=True) as pool:
        result = await run(pool, code)
    assert result.stdout.text in ("OSError\n", "PermissionError\n"), result.to_text()


STATUSES = {
    "ok": ("import pandas\nprint(len(pandas.DataFrame({'a': [1, 2]})))", 60, Status.OK, 0),
    "timeout": ("import pandas, time\ntime.sleep(30)", 1.0, Status.TIMEOUT, -9),
    "cpu": ("import pandas\nwhile True: pass", 60, Status.CPU_LIMIT, None),
    "memory": ("import pandas\nb = bytearray(2 << 30)", 60, Status.MEMORY_LIMIT, 1),
    "file size": ("import pandas\nopen('big', 'wb').write(bytes(2 << 20))", 60, Status.FILE_SIZE_LIMIT, 1),
    "output": ("import pandas, sys\nwhile True: sys.stdout.write('x' * 65536)", 60, Status.OUTPUT_LIMIT, -9),
    "error": ("import pandas\npandas.DataFrame({'a': [1]})['b']", 60, Status.ERROR, 1),
    "exit": ("import pandas, sys\nsys.exit(3)", 60, Status.ERROR, 3),
    "signal": ("import pandas, os, signal\nos.kill(os.getpid(), signal.SIGTERM)", 60, Status.SIGNAL, -15),
}


@pytest.mark.parametrize("mode", DATA_MODES)
async def test_every_status_is_the_same_with_pandas_loaded(config: Config, mode: str, no_leaks: None) -> None:
    tight = with_packages(config, mode, max_cpu_seconds=2, max_file_size_mb=1, max_output_bytes=1 << 20)
    found = {}
    async with Pool.open(tight, reap_strays=True) as pool:
        for name, (code, timeout, _, _) in STATUSES.items():
            result = await run(pool, code, timeout)
            found[name] = (result.status, result.exit_code if name != "cpu" else None)
    assert found == {name: (status, code) for name, (_, _, status, code) in STATUSES.items()}


def test_a_module_runner_preload_cannot_find_stops_the_server_at_start_naming_the_variable(tmp_path: Path) -> None:
    with_packages(Config(), "fork-server")  # skips without the package environment
    env = {
        "PATH": "/usr/bin:/bin",
        "RUNNER_PACKAGES": PACKAGES,
        "RUNNER_PRELOAD": "numpy,no_such_module",
        "RUNNER_WHEELHOUSE": "",
        "RUNNER_WORK_DIR": str(tmp_path),
        "RUNNER_SANDBOX": "none",
    }
    done = subprocess.run(
        [sys.executable, "-m", "runner"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "python-runner-mcp: invalid configuration: RUNNER_PRELOAD: no module 'no_such_module' in RUNNER_PACKAGES "
        "or the standard library\n"
    ), done.stderr
    assert list(tmp_path.iterdir()) == []


def test_preloaded_modules_are_found_without_importing_them() -> None:
    with_packages(Config(), "fork-server")
    found = open_environment(
        Config.from_env({"RUNNER_PACKAGES": PACKAGES, "RUNNER_PRELOAD": "numpy, matplotlib.pyplot,json,scipy.stats"})
    )
    assert found.preload == ("numpy", "matplotlib.pyplot", "json", "scipy.stats")
    for wrong in ("matplotlib.nope", "numpy..x", "pandas.DataFrame"):
        with pytest.raises(ConfigError, match="RUNNER_PRELOAD"):
            open_environment(Config.from_env({"RUNNER_PACKAGES": PACKAGES, "RUNNER_PRELOAD": wrong}))
    assert open_environment(Config.from_env({"RUNNER_PACKAGES": PACKAGES})).preload == (
        "numpy",
        "pandas",
        "matplotlib.pyplot",
    )
    assert open_environment(Config.from_env({"RUNNER_PACKAGES": PACKAGES, "RUNNER_PRELOAD": ""})).preload == ()


async def test_a_session_keeps_a_dataframe_and_an_open_figure_from_call_to_call(data_pool: Pool) -> None:
    async def step(code: str, session: str) -> RunResult:
        return checked(await data_pool.run(RunRequest("da7a0002", textwrap.dedent(code), 60, session=session)))

    started = await step(
        """
        import numpy as np, pandas as pd
        import matplotlib.pyplot as plt
        df = pd.DataFrame({"v": np.arange(200_000)})
        figure = plt.figure()
        plt.plot([1, 2, 3])
        """,
        "new",
    )
    assert started.status is Status.OK, started
    assert started.session is not None
    handle = started.session.handle
    assert len(started.images) == 1, "the figure left open is drawn once, by the call that made it"
    summed = await step("print(df.v.sum(), len(plt.get_fignums()))", handle)
    assert summed.stdout.text == f"{sum(range(200_000))} 1\n", summed
    assert summed.images == (), "an open figure from an earlier call is not drawn again"
    failed = await step("df = None\nraise RuntimeError", handle)
    assert failed.session is not None
    assert not failed.session.kept
    again = await step("df['w'] = df.v * 2\nprint(int(df.w.iloc[-1]))", handle)
    assert again.stdout.text == "399998\n", again
