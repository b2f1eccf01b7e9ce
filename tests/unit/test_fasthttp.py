"""``reconciler/fasthttp.py``: the fast lane's keep-alive JSON-RPC poster, against a real TCP
server on 127.0.0.1 that answers with canned HTTP responses (so every wire case — keep-alive,
a stale idle connection, a connection dropped mid-response, SSE with interleaved messages, a
redirect — is exact and reproducible)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from anyio.streams.tls import TLSListener

from mcp_reconciler.reconciler.errors import UpstreamUnavailableError
from mcp_reconciler.reconciler.fasthttp import JsonRpcPoster, ResponseError

pytestmark = pytest.mark.anyio

WAIT = 10.0
REQUEST = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}}

#: What the server does with one request: returns the raw bytes to send and whether to close the
#: connection afterwards.
Reply = Callable[[dict[str, Any], bytes], tuple[bytes, bool]]


def http(status: str, body: bytes, ctype: str = "application/json", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n{extra}\r\n".encode() + body


def ok_json(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
    return http("200 OK", json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {"ok": True}}).encode()), False


class Server:
    """Accepts connections; reads each request (head + content-length body); answers with the
    next ``replies`` entry (the last one repeats). Counts connections and requests."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.connections = 0
        self.requests: list[tuple[bytes, dict[str, Any]]] = []
        self.eof_seen = anyio.Event()
        self.got_request = anyio.Event()
        self.closed = 0  # connections this side has closed
        self.closed_changed = anyio.Event()

    async def handle(self, stream: SocketStream) -> None:
        try:
            await self._handle(stream)
        finally:
            self.closed += 1
            self.closed_changed.set()
            self.closed_changed = anyio.Event()

    async def until_closed(self, n: int) -> None:
        """Wait until this side has closed ``n`` connections."""
        while self.closed < n:
            await self.closed_changed.wait()

    async def _handle(self, stream: SocketStream) -> None:
        self.connections += 1
        buf = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buf:
                    try:
                        buf += await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        self.eof_seen.set()
                        return
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = int(
                    next(
                        v
                        for k, _, v in (ln.partition(b": ") for ln in head.split(b"\r\n"))
                        if k.lower() == b"content-length"
                    )
                )
                while len(buf) < length:
                    buf += await stream.receive()
                body, buf = buf[:length], buf[length:]
                message = json.loads(body)
                self.requests.append((head, message))
                self.got_request.set()
                reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
                data, close = reply(message, head)
                if data:
                    await stream.send(data)
                if close:
                    return


@asynccontextmanager
async def serving(replies: list[Reply]) -> AsyncIterator[tuple[Server, str]]:
    server = Server(replies)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        try:
            yield server, f"http://127.0.0.1:{port}/mcp"
        finally:
            tg.cancel_scope.cancel()


async def test_json_response_and_keep_alive_reuse() -> None:
    async with serving([ok_json]) as (server, url):
        poster = JsonRpcPoster(url, {"x-source": "configured"})
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {"mcp-name": "echo"}) == {"ok": True}
            assert await poster.post({**REQUEST, "id": 8}, {}) == {"ok": True}
        await poster.aclose()
    assert server.connections == 1  # the second request reused the first connection
    head = server.requests[0][0].decode().lower()
    assert head.startswith("post /mcp http/1.1") and "x-source: configured" in head and "mcp-name: echo" in head
    assert "accept: application/json, text/event-stream" in head
    assert poster.exchanges == 2


async def test_sse_messages_before_the_response_reach_on_message_in_order() -> None:
    def sse(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "one"}}
        log2 = {**log, "params": {"level": "info", "data": "two"}}
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"content": []}}
        body = b"id: p\r\ndata: \r\n\r\n" + b"".join(
            b"event: message\r\ndata: " + json.dumps(m).encode() + b"\r\n\r\n" for m in (log, log2, answer)
        )
        return http("200 OK", body, "text/event-stream"), False

    seen: list[str] = []

    async def on_message(message: dict[str, Any]) -> None:
        seen.append(message["params"]["data"])

    async with serving([sse]) as (_server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}, on_message) == {"content": []}
        await poster.aclose()
    assert seen == ["one", "two"]


