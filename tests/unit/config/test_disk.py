"""The environment the configuration names, opened at start: the paths checked, the interpreter and the
packages found; never while the configuration is read."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from runner.config import Config, disk
from runner.config.disk import open_environment
from runner.config.locks import Distribution
from runner.errors import ConfigError
from tests.helpers import a_default_cache_removed_if_made, fake_env

HTTP = {"RUNNER_TRANSPORT": "http"}


def test_opening_the_environment_fills_in_the_interpreter_and_the_temp_directory() -> None:
    config = open_environment(Config.from_env({}))
    assert config.python == os.path.realpath(sys.executable)
    assert config.work_dir == tempfile.gettempdir()
    assert (config.packages, config.packages_site, config.package_distributions, config.preload) == ("", "", (), ())
    assert open_environment(config) == config, "opening an opened configuration changes nothing"


def test_reading_the_environment_looks_at_no_path_and_opening_it_refuses_a_missing_one_saying_so(
    tmp_path: Path,
) -> None:
    # Found by a new user: an absolute path that was not there got "expected an absolute path to a file".
    missing = str(tmp_path / "no" / "such")
    for variable in ("RUNNER_PYTHON", "RUNNER_WORK_DIR", "RUNNER_PACKAGES", "RUNNER_WHEELHOUSE"):
        read = Config.from_env({variable: missing})
        with pytest.raises(ConfigError) as caught:
            open_environment(read)
        assert caught.value.variable == variable
        assert str(caught.value) == f"{variable}: {missing!r} does not exist ({tmp_path} has no 'no')"


def test_a_path_that_is_there_but_of_the_wrong_kind_says_what_was_expected(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    for variable, says in [
        ("RUNNER_PYTHON", "expected an executable file"),
        ("RUNNER_WORK_DIR", "expected a writable directory"),
        ("RUNNER_PACKAGES", "expected a package environment"),
        ("RUNNER_WHEELHOUSE", "expected a wheelhouse"),
    ]:
        with pytest.raises(ConfigError, match=says) as caught:
            open_environment(Config.from_env({variable: str(file)}))
        assert caught.value.variable == variable


def test_reading_the_environment_makes_no_system_call_on_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the disk was looked at: {args}")

    for module, name in [(os, "stat"), (os, "lstat"), (os, "access"), (os, "listdir"), (os, "scandir")]:
        monkeypatch.setattr(module, name, refused)
    monkeypatch.setattr(tempfile, "gettempdir", refused)
    config = Config.from_env(
        {
            "RUNNER_PYTHON": "/no/such/python",
            "RUNNER_WORK_DIR": "/no/such/dir",
            "RUNNER_PACKAGES": "/no/such/env",
            "RUNNER_PRELOAD": "numpy",
            "RUNNER_TRANSPORT": "http",
            "RUNNER_AUTH_TOKENS_FILE": "/no/such/tokens",
        }
    )
    assert (config.python, config.work_dir, config.packages) == ("/no/such/python", "/no/such/dir", "/no/such/env")
    assert config.http.tokens_file == "/no/such/tokens"


def test_a_package_environment_gives_its_distributions_and_the_default_preload_it_has(tmp_path: Path) -> None:
    site = fake_env(tmp_path / "env", {"numpy": "2.4.6", "matplotlib": "3.11.2"}) / "site-packages"
    for name in ("numpy", "matplotlib"):
        (site / name).mkdir()
    opened = open_environment(Config.from_env({"RUNNER_PACKAGES": str(tmp_path / "env")}))
    assert (opened.packages, opened.packages_site) == (str(tmp_path / "env"), str(site))
    assert opened.package_distributions == (Distribution("matplotlib", "3.11.2"), Distribution("numpy", "2.4.6"))
    assert opened.preload == ("numpy", "matplotlib.pyplot"), "pandas is not there"
    assert not opened.default_preload
    with pytest.raises(ConfigError, match="no module 'pandas' in RUNNER_PACKAGES") as caught:
        open_environment(Config.from_env({"RUNNER_PACKAGES": str(tmp_path / "env"), "RUNNER_PRELOAD": "pandas"}))
    assert caught.value.variable == "RUNNER_PRELOAD"


def test_a_tokens_file_that_is_not_there_is_refused_when_the_environment_is_opened(tmp_path: Path) -> None:
    read = Config.from_env({**HTTP, "RUNNER_AUTH_TOKENS_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="missing' does not exist") as raised:
        open_environment(read)
    assert raised.value.variable == "RUNNER_AUTH_TOKENS_FILE"
    (tmp_path / "real").write_text("alice:aaaaaaaaaaaaaaaaaaaaaa\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    linked = open_environment(Config.from_env({**HTTP, "RUNNER_AUTH_TOKENS_FILE": str(tmp_path / "link")}))
    assert linked.http.tokens_file == str((tmp_path / "real").resolve()), "the path the sandbox must hide"


def test_paths_runs_may_read_are_resolved_and_must_be_there_and_not_the_server_s_own(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "python-runner-abc123").mkdir(parents=True)
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    tokens = tmp_path / "secret" / "tokens"
    tokens.parent.mkdir()
    tokens.write_text("alice:aaaaaaaaaaaaaaaaaaaaaa\n")

    def opened(*paths: Path | str, **env: str) -> Config:
        given = {"RUNNER_WORK_DIR": str(work), "RUNNER_SANDBOX_READ_PATHS": ",".join(map(str, paths)), **env}
        return open_environment(Config.from_env(given))

    assert opened(tmp_path / "link").sandbox_read_paths == (str(data),), "the path it really has"
    refused = {
        "missing": (tmp_path / "nothing",),
        "the root": ("/",),
        "the work directory": (work,),
        "what holds it": (tmp_path,),
        "a pool's directory": (work / "python-runner-abc123",),
    }
    for why, paths in refused.items():
        with pytest.raises(ConfigError) as raised:
            opened(*paths)
        assert raised.value.variable == "RUNNER_SANDBOX_READ_PATHS", why
    with pytest.raises(ConfigError, match="holds the server's own files"):
        opened(tokens.parent, **HTTP, RUNNER_AUTH_TOKENS_FILE=str(tokens))
    # A run could hold the cache's locks: RUNNER_SANDBOX_READ_PATHS=/var/tmp, where it is by default.
    house = tmp_path / "house"
    house.mkdir()
    (house / "requirements.lock").write_text("sympy==1.14.0\n")
    (house / "sympy-1.14.0-py3-none-any.whl").write_bytes(b"")
    cache = tmp_path / "shared" / "cache"
    with pytest.raises(ConfigError, match="its wheelhouse cache"):
        opened(tmp_path / "shared", RUNNER_WHEELHOUSE=str(house), RUNNER_WHEELHOUSE_CACHE=str(cache))
    assert opened(data, RUNNER_WHEELHOUSE=str(house), RUNNER_WHEELHOUSE_CACHE=str(cache)).sandbox_read_paths
    with pytest.raises(ConfigError, match="comma-separated absolute paths"):
        Config.from_env({"RUNNER_SANDBOX_READ_PATHS": "data"})


def test_a_path_runs_could_not_read_is_refused_naming_what_to_do(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    data.chmod(0o700)
    given = {"RUNNER_WORK_DIR": str(tmp_path), "RUNNER_SANDBOX_READ_PATHS": str(data)}
    if os.geteuid() == 0:
        # A root server's runs are other uids: what only root may read, they cannot.
        says = r"is mode 0700: a root server's runs are other uids .*chmod o\+rX"
    else:
        data.chmod(0o000)
        says = "cannot be read by the server's uid"
    with pytest.raises(ConfigError, match=says) as raised:
        open_environment(Config.from_env(given))
    assert raised.value.variable == "RUNNER_SANDBOX_READ_PATHS"
    data.chmod(0o755)
    assert open_environment(Config.from_env(given)).sandbox_read_paths == (str(data),)


def test_a_wheelhouse_offers_what_its_lock_pins_beyond_the_package_environment_and_its_cache_is_made(
    tmp_path: Path,
) -> None:
    house = tmp_path / "house"
    house.mkdir()
    (house / "requirements.lock").write_text(
        "numpy==2.4.6 \\\n    --hash=sha256:00\nSymPy==1.14.0 \\\n    --hash=sha256:11\n"
        "mpmath==1.3.0\ntabulate==0.10.0\n"
    )
    for wheel in ("sympy-1.14.0-py3-none-any.whl", "mpmath-1.3.0-py3-none-any.whl", "numpy-2.4.6-cp311.whl"):
        (house / wheel).write_bytes(b"")  # tabulate's is missing: it is not offered
    fake_env(tmp_path / "env", {"numpy": "2.4.6"})
    read = Config.from_env(
        {"RUNNER_WHEELHOUSE": str(house), "RUNNER_PACKAGES": str(tmp_path / "env"), "RUNNER_WORK_DIR": str(tmp_path)}
    )
    with a_default_cache_removed_if_made():
        config = open_environment(read)
        default = os.path.realpath(f"/var/tmp/python-runner-environments-{os.geteuid()}")
        assert config.wheelhouse_cache == default, "not in the work directory, whatever it is"
        assert config.wheelhouse_distributions == (Distribution("mpmath", "1.3.0"), Distribution("sympy", "1.14.0"))
        assert os.path.isdir(config.wheelhouse_cache)
        assert config.provided_packages == os.path.join(config.wheelhouse_cache, "packages")
        assert os.path.isdir(config.provided_packages), "there before the sandbox's probe binds it"
        assert open_environment(config) == config
    assert open_environment(Config.from_env({})).wheelhouse_cache == "", "no wheelhouse, no cache"


def test_the_cache_is_in_the_work_directory_where_var_tmp_is_missing_or_under_a_directory_runs_replace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under /tmp (or /run, /dev/shm), its packages would be bound back into each run's own directory.
    house = tmp_path / "house"
    house.mkdir()
    (house / "requirements.lock").write_text("sympy==1.14.0\n")
    (house / "sympy-1.14.0-py3-none-any.whl").write_bytes(b"")
    work = tmp_path / "work"
    work.mkdir()
    environ = {"RUNNER_WHEELHOUSE": str(house), "RUNNER_WORK_DIR": str(work)}
    in_work = str(work / f"python-runner-environments-{os.geteuid()}")
    for parent in (tmp_path / "missing", tmp_path):  # tmp_path: under /tmp
        monkeypatch.setattr(disk, "DEFAULT_CACHE_PARENT", str(parent))
        assert open_environment(Config.from_env(environ)).wheelhouse_cache == in_work, parent


def test_a_wheelhouse_without_its_lock_or_a_cache_others_can_write_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"expected a wheelhouse holding requirements\.lock") as caught:
        open_environment(Config.from_env({"RUNNER_WHEELHOUSE": str(tmp_path)}))
    assert caught.value.variable == "RUNNER_WHEELHOUSE"
    (tmp_path / "requirements.lock").write_text("sympy==1.14.0\n")
    (tmp_path / "sympy-1.14.0-py3-none-any.whl").write_bytes(b"")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="that no one else can write") as caught:
        open_environment(Config.from_env({"RUNNER_WHEELHOUSE": str(tmp_path), "RUNNER_WHEELHOUSE_CACHE": str(shared)}))
    assert caught.value.variable == "RUNNER_WHEELHOUSE_CACHE"


def test_a_cache_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "requirements.lock").write_text("sympy==1.14.0\n")
    (tmp_path / "sympy-1.14.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    environ = {"RUNNER_WHEELHOUSE": str(tmp_path), "RUNNER_WHEELHOUSE_CACHE": str(tmp_path / "link")}
    with pytest.raises(ConfigError, match=r"must be a directory \(not a link\)") as caught:
        open_environment(Config.from_env(environ))
    assert caught.value.variable == "RUNNER_WHEELHOUSE_CACHE"


@pytest.mark.skipif(os.geteuid() != 0, reason="a root server's runs alone get uids of RUNNER_SANDBOX_UIDS")
def test_a_root_server_s_uid_range_holding_a_host_user_or_too_small_for_a_block_is_refused() -> None:
    # uid 1 is a system user on every Linux distribution we know (daemon, bin).
    with pytest.raises(ConfigError, match=r"^RUNNER_SANDBOX_UIDS: uid 1 of 1-100 is the host's user"):
        open_environment(Config.from_env({"RUNNER_SANDBOX_UIDS": "1-100", "RUNNER_SANDBOX": "namespaces"}))
    small = {"RUNNER_SANDBOX_UIDS": "70000-70009", "RUNNER_MAX_SESSIONS": "0", "RUNNER_SANDBOX": "bwrap"}
    with pytest.raises(ConfigError, match=r"^RUNNER_SANDBOX_UIDS: 70000-70009 holds 10 uids; .* up to 12 at once"):
        open_environment(Config.from_env(small))
    # Runs that keep the server's uid use no range: nothing to refuse.
    assert open_environment(Config.from_env({**small, "RUNNER_SANDBOX": "none"})).sandbox == "none"


def interpreter(path: Path, said: str) -> str:
    """An executable at `path` that answers the server's question of its version with `said`."""
    path.write_text(f"#!/bin/sh\necho '{said}'\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("said", "refused"),
    [
        ("3 9 cpython", "is Python 3.9; runs need 3.11 or newer"),
        ("", r"is not a CPython interpreter \(asked its version: ''\)"),
        ("3 11 pypy", "is not a CPython interpreter"),
    ],
)
def test_an_interpreter_that_is_no_cpython_of_3_11_or_newer_is_refused_saying_so(
    tmp_path: Path, said: str, refused: str
) -> None:
    # Found by a first hour: a 3.9 interpreter, or /usr/bin/true, started a server every call of which
    # then failed `internal_error`.
    with pytest.raises(ConfigError, match=refused) as caught:
        open_environment(Config.from_env({"RUNNER_PYTHON": interpreter(tmp_path / "python", said)}))
    assert caught.value.variable == "RUNNER_PYTHON"


