"""Installing the wheelhouse's distributions, one directory each: what goes where, what is refused,
once under concurrency, and the cache's cap. Wheels made here; no process."""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
import zipfile
from pathlib import Path

import anyio
import pytest

from runner.execution.wheelhouse_cache import InstallError, Wanted, WheelhouseCache, install_wheel

pytestmark = pytest.mark.anyio


def make_wheel(directory: Path, name: str, members: dict[str, bytes], version: str = "1.0") -> Wanted:
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    return Wanted(name, version, path, frozenset({hashlib.sha256(path.read_bytes()).hexdigest()}))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_a_wheel_unpacks_as_a_target_directory_install_does(tmp_path: Path) -> None:
    wanted = make_wheel(
        tmp_path,
        "alpha",
        {
            "alpha/__init__.py": b"X = 1\n",
            "alpha-1.0.dist-info/METADATA": b"Name: alpha\n",
            "alpha-1.0.data/purelib/alpha_extra.py": b"Y = 2\n",
            "alpha-1.0.data/platlib/alpha_native/__init__.py": b"",
            "alpha-1.0.data/scripts/alpha-cli": b"#!/bin/sh\n",
            "alpha-1.0.data/headers/alpha.h": b"",
        },
    )
    written = install_wheel(wanted, tmp_path / "env", max_bytes=10_000, max_seconds=10)
    assert tree(tmp_path / "env") == {
        "alpha/__init__.py": b"X = 1\n",
        "alpha-1.0.dist-info/METADATA": b"Name: alpha\n",
        "alpha_extra.py": b"Y = 2\n",
        "alpha_native/__init__.py": b"",
    }
    assert written == len(b"X = 1\n") + len(b"Name: alpha\n") + len(b"Y = 2\n")


@pytest.mark.parametrize("member", ["../escape.py", "/etc/evil.py", "a/../../escape.py", "a\\..\\b.py"])
async def test_a_member_outside_the_directory_is_refused_and_nothing_is_left(tmp_path: Path, member: str) -> None:
    wanted = make_wheel(tmp_path, "evil", {"ok.py": b"", member: b"boom"})
    with pytest.raises(InstallError, match="outside the wheel's directory"):
        install_wheel(wanted, tmp_path / "env", max_bytes=10_000, max_seconds=10)
    assert not (tmp_path / "env").exists()
    assert not (tmp_path / "escape.py").exists()


async def test_a_link_a_wrong_hash_and_too_many_bytes_are_refused(tmp_path: Path) -> None:
    link = tmp_path / "link-1.0-py3-none-any.whl"
    with zipfile.ZipFile(link, "w") as archive:
        info = zipfile.ZipInfo("pointer")
        info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, "/etc/passwd")
    linked = Wanted("link", "1.0", link, frozenset({hashlib.sha256(link.read_bytes()).hexdigest()}))
    with pytest.raises(InstallError, match="holds a link"):
        install_wheel(linked, tmp_path / "a", max_bytes=10_000, max_seconds=10)
    big = make_wheel(tmp_path, "big", {"big.bin": bytes(20_000)})
    with pytest.raises(InstallError, match="more than 10,000 bytes"):
        install_wheel(big, tmp_path / "b", max_bytes=10_000, max_seconds=10)
    tampered = Wanted("big", "1.0", big.wheel, frozenset({"0" * 64}))
    with pytest.raises(InstallError, match="does not have any of the lock's hashes for big"):
        install_wheel(tampered, tmp_path / "c", max_bytes=100_000, max_seconds=10)
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []


async def test_two_calls_that_want_the_same_distribution_at_once_install_it_once(tmp_path: Path) -> None:
    wanted = make_wheel(tmp_path, "alpha", {"alpha/__init__.py": b"X = 1\n"})
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20)
    got: list[list[Path]] = []

    async def one() -> None:
        got.append(await cache.acquire([wanted]))

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
    assert cache.installs == 1
    assert len({tuple(paths) for paths in got}) == 1
    [path] = got[0]
    assert path.name.startswith("alpha-1.0-")
    assert (path / "alpha" / "__init__.py").read_bytes() == b"X = 1\n"
    again = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20)  # a later server finds it by its name
    assert await again.acquire([wanted]) == [path]
    assert again.installs == 0


