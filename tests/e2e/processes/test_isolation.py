"""The bubblewrap layer: what it contains that plain rlimits cannot (checked from the host)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.config.disk import open_environment
from runner.errors import Unavailable
from runner.execution.pool import Pool
from runner.outcome import NEW_SESSION, InputFile, RunRequest, Status
from runner.processes.isolation import (
    BOOTSTRAP_INSIDE,
    RUN_BYTES,
    exit_code_of_sandboxed,
    plan_isolation,
)
from tests.helpers import a_default_cache_removed_if_made, alive, in_mode, living, settled_async
from tests.helpers import run_dedented as run

pytestmark = pytest.mark.anyio


def descendants_of_this_process() -> set[int]:
    """Every process below this one: a sandbox's bwrap is our child, its namespace's processes below it
    (and an orphan of a run comes to us, the pools here being child subreapers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                parents[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def sandboxed_interpreters() -> list[int]:
    """Host pids of live run interpreters (and their forks, and a zygote's namespace init) in a PID
    namespace other than ours, below this process: sandboxes of other test runs or servers on the
    same machine look just the same."""
    ours = os.readlink("/proc/self/ns/pid")
    found = []
    for pid in sorted(descendants_of_this_process()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            namespace = os.readlink(f"/proc/{pid}/ns/pid")
        except OSError:
            continue
        run_or_init = BOOTSTRAP_INSIDE.encode() in cmdline or b"zygote.py" in cmdline
        if run_or_init and namespace != ours and b"bwrap" not in cmdline and alive(pid) and not kept_init(pid):
            found.append(pid)
    return found


def kept_init(pid: int) -> bool:
    """A namespaced zygote's process that is PID 1 of its own PID namespace: the init of a PID namespace
    kept for runs one after another (or the holder of the namespace those are made in). It outlives
    every run, by design; what a run leaves dies at the end of the run all the same."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False  # gone since it was listed
    nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
    return b"zygote.py" in cmdline and nspid[-1:] == ["1"]


@pytest.fixture
def none_of_ours_sandboxed() -> None:
    """These checks look at every sandboxed interpreter of this process: none may exist before."""
    assert sandboxed_interpreters() == [], "a sandboxed run of an earlier test is still alive"


async def test_a_daemonized_grandchild_dies_with_its_run(sandboxed: Pool, none_of_ours_sandboxed: None) -> None:
    # The daemon says it is up through a pipe: the run counts the sandbox's processes only then.
    code = """
        import os, time
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(ready_w, b"up")
                time.sleep(60)
                os._exit(0)
            os._exit(0)
        os.close(ready_w)
        assert os.read(ready_r, 2) == b"up"
        print(len([p for p in os.listdir('/proc') if p.isdigit()]))
    """
    result = await run(sandboxed, code)
    assert result.status is Status.OK
    assert int(result.stdout.text) >= 3, "the daemon was alive in the sandbox while the run was"
    # The namespace dies with its bwrap, which the pool killed before the call returned.
    assert await settled_async(sandboxed_interpreters, timeout=5) == []


async def test_kill_minus_one_reaches_only_the_sandbox(sandboxed: Pool) -> None:
    # The guard makes sure this never runs outside a PID namespace: there it would kill everything.
    code = """
        import os, signal
        if len([p for p in os.listdir('/proc') if p.isdigit()]) > 5 or os.getppid() not in (0, 1):
            raise SystemExit('not in a fresh PID namespace: refusing')
        print('the server is out of sight:', os.getppid() in (0, 1), flush=True)
        for target in (-1, 1):
            try:
                os.kill(target, signal.SIGKILL)
                print(target, 'signalled')
            except OSError as exc:
                print(target, type(exc).__name__)
        print('still here')
    """
    result = await run(sandboxed, code)
    # -1 finds no process it may signal; the namespace's init ignores a SIGKILL from inside, and a root
    # server's run, lent a uid of its own, may not even send it one. The run's parent is that init
    # (bwrap) or out of sight (the zygote, outside the namespace: getppid() is 0).
    init = "PermissionError" if os.geteuid() == 0 else "signalled"
    assert result.stdout.text == f"the server is out of sight: True\n-1 ProcessLookupError\n1 {init}\nstill here\n"
    assert result.status is Status.OK
    follow_up = await run(sandboxed, "print('the server serves on')")
    assert follow_up.stdout.text == "the server serves on\n"


async def test_the_network_is_unreachable(sandboxed: Pool) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        code = f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print("connected")
            except OSError as exc:
                print("refused:", type(exc).__name__)
        """
        result = await run(sandboxed, code)
    assert result.stdout.text.startswith("refused:")


# What the kernel counts in the run's network namespace and whether a listener is there, then some
# counting of its own (sends with no route), and a daemon (its own session) listening on an abstract unix
# socket, which lives in the network namespace. A namespace lent from run to run once carried its
# counters along (Ip OutNoRoutes 29, then 58).
LOOK_THEN_LEAVE_TRACES_IN_THE_NETWORK = """
    import hashlib, os, socket, time
    counted = "".join(open(f"/proc/net/{name}").read() for name in ("snmp", "netstat", "dev", "snmp6")
                      if os.path.exists(f"/proc/net/{name}"))
    lines = open("/proc/net/snmp").read().splitlines()
    no_routes = dict(zip(lines[0].split(), lines[1].split()))["OutNoRoutes"]
    try:
        socket.socket(socket.AF_UNIX).connect("\\0python-runner-test-left-behind")
        found = "reached"
    except OSError as exc:
        found = type(exc).__name__
    print(hashlib.sha256(counted.encode()).hexdigest()[:16], no_routes, found)
    for _ in range(3):
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.1.2.3", 9))
        except OSError:
            pass
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            listener = socket.socket(socket.AF_UNIX)
            listener.bind("\\0python-runner-test-left-behind")
            listener.listen()
            os.write(ready_w, b"up")
            time.sleep(60)
        os._exit(0)
    assert os.read(ready_r, 2) == b"up"
"""


async def test_a_run_s_network_namespace_holds_nothing_of_an_earlier_run_not_even_its_counters(
    sandboxed: Pool,
) -> None:
    seen = [(await run(sandboxed, LOOK_THEN_LEAVE_TRACES_IN_THE_NETWORK)).stdout.text.split() for _ in range(6)]
    assert {(no_routes, found) for _, no_routes, found in seen} == {("0", "ConnectionRefusedError")}, seen
    assert len({counted for counted, _, _ in seen}) == 1, f"a run found counts of an earlier one: {seen}"


async def test_a_run_of_an_isolated_network_can_make_no_internet_socket(sandboxed: Pool) -> None:
    # bubblewrap brings up a loopback in the run's network namespace: TCP worked there, and a TCP socket's
    # buffers grow by themselves (60 loopback pairs held 1.2 GiB of kernel memory under a 256 MiB limit).
    code = """
        import socket
        for family in (socket.AF_INET, socket.AF_INET6):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                try:
                    socket.socket(family, kind).close()
                    print("made")
                except OSError as exc:
                    print(type(exc).__name__)
        a, b = socket.socketpair()
        print(a.family.name)
    """
    result = await run(sandboxed, code)
    assert result.stdout.text == "PermissionError\n" * 4 + "AF_UNIX\n", result.to_text()


@pytest.fixture
def planted_secrets(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """Files of mode 600 with a marker in their names, where a user's or a host's secrets live: the
    home directory and /root always; /etc, /var/lib, /opt and /srv where this process may write (as
    root, as in CI). Removed afterwards."""
    marker = f"runner-secret-{os.getpid()}-{os.urandom(4).hex()}"
    places = dict.fromkeys([Path.home(), Path("/root"), Path("/etc"), Path("/var/lib"), Path("/opt"), Path("/srv")])
    planted: list[Path] = []
    try:
        for place in places:
            if place.is_dir() and os.access(place, os.W_OK):
                secret = place / f".{marker}" / "id_ed25519"
                secret.parent.mkdir(mode=0o700)
                secret.write_text("not for runs\n")
                secret.chmod(0o600)
                planted.append(secret)
        yield marker, planted
    finally:
        for secret in planted:
            shutil.rmtree(secret.parent, ignore_errors=True)


async def test_a_run_that_walks_the_file_system_finds_none_of_the_host_s_secrets(
    sandbox_config: Config, planted_secrets: tuple[str, list[Path]], no_leaks: None
) -> None:
    # Both views hold only what runs need (isolation.view_binds) and an /etc made for runs.
    marker, planted = planted_secrets
    assert planted, "at least the home directory takes a planted secret"
    code = f"""
        import os
        found = [p for p in {[str(path) for path in planted]!r} if os.path.lexists(p)]
        try:
            open("/etc/shadow").read()
            found.append("/etc/shadow")
        except OSError:
            pass
        for top, directories, files in os.walk("/"):
            if top in ("/proc", "/sys", "/dev"):
                directories.clear()
            found += [os.path.join(top, n) for n in directories + files if {marker!r} in n]
        print(found)
        print(sorted(os.listdir("/")))
    """
    async with Pool.open(dataclasses.replace(sandbox_config, pool_size=0)) as pool:
        result = await pool.run(RunRequest("5ec7e75a", textwrap.dedent(code), 60))
    assert result.status is Status.OK, result.to_text()
    found, top = result.stdout.text.splitlines()
    assert found == "[]", result.stdout.text
    for gone in ("home", "var", "srv", "opt", "mnt", "media"):
        assert f"'{gone}'" not in top, top


async def test_a_path_runs_may_read_is_in_their_view_read_only_and_nothing_beside_it(
    sandbox_config: Config, tmp_path: Path, no_leaks: None
) -> None:
    # Under /tmp, which each run replaces with its own: bound back, as the interpreter would be.
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "rows.csv").write_text("a,b\n1,2\n")
    (tmp_path / "beside.txt").write_text("not shared\n")
    shared = dataclasses.replace(sandbox_config, pool_size=0, sandbox_read_paths=(str(data),))
    code = f"""
        import errno, os
        print(open({str(data / "rows.csv")!r}).read().splitlines()[-1])
        print(os.path.lexists({str(tmp_path / "beside.txt")!r}))
        try:
            open({str(data / "new.txt")!r}, "w")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        print(sorted(os.listdir(".")))
    """
    async with Pool.open(shared) as pool:
        result = await pool.run(RunRequest("da7a5e75", textwrap.dedent(code), 30))
        shows = pool.run_directory_shows
    assert result.status is Status.OK, result.to_text()
    # Bound back at its own path, its top directory under /tmp shows in the run's directory (a mount
    # cannot be hidden from a listing): the tool's description names what the pool says here.
    assert shows == ((data.relative_to("/tmp").parts[0],) if data.is_relative_to("/tmp") else ())
    assert result.stdout.text == f"1,2\nFalse\nEROFS\n{sorted(shows)}\n"
    assert not (data / "new.txt").exists()


async def test_a_run_s_directory_holds_only_its_files_with_the_wheelhouse_cache_where_a_user_s_is(
    sandbox_config: Config, tmp_path: Path, no_leaks: None
) -> None:
    # RUNNER_WHEELHOUSE_CACHE unset, as `make run` leaves it: its packages, bound into the view at their
    # own path, were under the temp directory, so every run's directory (its /tmp) showed
    # python-runner-environments-UID beside the files it was given.
    house = tmp_path / "house"
    house.mkdir()
    (house / "requirements.lock").write_text("sympy==1.14.0 \\\n    --hash=sha256:00\n")
    (house / "sympy-1.14.0-py3-none-any.whl").write_bytes(b"")  # offered; nothing here imports it
    with a_default_cache_removed_if_made():
        opened = open_environment(Config.from_env({"RUNNER_WHEELHOUSE": str(house)}))
        packaged = dataclasses.replace(
            sandbox_config,
            **{name: getattr(opened, name) for name in ("wheelhouse", "wheelhouse_contents", "wheelhouse_cache")},
        )
        listing = "import os; print(sorted(os.listdir('.')))"
        given = (InputFile("data.csv", b"a,b\n1,2\n"),)
        async with Pool.open(packaged) as pool:
            assert pool.packages is not None, "the cache's packages are in the view"
            once = await pool.run(RunRequest("e3b7d1a0", listing, 30, files=given))
            first = await pool.run(RunRequest("e3b7d1a1", listing, 30, files=given, session=NEW_SESSION))
            assert first.session is not None, first.to_text()
            then = await pool.run(
                RunRequest("e3b7d1a2", listing, 30, files=(InputFile("more.txt", b"x"),), session=first.session.handle)
            )
            assert await pool.close_session(first.session.handle, None) is None
    for result in (once, first, then):
        assert result.status is Status.OK, result.to_text()
    assert [once.stdout.text, first.stdout.text, then.stdout.text] == [
        "['data.csv']\n",
        "['data.csv']\n",
        "['data.csv', 'more.txt']\n",
    ]


async def test_the_file_system_is_read_only_outside_the_private_tmpfs(sandboxed: Pool) -> None:
    # Outside /tmp and /run (which the sandbox replaces), where the host (root, here) could write, and
    # which both views hold (the namespaced one holds no /var at all).
    target = Path("/usr/local") / f"written-from-a-run-{os.getpid()}"
    code = f"""
        import errno
        try:
            open({str(target)!r}, "w").write("x")
            print("written")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        open("/tmp/fine", "w").write("private")
        print(open("/tmp/fine").read())
    """
    result = await run(sandboxed, code)
    written = target.exists()
    target.unlink(missing_ok=True)
    assert result.stdout.text == "EROFS\nprivate\n"
    assert not written


# Every entry of /proc (the run's own processes included) and /sys that some write bit or access(W_OK)
# says could be written, opened for writing (nothing is written); /dev/null, which covers what /proc
# would show of the host, aside. A root run that could open /proc/sys/kernel/core_pattern could make
# the kernel run a program of its own as root on the host at the next crash.
WRITABLE_UNDER_PROC_AND_SYS = """
    import os, stat
    found, looked = [], 0
    for top in ("/proc", "/sys"):
        directories = [top]
        while directories:
            directory = directories.pop()
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
            for entry in entries:
                looked += 1
                try:
                    info = os.lstat(entry.path)
                except OSError:
                    continue
                if stat.S_ISLNK(info.st_mode):
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if os.access(entry.path, os.W_OK):
                        found.append(entry.path + "/")
                    directories.append(entry.path)
                elif info.st_mode & 0o222 or os.access(entry.path, os.W_OK):
                    if stat.S_ISCHR(info.st_mode) and info.st_rdev == os.makedev(1, 3):
                        continue  # /dev/null
                    try:
                        os.close(os.open(entry.path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_NOFOLLOW))
                    except OSError:
                        continue
                    found.append(entry.path)
    # The host's settings first, then the run's own processes' entries.
    print(looked > 1000, len(found), sorted(found, key=lambda path: path.split("/")[2].isdigit())[:20])
"""


async def test_nothing_under_proc_or_sys_opens_for_writing(sandboxed: Pool) -> None:
    result = await run(sandboxed, WRITABLE_UNDER_PROC_AND_SYS, timeout=60)
    assert result.stdout.text == "True 0 []\n", result.to_text()


async def test_proc_shows_none_of_the_host_s_keys(sandboxed: Pool) -> None:
    # A root run read the host's keys there (descriptions, owners, permissions), keyctl refused or not.
    code = """
        for name in ("/proc/keys", "/proc/key-users"):
            print(name, repr(open(name).read()))
    """
    result = await run(sandboxed, code)
    assert result.stdout.text == "/proc/keys ''\n/proc/key-users ''\n", result.to_text()


async def test_dev_holds_only_harmless_devices(sandboxed: Pool) -> None:
    # A root run (as in CI) could read the host's disks through their device nodes. Every entry is
    # named (found by a review of the claims: only disks, /dev/mem and /dev/kmsg were looked for).
    code = """
        import os, stat
        devices = sorted(n for n in os.listdir("/dev") if not stat.S_ISLNK(os.lstat("/dev/" + n).st_mode))
        print(devices, sorted(os.listdir("/dev/pts")) if os.path.isdir("/dev/pts") else None)
        print(all(os.readlink("/dev/" + n) in ("/proc/self/fd", "/proc/self/fd/0", "/proc/self/fd/1",
              "/proc/self/fd/2", "/proc/kcore", "pts/ptmx") for n in os.listdir("/dev")
              if stat.S_ISLNK(os.lstat("/dev/" + n).st_mode)))
        with open("/dev/null", "w") as null:
            null.write("x")
        print(len(open("/dev/urandom", "rb").read(8)), os.path.exists("/proc/kcore"))
    """
    result = await run(sandboxed, code)
    devices = "['full', 'null', 'random', 'shm', 'tty', 'urandom', 'zero']"
    # bubblewrap's --dev adds a devpts of the run's own, covered by an empty directory: no ptys.
    with_pts = "['full', 'null', 'pts', 'random', 'shm', 'tty', 'urandom', 'zero'] []"
    assert result.stdout.text in (f"{devices} None\nTrue\n8 False\n", f"{with_pts}\nTrue\n8 False\n"), result.to_text()


async def test_dev_is_read_only_and_hands_out_no_ptys(sandboxed: Pool) -> None:
    # Found by a review: bubblewrap's /dev was a tmpfs of the server's uid with no size, which the run of
    # a non-root server (the same uid) filled with 720 MiB past every limit; and each pty it opened was
    # one of the host's kernel.pty.max (600 from 3 processes). /dev/shm stays the run's to write.
    code = """
        import errno, os
        print(bool(os.statvfs("/dev").f_flag & os.ST_RDONLY))
        try:
            open("/dev/held", "wb")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        try:
            os.openpty()
            print("a pty")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        open("/dev/shm/fine", "w").write("x")
        print(os.listdir("/dev/shm"))
    """
    result = await run(sandboxed, code)
    assert result.stdout.text == "True\nEROFS\nENOENT\n['fine']\n", result.to_text()


async def test_the_private_tmpfs_is_size_limited(sandbox_config: Config, no_leaks: None) -> None:
    config = dataclasses.replace(sandbox_config, sandbox_tmp_mb=2, max_file_size_mb=16)
    async with Pool.open(config) as pool:
        result = await run(pool, "open('big', 'wb').write(b'x' * (4 * 1024 * 1024))")
    assert result.status is Status.ERROR
    assert "No space left on device" in result.stderr.text


async def test_run_is_a_small_private_tmpfs(sandboxed: Pool) -> None:
    # Unbounded, it was a tmpfs of half the host's memory in the bubblewrap sandbox.
    code = """
        import os
        size = os.statvfs("/run")
        print(size.f_blocks * size.f_frsize, sorted(os.listdir("/run")) in ([], ["runner"]))
    """
    result = await run(sandboxed, code)
    assert result.stdout.text == f"{RUN_BYTES} True\n", result.to_text()


async def test_shared_memory_is_bounded_like_the_private_tmpfs(sandbox_config: Config, no_leaks: None) -> None:
    # bwrap's --dev puts /dev/shm on a tmpfs of half the host's memory, which no limit of the run counts.
    config = dataclasses.replace(sandbox_config, sandbox_tmp_mb=8, max_file_size_mb=16)
    code = """
        import os
        from multiprocessing import shared_memory
        held = []
        try:
            for n in range(6):
                with open(f"/dev/shm/block{n}", "wb") as f:
                    f.write(b"x" * (3 * 1024 * 1024))
                held.append(n)
        except OSError as exc:
            print("files", len(held), exc.errno)
        try:
            block = shared_memory.SharedMemory(create=True, size=16 * 1024 * 1024)
            block.buf[:] = b"x" * block.size
            print("segment written")
        except (OSError, BufferError) as exc:
            print("segment refused")
    """
    async with Pool.open(config) as pool:
        result = await run(pool, code)
    assert result.stdout.text.splitlines()[0] == "files 2 28", result.to_text()  # ENOSPC after 6 of 8 MiB
    assert "segment written" not in result.stdout.text
    # Touching a page of the segment that the full tmpfs cannot back is a SIGBUS.
    assert result.status in (Status.OK, Status.SIGNAL), result.to_text()


async def test_the_sandboxs_init_is_held_to_the_runs_limits(sandbox_config: Config, sandboxed: Pool) -> None:
    # PID 1 of the sandbox is bwrap's reaper, of the run's uid and under no seccomp filter of ours: a run
    # that traced it could make it call anything (a user namespace, and in it a cgroup2 mount with
    # cgroup.kill over the server), so a run may not trace at all, and the reaper must not be a process
    # that no limit of the run bounds. The init of a namespaced run's kept PID namespace is not dumpable
    # either, and is held to the same limits but CPU time: it lives on from run to run, and a run cannot
    # make it spend any.
    code = """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        print("seized" if libc.ptrace(0x4206, 1, 0, 0) == 0 else "refused")  # PTRACE_SEIZE
        def limits(pid):
            lines = open(f"/proc/{pid}/limits").read().splitlines()
            names = ("Max cpu time", "Max file size", "Max core file size", "Max processes", "Max address space")
            return [line for line in lines if line.startswith(names)]
        same = limits(1) == limits("self"), limits(1)[1:] == limits("self")[1:]  # [0]: Max cpu time
        print(open("/proc/1/comm").read().strip(), *same, len(limits(1)))
    """
    result = await run(sandboxed, code)
    assert result.status is Status.OK, result.to_text()
    traced, held = result.stdout.text.splitlines()
    assert traced == "refused"
    if sandbox_config.sandbox == "bwrap":
        assert held == "bwrap True True 5"
    else:
        assert held == f"{os.path.basename(sandbox_config.python)[:15]} False True 5"


async def test_the_peak_memory_counts_what_the_run_holds_in_its_own_tmpfs(sandboxed: Pool) -> None:
    # Pages of a tmpfs are memory that no rlimit counts: before, this run's peak said about 12 MB.
    code = """
        for n in range(3):
            with open(f"/dev/shm/held-{n}", "wb") as held:
                held.write(bytes(12 << 20))
    """
    result = await run(sandboxed, code)
    assert result.status is Status.OK, result.to_text()
    assert result.peak_memory_bytes is not None
    assert result.peak_memory_bytes >= 36 << 20, result.peak_memory_bytes


async def test_deaths_by_signal_keep_their_names_through_the_sandbox(sandboxed: Pool) -> None:
    result = await run(sandboxed, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (result.status, result.signal) == (Status.SIGNAL, "SIGSEGV")
    assert exit_code_of_sandboxed(7) == 7
    assert exit_code_of_sandboxed(128 + 9) == -9


def test_auto_falls_back_to_rlimits_when_bubblewrap_cannot_work(config: Config) -> None:
    broken = dataclasses.replace(config, sandbox="auto", python="/bin/false")
    chosen = plan_isolation(broken)
    assert (chosen.mode, chosen.sandboxed, chosen.forked) == ("none", False, True)
    assert chosen.reason.startswith("RUNNER_SANDBOX=auto fell back to rlimits only:")
    with pytest.raises(Unavailable):
        plan_isolation(dataclasses.replace(broken, sandbox="bwrap"))
    assert plan_isolation(dataclasses.replace(config, sandbox="none")).reason == "RUNNER_SANDBOX=none"


def test_auto_picks_the_zygote_s_namespaces_where_it_can_make_them(config: Config) -> None:
    in_mode(config, "namespaces")  # skipped (failed in CI) where the zygote cannot make namespaces
    plan = plan_isolation(dataclasses.replace(config, sandbox="auto"))
    assert (plan.mode, plan.forked, plan.sandboxed) == ("namespaces", True, True)
    assert plan.zygote_args[0] == "namespaces"


def test_auto_picks_the_zygote_s_namespaces_with_a_python_that_is_a_wrapper_too(config: Config, tmp_path: Path) -> None:
    # Found by a review: the probe, told the server's pid, took a parent other than the server for the
    # server's death, so under a wrapper that starts python as its child (not exec) it exited at once,
    # unsaid, and auto fell back to rlimits only.
    in_mode(config, "namespaces")
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\n"{config.python}" "$@"\n')
    wrapper.chmod(0o755)
    plan = plan_isolation(dataclasses.replace(config, sandbox="auto", python=str(wrapper)))
    assert (plan.mode, plan.reason) == ("namespaces", "the zygote can give each run its own namespaces")


def test_auto_says_why_it_fell_back_for_each_kind_of_sandbox(config: Config) -> None:
    broken = dataclasses.replace(config, sandbox="auto", python="/bin/false")
    reason = plan_isolation(broken).reason
    assert reason.startswith("RUNNER_SANDBOX=auto fell back to rlimits only: namespaces: probe exited with status 1")
    assert "; bubblewrap: " in reason


async def test_killing_a_sandbox_logs_no_process_left_behind(
    sandbox_config: Config, no_leaks: None, caplog: pytest.LogCaptureFixture
) -> None:
    # A killed bwrap's namespace init (and interpreter) can reach the server as orphans for a
    # moment: they are the run's own, not something it left behind, and not reported as such.
    async with Pool.open(dataclasses.replace(sandbox_config, pool_size=2), reap_strays=True) as pool:
        result = await pool.run(RunRequest("5a4db0c5", "import time; time.sleep(30)", 0.3))
        assert result.status == Status.TIMEOUT
    # Closing the pool killed its pooled (or still starting) sandboxes; the last sweep has run.
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and "left behind" in r.getMessage()]
    assert [(r.getMessage(), getattr(r, "fields", None)) for r in warnings] == []


async def test_an_orphan_from_another_pid_namespace_is_still_killed(sandboxed: Pool) -> None:
    # Such an orphan is taken for the sandbox's own (no warning), and killed all the same.
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1)")
    quiet = subprocess.DEVNULL
    command = ["unshare", "--pid", "--fork", "sleep", "60"]
    async with await anyio.open_process(command, stdin=quiet, stdout=quiet, stderr=quiet) as outer:
        children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children")
        with anyio.fail_after(10):
            while not children.read_text().split() and outer.returncode is None:
                await anyio.sleep(0.01)
        if outer.returncode is not None:
            pytest.skip("unshare --pid is not allowed here")
        orphan = int(children.read_text().split()[0])
        outer.kill()
        await outer.wait()  # the orphan is now a child of this process, the pool's subreaper
    try:
        await run(sandboxed, "print(1)")  # a sweep follows every run
        assert await settled_async(lambda: living([orphan]), timeout=5) == []
    finally:
        if alive(orphan):
            os.kill(orphan, signal.SIGKILL)


def test_a_path_the_view_cannot_hold_stops_a_server_that_asked_for_its_sandbox_naming_the_path(
    sandbox_config: Config,
) -> None:
    # Gone between the environment's check and the plan (the check refuses a missing one at start).
    gone = f"/var/tmp/python-runner-test-gone-{os.getpid()}"
    config = dataclasses.replace(sandbox_config, sandbox_read_paths=(gone,))
    with pytest.raises(
        Unavailable, match=f"{sandbox_config.sandbox} (was|were) asked for but cannot be used: .*{gone}"
    ):
        plan_isolation(config)
