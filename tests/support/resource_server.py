"""A runnable real MCP upstream with resources and resource subscriptions, both eras.

    python -m tests.support.resource_server --transport stdio|http [--port N] [--pid-file PATH]
        [--uris note://a,note://b] [--label TEXT] [--legacy-only] [--no-subscribe]

It lists the resources ``--uris`` and the template ``note://{id}`` (reads answer
``"<label>:<uri>"``, so a test can tell which source answered), and offers subscriptions:

- 2025-11-25: ``resources/subscribe`` / ``unsubscribe``; ``touch`` pushes
  ``notifications/resources/updated`` on every connection subscribed to the URI;
- 2026-07-28: ``subscriptions/listen`` with ``resource_subscriptions``; ``touch`` publishes on
  the listen bus (each stream delivers it if it holds the URI).

``--legacy-only`` (stdio) refuses ``server/discover``, so an auto-mode client (the gateway) falls
back to the 2025-11-25 handshake: the same server then tests the legacy upstream path.
``--no-subscribe`` offers resources without subscriptions (no handlers, no listen).

Tools: ``touch {uri}`` (announce an update; answers the wall-clock time it was sent), ``subs``
(what is held now: per URI how many connections subscribed, the URI sets of open listen
streams, and the subscribe/unsubscribe request counts), ``link {uri}`` (a result with a
resource link and an embedded resource for ``uri``), ``crash`` (exit at once),
``set_uris {uris, template}`` (replace what is listed — the template only if ``template`` —
and announce ``resources/list_changed``). Prompt ``embed {uri}``: a message embedding ``uri``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourcesListChanged, ResourceUpdated
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.support.legacy_only import serve_stdio_legacy_only
from tests.support.upstream_server import CRASH_EXIT_CODE, serve_http, serve_stdio, write_pid_file

TEMPLATE = "note://{id}"

_TOOLS = [
    types.Tool(
        name="touch",
        description="announce an update of a resource",
        input_schema={"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]},
    ),
    types.Tool(name="subs", description="the subscriptions held now", input_schema={"type": "object"}),
    types.Tool(
        name="link",
        description="a result that links and embeds a resource",
        input_schema={"type": "object", "properties": {"uri": {"type": "string"}}, "required": ["uri"]},
    ),
    types.Tool(name="crash", description="exit at once", input_schema={"type": "object"}),
    types.Tool(
        name="set_uris",
        description="replace the listed resources (and drop the template unless template is true)",
        input_schema={
            "type": "object",
            "properties": {"uris": {"type": "array", "items": {"type": "string"}}, "template": {"type": "boolean"}},
            "required": ["uris"],
        },
    ),
]


class ResourceServer:
    def __init__(self, uris: list[str], *, label: str, subscribe: bool) -> None:
        self.uris = uris
        self.template = True
        self.label = label
        self.bus = InMemorySubscriptionBus()
        self.listen = ListenHandler(self.bus)
        self.pushed: dict[str, dict[int, Any]] = {}  # uri → connection id → a session to push on
        self.streams: dict[int, list[str]] = {}  # open listen streams' resource subscriptions
        self.subscribe_calls = 0
        self.unsubscribe_calls = 0
        handlers: dict[str, Any] = {}
        if subscribe:
            handlers = {
                "on_subscribe_resource": self._subscribe,
                "on_unsubscribe_resource": self._unsubscribe,
                "on_subscriptions_listen": self._listen,
            }
        self.server: Server[Any] = Server(
            "resource-test-server",
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            **handlers,
        )

    # -- resources -------------------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[types.Resource(uri=u, name=u.rsplit("/", 1)[-1], mime_type="text/plain") for u in self.uris]
        )

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        templates = [types.ResourceTemplate(uri_template=TEMPLATE, name="note")] if self.template else []
        return types.ListResourceTemplatesResult(resource_templates=templates)

    async def _read(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=f"{self.label}:{uri}")]
        )

    # -- subscriptions ---------------------------------------------------------------------------

    async def _subscribe(self, ctx: ServerRequestContext[Any], params: types.SubscribeRequestParams) -> Any:
        self.subscribe_calls += 1
        self.pushed.setdefault(str(params.uri), {})[id(ctx.session._connection)] = ctx.session
        return types.EmptyResult()

    async def _unsubscribe(self, ctx: ServerRequestContext[Any], params: types.UnsubscribeRequestParams) -> Any:
        self.unsubscribe_calls += 1
        by_conn = self.pushed.get(str(params.uri), {})
        by_conn.pop(id(ctx.session._connection), None)
        if not by_conn:
            self.pushed.pop(str(params.uri), None)
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        token = id(params)
        self.streams[token] = sorted(params.notifications.resource_subscriptions or [])
        try:
            return await self.listen(ctx, params)
        finally:
            del self.streams[token]

    async def _touch(self, uri: str) -> tuple[int, float]:
        sent_at = time.time()  # wall clock: benchmarks compare it with other processes' receive times
        pushed = 0
        for session in list(self.pushed.get(uri, {}).values()):
            try:
                await session.send_resource_updated(uri)
                pushed += 1
            except Exception:
                pass
        await self.bus.publish(ResourceUpdated(uri=uri))
        return pushed, sent_at

    # -- tools and prompts -----------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=_TOOLS)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        if params.name == "touch":
            pushed, sent_at = await self._touch(str(args["uri"]))
            return _text({"pushed": pushed, "sent_at": sent_at})
        if params.name == "subs":
            return _text(
                {
                    "subscribed": {uri: len(conns) for uri, conns in self.pushed.items() if conns},
                    "listen": sorted(self.streams.values()),
                    "subscribe_calls": self.subscribe_calls,
                    "unsubscribe_calls": self.unsubscribe_calls,
                    "pid": os.getpid(),
                }
            )
        if params.name == "link":
            uri = str(args["uri"])
            return types.CallToolResult(
                content=[
                    types.ResourceLink(uri=uri, name="linked"),
                    types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, text=f"{self.label}:{uri}")),
                    types.TextContent(text=uri),
                ]
            )
        if params.name == "crash":
            os._exit(CRASH_EXIT_CODE)
        if params.name == "set_uris":
            self.uris = [str(u) for u in args["uris"]]
            self.template = bool(args.get("template", False))
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                await self.bus.publish(ResourcesListChanged())
            else:
                await ctx.session.send_resource_list_changed()
            return _text({"uris": self.uris, "template": self.template})
        return types.CallToolResult(content=[types.TextContent(text="unknown tool")], is_error=True)

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[types.Prompt(name="embed", arguments=[types.PromptArgument(name="uri", required=True)])]
        )

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        uri = str((params.arguments or {}).get("uri", ""))
        return types.GetPromptResult(
            messages=[
                types.PromptMessage(
                    role="user",
                    content=types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, text=self.label)),
                )
            ]
        )


def _text(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=json.dumps(payload))])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.resource_server")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--pid-file")
    p.add_argument("--uris", default="note://a,note://b")
    p.add_argument("--label", default="res")
    p.add_argument("--legacy-only", action="store_true")
    p.add_argument("--no-subscribe", action="store_true")
    args = p.parse_args(argv)
    server = ResourceServer(
        [u for u in args.uris.split(",") if u],
        label=args.label,
        subscribe=not args.no_subscribe,
    )
    if args.transport == "stdio" and args.legacy_only:
        anyio.run(serve_stdio_legacy_only, server.server, args.pid_file, write_pid_file)
    elif args.transport == "stdio":
        anyio.run(serve_stdio, server, args.pid_file)
    else:
        anyio.run(serve_http, server, args.port, args.pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