def test_an_interpreter_of_another_version_than_the_package_environments_wheels_is_refused(tmp_path: Path) -> None:
    # Found by a first hour: 3.12 over a 3.11 environment served, and every `import numpy` failed.
    site = fake_env(tmp_path / "env", {"numpy": "2.4.6", "six": "1.17.0"}) / "site-packages"
    (site / "six-1.17.0.dist-info" / "WHEEL").write_text("Wheel-Version: 1.0\nTag: py2-none-any\nTag: py3-none-any\n")
    (site / "numpy-2.4.6.dist-info" / "WHEEL").write_text("Wheel-Version: 1.0\nTag: cp39-cp39-manylinux_2_17_x86_64\n")
    packages = {"RUNNER_PACKAGES": str(tmp_path / "env")}
    here = f"{sys.version_info[0]} {sys.version_info[1]} cpython"
    given = {"RUNNER_PYTHON": interpreter(tmp_path / "py", here)}
    for env, variable in [({}, "RUNNER_PACKAGES"), (given, "RUNNER_PYTHON")]:
        with pytest.raises(ConfigError, match=r"compiled packages are for 3\.9: build it with that") as caught:
            open_environment(Config.from_env({**packages, **env}))
        assert caught.value.variable == variable
    minor = sys.version_info[1]
    (site / "numpy-2.4.6.dist-info" / "WHEEL").write_text(f"Tag: cp3{minor}-cp3{minor}-manylinux_2_17_x86_64\n")
    assert open_environment(Config.from_env(packages)).packages == str(tmp_path / "env")


