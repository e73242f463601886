"""How runs are made and isolated, decided once at start into one frozen `IsolationPlan`.

RUNNER_SANDBOX names the plan. Forked runs come from a zygote, spawned ones from one `posix_spawn`
each; sandboxed runs get new PID, mount, IPC, UTS and (unless turned off) network namespaces, a
read-only view of the file system, and a private size-limited tmpfs as their working directory, so
that a daemonized grandchild dies with the run, `kill(-1)` reaches nothing outside, and the server is
not even visible:

- ``namespaces``: forked; the zygote builds the namespaces for each run before its code arrives
  (zygote.py, namespaces.py);
- ``bwrap``: spawned, one bubblewrap and one fresh interpreter per run;
- ``none``: forked, rlimits and process groups only;
- ``none-posix-spawn``: spawned, rlimits and process groups only;
- ``auto``: the first of namespaces, bwrap and none whose start-up probe works (inside Docker's
  default seccomp profile every probe fails), the plan's reason saying why.

Every consumer (the interpreter sources, the limits, the pool, its teardowns and its sweep) reads the
plan; none looks at the configuration to work the mode out again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from runner.config import MIB, Config, IsolationConfig, SandboxNetwork
from runner.errors import Unavailable
from runner.inrun.bootstrap import __file__ as _bootstrap_file

# The run's directory, and /run's size (sockets and pid files, if anything: without a size it would be
# a tmpfs of half the host's memory, bubblewrap's default, outside every limit of the run): the same in
# both sandboxes.
from runner.inrun.namespaces import (
    BIND_PREFIX,
    EGRESS_OPTION,
    HIDE_PREFIX,
    PARENT_OPTION,
    PROC_COVERED,
    RUN_BYTES,
    SPACES_OPTION,
    WORKDIR,
    within,
)
from runner.processes.cgroups import CgroupPlan, Parent, plan_cgroups

# A bwrap run's own tmpfs mounts (bwrap_argv), whose pages its peak memory counts (harvest.ended).
BWRAP_TMPFS = (WORKDIR, "/dev/shm", "/run")
# /run is replaced by an empty tmpfs (host sockets stay out of reach) that carries the bootstrap and
# the modules it loads next to it, so runs work wherever the server's files are, even under /tmp,
# which the sandbox hides.
BOOTSTRAP_INSIDE = "/run/runner/bootstrap.py"
HIDDEN = (WORKDIR, "/run")
PROBE_TIMEOUT = 10.0
BOOTSTRAP = os.path.realpath(_bootstrap_file)
# The fork server's zygote, next to the bootstrap it imports.
ZYGOTE = os.path.join(os.path.dirname(BOOTSTRAP), "zygote.py")
# What of the host's system every namespaced view holds, where it exists: the programs and libraries
# (on a merged-/usr system /bin, /lib and the rest are links into /usr, made again as links), the
# dynamic linker's cache and the time zone. /etc is otherwise made for runs (namespaces.etc_files).
SYSTEM_VIEW = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc/ld.so.cache", "/etc/localtime")
# The certificate authorities, a public file: where runs reach hosts through the egress proxy, an
# HTTPS client checks them (found by a first hour: without them urlopen of https://pypi.org failed,
# CERTIFICATE_VERIFY_FAILED, in every sandboxed mode).
CERTIFICATES = ("/etc/ssl", "/etc/ca-certificates", "/etc/pki")
# And where runs keep the server's network (RUNNER_SANDBOX_NETWORK=shared): name lookups too.
NETWORK_VIEW = ("/etc/resolv.conf", "/etc/gai.conf", *CERTIFICATES)
# bwrap reports a command killed by signal N as exit status 128 + N.
SIGNAL_EXIT_BASE = 128

Mode = Literal["namespaces", "bwrap", "none", "none-posix-spawn"]


@dataclass(frozen=True, slots=True)
class IsolationPlan:
    """How every run is made and isolated, from `plan_isolation`. `wrapper` is the argv that goes
    before a spawned interpreter's (bwrap), `zygote_args` what the zygote is told to do for each run
    (namespaces), `preload` what a second zygote imports before its first fork (forked modes only)."""

    mode: Mode
    reason: str
    wrapper: tuple[str, ...] = ()
    zygote_args: tuple[str, ...] = ()
    network: SandboxNetwork = "shared"  # a sandboxed run's: "isolated", a network namespace of its own
    # Egress (RUNNER_EGRESS_ALLOW): the port the proxy's listener takes on each run's own loopback (made by
    # the namespace's init, or by a bubblewrap run itself), handed to the server before the run's code
    # (`wire.hand_over_listener`); 0: runs have no network at all.
    egress_port: int = 0
    preload: tuple[str, ...] = ()
    # Each run is lent a host uid of its own (RUNNER_SANDBOX_UIDS, `identity`): a root server's
    # sandboxed runs. Otherwise runs keep the server's uid: it has no other to give.
    uid_per_run: bool = False
    # Each run's own cgroup (whole-run memory and process limits), or None and why not (cgroups.py).
    cgroups: CgroupPlan | None = None
    cgroup_reason: str = ""
    # What each sandboxed run's directory (its /tmp) holds before the run puts anything there: the top
    # directories of what is bound back under it (`shown_in_run_directory`), by name.
    run_directory_shows: tuple[str, ...] = ()

    @property
    def cgroup(self) -> str:
        """The start-up line's ``cgroup`` field: which whole-run limits hold and why the others do not."""
        return self.cgroups.describe() if self.cgroups is not None else f"none: {self.cgroup_reason}"

    @property
    def forked(self) -> bool:
        """Whether runs are forked by a zygote (else spawned, one `posix_spawn` each)."""
        return self.mode in ("namespaces", "none")

    @property
    def sandboxed(self) -> bool:
        """Whether runs get namespaces of their own."""
        return self.mode in ("namespaces", "bwrap")

    @property
    def sandbox(self) -> str:
        """The sandbox's name in the start-up log: namespaces, bwrap or none."""
        return "none" if not self.sandboxed else self.mode

    @property
    def spawn_mode(self) -> str:
        """How interpreters start, in the start-up log: fork-server or posix-spawn."""
        return "fork-server" if self.forked else "posix-spawn"

    @property
    def supplies(self) -> int:
        """Supplies of ready interpreters: one, and one more where a zygote preloads `preload`."""
        return 2 if self.preload else 1

    @property
    def runs_share_files(self) -> bool:
        """Whether what one run leaves behind could reach a later run's files (no sandbox)."""
        return not self.sandboxed

    @property
    def bootstrap(self) -> str:
        """Where a spawned interpreter finds the bootstrap."""
        return BOOTSTRAP_INSIDE if self.wrapper else BOOTSTRAP

    @property
    def run_args(self) -> tuple[str, ...]:
        """The spawned interpreter's last arguments: its own tmpfs mounts, its network and, a plain run,
        its server's pid (`bootstrap.main`). The zygote knows its runs' itself."""
        if not self.wrapper:  # a plain run: none of its own, the host's, and it dies with the server
            return ("", self.network, f"{PARENT_OPTION}{os.getpid()}")
        egress = (f"{EGRESS_OPTION}{self.egress_port}",) if self.egress_port else ()
        return (":".join(BWRAP_TMPFS), self.network, *egress)

    @property
    def identity(self) -> str:
        """What the start-up log says of the runs' host uid."""
        if self.uid_per_run:
            return "a uid of RUNNER_SANDBOX_UIDS each"
        return f"the server's ({os.getuid()})" + ("" if self.sandboxed or os.getuid() else ": not sandboxed")

    @property
    def helpers_per_run(self) -> int:
        """Processes next to each run interpreter: bwrap and its namespace's init, or the init of the
        kept PID namespace the zygote lends it (one per run in flight or waiting). The zygote, and
        the holder of the namespace those are made in, are within limits.SERVER_THREAD_HEADROOM."""
        return {"namespaces": 1, "bwrap": 2}.get(self.mode, 0)


