"""The namespaced fork server: what the zygote builds for each run, and that it is built before the code.

The guarantees every sandboxed mode shares (kill(-1), daemons, network, read-only file system, the
private tmpfs) are tested in both sandboxed modes by e2e/processes/test_isolation.py, e2e/execution/test_pool.py,
e2e/test_cross_run.py and the adversarial suite; this file holds what is particular to the zygote's namespaces.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from runner.config import MIB, Config
from runner.execution.pool import Pool
from runner.inrun import namespaces
from runner.outcome import RunResult, Status
from runner.processes.isolation import RUN_BYTES, ZYGOTE, interpreter_argv, namespace_args
from tests.conftest import REPO
from tests.helpers import children_of, in_mode, settled_async
from tests.helpers import run_dedented as run

pytestmark = pytest.mark.anyio

NAMESPACES = ("mnt", "pid", "net", "ipc", "uts")


@pytest.fixture
def namespaced_config(config: Config) -> Config:
    return in_mode(config, "namespaces", pool_size=1, max_concurrent=2)


@pytest.fixture
async def namespaced(namespaced_config: Config, no_leaks: None) -> AsyncIterator[Pool]:
    async with Pool.open(namespaced_config, reap_strays=True) as pool:
        yield pool


def status_fields(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def the_zygote() -> int:
    [zygote] = [pid for pid in children_of(os.getpid()) if b"zygote.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return zygote


def zygote_children(depth: int, pid_inside: str | None = None) -> list[int]:
    """The zygote's children `depth` PID namespaces below it (their NSpid has 1 + depth entries) whose
    pid in the innermost one is `pid_inside` (any if None): the holder of the namespace runs' are made
    in is (1, "1"), kept namespaces' inits (2, "1"), runs (2, not "1")."""
    found = []
    for pid in children_of(the_zygote()):
        try:
            nspid = status_fields(pid)["NSpid"].split()
        except (FileNotFoundError, ProcessLookupError):
            # Reaped since it was listed (a run answered before its teardown, say); or it died while its
            # status was read, which Linux tells as ESRCH.
            continue
        if len(nspid) == 1 + depth and (pid_inside is None or nspid[-1] == pid_inside):
            found.append(pid)
    return found


def waiting_interpreter() -> int:
    """The one pooled run interpreter: the zygote's child that is not PID 1 of its PID namespace."""
    [interpreter] = [pid for pid in zygote_children(2) if status_fields(pid)["NSpid"].split()[-1] != "1"]
    return interpreter


async def test_the_namespaced_zygote_keeps_its_capabilities_but_not_its_bounding_set(namespaced: Pool) -> None:
    # Emptied once in the zygote, so each run has only its own capabilities to drop (and checks).
    assert await settled_async(lambda: namespaced.state().ready < 1, timeout=20) is False
    fields = status_fields(the_zygote())
    assert int(fields["CapEff"], 16) & (1 << 21)  # CAP_SYS_ADMIN: it still builds namespaces
    assert int(fields["CapBnd"], 16) == 0


async def test_a_pooled_run_is_in_its_own_namespaces_with_no_privilege_before_its_code_arrives(
    namespaced: Pool,
) -> None:
    assert await settled_async(lambda: namespaced.state().ready < 1, timeout=20) is False
    interpreter = waiting_interpreter()
    before = {name: os.readlink(f"/proc/{interpreter}/ns/{name}") for name in NAMESPACES}
    assert all(before[name] != os.readlink(f"/proc/self/ns/{name}") for name in NAMESPACES), before
    fields = status_fields(interpreter)
    assert (int(fields["CapEff"], 16), int(fields["CapBnd"], 16), fields["NoNewPrivs"]) == (0, 0, "1")
    mounts = Path(f"/proc/{interpreter}/mountinfo").read_text().splitlines()
    assert any(line.split()[4] == "/tmp" and " - tmpfs " in line for line in mounts)
    # The code runs in that very process, in the namespaces it had before the code came.
    result = await run(namespaced, f"import os\nfor n in {NAMESPACES!r}: print(os.readlink('/proc/self/ns/' + n))")
    assert result.stdout.text.split() == [before[name] for name in NAMESPACES]