async def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    def ok_then_close(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        data, _ = ok_json(message, head)
        return data, True  # the server closes the keep-alive connection after answering

    async with serving([ok_then_close]) as (server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}) == {"ok": True}
            await server.until_closed(1)  # the pooled connection is now half-closed by the server
            assert await poster.post(REQUEST, {}) == {"ok": True}
        await poster.aclose()
    assert server.connections == 2
    assert len(server.requests) == 2  # each request reached the server exactly once


async def test_a_written_request_is_never_sent_again() -> None:
    """A reused connection that ends after the request was written, before any response byte:
    the upstream may have run the tool, so the caller gets the error and nothing is resent."""

    def swallow(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        return b"", True  # read the request, answer nothing, close

    async with serving([ok_json, swallow]) as (server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}) == {"ok": True}
            with pytest.raises(UpstreamUnavailableError):
                await poster.post(REQUEST, {})  # on the reused keep-alive connection
        await poster.aclose()
    assert server.connections == 1
    assert len(server.requests) == 2  # the second request once, never retried


async def test_a_connection_dropped_mid_response_fails_without_retry() -> None:
    def partial(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{", True

    async with serving([partial]) as (server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT), pytest.raises(UpstreamUnavailableError):
            await poster.post(REQUEST, {})
        await poster.aclose()
    assert len(server.requests) == 1  # never sent twice: the server may have acted on it


async def test_json_rpc_error_bodies_and_status_stand_ins() -> None:
    def bad_request(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "bad params"}}
        return http("400 Bad Request", json.dumps(body).encode()), False

    def server_error(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        return http("500 Internal Server Error", b"oops", "text/plain"), False

    async with serving([bad_request, server_error]) as (_server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            with pytest.raises(ResponseError) as first:
                await poster.post(REQUEST, {})
            with pytest.raises(ResponseError) as second:
                await poster.post(REQUEST, {})
        await poster.aclose()
    assert first.value.error == {"code": -32602, "message": "bad params"}
    assert second.value.error["code"] == -32603  # the SDK transport's stand-in for a non-JSON error


async def test_a_same_origin_redirect_is_followed_and_remembered() -> None:
    def redirect(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        if head.startswith(b"POST /mcp/ "):
            return ok_json(message, head)
        return http("307 Temporary Redirect", b"", extra="location: /mcp/\r\n"), False

    async with serving([redirect]) as (server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}) == {"ok": True}
            assert await poster.post(REQUEST, {}) == {"ok": True}
        await poster.aclose()
    targets = [head.split(b" ")[1] for head, _ in server.requests]
    assert targets == [b"/mcp", b"/mcp/", b"/mcp/"]


async def test_cancelling_an_exchange_closes_its_connection() -> None:
    def hold(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        return b"", False  # never answers

    async with serving([hold]) as (server, url):
        poster = JsonRpcPoster(url)
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(poster.post, REQUEST, {})
                await server.got_request.wait()  # the upstream is serving it
                tg.cancel_scope.cancel()  # the caller gives up (a timeout, a downstream cancel)
            await server.eof_seen.wait()  # the upstream sees its request stream end
        await poster.aclose()
    assert poster.exchanges == 0


def test_only_http_and_https_urls() -> None:
    with pytest.raises(ValueError):
        JsonRpcPoster("ftp://127.0.0.1/mcp")
    JsonRpcPoster("https://127.0.0.1/mcp")  # an https source takes the same path (ADR 0030)


def _self_signed(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting it) for 127.0.0.1, made here with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_pem, key_pem = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_pem, key_pem)
    client = ssl.create_default_context(cafile=str(cert_pem))
    return server, client


async def test_an_https_source_is_posted_to_over_tls(tmp_path: Path) -> None:
    server_ctx, client_ctx = _self_signed(tmp_path)
    server = Server([ok_json])
    listener = TLSListener(
        await anyio.create_tcp_listener(local_host="127.0.0.1"), server_ctx, standard_compatible=False
    )
    port = listener.listener.extra(anyio.abc.SocketAttribute.local_port)
    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, server.handle)
        poster = JsonRpcPoster(f"https://127.0.0.1:{port}/mcp", ssl_context=client_ctx)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}) == {"ok": True}
            assert await poster.post({**REQUEST, "id": 8}, {}) == {"ok": True}
            with pytest.raises(UpstreamUnavailableError):  # a certificate the default context does not trust
                await JsonRpcPoster(f"https://127.0.0.1:{port}/mcp").post(REQUEST, {})
        await poster.aclose()
        tg.cancel_scope.cancel()
    assert [m["id"] for _, m in server.requests] == [7, 8]


