"""A runnable real MCP upstream for integration tests (stdio, streamable HTTP or legacy SSE).

    python -m tests.support.upstream_server --transport stdio|http|sse [--port N]
        [--tools a,b,c | --tools-file PATH] [--page-size N] [--pid-file PATH] [--bad-tools N]

Run it with the repository root as the working directory (or on ``PYTHONPATH``).

It is a *spawn-snapshot* server, like the staleness incident in docs/DESIGN.md: ``--tools-file`` (a
JSON list of names) is read once, at spawn, and never again. Every catalog tool echoes its
arguments plus ``{"pid": ..., "snapshot": <tools at spawn>}`` (and the request's ``_meta``
``traceparent`` when it carried one). Control tools are always listed
and callable beside the catalog:

- ``block`` waits until the call is cancelled (to hold a call in flight); with argument
  ``marker`` (a path) it first writes that file, so a test can tell the call is in flight; with
  ``release`` (a path) it returns (``{"released": true, ...}``) once that file exists; with
  ``cancelled`` (a path) it writes that file when the call is cancelled (upstream observed the
  downstream's cancellation);
- ``crash`` ends the process at once (``os._exit(3)``);
- ``flood`` sends ``n`` tools/list_changed announcements;
- ``set_tools`` replaces the catalog with ``names`` (in memory) and announces list_changed;
  optional ``descriptions`` (name → text) overrides tool descriptions (a definition change);
- ``progress`` reports ``n`` progress notifications (1..n of total n, message ``step i``), then
  returns ``{"steps": n}`` (a no-op reporter when the caller sent no progress token);
- ``fail_protocol`` raises an MCP protocol error (code -32000) whose message is ``text`` (plus
  the server's pid and working directory: upstream detail a gateway must never forward);
- ``fail_result`` returns a tool result with ``is_error=True`` whose content is ``text``;
With ``--noisy``, four more control tools are listed:

- ``garbage`` writes ``n`` lines that are not JSON-RPC to stdout (stdio only: a misbehaving
  upstream), then returns ``{"garbage": n}``;
- ``stderr`` writes ``n`` lines of ``text`` to stderr, then returns ``{"stderr": n}``;
- ``big`` returns one text content block of ``bytes`` characters (``x``), or, with ``blocks``,
  that many blocks sharing the bytes (many small objects: the parser's worst case);
- ``noline`` writes ``bytes`` bytes to stdout with no newline (stdio only: a line that never
  ends), then answers (its answer lands on that same unfinished line).

With ``--resumable`` (streamable HTTP: an event store, so streams resume with ``Last-Event-ID``;
a 50 ms ``retry``), three more:

- ``drop_call`` closes its own response stream, then sends a log record about the call
  (``after drop``) and answers ``{"runs": n}``, n counting its runs (a client must resume the
  stream, never send the request again);
- ``drop_get`` closes the session's standalone GET stream (unless ``drop`` is false), then sends
  ``notifications/resources/updated`` for ``uri`` there (a client must resume the GET stream
  with ``Last-Event-ID`` to see it);
- ``count`` answers ``{"runs": n}``, n counting its runs.

``--keepalive-s S`` closes idle keep-alive connections after S seconds (uvicorn's
``timeout_keep_alive``; its default is 5).

``--linger`` models an upstream that does not exit when its stdin closes: after stdin ends it
ignores SIGTERM and sleeps (up to 10 minutes), so only a process-group SIGKILL stops it.
``--listen-backlog N`` caps the ``subscriptions/listen`` backlog per subscriber (the SDK's
default behaviour: a subscriber that falls N events behind gets its stream ended).

Announcements reach both protocol eras: a 2025-11-25 ("legacy") client gets
``notifications/tools/list_changed`` pushed on its session (``send_tool_list_changed``; on HTTP
that rides the client's standalone GET stream); a 2026-07-28 client gets ``ToolsListChanged``
events on its ``subscriptions/listen`` stream (``InMemorySubscriptionBus`` + ``ListenHandler``).
The session advertises ``listChanged`` in both eras.

Over ``--transport sse`` (the SDK's ``SseServerTransport``, the 2024-11-05-style HTTP+SSE
transport) the server listens on 127.0.0.1:PORT: ``GET /sse`` opens a client's event stream (its
first event names the POST endpoint), ``POST /messages/?session_id=...`` carries the client's
messages. Each GET stream is one connection served by ``Server.run`` (both eras are answered on
it; list_changed reaches a legacy client pushed on that same stream).

``--bad-tools N`` also lists N tool definitions a gateway must reject one by one (I13), cycling
through: a name with a space and a newline, a name over the exposed-name bound (128), a
description over 8 KiB (carrying a fake credential), and an ``inputSchema`` that is not a valid
JSON Schema (:data:`BAD_TOOL_SECRET` is in the long description; it must never be echoed).

Lists paginate with ``--page-size`` (cursor = offset). ``--pid-file`` is written atomically once
the server is ready: for stdio just before serving, for HTTP and SSE once the port accepts
connections. ``--port 0 --port-file PATH`` (HTTP and SSE): the server binds a port the kernel
picks and writes it to ``PATH`` before the pid file (no other process can take it meanwhile).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

CONTROL_TOOLS = ("block", "crash", "flood", "set_tools", "progress", "fail_protocol", "fail_result")
NOISY_TOOLS = ("garbage", "stderr", "big", "noline")  # listed only with --noisy
RESUMABLE_TOOLS = ("drop_call", "drop_get", "count")  # listed only with --resumable
BAD_TOOL_SECRET = "token=bad-tool-s3cr3t-0123456789"
CRASH_EXIT_CODE = 3

_CONTROL_SCHEMAS: dict[str, dict[str, Any]] = {
    "block": {
        "type": "object",
        "properties": {"marker": {"type": "string"}, "release": {"type": "string"}, "cancelled": {"type": "string"}},
    },
    "crash": {"type": "object"},
    "flood": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
    "set_tools": {
        "type": "object",
        "properties": {
            "names": {"type": "array", "items": {"type": "string"}},
            "descriptions": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["names"],
    },
    "progress": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
    "fail_protocol": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "fail_result": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "garbage": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
    "big": {
        "type": "object",
        "properties": {"bytes": {"type": "integer", "minimum": 0}, "blocks": {"type": "integer", "minimum": 1}},
        "required": ["bytes"],
    },
    "noline": {"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0}}, "required": ["bytes"]},
    "stderr": {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0}, "text": {"type": "string"}},
        "required": ["n", "text"],
    },
}


class _ListChangedServer(Server[Any]):
    """A low-level ``Server`` whose default initialization options advertise ``listChanged``.

    The streamable-HTTP session manager calls ``create_initialization_options()`` with no
    arguments (MCP-SDK-NOTES pitfall), so the default itself must say ``tools_changed``."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def bad_tool(i: int) -> types.Tool:
    """The ``i``-th invalid definition (see ``--bad-tools``)."""
    kind = i % 4
    if kind == 0:
        return types.Tool(name=f"bad name\n{i}", input_schema={"type": "object"})
    if kind == 1:
        return types.Tool(name=f"bad_long_{i}_" + "n" * 200, input_schema={"type": "object"})
    if kind == 2:
        return types.Tool(
            name=f"bad_description_{i}", description=BAD_TOOL_SECRET + " " + "x" * 9000, input_schema={"type": "object"}
        )
    return types.Tool(
        name=f"bad_json_schema_{i}", input_schema={"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    )


class UpstreamServer:
    def __init__(
        self,
        tools: list[str],
        *,
        page_size: int = 100,
        bad_tools: int = 0,
        listen_backlog: int = 100_000,
        noisy: bool = False,
        resumable: bool = False,
    ) -> None:
        self.control_tools = (*CONTROL_TOOLS, *(NOISY_TOOLS if noisy else ()), *(RESUMABLE_TOOLS if resumable else ()))
        self.resumable = resumable
        self.runs: dict[str, int] = {}
        if page_size < 1:
            raise ValueError("page size must be at least 1")
        self.snapshot = list(tools)  # what was loaded at spawn; never reloaded
        self.bad_tools = bad_tools
        self.tools = list(tools)
        self.descriptions: dict[str, str] = {}
        self.schemas: dict[str, dict[str, Any]] = {}  # name -> inputSchema (a --tools-file catalog)
        self.page_size = page_size
        self.bus = InMemorySubscriptionBus()
        # By default a flood must reach the client, not end its listen stream at the backlog cap.
        self.listen = ListenHandler(self.bus, max_buffered_events=listen_backlog)
        self.server = _ListChangedServer(
            "upstream-test-server",
            version="1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self.listen,
        )

    # -- catalog -------------------------------------------------------------------------------

    def _tool(self, name: str) -> types.Tool:
        if name in _CONTROL_SCHEMAS:
            return types.Tool(name=name, description=f"control tool {name}", input_schema=_CONTROL_SCHEMAS[name])
        return types.Tool(
            name=name,
            description=self.descriptions.get(name, f"echo tool {name}"),
            input_schema=self.schemas.get(name) or {"type": "object", "properties": {"x": {"type": "string"}}},
        )

    def names(self) -> list[str]:
        return [*self.tools, *(c for c in self.control_tools if c not in self.tools)]

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        listed = [self._tool(n) for n in self.names()] + [bad_tool(i) for i in range(self.bad_tools)]
        try:
            start = int(params.cursor) if params is not None and params.cursor else 0
        except ValueError:
            start = len(listed)
        end = start + self.page_size
        return types.ListToolsResult(tools=listed[start:end], next_cursor=str(end) if end < len(listed) else None)

    # -- calls ---------------------------------------------------------------------------------

    async def _announce(self, ctx: ServerRequestContext[Any], count: int = 1) -> None:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            for _ in range(count):
                await self.bus.publish(ToolsListChanged())
        else:
            for _ in range(count):
                await ctx.session.send_tool_list_changed()

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        name = params.name
        if name == "block":
            return await _block(args)
        if name == "crash":
            os._exit(CRASH_EXIT_CODE)
        if name == "flood":
            n = int(args.get("n", 1))
            await self._announce(ctx, n)
            return _text({"tool": name, "sent": n, "pid": os.getpid()})
        if name == "set_tools":
            self.tools = [str(t) for t in args.get("names", [])]
            self.descriptions = {str(k): str(v) for k, v in (args.get("descriptions") or {}).items()}
            await self._announce(ctx)
            return _text({"tool": name, "tools": self.tools, "pid": os.getpid()})
        if name == "progress":
            n = int(args.get("n", 0))
            for i in range(1, n + 1):
                await ctx.session.report_progress(i, n, f"step {i}")
            return _text({"tool": name, "steps": n, "pid": os.getpid()})
        if name == "fail_protocol":
            raise MCPError(-32000, f"{args.get('text', '')} (pid {os.getpid()}, cwd {os.getcwd()})")
        if name == "fail_result":
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=str(args.get("text", "")))], is_error=True
            )
        if name in RESUMABLE_TOOLS and name in self.control_tools:
            return await self._resumable(ctx, name, args)
        if name == "garbage" and name in self.control_tools:
            n = int(args.get("n", 0))
            # Whole lines straight onto the protocol stream, between protocol messages (the SDK
            # points fd 1 at stderr while it serves; the wire is the duplicate taken before).
            os.write(WIRE_FD, b"".join(b"garbage line %d: not json-rpc\n" % i for i in range(n)))
            return _text({"tool": name, "garbage": n})
        if name == "big" and name in self.control_tools:
            size, blocks = int(args.get("bytes", 0)), int(args.get("blocks", 1))
            each = max(size // blocks, 0)
            return types.CallToolResult(content=[types.TextContent(type="text", text="x" * each)] * blocks)
        if name == "noline" and name in self.control_tools:
            size = int(args.get("bytes", 0))
            chunk = b"y" * 65536
            for start in range(0, size, len(chunk)):
                os.write(WIRE_FD, chunk[: min(len(chunk), size - start)])
            return _text({"tool": name, "noline": size})
        if name == "stderr" and name in self.control_tools:
            n, text = int(args.get("n", 0)), str(args.get("text", ""))
            sys.stderr.write("".join(f"{text}\n" for _ in range(n)))
            sys.stderr.flush()
            return _text({"tool": name, "stderr": n})
        if name not in self.tools:
            return types.CallToolResult(content=[types.TextContent(type="text", text="unknown tool")], is_error=True)
        payload = {"tool": name, "args": args, "pid": os.getpid(), "snapshot": self.snapshot}
        traceparent = (params.meta or {}).get("traceparent")
        if traceparent is not None:  # the W3C trace context the caller sent (ADR 0031's hop test)
            payload["traceparent"] = traceparent
        return _text(payload)

    async def _resumable(self, ctx: ServerRequestContext[Any], name: str, args: dict[str, Any]) -> types.CallToolResult:
        self.runs[name] = runs = self.runs.get(name, 0) + 1
        if name == "drop_call":
            await ctx.close_sse_stream()  # the client must resume with Last-Event-ID
            await ctx.session.send_log_message("info", "after drop", logger="up", related_request_id=ctx.request_id)
        elif name == "drop_get":
            if args.get("drop", True):
                await ctx.close_standalone_sse_stream()
            await ctx.session.send_resource_updated(str(args.get("uri", "mem://x")))
        return _text({"tool": name, "runs": runs, "pid": os.getpid()})


async def _block(args: dict[str, Any]) -> types.CallToolResult:
    """Hold the call in flight: until ``release`` exists (then return) or until cancelled (then
    write ``cancelled``, if given, and let the cancellation propagate)."""
    release = str(args["release"]) if args.get("release") else None
    try:
        if args.get("marker"):
            write_pid_file(str(args["marker"]))
        while release is None or not await anyio.Path(release).exists():
            await anyio.sleep(0.02 if release is not None else 3600)  # the test's file: another process
    except anyio.get_cancelled_exc_class():
        if args.get("cancelled"):
            write_pid_file(str(args["cancelled"]))  # synchronous: no checkpoint, nothing to shield
        raise
    return _text({"tool": "block", "released": True, "pid": os.getpid()})


def _text(payload: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload))])


