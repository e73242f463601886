"""`python-runner-mcp` (or `python -m runner`): serve MCP on stdio until stdin closes, or on HTTP
(`--transport http`), until SIGTERM/SIGINT arrives; then exit 0. Arguments and dispatch only: serving
is `runner.serving`."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys

import anyio

from runner.config import Config
from runner.config.disk import open_environment, with_checkout_defaults
from runner.config.tokens import BearerTokens
from runner.errors import ConfigError
from runner.logs import configure_logging, get_logger, log_event
from runner.processes.identity import claimed_uids
from runner.processes.isolation import IsolationPlan, plan_isolation
from runner.processes.memory import sessions_budget
from runner.processes.procctl import set_dumpable
from runner.serving.signals import catch_early


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runner", description="python-runner-mcp: run Python over MCP.")
    parser.add_argument(
        "--transport",
        choices=("stdio", "http"),
        help="how clients reach the server (default: RUNNER_TRANSPORT, else stdio)",
    )
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve HTTP on a non-loopback address without RUNNER_AUTH_TOKENS_FILE "
        "(anyone who reaches the port runs code)",
    )
    parser.add_argument(
        "--install-packages",
        action="store_true",
        help="install every package of RUNNER_WHEELHOUSE into RUNNER_WHEELHOUSE_CACHE, then exit "
        "(an image's build does, so that its read-only cache has them all)",
    )
    # Internal: how the supervisor (RUNNER_HTTP_WORKERS) hands its listening socket to a worker.
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--supervisor-pid", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _configured(args: argparse.Namespace) -> tuple[Config, IsolationPlan, BearerTokens | None]:
    """The configuration, the isolation plan and the tokens; `ConfigError` for anything that must stop the start."""
    environ = dict(os.environ)
    if args.transport:
        environ["RUNNER_TRANSPORT"] = args.transport
    config = open_environment(Config.from_env(environ))
    tokens = None
    if config.transport == "http":
        http = config.http
        tokens = BearerTokens.read(http.tokens_file) if http.tokens_file else None
        if tokens is None and not http.loopback and not args.insecure_no_auth:
            raise ConfigError(
                "RUNNER_AUTH_TOKENS_FILE",
                f"required to serve HTTP on {http.host}, which is not a loopback address: without tokens anyone who "
                "reaches the port runs code here. Give a tokens file, or --insecure-no-auth if something in front "
                "of the server authenticates every request",
            )
    elif args.insecure_no_auth:
        raise ConfigError("--insecure-no-auth", "applies to --transport http only")
    plan = plan_isolation(config)
    # What the pool would refuse as it opens, after its log lines, is refused here, before the first: the
    # sessions' memory budget and a root server's run uids (a free block now: one another server takes
    # before our pool does is still refused there).
    sessions_budget(config)
    with claimed_uids(config, plan):
        pass
    return config, plan, tokens


def main(argv: list[str] | None = None) -> int:
    """Entry point (`python -m runner` and the `python-runner-mcp` command alike): configure from the
    environment and the arguments, serve, and return the exit status. Started from a checkout, runs
    import from its `.sandbox-env` and `.wheelhouse` unless RUNNER_PACKAGES or RUNNER_WHEELHOUSE says
    otherwise (`environment.with_checkout_defaults`): in the process's environment, which HTTP workers
    inherit."""
    os.environ.update(with_checkout_defaults(os.environ))
    args = _arguments(argv)
    if args.install_packages:
        return _install_packages()
    early = catch_early()
    try:
        config, plan, tokens = _configured(args)
    except ConfigError as exc:
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {exc}\n")
        return 2
    configure_logging(config.log_level, config.log_format)
    if args.listen_fd is None:  # a worker's supervisor has said it already
        _warn_of_readable_tokens(config)
    # Code of runs runs as our uid: keep it out of our /proc/<pid>/environ, fds, memory and ptrace.
    if not set_dumpable(False):
        log_event(get_logger(), logging.WARNING, "cannot make the server non-dumpable on this platform")
    try:
        return _serve(config, plan, tokens, early, args)
    except Exception as exc:  # a ConfigError raised as the server starts (the pool's, say), in a task group
        refused = _config_error(exc)
        if refused is None:
            raise
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {refused}\n")
        return 2


def _config_error(exc: BaseException) -> ConfigError | None:
    """The `ConfigError` that `exc` is or holds (a task group wraps what its tasks raise), if any."""
    if isinstance(exc, ConfigError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next(filter(None, map(_config_error, exc.exceptions)), None)
    return None


def _serve(
    config: Config, plan: IsolationPlan, tokens: BearerTokens | None, early: list[int], args: argparse.Namespace
) -> int:
    """Serve on the configured transport until the end; the exit status."""
    if config.transport == "http":
        from runner.serving.http import main_http

        worker_args = ("--insecure-no-auth",) if args.insecure_no_auth else ()
        return main_http(
            config,
            plan,
            tokens,
            early,
            listen_fd=args.listen_fd,
            supervisor_pid=args.supervisor_pid,
            worker_args=worker_args,
        )
    if sys.stdin.isatty():
        sys.stderr.write(
            "python-runner-mcp: waiting for an MCP client on stdin/stdout (JSON-RPC); connect one with "
            "'make inspect' or a config from mcp-config-examples/. Ctrl-C stops.\n"
        )
    from runner.serving.stdio import serve_stdio

    # A second Ctrl-C during shutdown: everything is already being torn down.
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serve_stdio, config, plan, early)
    log_event(get_logger(), logging.INFO, "server stopped")
    return 0


def _warn_of_readable_tokens(config: Config) -> None:
    """A tokens file other users of the machine may read gives them the server: say so at start."""
    path = config.http.tokens_file if config.transport == "http" else ""
    if not path:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:  # gone since it was read: the tokens are in memory
        return
    if mode & 0o044:
        log_event(
            get_logger(),
            logging.WARNING,
            "RUNNER_AUTH_TOKENS_FILE is readable by other users: anyone who reads it runs code here; chmod 600 it",
            path=path,
            mode=oct(mode & 0o777),
        )


def _install_packages() -> int:
    """`--install-packages`: the wheelhouse's every distribution installed as runs would have them."""
    from runner.execution.provided import ProvidedPackages
    from runner.processes.helpers import Helpers

    try:
        config = open_environment(Config.from_env())
    except ConfigError as exc:
        sys.stderr.write(f"python-runner-mcp: invalid configuration: {exc}\n")
        return 2
    if not config.wheelhouse:
        sys.stderr.write("python-runner-mcp: --install-packages needs RUNNER_WHEELHOUSE\n")
        return 2
    configure_logging(config.log_level, config.log_format)

    async def install() -> tuple[int, int]:
        provided = await ProvidedPackages.opened(config, get_logger(), Helpers())
        assert provided is not None  # a wheelhouse is configured
        try:
            return await provided.install_all(), provided.environments.size
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


def console() -> int:
    """The `python-runner-mcp` console script: `main`, as `python -m runner` is."""
    return main()


if __name__ == "__main__":
    sys.exit(main())
