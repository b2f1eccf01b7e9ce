"""The bundled demo: two real MCP servers (in-process, over the SDK's in-memory transport)
reconciled into generations while their catalogs change and a call is in flight.

It prints every publication, shows a call finishing on the revision it pinned while a newer
revision is published, and tears everything down. No network, no external service. It uses
only the engine facade (``open_engine``), as an embedding application would."""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.desired import StaticDesiredState
from mcp_reconciler.reconciler.engine import open_engine
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec
from mcp_reconciler.reconciler.upstream import UpstreamConnection


class DemoServer:
    """A small MCP server whose tool list the demo changes at run time."""

    def __init__(self, name: str, tools: list[str]) -> None:
        self.name = name
        self.tools = list(tools)
        self.release = anyio.Event()
        self.server: Server[Any] = Server(
            name, version="0.1", on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t, description=f"{self.name}: {t}", input_schema={"type": "object"}) for t in self.tools
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name == "slow_report":
            await self.release.wait()
        text = json.dumps({"server": self.name, "tool": params.name, "tools_now": len(self.tools)})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


def _describe(gen: Generation) -> str:
    tools = sorted(gen.routes[EntryKind.TOOL])
    return f"revision {gen.revision}: {len(tools)} tools {tools} digest {gen.digest[:12]}"


async def run_demo(out: TextIO = sys.stdout) -> int:
    """Run the demo on ``out`` (see the module docstring); returns 0. Every connection it opens is
    closed before it returns; a closed ``out`` (``demo | head``) is ignored."""
    servers = {"notes": DemoServer("notes", ["search", "read"]), "tests": DemoServer("tests", ["slow_report"])}
    specs = [SourceSpec(name=n, transport={"kind": "in-process"}) for n in servers]

    def say(msg: str) -> None:
        with contextlib.suppress(BrokenPipeError):  # stdout closed (`demo | head`): the CLI exits 0 quietly
            print(msg, file=out, flush=True)

    opened: dict[str, UpstreamConnection] = {}

    def on_publish(new: Generation, old: Generation | None) -> None:
        say(f"published {_describe(new)}")
        for source in new.sources:
            if isinstance(source.connection, UpstreamConnection):
                opened[source.connection.connection_id] = source.connection

    async with open_engine(
        StaticDesiredState(specs),
        lambda spec, _end: servers[spec.name].server,
        bounds=Bounds(cooldown_s=0.2),
        listeners=[on_publish],
    ) as engine:
        first = await engine.refresh(timeout_s=10)
        say(f"initial cycle: {first.status}, revision {first.revision}")

        live = engine.current
        assert live is not None
        entry = live.generation.tools["tests__slow_report"]
        conn = live.generation.source_state("tests").connection  # type: ignore[union-attr]
        assert isinstance(conn, UpstreamConnection)
        result: list[str] = []

        async def pinned_call() -> None:
            async with live.operation() as op:
                res = await conn.send(
                    types.CallToolRequest(params=types.CallToolRequestParams(name=entry.upstream_name)),
                    types.CallToolResult,
                )
                block = res.content[0]
                result.append(f"call finished on revision {op.revision}: {getattr(block, 'text', '')}")

        async with anyio.create_task_group() as tg:
            tg.start_soon(pinned_call)
            await anyio.wait_all_tasks_blocked()
            say(f"a call is in flight, pinned to revision {live.revision}")
            servers["notes"].tools.append("summarize")
            out2 = await engine.refresh(["notes"], timeout_s=10)
            say(
                f"upstream added a tool: cycle {out2.status}, revision {out2.revision}; "
                f"revision {live.revision} is {live.state.value} with {live.pins} pin(s)"
            )
            servers["tests"].release.set()
        say(result[0])
        say(f"revision {live.revision} is now {live.state.value}")
        out3 = await engine.refresh(timeout_s=10)
        say(f"refresh with nothing changed: cycle {out3.status}, revision {out3.revision} (no new revision, I3)")
        servers["notes"].tools.remove("read")
        out4 = await engine.refresh(["notes"], timeout_s=10)
        say(f"upstream removed a tool: cycle {out4.status}, revision {out4.revision}")
    closed = sum(1 for c in opened.values() if not c.alive)
    say(f"closed: {closed} of {len(opened)} upstream connections the engine opened")
    return 0


def main() -> int:
    """``mcp-reconciler demo``: :func:`run_demo` on stdout in a fresh event loop; the exit status."""
    return anyio.run(run_demo)