def bwrap_argv(bwrap: str, isolation: IsolationConfig) -> tuple[str, ...]:
    """The bubblewrap command line up to and including `--` (bwrap adds PWD=/tmp to the environment).

    Default-deny, as the namespaced view: bubblewrap's root is an empty tmpfs, and only `view_binds`
    (read-only, links made again) and the run's own mounts are in it; the source adds the /etc made
    for runs (`SpawnSource`). Then the root itself is made read-only."""
    network = ("--unshare-net",) if isolation.sandbox_network == "isolated" else ()
    held = view_binds(isolation)
    view = tuple(
        arg
        for path in held
        if not any(within(path, hidden) for hidden in (*HIDDEN, "/dev/shm"))  # bound back: see `bind_back`
        for arg in (("--symlink", os.readlink(path), path) if os.path.islink(path) else ("--ro-bind", path, path))
    )
    # The directories that lead to each bind, made first and open to every uid: bubblewrap would
    # make them with the host's modes, and a /root of 0700 would shut a root server's runs (lent
    # other uids) out of an interpreter under it.
    leading = sorted(
        {
            os.path.dirname(path)
            for bound in held
            for path in _ancestors(bound)
            if not any(within(os.path.dirname(path), other) for other in held)
        }
        - {"/"}
    )
    made = tuple(arg for path in leading for arg in ("--perms", "0755", "--dir", path))
    bound_back = _bound_back(isolation)
    bind_back = tuple(
        arg
        for path in sorted(
            {os.path.dirname(path) for bound in bound_back for path in _ancestors(bound)} - {"/", *HIDDEN}
        )
        if any(within(path, hidden) for hidden in HIDDEN)
        for arg in ("--perms", "0755", "--dir", path)
    ) + tuple(arg for path in bound_back for arg in ("--ro-bind", path, path))
    # A file: --dev-bind, because bwrap's other binds are nodev, where /dev/null could not be opened
    # (reads would fail with EACCES instead of finding nothing); writes to it go nowhere. A directory:
    # an empty tmpfs, read-only.
    hide = tuple(
        arg
        for path in hidden_files(isolation)
        if any(within(path, bound) for bound in held)  # else it is not in the view at all
        for arg in (
            ("--tmpfs", path, "--remount-ro", path) if os.path.isdir(path) else ("--dev-bind", "/dev/null", path)
        )
    )
    return (
        bwrap,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        *network,
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        *made,
        *view,
        "--dev",
        "/dev",
        # --dev's /dev/shm would be a tmpfs of half the host's memory, outside every limit of the run.
        # Writable by every uid (and sticky), as the namespaced runs' are: a root server's run is not root.
        "--perms",
        "1777",
        "--size",
        str(isolation.sandbox_tmp_mb * MIB),
        "--tmpfs",
        "/dev/shm",
        # Found by a review: --dev's /dev is a tmpfs of the server's uid with no size, which a non-root
        # server's run (the same uid) could fill past every limit; and its devpts hands out ptys, each
        # one of the host's kernel.pty.max. Read-only, and no ptys, as the namespaced runs' /dev.
        "--tmpfs",
        "/dev/pts",
        "--remount-ro",
        "/dev/pts",
        "--remount-ro",
        "/dev",
        # Read-only whole, with the same covers as the namespaced mode's (namespaces.PROC_COVERED):
        # bubblewrap covers /proc/sys only where access(W_OK) on it succeeds, and on its root it does not.
        "--proc",
        "/proc",
        "--remount-ro",
        "/proc",
        *(
            arg
            for name in PROC_COVERED
            if os.path.exists("/proc/" + name)
            for arg in ("--dev-bind", "/dev/null", "/proc/" + name)
        ),
        "--perms",
        "1777",
        "--size",
        str(isolation.sandbox_tmp_mb * MIB),
        "--tmpfs",
        WORKDIR,
        "--perms",
        "1777",
        "--size",
        str(RUN_BYTES),
        "--tmpfs",
        "/run",
        "--ro-bind",
        os.path.dirname(BOOTSTRAP),
        os.path.dirname(BOOTSTRAP_INSIDE),
        *bind_back,
        *hide,
        "--remount-ro",
        "/",
        "--chdir",
        WORKDIR,
        "--",
    )


