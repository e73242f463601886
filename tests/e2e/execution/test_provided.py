"""Packages provided from the vetted wheelhouse (runner/execution/provided.py, issue 27), through the
pool in every mode: what the code imports is installed once and importable, `packages` covers an
import no scan sees, the directories are read-only to sandboxed runs, a corrupted wheel is an
internal_error naming it while the pool goes on, and sessions keep what their calls were given.

Needs the wheelhouse `make wheelhouse` downloads and the package environment (`make test` has both
and points RUNNER_TEST_WHEELHOUSE and RUNNER_TEST_PACKAGES at them); without them these are skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.config.disk import open_environment
from runner.execution.pool import Pool
from runner.execution.wheelhouse_cache import Wanted, WheelhouseCache
from runner.outcome import NEW_SESSION, Progress, RunRequest, RunResult, Status
from tests.conftest import REPO
from tests.e2e.test_data import with_packages
from tests.helpers import checked

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

WHEELHOUSE = os.environ.get("RUNNER_TEST_WHEELHOUSE") or str(REPO / ".wheelhouse")
# Where runs' imports come from in each mode: forked from the preloading zygote, plain and namespaced;
# a fresh interpreter, plain and in bubblewrap.
MODES = ("fork-server", "namespaces", "posix-spawn", "bwrap")
SANDBOXED = ("namespaces", "bwrap")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One cache for the module: each distribution is installed (and compiled) once for all its tests."""
    path = tmp_path_factory.mktemp("environments") / "cache"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def needs_wheelhouse() -> None:
    if not os.path.isfile(os.path.join(WHEELHOUSE, "requirements.lock")):
        if os.environ.get("CI"):
            pytest.fail(f"CI must download the wheelhouse: no {WHEELHOUSE} (make wheelhouse)")
        pytest.skip(f"no wheelhouse at {WHEELHOUSE}: make wheelhouse downloads it")


def with_wheelhouse(config: Config, mode: str, cache: Path, wheelhouse: str = WHEELHOUSE, **changes: object) -> Config:
    """`config` in `mode` with the package environment and the wheelhouse, its cache at `cache`."""
    needs_wheelhouse()
    packaged = dataclasses.replace(with_packages(config, mode), **changes)  # type: ignore[arg-type]
    opened = open_environment(dataclasses.replace(packaged, wheelhouse=wheelhouse, wheelhouse_cache=str(cache)))
    found = ("wheelhouse", "wheelhouse_cache", "wheelhouse_contents", "wheelhouse_distributions", "wheelhouse_modules")
    return dataclasses.replace(packaged, **{name: getattr(opened, name) for name in found})


async def run(pool: Pool, code: str, **fields: object) -> RunResult:
    return checked(await pool.run(RunRequest("9ac4a9e0", textwrap.dedent(code), 120, **fields)))  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
async def test_sklearn_and_bs4_imported_by_the_code_just_work_with_no_packages_argument(
    config: Config, cache: Path, mode: str, no_leaks: None
) -> None:
    # scikit-learn imports scipy.stats, which alone maps about 250 MiB in a fresh interpreter: data
    # work in a spawned mode wants a larger limit (docs/spawn-modes.md, the preloading zygote).
    spawned = {"max_memory_mb": 1024} if mode in ("posix-spawn", "bwrap") else {}
    async with Pool.open(with_wheelhouse(config, mode, cache, **spawned)) as pool:
        result = await run(
            pool,
            """
            from bs4 import BeautifulSoup
            import sklearn
            from sklearn.linear_model import LinearRegression
            print(BeautifulSoup("<p>hi</p>", "html.parser").p.text)
            print(LinearRegression().fit([[0], [1]], [0, 2]).coef_)
            """,
        )
        assert result.status is Status.OK, result.to_text()
        assert result.stdout.text.split("\n")[:2] == ["hi", "[2.]"]