def test_a_tokens_file_under_a_directory_any_user_may_write_or_reached_through_one_is_refused(tmp_path: Path) -> None:
    # Found by a second look: only the file and its own directory were looked at; a 777 directory above
    # it (its own directory renamed away and replaced), or a link to it in one, passed.
    shared = tmp_path / "shared"
    (shared / "own").mkdir(parents=True)
    tokens = shared / "own" / "tokens"
    tokens.write_text("alice:" + "t" * 32 + "\n")
    tokens.chmod(0o600)
    (shared / "own").chmod(0o700)
    shared.chmod(0o777)
    env = {"RUNNER_TRANSPORT": "http", "RUNNER_AUTH_TOKENS_FILE": str(tokens)}
    with pytest.raises(ConfigError, match="where any user may replace what is in it") as caught:
        open_environment(Config.from_env(env))
    assert caught.value.variable == "RUNNER_AUTH_TOKENS_FILE"
    shared.chmod(0o755)
    assert open_environment(Config.from_env(env)).http.tokens_file == str(tokens)
    links = tmp_path / "links"
    links.mkdir(mode=0o777)
    links.chmod(0o777)
    (links / "tokens").symlink_to(tokens)
    with pytest.raises(ConfigError, match="where any user may replace what is in it"):
        open_environment(Config.from_env({**env, "RUNNER_AUTH_TOKENS_FILE": str(links / "tokens")}))
