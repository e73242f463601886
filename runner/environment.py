"""Where the environment is opened: the paths a configuration names are looked at on disk, and what
follows from them is filled in (the interpreter, the temp directory, the package environment's
site-packages and distributions, the default preload).

`Config.from_env` reads text only; the server calls `open_environment` on what it read before it
serves, and so does `runner.api.run_code`. Each refusal names its variable, as the reading does.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.machinery
import os
import sys
import tempfile

from runner.config import DEFAULT_PRELOAD, Config
from runner.errors import ConfigError


def open_environment(config: Config) -> Config:
    """`config` with its paths checked and resolved and what they hold filled in; `ConfigError` naming
    the variable of a path that is not what it must be. Opening an opened configuration changes nothing."""
    packages, site = _packages(config.packages)
    return dataclasses.replace(
        config,
        python=_python(config.python),
        work_dir=_work_dir(config.work_dir),
        packages=packages,
        packages_site=site,
        package_versions=_installed(site),
        preload=_preload(config, site),
        default_preload=False,
        http=dataclasses.replace(config.http, tokens_file=_tokens_file(config.http.tokens_file)),
    )


def _python(path: str) -> str:
    # The real binary, not a venv link or a pyenv shim: a shim costs ~70 ms per spawn, and with
    # -I -S the base interpreter never sees the server's site-packages anyway.
    path = path or os.path.realpath(sys.executable)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError("RUNNER_PYTHON", f"expected an executable file, got {path!r}")
    return path


def _work_dir(path: str) -> str:
    path = path or tempfile.gettempdir()
    if not (os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)):
        raise ConfigError("RUNNER_WORK_DIR", f"expected a writable directory, got {path!r}")
    return path


def _packages(path: str) -> tuple[str, str]:
    """RUNNER_PACKAGES: the environment runs import from, and the directory of it that goes on sys.path
    (its ``site-packages``, or a virtual environment's ``lib/pythonX.Y/site-packages``)."""
    if not path:
        return "", ""
    if not os.path.isdir(path):
        raise ConfigError("RUNNER_PACKAGES", f"expected an absolute path to a package environment, got {path!r}")
    found = [os.path.join(path, "site-packages")] if os.path.isdir(os.path.join(path, "site-packages")) else []
    found = found or sorted(glob.glob(os.path.join(path, "lib", "python3*", "site-packages")))
    if len(found) != 1:
        raise ConfigError(
            "RUNNER_PACKAGES",
            f"expected {path!r} to hold one site-packages directory (make sandbox-env builds one), found {len(found)}",
        )
    return os.path.realpath(path), os.path.realpath(found[0])


def _preload(config: Config, site: str) -> tuple[str, ...]:
    """RUNNER_PRELOAD's modules, each found in `site` or the standard library; without it, those of
    DEFAULT_PRELOAD installed in `site`, and nothing without a package environment."""
    if config.default_preload:
        if not site:
            return ()
        return tuple(name for name in DEFAULT_PRELOAD if os.path.isdir(os.path.join(site, name.split(".")[0])))
    for name in config.preload:
        if not _findable(name, site):
            raise ConfigError("RUNNER_PRELOAD", f"no module {name!r} in RUNNER_PACKAGES or the standard library")
    return config.preload


def _findable(name: str, site: str) -> bool:
    """Whether `name` is a module of the standard library or of `site`, found without importing it
    (a module that is there but fails to import stops its zygote, which says why in the log)."""
    top, _, rest = name.partition(".")
    if top in sys.stdlib_module_names:
        return True
    spec = importlib.machinery.PathFinder.find_spec(top, [site])
    for part in rest.split(".") if rest else []:
        if spec is None or not spec.submodule_search_locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    return spec is not None


def _installed(site: str) -> tuple[str, ...]:
    """ "name version" of every distribution in `site`, from its .dist-info directory's name."""
    if not site:
        return ()
    names = sorted(entry[: -len(".dist-info")] for entry in os.listdir(site) if entry.endswith(".dist-info"))
    return tuple(" ".join(name.rsplit("-", 1)) for name in names)


def _tokens_file(path: str) -> str:
    """RUNNER_AUTH_TOKENS_FILE, resolved: the sandbox hides it from runs by the path it really has."""
    if not path:
        return ""
    if not os.path.isfile(path):
        raise ConfigError("RUNNER_AUTH_TOKENS_FILE", f"expected an absolute path to a file, got {path!r}")
    return os.path.realpath(path)
