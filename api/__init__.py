"""The edges of mcp-reconciler: the CLI today; the MCP front door and the control API adapt
the engine in ``reconciler/`` to the outside world."""