def _ancestors(path: str) -> list[str]:
    """`path` and each directory above it, up to the one below /."""
    found = []
    while path not in ("/", ""):
        found.append(path)
        path = os.path.dirname(path)
    return found


def namespace_args(isolation: IsolationConfig) -> tuple[str, ...]:
    """What the zygote is told after the limits: ``namespaces TMP_BYTES NETWORK KEEP... !HIDE... +BIND...
    spaces=N``."""
    hide = (HIDE_PREFIX + path for path in hidden_files(isolation))
    binds = (BIND_PREFIX + path for path in view_binds(isolation))
    spaces = f"{SPACES_OPTION}{kept_pid_namespaces(isolation)}"
    network = isolation.sandbox_network
    egress = (f"{EGRESS_OPTION}{isolation.egress_port}",) if isolation.egress_port else ()
    return (
        "namespaces",
        str(isolation.sandbox_tmp_mb * MIB),
        network,
        *_bound_back(isolation),
        *hide,
        *binds,
        spaces,
        *egress,
    )


def kept_pid_namespaces(isolation: IsolationConfig) -> int:
    """How many kept PID namespaces a zygote may have at once (pidspaces.py): one for each process of
    its that can be in one at the same time, its ready interpreters (RUNNER_POOL_SIZE), the runs in
    flight (RUNNER_MAX_CONCURRENT, all of them perhaps from this zygote) and the sessions' anchors
    (RUNNER_MAX_SESSIONS), which hold theirs for the session's life, counted where the section is made
    (`Config.isolation`). Each keeps its network namespace and its cgroup with it."""
    return isolation.pid_namespaces


