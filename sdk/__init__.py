"""Python client for mcp-reconciler (control API client and revision-pinned MCP sessions).

Not implemented yet: see the open issue "Control API, auth, Python SDK with revision pinning"."""
