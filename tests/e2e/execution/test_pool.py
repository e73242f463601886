"""The pool with real interpreters: every limit, isolation, concurrency, cancellation, clean-up."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import signal
import textwrap
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.errors import SpawnError
from runner.execution.pool import Pool
from runner.inrun.bootstrap import OPEN_FILES
from runner.outcome import RunRequest, RunResult, Status
from tests.helpers import (
    MODES,
    alive,
    checked,
    children_of,
    in_mode,
    living,
    max_overlap,
    pids_in,
    recording_logger,
    settled_async,
)

pytestmark = pytest.mark.anyio

HOST_VIEW = "watches the run's pids or files from the host; inside a sandbox those are the namespace's own"


@pytest.fixture(params=MODES)
def config(config: Config, request: pytest.FixtureRequest) -> Config:
    """Every pool test runs in each spawn mode with plain rlimits, inside a bubblewrap sandbox, and
    forked into namespaces of its own."""
    return in_mode(config, str(request.param))


def fork_server_only(config: Config) -> None:
    if config.sandbox not in ("none", "namespaces"):
        pytest.skip("only a fork server has a zygote")


def zygotes() -> list[int]:
    """This process's children whose command line is zygote.py."""
    return [pid for pid in children_of(os.getpid()) if b"zygote.py" in cmdline(pid)]


def the_zygote() -> int:
    """The pool's zygote: its only child whose command line is zygote.py."""
    [zygote] = zygotes()
    return zygote


async def the_zygote_once_ready(pool: Pool, interpreters: int) -> int:
    """The zygote, once the pool holds `interpreters` ready ones it forked."""
    assert await settled_async(lambda: pool.state().ready < interpreters, timeout=20) is False
    return the_zygote()


def plain_only(config: Config) -> None:
    if config.sandbox not in ("none", "none-posix-spawn"):
        pytest.skip(HOST_VIEW)


def request(code: str, timeout: float = 10.0, stdin: str = "", request_id: str = "0badc0de") -> RunRequest:
    return RunRequest(request_id=request_id, code=textwrap.dedent(code), timeout=timeout, stdin=stdin)


async def run(pool: Pool, code: str, timeout: float = 10.0, stdin: str = "") -> RunResult:
    return checked(await pool.run(request(code, timeout, stdin)))


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def tuned(config: Config, **changes: object) -> Config:
    return dataclasses.replace(config, **changes)


async def test_a_trivial_run_prints_and_exits_zero(pool: Pool) -> None:
    result = await run(pool, "print(sum(range(10)))")
    assert (result.status, result.exit_code, result.stdout.text, result.stderr.text) == (Status.OK, 0, "45\n", "")
    assert result.cpu_seconds is not None
    assert result.cpu_seconds > 0
    assert result.peak_memory_bytes is not None
    assert 1_000_000 < result.peak_memory_bytes < 256 * 2**20


async def test_an_exception_is_an_error_with_a_traceback_of_the_users_code_only(pool: Pool) -> None:
    result = await run(pool, "x = 1\nprint('before')\n1/0\n")
    assert (result.status, result.exit_code, result.stdout.text) == (Status.ERROR, 1, "before\n")
    assert result.stderr.text == (
        'Traceback (most recent call last):\n  File "<run_python>", line 3, in <module>\n'
        "    1/0\n    ~^~\nZeroDivisionError: division by zero\n"
    )


async def test_a_syntax_error_is_reported_without_runner_frames(pool: Pool) -> None:
    result = await run(pool, "def f(:\n    pass\n")
    assert result.status is Status.ERROR
    assert "SyntaxError" in result.stderr.text
    assert "bootstrap" not in result.stderr.text


@pytest.mark.parametrize(
    ("code", "exit_code", "stderr"),
    [
        ("import sys; sys.exit(7)", 7, ""),
        ("import sys; sys.exit('bye')", 1, "bye\n"),
        ("import os; os._exit(3)", 3, ""),
        ("raise SystemExit(0)", 0, ""),
    ],
)
async def test_exit_codes_are_reported_as_the_program_set_them(
    pool: Pool, code: str, exit_code: int, stderr: str
) -> None:
    result = await run(pool, code)
    assert (result.exit_code, result.stderr.text) == (exit_code, stderr)
    assert result.status is (Status.OK if exit_code == 0 else Status.ERROR)


async def test_keyboard_interrupt_ends_the_run_by_sigint(pool: Pool) -> None:
    result = await run(pool, "raise KeyboardInterrupt")
    assert (result.status, result.exit_code, result.signal) == (Status.SIGNAL, -signal.SIGINT, "SIGINT")


