"""One MCP session with the official Python client through a container, or through any command that serves
this server on stdio, checking what a run sees from inside.

    python scripts/docker_session.py --container -- docker run -i --rm ... turhal-ai/python-runner-mcp:latest

`make docker-test` runs it against the image with the hardened `docker run` line; the test suite runs it
against the same ENTRYPOINT outside Docker (tests/deploy/test_packaging.py). The session: initialize (or discover,
with --mode auto), tools/list, a tools/call of `print(sum(range(10)))`, a probe run (who it runs as, its
capabilities, mounts, network interfaces, and files it tries to create), and with --reaping a run that
leaves an orphan behind plus a later run that checks the orphan was reaped. Prints what was seen as one
JSON object on stdout; exits 1 after listing every expectation that failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from contextlib import nullcontext
from typing import Any, TextIO

from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

IMAGE_UID = 10001
# Where a run in the image must not be able to create a file: the code and venv (root-owned, read-only
# root), the root, /etc, /var/tmp, the standard library, and the user's HOME.
IMAGE_DENIED = [
    "/app/probe",
    "/app/runner/probe",
    "/app/.venv/probe",
    "/probe",
    "/etc/probe",
    "/var/tmp/probe",
    "/usr/local/lib/python3.11/probe",
    "/nonexistent/probe",
]

# What PID 1 is to a run in each mode: the container's tini, or the init of the run's own namespace.
PID1_OF = {"none": "tini", "bwrap": "bwrap", "namespaces": "zygote.py"}

PROBE = r"""
import errno, json, os, socket, sys, tempfile

def attempt(path):
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    os.write(fd, b"probe")
    os.close(fd)
    os.unlink(path)
    return "written"

status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
mounts = {}
for line in open("/proc/self/mounts"):
    device, target, fstype, options = line.split()[:4]
    mounts[target] = fstype + " " + options
try:
    pid1 = open("/proc/1/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
except OSError as exc:
    pid1 = "unreadable: " + errno.errorcode.get(exc.errno, str(exc.errno))

def server_pid():
    # A run's parent is the server, or in fork-server mode the zygote, whose parent is the server. In a
    # sandbox the parent is the sandbox's own init (PID 1 of its namespace, bwrap) or outside the run's
    # PID namespace (getppid() is 0: the zygote's namespaces): the server is not visible.
    parent = os.getppid()
    if b"zygote.py" in open("/proc/%d/cmdline" % parent, "rb").read():
        parent = int(open("/proc/%d/stat" % parent).read().rsplit(")", 1)[1].split()[1])
    return parent

def limits(pid):
    names = ("Max cpu time", "Max file size", "Max core file size", "Max processes", "Max address space")
    return [line for line in open("/proc/%s/limits" % pid).read().splitlines() if line.startswith(names)]

def reach_server(pid):
    import ctypes
    try:
        open("/proc/%d/environ" % pid, "rb").read()
        environ = "read"
    except OSError as exc:
        environ = errno.errorcode.get(exc.errno, str(exc.errno))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
        ptrace = "attached"
        libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
    else:
        ptrace = errno.errorcode.get(ctypes.get_errno(), "?")
    return {"environ": environ, "ptrace": ptrace}
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "groups": os.getgroups(),
    "cwd": os.getcwd(), "tmpdir": tempfile.gettempdir(),
    "cwd_write": attempt(os.path.join(os.getcwd(), "probe")),
    "tmp_write": attempt(os.path.join(tempfile.gettempdir(), "probe-%d" % os.getpid())),
    "denied": {path: attempt(path) for path in json.loads(sys.stdin.read())},
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "cap_eff": status["CapEff"].strip(), "cap_bnd": status["CapBnd"].strip(),
    "no_new_privs": status.get("NoNewPrivs", "?").strip(),
    "root_mount": mounts.get("/", ""), "tmp_mount": mounts.get("/tmp", ""),
    "tmp_mode": oct(os.stat("/tmp").st_mode & 0o7777),
    "pid1": pid1,
    # In a sandbox the parent is the sandbox's init or out of sight, not the server; stopping it would
    # hang this run.
    "server": reach_server(server_pid()) if os.getppid() not in (0, 1) else "not visible",
    "visible_pids": sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit()),
    "pid": os.getpid(),
    "pid1_limits_as_own": limits(1) == limits("self"),
    "pid1_limits_as_own_but_cpu": limits(1)[1:] == limits("self")[1:],
    "shm_mount": mounts.get("/dev/shm", ""),
}))
"""

# The orphan: a setsid() grandchild outlives the run (the group kill cannot reach it) and exits 0.3 s later.
ORPHAN = r"""
import os, time
r, w = os.pipe()
child = os.fork()
if child == 0:
    os.setsid()
    grandchild = os.fork()
    if grandchild == 0:
        os.close(r)
        os.close(w)
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(0.3)
        os._exit(0)
    os.write(w, str(grandchild).encode())
    os._exit(0)
