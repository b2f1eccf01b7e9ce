"""Example upstream: a tiny MCP server over stdio with tools, a prompt and progress.

It serves everything it lists: ``now`` (the time), ``tick`` (counts to ``steps``, reporting
progress at every step — a caller that sent a progress token sees each one) and the prompt
``what_time``."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

MAX_STEPS = 100
TICK_SCHEMA = {
    "type": "object",
    "properties": {
        "steps": {"type": "integer", "minimum": 1, "maximum": MAX_STEPS, "default": 3},
        "interval_s": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.1},
    },
}


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(
        tools=[
            types.Tool(name="now", description="Current UNIX time", input_schema={"type": "object"}),
            types.Tool(name="tick", description="Count to steps, reporting progress", input_schema=TICK_SCHEMA),
        ]
    )


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    if params.name == "now":
        body: Any = {"now": time.time()}
    elif params.name == "tick":
        steps = min(max(int(args.get("steps", 3)), 1), MAX_STEPS)
        interval_s = min(max(float(args.get("interval_s", 0.1)), 0.0), 1.0)
        for step in range(1, steps + 1):
            await anyio.sleep(interval_s)  # the demo's stand-in for work
            await ctx.session.report_progress(step, steps, f"tick {step} of {steps}")
        body = {"ticks": steps}
    else:
        return types.CallToolResult(content=[types.TextContent(type="text", text="no such tool")], is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body))])


async def list_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=[types.Prompt(name="what_time", description="Ask for the time")])


async def get_prompt(ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
    if params.name != "what_time":
        raise MCPError(-32602, f"no such prompt: {params.name}")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    text = f"The clock server says it is {stamp}. What time is it where you are?"
    return types.GetPromptResult(
        description="Ask for the time",
        messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
    )


server: Server[Any] = Server(
    "clock",
    version="0.2",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