async def test_a_run_sees_name_main_and_atexit_handlers_run(pool: Pool) -> None:
    result = await run(pool, "import atexit\natexit.register(print, 'bye')\nprint(__name__)\n")
    assert result.stdout.text == "__main__\nbye\n"


async def test_every_limit_is_applied_inside_the_run(config: Config, no_leaks: None) -> None:
    with recording_logger("tests.limits") as (logger, started):
        async with Pool.open(config, logger) as pool:
            result = await run(
                pool,
                """
                import json, resource
                names = ["RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NOFILE"]
                print(json.dumps({n: resource.getrlimit(getattr(resource, n)) for n in names}))
                """,
            )
    [nproc] = [r.fields["rlimit_nproc"] for r in started if r.getMessage() == "pool starting"]
    limits = json.loads(result.stdout.text)
    assert limits["RLIMIT_CPU"] == [config.max_cpu_seconds, config.max_cpu_seconds + 1]
    assert limits["RLIMIT_AS"] == [config.memory_bytes] * 2
    assert limits["RLIMIT_NPROC"] == [nproc] * 2, "what the pool said at start it gives every run"
    assert limits["RLIMIT_FSIZE"] == [config.file_size_bytes] * 2
    assert limits["RLIMIT_CORE"] == [0, 0]
    assert limits["RLIMIT_NOFILE"] == [OPEN_FILES, OPEN_FILES]


async def test_a_run_is_not_dumpable_so_other_processes_of_the_uid_cannot_open_its_proc_entries(
    pool: Pool,
) -> None:
    result = await run(pool, "import ctypes\nprint(ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))")  # PR_GET_DUMPABLE
    assert result.stdout.text == "0\n"


# Opens, for 3 s, every entry of /proc of the processes its parent also started (the server's or the
# zygote's other runs, pooled interpreters as they start included) that would reach another run's output
# or memory; counts the processes it reached.
SIBLINGS_ENTRIES = """
    import os, time
    reached, end = set(), time.monotonic() + 3
    while time.monotonic() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                if f"PPid:\\t{os.getppid()}\\n" not in open(f"/proc/{pid}/status").read():
                    continue
                for entry, flags in (("fd/1", os.O_RDONLY | os.O_NONBLOCK), ("mem", os.O_RDONLY)):
                    os.close(os.open(f"/proc/{pid}/{entry}", flags))
                    reached.add(pid)
            except OSError:
                continue
    print(len(reached))
"""


async def test_no_run_reaches_the_output_or_memory_of_runs_started_beside_it(config: Config, no_leaks: None) -> None:
    # Found by a review of the claims: a spawned interpreter of a non-root server (none-posix-spawn) is
    # dumpable from its exec until its bootstrap runs, and a run of the same uid kept its stdout and memory
    # open from then on (docs/security.md). A root server's are not reachable (they hold capabilities
    # then), and a forked run is born non-dumpable: this is what holds here.
    plain_only(config)
    async with Pool.open(dataclasses.replace(config, max_concurrent=4)) as pool:
        seen: list[RunResult] = []

        async def hostile() -> None:
            seen.append(await run(pool, SIBLINGS_ENTRIES, timeout=20))

        async with anyio.create_task_group() as group:
            group.start_soon(hostile)
            while not seen:
                assert (await run(pool, "print('beside it')")).stdout.text == "beside it\n"
    assert seen[0].stdout.text == "0\n", seen[0].to_text()


async def test_a_run_holds_no_capability_and_cannot_gain_one(pool: Pool) -> None:
    wanted = "('CapEff', 'CapBnd', 'NoNewPrivs')"
    code = f"print(*[line.split()[1] for line in open('/proc/self/status') if line.startswith({wanted})])"
    result = await run(pool, code)
    assert result.stdout.text == "0000000000000000 0000000000000000 1\n"


async def test_a_cpu_loop_is_stopped_by_the_cpu_limit(config: Config, no_leaks: None) -> None:
    async with Pool.open(tuned(config, max_cpu_seconds=1)) as pool:
        result = await run(pool, "while True: pass", timeout=30)
    assert (result.status, result.signal) == (Status.CPU_LIMIT, "SIGXCPU")
    assert "CPU time limit of 1s exceeded" in result.message


async def test_a_cpu_loop_that_catches_sigxcpu_is_killed_at_the_hard_limit(config: Config, no_leaks: None) -> None:
    code = "import signal\nsignal.signal(signal.SIGXCPU, lambda *a: None)\nwhile True: pass\n"
    async with Pool.open(tuned(config, max_cpu_seconds=1)) as pool:
        result = await run(pool, code, timeout=30)
    assert (result.status, result.signal) == (Status.CPU_LIMIT, "SIGKILL")
    assert result.cpu_seconds is not None
    assert result.cpu_seconds >= 1


