"""Pin a revision for a whole agent run with the SDK.

Run the demo gateway first (`make run`), then:
    MCP_RECONCILER_TOKEN=demo-operator-token .venv/bin/python examples/sdk_pinned_run.py
"""

from __future__ import annotations

import os

import anyio

from mcp_reconciler.sdk import ReconcilerClient


async def main() -> None:
    url = os.environ.get("MCP_RECONCILER_URL", "http://127.0.0.1:8765")
    async with ReconcilerClient(url, os.environ.get("MCP_RECONCILER_TOKEN")) as rc:
        status = await rc.status()
        print(f"gateway at revision {status.revision} ({status.state})")
        async with rc.pinned() as run:  # holds the current revision until the block ends
            tools = await run.mcp.list_tools()
            print(f"pinned to revision {run.revision}: {[t.name for t in tools.tools]}")
            result = await run.mcp.call_tool("notes__count_notes", {})
            print(
                "notes__count_notes ->",
                result.content[0].text,
                "| served by revision",
                (result.meta or {}).get("io.mcp-reconciler/revision"),
            )
        print("hold released:", (await rc.status()).holds == 0)


if __name__ == "__main__":
    anyio.run(main)
