"""What the wheelhouse offers, read from its lock and its wheels' file lists: pure, no process."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from runner.config.wheelhouse import Wheelhouse
from tests.conftest import REPO

LOCK = """\
alpha==1.0 \\
    --hash=sha256:{a}
    # via -r requirements-wheelhouse.in
beta-pkg==2.1 \\
    --hash=sha256:{b}
    # via
    #   alpha
    #   gamma
gamma==0.3 \\
    --hash=sha256:{c}
    # via alpha
numpy==2.4.6 \\
    --hash=sha256:{c}
    # via
    #   -c requirements-sandbox.lock
    #   alpha
""".format(a="a" * 64, b="b" * 64, c="c" * 64)


def make_wheel(directory: Path, name: str, version: str, members: dict[str, str]) -> Path:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in members.items():
            archive.writestr(member, text)
    return path


def test_the_wheelhouse_maps_modules_to_distributions_and_gives_each_run_what_it_needs(tmp_path: Path) -> None:
    make_wheel(tmp_path, "alpha", "1.0", {"alpha_mod/__init__.py": ""})
    make_wheel(tmp_path, "beta_pkg", "2.1", {"beta/__init__.py": ""})
    make_wheel(tmp_path, "gamma", "0.3", {"gamma.py": ""})
    make_wheel(tmp_path, "numpy", "2.4.6", {"numpy/__init__.py": ""})  # the package environment's own
    house = Wheelhouse.read(tmp_path, LOCK, base=["numpy"])
    assert set(house.wheels) == {"alpha", "beta-pkg", "gamma"}
    assert dict(house.modules) == {"alpha_mod": "alpha", "beta": "beta-pkg", "gamma": "gamma"}
    assert house.for_modules(["alpha_mod", "os", "numpy"]) == {"alpha"}
    assert house.closure(["alpha"]) == ("alpha", "beta-pkg", "gamma")  # numpy is already there
    assert house.closure(["gamma"]) == ("beta-pkg", "gamma")
    assert house.closure(["nothing-of-ours"]) == ()


@pytest.mark.parametrize(
    ("module", "distribution"),
    [("sklearn", "scikit-learn"), ("bs4", "beautifulsoup4"), ("yaml", "pyyaml"), ("sympy", "sympy")],
)
def test_the_real_wheelhouse_maps_the_names_that_differ(module: str, distribution: str) -> None:
    built = REPO / ".wheelhouse"
    if not built.is_dir():
        pytest.skip("no .wheelhouse: `make wheelhouse` downloads it (make test and make run do)")
    base = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==", (REPO / "requirements-sandbox.lock").read_text(), re.M)
    house = Wheelhouse.read(built, (REPO / "requirements-wheelhouse.lock").read_text(), base)
    assert house.for_modules([module]) == {distribution}
    assert distribution in house.closure([distribution])


def test_a_distribution_that_needs_one_neither_in_the_wheelhouse_nor_the_package_environment_is_not_offered(
    tmp_path: Path,
) -> None:
    # Found by a first hour: with RUNNER_PACKAGES empty, seaborn was offered, installed on import, and then
    # failed on matplotlib, the package environment's. alpha needs numpy (the environment's), gamma needs
    # beta-pkg (here): without the environment, alpha alone goes.
    make_wheel(tmp_path, "alpha", "1.0", {"alpha_mod/__init__.py": ""})
    make_wheel(tmp_path, "beta_pkg", "2.1", {"beta/__init__.py": ""})
    make_wheel(tmp_path, "gamma", "0.3", {"gamma.py": ""})
    house = Wheelhouse.read(tmp_path, LOCK, base=[])
    assert set(house.wheels) == {"beta-pkg", "gamma"}
    assert "alpha_mod" not in house.modules
    assert set(Wheelhouse.read(tmp_path, LOCK, base=["numpy"]).wheels) == {"alpha", "beta-pkg", "gamma"}
