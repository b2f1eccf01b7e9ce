"""Answers sent up without the SDK's transport (``reconciler/direct_answers.py``): a real
2025-era MCP server over streamable HTTP (uvicorn on 127.0.0.1) asks the gateway's upstream
client for sampling while serving a call; the answer is POSTed by the keep-alive poster, on one
reused connection, and falls back to the SDK's transport when the poster cannot send it or the
lane is switched off."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import ServerMessageMetadata
from starlette.types import Message, Receive, Scope, Send

from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.transports import transport_for
from tests.support.asgi_server import served_asgi

pytestmark = pytest.mark.anyio

WAIT = 20.0


def asking_server() -> Server[Any]:
    """One tool, ``ask``: sends a sampling request on the call's own stream, returns the answer."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="ask", input_schema={"type": "object"})])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        request = types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[
                    types.SamplingMessage(role="user", content=types.TextContent(type="text", text="q"))
                ],
                max_tokens=5,
            )
        )
        answer = await ctx.session.send_request(
            request, types.CreateMessageResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
        return types.CallToolResult(content=[types.TextContent(type="text", text=answer.content.text)])

    return Server("asking", on_list_tools=list_tools, on_call_tool=call_tool)


class Recorder:
    """ASGI middleware: for each POST that carries a JSON-RPC response, who sent it (the
    ``user-agent``) and from which client port (one per TCP connection)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.answers: list[tuple[str, int]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        parsed = json.loads(body) if body else {}
        if isinstance(parsed, dict) and "result" in parsed and "method" not in parsed:
            agent = dict(scope["headers"]).get(b"user-agent", b"").decode()
            self.answers.append((agent, scope["client"][1]))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def sampler(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="a"), model="m")


async def run_calls(n: int) -> list[tuple[str, int]]:
    manager = StreamableHTTPSessionManager(
        asking_server(), security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    recorder = Recorder(manager.handle_request)
    async with manager.run(), served_asgi(recorder) as base:
        spec = SourceSpec(name="up", transport={"kind": "http", "url": f"{base}/mcp"})
        async with Client(transport_for(spec, lambda: None), mode="legacy", sampling_callback=sampler) as client:
            with anyio.fail_after(WAIT):
                for _ in range(n):
                    result = await client.call_tool("ask", {})
                    assert not result.is_error
                    assert isinstance(result.content[0], types.TextContent) and result.content[0].text == "a"
    return recorder.answers


async def test_answers_go_up_on_the_poster_over_one_kept_alive_connection() -> None:
    answers = await run_calls(10)
    assert len(answers) == 10
    assert {agent for agent, _ in answers} == {"mcp-reconciler"}, answers  # the poster's, not httpx's
    assert len({port for _, port in answers}) == 1, answers


async def test_an_answer_the_poster_cannot_send_goes_through_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: JsonRpcPoster, message: Any, headers: Any) -> int:
        raise UpstreamUnavailableError("connection refused")

    monkeypatch.setattr(JsonRpcPoster, "send", broken)
    answers = await run_calls(3)
    assert len(answers) == 3, "no answer was lost"
    assert all(agent.startswith("python-httpx") for agent, _ in answers), answers
