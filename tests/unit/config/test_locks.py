"""The locks and wheels the package environment and the wheelhouse are made from (runner/config/locks.py):
pins, who needs what, what was asked for, and the modules a wheel or an installed distribution
provides. Pure, no process."""

from __future__ import annotations

from importlib.metadata import PathDistribution
from pathlib import Path

from runner.config.locks import (
    Distribution,
    installed,
    installed_modules,
    parse_lock,
    requirements,
    shown_modules,
    top_level_modules,
    wheel_modules,
)
from tests.helpers import fake_env
from tests.unit.config.test_wheelhouse import LOCK, make_wheel


def test_the_lock_gives_versions_hashes_and_who_needs_what() -> None:
    pins = parse_lock(LOCK)
    assert set(pins) == {"alpha", "beta-pkg", "gamma", "numpy"}
    assert (pins["beta-pkg"].version, pins["beta-pkg"].hashes) == ("2.1", frozenset({"b" * 64}))
    assert pins["beta-pkg"].needed_by == {"alpha", "gamma"}
    assert pins["alpha"].needed_by == frozenset()  # "-r ..." is the input file, not a pin
    assert pins["numpy"].needed_by == {"alpha"}  # "-c ..." likewise
    assert [name for name, pin in pins.items() if pin.requested] == ["alpha"]  # what "-r ..." asked for
    assert requirements(pins) == {
        "alpha": {"beta-pkg", "gamma", "numpy"},
        "beta-pkg": frozenset(),
        "gamma": {"beta-pkg"},
        "numpy": frozenset(),
    }


def test_a_wheel_s_modules_come_from_its_paths_when_it_lists_none() -> None:
    names = [
        "sklearn/__init__.py",
        "sklearn/tree/_tree.cpython-311-x86_64-linux-gnu.so",
        "_yaml/__init__.py",
        "six.py",
        "_cffi_backend.cpython-311-x86_64-linux-gnu.so",
        "scikit_learn-1.9.1.dist-info/RECORD",
        "scikit_learn-1.9.1.data/scripts/run",
        "not-a-module/x.py",
        "README.txt",
    ]
    assert top_level_modules(names) == {"sklearn", "_yaml", "six", "_cffi_backend"}


def test_a_wheel_s_top_level_txt_wins_over_its_paths(tmp_path: Path) -> None:
    wheel = make_wheel(
        tmp_path,
        "beautifulsoup4",
        "4.15.0",
        {"bs4/__init__.py": "", "extra/thing.py": "", "beautifulsoup4-4.15.0.dist-info/top_level.txt": "bs4\n"},
    )
    assert wheel_modules(wheel) == {"bs4"}


def test_an_installed_distribution_s_modules_come_from_top_level_txt_else_its_record(tmp_path: Path) -> None:
    listed = tmp_path / "beautifulsoup4-4.15.0.dist-info"
    listed.mkdir()
    (listed / "top_level.txt").write_text("bs4\n")
    (listed / "RECORD").write_text("bs4/__init__.py,,\nextra/x.py,,\n")
    assert installed_modules(PathDistribution(listed)) == {"bs4"}
    recorded = tmp_path / "numpy-2.4.6.dist-info"
    recorded.mkdir()
    (recorded / "RECORD").write_text("numpy/__init__.py,sha256=x,1\nnumpy.libs/libgfortran.so,,\n../../bin/f2py,,\n")
    assert installed_modules(PathDistribution(recorded)) == {"numpy"}
    assert installed_modules(PathDistribution(tmp_path / "gone.dist-info")) == frozenset()


def test_a_site_s_distributions_are_named_by_their_metadata_and_egg_info_installs_count(tmp_path: Path) -> None:
    # A user's own environment may hold a setup.py-era install; its directory names no version.
    site = fake_env(tmp_path, {"scikit-learn": "1.9.1"}) / "site-packages"
    egg = site / "legacy.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 1.1\nName: legacy\nVersion: 0.1\n")
    (egg / "top_level.txt").write_text("legacy\n")
    (site / "half_removed-1.0.dist-info").mkdir()  # no METADATA: no install
    assert installed(str(site)) == {
        Distribution("legacy", "0.1"): frozenset({"legacy"}),
        Distribution("scikit-learn", "1.9.1"): frozenset({"scikit_learn"}),
    }


def test_a_user_is_shown_the_module_named_like_the_distribution_else_its_public_ones() -> None:
    assert shown_modules("matplotlib", {"matplotlib", "mpl_toolkits", "pylab"}) == ("matplotlib",)
    assert shown_modules("scikit-learn", {"sklearn"}) == ("sklearn",)
    assert shown_modules("PyYAML", {"yaml", "_yaml"}) == ("yaml",)
