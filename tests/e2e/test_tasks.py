"""Tasks through the gateway, end to end (issue 11, item 5; ADR 0016): a real 2025-11-25 upstream
with tasks (``tests.support.task_server``, stdio) behind the served gateway; downstream clients
over streamable HTTP on 127.0.0.1 with session tokens.

A task is created, polled, listed, its result fetched (with the gateway's id, and URIs in the
source's namespace) or cancelled; another session can neither see nor use it, and its id is not
guessable; the task keeps its generation and connection alive across a publication until it
settles; tasks are bounded per session and expire with their TTL. A tool that requires a task is
served to clients that do not send one (every 2026-07-28 client); a source that cannot run tasks
lists no tool that needs them, and ``tasks`` is advertised only in the era that has them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError

from mcp_reconciler.api.frontdoor import REVISION_META
from mcp_reconciler.api.server import Served, serve_http
from tests.e2e.conftest import REPO_ROOT, WAIT, write_config
from tests.e2e.support_resources import session_client, until

pytestmark = pytest.mark.anyio

RELATED = "io.modelcontextprotocol/related-task"


async def send_raw_request(session: Any, request: Any) -> dict[str, Any]:
    """``request`` sent as ``send_request`` sends it (the session's stamp), its raw result back:
    a task-augmented ``tools/call`` is answered with a ``CreateTaskResult`` that ``send_request``
    would validate as a ``CallToolResult``. Test-only use of two SDK client privates, as the
    SDK's own ``listen()`` uses them (the gateway's package uses none, ADR 0037)."""
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    return dict(await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts))


def task_source(*args: str, uri_prefix: str | None = "t+") -> dict[str, Any]:
    src: dict[str, Any] = {
        "name": "tasks",
        "stdio": {"command": "python", "args": ["-m", "tests.support.task_server", *args], "cwd": str(REPO_ROOT)},
    }
    if uri_prefix is not None:
        src["uri_prefix"] = uri_prefix
    return src


def config(tmp_path: Path, *args: str) -> Path:
    return write_config(tmp_path, sources=[task_source(*args)])


async def create(client: Client, tool: str, args: dict[str, Any], ttl_ms: int = 60_000) -> types.CreateTaskResult:
    """A task-augmented ``tools/call`` (the SDK client validates every tools/call result as a
    CallToolResult, so the request goes raw, the way the gateway sends it upstream)."""
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name=tool, arguments=args, task=types.TaskMetadata(ttl=ttl_ms))
    )
    return types.CreateTaskResult.model_validate(await send_raw_request(client.session, request), by_name=False)


async def get(client: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.GetTaskResult)


async def result(client: Client, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CallToolResult)


async def cancel(client: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CancelTaskResult)


async def listed(client: Client) -> list[types.Task]:
    request = types.ListTasksRequest(params=types.PaginatedRequestParams())
    return (await client.session.send_request(request, types.ListTasksResult)).tasks


async def upstream_tasks(client: Client) -> dict[str, str]:
    """The upstream's own view: its task ids and their states."""
    out = await client.call_tool("tasks__seen", {})
    block = out.content[0]
    assert isinstance(block, types.TextContent)
    return dict(json.loads(block.text))


async def error_of(call: Any) -> MCPError:
    with pytest.raises(MCPError) as exc:
        await call
    return exc.value


def task_holds(served: Served) -> list[int]:
    return [h.revision for h in served.gateway.engine.holds.list() if h.owner == "gateway:tasks"]


