"""The front door assembled: its parts, wired once, and the SDK ``Server`` that describes them
(its registered handlers give the capabilities, its options the handshake; the data plane,
``api/plane``, serves every request — the SDK server's own pipeline is never run).

Wiring flows one way. Every part gets what it reads at construction — the engine through one
:class:`~mcp_reconciler.api.frontdoor.catalog.CatalogAccess`, the authority, the session table —
and nothing is assigned into a part afterwards, with one narrow exception: the HTTP layer, which
is built *from* the front door's server, hands back a
:class:`~mcp_reconciler.api.frontdoor.notify.PushGate` (:meth:`FrontDoor.gate_pushes`). The
front door never sees the HTTP session manager, the Starlette app or the engine's internals.

A new capability lands as a new part: a module with a class that takes what it reads in its
constructor and exposes handlers, registered on the server here."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPDeprecationWarning
from mcp.server import NotificationOptions, Server, ServerRequestContext

from mcp_reconciler.api.frontdoor.approvals import task_refused
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.completion import Completer
from mcp_reconciler.api.frontdoor.control_tools import ControlTools, RefreshFn, StatusFn
from mcp_reconciler.api.frontdoor.exchanges import Exchanges
from mcp_reconciler.api.frontdoor.forwarding import Forwarder
from mcp_reconciler.api.frontdoor.listing import Listing
from mcp_reconciler.api.frontdoor.logs import LogRelay
from mcp_reconciler.api.frontdoor.notify import Notifier, PushGate
from mcp_reconciler.api.frontdoor.observe import OperationObserver
from mcp_reconciler.api.frontdoor.pages import ListCache, freeze_after_publication
from mcp_reconciler.api.frontdoor.passthrough import RawResult
from mcp_reconciler.api.frontdoor.relay import Relay
from mcp_reconciler.api.frontdoor.search import FindTools
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.api.frontdoor.subscriptions import ResourceSubscriptions
from mcp_reconciler.api.frontdoor.tasks import Tasks
from mcp_reconciler.api.oauth.identity import GrantSet
from mcp_reconciler.api.version import __version__
from mcp_reconciler.reconciler.authority import Authority
from mcp_reconciler.reconciler.engine import Engine

#: Adjusts the capabilities the SDK derives from the registered handlers: ``(capabilities,
#: protocol_version)`` → what to advertise (``protocol_version`` is ``None`` at the 2025 handshake).
CapabilitiesHook = Callable[[types.ServerCapabilities, str | None], types.ServerCapabilities]


class GatewayServer(Server[Any]):
    """Advertises ``listChanged`` for tools, resources and prompts to legacy clients, even when
    the transport asks for initialization options without arguments (SDK pitfall), and lets the
    front door say what it can serve right now (``capabilities``: e.g. ``resources.subscribe``
    only while some source offers subscriptions)."""

    def __init__(self, *args: Any, capabilities: CapabilitiesHook | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._capabilities_hook = capabilities

    def get_capabilities(
        self, *args: Any, protocol_version: str | None = None, **kwargs: Any
    ) -> types.ServerCapabilities:
        """The SDK's derivation, adjusted by the front door's hook (both eras: the handshake's
        ``initialize`` and ``server/discover`` both come here)."""
        caps = super().get_capabilities(*args, protocol_version=protocol_version, **kwargs)
        return self._capabilities_hook(caps, protocol_version) if self._capabilities_hook is not None else caps

    def create_initialization_options(
        self, notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        """The SDK's options, with every ``list_changed`` advertised unless the caller says otherwise."""
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True),
            *args,
            **kwargs,
        )


