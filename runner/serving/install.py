"""`--install-packages`: every distribution of the wheelhouse installed into its cache as runs would have
them, then exit (an image's build does, so that its read-only cache holds them all)."""

from __future__ import annotations

import os
import sys

import anyio

from runner.config import load
from runner.errors import ConfigError
from runner.execution.provided import ProvidedPackages
from runner.logs import configure_logging, get_logger
from runner.processes.helpers import Helpers


def install_packages() -> int:
    """`--install-packages`: the wheelhouse's every distribution installed as runs would have them."""
    try:
        config = load(os.environ).config
    except ConfigError as exc:
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {exc}\n")
        return 2
    if not config.wheelhouse:
        sys.stderr.write("python-runner-mcp: --install-packages needs RUNNER_WHEELHOUSE\n")
        return 2
    configure_logging(config.log_level, config.log_format)

    async def install() -> tuple[int, int]:
        provided = await ProvidedPackages.opened(config.packages_section, get_logger(), Helpers())
        assert provided is not None  # a wheelhouse is configured
        try:
            return await provided.install_all(), provided.cache.size
        finally:
            provided.close()

    try:
        installed, size = anyio.run(install)
    except Exception as exc:
        sys.stderr.write(f"python-runner-mcp: the wheelhouse could not be installed: {exc}\n")
        return 1
    sys.stderr.write(
        f"python-runner-mcp: {installed} distributions installed into {config.wheelhouse_cache} "
        f"({size / 2**20:.1f} MiB there in all)\n"
    )
    return 0
