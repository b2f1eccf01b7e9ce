"""The bundled demo and examples, installed as ``mcp_reconciler.examples``.

``demo/`` (the gateway config, its drop-in and watched data) and ``upstreams/`` (the example MCP
servers it spawns) ship in the wheel as package data; ``mcp-reconciler serve`` and ``stdio``
without ``--config`` find them with ``importlib.resources`` (``mcp_reconciler.api.bundled_demo``)."""