os.close(w)
os.waitpid(child, 0)
print(os.read(r, 32).decode())
"""

# How long the orphan may take to end and be reaped (it sleeps 0.3 s, then exits).
ORPHAN_DEADLINE = 5.0

REAPED = r"""
import sys
pid = sys.stdin.read().strip()
try:
    state = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
print(state)
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", default="legacy", choices=["legacy", "auto"], help="client protocol mode")
    parser.add_argument(
        "--container",
        action="store_true",
        help=f"expect the image under the hardened line: uid {IMAGE_UID}, no capabilities, no_new_privs, "
        "read-only root, /tmp a 64 MiB noexec tmpfs, no network but lo, tini as PID 1, orphans reaped, "
        "and no file creatable at " + " ".join(IMAGE_DENIED),
    )
    parser.add_argument(
        "--sandbox",
        choices=["none", "bwrap", "namespaces"],
        help="runs must be in this mode: none (plain rlimits; the server is the run's parent or grandparent), "
        "bwrap or namespaces (each run alone in its namespaces, made by bubblewrap or by the zygote: PID 1 is "
        "the sandbox's init, held to the run's limits, nothing else is visible, /tmp and /dev/shm are the run's "
        "own tmpfs of --sandbox-tmp-mb MiB)",
    )
    parser.add_argument("--sandbox-tmp-mb", type=int, default=32, help="size of a sandbox's /tmp and /dev/shm")
    parser.add_argument("--uid", type=int, help="runs must have this uid and gid")
    parser.add_argument("--no-network", action="store_true", help="runs must see no interface but lo")
    parser.add_argument("--deny", action="append", default=[], metavar="PATH", help="creating PATH must fail")
    parser.add_argument("--reaping", action="store_true", help="an orphan left by a run must be reaped")
    parser.add_argument("--pid1", metavar="TEXT", help="/proc/1/cmdline must contain TEXT")
    parser.add_argument("--errlog", metavar="FILE", help="write the server's stderr to FILE")
    parser.add_argument("command", nargs="+", help="the command that serves MCP on stdio (after --)")
    args = parser.parse_args(argv)
    if args.container:
        args.uid = IMAGE_UID if args.uid is None else args.uid
        args.no_network = True
        args.deny = IMAGE_DENIED + args.deny
        args.sandbox = args.sandbox or "none"
        # In a sandbox, PID 1 is the sandbox's init and an orphan dies with its namespace: from a later
        # run (another namespace) there is nothing to see.
        args.reaping = args.sandbox == "none"
        args.pid1 = args.pid1 or PID1_OF[args.sandbox]
    return args


async def call(client: Client, code: str, stdin: str | None = None) -> dict[str, Any]:
    arguments: dict[str, Any] = {"code": code, "timeout": 20}
    if stdin is not None:
        arguments["stdin"] = stdin
    result = await client.call_tool("run_python", arguments)
    structured = result.structured_content
    if result.is_error or structured is None or structured.get("status") != "ok":
        raise AssertionError(f"run failed: {structured if structured is not None else result}")
    return structured


