"""The MCP side: the `run_python` tool, its hand-written schemas, argument checks, and the handlers.

Owns: what a client sees (the tool definition, inputSchema and outputSchema, structuredContent, the
`isError` results) and the tools/list and tools/call handlers on the SDK's low-level `Server`.
Turns a call into a `runner.outcome.RunRequest`, hands it to whatever `handlers.Runner` it was
given, and turns the `RunResult` back into a tool result.

Must not import: `runner.execution`, `runner.processes` or `runner.inrun` (it knows nothing of
processes) or `runner.transports` (it never sees bytes on a wire).
"""
