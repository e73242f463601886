"""The soak's sessions (bench/soak.py): each one a story of calls made one after another on one handle.

A story opens a session, makes one to four calls of a random kind, checks that the session holds
exactly what the calls that ended ok left (a variable and a file in its directory), then ends it one
of four ways: closed; left until its idle time is past; its keeper killed by a call that then fails;
or, in a sandboxed mode, a call's kill(-1) (which ends that session at most). The calls that must not
change the session fail, time out, meet the memory limit, are cancelled mid-run, or attack the
keeper (ptrace, killing it in a call that ends ok, garbage on the call's channel to the anchor, a kept
handler of every signal, signalled in the keeper); each must leave the session exactly as it was. Two
calls at once wait their turn.
Every call's answer is checked; a story's problems come back as strings, one per wrong answer.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

# Run in the session: each step's code, and what the session must hold after it.
OPEN = "n = {start}\nopen('state.txt', 'w').write(str(n))"
USE = "n += 1\nopen('state.txt', 'w').write(str(n))\nprint(n)"
CHECK = "print(n, open('state.txt').read())"
FAIL = "n += 100\nopen('state.txt', 'w').write('lost')\nraise ValueError('soak')"
TIMEOUT = "n += 100\nopen('state.txt', 'w').write('lost')\nimport time\ntime.sleep(30)"
MEMORY = "n += 100\nopen('state.txt', 'w').write('lost')\nhog = bytearray(1 << 34)"
CANCEL = "n += 100\nopen('state.txt', 'w').write('lost')\nimport time\ntime.sleep(30)"
PTRACE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "rc = libc.ptrace(0x4206, os.getppid(), None, None)\n"  # PTRACE_SEIZE
    "print('attached' if rc == 0 else 'refused')"
)
KILL_KEEPER_KEPT = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n" + USE
KILL_KEEPER_FAILS = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nraise ValueError('soak')"
KILL_ALL = "import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(0.2)\n" + USE
# Hostile: garbage on the call's channel to its anchor (fd 254), then a failure (the session goes on,
# rolled back); a kept handler of every catchable signal, signalled in the keeper by a later call that
# fails (nothing of the handler may run there); two calls at once, the second waiting its turn.
CHANNEL_GARBAGE = (
    b"P %(pid)d 0",
    b"D abc def ghi",
    b"D nan inf -1",
    b"D 0 0 0\nE forged\nV 1 0 -",
    bytes(range(256)),
    b"P 1 0",
    b"x" * 60000,
)
GARBAGE = (
    "n += 100\nimport os, socket, time\ns = socket.socket(fileno=254)\n"
    "for m in {messages!r}:\n    s.send(m % {{b'pid': os.getpid()}} if b'%(pid)' in m else m)\n"
    "raise ValueError('soak')"
)
CAUGHT = "[s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]"
HANDLERS = (
    "import signal\ndef handler(*_):\n    global n\n    n += 1000\n"
    f"for s in {CAUGHT}:\n    try: signal.signal(s, handler)\n    except (OSError, ValueError): pass\n"
) + USE
SIGNAL_KEEPER = f"import os, signal\nfor s in {CAUGHT}:\n    os.kill(os.getppid(), s)\nraise ValueError('soak')"
SLOW = "import time\ntime.sleep(0.3)\nprint(n)"

STEPS = {
    "use": 40,
    "fail": 12,
    "timeout": 8,
    "memory": 6,
    "cancel": 8,
    "ptrace": 5,
    "keeper killed, kept": 6,
    "garbage": 6,
    "handlers signalled": 5,
    "turn": 6,
}
ENDINGS = {"closed": 55, "expired": 10, "keeper killed": 20, "kill -1": 15}


class StoryCall(Protocol):
    """One call of a story, answered: its structuredContent, or None if it was cancelled or got no
    proper answer (then the caller has recorded what was wrong)."""

    sandboxed: bool
    idle_seconds: float

    async def __call__(
        self, arguments: dict[str, Any], *, tool: str = "run_python", cancel_after: float | None = None
    ) -> dict[str, Any] | None: ...


Story = Callable[[StoryCall], Awaitable[list[str]]]


@dataclass
class Session:
    """What the story expects the session to hold."""

    handle: str
    n: int
    problems: list[str]

    def expect(self, what: str, got: dict[str, Any] | None, status: str, **fields: Any) -> bool:
        """Record a problem unless `got` has `status` and `fields`; True if it is as expected."""
        if got is None:
            return False
        wrong = [f"status {got.get('status')!r} ({str(got.get('message'))[:120]!r})"] if got["status"] != status else []
        for name, value in fields.items():
            seen = got.get(name)
            if not (value(seen) if callable(value) else seen == value):
                wrong.append(f"{name} {str(seen)[:120]!r}")
        if wrong:
            self.problems.append(f"session {what}: " + ", ".join(wrong))
        return not wrong


def unknown(*words: str) -> Callable[[Any], bool]:
    """A message that says "unknown session", and each of `words`."""
    return lambda message: (
        isinstance(message, str) and message.startswith("unknown session") and all(word in message for word in words)
    )


def plan_story(rng: random.Random) -> Story:
    """A story with its steps and ending drawn now, from the soak's seeded random numbers."""
    steps = rng.choices(list(STEPS), weights=list(STEPS.values()), k=rng.randint(1, 4))
    ending = rng.choices(list(ENDINGS), weights=list(ENDINGS.values()))[0]
    start = rng.randrange(1000)
    cancel_after = rng.uniform(0.05, 0.3)
    garbage = rng.sample(CHANNEL_GARBAGE, 3)

    async def story(call: StoryCall) -> list[str]:
        opened = await call({"code": OPEN.format(start=start), "session": "new"})
        if opened is None or not isinstance(opened.get("session"), str):
            return [f"session new: {str(opened)[:200]}"] if opened is not None else []
        session = Session(opened["session"], start, [])
        if not session.expect("new", opened, "ok", rolled_back=False):
            return session.problems
        for step in steps:
            await one_step(call, session, step, cancel_after, garbage)
        await one_step(call, session, "check", cancel_after, garbage)
        await the_end(call, session, "closed" if ending == "kill -1" and not call.sandboxed else ending)
        return session.problems

    return story


