"""The gateway's task table: who owns each task, what keeps it alive, and when it goes (ADR 0016).

A :class:`TaskRecord` is one gateway task: a fresh id (24 random bytes) bound to the session that
created it, the upstream task id and the connection that runs it, the generation it was created
on, and what the client was last told. Lookups are by (session, id): an id of another session is
indistinguishable from one that never existed.

What a task keeps alive: its generation — and so its connection (I4) — through a revision hold
for the task's TTL (:class:`RevisionKeeps`): one hold per revision, shared by all its tasks,
renewed (a new hold, then the old one released) when a later expiry needs it, released when the
revision's last task settles or expires. Holds count against the engine's hold bounds, so tasks
cannot keep more revisions open than holds may (I5).

Lifetime: a record lasts until its TTL ends (expired by :meth:`TaskTable.run`), or until its
session goes — a legacy connection's own session ends with the connection; a deleted session is
forgotten by the front door — and then unsettled tasks are cancelled upstream, best effort.
Bounds (I18): ``per_session`` records per session and ``max_tasks`` in all."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import anyio
import mcp_types as types
from mcp import MCPError

from mcp_reconciler.api.frontdoor import link
from mcp_reconciler.api.frontdoor.catalog import CatalogAccess
from mcp_reconciler.api.frontdoor.sessions import Binding
from mcp_reconciler.reconciler.upstream import UpstreamConnection

log = logging.getLogger("mcp_reconciler.frontdoor")

TASKS_PER_SESSION = 64
TASKS_MAX = 4096
CANCEL_TIMEOUT_S = 5.0
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass(eq=False)
class TaskRecord:
    """One gateway task: whose it is, where it runs, and what the client was last told."""

    id: str
    session_id: str
    source: str
    upstream_id: str
    conn: UpstreamConnection
    revision: int
    drifted: bool
    expires_at: float  # anyio clock
    ttl_ms: int
    created_at: str
    last_updated_at: str
    status: str
    status_message: str | None = None
    poll_interval: int | None = None
    settled: bool = False

    def view(self) -> types.Task:
        """The task as the client sees it: the gateway's id, never the upstream's."""
        return types.Task(
            task_id=self.id,
            status=self.status,  # type: ignore[arg-type]
            status_message=self.status_message,
            created_at=self.created_at,
            last_updated_at=self.last_updated_at,
            ttl=self.ttl_ms,
            poll_interval=self.poll_interval,
        )

    def update(self, task: types.Task) -> None:
        """Take the upstream's state (its TTL only if shorter: it forgets the task first)."""
        self.status, self.status_message = task.status, task.status_message
        self.last_updated_at, self.poll_interval = task.last_updated_at, task.poll_interval
        if task.ttl is not None:
            self.ttl_ms = min(self.ttl_ms, task.ttl)


def unknown_task() -> MCPError:
    """The one answer for an id that is not the caller's (never "exists, but not yours")."""
    return MCPError(types.INVALID_PARAMS, "unknown task", {"code": "unknown_task", "retryable": False})


def unsupported_task() -> MCPError:
    """A task-augmented call of a tool that cannot run as a task."""
    return MCPError(
        types.METHOD_NOT_FOUND, "this tool cannot run as a task", {"code": "task_unsupported", "retryable": False}
    )


def task_lost() -> MCPError:
    """The task's connection ended (a reconnect is a new upstream session: its tasks are gone)."""
    return MCPError(
        -32015, "the task's upstream connection ended; the task is lost", {"code": "task_lost", "retryable": False}
    )


class RevisionKeeps:
    """Revision holds shared by the tasks of each revision (module docstring)."""

    def __init__(self, catalog: CatalogAccess) -> None:
        self._catalog = catalog
        self._keeps: dict[int, tuple[str, float, frozenset[str]]] = {}  # revision → (hold, until, task ids)

    def acquire(self, revision: int, ttl_s: float, task_id: str) -> None:
        """Keep ``revision`` open for ``ttl_s`` more seconds for ``task_id``; raises the engine's
        hold errors (bounds, revision not live) and then keeps nothing new."""
        until = anyio.current_time() + ttl_s
        hold_id, held_until, tasks = self._keeps.get(revision, ("", float("-inf"), frozenset()))
        if held_until < until:
            new_id = self._catalog.hold(revision, ttl_s, owner="gateway:tasks")
            if hold_id:
                self._catalog.release_hold(hold_id)
            hold_id, held_until = new_id, until
        self._keeps[revision] = (hold_id, held_until, tasks | {task_id})

    def release(self, revision: int, task_id: str) -> None:
        """``task_id`` no longer needs ``revision``; the last one releases the hold."""
        keep = self._keeps.get(revision)
        if keep is None:
            return
        hold_id, until, tasks = keep
        tasks = tasks - {task_id}
        if tasks:
            self._keeps[revision] = (hold_id, until, tasks)
        else:
            del self._keeps[revision]
            self._catalog.release_hold(hold_id)

    def held(self) -> dict[int, int]:
        """Revision → how many tasks keep it (for tests and status)."""
        return {rev: len(tasks) for rev, (_h, _u, tasks) in self._keeps.items()}


