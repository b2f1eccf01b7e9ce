"""Every MCP SDK client-side private the engine uses (``reconciler/sdk_client.py``), checked on
real SDK objects: a served ``Server`` over the in-memory transport, a real ``ClientSession``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server, ServerRequestContext
from pydantic import ValidationError

from mcp_reconciler.reconciler import sdk_client

pytestmark = pytest.mark.anyio
WAIT = 10.0


def _task_server() -> Server[Any]:
    """A server that answers a task-augmented tools/call with a CreateTaskResult (from a
    middleware: the SDK sieves handler results of tools/call as CallToolResult)."""

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="plain")])

    async def tasks(ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        if ctx.method == "tools/call" and isinstance(ctx.params, dict) and ctx.params.get("task"):
            now = "2026-01-01T00:00:00Z"
            return {"task": {"taskId": "t1", "status": "working", "createdAt": now, "lastUpdatedAt": now, "ttl": 5}}
        return await call_next(ctx)

    server: Server[Any] = Server("tasks", version="1", on_call_tool=call_tool)
    server.middleware.append(tasks)
    return server


async def test_send_raw_request_returns_what_send_request_rejects() -> None:
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(name="t", arguments={}, task=types.TaskMetadata(ttl=5))
    )
    async with Client(_task_server(), mode="legacy") as client:
        missing = [a for a in ("_stamp", "_dispatcher", "_session_read_timeout_seconds", "_negotiated_version")
                   if not hasattr(client.session, a)]  # fmt: skip
        assert not missing, f"mcp SDK changed: ClientSession.{missing} gone (reconciler/sdk_client.py relies on it)"
        with pytest.raises(Exception, match="content"):  # why the raw path exists
            await client.session.send_request(request, types.CallToolResult)
        raw = await sdk_client.send_raw_request(client.session, request, timeout_s=WAIT)
        assert types.CreateTaskResult.model_validate(raw, by_name=False).task.task_id == "t1"
        plain = types.CallToolRequest(params=types.CallToolRequestParams(name="t", arguments={}))
        assert (await sdk_client.send_raw_request(client.session, plain))["content"][0]["text"] == "plain"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_stamp_is_what_send_request_sends(mode: str) -> None:
    """The HTTP peers send what ``send_request`` would: the same ``_meta`` and headers, both eras."""
    seen: list[Any] = []

    async def record(ctx: ServerRequestContext[Any], call_next: Any) -> Any:
        if ctx.method == "tools/call":
            seen.append(ctx.params)
        return await call_next(ctx)

    server = _task_server()
    server.middleware.append(record)
    async with Client(server, mode=mode) as client:
        request = types.CallToolRequest(params=types.CallToolRequestParams(name="t", arguments={"a": 1}))
        await client.session.send_request(request, types.CallToolResult)
        data, headers = sdk_client.stamp(client.session, request)
        assert data["params"] == seen[0]
        modern = client.protocol_version.startswith("2026")
        assert (headers.get("mcp-method"), headers.get("mcp-name")) == (("tools/call", "t") if modern else (None, None))
        assert headers.get("mcp-protocol-version") == client.protocol_version


async def test_check_result_types_as_send_request_does() -> None:
    async with Client(_task_server(), mode="legacy") as client:
        ok = sdk_client.check_result(client.session, "tools/call", {"content": []}, types.CallToolResult)
        assert ok == types.CallToolResult(content=[])
        with pytest.raises(ValidationError):
            sdk_client.check_result(client.session, "tools/call", {"content": "no"}, types.CallToolResult)


async def test_each_private_is_named_when_it_is_gone() -> None:
    session: Any = SimpleNamespace(_dispatcher=None, _session_read_timeout_seconds=None)
    with pytest.raises(sdk_client.SDKChangedError, match=r"ClientSession\._stamp"):
        await sdk_client.send_raw_request(session, types.PingRequest())
    with pytest.raises(sdk_client.SDKChangedError, match=r"ClientSession\._dispatcher"):
        await sdk_client.send_raw_request(SimpleNamespace(), types.PingRequest())
    with pytest.raises(sdk_client.SDKChangedError, match=r"ClientSession\._negotiated_version"):
        sdk_client.check_result(session, "ping", {}, types.EmptyResult)
    with pytest.raises(sdk_client.SDKChangedError, match=r"ClientSession\._session_read_timeout_seconds"):
        sdk_client.read_timeout(SimpleNamespace())
