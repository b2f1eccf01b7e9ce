"""A runnable real MCP upstream with tasks (2025-11-25 task-augmented ``tools/call``), stdio only.

    python -m tests.support.task_server [--pid-file PATH] [--no-tasks]

It speaks 2025-11-25 only (``server/discover`` is refused, like TypeScript SDK servers, which
are where tasks live today) and advertises ``tasks`` (list, cancel, tools/call). The Python
SDK 2.3 has no server-side tasks, so this server implements them itself: a ``tools/call`` with
``task`` is answered by a middleware with a ``CreateTaskResult`` (the SDK would sieve it as a
``CallToolResult``), the work runs in the server's own task group, and ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel`` are custom request handlers.

Tools (``execution.taskSupport`` in brackets):

- ``slow`` [optional]: waits until the file ``release`` exists, then returns
  ``{"value": value, "pid": ...}`` plus a resource link to ``note://done``;
- ``must`` [required]: like ``slow``; called without ``task`` it fails ("requires task
  augmentation"), as such a tool does on a direct connection;
- ``plain`` [absent: forbidden]: answers at once;
- ``seen``: the upstream's own view of its tasks (id → status), to check what the gateway did.

``--no-tasks`` advertises no ``tasks`` capability but lists the same tools (an inconsistent
server: the gateway must not advertise what it cannot serve).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError
from mcp.server import Server, ServerRequestContext

from tests.support.legacy_only import serve_stdio_legacy_only
from tests.support.upstream_server import write_pid_file

RELATED = "io.modelcontextprotocol/related-task"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


def _schema() -> dict[str, Any]:
    return {"type": "object", "properties": {"release": {"type": "string"}, "value": {"type": "string"}}}


TOOLS = [
    types.Tool(name="slow", input_schema=_schema(), execution=types.ToolExecution(task_support="optional")),
    types.Tool(name="must", input_schema=_schema(), execution=types.ToolExecution(task_support="required")),
    types.Tool(name="plain", input_schema={"type": "object"}),
    types.Tool(name="seen", input_schema={"type": "object"}),
]


@dataclass(eq=False)
class _Task:
    id: str
    ttl: int
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    status: str = "working"
    result: dict[str, Any] | None = None
    error: types.ErrorData | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    def view(self) -> dict[str, Any]:
        return {
            "taskId": self.id,
            "status": self.status,
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
            "ttl": self.ttl,
            "pollInterval": 50,
        }

    def settle(self, status: str) -> None:
        self.status, self.updated = status, _now()
        self.done.set()


class TaskServer:
    def __init__(self, *, tasks: bool) -> None:
        self.tasks: dict[str, _Task] = {}
        self._ids = itertools.count(1)
        self._tg: TaskGroup | None = None
        self.offer_tasks = tasks
        outer = self

        class _Server(Server[Any]):
            def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
                caps = super().get_capabilities(*args, **kwargs)
                if not outer.offer_tasks:
                    return caps
                tasks = types.ServerTasksCapability(
                    list=types.TasksListCapability(),
                    cancel=types.TasksCancelCapability(),
                    requests=types.ServerTasksRequestsCapability(
                        tools=types.TasksToolsCapability(call=types.TasksCallCapability())
                    ),
                )
                return caps.model_copy(update={"tasks": tasks})

        self.server = _Server(
            "task-test-server",
            version="1.0",
            lifespan=self._lifespan,
            on_list_tools=self._list,
            on_call_tool=self._call,
        )
        self.server.middleware.append(self._task_augmented)
        self.server.add_request_handler("tasks/get", types.GetTaskRequestParams, self._get)
        self.server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, self._result)
        self.server.add_request_handler("tasks/list", types.PaginatedRequestParams, self._list_tasks)
        self.server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, self._cancel)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _server: Any) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            yield {}
            tg.cancel_scope.cancel()

    async def _list(self, ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    @staticmethod
    async def _work(args: dict[str, Any]) -> types.CallToolResult:
        release = args.get("release")
        while release and not await anyio.Path(str(release)).exists():
            await anyio.sleep(0.02)  # the release file comes from the test (another process)
        payload = {"value": args.get("value"), "pid": os.getpid()}
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(payload)), types.ResourceLink(uri="note://done", name="done")]
        )

    async def _call(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name == "must":
            raise MCPError(types.METHOD_NOT_FOUND, "tool 'must' requires task augmentation")
        if params.name == "seen":
            seen = {t.id: t.status for t in self.tasks.values()}
            return types.CallToolResult(content=[types.TextContent(text=json.dumps(seen))])
        if params.name == "plain":
            return types.CallToolResult(content=[types.TextContent(text="plain")])
        return await self._work(dict(params.arguments or {}))

    # -- tasks -----------------------------------------------------------------------------------

    async def _task_augmented(self, ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        params = ctx.params
        if ctx.method != "tools/call" or not isinstance(params, dict) or params.get("task") is None:
            return await call_next(ctx)
        if params.get("name") not in ("slow", "must"):
            raise MCPError(types.METHOD_NOT_FOUND, "this tool does not support tasks")
        ttl = int((params.get("task") or {}).get("ttl") or 60_000)
        task = _Task(id=f"up-{next(self._ids)}", ttl=ttl)
        self.tasks[task.id] = task
        assert self._tg is not None
        self._tg.start_soon(self._run, task, dict(params.get("arguments") or {}))
        return {"task": task.view()}

    async def _run(self, task: _Task, args: dict[str, Any]) -> None:
        with task.scope:
            result = await self._work(args)
            task.result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            task.settle("completed")
            return
        task.settle("cancelled")

    def _task(self, task_id: str) -> _Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown task {task_id}")
        return task

    async def _get(self, ctx: ServerRequestContext[Any], params: types.GetTaskRequestParams) -> dict[str, Any]:
        return self._task(params.task_id).view()

    async def _result(self, ctx: ServerRequestContext[Any], params: types.GetTaskPayloadRequestParams) -> Any:
        task = self._task(params.task_id)
        await task.done.wait()
        if task.result is None:
            raise MCPError(types.INVALID_PARAMS, f"task {task.id} was {task.status}")
        return {**task.result, "_meta": {RELATED: {"taskId": task.id}}}

    async def _list_tasks(self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams) -> Any:
        return {"tasks": [t.view() for t in self.tasks.values()]}

    async def _cancel(self, ctx: ServerRequestContext[Any], params: types.CancelTaskRequestParams) -> Any:
        task = self._task(params.task_id)
        if task.done.is_set():
            raise MCPError(types.INVALID_PARAMS, f"task {task.id} is already {task.status}")
        task.scope.cancel()
        task.settle("cancelled")
        return task.view()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.support.task_server")
    p.add_argument("--pid-file")
    p.add_argument("--no-tasks", action="store_true")
    args = p.parse_args(argv)
    server = TaskServer(tasks=not args.no_tasks)
    anyio.run(serve_stdio_legacy_only, server.server, args.pid_file, write_pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