async def session(args: argparse.Namespace, errlog: TextIO) -> tuple[dict[str, Any], list[str]]:
    failures: list[str] = []
    seen: dict[str, Any] = {}

    def expect(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)

    command, *command_args = args.command
    params = StdioServerParameters(command=command, args=command_args, env=dict(os.environ))
    async with Client(stdio_client(params, errlog=errlog), mode=args.mode) as client:  # type: ignore[arg-type]
        seen["protocol_version"] = client.protocol_version
        seen["tools"] = [tool.name for tool in (await client.list_tools()).tools]
        expect(seen["tools"] == ["run_python", "close_session"], f"tools/list returned {seen['tools']}")
        first = await call(client, "print(sum(range(10)))")
        seen["sum"] = first["stdout"]
        expect(first["stdout"] == "45\n", f"print(sum(range(10))) printed {first['stdout']!r}")
        probe = json.loads((await call(client, PROBE, stdin=json.dumps(args.deny)))["stdout"])
        seen["probe"] = probe
        if args.reaping:
            orphan = (await call(client, ORPHAN))["stdout"].strip()
            # It exits 0.3 s after the run, later on a busy machine; then whoever reaps orphans must.
            started = time.monotonic()
            while True:
                state = (await call(client, REAPED, stdin=orphan))["stdout"].strip()
                waited = time.monotonic() - started
                if state == "gone" or waited > ORPHAN_DEADLINE:
                    break
                await asyncio.sleep(0.05)
            seen["orphan"] = {"pid": orphan, "state": state, "seconds": round(waited, 2)}
            expect(state == "gone", f"the orphan {orphan} was not reaped within {ORPHAN_DEADLINE:g} s (state {state})")

    expect(probe["tmp_write"] == "written", f"a run could not write to its temp dir: {probe['tmp_write']}")
    expect(probe["cwd_write"] == "written", f"a run could not write to its working dir: {probe['cwd_write']}")
    for path, outcome in probe["denied"].items():
        expect(outcome != "written", f"a run created {path}")
    if args.uid is not None:
        expect((probe["uid"], probe["gid"]) == (args.uid, args.uid), f"runs as {probe['uid']}:{probe['gid']}")
        expect(probe["cap_eff"] == "0000000000000000", f"effective capabilities {probe['cap_eff']}")
    if args.sandbox in ("bwrap", "namespaces"):
        # Alone in its PID namespace: its init (PID 1), itself, nothing of the server or other runs. A
        # kept namespace (the zygote's) was an earlier run's too: the run's pid comes after that one's.
        alone = {1, probe["pid"]} if args.sandbox == "namespaces" else {1, 2}
        expect(probe["pid"] in alone - {1}, f"the run is pid {probe['pid']} of its namespace")
        expect(set(probe["visible_pids"]) <= alone, f"a run sees processes {probe['visible_pids']}")
        # A kept namespace's init lives from run to run: held to the run's limits but for CPU time.
        held = probe["pid1_limits_as_own_but_cpu" if args.sandbox == "namespaces" else "pid1_limits_as_own"]
        expect(held, "the sandbox's init is not held to the run's limits")
        sandbox_tmp = {"tmpfs", "rw", f"size={args.sandbox_tmp_mb * 1024}k"}
        for name in ("tmp_mount", "shm_mount"):
            options = set(probe[name].replace(" ", ",").split(","))
            expect(
                sandbox_tmp <= options, f"{name}: not the run's own {args.sandbox_tmp_mb} MiB tmpfs: {probe[name]!r}"
            )
        expect(probe["cwd"] == "/tmp", f"a sandboxed run works in {probe['cwd']}, not in its own /tmp")
    elif args.sandbox == "none" or args.uid is not None:
        # Same uid as the server: only its non-dumpable flag keeps the run out of it.
        expect(probe["server"]["environ"] == "EACCES", f"a run read the server's environment: {probe['server']}")
        expect(probe["server"]["ptrace"] == "EPERM", f"a run could ptrace the server: {probe['server']}")
    if args.container:
        expect(probe["cap_bnd"] == "0000000000000000", f"capability bounding set {probe['cap_bnd']}")
        expect(probe["no_new_privs"] == "1", f"NoNewPrivs {probe['no_new_privs']}")
        root_options = probe["root_mount"].split(" ", 1)[-1].split(",")
        expect("ro" in root_options, f"the root is not read-only: {probe['root_mount']!r}")
        if args.sandbox == "none":
            tmp_options = set(probe["tmp_mount"].replace(" ", ",").split(","))
            wanted = {"tmpfs", "rw", "nosuid", "nodev", "noexec", "size=65536k"}
            expect(wanted <= tmp_options, f"/tmp is not a 64 MiB noexec tmpfs: {probe['tmp_mount']!r}")
            expect(probe["tmp_mode"] == "0o1777", f"/tmp has mode {probe['tmp_mode']}")
            # The engine's own /dev/shm: 64 MB with Docker and podman alike (65536k or 64000k).
            shm_options = set(probe["shm_mount"].replace(" ", ",").split(","))
            shm_size = next((int(o[5:-1]) for o in shm_options if o.startswith("size=") and o.endswith("k")), None)
            bounded = shm_size is not None and shm_size <= 65536 and {"nosuid", "nodev", "noexec"} <= shm_options
            expect(bounded, f"/dev/shm is not a bounded noexec tmpfs: {probe['shm_mount']!r}")
            expect(probe["tmpdir"].startswith("/tmp/python-runner-"), f"runs work in {probe['tmpdir']}, not in /tmp")
    if args.no_network:
        expect(probe["interfaces"] == ["lo"], f"network interfaces {probe['interfaces']}")
    if args.pid1:
        expect(args.pid1 in probe["pid1"], f"PID 1 is {probe['pid1']!r}")
    return seen, failures


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    with open(args.errlog, "w") if args.errlog else nullcontext(sys.stderr) as errlog:
        seen, failures = asyncio.run(session(args, errlog))
    sys.stdout.write(json.dumps(seen, indent=2) + "\n")
    for failure in failures:
        sys.stderr.write(f"FAILED: {failure}\n")
    if not failures:
        sys.stderr.write("session ok\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
