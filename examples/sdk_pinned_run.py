"""Pin a revision for a whole agent run (serve the demo first: `make run`)."""

import os

import anyio

from mcp_reconciler.sdk import ReconcilerClient


async def main() -> None:
    url = os.environ.get("MCP_RECONCILER_URL", "http://127.0.0.1:8765")
    async with ReconcilerClient(url, os.environ.get("MCP_RECONCILER_TOKEN")) as rc:
        async with rc.pinned() as run:  # holds the current revision (bounded TTL) until the block ends
            tools = await run.mcp.list_tools()  # every request is served by run.revision
            result = await run.mcp.call_tool("notes__count_notes", {})
            print(f"pinned to revision {run.revision}: {sorted(t.name for t in tools.tools)}")
            print(f"notes__count_notes -> {result.content[0].text}")
        print("hold released:", (await rc.status()).holds == 0)


if __name__ == "__main__":
    anyio.run(main)