async def test_task_created_polled_listed_and_its_result_fetched(tmp_path: Path) -> None:
    release = tmp_path / "release"
    async with serve_http(config(tmp_path), port=0) as served:
        async with session_client(served, "legacy") as client:
            caps = client.server_capabilities
            assert caps is not None and caps.tasks is not None and caps.tasks.requests is not None
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools["tasks__slow"].execution.task_support == "optional"  # type: ignore[union-attr]
            assert tools["tasks__must"].execution.task_support == "required"  # type: ignore[union-attr]

            created = await create(client, "tasks__slow", {"release": str(release), "value": "v1"})
            task = created.task
            revision = (created.meta or {})[REVISION_META]
            assert task.status == "working" and task.ttl == 60_000
            assert len(task.task_id) >= 32 and not task.task_id.startswith("up-")  # never the upstream's id
            assert list(await upstream_tasks(client)) == ["up-1"]
            assert task_holds(served) == [revision]  # its generation is kept for its TTL

            assert (await get(client, task.task_id)).status == "working"
            assert [t.task_id for t in await listed(client)] == [task.task_id]

            release.write_text("go")
            with anyio.fail_after(WAIT):
                out = await result(client, task.task_id)
            assert json.loads(out.content[0].text)["value"] == "v1"  # type: ignore[union-attr]
            link = out.content[1]
            assert isinstance(link, types.ResourceLink) and str(link.uri) == "t+note://done"  # the source's namespace
            assert (out.meta or {})[RELATED] == {"taskId": task.task_id}
            assert (out.meta or {})[REVISION_META] == revision
            assert task_holds(served) == []  # settled: it keeps nothing any more
            assert (await get(client, task.task_id)).status == "completed"
            assert (await upstream_tasks(client)) == {"up-1": "completed"}


async def test_task_cancelled(tmp_path: Path) -> None:
    async with serve_http(config(tmp_path), port=0) as served:
        async with session_client(served, "legacy") as client:
            task = (await create(client, "tasks__must", {"release": str(tmp_path / "never")})).task
            cancelled = await cancel(client, task.task_id)
            assert (cancelled.task_id, cancelled.status) == (task.task_id, "cancelled")
            assert (await upstream_tasks(client)) == {"up-1": "cancelled"}
            assert task_holds(served) == []
            err = await error_of(result(client, task.task_id))
            assert err.error.data["code"] == "invalid_task_state"
            err = await error_of(cancel(client, task.task_id))  # twice: it is already cancelled
            assert err.error.data["code"] == "invalid_task_state"


async def test_another_session_can_neither_see_nor_use_a_task(tmp_path: Path) -> None:
    async with serve_http(config(tmp_path), port=0) as served:
        async with session_client(served, "legacy") as a, session_client(served, "legacy") as b:
            task = (await create(a, "tasks__must", {"release": str(tmp_path / "never")})).task
            assert await listed(b) == []
            for call in (get(b, task.task_id), result(b, task.task_id), cancel(b, task.task_id)):
                err = await error_of(call)
                assert (err.code, err.error.data["code"]) == (-32602, "unknown_task")
            # ... exactly what an id that never existed answers, and the upstream's id is not one.
            for made_up in ("up-1", task.task_id[:-1] + ("A" if task.task_id[-1] != "A" else "B")):
                err = await error_of(get(a, made_up))
                assert (err.code, err.error.data["code"]) == (-32602, "unknown_task")
            assert (await upstream_tasks(a)) == {"up-1": "working"}  # b cancelled nothing
            assert (await cancel(a, task.task_id)).status == "cancelled"


async def test_a_task_keeps_its_generation_and_connection_across_a_publication(tmp_path: Path) -> None:
    release = tmp_path / "release"
    cfg = config(tmp_path)
    async with serve_http(cfg, port=0) as served:
        engine = served.gateway.engine
        async with session_client(served, "legacy") as client:
            created = await create(client, "tasks__slow", {"release": str(release), "value": "old"})
            first = engine.current
            assert first is not None
            old_conn = first.generation.source_state("tasks").connection  # type: ignore[union-attr]
            # A config edit respawns the source: a new revision on a new connection.
            respawned = task_source("--pid-file", str(tmp_path / "respawned.pid"))
            cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "sources": [respawned]}))
            outcome = await engine.refresh(timeout_s=WAIT)
            assert outcome.status == "published" and outcome.revision > first.revision
            assert first.state.value == "retiring"  # held by the task, not closed
            assert old_conn.alive  # type: ignore[union-attr]
            assert (await get(client, created.task.task_id)).status == "working"
            release.write_text("go")
            with anyio.fail_after(WAIT):
                out = await result(client, created.task.task_id)
            assert json.loads(out.content[0].text)["value"] == "old"  # type: ignore[union-attr]
            assert (out.meta or {})[REVISION_META] == first.revision
            # Settled: the hold is released, the old generation drains and its connection closes.
            await until(lambda: first.is_closed, what="the old generation closed once the task settled")
            await until(lambda: not old_conn.alive, what="the old connection closed")  # type: ignore[union-attr]


