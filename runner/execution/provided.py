"""The packages the server provides to runs from its vetted wheelhouse (RUNNER_WHEELHOUSE): which
distributions a call needs, and their directories installed and held while it runs.

A call needs what its code imports (the same scan of import statements as the supply's route,
`supply.imported_packages`, mapped to distributions by the wheels' own module lists: `sklearn` is
scikit-learn's) and what it names in `packages` (for imports no scan sees), with everything those
need from the wheelhouse. Names outside the wheelhouse are the protocol side's to refuse; here they
are only not provided. The directories are installed once (`wheelhouse_cache.WheelhouseCache`), outside
every run's limits but within the install's own time and disk bounds, and handed to the run on its
job (`wire.Job.paths`), which puts them after the package environment on sys.path.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio

from runner.config import PackagesConfig
from runner.config.wheelhouse import Wheelhouse
from runner.execution.driver import ProgressCallback
from runner.execution.wheelhouse_cache import InstallError, Wanted, WheelhouseCache
from runner.logs import NO_REQUEST, log_event
from runner.outcome import Progress, RunRequest, RunResult, Status
from runner.processes.helpers import Helpers


@dataclass(frozen=True, slots=True)
class Provided:
    """What a call was given: each distribution's directory, and what its result says of an install it
    waited for ('' where it waited for none)."""

    paths: dict[str, Path]
    note: str = ""


class ProvidedPackages:
    """The wheelhouse as runs are given it: what a call needs, installed and held."""

    def __init__(self, wheelhouse: Wheelhouse, cache: WheelhouseCache, logger: logging.Logger) -> None:
        self.wheelhouse = wheelhouse
        self.cache = cache
        self._log = logger

    @classmethod
    async def opened(
        cls, packages: PackagesConfig, logger: logging.Logger, helpers: Helpers
    ) -> ProvidedPackages | None:
        """The wheelhouse of an opened configuration, its cache looked over (None without one); what
        it installs is compiled by the server's `helpers`. Sizing the cache is done in a thread."""
        wheelhouse = packages.wheelhouse_contents  # read when the configuration was opened
        if wheelhouse is None:
            return None
        cache = WheelhouseCache(
            Path(packages.wheelhouse_cache),
            packages.max_wheelhouse_cache_bytes,
            python=packages.python,
            helpers=helpers,
        )
        await cache.scan()
        log_event(
            logger,
            logging.INFO,
            "wheelhouse opened",
            distributions=len(wheelhouse.wheels),
            cache=packages.wheelhouse_cache,
            cached_bytes=cache.size,
            cache_writable=cache.writable,
        )
        return cls(wheelhouse, cache, logger)

    def needed(self, imports: Iterable[str], asked: Iterable[str] = ()) -> tuple[str, ...]:
        """The distributions (normalized names) a call whose code imports `imports` (top-level names,
        `supply.imported_packages`) and names `asked` in `packages` needs, sorted."""
        house = self.wheelhouse
        return house.closure([*house.for_modules(imports), *asked])

    async def acquire(
        self, names: tuple[str, ...], request_id: str, progress: ProgressCallback | None = None
    ) -> tuple[Path, ...]:
        """The directories of `names`, installed first where they are not, held until `release`;
        `InstallError` naming the distribution that cannot be installed. `progress` hears once which
        are installed first, where any is."""
        return (await self._acquired(names, request_id, progress))[0]

    async def _acquired(
        self, names: tuple[str, ...], request_id: str, progress: ProgressCallback | None
    ) -> tuple[tuple[Path, ...], str]:
        if not names:
            return (), ""
        house = self.wheelhouse
        wanted = [Wanted(n, house.pins[n].version, house.wheels[n], house.pins[n].hashes) for n in names]
        if progress is not None:
            missing = await self.cache.missing(wanted)
            if missing:
                said = f"installing {', '.join(missing)} from the wheelhouse (their first use on this server)"
                await progress(Progress(0.0, 0.0, 0, 0, preparing=said))
        before, started = self.cache.installs, anyio.current_time()
        paths = await self.cache.acquire(wanted)
        took = anyio.current_time() - started
        note = ""
        if self.cache.installs != before:
            log_event(
                self._log,
                logging.INFO,
                "packages installed",
                request_id,
                installed=self.cache.installs - before,
                distributions=",".join(names),
                seconds=round(took, 3),
            )
        if self.cache.installs != before or took >= NOTED_SECONDS:  # its install, or another's it waited for
            # Found by a first hour: a first `import sympy` took 5.7 s, its result said 0.224 s.
            note = f"{', '.join(names)}: {took:.1f} s installing from the wheelhouse before the run (first use here)"
        return tuple(paths), note  # the directories, in the order of `names`; what the result says

    async def provide(
        self,
        request: RunRequest,
        imports: frozenset[str],
        held: Container[str] = (),
        progress: ProgressCallback | None = None,
    ) -> Provided | RunResult:
        """What `request`, whose code imports `imports`, needs beyond `held` (a session's), installed and
        held: each distribution's directory; or an `internal_error` result naming the one that could not
        be installed."""
        names = tuple(name for name in self.needed(imports, request.packages) if name not in held)
        try:
            paths, note = await self._acquired(names, request.request_id, progress)
            return Provided(dict(zip(names, paths, strict=True)), note)
        except InstallError as exc:
            log_event(self._log, logging.ERROR, "packages not installed", request.request_id, error=str(exc))
            message = f"a package this run needs could not be installed: {exc}"
            return RunResult(request.request_id, Status.INTERNAL_ERROR, message)

    def release(self, paths: Iterable[Path]) -> None:
        """The run (or session) that held these has ended."""
        self.cache.release(paths)

    async def install_all(self) -> int:
        """Install every distribution of the wheelhouse (an image's build does, into its read-only
        cache); the number installed now."""
        names = tuple(sorted(self.wheelhouse.wheels))
        paths = await self.acquire(names, NO_REQUEST)
        self.release(paths)
        return self.cache.installs

    def close(self) -> None:
        self.cache.close()


# An install a call waited this long for is said in its result: its duration is the run's alone.
NOTED_SECONDS = 0.5