def view_binds(isolation: IsolationConfig) -> list[str]:
    """What of the host a namespaced run's view holds, read-only at the same paths: the system's
    programs and libraries (`SYSTEM_VIEW`, where they exist; `NETWORK_VIEW` too with the server's
    network, its `CERTIFICATES` with egress), the interpreter's own prefix (a pyenv
    build under /root, say), the package environment, the wheelhouse's installed packages (read-only:
    no run can change what a later run imports), and RUNNER_SANDBOX_READ_PATHS. Everything else of
    the host is not there."""
    network = NETWORK_VIEW if isolation.sandbox_network == "shared" else CERTIFICATES if isolation.egress_port else ()
    system = (*SYSTEM_VIEW, *network)
    wanted = [path for path in system if os.path.lexists(path)]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(isolation.python)))
    for path in (prefix, isolation.packages, _provided(isolation), *isolation.sandbox_read_paths):
        if path and path != "/" and not any(within(path, held) for held in wanted):
            wanted.append(path)
    return wanted


def hidden_files(isolation: IsolationConfig) -> list[str]:
    """What of the server's runs see as empty: the HTTP transport's tokens file and the tools file
    (RUNNER_TOOLS_CONFIG), or the directory that holds one when nothing else is there (dot-files
    aside), so that a file put in its place after start (editors save by rename) is hidden too. One
    under a directory the sandbox replaces anyway (/tmp, /run: a Kubernetes Secret under /var/run) is
    not there to hide, unless it is in a directory bound back into the view (a package environment
    under /tmp)."""
    hidden: list[str] = []
    bound_back = _bound_back(isolation)
    for path in isolation.hidden_files:
        replaced = any(within(path, hidden) for hidden in (*HIDDEN, "/dev/shm"))
        if replaced and not any(within(path, back) for back in bound_back):
            continue  # not in the view at all; but one in a directory bound back into it (found by a test) is
        directory = os.path.dirname(path)
        try:
            alone = directory != "/" and all(
                entry.startswith(".") or os.path.join(directory, entry) in isolation.hidden_files
                for entry in os.listdir(directory)
            )
        except OSError:
            alone = False
        made = directory if alone else path
        if made not in hidden:
            hidden.append(made)
    return hidden


def _bound_back(isolation: IsolationConfig) -> list[str]:
    """An interpreter, a package environment (RUNNER_PACKAGES), the wheelhouse's packages (by default in
    the work directory, /tmp) or a path runs may read (RUNNER_SANDBOX_READ_PATHS) under a directory the
    sandbox replaces must stay visible (read-only)."""
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(isolation.python)))
    wanted = [prefix, *filter(None, [isolation.packages, _provided(isolation)]), *isolation.sandbox_read_paths]
    return [path for path in wanted if any(within(path, hidden) for hidden in (*HIDDEN, "/dev/shm"))]


