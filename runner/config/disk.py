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
import pwd
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from runner.config import settings
from runner.config.locks import Distribution, installed, normalized, parse_lock, shown_modules
from runner.config.memory import sessions_budget
from runner.config.values import DEFAULT_PRELOAD, PROVIDED_DIRECTORY, Config
from runner.config.wheelhouse import Wheelhouse
from runner.errors import ConfigError

# The pool's directory in RUNNER_WORK_DIR (`runner.execution.pool.Pool.open`), where runs' own are made.
POOL_PREFIX = "python-runner-"
# Code mode's directory there (`runner.tools.broker.Broker.opened`): empty, held while the server lives.
TOOLS_PREFIX = "python-runner-tools-"
# In a stdio tool server's environment, that directory (`settings.HELD_VARIABLE`): what the server and what
# it started carry, for the start after a killed server to find (`runner.execution.leftovers`). Ours alone
# (an operator may have set TMPDIR for it on purpose), and no secret.
HELD_VARIABLE = settings.HELD_VARIABLE
# The lock an environment was made from, which `make wheelhouse` keeps beside the wheels and `make
# sandbox-env` in the package environment (scripts/wheelhouse.py, scripts/sandbox_env.py).
WHEELHOUSE_LOCK = ENVIRONMENT_LOCK = "requirements.lock"
READ_PATHS = "RUNNER_SANDBOX_READ_PATHS"
# Where the wheelhouse cache is by default (`_default_cache`), and the directories each sandboxed run has
# of its own (runner.inrun.namespaces' private ones, and /dev/shm), which a path bound into its view
# at its own place must not be under, or it shows there (this package imports no side: a test ties them).
DEFAULT_CACHE_PARENT = "/var/tmp"
SANDBOX_REPLACED = ("/tmp", "/run", "/dev/shm")


# The package environment `make sandbox-env` builds in a checkout, beside `runner/`, the file that says its
# build finished, and the wheelhouse `make wheelhouse` downloads there.
CHECKOUT_PACKAGES = ".sandbox-env"
CHECKOUT_WHEELHOUSE = ".wheelhouse"
BUILT_STAMP = ".built"