async def test_tasks_are_bounded_per_session_at_n_and_n_plus_1_and_expire(tmp_path: Path) -> None:
    async with serve_http(config(tmp_path), port=0) as served:
        served.front.tasks.table.per_session = 2
        async with session_client(served, "legacy") as client:
            args = {"release": str(tmp_path / "never")}
            await create(client, "tasks__must", args, ttl_ms=60_000)
            short = (await create(client, "tasks__must", args, ttl_ms=300)).task  # N
            err = await error_of(create(client, "tasks__must", args))  # N + 1
            assert (err.error.data["code"], err.error.data["retryable"]) == ("too_many_tasks", True)
            # The short one expires (its TTL ends): a slot frees, and its id is gone.
            await until(lambda: served.front.tasks.table.count() == 1, what="the 300 ms task expired")
            assert (await error_of(get(client, short.task_id))).error.data["code"] == "unknown_task"
            await create(client, "tasks__must", args)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_tool_that_requires_a_task_is_served_to_plain_calls(mode: str, tmp_path: Path) -> None:
    release = tmp_path / "release"
    release.write_text("go")
    async with serve_http(config(tmp_path), port=0) as served:
        async with session_client(served, mode) as client:
            if mode == "auto":  # 2026-07-28: no tasks in the core, none advertised, tool still callable
                assert client.server_capabilities.tasks is None  # type: ignore[union-attr]
            out = await client.call_tool("tasks__must", {"release": str(release), "value": "sync"})
            assert json.loads(out.content[0].text)["value"] == "sync"  # type: ignore[union-attr]
            assert str(out.content[1].uri) == "t+note://done"  # type: ignore[union-attr]
            assert RELATED not in (out.meta or {})
            assert (await upstream_tasks(client)) == {"up-1": "completed"}
            # A plain call that is given up cancels the upstream task.
            with anyio.move_on_after(0.5):
                await client.call_tool("tasks__must", {"release": str(tmp_path / "never")})

            async def cancelled() -> bool:
                return (await upstream_tasks(client)).get("up-2") == "cancelled"

            await until(cancelled, what="the upstream task cancelled", timeout_s=WAIT)
            assert task_holds(served) == []


async def test_a_source_without_tasks_lists_no_tool_that_needs_them(tmp_path: Path) -> None:
    async with serve_http(config(tmp_path, "--no-tasks"), port=0) as served:
        live = served.gateway.engine.current
        assert live is not None
        state = live.generation.source_state("tasks")
        assert state is not None
        diags = [d for d in state.diagnostics if d.code == "task_unsupported"]
        assert [d.name for d in diags] == ["tasks__must"]
        async with session_client(served, "legacy") as client:
            assert client.server_capabilities.tasks is None  # type: ignore[union-attr]
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "tasks__must" not in tools
            assert tools["tasks__slow"].execution is None  # runs as an ordinary call here
            err = await error_of(create(client, "tasks__slow", {}))
            assert (err.code, err.error.data["code"]) == (-32601, "task_unsupported")
            out = await client.call_tool("tasks__slow", {"value": "plain"})
            assert json.loads(out.content[0].text)["value"] == "plain"  # type: ignore[union-attr]
