"""Tasks: task-augmented ``tools/call`` and ``tasks/get|result|list|cancel`` (2025-11-25; ADR 0016).

A legacy client that calls a tool with ``task`` gets a *gateway* task: the call is resolved and
authorized like any other (I9), started upstream as a task on the source's connection, and
recorded under a fresh id — 24 random bytes, bound to the caller's session. Another session
cannot see, guess or use it: an id that is not the caller's answers exactly like one that never
existed (``unknown_task``). The upstream's own id never reaches the client, and results come
back with the gateway's id in ``_meta["io.modelcontextprotocol/related-task"]``.

``tasks/get``, ``tasks/result`` and ``tasks/cancel`` go to the connection that runs the task, as
operations on the generation it was created on. ``tasks/list`` answers from the session's own
records (the upstream's list would show every session's tasks: the connection is shared),
refreshing the unsettled ones.

A task keeps its generation, and so its connection, alive for its TTL — the client's (default
the operation deadline), capped at ``Bounds.hold_ttl_max_s`` — through a revision hold; the task
table (``task_records``) owns that, the bounds and expiry. A task whose connection ended is
``task_lost``.

A tool that *requires* a task, called without one (every 2026-07-28 client: tasks are not in
that protocol's core, and the SDK implements no tasks extension), is served anyway: the gateway
runs it as an upstream task and returns its result (sync over task), within the operation
deadline; cancelling the call cancels the upstream task. Nothing is advertised that cannot be
served: ``tasks`` only while some source runs tool tasks, and tools a source cannot run as tasks
are filtered when it is listed (``reconciler/task_support.py``)."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from pydantic import ValidationError

from mcp_reconciler.api.errors import to_mcp_error
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.forwarding import call_timeout, connection_lost, forwardable
from mcp_reconciler.api.frontdoor.revisions import DRIFT_META, REVISION_META, choose_generation
from mcp_reconciler.api.frontdoor.sessions import Binding, Sessions
from mcp_reconciler.api.frontdoor.task_records import (
    CANCEL_TIMEOUT_S,
    TASKS_MAX,
    TASKS_PER_SESSION,
    TaskRecord,
    TaskTable,
    task_lost,
    unsupported_task,
)
from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.authority import Authority, Resolved
from mcp_reconciler.reconciler.errors import OperationDeadlineError, UpstreamUnavailableError
from mcp_reconciler.reconciler.model import EntryKind
from mcp_reconciler.reconciler.runtime import LiveGeneration
from mcp_reconciler.reconciler.task_support import required_tool_names, runs_tool_tasks, task_support
from mcp_reconciler.reconciler.upstream import UpstreamConnection
from mcp_reconciler.reconciler.uris import rewrite_result

log = logging.getLogger("mcp_reconciler.frontdoor")

RELATED_TASK_META = "io.modelcontextprotocol/related-task"
_SPEC_META_PREFIX = "io.modelcontextprotocol/"
_PASSED_META = ("io.modelcontextprotocol/model-immediate-response",)

_actions = telemetry.meter.create_counter("frontdoor.tasks", description="Task operations, by action and outcome")

CallNext = Callable[[ServerRequestContext[Any]], Awaitable[Any]]


class Tasks:
    """The task handlers of the front door (contract in the module docstring); run :meth:`run`
    (expiry) in the front door's task group."""

    def __init__(
        self,
        catalog: CatalogAccess,
        authority: Authority,
        sessions: Sessions,
        *,
        builtin: Collection[str] = (),
        per_session: int = TASKS_PER_SESSION,
        max_tasks: int = TASKS_MAX,
    ) -> None:
        self._catalog = catalog
        self._authority = authority
        self._sessions = sessions
        self._builtin = frozenset(builtin)
        self.table = TaskTable(catalog, per_session=per_session, max_tasks=max_tasks)
        self._required: tuple[int, frozenset[str]] = (-1, frozenset())

    # -- what is advertised ----------------------------------------------------------------------

    def supported(self) -> bool:
        """Some source of the current generation runs tool tasks (``tasks`` is advertised)."""
        live = self._catalog.current()
        return live is not None and any(
            isinstance(s.connection, UpstreamConnection)
            and runs_tool_tasks(s.connection.protocol_version, s.connection.capabilities)
            for s in live.generation.sources
        )

    @staticmethod
    def capability() -> types.ServerTasksCapability:
        """What the gateway serves: task-augmented ``tools/call``, ``tasks/list``, ``tasks/cancel``."""
        return types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )

    def runs_as_task(self, name: str) -> bool:
        """O(1) after the first call per revision: whether the current generation's tool
        ``name`` requires a task (then a plain call is served through one)."""
        live = self._catalog.current()
        if live is None:
            return False
        revision, names = self._required
        if revision != live.revision:
            names = required_tool_names(live.generation)
            self._required = (live.revision, names)
        return name in names

    # -- creating ----------------------------------------------------------------------------------

    @staticmethod
    def creates_task(ctx: ServerRequestContext[Any]) -> bool:
        """Whether ``ctx`` is a 2025-11-25 ``tools/call`` with ``task`` (a gateway task, :meth:`create`;
        ``task`` is not a 2026-07-28 field: there the call runs as usual)."""
        raw, legacy = ctx.params, str(ctx.protocol_version).startswith("2025")
        return ctx.method == "tools/call" and isinstance(raw, Mapping) and raw.get("task") is not None and legacy

    async def create(self, ctx: ServerRequestContext[Any]) -> Any:
        """Start the gateway task of a request :meth:`creates_task` accepts and answer its wire
        ``CreateTaskResult`` (answered here: the SDK would sieve a ``CreateTaskResult`` as a
        ``CallToolResult``)."""
        try:
            params = types.CallToolRequestParams.model_validate(ctx.params, by_name=False)
        except ValidationError:
            raise MCPError(types.INVALID_PARAMS, "Invalid request parameters") from None
        if params.name in self._builtin:
            raise unsupported_task()
        created = await self._create(ctx, params)
        return created.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def _create(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        binding = self._sessions.binding(ctx)
        sid = binding.session.id
        self.table.check_room(sid)
        live, resolved, conn = self._route(ctx, binding, params.name, params.meta)
        if task_support(resolved.entry) == "forbidden" or not runs_tool_tasks(conn.protocol_version, conn.capabilities):
            raise unsupported_task()
        requested = params.task.ttl if params.task is not None and params.task.ttl else None
        ttl_s = min(requested / 1000 if requested else self._catalog.operation_deadline_s, self._catalog.hold_ttl_max_s)
        task_id = secrets.token_urlsafe(24)
        try:
            self.table.keeps.acquire(live.revision, ttl_s, task_id)
        except Exception as exc:
            raise to_mcp_error(exc, revision=live.revision) from None
        try:
            async with live.operation(deadline_s=self._catalog.operation_deadline_s):
                created = await self._start(conn, resolved, params, int(ttl_s * 1000))
        except BaseException as exc:
            self.table.keeps.release(live.revision, task_id)
            _actions.add(1, {"action": "create", "outcome": "error"})
            if isinstance(exc, Exception):
                raise self._client_error(exc, conn, live.revision) from None
            raise
        if isinstance(created, types.CallToolResult):  # the upstream ran it as an ordinary call
            self.table.keeps.release(live.revision, task_id)
            return self._finish(created, live.revision, resolved.drifted, conn)
        up = created.task
        record = TaskRecord(
            id=task_id,
            session_id=sid,
            source=resolved.entry.source,
            upstream_id=up.task_id,
            conn=conn,
            revision=live.revision,
            drifted=resolved.drifted,
            expires_at=anyio.current_time() + ttl_s,
            ttl_ms=int(ttl_s * 1000),
            created_at=up.created_at,
            last_updated_at=up.last_updated_at,
            status=up.status,
        )
        record.update(up)
        self.table.add(record, binding)
        _actions.add(1, {"action": "create", "outcome": "ok"})
        meta = {k: v for k, v in (created.meta or {}).items() if k in _PASSED_META}
        return types.CreateTaskResult(task=record.view(), _meta={**meta, REVISION_META: live.revision})

    async def _start(
        self, conn: UpstreamConnection, resolved: Resolved, params: types.CallToolRequestParams, ttl_ms: int
    ) -> types.CreateTaskResult | types.CallToolResult:
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name=resolved.entry.upstream_name,
                arguments=params.arguments,
                task=types.TaskMetadata(ttl=ttl_ms),
                _meta=forwardable(params.meta),
            )
        )
        headers = resolved.entry.call_headers(params.arguments)  # Mcp-Param-* (2026 wire)
        raw = await conn.send_raw(request, timeout_s=call_timeout(conn), param_headers=headers)
        try:
            if "task" in raw:
                return types.CreateTaskResult.model_validate(raw, by_name=False)
            return types.CallToolResult.model_validate(raw, by_name=False)
        except ValidationError:
            raise MCPError(types.INTERNAL_ERROR, "the upstream's task result is invalid") from None

    async def call_required(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, plain: CallNext
    ) -> types.CallToolResult:
        """A plain call of a tool that requires a task: run as an upstream task, answered with
        its result. ``plain(ctx)`` serves the call when the resolved tool turns out not to."""
        binding = self._sessions.binding(ctx)
        live, resolved, conn = self._route(ctx, binding, params.name, params.meta)
        if task_support(resolved.entry) != "required":
            result: types.CallToolResult = await plain(ctx)
            return result
        deadline = self._catalog.operation_deadline_s
        try:
            async with live.operation(deadline_s=deadline):
                created = await self._start(conn, resolved, params, int(deadline * 1000))
                if isinstance(created, types.CallToolResult):
                    result = created
                else:
                    result = await self._await_result(conn, created.task.task_id)
        except Exception as exc:
            _actions.add(1, {"action": "call_through_task", "outcome": "error"})
            raise self._client_error(exc, conn, live.revision) from None
        _actions.add(1, {"action": "call_through_task", "outcome": "ok"})
        return self._finish(result, live.revision, resolved.drifted, conn)

    async def _await_result(self, conn: UpstreamConnection, upstream_id: str) -> types.CallToolResult:
        request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=upstream_id))
        try:
            return await conn.send(request, types.CallToolResult, timeout_s=call_timeout(conn))
        except BaseException:
            # The caller gave up (cancel, deadline) or the wait failed: do not leave the work running.
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_TIMEOUT_S):
                cancel = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=upstream_id))
                try:
                    await conn.send(cancel, types.CancelTaskResult, timeout_s=CANCEL_TIMEOUT_S)
                except Exception:
                    log.info("upstream %s: cancelling an abandoned task failed", conn.source)
            raise

    # -- tasks/* --------------------------------------------------------------------------------------

    async def get_task(self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams) -> types.GetTaskResult:
        """``tasks/get``: the task's current state, from its upstream."""
        record = self._own(ctx, params.task_id)
        request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=record.upstream_id))
        task = await self._upstream(record, "get", request, types.GetTaskResult)
        self.table.observe(record, task)
        return types.GetTaskResult(**record.view().model_dump())

    async def task_result(self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams) -> Any:
        """``tasks/result``: waits for the task to settle and answers with its tool result."""
        record = self._own(ctx, params.task_id)
        request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=record.upstream_id))
        timeout = max(1.0, record.expires_at - anyio.current_time())
        result = await self._upstream(record, "result", request, types.CallToolResult, timeout_s=timeout)
        self.table.settle(record)
        return self._finish(result, record.revision, record.drifted, record.conn, related=record.id)

    async def cancel_task(
        self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams
    ) -> types.CancelTaskResult:
        """``tasks/cancel``: cancels the upstream task; answers its state."""
        record = self._own(ctx, params.task_id)
        request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=record.upstream_id))
        task = await self._upstream(record, "cancel", request, types.CancelTaskResult)
        self.table.observe(record, task)
        self.table.settle(record)
        return types.CancelTaskResult(**record.view().model_dump())

    async def list_tasks(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams
    ) -> types.ListTasksResult:
        """``tasks/list``: the caller's tasks only (one page: at most ``per_session``)."""
        self._legacy_only(ctx)
        if params.cursor:
            raise MCPError(types.INVALID_PARAMS, "invalid cursor", {"code": "invalid_cursor"})
        records = self.table.of_session(self._sessions.binding(ctx).session.id)

        async def refresh(record: TaskRecord) -> None:
            request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=record.upstream_id))
            with contextlib.suppress(MCPError):  # on failure: listed as last known
                self.table.observe(record, await self._upstream(record, "get", request, types.GetTaskResult))

        async with anyio.create_task_group() as tg:
            for record in records:
                if not record.settled:
                    tg.start_soon(refresh, record)
        return types.ListTasksResult(tasks=[r.view() for r in records])

    def _own(self, ctx: ServerRequestContext[Any], task_id: str) -> TaskRecord:
        self._legacy_only(ctx)
        return self.table.own(self._sessions.binding(ctx).session.id, task_id)

    @staticmethod
    def _legacy_only(ctx: ServerRequestContext[Any]) -> None:
        if not str(ctx.protocol_version).startswith("2025"):
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found")

    async def _upstream(
        self, record: TaskRecord, action: str, request: Any, result_type: type[Any], timeout_s: float | None = None
    ) -> Any:
        """One request about ``record`` on its connection, as an operation on its generation."""
        live = self._generation_of(record)
        deadline = timeout_s or self._catalog.operation_deadline_s
        try:
            async with live.operation(deadline_s=deadline):
                result = await record.conn.send(request, result_type, timeout_s=timeout_s or call_timeout(record.conn))
        except Exception as exc:
            _actions.add(1, {"action": action, "outcome": "error"})
            if (
                isinstance(exc, MCPError)
                and exc.error.code == types.INVALID_PARAMS
                and not connection_lost(exc, record.conn)
            ):
                # The upstream no longer knows the task (expired) or refuses it in its state.
                raise MCPError(
                    types.INVALID_PARAMS, "the task cannot do that now", {"code": "invalid_task_state"}
                ) from None
            raise self._client_error(exc, record.conn, record.revision) from None
        _actions.add(1, {"action": action, "outcome": "ok"})
        return result

    def _generation_of(self, record: TaskRecord) -> LiveGeneration:
        """The task's generation, or a newer one served by the same connection; else the task is
        lost (its connection is gone with its generation)."""
        if record.conn.alive:
            try:
                return self._catalog.get(record.revision)
            except Exception:
                live = self._catalog.current()
                state = live.generation.source_state(record.source) if live is not None else None
                if live is not None and state is not None and state.connection is record.conn:
                    return live
        raise task_lost()

    def _finish(
        self,
        result: types.CallToolResult,
        revision: int,
        drifted: bool,
        conn: UpstreamConnection,
        related: str | None = None,
    ) -> types.CallToolResult:
        result = rewrite_result(result, conn.spec.uri_prefix)
        meta: dict[str, Any] = {k: v for k, v in (result.meta or {}).items() if not k.startswith(_SPEC_META_PREFIX)}
        meta[REVISION_META] = revision
        if drifted:
            meta[DRIFT_META] = True
        if related is not None:
            meta[RELATED_TASK_META] = {"taskId": related}
        return result.model_copy(update={"meta": meta})

    def _route(
        self, ctx: ServerRequestContext[Any], binding: Binding, name: str, meta: Mapping[str, Any] | None
    ) -> tuple[LiveGeneration, Resolved, UpstreamConnection]:
        live = choose_generation(self._catalog, ctx, binding.session, meta)
        try:
            resolved = self._authority.resolve(binding.session, live.generation, EntryKind.TOOL, name)
            state = live.generation.source_state(resolved.entry.source)
            conn = state.connection if state is not None else None
            if not isinstance(conn, UpstreamConnection) or not conn.alive:
                raise UpstreamUnavailableError()
        except Exception as exc:
            raise to_mcp_error(exc, revision=live.revision) from None
        return live, resolved, conn

    @staticmethod
    def _client_error(exc: Exception, conn: Any, revision: int) -> MCPError:
        if isinstance(exc, MCPError) and exc.error.code == types.REQUEST_TIMEOUT:
            return to_mcp_error(OperationDeadlineError(call_timeout(conn) or 0.0), revision=revision)
        if isinstance(exc, MCPError) and connection_lost(exc, conn):
            return to_mcp_error(UpstreamUnavailableError(), revision=revision)
        return to_mcp_error(exc, revision=revision)

    # -- lifetime ---------------------------------------------------------------------------------------

    def forget(self, session_id: str) -> None:
        """A session was deleted: its tasks go (unsettled ones are cancelled upstream)."""
        self.table.forget(session_id)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Task expiry (see ``task_records``); run it in the front door's task group."""
        await self.table.run(task_status=task_status)
