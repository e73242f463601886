"""The isolation plan, and the server's handles on interpreter processes: how one is started,
limited, wrapped and ended.

Owns: how runs are made and isolated, decided once at start (`isolation`: the `IsolationPlan`, the
probes, the bubblewrap wrapper and the zygote's arguments), `posix_spawn` of a run interpreter
(`spawn`), the deletion of a run's directory whatever it holds (`trees`), the server's side of the
fork server (`forkserver`), the plan's interpreter sources (`source`), the process handle (`child`),
the rlimits (`limits`), the host uids a root server's runs are lent (`identity`), the runs' cgroups
on the server's side (`cgroups`) and the Linux process controls the server uses on itself
(`procctl`). What runs inside those processes is `runner.inrun`.

Must not import: `runner.execution` (it does not know about pools or requests), `runner.protocol`,
`runner.transports`, or the MCP SDK.
"""
