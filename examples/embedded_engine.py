"""The engine embedded in a program of your own, over one in-process MCP server."""

import anyio
import mcp_types as types
from mcp.server import Server

from mcp_reconciler.reconciler import Bounds, SourceSpec
from mcp_reconciler.reconciler.desired import StaticDesiredState
from mcp_reconciler.reconciler.engine import open_engine


async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(name="count", input_schema={"type": "object"})])


server = Server("notes", on_list_tools=list_tools)


def target(spec: SourceSpec, on_end: object) -> Server:
    """What the engine's MCP client connects to for ``spec``: a Server, a URL or StdioServerParameters."""
    return server


async def main() -> None:
    specs = [SourceSpec(name="notes", transport={"kind": "in-process"})]
    async with open_engine(StaticDesiredState(specs), target, bounds=Bounds(cooldown_s=1.0)) as engine:
        outcome = await engine.refresh(timeout_s=30)  # answered by a cycle that started after the call
        live = engine.current  # the current generation (immutable)
        assert live is not None
        print(f"revision {outcome.revision}: {sorted(live.generation.tools)}")
        async with live.operation() as op:  # pin: this revision stays open until the block ends
            print(f"pinned to revision {op.revision}")


if __name__ == "__main__":
    anyio.run(main)
