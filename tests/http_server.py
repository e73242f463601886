"""`python -m runner --transport http` as a real process on a loopback port, for the HTTP tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import h11

from tests.conftest import REPO

START_TIMEOUT = 30.0
# The log line that says where the server listens, as text or as JSON (RUNNER_LOG_FORMAT=json).
_URL = re.compile(r'serving on HTTP(?: url=|", "url": ")(http://[^\s"]+)')


@dataclass
class HttpServer:
    process: subprocess.Popen[bytes]
    url: str  # the MCP endpoint
    log: Path

    @property
    def base(self) -> str:
        """scheme://host:port, for /healthz, /readyz and /metrics."""
        return self.url.rsplit("/", 1)[0]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        """Send `sig` and return the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


def server_env(work_dir: Path, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "RUNNER_WORK_DIR": str(work_dir),
        "RUNNER_POOL_SIZE": "1",
        "RUNNER_HTTP_PORT": "0",
        "RUNNER_SANDBOX": "none",
        # The standard library only, unless a test says otherwise: started from this checkout, the server
        # would take its .sandbox-env and .wheelhouse (runner.config.load).
        "RUNNER_PACKAGES": "",
        "RUNNER_WHEELHOUSE": "",
        **extra,
    }


@contextmanager
def http_server(work_dir: Path, log: Path, *args: str, **env: str) -> Iterator[HttpServer]:
    """Start the server, wait until it says where it listens; on exit SIGTERM it (if still running)."""
    with open(log, "wb") as errlog:
        process = subprocess.Popen(
            [sys.executable, "-m", "runner", "--transport", "http", *args],
            cwd=REPO,
            env=server_env(work_dir, **env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=errlog,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while (found := _URL.search(log.read_text(errors="replace"))) is None:
            if process.poll() is not None:
                raise AssertionError(f"the server exited with {process.returncode}: {log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the server did not start listening: {log.read_text()}")
            time.sleep(0.05)
        server = HttpServer(process, found.group(1), log)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def answer_status(sock: socket.socket, conn: h11.Connection) -> int:
    """Read the whole answer to the request just sent on `conn` over `sock`; its status. The connection is
    then ready for the next request."""
    status = 0
    while not isinstance(event := conn.next_event(), h11.EndOfMessage):
        if event is h11.NEED_DATA:
            conn.receive_data(sock.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        else:
            assert isinstance(event, h11.Data), event
    conn.start_next_cycle()
    return status