async def test_the_run_s_private_directories_are_size_limited_tmpfs_and_the_rest_is_read_only(
    namespaced: Pool, namespaced_config: Config
) -> None:
    code = """
        import os
        tmpfs = {}
        for line in open("/proc/self/mountinfo"):
            fields = line.split()
            if fields[4] in ("/tmp", "/dev/shm", "/run"):
                size = os.statvfs(fields[4])
                tmpfs[fields[4]] = fields[fields.index("-") + 1], size.f_blocks * size.f_frsize
        print(sorted(tmpfs.items()))
        print(os.getcwd(), os.environ["HOME"], os.environ["TMPDIR"], os.uname().nodename)
        places = ("/", "/etc", "/usr", "/usr/lib", "/proc/sys/kernel", "/dev")
        print([path for path in places if not os.statvfs(path).f_flag & os.ST_RDONLY])
    """
    result = await run(namespaced, code)
    assert result.status is Status.OK, result.to_text()
    size = namespaced_config.sandbox_tmp_mb * MIB
    sizes = {"/dev/shm": size, "/run": RUN_BYTES, "/tmp": size}
    expected = [(path, ("tmpfs", sizes[path])) for path in ("/dev/shm", "/run", "/tmp") if os.path.isdir(path)]
    tmpfs, where, writable = result.stdout.text.splitlines()
    assert tmpfs == repr(expected)
    assert where == "/tmp /tmp /tmp sandbox"
    assert writable == "[]"


async def test_concurrent_runs_cannot_reach_each_other_through_any_shared_namespace(namespaced: Pool) -> None:
    # One run offers an abstract unix socket (one name space per network namespace: a network namespace
    # shared by all runs would let them meet here) and files in /tmp and /dev/shm; the other looks for
    # them the whole time it runs.
    offer = """
        import os, socket, time
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("\\0python-runner-test-rendezvous")
        listener.listen()
        open("/tmp/offered", "w").write("x")
        open("/dev/shm/offered", "w").write("x")
        listener.settimeout(3)
        try:
            listener.accept()
            print("reached")
        except TimeoutError:
            print("alone")
    """
    look = """
        import os, socket, time
        seen = set()
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                socket.socket(socket.AF_UNIX).connect("\\0python-runner-test-rendezvous")
                seen.add("socket")
            except OSError:
                pass
            seen.update(path for path in ("/tmp/offered", "/dev/shm/offered") if os.path.exists(path))
            time.sleep(0.01)
        print(sorted(seen))
    """
    results: dict[str, RunResult] = {}

    async def call(name: str, code: str) -> None:
        results[name] = await run(namespaced, code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, "offer", offer)
        tg.start_soon(call, "look", look)
    assert results["look"].stdout.text == "[]\n", results["look"].to_text()
    assert results["offer"].stdout.text == "alone\n", results["offer"].to_text()


# Says which PID namespace it is in and whether anything but its init and itself is in it, then leaves a
# daemon (its own session) behind.
LOOK_AROUND_THEN_LEAVE_A_DAEMON = """
    import os, time
    pids = sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())
    print(os.readlink("/proc/self/ns/pid"), pids == [1, os.getpid()])
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(ready_w, b"up")
            time.sleep(60)
        os._exit(0)
    assert os.read(ready_r, 2) == b"up"
"""