def write_pid_file(path: str | None) -> None:
    """Atomically publish this process's pid (readers never see a partial file)."""
    if path:
        _write_atomically(path, str(os.getpid()))  # also used for block's marker: its content is the pid too


def _write_atomically(path: str, text: str) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, target)


# -- serving -------------------------------------------------------------------------------------


WIRE_FD = 1  # the protocol stream (stdio): a duplicate of the original stdout, see serve_stdio


async def serve_stdio(upstream: UpstreamServer, pid_file: str | None, linger: bool = False) -> None:
    from mcp.server.stdio import stdio_server

    global WIRE_FD
    WIRE_FD = os.dup(1)

    async with stdio_server() as (read, write):
        write_pid_file(pid_file)
        await upstream.server.run(read, write, upstream.server.create_initialization_options())
    if linger:  # stdin closed: a well-behaved server exits here; this one does not
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)  # the scenario: a server that outstays its stdin (its owner must kill it)


def _loopback_security(port: int) -> Any:
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"127.0.0.1:{port}", f"localhost:{port}"],
        allowed_origins=[f"http://127.0.0.1:{port}", f"http://localhost:{port}"],
    )


def build_http_app(upstream: UpstreamServer, port: int) -> Any:
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    from tests.support.event_store import BoundedEventStore

    resumable = getattr(upstream, "resumable", False)  # the relay server (same builder) has none
    manager = StreamableHTTPSessionManager(
        app=upstream.server,
        stateless=False,
        security_settings=_loopback_security(port),
        event_store=BoundedEventStore() if resumable else None,
        retry_interval=50 if resumable else None,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    # A Route, as the SDK's own ``streamable_http_app``: a Mount would answer every POST to
    # ``/mcp`` with a redirect to ``/mcp/`` that the SDK's client follows (two requests per message).
    return Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager))], lifespan=lifespan)