def shown_in_run_directory(isolation: IsolationConfig) -> tuple[str, ...]:
    """The names a sandboxed run's directory shows of what is bound back under it, read-only: the server's
    interpreter, package environment, wheelhouse cache or a path runs may read that was put in the temp
    directory (a checkout in /tmp). A mount cannot be hidden from a listing of the directory it is in."""
    return tuple(
        sorted(
            {
                os.path.relpath(path, WORKDIR).split(os.sep)[0]
                for path in _bound_back(isolation)
                if within(path, WORKDIR)
            }
        )
    )


def _provided(isolation: IsolationConfig) -> str:
    """The wheelhouse's installed packages, where there are (a read-only cache may have none); never
    the rest of the cache, whose locks a run could otherwise hold."""
    return isolation.provided_packages if os.path.isdir(isolation.provided_packages) else ""


def plan_isolation(config: Config) -> IsolationPlan:
    """Decide once how runs are made and isolated; an explicit choice that cannot work stops the server.

    `auto` takes the namespaced fork server where namespaces work, then bubblewrap, then plain forks.
    """
    isolation = config.isolation
    preload = isolation.preload
    # A root server gives its sandboxed runs other uids; the probes below try the first of them.
    lends = os.geteuid() == 0
    probe_uids = (f"uids={isolation.run_uid_range[0]}-{isolation.run_uid_range[0]}",) if lends else ()
    if isolation.sandbox == "none":
        return IsolationPlan("none", "RUNNER_SANDBOX=none", preload=preload, cgroup_reason="RUNNER_SANDBOX=none")
    if isolation.sandbox == "none-posix-spawn":
        why = "RUNNER_SANDBOX=none-posix-spawn"
        return IsolationPlan("none-posix-spawn", why, cgroup_reason=why)
    problems = []
    # Decided before the probes, which make a cgroup too where one is planned.
    cgroups, cgroup_reason = plan_cgroups(config.limits)
    if isolation.sandbox in ("auto", "namespaces"):
        problem, cgroups, cgroup_reason = _probe_zygote(isolation, probe_uids, cgroups, cgroup_reason)
        if problem is None:
            _require_tcp_bound(isolation, cgroups, cgroup_reason)
            reason = "the zygote can give each run its own namespaces"
            args = namespace_args(isolation)
            return IsolationPlan(
                "namespaces",
                reason,
                zygote_args=args,
                network=isolation.sandbox_network,
                egress_port=isolation.egress_port,
                preload=preload,
                uid_per_run=lends,
                cgroups=cgroups,
                cgroup_reason=cgroup_reason,
                run_directory_shows=shown_in_run_directory(isolation),
            )
        if isolation.sandbox == "namespaces":
            raise Unavailable("RUNNER_SANDBOX", f"namespaces were asked for but cannot be used: {problem}")
        problems.append(f"namespaces: {problem}")
    bwrap = shutil.which("bwrap")
    problem = (
        "not installed"
        if bwrap is None
        else _probe([*bwrap_argv(bwrap, isolation), isolation.python, "-I", "-S", "-c", _become(lends, isolation)])
    )
    if bwrap is not None and problem is None:
        _require_tcp_bound(isolation, cgroups, cgroup_reason)
        argv = bwrap_argv(bwrap, isolation)
        why = f"bubblewrap at {bwrap} works"
        network = isolation.sandbox_network
        return IsolationPlan(
            "bwrap",
            why,
            argv,
            network=network,
            egress_port=isolation.egress_port,
            uid_per_run=lends,
            cgroups=cgroups,
            cgroup_reason=cgroup_reason,
            run_directory_shows=shown_in_run_directory(isolation),
        )
    if isolation.sandbox == "bwrap":
        raise Unavailable("RUNNER_SANDBOX", f"bwrap was asked for but cannot be used: {problem}")
    problems.append(f"bubblewrap: {problem}")
    if isolation.egress_port:
        raise Unavailable(
            "RUNNER_EGRESS_ALLOW",
            "needs a sandbox to enforce it, and RUNNER_SANDBOX=auto found none that works here ("
            + "; ".join(problems)
            + "): runs would have the server's whole network. Make one work, or leave RUNNER_EGRESS_ALLOW empty",
        )
    reason = "RUNNER_SANDBOX=auto fell back to rlimits only: " + "; ".join(problems)
    return IsolationPlan("none", reason, preload=preload, cgroup_reason="no sandbox")