class TaskTable:
    """Every live task record, by id and by session, with the bounds and lifetime above."""

    def __init__(
        self, catalog: CatalogAccess, *, per_session: int = TASKS_PER_SESSION, max_tasks: int = TASKS_MAX
    ) -> None:
        self.keeps = RevisionKeeps(catalog)
        self.per_session = per_session
        self.max_tasks = max_tasks
        self._records: dict[str, TaskRecord] = {}
        self._by_session: dict[str, dict[str, TaskRecord]] = {}
        self._watched: set[str] = set()  # binding keys whose connection's end forgets their tasks
        self._wake = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    def check_room(self, session_id: str) -> None:
        """Raise ``too_many_tasks`` (retryable: records expire) when a new task would exceed a bound."""
        if len(self._by_session.get(session_id, {})) >= self.per_session or len(self._records) >= self.max_tasks:
            raise MCPError(
                types.INVALID_PARAMS,
                f"too many tasks (at most {self.per_session} per session until they expire)",
                {"code": "too_many_tasks", "retryable": True},
            )

    def add(self, record: TaskRecord, binding: Binding) -> None:
        """Record a created task (its revision is already kept: :meth:`RevisionKeeps.acquire`)."""
        self._records[record.id] = record
        self._by_session.setdefault(record.session_id, {})[record.id] = record
        if binding.owned and binding.conn is not None and binding.key not in self._watched:
            # The connection's own session ends with it: so do its tasks.
            self._watched.add(binding.key)
            link.on_connection_close(binding.conn, self._connection_closed, binding.key, record.session_id)
        self._wake.set()
        if record.status in TERMINAL:
            self.settle(record)

    def own(self, session_id: str, task_id: str) -> TaskRecord:
        """The caller's task ``task_id``, or ``unknown_task``."""
        record = self._records.get(task_id)
        if record is None or record.session_id != session_id:
            raise unknown_task()
        return record

    def of_session(self, session_id: str) -> list[TaskRecord]:
        """A snapshot of the live task records of ``session_id`` (empty if it has none)."""
        return list(self._by_session.get(session_id, {}).values())

    def count(self, session_id: str | None = None) -> int:
        """Live task records (of one session, or in all)."""
        return len(self._records) if session_id is None else len(self._by_session.get(session_id, {}))

    def observe(self, record: TaskRecord, task: types.Task) -> None:
        """The upstream said where ``task`` is; a terminal state settles the record."""
        record.update(task)
        if task.status in TERMINAL:
            self.settle(record)

    def settle(self, record: TaskRecord) -> None:
        """The task is done (or its result was fetched): it no longer keeps its revision."""
        if not record.settled:
            record.settled = True
            self.keeps.release(record.revision, record.id)

    def drop(self, record: TaskRecord) -> None:
        """Settle ``record`` (releasing its revision keep) and forget it; idempotent."""
        self.settle(record)
        self._records.pop(record.id, None)
        mine = self._by_session.get(record.session_id)
        if mine is not None:
            mine.pop(record.id, None)
            if not mine:
                del self._by_session[record.session_id]

    def _connection_closed(self, key: str, session_id: str) -> None:
        self._watched.discard(key)
        self.forget(session_id)

    def forget(self, session_id: str) -> None:
        """Drop a removed session's tasks; unsettled ones are cancelled upstream (best effort)."""
        for record in self.of_session(session_id):
            if not record.settled and record.conn.alive and self._tg is not None:
                self._tg.start_soon(self._cancel_quietly, record)
            self.drop(record)

    @staticmethod
    async def _cancel_quietly(record: TaskRecord) -> None:
        with anyio.move_on_after(CANCEL_TIMEOUT_S):
            request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=record.upstream_id))
            try:
                await record.conn.send(request, types.CancelTaskResult, timeout_s=CANCEL_TIMEOUT_S)
            except Exception:
                log.info("upstream %s: cancelling a forgotten task failed", record.source)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Expire records at the end of their TTL (their holds go with them); owns the
        background cancels of forgotten tasks."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            task_status.started()
            try:
                while True:
                    now = anyio.current_time()
                    for record in [r for r in self._records.values() if r.expires_at <= now]:
                        self.drop(record)
                    nxt = min((r.expires_at for r in self._records.values()), default=now + 3600)
                    with anyio.move_on_after(max(0.0, nxt - anyio.current_time())):
                        await self._wake.wait()
                    self._wake = anyio.Event()
            finally:
                self._tg = None
                for record in list(self._records.values()):
                    self.drop(record)