def with_checkout_defaults(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with what a server started from a checkout takes where RUNNER_PACKAGES or RUNNER_WHEELHOUSE
    is not set at all: the checkout's `.sandbox-env` and `.wheelhouse`, where they were built (`make run`
    builds both). Set, even empty, a variable is kept as it is (empty: the standard library only). The one
    place every entry point takes them from: `python -m runner`, the `python-runner-mcp` command and
    `run_code` are the same tool."""
    checkout = str(Path(__file__).resolve().parents[2])  # runner/config/disk.py -> the checkout
    found = dict(environ)
    packages = os.path.join(checkout, CHECKOUT_PACKAGES)
    if "RUNNER_PACKAGES" not in found and os.path.isfile(os.path.join(packages, BUILT_STAMP)):
        found["RUNNER_PACKAGES"] = packages
    house = os.path.join(checkout, CHECKOUT_WHEELHOUSE)
    if "RUNNER_WHEELHOUSE" not in found and os.path.isfile(os.path.join(house, WHEELHOUSE_LOCK)):
        found["RUNNER_WHEELHOUSE"] = house
    return found


def open_environment(config: Config) -> Config:
    """`config` with its paths checked and resolved and what they hold filled in; `ConfigError` naming
    the variable of a path that is not what it must be. Opening an opened configuration changes nothing."""
    packages, site = _packages(config.packages)
    found = installed(site) if site else {}  # site-packages is listed once, here
    work_dir = _work_dir(config.work_dir)
    house = _wheelhouse(config.wheelhouse, tuple(found))  # the wheelhouse is read once, here
    offered, offered_modules = _offered(house)
    opened = dataclasses.replace(
        config,
        python=_python(config.python, site),
        work_dir=work_dir,
        packages=packages,
        packages_site=site,
        package_distributions=tuple(found),
        package_modules=_package_modules(packages, found),
        wheelhouse=str(house.directory) if house is not None else "",
        wheelhouse_contents=house,
        wheelhouse_distributions=offered,
        wheelhouse_modules=offered_modules,
        wheelhouse_cache=_wheelhouse_cache(config.wheelhouse_cache, work_dir) if house is not None else "",
        preload=_preload(config, site),
        default_preload=False,
        sessions_budget_bytes=sessions_budget(config),
        http=dataclasses.replace(config.http, tokens_file=_tokens_file(config.http.tokens_file)),
        tools_config=_tools_file(config.tools_config),
    )
    _check_run_uids(opened)
    return dataclasses.replace(opened, sandbox_read_paths=_read_paths(opened))


def _check_run_uids(config: Config) -> None:
    """RUNNER_SANDBOX_UIDS, where a root server's sandboxed runs get host uids of it: no uid of it a user
    of the host's (a run would be that user, and share its process count), and room for one pool's block."""
    if os.geteuid() != 0 or config.sandbox in ("none", "none-posix-spawn"):
        return
    uids = config.run_uid_range
    users = sorted((entry.pw_uid, entry.pw_name) for entry in pwd.getpwall() if entry.pw_uid in uids)
    if users:
        uid, name = users[0]
        raise ConfigError("RUNNER_SANDBOX_UIDS", f"uid {uid} of {config.sandbox_uids} is the host's user {name!r}")
    if len(uids) < config.uids_per_pool:
        raise ConfigError(
            "RUNNER_SANDBOX_UIDS",
            f"{config.sandbox_uids} holds {len(uids)} uids; this configuration lends up to {config.uids_per_pool} "
            "at once (sources x (2 x (RUNNER_POOL_SIZE + RUNNER_MAX_CONCURRENT) + RUNNER_MAX_SESSIONS))",
        )


def _python(path: str, site: str) -> str:
    """RUNNER_PYTHON: an executable CPython of 3.11 or newer (asked, where it is not the server's own),
    whose version is the one the package environment's compiled wheels were made for. Found by a first
    hour: a 3.9 interpreter, or `/usr/bin/true`, started a server every call of which failed
    `internal_error`; a 3.12 one, over a 3.11 environment, failed every `import numpy` so."""
    given = bool(path)
    # The real binary, not a venv link or a pyenv shim: a shim costs ~70 ms per spawn, and with
    # -I -S the base interpreter never sees the server's site-packages anyway.
    path = path or os.path.realpath(sys.executable)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise _unfit("RUNNER_PYTHON", path, "an executable file")
    own = path == os.path.realpath(sys.executable)
    version = sys.version_info[:2] if own else _version_of(path)
    if version < (3, 11):
        raise ConfigError("RUNNER_PYTHON", f"{path!r} is Python {version[0]}.{version[1]}; runs need 3.11 or newer")
    built = _built_for(site) if site else None
    if built is not None and built != version:
        raise ConfigError(
            "RUNNER_PYTHON" if given else "RUNNER_PACKAGES",
            f"runs use Python {version[0]}.{version[1]} ({path}), and RUNNER_PACKAGES' compiled packages are for "
            f"{built[0]}.{built[1]}: build it with that interpreter (make sandbox-env), or give RUNNER_PYTHON a "
            f"{built[0]}.{built[1]}",
        )
    return path


def _version_of(path: str) -> tuple[int, int]:
    """The (major, minor) of the CPython at `path`, asked; ConfigError if it does not say it is one."""
    asked = "import sys; print('%d %d' % sys.version_info[:2], sys.implementation.name)"
    try:
        done = subprocess.run([path, "-I", "-S", "-c", asked], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError("RUNNER_PYTHON", f"{path!r} did not run as a Python interpreter ({exc})") from None
    words = done.stdout.split()
    if done.returncode or len(words) != 3 or words[2] != "cpython" or not (words[0] + words[1]).isdigit():
        said = (done.stdout or done.stderr).strip()[:100]
        raise ConfigError("RUNNER_PYTHON", f"{path!r} is not a CPython interpreter (asked its version: {said!r})")
    return int(words[0]), int(words[1])


def _built_for(site: str) -> tuple[int, int] | None:
    """The Python version the compiled wheels installed in `site` were made for (a `WHEEL` file's
    ``Tag: cp311-cp311-...``), or None where none is (pure Python, abi3)."""
    for wheel in sorted(glob.glob(os.path.join(site, "*.dist-info", "WHEEL"))):
        try:
            with open(wheel, encoding="utf-8", errors="replace") as file:
                tags = file.read(4096)
        except OSError:
            continue
        if found := re.search(r"^Tag: cp3(\d+)-cp3\1-", tags, re.MULTILINE):
            return 3, int(found.group(1))
    return None


def _unfit(name: str, path: str, expected: str) -> ConfigError:
    """The error for a path that will not do: one that does not exist says so, and which directory of it
    lacks the next part; any other names what was expected."""
    try:
        os.lstat(path)
    except PermissionError:
        return ConfigError(name, f"{path!r} cannot be reached by the server's uid ({os.getuid()})")
    except OSError:
        missing, parent = path, os.path.dirname(path)
        while parent != os.path.dirname(parent) and not os.path.lexists(parent):
            missing, parent = parent, os.path.dirname(parent)
        return ConfigError(name, f"{path!r} does not exist ({parent} has no {os.path.basename(missing)!r})")
    return ConfigError(name, f"expected {expected}, got {path!r}, which is not one")


def _work_dir(path: str) -> str:
    path = path or tempfile.gettempdir()
    if not (os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)):
        raise _unfit("RUNNER_WORK_DIR", path, "a writable directory")
    # Made in, not trusted to access(2): root may "write" /proc, where a directory cannot be made (found
    # by a first hour: a traceback and exit 1 as the pool opened).
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".python-runner-probe-", dir=path))
    except OSError as exc:
        raise ConfigError("RUNNER_WORK_DIR", f"no directory can be made in {path!r}: {exc.strerror or exc}") from None
    return path


def _packages(path: str) -> tuple[str, str]:
    """RUNNER_PACKAGES: the environment runs import from, and the directory of it that goes on sys.path
    (its ``site-packages``, or a virtual environment's ``lib/pythonX.Y/site-packages``)."""
    if not path:
        return "", ""
    if not os.path.isdir(path):
        raise _unfit("RUNNER_PACKAGES", path, "a package environment (a directory; make sandbox-env builds one)")
    found = [os.path.join(path, "site-packages")] if os.path.isdir(os.path.join(path, "site-packages")) else []
    found = found or sorted(glob.glob(os.path.join(path, "lib", "python3*", "site-packages")))
    if len(found) != 1:
        raise ConfigError(
            "RUNNER_PACKAGES",
            f"expected {path!r} to hold one site-packages directory (make sandbox-env builds one), found {len(found)}",
        )
    return os.path.realpath(path), os.path.realpath(found[0])


def _wheelhouse(path: str, installed: tuple[Distribution, ...]) -> Wheelhouse | None:
    """RUNNER_WHEELHOUSE, read (`Wheelhouse.read`): each distribution its lock pins, with its wheel
    there, that the package environment does not have (what runs may have installed for them)."""
    if not path:
        return None
    if not os.path.isdir(path):
        raise _unfit("RUNNER_WHEELHOUSE", path, "a wheelhouse (a directory; make wheelhouse downloads one)")
    lock = os.path.join(path, WHEELHOUSE_LOCK)
    if not os.path.isfile(lock):
        raise ConfigError(
            "RUNNER_WHEELHOUSE", f"expected a wheelhouse holding {WHEELHOUSE_LOCK} (make wheelhouse), got {path!r}"
        )
    with open(lock, encoding="utf-8") as file:
        # A pin without its wheel (a wheelhouse `make check-wheelhouse` would refuse) is not offered.
        house = Wheelhouse.read(Path(os.path.realpath(path)), file.read(), [d.name for d in installed])
    if not house.wheels:
        raise ConfigError(
            "RUNNER_WHEELHOUSE", f"expected {lock} to pin distributions, found none beyond RUNNER_PACKAGES"
        )
    return house


def _offered(house: Wheelhouse | None) -> tuple[tuple[Distribution, ...], tuple[str, ...]]:
    """The wheelhouse's distributions, and the top-level modules of those its lock asked for (what a
    user imports of them)."""
    if house is None:
        return (), ()
    asked = [name for name, pin in house.pins.items() if pin.requested] or list(house.pins)
    modules = {module for name in asked for module in shown_modules(name, house.provides.get(name, ()))}
    return tuple(Distribution(name, pin.version) for name, pin in sorted(house.pins.items())), tuple(sorted(modules))


def _package_modules(packages: str, found: Mapping[Distribution, frozenset[str]]) -> tuple[str, ...]:
    """The top-level modules of what the package environment's lock asked for (numpy, pandas, not
    cycler): what the tool's description lists. An environment without its lock (one of the user's
    own) shows every distribution's."""
    if not found:
        return ()
    try:
        with open(os.path.join(packages, ENVIRONMENT_LOCK), encoding="utf-8") as file:
            asked = {name for name, pin in parse_lock(file.read()).items() if pin.requested}
    except OSError:
        asked = set()
    modules: set[str] = set()
    for distribution, provides in found.items():
        name = normalized(distribution.name)
        if not asked or name in asked:
            modules.update(shown_modules(name, provides))
    return tuple(sorted(modules))


def _wheelhouse_cache(path: str, work_dir: str) -> str:
    """RUNNER_WHEELHOUSE_CACHE, made if missing with its `packages` directory (which runs see, so it is
    there before the sandbox's probe binds it): a directory, not a link, of the server's own that no one
    else can write (runs trust what is in it by its name), or one only root can write (an image's,
    installed at build time). Readable by all: a root server's runs are other uids."""
    path = path or _default_cache(work_dir)
    try:
        os.makedirs(path, mode=0o755, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise ConfigError(
            "RUNNER_WHEELHOUSE_CACHE", f"expected a directory the server can make, got {path!r}: {exc}"
        ) from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (os.geteuid(), 0) or info.st_mode & 0o022:
        raise ConfigError(
            "RUNNER_WHEELHOUSE_CACHE",
            f"{path!r} must be a directory (not a link) of the server's uid (or root's) that no one else can "
            f"write, not mode {stat.S_IMODE(info.st_mode):04o} of uid {info.st_uid}: runs import what is in it",
        )
    if info.st_uid == os.geteuid() and os.access(path, os.W_OK):
        packages = os.path.join(path, PROVIDED_DIRECTORY)
        os.makedirs(packages, exist_ok=True)
        for made in (path, packages):
            os.chmod(made, 0o755)  # noqa: S103  (public packages; a root server's runs are other uids)
    return os.path.realpath(path)


def _default_cache(work_dir: str) -> str:
    """RUNNER_WHEELHOUSE_CACHE's default: `python-runner-environments-UID` in /var/tmp, which outlives a
    reboot as a cache may and which no sandbox replaces; in the work directory where /var/tmp will not do.
    Its packages are bound into each sandboxed run's view at their own path: under /tmp (the temp
    directory, RUNNER_WORK_DIR's default) they showed in every run's directory, which is that run's /tmp."""
    name = f"{POOL_PREFIX}environments-{os.geteuid()}"
    lasting = os.path.realpath(DEFAULT_CACHE_PARENT)
    usable = os.path.isdir(lasting) and os.access(lasting, os.W_OK | os.X_OK)
    if usable and not any(_within(lasting, replaced) for replaced in SANDBOX_REPLACED):
        return os.path.join(DEFAULT_CACHE_PARENT, name)
    return os.path.join(work_dir, name)


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


def _read_paths(config: Config) -> tuple[str, ...]:
    """RUNNER_SANDBOX_READ_PATHS, resolved: each there, not /, and nothing of the server's own: not its
    work directory or what holds it (the runs' directories are made there), nothing within a pool's
    directory in it, and not its tokens file, its tools file or its wheelhouse cache or what holds one."""
    resolved = []
    for raw in config.sandbox_read_paths:
        path = os.path.realpath(raw)
        if not os.path.exists(path):
            raise ConfigError(READ_PATHS, f"expected paths that exist, got {raw!r}")
        if path == "/":
            raise ConfigError(READ_PATHS, "expected paths below /, not / itself: runs would see it all")
        below_work = os.path.relpath(path, config.work_dir) if _within(path, config.work_dir) else ""
        tokens = config.http.tokens_file
        if (
            _within(config.work_dir, path)
            or below_work.split(os.sep)[0].startswith(POOL_PREFIX)
            or (tokens and _within(tokens, path))
            or (config.tools_config and _within(config.tools_config, path))
            # Its locks, which a run could hold (by default in /var/tmp: RUNNER_SANDBOX_READ_PATHS=/var/tmp).
            or (config.wheelhouse_cache and _within(config.wheelhouse_cache, path))
        ):
            raise ConfigError(
                READ_PATHS,
                f"{raw!r} holds the server's own files (its work directory's, its tokens, its tools file, its "
                "wheelhouse cache)",
            )
        _check_readable(raw, path)
        resolved.append(path)
    return tuple(resolved)


def _check_readable(raw: str, path: str) -> None:
    """ConfigError unless runs could read `path`: a non-root server's keep its uid; a root server's are
    other uids (RUNNER_SANDBOX_UIDS), for which it must be readable (and, a directory, searchable) by
    others. What leads to it does not matter: the view makes those directories itself."""
    directory = os.path.isdir(path)
    if os.geteuid() != 0:
        if not os.access(path, os.R_OK | (os.X_OK if directory else 0)):
            raise ConfigError(READ_PATHS, f"{raw!r} cannot be read by the server's uid, nor so by its runs")
        return
    wanted = stat.S_IROTH | (stat.S_IXOTH if directory else 0)
    mode = os.stat(path).st_mode
    if mode & wanted != wanted:
        raise ConfigError(
            READ_PATHS,
            f"{raw!r} is mode {stat.S_IMODE(mode):04o}: a root server's runs are other uids (RUNNER_SANDBOX_UIDS) "
            "and could not read it; make it readable by others (chmod o+rX)",
        )


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _tokens_file(path: str) -> str:
    """RUNNER_AUTH_TOKENS_FILE, resolved: the sandbox hides it from runs by the path it really has."""
    if not path:
        return ""
    if not os.path.isfile(path):
        raise _unfit("RUNNER_AUTH_TOKENS_FILE", path, "a file of tokens")
    _check_others_cannot_change("RUNNER_AUTH_TOKENS_FILE", path, "add a token of their own")
    return os.path.realpath(path)


def _tools_file(path: str) -> str:
    """RUNNER_TOOLS_CONFIG, resolved: the sandbox hides it from runs by the path it really has."""
    if not path:
        return ""
    if not os.path.isfile(path):
        raise _unfit("RUNNER_TOOLS_CONFIG", path, "a file of MCP servers")
    _check_others_cannot_change("RUNNER_TOOLS_CONFIG", path, "choose the commands this server starts")
    return os.path.realpath(path)


def _check_others_cannot_change(variable: str, path: str, could: str) -> None:
    """ConfigError if a user other than this server's, or root, could change what the file at `path`
    holds: it, or any directory on the way to it (through a symbolic link, both ways), owned by another
    user, or writable by every user (a directory without the sticky bit /tmp has), as OpenSSH's
    StrictModes judges. Found by a first hour: a tokens file of mode 666, in a directory of mode 777, was
    served with a warning that it was readable; by a second look, a 777 directory above its own, or a
    link in one, passed the first version of this check."""
    trusted = {0, os.geteuid()}
    given = os.path.abspath(path)
    real = os.path.realpath(given)
    places = [real, *_parents(real)]
    if given != real:
        places += [parent for parent in _parents(given) if parent not in places]
    for place in places:
        info = os.stat(place)
        mode, kind = info.st_mode, "file" if place == real else "directory"
        if info.st_uid not in trusted:
            said = (
                f"{path!r} is under {place!r}, a {kind} of uid {info.st_uid}"
                if kind == "directory"
                else (f"{path!r} belongs to uid {info.st_uid}")
            )
            raise ConfigError(variable, f"{said}, who could {could}: it must be this server's user's or root's")
        if mode & 0o002 and not (kind == "directory" and mode & stat.S_ISVTX):
            if kind == "file":
                raise ConfigError(
                    variable,
                    f"{path!r} (mode {oct(mode & 0o777)}) may be written by any user, who could {could}: chmod 600 it",
                )
            raise ConfigError(
                variable,
                f"{path!r} is under {place!r} (mode {oct(mode & 0o777)}), where any user may replace what is in it "
                f"and {could}: move it to a directory only its owner may write",
            )


def _parents(path: str) -> list[str]:
    """Each directory above `path`, the nearest first, up to /."""
    found = []
    while (parent := os.path.dirname(path)) != path:
        found.append(parent)
        path = parent
    return found
