"""A real MCP upstream that starts things: sampling, elicitation, roots and log records inside
its tool calls, completion, and a roots request on connect — in both protocol eras.

    python -m tests.support.relay_server --transport stdio|http|sse [--port N | --port-file PATH] [--era both|legacy]
        [--pid-file PATH] [--no-completions] [--roots-on-connect]

``--era legacy`` makes the server refuse ``server/discover``, so an ``auto`` client (the
gateway) falls back to the 2025-11-25 handshake: that is the era with real server→client
requests. In the 2026-07-28 era the same tools ask with an ``InputRequiredResult`` (SEP-2322)
and finish when the client retries with the answers.

Tools (every result is one JSON text block; ``who`` tags are echoed so tests can tell calls apart):

- ``sample {prompt, tools?, standalone?, timeout_s?, progress?}`` → ``{"sampled": <text>,
  "model": ..., "progress": [[done, total, message], ...] (with ``progress``)}``,
  or ``{"error": {"code", "message"}}`` when the client's answer was an error. ``standalone``
  sends the request on the connection's standalone channel (no related request — what the
  conformance reference server does); ``timeout_s`` gives up (and cancels) after that long;
  ``tools`` asks with a sampling tool (needs ``sampling.tools``).
- ``elicit {message, mode: form|url}`` → ``{"action", "content"}`` or ``{"error": ...}``; URL
  mode sends ``notifications/elicitation/complete`` after an ``accept``.
- ``roots {}`` → ``{"roots": [uri, ...]}`` or ``{"error": ...}``.
- ``log {n, level?, logger?, standalone?, who?, sample_between?}`` → ``{"logged": n}`` after
  sending ``n`` records (``data`` = ``"<who> <i>"``) on the request's stream (``standalone``: on
  the connection's standalone channel; ``sample_between``: a sampling request half-way, which
  holds the call in flight until the client answers; 2025 era only).
- ``state {}`` → ``{"level": <last logging/setLevel>, "connect_roots": <roots/list on connect>,
  "cancelled": <requests of ours the client cancelled>, "capabilities": <the client's>}``.
- ``echo {...}`` → its arguments; ``fail {text}`` → a tool result with ``isError`` whose text is
  ``text`` (the TypeScript-client oracle's success and error results); any other name is a
  protocol error (``INVALID_PARAMS``).

Also: prompt ``greet(name)`` and resource template ``note://{id}`` with completions (names
``alice``/``bob``/``carol``, ids ``1``/``2``/``3``, filtered by prefix) unless ``--no-completions``;
``logging/setLevel`` is recorded and answered with a standalone record ``"level set to X"``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPDeprecationWarning, MCPError
from mcp.server import Server, ServerRequestContext
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from tests.support.upstream_server import serve_http, write_pid_file

warnings.simplefilter("ignore", MCPDeprecationWarning)

NAMES = ("alice", "bob", "carol")
IDS = ("1", "2", "3")
SCHEMA = {"type": "object"}


def _text(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload))])


def _error(exc: MCPError) -> dict[str, Any]:
    return {"error": {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}}


class RelayServer:
    def __init__(self, *, era: str = "both", completions: bool = True, roots_on_connect: bool = False) -> None:
        self.level: str | None = None
        self.connect_roots: Any = None
        self.cancelled = 0
        self.roots_on_connect = roots_on_connect
        kw: dict[str, Any] = {}
        if completions:
            kw["on_completion"] = self._complete
        self.server: Server[Any] = Server(
            "relay-test-server",
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_set_logging_level=self._set_level,
            **kw,
        )
        if era == "legacy":
            self.server.add_request_handler("server/discover", types.RequestParams, self._no_discover)
        self.server.add_notification_handler("notifications/initialized", types.NotificationParams, self._initialized)

    # -- era and connect ----------------------------------------------------------------------

    async def _no_discover(self, ctx: ServerRequestContext[Any], params: types.RequestParams) -> Any:
        raise MCPError(types.METHOD_NOT_FOUND, "this server speaks only the 2025-11-25 handshake")

    async def _initialized(self, ctx: ServerRequestContext[Any], params: types.NotificationParams) -> None:
        if not self.roots_on_connect:
            return
        try:
            result = await ctx.session.send_request(
                types.ListRootsRequest(), types.ListRootsResult, request_read_timeout_seconds=10
            )
            self.connect_roots = {"roots": [str(r.uri) for r in result.roots]}
        except MCPError as exc:
            self.connect_roots = _error(exc)

    # -- catalog ------------------------------------------------------------------------------

    async def _list_tools(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        names = ("sample", "elicit", "roots", "log", "state", "echo", "fail")
        return types.ListToolsResult(tools=[types.Tool(name=n, input_schema=SCHEMA) for n in names])

    async def _list_prompts(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListPromptsResult:
        arg = types.PromptArgument(name="name", required=True)
        return types.ListPromptsResult(prompts=[types.Prompt(name="greet", arguments=[arg])])

    async def _get_prompt(self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> Any:
        text = f"hello {(params.arguments or {}).get('name', '?')}"
        message = types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
        return types.GetPromptResult(messages=[message])

    async def _list_resources(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def _list_templates(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[types.ResourceTemplate(name="note", uri_template="note://{id}")]
        )

    async def _read_resource(self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> Any:
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=str(params.uri), text=f"note {params.uri}")]
        )

    async def _complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        pool = NAMES if isinstance(params.ref, types.PromptReference) and params.ref.name == "greet" else ()
        if isinstance(params.ref, types.ResourceTemplateReference) and params.ref.uri == "note://{id}":
            pool = IDS
        values = [v for v in pool if v.startswith(params.argument.value)]
        return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))

    async def _set_level(self, ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams) -> Any:
        self.level = params.level
        await ctx.session.send_log_message("notice", f"level set to {params.level}", logger="levels")
        return types.EmptyResult()

    # -- tools --------------------------------------------------------------------------------

    async def _call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        args = dict(params.arguments or {})
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        name = params.name
        if name == "state":
            caps = ctx.session.client_capabilities
            return _text(
                {
                    "level": self.level,
                    "connect_roots": self.connect_roots,
                    "cancelled": self.cancelled,
                    "capabilities": caps.model_dump(by_alias=True, exclude_none=True) if caps else None,
                }
            )
        if name == "log":
            return await self._log(ctx, args)
        if name == "echo":
            return _text(args)
        if name == "fail":
            text = types.TextContent(type="text", text=str(args.get("text", "")))
            return types.CallToolResult(content=[text], is_error=True)
        request: types.InputRequest
        if name == "sample":
            tools = [types.Tool(name="lookup", input_schema=SCHEMA)] if args.get("tools") else None
            content = types.TextContent(type="text", text=str(args.get("prompt", "")))
            request = types.CreateMessageRequest(
                params=types.CreateMessageRequestParams(
                    messages=[types.SamplingMessage(role="user", content=content)], max_tokens=50, tools=tools
                )
            )
        elif name == "elicit":
            if args.get("mode") == "url":
                request = types.ElicitRequest(
                    params=types.ElicitRequestURLParams(
                        message=str(args.get("message", "")), url="https://example.invalid/auth", elicitation_id="el-1"
                    )
                )
            else:
                schema: Any = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
                request = types.ElicitRequest(
                    params=types.ElicitRequestFormParams(message=str(args.get("message", "")), requested_schema=schema)
                )
        elif name == "roots":
            request = types.ListRootsRequest()
        else:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {name}")
        if modern:
            return self._modern_round(params, request)
        return await self._legacy_ask(ctx, request, args)

    def _modern_round(self, params: types.CallToolRequestParams, request: types.InputRequest) -> Any:
        answer = (params.input_responses or {}).get("q")
        if answer is None:
            return types.InputRequiredResult(input_requests={"q": request}, request_state=f"asked:{params.name}")
        if params.request_state != f"asked:{params.name}":
            raise MCPError(types.INVALID_PARAMS, f"unexpected request_state {params.request_state!r}")
        return _text(_summary(answer))

    async def _legacy_ask(
        self, ctx: ServerRequestContext[Any], request: types.InputRequest, args: dict[str, Any]
    ) -> Any:
        related = None if args.get("standalone") else ctx.request_id
        result_type: Any = {
            "sampling/createMessage": types.CreateMessageResultWithTools
            if args.get("tools")
            else types.CreateMessageResult,
            "elicitation/create": types.ElicitResult,
            "roots/list": types.ListRootsResult,
        }[request.method]
        timeout = float(args["timeout_s"]) if args.get("timeout_s") else None
        progress: list[Any] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append([done, total, message])

        try:
            answer = await ctx.session.send_request(
                request,  # type: ignore[arg-type]
                result_type,
                request_read_timeout_seconds=timeout,
                metadata=ServerMessageMetadata(related_request_id=related),
                progress_callback=on_progress if args.get("progress") else None,
            )
        except MCPError as exc:
            if exc.error.code == types.REQUEST_TIMEOUT:
                self.cancelled += 1
            return _text(_error(exc))
        if isinstance(answer, types.ElicitResult) and args.get("mode") == "url" and answer.action == "accept":
            await ctx.session.send_elicit_complete("el-1", related_request_id=related)
        return _text({**_summary(answer), **({"progress": progress} if args.get("progress") else {})})

    async def _log(self, ctx: ServerRequestContext[Any], args: dict[str, Any]) -> Any:
        n = int(args.get("n", 1))
        level = str(args.get("level", "info"))
        who = str(args.get("who", ""))
        related = None if args.get("standalone") else ctx.request_id
        for i in range(n):
            if i == n // 2 and args.get("sample_between"):  # hold the call in flight mid-way
                content = types.TextContent(type="text", text=who)
                await ctx.session.send_request(
                    types.CreateMessageRequest(
                        params=types.CreateMessageRequestParams(
                            messages=[types.SamplingMessage(role="user", content=content)], max_tokens=5
                        )
                    ),
                    types.CreateMessageResult,
                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
                )
            data = f"{who} {i}".strip()
            if args.get("standalone") and ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                await ctx.session.send_notification(
                    types.LoggingMessageNotification(
                        params=types.LoggingMessageNotificationParams(level=level, logger=args.get("logger"), data=data)  # type: ignore[arg-type]
                    )
                )
            else:
                await ctx.session.send_log_message(level, data, logger=args.get("logger"), related_request_id=related)  # type: ignore[arg-type]
        return _text({"logged": n})


def _summary(answer: Any) -> dict[str, Any]:
    if isinstance(answer, types.CreateMessageResult | types.CreateMessageResultWithTools):
        content = answer.content if not isinstance(answer.content, list) else answer.content[0]
        return {"sampled": getattr(content, "text", None), "model": answer.model}
    if isinstance(answer, types.ElicitResult):
        return {"action": answer.action, "content": answer.content}
    if isinstance(answer, types.ListRootsResult):
        return {"roots": [str(r.uri) for r in answer.roots]}
    if isinstance(answer, dict):  # an InputResponse the server could not type
        return {"raw": answer}
    return {"raw": str(answer)}


class _RefuseDiscover:
    """A stdio read stream that answers ``server/discover`` itself with "method not found", so
    the SDK's dual-era loop never sees it and opens the 2025-11-25 era on ``initialize`` (on a
    stream the first request decides the era, even one its handler refuses)."""

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage

        while True:
            item = await self._inner.receive()
            message = getattr(item, "message", None)
            if isinstance(message, types.JSONRPCRequest) and message.method == "server/discover":
                error = types.ErrorData(code=types.METHOD_NOT_FOUND, message="2025-11-25 handshake only")
                await self._write.send(SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error)))
                continue
            return item

    def __aiter__(self) -> Any:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def serve_stdio(server: RelayServer, pid_file: str | None, legacy: bool) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        write_pid_file(pid_file)
        stream: Any = _RefuseDiscover(read, write) if legacy else read
        await server.server.run(stream, write, server.server.create_initialization_options())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.relay_server", description=__doc__.splitlines()[0])
    p.add_argument("--transport", choices=("stdio", "http", "sse"), default="stdio")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", help="http: bind port 0 and write the port listened on here (before the pid file)")
    p.add_argument("--era", choices=("both", "legacy"), default="both")
    p.add_argument("--pid-file")
    p.add_argument("--no-completions", action="store_true")
    p.add_argument("--roots-on-connect", action="store_true")
    args = p.parse_args(argv)
    server = RelayServer(era=args.era, completions=not args.no_completions, roots_on_connect=args.roots_on_connect)
    if args.transport == "stdio":
        anyio.run(serve_stdio, server, args.pid_file, args.era == "legacy")
    else:
        if not args.port and not args.port_file:
            p.error(f"--transport {args.transport} needs --port N, or --port-file PATH to learn the port picked")
        anyio.run(serve_http, server, args.port, args.pid_file, args.transport, args.port_file)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
