"""The execution side: a `RunRequest` goes in, a `RunResult` comes out.

Owns: admission (the concurrency bound, the FIFO queue and each caller's share), the supply of ready
interpreters, driving one run to its end (code in, output read and capped, the deadline, the kill, the
classification), everything after it (`teardown`) and the sweep of processes a run left behind.
`pool.Pool` puts them together. Infrastructure faults
raise; a run's own outcome is data.

May import: `runner.processes` (how one interpreter is started and controlled), `runner.inrun`'s
wire, and the shared modules. Must not import: `runner.protocol`, `runner.transports`, or the MCP SDK.
"""
