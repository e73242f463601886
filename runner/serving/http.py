"""MCP over Streamable HTTP, the serving side (the process around it); runner/transports/http.py is the wire side.

Listening, the workers behind one port, readiness, metrics, and a graceful stop (runs in flight get
RUNNER_SHUTDOWN_GRACE seconds)."""

from __future__ import annotations

import functools
import logging
import os
import signal
import socket

import anyio

from runner.config import Config, HttpConfig, ToolServers
from runner.config.disk import TOOLS_PREFIX
from runner.config.tokens import BearerTokens
from runner.eventloop import backend_options
from runner.logs import get_logger, log_event
from runner.processes.isolation import IsolationPlan
from runner.processes.procctl import signal_on_parent_death
from runner.serving.signals import stops_heard


def main_http(
    config: Config,
    plan: IsolationPlan,
    tokens: BearerTokens | None,
    early: list[int],
    *,
    listen_fd: int | None = None,
    supervisor_pid: int | None = None,
    held_fds: tuple[int, ...] = (),
    worker_args: tuple[str, ...] = (),
    tools: ToolServers | None = None,
) -> int:
    """Listen (or, as a worker, take the supervisor's socket), then serve or supervise; the exit status."""
    from runner.transports.http import listening, reached_as, url_of

    logger = get_logger()
    worker = listen_fd is not None
    if worker:
        # A worker: stop (gracefully) when the supervisor is gone, whatever ended it; if it is gone
        # already (before the call below), at once.
        signal_on_parent_death(signal.SIGTERM)
        # Copies of the supervisor's locks on this worker's directory and the metrics one: held while this
        # worker lives, so that no start takes them for a dead server's during its grace. Never passed on.
        for fd in held_fds:
            os.set_inheritable(fd, False)
        if supervisor_pid is not None and os.getppid() != supervisor_pid:
            log_event(logger, logging.ERROR, "the supervisor is gone; not serving")
            return 1
    elif tokens is not None and not plan.sandboxed:
        log_event(
            logger,
            logging.WARNING,
            "runs are not sandboxed and share the server's uid: a run can read RUNNER_AUTH_TOKENS_FILE, every "
            "client's token in it; give runs a sandbox (RUNNER_SANDBOX, docs/security.md) before sharing this server",
        )
    elif tokens is None:
        log_event(logger, logging.WARNING, "HTTP without authentication: whoever reaches the port runs code")
    if not worker and tokens is not None:
        # Names only, never a token: what an operator needs to see why a client gets 401.
        log_event(logger, logging.INFO, "bearer tokens loaded", count=len(tokens.names), names=",".join(tokens.names))
        _warn_of_readable_tokens(config.http)
    http = config.http
    try:
        sock = socket.socket(fileno=listen_fd) if worker else listening(http.host, http.port)
    except OSError as exc:
        # Naming what to change (found in a first hour: a port in use said only "Address already in use").
        log_event(
            logger,
            logging.ERROR,
            "cannot listen",
            host=http.host,
            port=http.port,
            error=exc.strerror,
            change="RUNNER_HTTP_PORT (0: any free port) or RUNNER_HTTP_HOST",
        )
        return 1
    with sock:
        if not worker and http.workers > 1:
            from runner.serving.supervisor import supervise

            return supervise(http, config.pool.work_dir, sock, list(worker_args))
        if not worker:
            reached = reached_as(sock, http.allowed_hosts)
            log_event(logger, logging.INFO, "serving on HTTP", url=url_of(sock, http.path), **reached)
        # Code mode's tool calls: a loop that polls before it sleeps while they are in flight (`eventloop`).
        polling = backend_options(config.tools.tools_spin_us if tools is not None else 0)
        anyio.run(serve_http, config, plan, tokens, sock, early, tools, backend_options=polling)
    log_event(logger, logging.INFO, "server stopped")
    return 0


