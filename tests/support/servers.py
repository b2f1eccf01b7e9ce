"""Small real MCP servers for tests, built on the SDK's low-level ``Server``.

``DynamicServer`` has a mutable catalog (tools, resources, templates, prompts), paginates its
lists with a configurable page size, and offers tools whose behaviour tests control: ``echo``
returns its arguments, ``block`` waits until the test releases it (so a call can be held in
flight across a publication), ``fail`` returns an upstream error carrying a marker string."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext


def tool(name: str, description: str = "", schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(
        name=name,
        description=description or f"tool {name}",
        input_schema=schema or {"type": "object", "properties": {"x": {"type": "string"}}},
    )


class DynamicServer:
    def __init__(self, name: str, tools: list[str] | None = None, *, page_size: int = 50) -> None:
        self.name = name
        self.page_size = page_size
        self.tools: dict[str, types.Tool] = {t: tool(t) for t in (tools or [])}
        self.resources: dict[str, types.Resource] = {}
        self.templates: dict[str, types.ResourceTemplate] = {}
        self.prompts: dict[str, types.Prompt] = {}
        self.list_calls = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.release = anyio.Event()
        self.blocked = 0
        self.blocked_changed = anyio.Event()
        self.cancelled = 0
        self.on_call: Callable[[str, dict[str, Any]], None] | None = None
        self.server: Server[Any] = Server(
            name,
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_list_prompts=self._list_prompts,
        )

    def set_tools(self, names: list[str]) -> None:
        self.tools = {t: self.tools.get(t) or tool(t) for t in names}

    def _page(self, items: list[Any], params: types.PaginatedRequestParams | None) -> tuple[list[Any], str | None]:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + self.page_size
        return items[start:end], (str(end) if end < len(items) else None)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        self.list_calls += 1
        page, nxt = self._page(list(self.tools.values()), params)
        return types.ListToolsResult(tools=page, next_cursor=nxt)

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        page, nxt = self._page(list(self.resources.values()), params)
        return types.ListResourcesResult(resources=page, next_cursor=nxt)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        page, nxt = self._page(list(self.templates.values()), params)
        return types.ListResourceTemplatesResult(resource_templates=page, next_cursor=nxt)

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        page, nxt = self._page(list(self.prompts.values()), params)
        return types.ListPromptsResult(prompts=page, next_cursor=nxt)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        self.calls.append((params.name, args))
        if params.name not in self.tools:
            return types.CallToolResult(content=[types.TextContent(type="text", text="unknown tool")], is_error=True)
        if params.name == "block" or args.get("block"):
            self.blocked += 1
            self.blocked_changed.set()
            try:
                await self.release.wait()
            except BaseException:
                self.cancelled += 1
                raise
            finally:
                self.blocked -= 1
        return types.CallToolResult(
            content=[
                types.TextContent(
                    type="text", text=json.dumps({"server": self.name, "tool": params.name, "args": args})
                )
            ]
        )