async def test_an_import_no_scan_sees_works_through_packages_and_fails_without(
    config: Config, cache: Path, no_leaks: None
) -> None:
    code = "import importlib\nname = 'tab' + 'ulate'\nprint(importlib.import_module(name).tabulate([[1, 2]]))"
    async with Pool.open(with_wheelhouse(config, "namespaces", cache)) as pool:
        without = await run(pool, code)
        assert without.status is Status.ERROR
        assert "ModuleNotFoundError: No module named 'tabulate'" in without.stderr.text
        assert "name 'tabulate' in 'packages'" in without.note
        named = await run(pool, code, packages=("tabulate",))
        assert named.status is Status.OK, named.to_text()
        assert "-  -" in named.stdout.text


async def test_parquet_through_pyarrow_works_at_the_default_memory_limit_and_pandas_names_its_engine(
    config: Config, cache: Path, no_leaks: None
) -> None:
    # Found by a first hour: at 256 MiB Arrow's own allocator reserved address space RLIMIT_AS counts, and
    # a parquet file's read waited until the run's timeout; and pandas' own ImportError got no note.
    assert config.max_memory_mb == 256
    code = """
        import pandas as pd
        pd.DataFrame({"a": range(1000)}).to_parquet("y.parquet")
        print(pd.read_parquet("y.parquet").shape)
        """
    async with Pool.open(with_wheelhouse(config, "namespaces", cache)) as pool:
        without = await run(pool, code)
        assert without.status is Status.ERROR
        assert "name 'pyarrow' in 'packages'" in without.note, without.to_text()
        named = await run(pool, code, packages=("pyarrow",))
        assert named.status is Status.OK, named.to_text()
        assert named.stdout.text == "(1000, 1)\n"


@pytest.mark.parametrize("mode", SANDBOXED)
async def test_a_sandboxed_run_cannot_write_into_a_provided_environment(
    config: Config, cache: Path, mode: str, no_leaks: None
) -> None:
    code = """
        import os, sympy
        home = os.path.dirname(sympy.__file__)
        for attempt in (lambda: open(os.path.join(home, "evil.py"), "w"), lambda: os.remove(sympy.__file__),
                        lambda: os.rename(home, home + ".moved"), lambda: os.chmod(sympy.__file__, 0o777)):
            try:
                attempt()
            except OSError as exc:
                print(exc.errno)
            else:
                print("written")
        # The cache's locks are not in the view: a run that held one could stall other calls' installs.
        print(sorted(os.listdir(os.path.dirname(os.path.dirname(os.path.dirname(home))))))
    """
    async with Pool.open(with_wheelhouse(config, mode, cache)) as pool:
        result = await run(pool, code)
    assert result.status is Status.OK, result.to_text()
    assert result.stdout.text.split("\n")[:4] == ["30"] * 4  # EROFS, each of them
    assert result.stdout.text.split("\n")[4] == "['packages']"
    assert not list(cache.glob("packages/sympy-*/sympy/evil.py"))