def _require_tcp_bound(isolation: IsolationConfig, cgroups: CgroupPlan | None, cgroup_reason: str) -> None:
    """With egress, a run has TCP sockets on its loopback, whose buffers grow by themselves to megabytes
    each: only its memory cgroup bounds them. Without one, egress stops the server."""
    if not isolation.egress_port:
        return
    why = (
        f"the server cannot make the runs' cgroups here ({cgroup_reason})"
        if cgroups is None
        else cgroups.tcp_unbounded()
    )
    if why:
        raise Unavailable(
            "RUNNER_EGRESS_ALLOW",
            f"needs each run's TCP buffers bounded by its memory cgroup, and {why}: a run could hold gigabytes "
            "of the host's memory in its own loopback TCP sockets. Run the server where it can make cgroups "
            "(root, or a delegated cgroup v2 subtree), or leave RUNNER_EGRESS_ALLOW empty",
        )


def _probe_zygote(
    isolation: IsolationConfig, probe_uids: tuple[str, ...], cgroups: CgroupPlan | None, cgroup_reason: str
) -> tuple[str | None, CgroupPlan | None, str]:
    """The namespaced zygote's probe: why it failed (None if it worked), and the cgroups the plan keeps.

    Its runs' cgroups go in a parent of this server's (`Parent`, named with its pid), removed after it:
    a server killed as it probes leaves that parent, which the next start removes. Found by a review:
    they went right under the server's own cgroup, as `run-<probe pid>-1`, and no start removed them."""
    argv = [*zygote_probe_argv(isolation.python), *namespace_args(isolation)[1:], *probe_uids]
    if cgroups is None:
        return _probe(argv, env={}), None, cgroup_reason
    try:
        parent = Parent(cgroups)
    except OSError as exc:
        return _probe(argv, env={}), None, f"cannot make the probe's cgroup: {exc.strerror}"
    try:
        problem = _probe([*argv, *parent.tokens()], env={})
    finally:
        parent.remove()
    if problem is not None and _probe(argv, env={}) is None:
        # Namespaces may work without the cgroups: then the plan says why it has none.
        return None, None, f"the zygote could not use them: {problem}"
    return problem, cgroups, cgroup_reason


def _become(lends: bool, isolation: IsolationConfig) -> str:
    """The bubblewrap probe's code: a root server's run becomes the first uid it could be lent, by
    the runs' own `libc.become_user` (bound in beside the bootstrap)."""
    if not lends:
        return "pass"
    inside = os.path.dirname(BOOTSTRAP_INSIDE)
    return f"import sys; sys.path.insert(0, {inside!r}); import libc; libc.become_user({isolation.run_uid_range[0]})"


def zygote_probe_argv(python: str) -> list[str]:
    """The zygote's probe, before its namespace arguments: told this process's pid, it dies with it."""
    return [*interpreter_argv(python), ZYGOTE, "--probe", f"{PARENT_OPTION}{os.getpid()}"]


def interpreter_argv(python: str) -> list[str]:
    """How every run interpreter (and the zygote) is started: isolated, no site-packages, UTF-8."""
    return [python, "-I", "-S", "-X", "utf8"]


def _probe(argv: list[str], env: dict[str, str] | None = None) -> str | None:
    """Run a run of `pass` as runs will be run; None if it worked, else why not."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            env=env,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"probe failed: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return f"probe exited with status {done.returncode}: {said[-1] if said else 'no message'}"
    return None


def exit_code_of_sandboxed(code: int) -> int:
    """Map bwrap's exit status back to Python's convention (negative signal number)."""
    if SIGNAL_EXIT_BASE < code <= SIGNAL_EXIT_BASE + 64:
        return -(code - SIGNAL_EXIT_BASE)
    return code
