"""The engine embedded in a program of your own, over one in-process MCP server."""

import anyio
import mcp_types as types
from mcp.server import Server

from mcp_reconciler.reconciler import Bounds, Reconciler, SourceSpec
from mcp_reconciler.reconciler.desired import StaticDesiredState
from mcp_reconciler.reconciler.upstream import UpstreamReader


async def list_tools(ctx: object, params: object) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(name="count", input_schema={"type": "object"})])


server = Server("notes", on_list_tools=list_tools)  # or a URL, or StdioServerParameters


async def main() -> None:
    specs = [SourceSpec(name="notes", transport={"kind": "in-process"})]
    async with UpstreamReader(lambda spec, on_end: server) as reader:  # spec -> its MCP server
        async with Reconciler(StaticDesiredState(specs), reader, bounds=Bounds(cooldown_s=1.0)) as rec:
            reader.on_dirty = rec.trigger  # upstream list_changed / death -> dirty mark
            outcome = await rec.refresh(timeout_s=30)  # answered by a cycle that started after the call
            live = rec.runtime.current  # the current generation (immutable)
            assert live is not None
            print(f"revision {outcome.revision}: {sorted(live.generation.tools)}")
            async with live.operation() as op:  # pin: this revision stays open until the block ends
                print(f"pinned to revision {op.revision}")


if __name__ == "__main__":
    anyio.run(main)