async def one_step(call: StoryCall, session: Session, step: str, cancel_after: float, garbage: list[bytes]) -> None:
    kept = session.n + 1
    on = {"session": session.handle}
    if step == "use":
        if session.expect(step, await call({"code": USE, **on}), "ok", stdout=f"{kept}\n", rolled_back=False):
            session.n = kept
    elif step == "keeper killed, kept":
        got = await call({"code": KILL_KEEPER_KEPT, **on})
        if session.expect(step, got, "ok", stdout=f"{kept}\n", rolled_back=False):
            session.n = kept
    elif step == "check":
        session.expect(step, await call({"code": CHECK, **on}), "ok", stdout=f"{session.n} {session.n}\n")
    elif step == "fail":
        session.expect(step, await call({"code": FAIL, **on}), "error", rolled_back=True)
    elif step == "timeout":
        session.expect(step, await call({"code": TIMEOUT, "timeout": 0.3, **on}), "timeout", rolled_back=True)
    elif step == "memory":
        session.expect(step, await call({"code": MEMORY, **on}), "memory_limit", rolled_back=True)
    elif step == "cancel":
        await call({"code": CANCEL, "timeout": 30, **on}, cancel_after=cancel_after)
    elif step == "garbage":
        got = await call({"code": GARBAGE.format(messages=garbage), **on})
        session.expect(step, got, "error", rolled_back=True)
    elif step == "handlers signalled":
        if session.expect(step, await call({"code": HANDLERS, **on}), "ok", stdout=f"{kept}\n", rolled_back=False):
            session.n = kept
        session.expect(step, await call({"code": SIGNAL_KEEPER, **on}), "error", rolled_back=True)
    elif step == "turn":  # the second waits for the first's end, then sees its state
        slow, used = await asyncio.gather(call({"code": SLOW, **on}), call({"code": USE, **on}))
        session.expect(step, slow, "ok", stdout=f"{session.n}\n", rolled_back=False)
        if session.expect(step, used, "ok", stdout=f"{kept}\n", rolled_back=False):
            session.n = kept
    elif step == "ptrace":
        refused: Callable[[Any], bool] = lambda stdout: stdout == "refused\n"  # noqa: E731
        session.expect(step, await call({"code": PTRACE, **on}), "ok", stdout=refused, rolled_back=False)


async def the_end(call: StoryCall, session: Session, ending: str) -> None:
    on = {"session": session.handle}
    after = {"code": CHECK, **on}
    if ending == "closed":
        closed = await call(on, tool="close_session")
        if closed is not None and closed.get("closed") is not True:
            session.problems.append(f"close_session: {str(closed)[:200]}")
        session.expect("after close", await call(after), "invalid_arguments", message=unknown("closed"))
    elif ending == "expired":
        await asyncio.sleep(call.idle_seconds + 3)  # the server looks for idle sessions once a second
        session.expect("after its idle time", await call(after), "invalid_arguments", message=unknown("unused for"))
    elif ending == "keeper killed":
        await call({"code": KILL_KEEPER_FAILS, **on})
        session.expect("after its keeper died", await call(after), "invalid_arguments", message=unknown("keeper"))
    elif ending == "kill -1":
        await call({"code": KILL_ALL, **on})  # kept, rolled back or the session ended: any of them
        got = await call({"code": "print(n)", **on})
        if got is None:
            return
        if got["status"] == "invalid_arguments":
            session.expect("after kill(-1)", got, "invalid_arguments", message=unknown())
            return
        is_n: Callable[[Any], bool] = lambda stdout: stdout in (f"{session.n}\n", f"{session.n + 1}\n")  # noqa: E731
        session.expect("after kill(-1)", got, "ok", stdout=is_n)
        closed = await call(on, tool="close_session")
        if closed is not None and closed.get("closed") is not True:
            session.problems.append(f"close_session after kill(-1): {str(closed)[:200]}")
