"""The legacy-SSE channel's pure parts (ADR 0043): the bounded event splitter and what the
SDK's parser gets in place of a refused event. Over a real SSE server:
``tests/integration/test_sse_bounds.py``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import httpx2
import mcp_types as types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.message import SessionMessage

from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError, bound_error
from mcp_reconciler.reconciler.sse_channel import BoundedTransport, EventSplitter, SseBounds, client_factory, data_of
from mcp_reconciler.reconciler.stdio_peer import Refused, Skipped
from tests.unit.test_stdio_peer import feed_all


def event(payload: str, eol: bytes = b"\r\n") -> bytes:
    return b"event: message" + eol + b"data: " + payload.encode() + eol + eol


@given(
    payloads=st.lists(st.text(alphabet='ab{}:" ', max_size=30), max_size=8),
    eol=st.sampled_from([b"\r\n", b"\n", b"\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_events_come_out_whole_and_unchanged_whatever_the_chunking(
    payloads: list[str], eol: bytes, cuts: list[int]
) -> None:
    events = [event(p, eol) for p in payloads]
    data = b"".join(events)
    out = [item for item in feed_all(EventSplitter(1 << 20), data, cuts) if isinstance(item, bytes)]
    assert len(out) == len(feed_all(EventSplitter(1 << 20), data, cuts))  # nothing refused
    assert b"".join(out) == data  # byte for byte: a well-behaved server's stream reaches the SDK as sent
    # Each event whole, at once (a CRLF cut after its CR: the LF follows alone).
    whole = [o.removesuffix(b"\n") for o in out if o != b"\n"]
    assert whole == [e.removesuffix(b"\n") for e in events]


def test_an_event_of_exactly_the_bound_passes_and_one_byte_more_is_refused_then_skipped() -> None:
    exact = event('{"jsonrpc":"2.0","id":7,"result":{}}')
    n = len(exact)
    assert EventSplitter(n).feed(exact) == [exact]  # N
    out = EventSplitter(n - 1).feed(exact + exact[:5])  # N+1 against a bound of N
    assert [type(item) for item in out] == [Refused, Skipped]
    refused, skipped = out
    assert isinstance(refused, Refused) and isinstance(skipped, Skipped)
    assert (refused.bound, refused.limit, refused.size) == (MESSAGE_BOUND_KEY, n - 1, n)
    assert skipped.size == n


def test_a_refused_event_is_not_kept() -> None:
    splitter = EventSplitter(1000)
    splitter.feed(b"data: " + b"x" * 999)
    assert splitter.feed(b"x" * 10_000) == []  # skipping: counted, not kept
    assert splitter.pending == 11_005
    assert splitter.feed(b"\n\n" + event("{}")) == [Skipped(11_007), event("{}")]


def test_data_of_joins_data_fields_with_lf() -> None:
    assert data_of(b'event: message\r\ndata: {"a":\r\ndata:1}\r\n\r\n') == b'{"a":\n1}'


async def stream(*chunks: bytes) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def run(bounds: SseBounds, *chunks: bytes) -> list[bytes]:
    return [item async for item in bounds.events(stream(*chunks))]


@pytest.mark.anyio
async def test_a_refused_answer_becomes_its_bound_error_and_the_stream_reads_on() -> None:
    bounds = SseBounds("s", message_bytes=200, list_bytes=None, list_entries=None)
    big = event(json.dumps({"jsonrpc": "2.0", "id": 3, "result": {"text": "x" * 500}}))
    small = event('{"jsonrpc":"2.0","id":4,"result":{}}')
    out = await run(bounds, big[:100], big[100:], small)
    assert len(out) == 2 and out[1] == small
    sent = types.jsonrpc_message_adapter.validate_json(data_of(out[0]))
    assert isinstance(sent, types.JSONRPCError) and sent.id == 3
    assert isinstance(sent.error.data, dict)
    size = sent.error.data["size"]
    assert 200 < size <= len(big)  # refused within the chunk that passed the bound
    assert sent.error == bound_error(MESSAGE_BOUND_KEY, 200, size)


@pytest.mark.anyio
async def test_a_refused_notification_is_dropped_and_a_server_request_answered_upstream() -> None:
    bounds = SseBounds("s", message_bytes=200, list_bytes=None, list_entries=None)
    answered: list[object] = []

    async def answer(message: object) -> None:
        answered.append(message)

    bounds.answer = answer
    note = event(json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"d": "x" * 500}}))
    ask = event(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "sampling/createMessage", "params": {"d": "x" * 500}}))
    assert await run(bounds, note, ask) == []
    (reply,) = answered
    assert isinstance(reply, SessionMessage) and isinstance(reply.message, types.JSONRPCError)
    assert reply.message.id == 9
    assert isinstance(reply.message.error.data, dict)
    size = reply.message.error.data["size"]
    assert 200 < size <= len(ask)
    assert reply.message.error == bound_error(MESSAGE_BOUND_KEY, 200, size)


@pytest.mark.anyio
async def test_a_refused_event_that_names_no_request_ends_the_stream() -> None:
    bounds = SseBounds("s", message_bytes=200, list_bytes=None, list_entries=None)
    with pytest.raises(MessageBoundError) as caught:
        await run(bounds, b"data: " + b"x" * 500 + b"\n\n")
    assert (caught.value.bound, caught.value.limit) == (MESSAGE_BOUND_KEY, 200)


@pytest.mark.anyio
async def test_a_list_page_past_the_entry_bound_becomes_the_bounds_error_before_the_sdk_parses_it() -> None:
    bounds = SseBounds("s", message_bytes=1 << 20, list_bytes=None, list_entries=2)
    bounds.lists.watch(types.JSONRPCRequest(jsonrpc="2.0", id=5, method="tools/list"))
    page = {"jsonrpc": "2.0", "id": 5, "result": {"tools": [{"name": f"t{i}"} for i in range(3)]}}
    (out,) = await run(bounds, event(json.dumps(page)))
    sent = types.jsonrpc_message_adapter.validate_json(data_of(out))
    assert isinstance(sent, types.JSONRPCError) and sent.id == 5
    assert sent.error.data == {
        "code": "upstream_message_too_large",
        "retryable": False,
        "bound": "entries_per_generation",
        "limit": 2,
        "size": 3,
    }
    assert not bounds.lists.ids
    with anyio.fail_after(5):
        bounds.lists.watch(types.JSONRPCRequest(jsonrpc="2.0", id=6, method="tools/list"))
        ok = event(json.dumps({**page, "id": 6, "result": {"tools": page["result"]["tools"][:2]}}))  # type: ignore[index]
        assert await run(bounds, ok) == [ok]


def asgi_body(body: bytes, headers: list[tuple[bytes, bytes]]) -> object:
    """A real ASGI app answering every request with ``body`` (served by httpx2's ASGITransport)."""

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        assert callable(send)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


@pytest.mark.anyio
@pytest.mark.parametrize("over", [0, 1], ids=["N", "N+1"])
async def test_a_body_that_is_not_an_event_stream_is_held_to_the_message_bound_in_total(over: int) -> None:
    bounds = SseBounds("s", message_bytes=64 * 1024, list_bytes=None, list_entries=None)
    app = asgi_body(b"a" * (64 * 1024 + over), [(b"content-type", b"application/json")])
    transport = BoundedTransport(bounds, httpx2.ASGITransport(app=app))  # type: ignore[arg-type]
    async with httpx2.AsyncClient(transport=transport) as client:
        if not over:
            assert len((await client.post("http://up/messages/")).content) == 64 * 1024
            return
        with pytest.raises(MessageBoundError) as caught:
            await client.post("http://up/messages/")
    assert (caught.value.bound, caught.value.limit) == (MESSAGE_BOUND_KEY, 64 * 1024)


@pytest.mark.anyio
async def test_identity_is_asked_for_and_an_encoded_response_refused() -> None:
    bounds = SseBounds("s", message_bytes=64 * 1024, list_bytes=None, list_entries=None)
    seen: list[str] = []
    inner = asgi_body(b"\x1f\x8b", [(b"content-type", b"text/event-stream"), (b"content-encoding", b"gzip")])

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        headers = dict(scope["headers"])  # type: ignore[call-overload]
        seen.append(headers[b"accept-encoding"].decode())
        await inner(scope, receive, send)  # type: ignore[operator]

    factory = client_factory(bounds, httpx2.ASGITransport(app=app))  # type: ignore[arg-type]
    async with factory() as client:
        with pytest.raises(httpx2.DecodingError):
            await client.get("http://up/sse")
    assert seen == ["identity"]
