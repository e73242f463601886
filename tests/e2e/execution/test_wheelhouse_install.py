"""The real wheelhouse installed the server's way (runner/execution/wheelhouse.py and cache.py)
and imported by an interpreter that sees the package environment and those directories alone, as a run
will: sympy, scikit-learn and BeautifulSoup, each by the name its code imports."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.config.wheelhouse import Wheelhouse
from runner.execution.wheelhouse_cache import Wanted, WheelhouseCache
from tests.conftest import REPO

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

CODE = {
    "sympy": "import sympy\nprint(sympy.sqrt(8))",
    "sklearn": "from sklearn.linear_model import LinearRegression as L\nprint(L().fit([[0], [1]], [0, 2]).coef_)",
    "bs4": "from bs4 import BeautifulSoup\nprint(BeautifulSoup('<p>hi</p>', 'html.parser').p.text)",
}
EXPECTED = {"sympy": "2*sqrt(2)", "sklearn": "[2.]", "bs4": "hi"}


@pytest.fixture(scope="module")
def house() -> Wheelhouse:
    built = REPO / ".wheelhouse"
    if not built.is_dir():
        pytest.skip("no .wheelhouse: `make wheelhouse` downloads it (make test and make run do)")
    base = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (REPO / "requirements-sandbox.lock").read_text(), re.M)
    return Wheelhouse.read(built, (REPO / "requirements-wheelhouse.lock").read_text(), base)


@pytest.mark.parametrize("module", sorted(CODE))
async def test_a_module_the_code_imports_is_installed_with_what_it_needs_and_imports(
    house: Wheelhouse, module: str, tmp_path: Path
) -> None:
    packages = os.environ.get("RUNNER_TEST_PACKAGES")
    if not packages:
        pytest.skip("RUNNER_TEST_PACKAGES is not set: `make test` sets it to the package environment")
    names = house.closure(house.for_modules([module]))
    wanted = [Wanted(n, house.pins[n].version, house.wheels[n], house.pins[n].hashes) for n in names]
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 30)
    paths = await cache.acquire(wanted)
    path = [str(Path(packages) / "site-packages"), *map(str, paths)]
    run = f"import sys\nsys.path.extend({path!r})\n" + CODE[module]
    done = subprocess.run([sys.executable, "-I", "-S", "-c", run], capture_output=True, text=True, timeout=120)
    cache.release(paths)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == EXPECTED[module]
    assert cache.installs == len(names)