async def test_two_calls_that_first_want_the_same_package_at_once_install_it_once(
    config: Config, tmp_path: Path, no_leaks: None
) -> None:
    fresh = tmp_path / "fresh-cache"
    async with Pool.open(with_wheelhouse(config, "fork-server", fresh, max_concurrent=2)) as pool:
        assert pool.packages is not None
        results: list[RunResult] = []

        async def one() -> None:
            results.append(await run(pool, "import yaml\nprint(yaml.safe_dump({'a': 1}), end='')"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
        assert [r.stdout.text for r in results] == ["a: 1\n", "a: 1\n"], [r.to_text() for r in results]
        assert pool.packages.cache.installs == 1
        assert [p.name.split("-")[0] for p in (fresh / "packages").iterdir()] == ["pyyaml"]
        again = await run(pool, "import yaml")
        assert again.status is Status.OK
        assert pool.packages.cache.installs == 1


def uncompiled(directory: Path) -> list[str]:
    """The modules under `directory` without their bytecode next to them (as the runs' interpreter
    names it: the one running these tests)."""
    tag = sys.implementation.cache_tag
    return [
        str(module.relative_to(directory))
        for module in directory.rglob("*.py")
        if not (module.parent / "__pycache__" / f"{module.stem}.{tag}.pyc").is_file()
    ]


@pytest.mark.slow
async def test_a_package_installed_by_a_serving_server_is_wholly_compiled_while_calls_go_on(
    config: Config, tmp_path: Path, no_leaks: None
) -> None:
    # Found by a new user's first hour: the stray sweep killed the installer's compile (a child of the
    # server it did not know) and sympy kept 13-184 of its 1,533 .pyc; import sympy took 2-3 s each time.
    fresh = tmp_path / "fresh-cache"
    served = with_wheelhouse(config, "fork-server", fresh, max_concurrent=2)
    async with Pool.open(served, reap_strays=True) as pool:
        done = anyio.Event()

        async def meanwhile() -> None:  # each run that ends asks for a sweep
            while not done.is_set():
                assert (await run(pool, "print(1)")).stdout.text == "1\n"

        async with anyio.create_task_group() as tg:
            tg.start_soon(meanwhile)
            result = await run(pool, "import sympy\nprint(sympy.sqrt(8))")
            done.set()
        assert result.stdout.text == "2*sqrt(2)\n", result.to_text()
        (installed,) = (fresh / "packages").glob("sympy-*")
        assert len(list(installed.rglob("*.py"))) > 1000
        assert uncompiled(installed) == []


async def test_a_corrupted_wheel_is_an_internal_error_naming_it_and_the_pool_goes_on(
    config: Config, tmp_path: Path, no_leaks: None
) -> None:
    needs_wheelhouse()
    house = tmp_path / "house"
    shutil.copytree(WHEELHOUSE, house)
    [wheel] = house.glob("tabulate-*.whl")
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one byte of it changed: the lock's hash no longer matches
    wheel.write_bytes(bytes(data))
    async with Pool.open(with_wheelhouse(config, "fork-server", tmp_path / "cache", wheelhouse=str(house))) as pool:
        broken = await run(pool, "import tabulate")
        assert broken.status is Status.INTERNAL_ERROR
        assert "tabulate-0" in broken.message
        assert "does not have any of the lock's hashes for tabulate" in broken.message
        named = await run(pool, "print(1)", packages=("tabulate",))
        assert named.status is Status.INTERNAL_ERROR
        # A new session's first call answered before it ran has no handle: its session is ended, not
        # left holding the caller's cap until it is idle 15 minutes (found by a review).
        for _ in range(config.max_sessions_per_caller + 1):
            first = await run(pool, "import tabulate", session=NEW_SESSION)
            assert (first.status, first.session) == (Status.INTERNAL_ERROR, None), first.to_text()
        assert pool.state().sessions.open == 0
        fine = await run(pool, "import yaml\nprint('still serving')")
        assert (fine.status, fine.stdout.text) == (Status.OK, "still serving\n")
    assert not list((tmp_path / "cache" / "packages").glob("tabulate*"))


async def test_a_module_that_is_nowhere_here_gets_a_note_saying_so_and_what_the_wheelhouse_offers(
    config: Config, cache: Path, no_leaks: None
) -> None:
    # Found by a new user: `import requests` gave a bare ModuleNotFoundError, and a model tries pip next.
    async with Pool.open(with_wheelhouse(config, "namespaces", cache)) as pool:
        missing = await run(pool, "import requests")
        assert missing.status is Status.ERROR
        said = "no module 'requests' here: it is neither in the package environment nor in the wheelhouse"
        assert missing.note.startswith(said), missing.note
        assert "the wheelhouse offers bs4, networkx," in missing.note
        assert f"--- note: {missing.note} ---\n--- exit_code: 1" in missing.to_text()
        # A module that is there, failing within: not the server's to explain.
        inside = await run(pool, "import numpy.nothing_here")
        assert (inside.status, inside.note) == (Status.ERROR, "")
        # A run that catches it and fails otherwise gets no note.
        caught = await run(pool, "try:\n    import requests\nexcept ImportError:\n    raise SystemExit(3)")
        assert (caught.exit_code, caught.note) == (3, "")
        # A session's call too.
        first = await run(pool, "import requests", session=NEW_SESSION)
        assert first.note.startswith(said), first.to_text()
        assert first.session is not None
        assert await pool.close_session(first.session.handle, None) is None


async def test_a_session_keeps_what_its_calls_were_given_and_gets_more_as_it_goes(
    config: Config, cache: Path, no_leaks: None
) -> None:
    async with Pool.open(with_wheelhouse(config, "namespaces", cache)) as pool:
        first = await run(pool, "import sympy\nx = sympy.Symbol('x')", session=NEW_SESSION)
        assert first.status is Status.OK, first.to_text()
        assert first.session is not None
        handle = first.session.handle
        second = await run(pool, "from bs4 import BeautifulSoup\nprint(sympy.expand((x + 1) ** 2))", session=handle)
        assert second.status is Status.OK, second.to_text()
        assert second.stdout.text == "x**2 + 2*x + 1\n"
        assert await pool.close_session(handle, None) is None


# A server whose cache is on a read-only mount (the image's: root's, on the read-only root), as root:
# root may write a directory of any mode, but not into a read-only mount.
READ_ONLY_CACHE = """
import anyio, hashlib, json, sys, zipfile
from pathlib import Path
from runner.execution.wheelhouse_cache import WheelhouseCache, InstallError, Wanted

def wanted(name):
    path = Path(sys.argv[2]) / f"{name}-1.0-py3-none-any.whl"
    return Wanted(name, "1.0", path, frozenset({hashlib.sha256(path.read_bytes()).hexdigest()}))

async def main():
    frozen = WheelhouseCache(Path(sys.argv[1]), max_bytes=1)
    await frozen.scan()
    found = [str(p) for p in await frozen.acquire([wanted("alpha")])]
    try:
        await frozen.acquire([wanted("beta")])
        refused = ""
    except InstallError as exc:
        refused = str(exc)
    print(json.dumps({"writable": frozen.writable, "found": found, "refused": refused}))

anyio.run(main)
"""


async def test_a_cache_on_a_read_only_mount_is_used_as_it_is_even_by_root(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip(
            "as root with unshare(1): a non-root server's case is tests/unit/execution/test_wheelhouse_cache.py"
        )
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("alpha", "beta"):
        with zipfile.ZipFile(wheels / f"{name}-1.0-py3-none-any.whl", "w") as archive:
            archive.writestr(f"{name}.py", b"")
    cache = tmp_path / "cache"
    alpha = wheels / "alpha-1.0-py3-none-any.whl"
    wanted = Wanted("alpha", "1.0", alpha, frozenset({hashlib.sha256(alpha.read_bytes()).hexdigest()}))
    [path] = await WheelhouseCache(cache, max_bytes=1 << 20).acquire([wanted])
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$3" -c "$4" "$1" "$2"'
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-ec",
            script,
            "sh",
            str(cache),
            str(wheels),
            sys.executable,
            READ_ONLY_CACHE,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["writable"] is False
    assert seen["found"] == [str(path)]
    assert "beta is not installed in" in seen["refused"]
    assert "which the server cannot write" in seen["refused"]
    assert path.exists(), "nothing evicted from it, though over its cap of 1 byte"


async def test_a_first_use_says_what_it_installs_before_the_run_and_a_second_says_nothing(
    config: Config, tmp_path: Path, no_leaks: None
) -> None:
    heard: list[Progress] = []

    async def hear(progress: Progress) -> None:
        heard.append(progress)

    async with Pool.open(with_wheelhouse(config, "fork-server", tmp_path / "cache")) as pool:
        first = await pool.run(RunRequest("9ac4a9e1", "import bs4", 60), hear)
        assert first.status is Status.OK, first.to_text()
        said = "installing beautifulsoup4, soupsieve, typing-extensions from the wheelhouse"
        assert [p.describe() for p in heard] == [f"{said} (their first use on this server)"]
        # Its result says so too, with the time it took: its duration is the run's alone (found by a first
        # hour: a first `import sympy` took 5.7 s, its result said 0.224 s).
        installing = r"^beautifulsoup4, soupsieve, typing-extensions: \d+\.\d s installing from the wheelhouse before"
        assert re.match(installing + r" the run \(first use here\)$", first.note), first.note
        assert "s installing from the wheelhouse before the run" in first.to_text()
        heard.clear()
        second = await pool.run(RunRequest("9ac4a9e2", "import bs4", 60), hear)
        assert second.status is Status.OK
        assert heard == []
        assert second.note == ""
