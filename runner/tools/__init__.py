"""Code mode: the downstream MCP servers whose tools runs call as Python functions (`import mcp_tools`),
brokered by this server (`broker`) over each run's job socket; their connections (`downstream`), and
what is shown of them (`catalog`).

It sits beside the two sides: the protocol side hands the broker to the execution side, which knows it
only as `runner.outcome.ToolGateway`; the run's module is `runner/inrun/mcp_tools.py`, sent to a run as
source, never imported here.

Must not import: `runner.protocol`, `runner.transports`, `runner.execution`, `runner.processes` or
`runner.inrun` (it reads the run's module as a file, `importlib.resources`).
"""
