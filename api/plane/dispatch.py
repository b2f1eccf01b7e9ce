"""The dispatcher: JSON-RPC method → the front door operation that answers it, one table for
every era and transport the plane serves.

Each :class:`Route` names the ``mcp_types`` params model the method's params are validated
against and the front door operation that runs it (forwarding with pins and authority, listing,
completion, subscriptions, logging, tasks, the control tools — ``api/frontdoor``); the
dispatcher adds nothing of its own to an operation. Per request it:

1. refuses a method the protocol version does not define, or the gateway does not serve, with
   ``METHOD_NOT_FOUND`` (``-32601``, HTTP 404);
2. checks the params against the version's surface (``mcp_types.methods``) and the route's
   model — a mismatch is ``INVALID_PARAMS`` with no validator text on the wire (I12);
3. runs the operation with a :class:`~mcp.server.ServerRequestContext` the plane built (public
   SDK constructors: the operations take that type), and
4. shapes the result for the wire: the version's result surface (``serialize_server_result``),
   ``resultType`` on every 2026-era result, the ``serverInfo`` stamp (spec #3002). A
   ``tools/call`` result the upstream sent in the simple form (``passthrough.simple_call_result``:
   text content, structured content, the error flag) stays the upstream's JSON: it is already
   its wire form, so no model is built to be dumped again (ADR 0038's profile).

Errors leave as ``MCPError``/``ValidationError``; :func:`error_data` maps them, and anything else
becomes a bare ``INTERNAL_ERROR`` with the cause in the log (I12)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import DispatchContext
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp_types import methods
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, ValidationError

from mcp_reconciler.api.frontdoor.link import LinkedContext
from mcp_reconciler.api.frontdoor.pages import LIST_METHODS
from mcp_reconciler.api.frontdoor.passthrough import RawResult
from mcp_reconciler.api.plane import jsonrpc

if TYPE_CHECKING:
    from mcp_reconciler.api.frontdoor import FrontDoor

log = logging.getLogger("mcp_reconciler.plane")

Handler = Callable[[ServerRequestContext[Any], Any], Awaitable[Any]]

#: The ``_meta`` key of the server's identity on 2026-era results (spec #3002).
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
_CORE_RESULT_TYPES = frozenset({"complete", "input_required"})


@dataclass(frozen=True, slots=True)
class Route:
    """One method: the params model its params validate as, and the operation that answers it."""

    params: type[BaseModel]
    handler: Handler


def _modern(version: str) -> bool:
    return version in MODERN_PROTOCOL_VERSIONS


class Dispatcher:
    """The method table of one front door (module docstring)."""

    def __init__(self, front: FrontDoor) -> None:
        self._front = front
        listing, forwarder = front.listing, front.forwarder
        self.routes: Mapping[str, Route] = {
            "ping": Route(types.RequestParams, self._ping),
            "server/discover": Route(types.RequestParams, self._discover),
            "tools/list": Route(types.PaginatedRequestParams, listing.list_tools),
            "tools/call": Route(types.CallToolRequestParams, partial(front.call_tool, raw=True)),
            "resources/list": Route(types.PaginatedRequestParams, listing.list_resources),
            "resources/templates/list": Route(types.PaginatedRequestParams, listing.list_templates),
            "resources/read": Route(types.ReadResourceRequestParams, forwarder.read_resource),
            "resources/subscribe": Route(types.SubscribeRequestParams, front.subscriptions.subscribe),
            "resources/unsubscribe": Route(types.UnsubscribeRequestParams, front.subscriptions.unsubscribe),
            "prompts/list": Route(types.PaginatedRequestParams, listing.list_prompts),
            "prompts/get": Route(types.GetPromptRequestParams, forwarder.get_prompt),
            "completion/complete": Route(types.CompleteRequestParams, front.completer.complete),
            "logging/setLevel": Route(types.SetLevelRequestParams, front.logs.set_level),
            "subscriptions/listen": Route(types.SubscriptionsListenRequestParams, front.listen),
            "tasks/get": Route(types.GetTaskRequestParams, front.tasks.get_task),
            "tasks/result": Route(types.GetTaskPayloadRequestParams, front.tasks.task_result),
            "tasks/list": Route(types.PaginatedRequestParams, front.tasks.list_tasks),
            "tasks/cancel": Route(types.CancelTaskRequestParams, front.tasks.cancel_task),
        }

    async def request(self, ctx: ServerRequestContext[Any]) -> dict[str, Any]:
        """Run ``ctx``'s request to its wire result (steps 1-4 of the module docstring), with the
        front door's per-request duties entered here, in order (each a call or a context manager
        that has returned before the operation runs, not a layer around it): the caller's gateway
        session is in use while it runs (``Sessions.in_use``, ADR 0032); a 2025-era
        task-augmented ``tools/call`` becomes a gateway task, never for a tool that needs an
        approval (``FrontDoor.create_task``, ADR 0034); a list page is served from the front
        door's page cache when it holds one for exactly this request (``ListCache``: keyed by era,
        revision, grant set, view, cursor), else built and kept there."""
        front = self._front
        with front.sessions.in_use(ctx):
            if front.tasks.creates_task(ctx):
                created: dict[str, Any] = await front.create_task(ctx)
                return created
            if ctx.method in LIST_METHODS:
                page: dict[str, Any] = await front.list_cache(ctx, self._run_encoded)
                return page
            return await self._run(ctx)

    async def _run_encoded(self, ctx: ServerRequestContext[Any]) -> dict[str, Any]:
        """A list page with its JSON, so the cached page is never encoded again (ADR 0038)."""
        return await jsonrpc.EncodedResult.of(await self._run(ctx))

    async def _run(self, ctx: ServerRequestContext[Any]) -> dict[str, Any]:
        method, version, params = ctx.method, ctx.protocol_version, ctx.params
        route = self.routes.get(method)
        if method in methods.SPEC_CLIENT_METHODS:
            try:
                methods.validate_client_request(method, version, params)
            except KeyError:
                route = None  # not a method of this protocol version
        if route is None:
            raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found", data=method)
        typed = route.params.model_validate({} if params is None else params, by_name=False)
        result = await route.handler(ctx, typed)
        return self.wire_result(method, version, result)

    def wire_result(self, method: str, version: str, result: Any) -> dict[str, Any]:
        """``result`` shaped for the wire at ``version`` (step 4)."""
        passthrough = isinstance(result, RawResult)
        if isinstance(result, BaseModel):
            dumped: dict[str, Any] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif isinstance(result, RawResult):  # already the wire form at every version but resultType
            dumped = {k: v for k, v in result.data.items() if k != "resultType"}
            dumped.setdefault("isError", False)  # the model's default, always on the wire
        elif result is None:
            dumped = {}
        else:
            dumped = dict(result)
        kind = dumped.get("resultType")
        core = not _modern(version) or not isinstance(kind, str) or kind in _CORE_RESULT_TYPES
        if method in methods.SPEC_CLIENT_METHODS and core and not passthrough:
            try:
                dumped = methods.serialize_server_result(method, version, dumped)
            except ValidationError:
                log.exception("the gateway's %s result does not fit protocol %s", method, version)
                raise MCPError(code=types.INTERNAL_ERROR, message="Handler returned an invalid result") from None
        if _modern(version):
            dumped.setdefault("resultType", "complete")
            meta = dumped.get("_meta")
            if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META) is None):
                dumped["_meta"] = {**(meta or {}), SERVER_INFO_META: self._front.server.server_info_stamp}
        return dumped

    def initialize(self, connection: Connection, params: types.InitializeRequestParams) -> dict[str, Any]:
        """The handshake (2025 era, HTTP and stdio): commit the client's params and the negotiated
        version (the client's when the gateway speaks it, else the latest) to ``connection`` and
        return the wire ``InitializeResult`` with the front door's capabilities."""
        asked = params.protocol_version
        version = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
        connection.client_params = params
        connection.protocol_version = version
        options = self._front.server.create_initialization_options()
        result = types.InitializeResult(
            protocol_version=version,
            capabilities=options.capabilities,
            server_info=types.Implementation(name=options.server_name, version=options.server_version or ""),
            instructions=options.instructions,
        )
        return self.wire_result("initialize", version, result)

    async def _ping(self, ctx: ServerRequestContext[Any], params: Any) -> types.EmptyResult:
        return types.EmptyResult()

    async def _discover(self, ctx: ServerRequestContext[Any], params: Any) -> types.DiscoverResult:
        server = self._front.server
        return types.DiscoverResult(
            supported_versions=list(MODERN_PROTOCOL_VERSIONS),
            capabilities=server.get_capabilities(protocol_version=ctx.protocol_version),
            instructions=server.instructions,
        )


def request_meta(params: Mapping[str, Any] | None) -> types.RequestParamsMeta | None:
    """The request's ``_meta`` as the operations read it; ``None`` when absent or malformed (the
    params check answers a malformed one)."""
    if not params or "_meta" not in params:
        return None
    try:  # only ``_meta``: the rest of the params is the route's to validate (RequestParams has no other field)
        return types.RequestParams.model_validate({"_meta": params["_meta"]}, by_name=False).meta
    except ValidationError:
        return None


def context(
    outbound: DispatchContext[Any],
    connection: Connection,
    method: str,
    params: Mapping[str, Any] | None,
    request_id: types.RequestId | None,
    request: Any,
) -> ServerRequestContext[Any]:
    """The context the front door's operations take, built from public SDK constructors and
    naming its connection and back-channel (``LinkedContext``, ``api/frontdoor/link.py``):
    ``outbound`` is this request's channel back to its client, ``request`` the HTTP request
    (``None`` on stdio: the caller is the local user)."""
    meta = request_meta(params)
    session = ServerSession(outbound, connection, request_meta=meta if request_id is not None else None)
    return LinkedContext(
        session=session,
        lifespan_context=None,
        protocol_version=connection.protocol_version,
        method=method,
        params=params,
        request_id=request_id,
        meta=meta,
        request=request,
        connection=connection,
        channel=outbound,
    )


def error_data(exc: Exception) -> types.ErrorData:
    """The wire error of an operation's exception: its own ``ErrorData``, ``INVALID_PARAMS`` for
    a validation failure, else a bare ``INTERNAL_ERROR`` (the cause goes to the log, I12)."""
    error = handler_exception_to_error_data(exc)
    if error is not None:
        return error
    log.exception("a request failed inside the gateway")
    return types.ErrorData(code=types.INTERNAL_ERROR, message="Internal server error")
