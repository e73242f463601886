"""`serve_http` in the test's own process and event loop, so that what it reads from /proc can be made
slow: a /metrics scrape, which needs no token, never holds up the event loop that serves every call."""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import threading
import time
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from runner.config import Config
from runner.processes import procctl
from runner.processes.isolation import plan_isolation
from runner.serving.http import serve_http
from runner.transports.http import listening, url_of
from tests.helpers import check_structured

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

# One session's memory read takes this long (two sessions of 29 processes sharing 200 MB took over
# 100 ms for real): a stall of the event loop this long is what the reads would cost there.
SLOW_READ_SECONDS = 1.0
SCRAPERS = 4
# The longest the event loop may go without running a ready task while the scrapes are served:
# well under one read, with room for a loaded 2-core machine.
STALL_ALLOWED = SLOW_READ_SECONDS / 2
TICK = 0.01


def slow_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every reference the server has to `tree_pss_bytes` made slow; the threads that called it."""
    threads: list[int] = []
    real = procctl.tree_pss_bytes

    def slow(pid: int, most: int = 64) -> int:
        threads.append(threading.get_ident())
        time.sleep(SLOW_READ_SECONDS)  # the cost of the read itself, not a wait for anything
        return real(pid, most)

    for module in list(sys.modules.values()):
        if module.__name__.startswith("runner.") and getattr(module, "tree_pss_bytes", None) is real:
            monkeypatch.setattr(module, "tree_pss_bytes", slow)
    return threads


async def longest_stall(scrapes_done: anyio.Event) -> float:
    """How late, at most, a task that asks to run every TICK ran, until `scrapes_done`."""
    longest, last = 0.0, anyio.current_time()
    while not scrapes_done.is_set():
        await anyio.sleep(TICK)
        now = anyio.current_time()
        longest, last = max(longest, now - last - TICK), now
    return longest


async def test_concurrent_scrapes_with_a_slow_session_memory_read_do_not_stall_the_event_loop(
    config: Config, monkeypatch: pytest.MonkeyPatch, no_leaks: None
) -> None:
    config = dataclasses.replace(config, transport="http", http=Config.from_env({"RUNNER_TRANSPORT": "http"}).http)
    threads = slow_reads(monkeypatch)
    sock = listening("127.0.0.1", 0)
    url = url_of(sock, config.http.path)
    base = url.rsplit("/", 1)[0]
    scraped: list[str] = []
    stalls: list[float] = []
    with sock:
        async with anyio.create_task_group() as server:
            server.start_soon(serve_http, config, plan_isolation(config), None, sock, [])
            async with (
                httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http,
                Client(streamable_http_client(url, http_client=http), mode="auto") as client,
            ):
                opened = await client.call_tool("run_python", {"code": "data = bytearray(8 * 2**20)", "session": "new"})
                assert check_structured(opened.structured_content)["status"] == "ok"

                async def scrape() -> None:
                    scraped.append((await http.get(base + "/metrics")).text)

                async def watch(done: anyio.Event) -> None:
                    stalls.append(await longest_stall(done))

                done = anyio.Event()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(watch, done)
                    async with anyio.create_task_group() as scrapes:
                        for _ in range(SCRAPERS):
                            scrapes.start_soon(scrape)
                    done.set()
            # Stopped as a server is (the signal handler serve_http installed): a cancellation from here
            # would end the pool's zygote readers before its sessions and interpreters.
            os.kill(os.getpid(), signal.SIGTERM)
    assert stalls[0] < STALL_ALLOWED, f"the event loop stalled {stalls[0]:.2f} s while scrapes were served"
    assert len(threads) == 1, "one read of the one session, however many scrapes came at once"
    assert threading.get_ident() not in threads, "the read ran off the event loop's thread"
    assert [memory_of(text) for text in scraped] == [memory_of(scraped[0])] * SCRAPERS
    assert memory_of(scraped[0]) >= 8 * 2**20, "the session's kept bytearray is counted"


def memory_of(text: str) -> Any:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "runner_sessions_memory_bytes":
                return sample.value
    raise AssertionError("no runner_sessions_memory_bytes in the scrape")
