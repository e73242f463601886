"""`python-runner-mcp` (or `python -m runner`): serve MCP on stdio until stdin closes, or on HTTP
(`--transport http`), until SIGTERM/SIGINT arrives; then exit 0. Arguments and dispatch only: the
configuration is `runner.config.load`'s, serving is `runner.serving`'s. A refusal to start is one line
naming the variable, exit 2."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from runner import __version__
from runner.config import Cli, Deployment, load
from runner.errors import ConfigError, Unavailable
from runner.logs import configure_logging, get_logger, log_event
from runner.processes.identity import claimed_uids
from runner.processes.isolation import IsolationPlan, plan_isolation
from runner.processes.procctl import set_dumpable
from runner.serving.signals import catch_early


def _arguments(argv: list[str] | None, prog: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description="python-runner-mcp: run Python over MCP.")
    parser.add_argument("--version", action="version", version=f"python-runner-mcp {__version__}")
    parser.add_argument("--transport", choices=("stdio", "http"), help="default: RUNNER_TRANSPORT, else stdio")
    parser.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve HTTP beyond loopback without RUNNER_AUTH_TOKENS_FILE (anyone who reaches the port runs code)",
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
    parser.add_argument("--held-fds", default="", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _started(args: argparse.Namespace) -> tuple[Deployment, IsolationPlan]:
    """The deployment and the isolation plan; `ConfigError` for anything that must stop the start."""
    deployment = load(os.environ, Cli(args.transport, args.insecure_no_auth))
    plan = plan_isolation(deployment.config)
    # What the pool would refuse as it opens, after its log lines, is refused here, before the first: a
    # root server's run uids (a free block now: one another server takes before our pool does is still
    # refused there).
    with claimed_uids(deployment.config, plan):
        pass
    return deployment, plan


def main(argv: list[str] | None = None, prog: str = "python -m runner") -> int:
    """Entry point (`python -m runner` and the `python-runner-mcp` command alike): configure from the
    environment and the arguments, serve, and return the exit status. `prog`: the name usage shows."""
    args = _arguments(argv, prog)
    if args.install_packages:
        from runner.serving.install import install_packages

        return install_packages()
    early = catch_early()
    try:
        deployment, plan = _started(args)
        configure_logging(deployment.config.log_level, deployment.config.log_format)
        # Code of runs runs as our uid: keep it out of our /proc/<pid>/environ, fds, memory and ptrace.
        if not set_dumpable(False):
            log_event(get_logger(), logging.WARNING, "cannot make the server non-dumpable on this platform")
        return _serve(deployment, plan, early, args)
    except Exception as exc:  # a refusal at start, or raised as the server starts (the pool's) in a task group
        refused = _refusal(exc)
        if refused is None:
            raise
        what = "invalid configuration" if isinstance(refused, ConfigError) else "cannot start"
        sys.stderr.write(f"python-runner-mcp: {what}: {refused}\n")
        return 2


def _refusal(exc: BaseException) -> ConfigError | Unavailable | None:
    """The refusal to start that `exc` is or holds (a task group wraps what its tasks raise), if any."""
    if isinstance(exc, ConfigError | Unavailable):
        return exc
    found = map(_refusal, exc.exceptions) if isinstance(exc, BaseExceptionGroup) else ()
    return next((refusal for refusal in found if refusal is not None), None)


def _serve(deployment: Deployment, plan: IsolationPlan, early: list[int], args: argparse.Namespace) -> int:
    """Serve on the configured transport until the end; the exit status."""
    config = deployment.config
    if config.transport == "http":
        from runner.serving.http import main_http

        worker_args = ("--insecure-no-auth",) if args.insecure_no_auth else ()
        return main_http(
            config,
            plan,
            deployment.tokens,
            early,
            tools=deployment.tools,
            listen_fd=args.listen_fd,
            supervisor_pid=args.supervisor_pid,
            held_fds=tuple(int(fd) for fd in args.held_fds.split(",") if fd),
            worker_args=worker_args,
        )
    from runner.serving.stdio import main_stdio

    return main_stdio(config, plan, early, deployment.tools)


def console() -> int:
    """The `python-runner-mcp` console script: `main`, as `python -m runner` is, its usage under its own name."""
    return main(prog="python-runner-mcp")


if __name__ == "__main__":
    sys.exit(main())
