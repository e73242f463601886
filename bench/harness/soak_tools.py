"""The soak's code mode (bench/soak.py --tools): runs that call a downstream server's tools through
`mcp_tools`, mixed in with the rest.

The downstream is tests/downstream/hostile_server.py over stdio (the server's own interpreter runs it:
it needs only the SDK). Its kinds of run: calls from four threads at once, each answer checked against
its own arguments; a call in flight when the run's timeout comes (cancelled downstream); more calls at
once than the run may have (each answered or refused for the limit, none failing otherwise); a call given up by a
signal's exception, then another that must get its own answer; and a call in flight when the client
cancels the run. Each must end as its kind says, and leave nothing behind (the soak's checks).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOSTILE_SERVER = Path(__file__).resolve().parents[2] / "tests" / "downstream" / "hostile_server.py"
MOST_IN_FLIGHT = 4  # RUNNER_TOOLS_MAX_CONCURRENT, the server's default

THREADS = (
    "import mcp_tools\n"
    "from concurrent.futures import ThreadPoolExecutor\n"
    "with ThreadPoolExecutor(4) as pool:\n"
    "    said = list(pool.map(lambda x: mcp_tools.hostile.measure(x=x), range({n})))\n"
    "print(sum(s == f'measure {{x}}' for x, s in enumerate(said)))\n"
)
TIMED_OUT = "import mcp_tools\nmcp_tools.hostile.slow(seconds=30)\n"
PAST_THE_LIMIT = (
    "import mcp_tools, threading\n"
    "said = []\n"
    "def call():\n"
    "    try:\n"
    "        said.append(mcp_tools.hostile.slow(seconds=0.5))\n"
    "    except mcp_tools.ToolError as exc:\n"
    "        said.append('in flight' in str(exc))\n"
    "threads = [threading.Thread(target=call) for _ in range({n})]\n"
    "for thread in threads:\n"
    "    thread.start()\n"
    "for thread in threads:\n"
    "    thread.join()\n"
    "print(said.count('slow ok') + said.count(True))\n"
)
GIVEN_UP = (
    "import mcp_tools, signal\n"
    "def alarm(*_):\n"
    "    raise RuntimeError('gave up')\n"
    "signal.signal(signal.SIGALRM, alarm)\n"
    "signal.setitimer(signal.ITIMER_REAL, {after})\n"
    "try:\n"
    "    mcp_tools.hostile.slow(seconds=1)\n"
    "except RuntimeError:\n"
    "    pass\n"
    "print(mcp_tools.hostile.measure(x={x}))\n"
)


def tools_file(directory: Path) -> Path:
    """The RUNNER_TOOLS_CONFIG file naming the hostile downstream, written in `directory`."""
    entry = {"command": sys.executable, "args": [str(HOSTILE_SERVER)], "tools": ["measure", "slow"]}
    path = directory / "tools.json"
    path.write_text(json.dumps({"mcpServers": {"hostile": entry}}))
    return path


def tool_kinds(
    plan: Callable[..., Any], expect: Callable[..., Any]
) -> dict[str, tuple[int, Callable[[random.Random], Any]]]:
    """The soak's kinds of code-mode run, as its KINDS: weight and a maker of a `plan(...)`."""

    def threads(rng: random.Random) -> Any:
        n = rng.randrange(1, 41)
        return plan("tools", {"code": THREADS.format(n=n), "timeout": 30}, expect("ok", stdout=f"{n}\n"))

    def timed_out(rng: random.Random) -> Any:
        arguments = {"code": TIMED_OUT, "timeout": round(rng.uniform(0.3, 0.8), 3)}
        return plan("tools-time", arguments, expect("timeout", message_has="while waiting for the tool hostile.slow"))

    def past_the_limit(rng: random.Random) -> Any:
        n = rng.randrange(MOST_IN_FLIGHT + 1, MOST_IN_FLIGHT + 5)
        code = PAST_THE_LIMIT.format(n=n)
        return plan("tools-limit", {"code": code, "timeout": 30}, expect("ok", stdout=f"{n}\n"))

    def given_up(rng: random.Random) -> Any:
        x = rng.randrange(1000)
        code = GIVEN_UP.format(after=round(rng.uniform(0.05, 0.3), 3), x=x)
        return plan("tools-gaveup", {"code": code, "timeout": 30}, expect("ok", stdout=f"measure {x}\n"))

    def cancelled(rng: random.Random) -> Any:
        arguments = {"code": TIMED_OUT, "timeout": 30}
        return plan("tools-cancel", arguments, None, cancel_after=rng.uniform(0.1, 0.5))

    return {
        "tools": (12, threads),
        "tools-time": (4, timed_out),
        "tools-limit": (3, past_the_limit),
        "tools-gaveup": (3, given_up),
        "tools-cancel": (4, cancelled),
    }
