"""Example upstream: a tiny MCP server over stdio with a tool and a prompt."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[types.Tool(name="now", description="Current UNIX time", input_schema={"type": "object"})]
    )


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps({"now": time.time()}))])


async def list_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(name="what_time", description="Ask for the time")])


server: Server[Any] = Server(
    "clock", version="0.1", on_list_tools=list_tools, on_call_tool=call_tool, on_list_prompts=list_prompts
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
