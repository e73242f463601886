"""A root server's sandboxed runs hold no host identity: each is lent a host uid of its own, seen from
the host, and RLIMIT_NPROC then bounds its whole tree (checked from the host, as root)."""

from __future__ import annotations

import dataclasses
import os
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import anyio
import pytest

from runner.config import Config
from runner.execution.pool import Pool
from runner.outcome import RunRequest, RunResult, Status
from tests.helpers import run_dedented as run
from tests.helpers import settled_async

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(os.geteuid() != 0, reason="only a root server has other uids to lend its runs"),
]


def ours() -> set[str]:
    """The pids (as /proc names them) of every live process under this test's own process: its pools'
    zygotes and runs. Another server's runs on the same host, in another block of RUNNER_SANDBOX_UIDS
    (as designed), are not ours to count (found by running the suite beside another server)."""
    parents: dict[str, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[entry] = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1]
            except (OSError, IndexError):
                continue
    mine, me = set(), str(os.getpid())
    for pid in parents:
        up, seen = pid, 0
        while up in parents and up != me and seen < 64:
            up, seen = parents[up], seen + 1
        if up == me and pid != me:
            mine.add(pid)
    return mine


def tasks_by_uid(uids: range) -> Counter[int]:
    """Every live process and thread under this test's process whose real uid is in `uids`, by uid."""
    found: Counter[int] = Counter()
    for entry in ours():
        try:
            for task in os.listdir(f"/proc/{entry}/task"):
                status = Path(f"/proc/{entry}/task/{task}/status").read_text()
                fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
                if fields["State"].split()[0] in ("Z", "X"):
                    continue
                uid = int(fields["Uid"].split()[0])
                if uid in uids:
                    found[uid] += 1
        except (OSError, KeyError, ValueError):
            continue  # ended while we looked
    return found


def host_uids_of(uids: range) -> set[tuple[str, ...]]:
    """The four uids (real, effective, saved, file system) of each live process under this test's
    process with one in `uids`."""
    seen = set()
    for entry in ours():
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        line = next((line for line in status.splitlines() if line.startswith("Uid:")), "")
        fields = tuple(line.split()[1:])
        if fields and int(fields[0]) in uids:
            seen.add(fields)
    return seen


async def test_a_root_server_s_runs_are_each_another_host_uid_named_in_their_own_passwd(
    sandbox_config: Config, sandboxed: Pool
) -> None:
    uids = sandbox_config.run_uid_range
    code = """
        import getpass, os, pwd, time
        me = pwd.getpwuid(os.getuid())
        print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), getpass.getuser(), me.pw_dir)
        time.sleep(1.5)
    """
    results: list[RunResult] = []
    seen: set[tuple[str, ...]] = set()

    async def one() -> None:
        results.append(await run(sandboxed, code))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
        # From the host, while the three runs sleep: each of their processes shows a uid of the range
        # (real, effective, saved and file system alike), none 0.
        with anyio.move_on_after(10):
            while len({fields[0] for fields in seen}) < 3:
                seen |= host_uids_of(uids)
                await anyio.sleep(0.01)
    assert all(result.status is Status.OK for result in results), [r.to_text() for r in results]
    said = [result.stdout.text.split() for result in results]
    lent = {int(words[0]) for words in said}
    assert len(lent) == 3, "no two concurrent runs share a uid"
    assert lent <= set(uids)
    assert 0 not in lent
    for words in said:
        uid = words[0]
        assert words[1:] == [uid, uid, "[]", "sandbox", "/tmp"], words
    assert {fields[0] for fields in seen} == {str(uid) for uid in lent}
    assert all(len(set(fields)) == 1 for fields in seen), seen


async def test_a_fork_flood_under_32_processes_never_has_more_than_32_live_and_a_small_call_is_answered(
    sandbox_config: Config, no_leaks: None
) -> None:
    config = dataclasses.replace(sandbox_config, max_processes=32)
    uids = config.run_uid_range
    flood = """
        import os, time
        children = 0
        for _ in range(400):
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children += 1
        print(children, flush=True)
        time.sleep(2)
    """
    most = 0
    flooded: list[RunResult] = []
    small: list[RunResult] = []

    async def flooding() -> None:
        flooded.append(await run(pool, flood, timeout=8))

    async with Pool.open(config, reap_strays=True) as pool, anyio.create_task_group() as tg:
        tg.start_soon(flooding)
        # Watched until the flood ends (within its own timeout), not for a fixed 4 s: on a busy machine
        # the flood could still be starting then.
        with anyio.fail_after(30):
            while not flooded:
                counts = tasks_by_uid(uids)
                most = max([most, *counts.values()])
                if most >= 32 and not small:
                    small.append(await run(pool, "print(6 * 7)"))
                await anyio.sleep(0.02)
    assert flooded
    assert flooded[0].status is Status.OK, flooded[0].to_text()
    # The run itself and 31 children: RLIMIT_NPROC of the run's own uid, RUNNER_MAX_PROCESSES.
    assert flooded[0].stdout.text == "31\n"
    assert most == 32, f"the host saw {most} live processes of one run's uid"
    assert small, "the flood never reached 32 processes"
    assert (small[0].status, small[0].stdout.text) == (Status.OK, "42\n")
    assert await settled_async(lambda: tasks_by_uid(uids)) == Counter()


async def test_a_path_runs_may_read_under_directories_only_root_may_enter_is_read_by_runs_of_another_uid(
    sandbox_config: Config, no_leaks: None
) -> None:
    # Out of /tmp (bound as it is) and under it (bound back into the run's own /tmp): each under a
    # directory of mode 0700, as a checkout in `mktemp -d` or an interpreter under /root would be.
    with tempfile.TemporaryDirectory(dir="/var/tmp") as outside, tempfile.TemporaryDirectory(dir="/tmp") as inside:
        paths = []
        for top in (outside, inside):
            assert os.stat(top).st_mode & 0o777 == 0o700
            data = Path(top, "data")
            data.mkdir(mode=0o755)
            (data / "rows.csv").write_text("a,b\n1,2\n")
            (data / "rows.csv").chmod(0o644)
            paths.append(str(data))
        config = dataclasses.replace(sandbox_config, sandbox_read_paths=tuple(paths))
        code = f"""
            import os
            print(os.getuid() != 0, [open(os.path.join(path, "rows.csv")).read().split()[-1] for path in {paths!r}])
        """
        async with Pool.open(config) as pool:
            result = await pool.run(RunRequest("0700da7a", textwrap.dedent(code), 30))
    assert (result.status, result.stdout.text) == (Status.OK, "True ['1,2', '1,2']\n"), result.to_text()