SSE_PATH = "/sse"
SSE_MESSAGES_PATH = "/messages/"


def build_sse_app(upstream: UpstreamServer, port: int) -> Any:
    """``GET /sse`` (event stream; one MCP connection each) + ``POST /messages/`` (client messages)."""
    from mcp.server.sse import SseServerTransport
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    sse = SseServerTransport(SSE_MESSAGES_PATH, security_settings=_loopback_security(port))

    async def handle_sse(request: Request) -> Response:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await upstream.server.run(read, write, upstream.server.create_initialization_options())
        return Response()  # the stream already answered; this only satisfies Starlette

    return Starlette(
        routes=[
            Route(SSE_PATH, endpoint=handle_sse, methods=["GET"]),
            Mount(SSE_MESSAGES_PATH, app=sse.handle_post_message),
        ]
    )


async def serve_http(
    upstream: UpstreamServer,
    port: int,
    pid_file: str | None,
    transport: str = "http",
    port_file: str | None = None,
    keepalive_s: float = 5.0,
) -> None:
    """Serve streamable HTTP (``transport="http"``) or SSE (``"sse"``) on 127.0.0.1:``port``
    (``0``: a port the kernel picks, bound here before anything else, and written to
    ``port_file``: nobody else can take it between choosing and binding)."""
    import socket

    import uvicorn

    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listening socket's proto says TCP; with proto 0, Nagle + delayed ACK add ~40 ms per response
    # (as in api/server.py).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    port = int(sock.getsockname()[1])
    # Listening before uvicorn runs: a connection made from now on waits in the kernel's backlog
    # until uvicorn has run the app's lifespan startup and serves it, so the port and pid files
    # can be written at once (nothing to poll for). asyncio's create_server(sock=...) listens again.
    sock.listen(2048)
    app = build_sse_app(upstream, port) if transport == "sse" else build_http_app(upstream, port)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_keep_alive=keepalive_s)
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        if port_file:
            _write_atomically(port_file, str(port))
        write_pid_file(pid_file)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.support.upstream_server", description=__doc__.splitlines()[0])
    p.add_argument("--transport", choices=("stdio", "http", "sse"), default="stdio")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 for http and sse (0: the kernel picks)")
    p.add_argument("--port-file", help="http and sse: write the port listened on here (before the pid file)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tools", default="", help="comma-separated tool names")
    group.add_argument(
        "--tools-file",
        help="JSON list of tool names, or of {name, description, properties: {param: description}}, read once at spawn",
    )
    p.add_argument("--page-size", type=int, default=100)
    p.add_argument("--pid-file")
    p.add_argument("--bad-tools", type=int, default=0, help="also list N invalid tool definitions")
    p.add_argument("--linger", action="store_true", help="stdio: ignore stdin close and SIGTERM")
    p.add_argument("--noisy", action="store_true", help="also list the garbage and stderr control tools")
    p.add_argument("--resumable", action="store_true", help="http: an event store, and the stream-dropping tools")
    p.add_argument("--keepalive-s", type=float, default=5.0, help="http: close idle keep-alive connections after S s")
    p.add_argument(
        "--era", choices=("both", "legacy"), default="both", help="legacy: refuse server/discover (2025-11-25 only)"
    )
    p.add_argument("--listen-backlog", type=int, default=100_000, help="subscriptions/listen backlog per subscriber")
    args = p.parse_args(argv)
    if args.transport in ("http", "sse") and not args.port and not args.port_file:
        p.error(f"--transport {args.transport} needs --port N, or --port-file PATH to learn the port picked")
    if args.page_size < 1:
        p.error("--page-size must be at least 1")
    return args


