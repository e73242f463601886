"""Egress by allowlist (RUNNER_EGRESS_ALLOW): the server's HTTP proxy, the one way a sandboxed run is to
reach the network. A run's connections arrive on a listening socket in its own network namespace, handed
to the proxy (`proxy.RunProxy`); each is read and answered by a `relay.Relay`, whose requests' targets are
taken apart without I/O (`targets`). The list itself is configuration (`runner.config.egress`).

It sits beside the two sides: the execution side hands it each run's socket knowing it only as
`runner.outcome.EgressGateway`; the serving entry points make it (`runner.serving`).

Must not import: `runner.protocol`, `runner.transports`, `runner.execution`, `runner.processes`,
`runner.tools`, `runner.inrun`, or the MCP SDK.
"""
