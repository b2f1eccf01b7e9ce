"""Example upstream: an MCP server over stdio that snapshots its inputs at spawn.

It reads every ``*.yml`` file under ``--data`` once, when it starts — like the requirements
tool in the staleness incident — and answers from that snapshot. The gateway's ``watch`` globs
make it fresh: a changed data file respawns it into a new generation.

It serves everything it lists: tools ``count_notes`` (which also reports this process's pid, so
a respawn is visible) and ``get_note``; one resource ``note://<name>`` per note, readable; and
the resource template ``note://{name}``, whose every expansion for an existing note is one of
those listed resources (the gateway routes a read by its listed URI)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import yaml
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

NOT_FOUND = -32602  # invalid params: the URI names no note in this snapshot


def load_notes(data: Path) -> dict[str, Any]:
    notes: dict[str, Any] = {}
    for path in sorted(data.glob("**/*.yml")):
        notes[path.stem] = yaml.safe_load(path.read_text()) or {}
    return notes


def build(data: Path) -> Server[Any]:
    notes = load_notes(data)
    spawned_pid = os.getpid()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name="count_notes", description="How many notes exist", input_schema={"type": "object"}),
                types.Tool(
                    name="get_note",
                    description="One note by name",
                    input_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
                ),
            ]
        )

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name == "count_notes":
            body: Any = {"notes": len(notes), "pid": spawned_pid}
        elif params.name == "get_note" and args.get("name") in notes:
            body = notes[args["name"]]
        else:
            return types.CallToolResult(content=[types.TextContent(type="text", text="no such note")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body))])

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[types.Resource(uri=f"note://{name}", name=name, mime_type="application/json") for name in notes]
        )

    async def list_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template="note://{name}", name="note", description="One note by name", mime_type="application/json"
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        name = uri.removeprefix("note://")
        if not uri.startswith("note://") or name not in notes:
            raise MCPError(NOT_FOUND, f"no such note: {uri}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=json.dumps(notes[name]))]
        )

    return Server(
        "notes",
        version="0.2",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="data")
    args = parser.parse_args()
    server = build(Path(args.data))
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