def load_tools(args: argparse.Namespace) -> list[str]:
    return load_catalog(args)[0]


def load_catalog(args: argparse.Namespace) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
    """Tool names, descriptions and input schemas: ``--tools`` gives names only; ``--tools-file``
    a JSON list of names or of ``{name, description, properties: {param: description}}``, with
    ``headers: {param: token}`` for string params annotated ``x-mcp-header`` (2026-era routing)."""
    if not args.tools_file:
        return [t for t in (s.strip() for s in args.tools.split(",")) if t], {}, {}
    items = json.loads(Path(args.tools_file).read_text())
    if not isinstance(items, list):
        raise SystemExit("--tools-file must hold a JSON list")
    names: list[str] = []
    descriptions: dict[str, str] = {}
    schemas: dict[str, dict[str, Any]] = {}
    for item in items:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, dict) and isinstance(item.get("name"), str):
            name = item["name"]
            names.append(name)
            if isinstance(item.get("description"), str):
                descriptions[name] = item["description"]
            props = item.get("properties") or {}
            routed = item.get("headers") or {}  # param -> its x-mcp-header token (Mcp-Param-<token>)
            schemas[name] = {
                "type": "object",
                "properties": {
                    str(p): {"type": "string", "description": str(d)}
                    | ({"x-mcp-header": str(routed[p])} if p in routed else {})
                    for p, d in props.items()
                },
            }
        else:
            raise SystemExit("--tools-file items are names or {name, description, properties, headers} objects")
    return names, descriptions, schemas


async def _no_discover(ctx: ServerRequestContext[Any], params: types.RequestParams) -> Any:
    raise MCPError(types.METHOD_NOT_FOUND, "this server speaks only the 2025-11-25 handshake")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names, descriptions, schemas = load_catalog(args)
    upstream = UpstreamServer(
        names,
        page_size=args.page_size,
        bad_tools=args.bad_tools,
        listen_backlog=args.listen_backlog,
        noisy=args.noisy,
        resumable=args.resumable,
    )
    upstream.descriptions.update(descriptions)
    upstream.schemas.update(schemas)
    if args.era == "legacy":  # an auto client (the gateway) falls back to the 2025-11-25 handshake
        upstream.server.add_request_handler("server/discover", types.RequestParams, _no_discover)
    if args.transport == "stdio":
        anyio.run(serve_stdio, upstream, args.pid_file, args.linger)
    else:
        anyio.run(serve_http, upstream, args.port, args.pid_file, args.transport, args.port_file, args.keepalive_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
