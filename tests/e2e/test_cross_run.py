"""No run starts with anything an earlier run wrote: its directory, the directories of interpreters
waiting in the pool, and (where the mode gives each run its own) /tmp and /dev/shm.

Every case runs in each mode and with pool sizes from none to several, in a pool like the server's
(a child subreaper that sweeps what runs leave behind).
"""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator

import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import RunRequest, RunResult, Status
from tests.helpers import checked, in_mode

pytestmark = pytest.mark.anyio

LIST_OWN_DIRECTORY = "import os; print(sorted(os.listdir('.')))"

# Writes a file into every directory beside its own: where a pooled interpreter waits for its code.
PLANT_IN_SIBLINGS = """
    import os
    planted = 0
    for name in os.listdir(".."):
        path = os.path.join("..", name)
        if os.path.realpath(path) == os.getcwd():
            continue
        try:
            os.chmod(path, 0o700)
            with open(os.path.join(path, "planted.txt"), "w") as f:
                f.write("from an earlier run")
            planted += 1
        except OSError:
            pass
    print(planted)
"""

# Leaves a daemon (its own session, so the group kill misses it) that keeps planting for two seconds
# after the run has ended.
PLANT_FROM_A_DAEMON = """
    import os, time
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(1)
            os.close(2)
            os.write(write_end, b"up")
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                for name in os.listdir(".."):
                    try:
                        with open(os.path.join("..", name, "planted-later.txt"), "w") as f:
                            f.write("from a daemon")
                    except OSError:
                        pass
                time.sleep(0.001)
            os._exit(0)
        os._exit(0)
    os.read(read_end, 2)
    print("daemon up")
"""


@pytest.fixture(
    params=[
        pytest.param(("posix-spawn", 0), id="posix-spawn-pool0"),
        pytest.param(("posix-spawn", 3), id="posix-spawn-pool3"),
        pytest.param(("fork-server", 0), id="fork-server-pool0"),
        pytest.param(("fork-server", 1), id="fork-server-pool1"),
        pytest.param(("fork-server", 3), id="fork-server-pool3"),
        pytest.param(("bwrap", 2), id="bwrap-pool2"),
        pytest.param(("namespaces", 0), id="namespaces-pool0"),
        pytest.param(("namespaces", 3), id="namespaces-pool3"),
    ]
)
def mode_config(config: Config, request: pytest.FixtureRequest) -> Config:
    mode, pool_size = request.param
    return in_mode(config, mode, pool_size=pool_size)


@pytest.fixture
async def server_pool(mode_config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(mode_config, reap_strays=True) as pool:
        yield pool


async def run(pool: Pool, code: str) -> RunResult:
    result = checked(await pool.run(RunRequest("c0ffee00", textwrap.dedent(code), 10.0)))
    assert result.status is Status.OK, result.to_text()
    return result


async def test_a_run_cannot_plant_files_in_the_directories_of_later_runs(server_pool: Pool) -> None:
    await run(server_pool, PLANT_IN_SIBLINGS)
    for _ in range(4):
        assert (await run(server_pool, LIST_OWN_DIRECTORY)).stdout.text == "[]\n"


async def test_a_daemon_left_behind_cannot_plant_files_in_later_runs(server_pool: Pool) -> None:
    assert (await run(server_pool, PLANT_FROM_A_DAEMON)).stdout.text == "daemon up\n"
    for _ in range(4):
        assert (await run(server_pool, LIST_OWN_DIRECTORY)).stdout.text == "[]\n"


# The kernel's key store belongs to the uid, not to a run: a key added to the user keyring (for a root
# server, root's own) outlives the run that added it, and any later run of the uid could read it.
LEAVE_A_KEY_THEN_LOOK = """
    import ctypes, errno, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ADD_KEY, REQUEST_KEY, KEYCTL = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[os.uname().machine]
    outcomes = []
    for call in (
        lambda: libc.syscall(REQUEST_KEY, b"user", b"python-runner-cross-run", None, 0),
        lambda: libc.syscall(ADD_KEY, b"user", b"python-runner-cross-run", b"left", 4, -4),  # the user keyring
        lambda: libc.syscall(KEYCTL, 0, -4, 0),  # KEYCTL_GET_KEYRING_ID of the user keyring
    ):
        outcomes.append(errno.errorcode.get(ctypes.get_errno(), "?") if call() < 0 else "allowed")
    print(*outcomes)
"""


async def test_a_run_can_neither_leave_nor_find_a_key_in_the_kernel_s_keyrings(server_pool: Pool) -> None:
    for _ in range(2):
        assert (await run(server_pool, LEAVE_A_KEY_THEN_LOOK)).stdout.text == "EPERM EPERM EPERM\n"


# Plants 2,100 nested directories in every directory beside its own, by descriptor (past PATH_MAX).
PLANT_DEEP_IN_SIBLINGS = """
    import os
    planted = 0
    for name in os.listdir(".."):
        path = os.path.join("..", name)
        if os.path.realpath(path) == os.getcwd() or not os.path.isdir(path):
            continue
        fd = os.open(path, os.O_RDONLY)
        for _ in range(2_100):
            os.mkdir("d", dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(fd)
        planted += 1
    print(planted)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["posix-spawn", "fork-server"])
async def test_a_tree_too_deep_for_a_path_planted_where_later_runs_wait_does_not_fail_them(
    config: Config, no_leaks: None, mode: str
) -> None:
    # Emptied by path, it failed the next two runs ('File name too long'), each after about 8 s.
    async with Pool.open(in_mode(config, mode, pool_size=3), reap_strays=True) as pool:
        planted = await run(pool, PLANT_DEEP_IN_SIBLINGS)
        assert int(planted.stdout.text) >= 1
        for _ in range(4):
            assert (await run(pool, LIST_OWN_DIRECTORY)).stdout.text == "[]\n"