async def test_a_kept_pid_namespace_is_lent_again_only_once_nothing_of_the_earlier_run_is_in_it(
    namespaced: Pool,
) -> None:
    seen = []
    for _ in range(6):
        result = await run(namespaced, LOOK_AROUND_THEN_LEAVE_A_DAEMON)
        assert result.status is Status.OK, result.to_text()
        seen.append(result.stdout.text.split())
    assert [alone for _, alone in seen] == ["True"] * 6, seen
    assert len({namespace for namespace, _ in seen}) < 6, f"no PID namespace was reused: {seen}"


async def test_a_kept_namespace_s_init_killed_from_outside_takes_only_its_own_run_with_it(
    namespaced: Pool,
) -> None:
    # Nothing inside can kill an init; the host can. Every process of its namespace dies with it, here
    # the run waiting in the pool, which the next call may take before its end is known (as when a
    # pooled interpreter is killed in any mode); the zygote forgets the namespaces, and calls are served.
    assert (await run(namespaced, "pass")).status is Status.OK
    assert await settled_async(lambda: namespaced.state().ready < 1, timeout=20) is False
    inits = zygote_children(2, "1")
    assert inits, "no kept PID namespace"
    for init in inits:
        os.kill(init, signal.SIGKILL)
    first = await run(namespaced, "print('served')")
    assert (first.status, first.signal) in ((Status.OK, None), (Status.SIGNAL, "SIGKILL")), first.to_text()
    for _ in range(2):
        result = await run(namespaced, "print('served')")
        assert (result.status, result.stdout.text) == (Status.OK, "served\n"), result.to_text()
    assert not set(inits) & set(zygote_children(2, "1"))


async def test_when_the_holder_of_runs_namespaces_dies_the_zygote_goes_and_a_new_one_serves(
    namespaced: Pool,
) -> None:
    assert (await run(namespaced, "pass")).status is Status.OK
    zygote = the_zygote()
    [holder] = zygote_children(1, "1")
    os.kill(holder, signal.SIGKILL)
    # The kernel kills every process in the holder's namespace, the run waiting in the pool too, which
    # the first call may take before its end is known; the zygote ends, and a request it did not answer
    # goes to a new one.
    first = await run(namespaced, "print('served')")
    assert (first.status, first.signal) in ((Status.OK, None), (Status.SIGNAL, "SIGKILL")), first.to_text()
    results = [await run(namespaced, "print('served')") for _ in range(2)]
    assert [(r.status, r.stdout.text) for r in results] == [(Status.OK, "served\n")] * 2, results
    assert the_zygote() != zygote


async def test_a_kept_namespace_s_init_catches_no_signal_so_a_run_cannot_make_it_spend_cpu(namespaced: Pool) -> None:
    # PID 1 gets only the signals it catches; it catches none, and ignores SIGCHLD (the kernel reaps what
    # is orphaned to it). A run signalling it in a loop costs it nothing. A root server's run, lent a uid
    # of its own, may not signal it at all.
    code = """
        import os, signal
        sent = 0
        for _ in range(200):
            try:
                os.kill(1, signal.SIGCHLD)
                sent += 1
            except PermissionError:
                pass
        fields = dict(line.split(":", 1) for line in open("/proc/1/status"))
        print(sent, int(fields["SigCgt"], 16), bool(int(fields["SigIgn"], 16) >> (signal.SIGCHLD - 1) & 1))
    """
    result = await run(namespaced, code)
    sent = 0 if os.geteuid() == 0 else 200
    assert (result.status, result.stdout.text) == (Status.OK, f"{sent} 0 True\n"), result.to_text()


async def test_a_kept_namespace_s_init_holds_no_capability_but_cap_kill_where_runs_have_uids_of_their_own(
    namespaced: Pool,
) -> None:
    # Found by a review of the claims: the docs said "with no capability"; a root server's init keeps
    # CAP_KILL (its runs' processes are of other uids, and it ends them), nothing else, none to regain.
    code = """
        fields = dict(line.split(":", 1) for line in open("/proc/1/status"))
        print(*(int(fields[name], 16) for name in ("CapPrm", "CapEff", "CapInh", "CapBnd", "CapAmb")))
    """
    result = await run(namespaced, code)
    kill = 1 << 5 if os.geteuid() == 0 else 0
    assert result.stdout.text == f"{kill} {kill} 0 0 0\n", result.to_text()


