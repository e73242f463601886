"""Transports: move JSON-RPC messages between a client and the SDK's `Server.run`, and nothing else.

A transport is an async context manager yielding the (read, write) stream pair of `SessionMessage`
that `Server.run` takes, the SDK's own contract; the handlers never see which one is in use.
`jsonrpc` holds the framing every transport shares (pure, over bytes); `stdio` is the wire of a
server started by its client. A transport holds no run logic.

Must not import: `runner.protocol`, `runner.execution`, `runner.processes` or `runner.inrun`.
"""
