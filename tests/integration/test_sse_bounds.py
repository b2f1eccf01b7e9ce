"""Legacy SSE held to its bounds while read (ADR 0043), over the SDK's own SSE server app
(``tests.support.upstream_server --transport sse``: ``SseServerTransport`` on 127.0.0.1, port 0).

- the byte bound at N and N+1: an event of exactly ``limits.upstream_message_bytes`` bytes is
  delivered, one byte more is refused with the bound's error, and the connection serves on;
- the SDK's own 1 MiB event cap: an event under a larger configured bound but over the cap is
  refused cleanly by us (the SDK alone ends the whole connection there; pinned here, so an SDK
  that moves its cap fails this file rather than the gateway);
- the entry bound at N and N+1: a page of exactly ``entries_per_generation`` entries is listed,
  one entry more is refused while read (before the SDK parses the page).

The SDK's ``ClientSession`` speaks over :func:`~reconciler.sse_channel.sse_channel` for the
byte tests (the event's exact size is read off the wire by a tap under the bounds); the entry
tests go through ``UpstreamReader``, as the engine does."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError
from mcp.client.sse import sse_client

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import SourceReadError
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.peer import PeerSwitch
from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, SSE_EVENT_BOUND, MessageBoundError, bound_error
from mcp_reconciler.reconciler.sse_channel import SSE_EVENT_BYTES, sse_channel
from mcp_reconciler.reconciler.upstream import UpstreamReader
from tests.integration.conftest import SseUpstreams
from tests.support.upstream_server import CONTROL_TOOLS

pytestmark = pytest.mark.anyio

WAIT = 30.0
MiB = 1024 * 1024


class Tap(httpx2.AsyncHTTPTransport):
    """httpx2's own transport, keeping a copy of every event-stream byte it receives (under
    the bounds, so the test sees what the upstream sent)."""

    def __init__(self) -> None:
        super().__init__()
        self.received = bytearray()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            return response
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        inner: httpx2.AsyncByteStream = response.stream
        received = self.received

        class Copied(httpx2.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in inner:
                    received.extend(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await inner.aclose()

        return httpx2.Response(response.status_code, headers=response.headers, stream=Copied())

    def event_with(self, marker: bytes) -> bytes:
        """The raw event (its blank line included) whose bytes hold ``marker``."""
        events = [e + b"\r\n\r\n" for e in bytes(self.received).split(b"\r\n\r\n")]
        (event,) = [e for e in events if marker in e]
        return event


@asynccontextmanager
async def session(port: int, message_bytes: int, tap: Tap | None = None) -> AsyncIterator[ClientSession]:
    channel = sse_channel(
        "up",
        f"http://127.0.0.1:{port}/sse",
        headers={},
        connect_s=WAIT,
        read_s=WAIT,
        auth=None,
        message_bytes=message_bytes,
        inner=tap,
    )
    async with channel as (read, write), ClientSession(read, write) as client:
        with anyio.fail_after(WAIT):
            await client.initialize()
        yield client


async def big(client: ClientSession, size: int) -> int:
    """Call ``big`` for ``size`` bytes; the text length that came back."""
    with anyio.fail_after(WAIT):
        result = await client.call_tool("big", {"bytes": size})
    text = result.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return len(text)


async def test_an_sse_event_of_exactly_the_message_bound_is_delivered_and_one_byte_more_refused(
    sse_upstreams: SseUpstreams,
) -> None:
    _, port = await sse_upstreams.start("--tools", "a", "--noisy")
    size = 200_000
    tap = Tap()
    async with session(port, 4 * size, tap) as client:
        assert await big(client, size) == size
    n = len(tap.event_with(b"x" * size))  # the same sequence, so the same event, on every session
    assert size < n < size + 1024

    async with session(port, n) as client:  # N: delivered whole
        assert await big(client, size) == size

    async with session(port, n - 1) as client:  # N+1 bytes against a bound of N
        with pytest.raises(MCPError) as caught:
            await big(client, size)
        err = MessageBoundError.from_mcp_error(caught.value)
        assert err is not None
        assert (err.bound, err.limit) == (MESSAGE_BOUND_KEY, n - 1)
        assert caught.value.error == bound_error(MESSAGE_BOUND_KEY, n - 1, err.size)
        assert n - 1 < err.size <= n
        assert await big(client, 1000) == 1000  # the stream reads on from the refused event's end


async def test_an_event_over_the_sdks_cap_is_refused_cleanly_under_a_larger_configured_bound(
    sse_upstreams: SseUpstreams,
) -> None:
    _, port = await sse_upstreams.start("--tools", "a", "--noisy")
    async with session(port, 4 * MiB) as client:
        with pytest.raises(MCPError) as caught:
            await big(client, 2 * MiB)
        err = MessageBoundError.from_mcp_error(caught.value)
        assert err is not None
        assert (err.bound, err.limit) == (SSE_EVENT_BOUND, SSE_EVENT_BYTES)
        assert caught.value.error.message.endswith("ask for less")  # no config raises the SDK's cap
        assert await big(client, SSE_EVENT_BYTES - 1024) == SSE_EVENT_BYTES - 1024  # under it: whole


async def test_the_sdks_own_sse_client_ends_the_connection_just_over_its_event_cap(
    sse_upstreams: SseUpstreams,
) -> None:
    """Pins what :data:`SSE_EVENT_BYTES` states about the SDK: without our bounds, an event
    whose text alone is one byte over the cap ends the SDK's whole SSE connection."""
    _, port = await sse_upstreams.start("--tools", "a", "--noisy")
    with pytest.raises(BaseException) as caught:  # the SDK raises its reader's error in a group
        async with sse_client(f"http://127.0.0.1:{port}/sse", timeout=WAIT) as (read, write):
            async with ClientSession(read, write) as client:
                with anyio.fail_after(WAIT):
                    await client.initialize()
                assert await big(client, SSE_EVENT_BYTES - 1024) == SSE_EVENT_BYTES - 1024
                await big(client, SSE_EVENT_BYTES + 1)
    errors = [e for e in leaves(caught.value) if isinstance(e, httpx2.SSEError)]
    assert [str(e) for e in errors] == [f"Server-sent event exceeded the {SSE_EVENT_BYTES} byte limit."]


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


@pytest.mark.parametrize("over", [0, 1], ids=["N", "N+1"])
async def test_an_sse_list_page_of_entries_per_generation_is_listed_and_one_more_refused_while_read(
    over: int, sse_upstreams: SseUpstreams, tmp_path: Path
) -> None:
    names = tmp_path / "tools.json"
    names.write_text(json.dumps([f"tool_{i}" for i in range(500)]))
    _, port = await sse_upstreams.start("--tools-file", str(names), "--page-size", "5000")
    entries = 500 + len(CONTROL_TOOLS)  # the page: the catalog and the control tools
    bounds = dataclasses.replace(Bounds(), entries_per_generation=entries - over)
    spec = SourceSpec(name="up", transport={"kind": "sse", "url": f"http://127.0.0.1:{port}/sse"})
    async with UpstreamReader(mode="legacy", health_interval_s=None, peer=PeerSwitch(), bounds=bounds) as reader:
        with anyio.fail_after(WAIT):
            if not over:
                listed = await reader.read(spec, None, inputs_digest="-")
                assert len(listed.entries) == entries
                return
            with pytest.raises(SourceReadError) as caught:
                await reader.read(spec, None, inputs_digest="-")
    reason = f"listing refused while reading: a page passed entries_per_generation ({entries - 1} entries)"
    assert caught.value.reason == reason
    assert caught.value.cause_kind == "bound_exceeded"