async def test_past_the_cap_the_least_recently_used_goes_first_but_never_one_in_use(tmp_path: Path) -> None:
    a, b, c = (make_wheel(tmp_path, name, {f"{name}.py": bytes(400)}) for name in ("a", "b", "c"))
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1000)
    [path_a] = await cache.acquire([a])
    [path_b] = await cache.acquire([b])
    cache.release([path_b])
    cache.release([path_a])  # a is used more recently than b now
    held = await cache.acquire([c])  # 1,200 bytes: b, the least recently used, goes
    assert (path_a.exists(), path_b.exists()) == (True, False)
    held += await cache.acquire([a])
    [path_b] = await cache.acquire([b])  # all three held: over the cap, none may go
    assert cache.size == 1200
    cache.release([*held, path_b])
    assert await cache.acquire([]) == []  # the next call's acquire evicts
    assert cache.size <= 1000
    assert path_b.exists()  # the most recent


async def test_a_corrupted_wheel_is_an_error_naming_it_and_the_next_install_still_works(tmp_path: Path) -> None:
    good = make_wheel(tmp_path, "good", {"good.py": b""})
    bad = make_wheel(tmp_path, "bad", {"bad.py": b""})
    bad.wheel.write_bytes(bad.wheel.read_bytes()[:-10] + b"0123456789")  # the lock's hash no longer matches
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20)
    with pytest.raises(InstallError, match=r"bad-1\.0-py3-none-any\.whl does not have any of the lock's hashes"):
        await cache.acquire([good, bad])
    assert [p.name for p in (tmp_path / "cache" / "packages").iterdir() if not p.name.startswith("good")] == []
    assert list((tmp_path / "cache" / "scratch").iterdir()) == []
    [path] = await cache.acquire([good])
    assert (path / "good.py").exists()


async def test_a_cache_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InstallError, match="writable by no one else"):
        WheelhouseCache(shared, max_bytes=1 << 20)


async def test_what_is_installed_is_readable_by_all_and_writable_by_the_server_alone_whatever_its_umask(
    tmp_path: Path,
) -> None:
    wanted = make_wheel(tmp_path, "alpha", {"alpha/sub/__init__.py": b"", "alpha/data.txt": b"x"})
    old = os.umask(0o077)
    try:
        [path] = await WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20).acquire([wanted])
    finally:
        os.umask(old)
    modes = {str(p.relative_to(path)): stat.S_IMODE(p.stat().st_mode) for p in [path, *path.rglob("*")]}
    assert modes == {
        ".": 0o755,
        "alpha": 0o755,
        "alpha/sub": 0o755,
        "alpha/sub/__init__.py": 0o644,
        "alpha/data.txt": 0o644,
    }
    cache = tmp_path / "cache"
    parts = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [cache, *cache.iterdir()]}
    assert parts == {"cache": 0o755, "packages": 0o755, "locks": 0o700, "scratch": 0o700}


async def test_a_later_server_counts_what_it_finds_against_its_cap_and_evicts_the_least_recently_used(
    tmp_path: Path,
) -> None:
    a, b = (make_wheel(tmp_path, name, {f"{name}.py": bytes(400)}) for name in ("a", "b"))
    first = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20)
    [path_a] = await first.acquire([a])
    first.release([path_a])
    [path_b] = await first.acquire([b])
    first.release([path_b])
    os.utime(path_a, (1, 1))  # used long ago
    scratch = tmp_path / "cache" / "scratch"
    (scratch / "installing-left-by-a-killed-server").mkdir()
    os.utime(scratch / "installing-left-by-a-killed-server", (1, 1))
    (scratch / "installing-of-a-live-server").mkdir()  # young: its install may be under way
    later = WheelhouseCache(tmp_path / "cache", max_bytes=500)
    await later.scan()
    assert (path_a.exists(), path_b.exists()) == (False, True)
    assert later.size == 400
    assert sorted(p.name for p in (tmp_path / "cache" / "packages").iterdir()) == [path_b.name]
    assert sorted(p.name for p in scratch.iterdir()) == ["installing-of-a-live-server"]


