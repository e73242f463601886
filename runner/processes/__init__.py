"""The server's handles on interpreter processes: how one is started, limited, wrapped and ended.

Owns: `posix_spawn` of a run interpreter (`spawn`), the server's side of the fork server
(`forkserver`), where interpreters come from (`source`), the process handle (`child`), the rlimits
(`limits`), the bubblewrap wrapper and the choice of sandbox (`sandbox`) and the Linux process
controls the server uses on itself (`procctl`). What runs inside those processes is `runner.inrun`.

Must not import: `runner.execution` (it does not know about pools or requests), `runner.protocol`,
`runner.transports`, or the MCP SDK.
"""