async def test_sleeping_past_the_timeout_kills_the_run(pool: Pool) -> None:
    result = await run(pool, "import time\nprint('start', flush=True)\ntime.sleep(60)", timeout=0.5)
    assert (result.status, result.signal, result.stdout.text) == (Status.TIMEOUT, "SIGKILL", "start\n")
    assert 0.5 <= result.duration < 60
    assert "wall-clock limit of 0.5s reached" in result.message


async def test_a_huge_allocation_hits_the_memory_limit(config: Config, no_leaks: None) -> None:
    async with Pool.open(tuned(config, max_memory_mb=64)) as pool:
        result = await run(pool, "x = bytearray(512 * 1024 * 1024)")
        listed = await run(pool, "x = [0] * (10 ** 9)")
    for each in (result, listed):
        assert each.status is Status.MEMORY_LIMIT
        assert each.stderr.text.rstrip().endswith("MemoryError")
        assert "memory limit of 64 MiB exceeded" in each.message


async def test_an_oversized_file_hits_the_file_size_limit(config: Config, no_leaks: None) -> None:
    async with Pool.open(tuned(config, max_file_size_mb=1)) as pool:
        result = await run(pool, "open('big', 'wb').write(b'x' * (2 * 1024 * 1024))")
    assert result.status is Status.FILE_SIZE_LIMIT
    assert "File too large" in result.stderr.text


async def test_a_fork_loop_is_contained_and_nothing_of_it_survives(pool: Pool, config: Config) -> None:
    plain_only(config)
    # Each child reports its pid and sleeps; the parent forks until the limit or the timeout stops it.
    code = """
        import os, sys, time
        for _ in range(200):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            print(f"pid={pid}", flush=True)
        time.sleep(60)
    """
    result = await run(pool, code, timeout=2)
    assert result.status is Status.TIMEOUT
    children = pids_in(result.stdout.text)
    assert len(children) > 0
    # SIGKILL went to the whole group before the call returned; dying takes the kernel a moment
    # (up to 200 processes here, on a machine that may be busy).
    assert await settled_async(lambda: living(children), timeout=5) == []


async def test_a_child_left_in_the_group_is_killed_when_the_main_process_exits(pool: Pool, config: Config) -> None:
    plain_only(config)
    code = """
        import os, time
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        print(f"pid={pid}")
    """
    result = await run(pool, code)
    assert result.status is Status.OK
    [child] = pids_in(result.stdout.text)
    # The group is SIGKILLed before the call returns; the child dies a moment later.
    assert await settled_async(lambda: living([child])) == []


async def test_a_descendant_outside_the_group_holding_stdout_cannot_hold_the_call(pool: Pool, config: Config) -> None:
    plain_only(config)
    # setsid puts the grandchild beyond the group kill (containing it is a later hardening step);
    # what must hold here is that the call still returns promptly with what was written.
    code = """
        import os, time
        pid = os.fork()
        if pid == 0:
            os.setsid()
            time.sleep(30)
            os._exit(0)
        print(f"pid={pid}", flush=True)
    """
    with anyio.fail_after(10):
        result = await run(pool, code)
    [escaped] = pids_in(result.stdout.text)
    os.kill(escaped, signal.SIGKILL)
    assert result.status is Status.OK


async def test_stdin_is_fed_to_the_program(pool: Pool) -> None:
    result = await run(pool, "import sys\nprint(sys.stdin.read().upper(), end='')", stdin="héllo\nworld\n")
    assert result.stdout.text == "HÉLLO\nWORLD\n"


async def test_without_stdin_a_read_gets_eof_at_once(pool: Pool) -> None:
    result = await run(pool, "import sys\nprint(repr(sys.stdin.read()))\nprint(repr(input.__name__))")
    assert result.stdout.text == "''\n'input'\n"


async def test_a_program_that_ignores_a_large_stdin_still_finishes(pool: Pool) -> None:
    result = await run(pool, "print('done')", stdin="z" * 1_000_000)
    assert (result.status, result.stdout.text) == (Status.OK, "done\n")