class Tokens:
    """A bearer source that hands out ``t1``, ``t2``, ... (``renew`` gives the next one unless
    ``stuck``)."""

    def __init__(self, stuck: bool = False) -> None:
        self.n = 1
        self.stuck = stuck

    async def token(self) -> str:
        return f"t{self.n}"

    async def renew(self, rejected: str) -> str:
        if not self.stuck:
            self.n += 1
        return f"t{self.n}"


def unauthorized(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
    return http("401 Unauthorized", b"", extra="www-authenticate: Bearer\r\n"), False


async def test_a_401_renews_the_token_once_and_sends_the_refused_request_again() -> None:
    statuses: list[int] = []
    async with serving([unauthorized, ok_json]) as (server, url):
        poster = JsonRpcPoster(url, auth=Tokens(), on_status=statuses.append)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}) == {"ok": True}
            assert await poster.post({**REQUEST, "id": 8}, {}) == {"ok": True}
        await poster.aclose()
    auth = [
        next(ln for ln in head.decode().lower().split("\r\n") if ln.startswith("authorization"))
        for head, _ in server.requests
    ]
    assert auth == ["authorization: bearer t1", "authorization: bearer t2", "authorization: bearer t2"]
    assert statuses == [401, 200, 200]  # each exchange's status reaches the failure's evidence


async def test_a_401_with_no_new_token_is_the_answer() -> None:
    async with serving([unauthorized]) as (server, url):
        poster = JsonRpcPoster(url, auth=Tokens(stuck=True))
        with anyio.fail_after(WAIT), pytest.raises(ResponseError):
            await poster.post(REQUEST, {})
        await poster.aclose()
    assert len(server.requests) == 1  # never resent with the token the upstream refused


async def test_an_sse_event_that_never_ends_is_refused_at_the_message_bound() -> None:
    """ADR 0025: one SSE event is counted as it arrives; past ``max_message_bytes`` the call
    fails with the bound (the server never ends the event, nor the stream), nothing more is kept."""
    from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError

    def endless(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        start = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\nevent: message\r\ndata: "
        return start + b"x" * (3 * 1024 * 1024), False  # no end of event, connection left open

    async with serving([endless]) as (_server, url):
        poster = JsonRpcPoster(url, max_message_bytes=1024 * 1024, source="endless")
        with anyio.fail_after(WAIT), pytest.raises(MessageBoundError) as caught:
            await poster.post(REQUEST, {})
        assert (caught.value.bound, caught.value.limit) == (MESSAGE_BOUND_KEY, 1024 * 1024)
        assert 1024 * 1024 < caught.value.size <= 1024 * 1024 + 128 * 1024
        await poster.aclose()


async def test_the_message_bound_is_per_sse_event_not_per_stream() -> None:
    """Many small events adding up to more than the bound, then the response: answered."""

    def chatty(message: dict[str, Any], head: bytes) -> tuple[bytes, bool]:
        note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "y" * 900}}
        events = b"".join(b"event: message\r\ndata: " + json.dumps(note).encode() + b"\r\n\r\n" for _ in range(3000))
        answer = {"jsonrpc": "2.0", "id": message["id"], "result": {"ok": True}}
        body = events + b"event: message\r\ndata: " + json.dumps(answer).encode() + b"\r\n\r\n"
        return http("200 OK", body, ctype="text/event-stream"), False

    seen: list[dict[str, Any]] = []

    async def on_message(message: dict[str, Any]) -> None:
        seen.append(message)

    async with serving([chatty]) as (_server, url):
        poster = JsonRpcPoster(url, max_message_bytes=1024 * 1024)
        with anyio.fail_after(WAIT):
            assert await poster.post(REQUEST, {}, on_message) == {"ok": True}
        assert len(seen) == 3000  # 2.8 MB of events in all, none near the bound
        await poster.aclose()
