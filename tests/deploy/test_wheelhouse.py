"""The vetted wheelhouse's lock and its check (scripts/wheelhouse.py, issue 27 item 1): the lock is
compatible with the package environment's and holds what the issue names; `check` catches a corrupted,
missing, extra, duplicated or other-version wheel, naming each."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "wheelhouse.py"
LOCK = REPO / "requirements-wheelhouse.lock"
BASE = REPO / "requirements-sandbox.lock"
WANTED = (
    "sympy",
    "networkx",
    "scikit-learn",
    "statsmodels",
    "seaborn",
    "openpyxl",
    "pyarrow",
    "beautifulsoup4",
    "tabulate",
)


def wheelhouse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_the_lock_holds_what_the_issue_names_hashed_and_pins_what_it_shares_with_the_package_environment_alike() -> (
    None
):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import wheelhouse as script
    finally:
        sys.path.remove(str(SCRIPT.parent))
    extras, clashes = script.extras(LOCK, BASE)
    assert clashes == []
    assert set(WANTED) <= set(extras)
    assert all(pin.hashes for pin in script.pins(LOCK).values()), "every pin hashed"
    shared = set(script.pins(LOCK)) & set(script.pins(BASE))
    assert {"numpy", "pandas", "scipy"} <= shared, "compiled against the package environment's lock"
    assert not shared & set(extras)


def fake_wheel(directory: Path, name: str, version: str, body: bytes) -> tuple[Path, str]:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    path.write_bytes(body)
    return path, hashlib.sha256(body).hexdigest()


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A lock of two distributions beyond a base lock of one, and a wheelhouse that matches it."""
    house = tmp_path / "house"
    house.mkdir()
    _, alpha = fake_wheel(house, "alpha", "1.0", b"alpha wheel")
    _, beta = fake_wheel(house, "beta_pkg", "2.1", b"beta wheel")
    lock = tmp_path / "wheelhouse.lock"
    lock.write_text(
        f"alpha==1.0 \\\n    --hash=sha256:{alpha}\n    # via -r in\n"
        f"beta-pkg==2.1 \\\n    --hash=sha256:{beta}\n"
        f"shared==3.0 \\\n    --hash=sha256:{'0' * 64}\n"
    )
    base = tmp_path / "base.lock"
    base.write_text(f"shared==3.0 \\\n    --hash=sha256:{'0' * 64}\n")
    (house / "requirements.lock").write_bytes(lock.read_bytes())
    return house, lock, base


def test_a_wheelhouse_that_is_exactly_the_lock_checks_clean(fake: tuple[Path, Path, Path]) -> None:
    house, lock, base = fake
    done = wheelhouse("check", str(house), "--lock", str(lock), "--base", str(base))
    assert (done.returncode, done.stderr) == (0, "")


def test_check_names_a_corrupted_a_missing_an_extra_and_an_other_version_wheel(fake: tuple[Path, Path, Path]) -> None:
    house, lock, base = fake
    (house / "alpha-1.0-py3-none-any.whl").write_bytes(b"alpha wheel, tampered with")
    (house / "beta_pkg-2.1-py3-none-any.whl").unlink()
    fake_wheel(house, "beta_pkg", "2.2", b"a newer beta")
    fake_wheel(house, "gamma", "0.1", b"never locked")
    (house / "notes.txt").write_text("not a wheel")
    done = wheelhouse("check", str(house), "--lock", str(lock), "--base", str(base))
    assert done.returncode == 1
    problems = done.stderr.splitlines()
    assert any("alpha-1.0-py3-none-any.whl does not have any of the lock's hashes" in p for p in problems)
    assert any("beta_pkg-2.2-py3-none-any.whl is 2.2; the lock pins beta-pkg==2.1" in p for p in problems)
    assert any("gamma-0.1-py3-none-any.whl is not in the lock" in p for p in problems)
    assert any("notes.txt is not a wheel" in p for p in problems)
    assert all("make wheelhouse" in p for p in problems)


def test_a_wheelhouse_whose_kept_lock_is_missing_or_another_is_refused(fake: tuple[Path, Path, Path]) -> None:
    house, lock, base = fake
    kept = house / "requirements.lock"
    for change in (lambda: kept.write_text(lock.read_text() + "# edited\n"), kept.unlink):
        change()
        done = wheelhouse("check", str(house), "--lock", str(lock), "--base", str(base))
        assert done.returncode == 1
        assert f"requirements.lock is not {lock}" in done.stderr


def test_a_lock_that_pins_a_shared_distribution_otherwise_than_the_package_environment_is_refused(
    fake: tuple[Path, Path, Path],
) -> None:
    house, lock, base = fake
    base.write_text(f"shared==3.1 \\\n    --hash=sha256:{'0' * 64}\n")
    for command in ("check", "download"):
        done = wheelhouse(command, str(house), "--lock", str(lock), "--base", str(base))
        assert done.returncode == 1
        assert "shared is 3.0 in wheelhouse.lock but 3.1 in base.lock" in done.stderr


def test_the_wheelhouse_make_downloaded_is_the_lock_s() -> None:
    built = REPO / ".wheelhouse"
    if not built.is_dir():
        pytest.skip("no .wheelhouse: `make wheelhouse` downloads it (make test and make run do)")
    done = wheelhouse("check", str(built), "--lock", str(LOCK), "--base", str(BASE))
    assert done.returncode == 0, done.stderr
    assert "wheels" in (built / ".manifest").read_text()
    assert (built / "requirements.lock").read_bytes() == LOCK.read_bytes()
    # Every wheel installs under Debian 12's Python 3.11.2, the stand-in image's (soupsieve 3.0.2 and
    # later need 3.11.5: the image build failed on it).
    refused = {}
    for wheel in built.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            [metadata] = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
            text = archive.read(metadata).decode()
        wants = re.search(r"^Requires-Python: *(.+)$", text, re.M)
        if wants and not SpecifierSet(wants[1].strip()).contains("3.11.2"):
            refused[wheel.name] = wants[1]
    assert refused == {}