async def serve_http(
    config: Config,
    plan: IsolationPlan,
    tokens: BearerTokens | None,
    sock: socket.socket,
    early: list[int],
    tools: ToolServers | None = None,
) -> None:
    """Serve Streamable HTTP until a signal; runs in flight then get RUNNER_SHUTDOWN_GRACE seconds.
    `tools`: the downstream servers runs may call (code mode), each worker with its own connections."""
    from runner.egress.proxy import EgressProxy
    from runner.execution.admission import fair_share
    from runner.execution.leftovers import held_directory
    from runner.execution.pool import Pool
    from runner.execution.sweep import strays_reaped
    from runner.protocol.handlers import build_server
    from runner.protocol.metrics import Metrics
    from runner.protocol.tasks import Tasks
    from runner.protocol.tool import ToolChanges
    from runner.tools.broker import Broker
    from runner.transports.cancels import after_answer, identified
    from runner.transports.http import HttpServer, caller_of, http_app, name_header_of

    logger = get_logger()
    own_ports = frozenset({sock.getsockname()[1]})
    egress = EgressProxy(config.egress, logger, own_ports=own_ports) if config.egress_allow else None
    pool_config, http = config.pool, config.http
    share = fair_share(pool_config.max_concurrent, len(tokens.names) if tokens else 0, http.max_concurrent_per_token)
    async with (
        stops_heard(early, "signal received; finishing the calls in flight") as stopping,
        strays_reaped(logger),
        Broker.maybe_opened(
            tools,
            config.tools,
            logger,
            functools.partial(held_directory, TOOLS_PREFIX, config.work_dir),
            callers=tokens is not None,
        ) as broker,
        Pool.open(config, logger, reap_strays=True, plan=plan, caller_share=share, tools=broker, egress=egress) as pool,
        Tasks.opened(config.tasks, logger) as tasks,
        anyio.create_task_group() as tg,
    ):
        metrics = Metrics(pool.measured_state, pool_config.max_concurrent, pool_config.pool_size)
        changes = None
        if broker is not None:
            broker.observe = metrics.tool_call
            # Stateless HTTP keeps no handshake-era connection to tell: only 2026-07-28's listen streams.
            changes = ToolChanges(
                broker.description, logger, handshake=False, caller_of=caller_of, connections=http.max_connections
            )
            broker.on_listed = changes.poke
            tg.start_soon(changes.tell_forever)
        if egress is not None:
            egress.on_refused, egress.on_bytes = metrics.egress_refused, metrics.egress_bytes
        server = build_server(
            config,
            pool,
            logger,
            metrics=metrics,
            caller_of=caller_of,
            tasks=tasks,
            name_header_of=name_header_of,
            code_mode=broker.description if broker is not None else None,
            after_answer=after_answer,
            tool_changes=changes,
        )
        # Each POST learns its request's id and method from the SDK's parse (cancels, the bodies' bound).
        server.middleware.append(identified)

        def not_ready() -> str | None:
            state = pool.state()
            if state.queue_full:
                return "the queue is full"
            if pool_config.pool_size and not state.ready:
                return "no interpreter is ready"
            return None

        app = http_app(server, http, tokens, not_ready, metrics.exposition, logger)
        http_server = HttpServer(app, http, sock, logger)
        if metrics.multiprocess:
            tg.start_soon(metrics.refresh_forever)

        def stop() -> None:
            if tasks is not None:
                tasks.stop()  # no call becomes a task now: it gets the grace, as every call in flight
            if changes is not None:
                changes.close()  # a listen stream would hold the grace to its end
            http_server.stop()

        stopping.serving(stop)
        await http_server.serve()
        log_event(logger, logging.INFO, "HTTP server stopped; shutting down")
        tg.cancel_scope.cancel()


def _warn_of_readable_tokens(http: HttpConfig) -> None:
    """A tokens file other users of the machine may read gives them the server: say so at start."""
    path = http.tokens_file
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
