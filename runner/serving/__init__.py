"""Serving: the composition of the two sides for one transport, from start to a clean stop.

Owns: a stdio session (`stdio`), Streamable HTTP with its readiness, metrics and workers (`http`,
`supervisor`), and the one way a signal stops either (`signals`). Like `runner.__main__` and
`runner.api`, these are composition roots: the only modules besides those two that import the
protocol side, the transports and the execution side together.
"""
