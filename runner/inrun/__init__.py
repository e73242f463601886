"""The code that runs inside an interpreter process of a run: the bootstrap every run interpreter
starts with, the zygote that forks runs, and what they load beside them.

Owns: the first code of every run (`bootstrap`), the fork server's side of forking (`zygote`), the
run's namespaces and view of the file system (`namespaces`), the kept PID namespaces (`pidspaces`),
the system calls no run may make (`seccomp`), libc through ctypes (`libc`), the wire between the
server and a run (`wire`: the ready line, the job frame and the report frame, both ends), the run's
working directory (`workdir`), its figures (`figures`), what it returns (`harvest`), image headers
(`images`), a preloading zygote's imports (`preload`), each run's cgroup (`cgroups`), and a
session's anchor (`anchor`), its keeper and calls (`keeper`) and its files' snapshot (`snapshot`).

Must not import: anything but the standard library and its own modules, at run time. These files
run under ``python -I -S`` outside the package: they reach each other only through
`bootstrap.load_siblings`, and a module the server imports too spells the import both ways
(``from runner.inrun import x`` when ``__package__`` is set, else ``import x``). So none of the
server's: `runner.processes`, `runner.execution`, `runner.protocol`, `runner.transports`, `runner.tools`,
`runner.egress`, `runner.config`, `runner.errors`, `runner.logs`, `runner.fdio`, `runner.rates`,
`runner.outcome`, `runner.eventloop`, `runner.jsonvalues`. The
server's execution side and process handles may import this package (it is stdlib only); the protocol
side and the transports may not.
"""