class FrontDoor:
    """One downstream MCP server over the engine, for both protocol eras. Serve :attr:`server`
    on a transport and run :meth:`run` (the notifier) beside it in the same task group; every
    result carries the revision it came from, and every session sees exactly its grants.

    Over HTTP every request carries the identity the HTTP layer accepted (``api/mcp_auth.py``);
    on stdio and in memory the caller is the local user, granted per ``local`` (default: the
    policy ``current``). Sessions removed from the authority (API delete, config reload) lose
    their bindings at once; grants changed outside a request re-evaluate every view."""

    def __init__(
        self,
        engine: Engine,
        authority: Authority,
        *,
        local: GrantSet | None = None,
        local_view: str | None = None,
        expose_control_tools: bool = False,
        status: StatusFn | None = None,
        refresh: RefreshFn | None = None,
        served_names_max: int = 200,
    ) -> None:
        self.authority = authority
        self.catalog = CatalogAccess(engine)
        self.sessions = Sessions(self.catalog, authority, local=local or GrantSet("current"), local_view=local_view)
        self.notifier = Notifier(self.catalog, authority, self.sessions.bindings)
        self.control = ControlTools(self.catalog, status=status, refresh=refresh) if expose_control_tools else None
        self.find_tools = FindTools(self.catalog, authority, self.sessions, self.notifier)  # search mode
        self.listing = Listing(
            self.catalog,
            authority,
            self.sessions,
            extra_tools=self.control.tools if self.control else (),
            may_use_extra=self.may_use_control_tools,
            search_tool=self.find_tools.tool,
        )
        # The relay: what upstreams start while serving a call (sampling, elicitation, roots,
        # log records) reaches the session that made the call (I17). Attached to the engine
        # while :meth:`run` runs.
        self.logs = LogRelay(self.catalog, self.sessions, can_push=self.notifier.can_push)
        self.relay = Relay(on_log=self.logs.deliver, bindings=self.sessions.bindings)
        self.exchanges = Exchanges(self.relay, deadline_s=self.catalog.operation_deadline_s)
        self.forwarder = Forwarder(
            self.catalog,
            authority,
            self.sessions,
            relay=self.relay,
            exchanges=self.exchanges,
            logs=self.logs,
            limiter=engine.limiter,
            observer=OperationObserver(served_names_max),  # per-name metrics, trace context, audit
        )
        self.completer = Completer(self.forwarder)
        self.subscriptions = ResourceSubscriptions(self.catalog, authority, self.sessions, self.notifier)
        self.tasks = Tasks(
            self.catalog, authority, self.sessions, builtin=self.control.names if self.control else frozenset()
        )
        with warnings.catch_warnings():
            # Registering logging/setLevel is how the SDK advertises ``logging``; it warns that
            # the feature is deprecated in 2026-07-28, where clients opt in per request instead.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            self.server = GatewayServer(
                "mcp-reconciler",
                version=__version__,
                instructions="A gateway over several MCP servers; names are <source>__<name>.",
                on_list_tools=self.listing.list_tools,
                on_call_tool=self.call_tool,
                on_list_resources=self.listing.list_resources,
                on_list_resource_templates=self.listing.list_templates,
                on_read_resource=self.forwarder.read_resource,
                on_subscribe_resource=self.subscriptions.subscribe,
                on_unsubscribe_resource=self.subscriptions.unsubscribe,
                on_list_prompts=self.listing.list_prompts,
                on_get_prompt=self.forwarder.get_prompt,
                on_subscriptions_listen=self.listen,
                on_completion=self.completer.complete,
                on_set_logging_level=self.logs.set_level,
                # O(1) schema lookup for the SDK's per-call header check in the 2026 era; without
                # it the SDK runs our whole tools/list (O(granted names)) before every call.
                get_tool_input_schema=self.listing.tool_input_schema,
                capabilities=self._capabilities,
            )
        # List pages served from cached wire dicts, the heap frozen after each publication (ADR 0019).
        self.list_cache = ListCache(
            self.catalog,
            authority,
            self.sessions,
            show_extra=(lambda b: self.control is not None and self.may_use_control_tools(b)),
        )
        self.notifier.grant_key = self.list_cache.grant_digest  # equal grant sets share a view per pass
        self.server.add_request_handler("tasks/get", types.GetTaskRequestParams, self.tasks.get_task)
        self.server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self.tasks.task_result)
        self.server.add_request_handler("tasks/list", types.PaginatedRequestParams, self.tasks.list_tasks)
        self.server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self.tasks.cancel_task)
        # Subscribed for the front door's lifetime (it lives as long as the engine it serves).
        authority.on_removed(self.forget_session)
        authority.on_changed(self.touch)
        authority.on_in_use(self.sessions.connected)  # an open MCP connection keeps its session

    @staticmethod
    def may_use_control_tools(binding: Binding) -> bool:
        """Whether ``binding``'s identity may list and call the built-in control tools: the local
        user, or a session an operator (or the config) gave the ``control_tools`` flag."""
        return binding.control_tools or binding.session.control_tools

    @property
    def bindings(self) -> Mapping[str, Binding]:
        """Every downstream identity currently bound, by binding key (read-only view)."""
        return self.sessions.bindings

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The per-session notifier, the relay's exchanges and log pumps, the resource
        subscriptions and task expiry; run it in the owner's task group for the server's
        lifetime. While it runs, the front door answers what upstream servers start (the relay
        is attached to the engine)."""
        detach = self.catalog.attach_peer(self.relay)
        unsubscribe = self.catalog.on_publish(freeze_after_publication)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(self.exchanges.run)
                await tg.start(self.logs.run)
                await tg.start(self.subscriptions.run)
                await tg.start(self.tasks.run)
                await self.notifier.run(task_status=task_status)
        finally:
            unsubscribe()
            detach()

    def gate_pushes(self, gate: PushGate) -> None:
        """Called once by the HTTP layer: hold legacy pushes until ``gate`` reports the client's
        GET stream open (see ``notify``)."""
        self.notifier.gate_pushes(gate)

    def touch(self) -> None:
        """Re-evaluate every session's view now (after grants change outside a publication)."""
        self.notifier.touch()
        self.subscriptions.touch()

    def forget_session(self, session_id: str) -> None:
        """Drop every binding of a session that was deleted (its token no longer authenticates),
        closing their listen streams."""
        for key in self.sessions.forget(session_id):
            self.notifier.drop(key)
            self.subscriptions.forget(key)
        self.tasks.forget(session_id)

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, *, raw: bool = False
    ) -> types.CallToolResult | types.InputRequiredResult | RawResult:
        """``tools/call``: ``find_tools`` and the control tools are answered here, a tool that
        runs only as a task through ``tasks``, everything else is forwarded (``raw``: its
        result may be the upstream's JSON, ``Forwarder.call_tool``)."""
        if params.name == self.find_tools.name:
            binding = self.sessions.binding(ctx)
            if self.find_tools.shown(binding):
                return await self.find_tools.call(ctx, binding, params.arguments)
        if self.control is not None and params.name in self.control.names:
            binding = self.sessions.binding(ctx)
            if self.may_use_control_tools(binding):
                return await self.control.call(params.name, operator=binding.operator)
            # Not allowed: the same answer as a name that does not exist (ungranted = unknown).
        elif self.tasks.runs_as_task(params.name):  # a tool that requires a task, called plainly
            self._no_task_if_approval(ctx, params.name)
            return await self.tasks.call_required(ctx, params, lambda c: self.forwarder.call_tool(c, params))
        return await self.forwarder.call_tool(ctx, params, raw=raw)

    async def create_task(self, ctx: ServerRequestContext[Any]) -> Any:
        """A 2025-era task-augmented ``tools/call`` (``Tasks.creates_task``) as a gateway task
        (``Tasks.create``), refused for a tool that needs an approval (the data plane's
        dispatcher sends every such request here)."""
        self._no_task_if_approval(ctx, str(ctx.params.get("name")))  # type: ignore[union-attr]
        return await self.tasks.create(ctx)

    def _no_task_if_approval(self, ctx: ServerRequestContext[Any], name: str) -> None:
        # Tasks run outside the forwarding operation the approval hook sits in (ADR 0034): a
        # tool that needs an approval never runs as one, so no task path can skip the approval.
        if self.forwarder.approvals.needed(self.sessions.binding(ctx), name):
            raise task_refused(name)

    async def listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen`` (2026-07-28): the caller's change stream, with its resource
        subscriptions held while it is open."""
        binding = self.sessions.binding(ctx)
        async with self.subscriptions.listening(binding, params) as held:  # resource subscriptions
            return await self.notifier.listen(binding, ctx, held)

    def _capabilities(self, caps: types.ServerCapabilities, protocol_version: str | None) -> types.ServerCapabilities:
        if caps.resources is not None:
            resources = caps.resources.model_copy(update={"subscribe": self.subscriptions.supported()})
            caps = caps.model_copy(update={"resources": resources})
        legacy = protocol_version is None or protocol_version.startswith("2025")
        if legacy and self.tasks.supported():  # tasks are not in the 2026-07-28 core (ADR 0016)
            caps = caps.model_copy(update={"tasks": self.tasks.capability()})
        return caps