async def test_the_run_sees_only_a_minimal_environment(monkeypatch: pytest.MonkeyPatch, config: Config) -> None:
    monkeypatch.setenv("SERVER_SECRET", "hunter2")
    async with Pool.open(config) as pool:
        result = await run(pool, "import os, json\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(result.stdout.text)
    # bubblewrap's --chdir adds PWD, the sandbox's own working directory.
    sandbox_extra = {"PWD"} if config.sandbox == "bwrap" else set()
    minimal = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONUNBUFFERED", "MALLOC_ARENA_MAX"}
    # Numeric libraries get one thread, pyarrow malloc's memory and two I/O threads, and matplotlib no
    # display, with or without RUNNER_PACKAGES.
    numeric = {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "MPLBACKEND"}
    numeric |= {"ARROW_DEFAULT_MEMORY_POOL", "ARROW_IO_THREADS"}
    assert set(env) == minimal | numeric | sandbox_extra
    assert "hunter2" not in result.stdout.text
    assert env["HOME"] == env["TMPDIR"] == env.get("PWD", env["HOME"])


async def test_an_ordinary_thread_pool_runs_under_the_default_memory_limit(pool: Pool) -> None:
    # Eight threads each get a malloc arena; glibc reserves 64 MiB of address space for each, which
    # RLIMIT_AS counts, so without a cap on arenas this fails with "can't start new thread".
    code = """
        import concurrent.futures, os, zlib
        data = [os.urandom(1 << 20) for _ in range(8)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as workers:
            sizes = list(workers.map(lambda chunk: len(zlib.compress(chunk * 4, 9)), data))
        print(len(sizes))
    """
    result = await run(pool, code, timeout=30)
    assert (result.status, result.stdout.text) == (Status.OK, "8\n"), result.stderr.text


async def test_the_run_inherits_no_file_descriptor_beyond_its_three_streams_and_job_socket(
    config: Config, no_leaks: None
) -> None:
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    os.set_inheritable(write_end, True)
    try:
        async with Pool.open(config) as pool:
            result = await run(pool, "import os\nprint(sorted(int(fd) for fd in os.listdir('/dev/fd')))")
    finally:
        os.close(read_end)
        os.close(write_end)
    # fd 3 is the job socket (the code came on it, the report goes back on it); the listing itself
    # holds one fd open while it reads the directory.
    assert json.loads(result.stdout.text) in ([0, 1, 2, 3], [0, 1, 2, 3, 4])


async def test_each_run_gets_a_fresh_directory_that_is_deleted_afterwards(pool: Pool, config: Config) -> None:
    code = (
        "import os\nprint(os.getcwd(), os.listdir('.'), os.listdir(os.environ['TMPDIR']))\nopen('note', 'w').write('x')"
    )
    first = await run(pool, code)
    second = await run(pool, code)
    await pool.quiesced()  # the directory holds a file: the teardown after the answer deletes it
    first_dir, first_listing, first_tmp = first.stdout.text.split()
    second_dir, second_listing, second_tmp = second.stdout.text.split()
    assert first_listing == second_listing == first_tmp == second_tmp == "[]", "nothing of an earlier run is seen"
    if config.sandbox in ("none", "none-posix-spawn"):
        assert first_dir != second_dir
        assert not Path(first_dir).exists()
        assert not Path(second_dir).exists()
    else:
        assert first_dir == second_dir == "/tmp", "each sandbox has its own tmpfs at /tmp"


async def test_a_run_that_locks_its_own_directory_is_still_cleaned_up(pool: Pool) -> None:
    code = "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\nos.chmod('a', 0)"
    result = await run(pool, code)
    assert result.status is Status.OK


async def test_a_print_flood_is_truncated_keeping_the_final_traceback(config: Config, no_leaks: None) -> None:
    async with Pool.open(tuned(config, max_output_chars=1000)) as pool:
        result = await run(pool, "for i in range(200000):\n    print('line', i)\nraise ValueError('the end')")
    assert result.status is Status.ERROR
    assert result.stdout.truncated
    assert result.stdout.text.startswith("line 0\nline 1\n")
    assert result.stdout.text.endswith("line 199999\n")
    assert result.stdout.dropped_bytes > 2_000_000
    assert result.stderr.text.endswith("ValueError: the end\n")


async def test_a_last_write_past_the_byte_budget_as_the_streams_close_is_an_output_limit(
    config: Config, no_leaks: None
) -> None:
    # The write that blows the budget and the end of both streams reach the server together: the
    # one task reading them once failed the call with an internal error here, most times.
    async with Pool.open(tuned(config, max_output_bytes=4096)) as pool:
        for _ in range(5):
            result = await run(pool, "import sys\nsys.stdout.write('x' * 5000)")
            assert result.status is Status.OUTPUT_LIMIT, result


async def test_output_past_the_byte_budget_kills_the_run_with_bounded_server_memory(
    config: Config, no_leaks: None
) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with Pool.open(tuned(config, max_output_bytes=8 * 2**20)) as pool:
        result = await run(pool, "import sys\nb = b'x' * 2**20\nwhile True:\n    sys.stdout.buffer.write(b)")
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert result.status is Status.OUTPUT_LIMIT
    assert result.stdout.truncated
    assert 8 * 2**20 < result.stdout.total_bytes < 64 * 2**20
    assert grown_kib < 16 * 1024, "the server keeps only a bounded head and tail of a flood"


async def test_invalid_utf8_and_nul_bytes_are_shown_safely(pool: Pool) -> None:
    result = await run(pool, "import sys\nsys.stdout.buffer.write(b'ok\\xff\\x00end\\n')\nprint('\\udcff')")
    # The lone surrogate is written by the utf-8 mode's surrogateescape as the raw byte 0xff.
    assert result.stdout.text == "ok\\xff\\x00end\n\\xff\n"


async def test_a_segfault_is_reported_by_signal_name(pool: Pool) -> None:
    result = await run(pool, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (result.status, result.exit_code, result.signal) == (Status.SIGNAL, -11, "SIGSEGV")
    assert result.message == "killed by SIGSEGV"


async def test_runs_beyond_the_concurrency_bound_wait_in_fifo_order(config: Config, no_leaks: None) -> None:
    # Each run a little longer than the one before, so that no two slots come free at the same moment:
    # the order in which queued runs get theirs is then 50 ms apart or more, far beyond what a busy
    # machine's scheduling adds to the timestamps.
    code = "import time\nstart = time.time()\ntime.sleep(0.3 + 0.05 * {index})\nprint(start, time.time())"
    results: dict[int, RunResult] = {}
    submitted: dict[int, float] = {}

    async def one(index: int) -> None:
        submitted[index] = anyio.current_time()
        results[index] = checked(await pool.run(request(code.format(index=index), request_id=f"{index:08x}")))

    async with Pool.open(tuned(config, max_concurrent=2, pool_size=2)) as pool, anyio.create_task_group() as tg:
        for index in range(6):
            tg.start_soon(one, index)
            await anyio.lowlevel.checkpoint()
    intervals = [tuple(map(float, results[i].stdout.text.split())) for i in range(6)]
    assert max_overlap(intervals) == 2
    assert all(results[i].queue_wait > 0 for i in range(2, 6))
    slot_taken = [submitted[i] + results[i].queue_wait for i in range(6)]
    assert [submitted[i] for i in range(6)] == sorted(submitted.values())
    assert slot_taken[2:] == sorted(slot_taken[2:]), "queued runs get a slot in the order they arrived"


async def test_a_full_queue_answers_busy_instead_of_waiting(config: Config, no_leaks: None) -> None:
    async with Pool.open(tuned(config, max_concurrent=1, max_queue=1)) as pool, anyio.create_task_group() as tg:
        tg.start_soon(pool.run, request("import time; time.sleep(30)"))
        tg.start_soon(pool.run, request("pass"))
        with anyio.fail_after(10):
            while pool.state().waiting < 1:
                await anyio.sleep(0.01)
        busy = checked(await pool.run(request("print('never')")))
        tg.cancel_scope.cancel()
    assert busy.status is Status.BUSY
    assert "server busy" in busy.message
    assert busy.exit_code is None


async def test_cancelling_a_run_kills_its_process_group_and_leaves_nothing(
    pool: Pool, tmp_path: Path, config: Config
) -> None:
    plain_only(config)
    marker = tmp_path / "started"
    code = f"""
        import os, time
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        with open({str(marker)!r} + '.tmp', 'w') as f:
            f.write(f"{{os.getpid()}} {{child}} {{os.getcwd()}}")
        os.rename({str(marker)!r} + '.tmp', {str(marker)!r})
        time.sleep(60)
    """
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(pool.run, request(code, timeout=60))
            with anyio.fail_after(10):
                while not marker.exists():
                    await anyio.sleep(0.01)
            scope.cancel()
    main_pid, child_pid, workdir = marker.read_text().split()
    assert not Path(workdir).exists()
    # SIGKILL is sent to the whole group before the call returns; dying takes the kernel a moment.
    assert await settled_async(lambda: living([int(main_pid), int(child_pid)]), timeout=5) == []


async def test_closing_the_pool_kills_pooled_interpreters_and_removes_every_directory(
    config: Config, work_dir: Path, no_leaks: None
) -> None:
    async with Pool.open(tuned(config, pool_size=3)) as pool:
        with anyio.fail_after(20):
            while pool.state().ready < 3:
                await anyio.sleep(0.01)
        # The pool's directory (runs' own are made in it), and its kept output's.
        assert sorted(p.name.split("-")[2] == "kept" for p in work_dir.iterdir()) == [False, True]
    assert list(work_dir.iterdir()) == []


async def test_an_interpreter_that_cannot_start_is_an_infrastructure_error(config: Config, no_leaks: None) -> None:
    from runner.errors import SpawnError, Unavailable

    broken = tuned(config, python="/bin/false", pool_size=0)
    if config.sandbox in ("bwrap", "namespaces"):
        # The sandbox probe starts the interpreter exactly as runs will: it refuses to start.
        with pytest.raises(
            Unavailable, match=f"RUNNER_SANDBOX: {config.sandbox} (was|were) asked for but cannot be used"
        ):
            async with Pool.open(broken):
                pass
        return
    async with Pool.open(broken) as pool:
        with pytest.raises(SpawnError):
            await pool.run(request("print(1)"))


async def test_a_setsid_double_fork_daemon_is_killed_soon_after_its_run(
    config: Config, no_leaks: None, tmp_path: Path
) -> None:
    plain_only(config)
    marker = tmp_path / "daemon.pid"
    code = f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.close(1)
                os.close(2)
                with open({str(marker)!r} + ".tmp", "w") as f:
                    f.write(str(os.getpid()))
                os.rename({str(marker)!r} + ".tmp", {str(marker)!r})
                time.sleep(60)
                os._exit(0)
            os._exit(0)
        while not os.path.exists({str(marker)!r}):
            time.sleep(0.01)
        print("parent done")
    """
    async with Pool.open(tuned(config, pool_size=0), reap_strays=True) as pool:
        result = await run(pool, code)
        assert (result.status, result.stdout.text) == (Status.OK, "parent done\n")
        daemon = int(marker.read_text())
        # The sweep after the run (and the one every second) kills it; the kernel then ends it.
        assert await settled_async(lambda: living([daemon]), timeout=5) == []


async def test_a_chain_of_setsid_processes_that_rebuilds_itself_is_killed_whole_soon_after_its_run(
    config: Config, no_leaks: None, tmp_path: Path
) -> None:
    # Found by a review: the sweep killed one level of the chain a round (its top, the server's child),
    # and the chain's end forked a new level as fast: it outlived every sweep, the server's stop and the
    # next server's start, writing into later runs' directories.
    plain_only(config)
    pids = tmp_path / "chain.pids"
    code = f"""
        import os, time
        def alive():  # the chain's processes still there: fewer than 10, and its end makes more
            told = open({str(pids)!r}).read().split()
            return sum(os.path.exists(f"/proc/{{pid}}/stat") and open(f"/proc/{{pid}}/stat").read().split()[2] != "Z"
                       for pid in told)
        if os.fork() == 0:
            os.setsid()
            os.closerange(0, 1024)
            while True:
                with open({str(pids)!r}, "a") as told:
                    told.write(f"{{os.getpid()}}\\n")
                while alive() >= 10:
                    time.sleep(0.005)
                if os.fork() == 0:
                    os.setsid()
                    continue  # the new end of the chain
                time.sleep(60)
        while not os.path.exists({str(pids)!r}) or len(open({str(pids)!r}).read().split()) < 10:
            time.sleep(0.01)
        print("chained")
    """
    async with Pool.open(tuned(config, pool_size=0), reap_strays=True) as pool:
        result = await run(pool, code)
        assert (result.status, result.stdout.text) == (Status.OK, "chained\n"), result.to_text()

        def chain() -> list[int]:
            return living([int(pid) for pid in pids.read_text().split()])

        assert await settled_async(chain, timeout=10) == []


async def test_a_run_that_stops_the_zygote_ends_and_the_next_run_gets_a_new_one(config: Config, no_leaks: None) -> None:
    if config.sandbox not in ("none", "namespaces"):
        pytest.skip("only a forked run's parent is a zygote")
    # The guard keeps this from ever stopping anything but a zygote.
    code = """
        import os, signal
        if os.getppid() == 0:
            raise SystemExit("the parent is out of sight")
        if b"zygote.py" not in open(f"/proc/{os.getppid()}/cmdline", "rb").read():
            raise SystemExit("parent is not a zygote: refusing")
        os.kill(os.getppid(), signal.SIGSTOP)
    """
    async with Pool.open(tuned(config, pool_size=0)) as pool:
        with anyio.fail_after(20):
            await run(pool, "pass")
            zygote = the_zygote()
            stopped = await run(pool, code, timeout=1)
            after = await run(pool, "print('served by a new zygote')")
        zygotes_after = zygotes()
    assert after.stdout.text == "served by a new zygote\n"
    if config.sandbox == "namespaces":
        # Its parent, the zygote, is outside its PID namespace: getppid() is 0, and nothing is stopped.
        assert (stopped.stderr.text.splitlines()[-1:], zygotes_after) == (["the parent is out of sight"], [zygote])
    else:
        assert stopped.status in (Status.OK, Status.TIMEOUT, Status.SIGNAL)


async def test_when_the_zygote_dies_its_waiting_interpreters_are_reaped_without_a_run(
    config: Config, no_leaks: None
) -> None:
    # They are orphaned to the server (a child subreaper): strays, which the sweep must reap even if no
    # run ever comes to take them out of the pool.
    fork_server_only(config)
    async with Pool.open(tuned(config, pool_size=3), reap_strays=True) as pool:
        zygote = await the_zygote_once_ready(pool, 3)
        os.kill(zygote, signal.SIGKILL)
        # Within a few of the sweeps that run every second, nothing is left but the new zygote, if any.
        leftover = await settled_async(
            lambda: [pid for pid in children_of(os.getpid()) if b"zygote.py" not in cmdline(pid)], timeout=5
        )
        assert leftover == []


async def test_a_zygote_stopped_from_outside_is_replaced_and_the_next_run_is_served(
    config: Config, no_leaks: None
) -> None:
    # In a namespaced run the zygote is out of the run's sight, so this test stops it itself: the run
    # that was waiting in the pool ends unreported, and the zygote goes.
    fork_server_only(config)
    async with Pool.open(tuned(config, pool_size=1), reap_strays=True) as pool:
        zygote = await the_zygote_once_ready(pool, 1)
        os.kill(zygote, signal.SIGSTOP)
        try:
            with anyio.fail_after(30):
                unreported = await run(pool, "print('ended, but nobody says so')", timeout=1)
                after = await run(pool, "print('served by a new zygote')")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(zygote, signal.SIGCONT)
    # The run told its own end, so it is answered; the zygote never reports reaping it, so the
    # teardown after the answer gives up on the zygote, and the next run gets a new one.
    assert (unreported.status, unreported.stdout.text) == (Status.OK, "ended, but nobody says so\n")
    assert after.stdout.text == "served by a new zygote\n"
    assert not alive(zygote)


def below_free(pid: int, free: int) -> int:
    """The lowest RLIMIT_NOFILE under which `pid` can open no more than `free` new fds: a new fd takes the
    lowest free number, and the limit bounds numbers, not how many are open (closed fds leave holes)."""
    taken = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    number = 0
    while free > 0 or number in taken:
        free -= number not in taken
        number += 1
    return number


async def test_a_zygote_out_of_file_descriptors_fails_that_run_only_and_serves_again(
    config: Config, no_leaks: None
) -> None:
    fork_server_only(config)
    async with Pool.open(tuned(config, pool_size=0), reap_strays=True) as pool:
        assert (await run(pool, "print(1)")).stdout.text == "1\n"  # the zygote is up
        zygote = the_zygote()
        was = resource.prlimit(zygote, resource.RLIMIT_NOFILE)
        resource.prlimit(zygote, resource.RLIMIT_NOFILE, (below_free(zygote, 2), was[1]))  # one pipe, not four
        with pytest.raises(SpawnError, match="could not fork"):
            await run(pool, "print('never')")
        resource.prlimit(zygote, resource.RLIMIT_NOFILE, was)
        after = await run(pool, "print('served by the same zygote')")
        assert zygotes() == [zygote]
    assert after.stdout.text == "served by the same zygote\n"


async def test_a_zygote_holding_more_than_a_thousand_fds_serves_every_run_in_flight(
    config: Config, no_leaks: None
) -> None:
    # Each kept PID namespace holds some ten fds in the zygote (its init's pipes, the namespaces, the
    # cgroup's): 150 runs at once take them past 1023, where select() raised ValueError and the zygote
    # died with every run in flight (killed by SIGKILL). The limit allows 256.
    if config.sandbox != "namespaces":
        pytest.skip("only the namespaced zygote keeps fds per run in flight")
    runs = 150
    code = "import time\ntime.sleep(1.5)\nprint('served')"
    results: list[RunResult] = []

    async def one(index: int) -> None:
        results.append(await pool.run(request(code, timeout=60, request_id=f"{index:08x}")))

    async with Pool.open(tuned(config, max_concurrent=runs, pool_size=0)) as pool:
        async with anyio.create_task_group() as tg:
            for index in range(runs):
                tg.start_soon(one, index)
        zygote = the_zygote()
        held = max(int(fd) for fd in os.listdir(f"/proc/{zygote}/fd"))
    assert [(r.status, r.stdout.text) for r in results] == [(Status.OK, "served\n")] * runs
    assert held >= 1024, f"the zygote's highest fd was {held}: the test no longer reaches select's bound"


PIDS_CGROUP = Path("/sys/fs/cgroup/pids")


def busy_removing(group: Path) -> bool:
    """Remove the cgroup; True while processes are still in it."""
    try:
        group.rmdir()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


async def test_a_zygote_starved_of_pids_fails_that_run_only_and_serves_again(
    config: Config, no_leaks: None, tmp_path: Path
) -> None:
    # The pids controller (cgroup v1) counts what the zygote may fork, root or not; RLIMIT_NPROC does
    # not hold a root zygote.
    fork_server_only(config)
    if os.geteuid() != 0 or not (PIDS_CGROUP / "cgroup.procs").exists():
        pytest.skip("needs root and the cgroup v1 pids controller")
    group = PIDS_CGROUP / f"python-runner-test-{os.getpid()}-{tmp_path.name}"
    group.mkdir()
    try:
        async with Pool.open(tuned(config, pool_size=0), reap_strays=True) as pool:
            assert (await run(pool, "print(1)")).stdout.text == "1\n"  # the zygote is up
            zygote = the_zygote()
            (group / "pids.max").write_text("1")  # the zygote itself, and nothing it could fork
            (group / "cgroup.procs").write_text(str(zygote))
            try:
                with pytest.raises(SpawnError, match="could not fork"):
                    await run(pool, "print('never')")
                (group / "pids.max").write_text("max")
                after = await run(pool, "print('served by the same zygote')")
                assert the_zygote() == zygote
            finally:
                (PIDS_CGROUP / "cgroup.procs").write_text(str(zygote))
        assert after.stdout.text == "served by the same zygote\n"
    finally:
        # Empty once the run's processes are gone (a namespaced run's init may still be ending).
        assert await settled_async(lambda: busy_removing(group), timeout=5) is False


async def test_a_forked_run_can_import_nothing_of_the_zygote_s_own(pool: Pool) -> None:
    code = """
        import sys
        try:
            import bootstrap
            print("imported", bootstrap.__file__)
        except ImportError:
            print("not importable", "bootstrap" in sys.modules)
    """
    assert (await run(pool, code)).stdout.text == "not importable False\n"


async def test_an_exit_code_beyond_a_c_long_is_255_as_for_the_interpreter(pool: Pool) -> None:
    result = await run(pool, "import sys\nsys.exit(2**70)")
    assert (result.status, result.exit_code) == (Status.ERROR, 255)


async def test_a_long_run_does_not_leave_the_pool_short(config: Config, tmp_path: Path, no_leaks: None) -> None:
    # A fork-server pool waits for a run to end before refilling (the zygote reports that run's
    # exit sooner), but only briefly: a burst during a long run still finds the pool full. The run
    # lasts until the test has seen the refill (it ran 3 s, which a refill on a busy machine could take).
    seen = tmp_path / "refilled"
    code = f"import os, time\nwhile not os.path.exists({str(seen)!r}):\n    time.sleep(0.01)"
    async with Pool.open(tuned(config, pool_size=2)) as pool:
        with anyio.fail_after(30):
            while pool.state().ready < 2:
                await anyio.sleep(0.01)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, pool, code, 45)
            with anyio.fail_after(30):
                while pool.state().running < 1 or pool.state().ready < 2:
                    await anyio.sleep(0.01)
            assert pool.state().running == 1  # refilled while the run is still going
            seen.touch()


async def test_a_pool_without_a_sandbox_warns_at_start_what_a_run_can_reach_and_how_to_get_one(
    config: Config, no_leaks: None, caplog: pytest.LogCaptureFixture
) -> None:
    async with Pool.open(config) as pool:
        sandboxed = pool.sandboxed
    warnings = [r.getMessage() for r in caplog.records if "NOT sandboxed" in r.getMessage()]
    assert sandboxed == (config.sandbox in ("bwrap", "namespaces"))
    if sandboxed:
        assert warnings == []
        return
    [warning] = warnings
    assert "a run can read and write whatever this server's user can" in warning
    assert "bubblewrap" in warning
    assert "the Docker entry of mcp-config-examples/" in warning
