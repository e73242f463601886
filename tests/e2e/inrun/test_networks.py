"""A kept PID namespace's network namespace (runner/inrun/networks.py, pidspaces.py), driven directly in an
interpreter of its own: lent again only while nothing of an earlier run can be found in it.

Each round forks a run into a lent namespace, as the zygote does (it enters the network namespace its
init made), has it leave a trace of one kind, or none, ends it and reads its init's answer. The traces
are left with privileges no run of the server has (a run holds no capability, and no internet socket):
what is checked is that the init finds each, whoever left it. What the pool's runs find of each other
is in tests/e2e/processes/test_isolation.py.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys

import pytest

from runner.config import Config
from runner.processes.isolation import BOOTSTRAP
from tests.helpers import in_mode

pytestmark = pytest.mark.timeout(60)

ROUNDS = """
import json, os, select, socket, subprocess, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import namespaces, pidspaces
if not namespaces.has_cap_sys_admin():
    namespaces.enter_user_namespace()
spaces = pidspaces.PidSpaces([10, 1 << 30, 64, 1 << 20], 1, network=True)
spaces.prepare()
held = []  # what outlives its run: a socket the zygote's side keeps open

def trace(kind):
    if kind == "socket held outside":  # bound in the run's namespace, kept open where no kill reaches
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("\\0python-runner-test-kept-network")
        listener.listen()
        return listener
    if kind == "netlink socket held outside":  # bound: listed in /proc/net/netlink, counted by sockstat
        held = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
        held.bind((0, 0))
        return held
    if kind == "socket closed":  # bound, then gone with its process: nothing is left
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("\\0python-runner-test-kept-network")
        listener.listen()
        listener.close()
    elif kind == "counter":  # Ip OutNoRoutes, Udp OutDatagrams: no route to anywhere
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.1.2.3", 9))
        except OSError:
            pass
    elif kind == "route":
        subprocess.run(["ip", "route", "add", "blackhole", "10.9.0.0/16"], check=True)
    elif kind == "loopback up":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    return None

def round_(kind):
    ours, theirs = socket.socketpair()
    pid, space = spaces.fork()
    if pid == 0:
        try:
            namespaces.setns(space.network, namespaces.CLONE_NEWNET)
            seen = os.readlink("/proc/self/ns/net")
            try:
                socket.socket(socket.AF_UNIX).connect("\\0python-runner-test-kept-network")
                reached = True
            except OSError:
                reached = False
            kept = trace(kind)
            said = json.dumps([seen, reached]).encode()
            # The namespace itself is held too, for the whole test: an ended namespace's inode number is
            # the kernel's to give the next one made, and one seen again must mean the same namespace.
            fds = [os.open("/proc/self/ns/net", os.O_RDONLY)] + ([] if kept is None else [kept.fileno()])
            rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
            theirs.sendmsg([said], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        finally:
            os._exit(0)
    theirs.close()
    data, fds, _, _ = socket.recv_fds(ours, 4096, 2)
    held.extend(fds)
    ours.close()
    os.waitpid(pid, 0)
    spaces.clean(space)
    select.select([space.replies], [], [], 5)
    answer = os.read(space.replies, 1)
    spaces.finished(space, answer)
    seen, reached = json.loads(data)
    return {"kind": kind, "network": seen, "reached": reached, "answer": answer.decode()}

kinds = ["none", "none", "socket closed", "none", "socket held outside", "none", "counter", "none"]
kinds += ["netlink socket held outside", "none"]
if sys.argv[2] == "ip":
    kinds += ["route", "none", "loopback up", "none"]
said = []
for kind in kinds:
    said.append(round_(kind))
    while len(spaces.by_init) > len(spaces._free):  # a retired init: reaped before the next round
        pid, _ = os.wait()
        spaces.lost(pid)
print(json.dumps(said))
"""


def test_a_network_namespace_is_lent_again_only_while_nothing_of_an_earlier_run_can_be_found_in_it(
    config: Config,
) -> None:
    in_mode(config, "namespaces")  # skipped (failed in CI) where no namespace can be made
    done = subprocess.run(
        [sys.executable, "-I", "-c", ROUNDS, BOOTSTRAP, "ip" if shutil.which("ip") else "-"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rounds = json.loads(done.stdout)
    # A run that left nothing, or only what went with its processes, gives its namespace to the next.
    for earlier, later in itertools.pairwise(rounds):
        if earlier["kind"] in ("none", "socket closed"):
            assert earlier["answer"] == "C", rounds
            assert later["network"] == earlier["network"], rounds
        else:  # a trace of the run's is in it: the namespace is ended with its init, the next run's is new
            assert earlier["answer"] == "N", rounds
            assert later["network"] not in {one["network"] for one in rounds[: rounds.index(earlier) + 1]}, rounds
    assert not any(one["reached"] for one in rounds), f"a run reached a name bound by an earlier one: {rounds}"
    assert len(rounds) >= 8


EGRESS_ROUNDS = """
import json, os, select, socket, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import namespaces, pidspaces
if not namespaces.has_cap_sys_admin():
    namespaces.enter_user_namespace()
spaces = pidspaces.PidSpaces([10, 1 << 30, 64, 1 << 20], 1, network=True, egress=3128)
spaces.prepare()

def round_(kind):
    ours, theirs = socket.socketpair()
    pid, space = spaces.fork()
    if pid == 0:
        try:
            namespaces.setns(space.network, namespaces.CLONE_NEWNET)
            if kind != "none":
                socket.create_connection(("127.0.0.1", 3128))  # queued on the namespace's listener
            theirs.send(json.dumps(os.readlink("/proc/self/ns/net")).encode())
        finally:
            os._exit(0)
    theirs.close()
    network = json.loads(ours.recv(4096))
    ours.close()
    os.waitpid(pid, 0)
    if kind == "connected, taken after":  # as the server's proxy takes it
        copy = socket.socket(fileno=os.dup(space.listener))
        copy.setblocking(False)
        copy.accept()[0].close()
        copy.close()
    spaces.clean(space)
    select.select([space.replies], [], [], 5)
    answer = os.read(space.replies, 1)
    spaces.finished(space, answer)
    return {"kind": kind, "network": network, "answer": answer.decode()}

said = []
for kind in ["none", "none", "connected, left queued", "none", "connected, taken after", "none", "none"]:
    said.append(round_(kind))
    while len(spaces.by_init) > len(spaces._free):
        pid, _ = os.wait()
        spaces.lost(pid)
print(json.dumps(said))
"""


def test_with_egress_the_proxys_listener_is_the_namespaces_and_a_connection_ends_it(config: Config) -> None:
    # The listener its init made is part of the namespace as made: a run that connected to it (whether
    # the connection waits or was taken) leaves a namespace no later run gets; one that did not leaves it
    # to the next run.
    in_mode(config, "namespaces")
    done = subprocess.run(
        [sys.executable, "-I", "-c", EGRESS_ROUNDS, BOOTSTRAP], capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stderr
    rounds = json.loads(done.stdout)
    for earlier, later in itertools.pairwise(rounds):
        if earlier["kind"] == "none":
            assert earlier["answer"] == "C", rounds
            assert later["network"] == earlier["network"], rounds
        else:
            assert earlier["answer"] == "N", rounds
            assert later["network"] not in {one["network"] for one in rounds[: rounds.index(earlier) + 1]}, rounds
