"""One interpreter process: how it is started, limited, wrapped, handed its code, and ended.

Owns: `posix_spawn` of a run interpreter (`spawn`), the fork server's zygote (`forkserver`), the
process handle (`child`), the stdlib-only first code every interpreter runs (`bootstrap`), the
rlimits (`limits`), the bubblewrap wrapper (`sandbox`) and the Linux process controls (`procctl`).

Must not import: `runner.execution` (it does not know about pools or requests), `runner.protocol`,
`runner.transports`, or the MCP SDK. `bootstrap` imports nothing of `runner` at all: it runs under
``python -I -S`` with the standard library only.
"""