def test_a_namespaced_run_refuses_to_go_on_holding_any_privilege() -> None:
    # The run checks after dropping (the dropping itself ignores what fails): here, as root, the check
    # fails; in a child that dropped everything and is under the seccomp filter, it passes.
    if os.geteuid() != 0:
        pytest.skip("needs capabilities to hold")
    with pytest.raises(OSError, match="capabilities not dropped"):
        namespaces.require_no_privileges()
    code = (
        f"import sys; sys.path.insert(0, {str(Path(ZYGOTE).parent)!r}); import libc, namespaces, seccomp; "
        "libc.privilege_dropper()(); seccomp.Filter(seccomp.WHOLE).install(); namespaces.require_no_privileges()"
    )
    done = subprocess.run(
        [*interpreter_argv(sys.executable), "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_an_interpreter_installed_under_tmp_stays_visible_read_only_in_the_run_s_own_tmp(
    config: Config, tmp_path: Path
) -> None:
    # The probe runs one namespaced run; /tmp is its own tmpfs and its working directory.
    installed = tmp_path / "python"
    (installed / "lib").mkdir(parents=True)
    probe = [*interpreter_argv(config.python), ZYGOTE, "--probe", *namespace_args(config.isolation)[1:], str(installed)]
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip("the test's directory is not under /tmp")
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False, cwd="/")
    assert done.returncode == 0, done.stderr


def test_the_namespace_cost_benchmark_runs_to_its_last_line(config: Config) -> None:
    # A script that prints numbers, not a test of them: it must keep up with the zygote's own modules.
    in_mode(config, "namespaces")  # skipped where the zygote cannot make namespaces
    script = REPO / "bench" / "namespace_costs.py"
    done = subprocess.run(
        [sys.executable, str(script), "--runs", "2"], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].lstrip().startswith("a kept PID namespace"), done.stdout


@pytest.fixture
def readable_zygote() -> Iterator[Path]:
    """The zygote and the modules beside it, in a directory any uid may read: a checkout may sit under a
    directory only root may enter (a clone under /root, or in a 0700 temporary directory)."""
    directory = Path(tempfile.mkdtemp(prefix="runner-zygote-"))
    try:
        directory.chmod(0o755)
        for module in Path(ZYGOTE).parent.glob("*.py"):
            shutil.copy(module, directory / module.name)
            (directory / module.name).chmod(0o644)
        yield directory / Path(ZYGOTE).name
    finally:
        shutil.rmtree(directory)


def test_the_zygote_makes_namespaces_as_an_unprivileged_user_through_a_user_namespace(
    config: Config, readable_zygote: Path
) -> None:
    # The container's case: no capability at all, so the zygote first enters a user namespace it owns.
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv(1) to drop to an unprivileged uid")
    if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
        pytest.skip("user namespaces are turned off on this machine")
    drop = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    probe = [
        *drop,
        *interpreter_argv(config.python),
        str(readable_zygote),
        "--probe",
        *namespace_args(config.isolation)[1:],
    ]
    done = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False, cwd="/")
    assert done.returncode == 0, done.stderr


def test_a_status_field_is_read_by_its_name_and_a_missing_one_is_what_the_caller_says() -> None:
    status = b"Name:\tpython\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2"
    assert namespaces._field(status, b"CapEff", b"1") == b"0000000000000000"
    assert namespaces._field(status, b"Seccomp", b"0") == b"2"  # the last line, no newline after it
    assert namespaces._field(status, b"CapPrm", b"1") == b"1"  # missing: held, so the check fails closed
    assert namespaces._field(status, b"Eff", b"x") == b"x"  # a name is matched whole, from a line's start