async def test_a_directory_another_server_holds_is_never_evicted(tmp_path: Path) -> None:
    a, b = (make_wheel(tmp_path, name, {f"{name}.py": bytes(400)}) for name in ("a", "b"))
    other = WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20)
    [path_a] = await other.acquire([a])  # held by the other server's run
    this = WheelhouseCache(tmp_path / "cache", max_bytes=500)
    await this.scan()  # over the cap, but a is held
    [path_b] = await this.acquire([b])
    this.release([path_b])
    assert path_a.exists()
    other.release([path_a])
    await this.scan()
    assert this.size <= 500
    assert not path_a.exists() or not path_b.exists()


async def test_a_lock_a_run_takes_on_a_package_directory_stalls_no_install_or_eviction(tmp_path: Path) -> None:
    """Runs see `packages/` (read-only), and flock works on a read-only directory: the server's own
    locks are files in `locks/`, which no run sees."""
    a, b = (make_wheel(tmp_path, name, {f"{name}.py": bytes(400)}) for name in ("a", "b"))
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=500)
    [path_a] = await cache.acquire([a])
    cache.release([path_a])
    run_fd = os.open(path_a, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(run_fd, fcntl.LOCK_EX)  # what a hostile run could do, and keep doing
        with anyio.fail_after(5):
            assert await cache.acquire([a]) == [path_a]
            cache.release([path_a])
            [path_b] = await cache.acquire([b])  # a, least recently used, goes
        assert not path_a.exists()
        cache.release([path_b])
    finally:
        os.close(run_fd)


async def test_calls_that_evict_at_once_lose_no_hold_and_keep_the_books_straight(tmp_path: Path) -> None:
    wheels = [make_wheel(tmp_path, name, {f"{name}.py": bytes(400)}) for name in "abcdefgh"]
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1000)

    async def use(wanted: Wanted) -> None:
        paths = await cache.acquire([wanted])
        await anyio.sleep(0)
        cache.release(paths)

    for _ in range(3):
        async with anyio.create_task_group() as tg:
            for wanted in wheels:
                tg.start_soon(use, wanted)
    assert await cache.acquire([]) == []
    assert cache.size <= 1000
    assert all(i.holders == 0 and i.held is None for i in cache._installed.values())
    on_disk = {p.name for p in (tmp_path / "cache" / "packages").iterdir()}
    assert on_disk == {i.path.name for i in cache._installed.values()}


async def test_a_cache_the_server_cannot_write_is_used_as_it_is(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes a directory of any mode: tests/e2e/execution/test_provided.py mounts it read-only")
    wanted = make_wheel(tmp_path, "alpha", {"alpha.py": b""})
    missing = make_wheel(tmp_path, "beta", {"beta.py": b""})
    [path] = await WheelhouseCache(tmp_path / "cache", max_bytes=1 << 20).acquire([wanted])
    (tmp_path / "cache").chmod(0o555)
    try:
        frozen = WheelhouseCache(tmp_path / "cache", max_bytes=1)
        await frozen.scan()
        assert await frozen.acquire([wanted]) == [path]
        with pytest.raises(InstallError, match=r"beta is not installed in .*, which the server cannot write"):
            await frozen.acquire([missing])
    finally:
        (tmp_path / "cache").chmod(0o711)


async def test_a_call_cancelled_while_it_waits_to_evict_lets_go_of_what_it_holds(tmp_path: Path) -> None:
    # Found by a review: the eviction after the installs was outside the acquire's `try`, so a cancel in
    # its lock's wait (after a shielded install) left the distribution held for the server's life: never
    # evicted, its lock's fd open, the newest packages evicted instead.
    wanted = make_wheel(tmp_path, "a", {"a.py": bytes(400)})
    cache = WheelhouseCache(tmp_path / "cache", max_bytes=1000)
    async with cache._evicting:  # another call's eviction under way
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(cache.acquire, [wanted])
                with anyio.fail_after(30):
                    while not any(i.holders for i in cache._installed.values()):
                        await anyio.sleep(0.01)  # installed, held, now waiting for the lock
                scope.cancel()
    assert [i.holders for i in cache._installed.values()] == [0]
    assert all(i.held is None for i in cache._installed.values())
