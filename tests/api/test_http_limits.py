"""Bounds at the HTTP edge (issue 10, items 5 and 7; I18): each at N and N+1, each with its clear
refusal, against a served gateway on 127.0.0.1 spoken to over raw sockets (so the test controls
every byte and every silence).

- connections: N idle connections are held; the N+1st closes the oldest idle one; with N busy
  ones, the N+1st is refused with 503;
- silent and half-open connections are closed after ``header_timeout_s`` (408 if half a head);
- a request head of exactly ``header_bytes`` is served, one more byte is refused with 431, in one
  read or trickled;
- a body of exactly the limit passes, one more byte is refused with 413, declared or chunked,
  before the rest is sent; ``/v1`` answers in its error shape, ``/mcp`` with a JSON-RPC error."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.control import MAX_BODY_BYTES
from mcp_reconciler.api.http_limits import ACCEPT_BACKLOG, descriptor_budget
from mcp_reconciler.api.server import Served
from tests.api.conftest import OPERATOR_TOKEN, served_gateway, write_config
from tests.support.waits import until

pytestmark = pytest.mark.anyio

CONNECTIONS = 8
HEADER_BYTES = 2048
BODY_BYTES = 4096
HEADER_TIMEOUT_S = 1.0
WAIT = 10.0


@asynccontextmanager
async def limited(tmp: Path, **limits: object) -> AsyncIterator[Served]:
    base = {
        "connections": CONNECTIONS,
        "header_bytes": HEADER_BYTES,
        "body_bytes": BODY_BYTES,
        "header_timeout_s": HEADER_TIMEOUT_S,
    }
    cfg = write_config(tmp, gateway={"limits": {**base, **limits}})
    async with served_gateway(cfg) as served:
        yield served


async def connect(served: Served) -> anyio.abc.SocketStream:
    return await anyio.connect_tcp("127.0.0.1", served.port)


async def response(stream: anyio.abc.SocketStream) -> tuple[int, dict[str, str], bytes]:
    """One whole HTTP/1.1 response (status, headers, body) read from ``stream`` (bounded)."""
    buf = b""
    with anyio.fail_after(WAIT):
        while b"\r\n\r\n" not in buf:
            buf += await stream.receive()
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += await stream.receive()
    return int(lines[0].split()[1]), headers, body


async def closed_by_peer(stream: anyio.abc.SocketStream, timeout_s: float = WAIT) -> bytes:
    """Everything the server sends until it closes the connection (bounded)."""
    got = b""
    with anyio.fail_after(timeout_s):
        while True:
            try:
                got += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                return got


def get(path: str, *, pad: int = 0, extra: str = "") -> bytes:
    head = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n{extra}"
    if pad:
        head += "x-pad: " + "p" * pad + "\r\n"
    return (head + "\r\n").encode()


def sized_get(path: str, size: int) -> bytes:
    """A GET whose head (through the blank line) is exactly ``size`` bytes."""
    bare = len(get(path, pad=1)) - 1
    request = get(path, pad=size - bare)
    assert len(request) == size
    return request


# -- connections ----------------------------------------------------------------------------------


async def test_connections_at_the_bound_close_the_oldest_idle_one(tmp_path: Path) -> None:
    async with limited(tmp_path) as served:
        idle = [await connect(served) for _ in range(CONNECTIONS)]  # N: all held
        probe = await connect(served)  # N+1: the oldest idle one makes room
        await closed_by_peer(idle[0])
        await probe.send(get("/healthz"))
        status, _, body = await response(probe)
        assert status == 200 and json.loads(body) == {"status": "ok"}
        for stream in idle[1:]:  # the others are still open: a request on each is served
            await stream.send(get("/healthz"))
            assert (await response(stream))[0] == 200
        for stream in [*idle, probe]:
            await stream.aclose()


async def test_connections_all_busy_refuse_the_next_with_503(tmp_path: Path) -> None:
    async with limited(tmp_path) as served:
        busy = []
        for _ in range(CONNECTIONS):  # N requests whose bodies never arrive: heads complete, busy
            stream = await connect(served)
            head = f"POST /v1/refresh HTTP/1.1\r\nhost: 127.0.0.1:{served.port}\r\n"
            head += f"authorization: Bearer {OPERATOR_TOKEN}\r\n"
            await stream.send((head + "content-type: application/json\r\ncontent-length: 10\r\n\r\n").encode())
            busy.append(stream)
        guard = served.connections
        assert guard is not None
        await until(
            lambda: guard.open == CONNECTIONS and guard.idle == 0,
            what="every head is parsed: the slots are busy, not idle",
            timeout_s=WAIT,
        )
        extra = await connect(served)
        refusal = await closed_by_peer(extra)
        assert refusal.startswith(b"HTTP/1.1 503 "), refusal
        for stream in busy:  # finishing their bodies: each is answered
            await stream.send(b"{}        ")
            assert (await response(stream))[0] == 200
        for stream in [*busy, extra]:
            await stream.aclose()


# -- silent and half-open connections -------------------------------------------------------------


async def test_silent_and_half_open_connections_are_closed_after_the_header_timeout(tmp_path: Path) -> None:
    async with limited(tmp_path) as served:
        silent = await connect(served)
        half = await connect(served)
        await half.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n")  # never finished
        with anyio.fail_after(HEADER_TIMEOUT_S * 5):
            assert await closed_by_peer(silent) == b""
            assert (await closed_by_peer(half)).startswith(b"HTTP/1.1 408 ")
        # After a response the connection waits for its next head under the same timeout.
        kept = await connect(served)
        await kept.send(get("/healthz"))
        assert (await response(kept))[0] == 200
        await closed_by_peer(kept, HEADER_TIMEOUT_S * 5)
        for stream in (silent, half, kept):
            await stream.aclose()


async def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_s(tmp_path: Path) -> None:
    """README "Limits and shutdown": ``keep_alive_s`` closes an idle keep-alive connection. The
    header timeout is set far above it, so only ``keep_alive_s`` can close it this soon."""
    keep_alive_s = 0.5
    async with limited(tmp_path, keep_alive_s=keep_alive_s, header_timeout_s=60.0) as served:
        kept = await connect(served)
        await kept.send(get("/healthz"))
        assert (await response(kept))[0] == 200
        answered = anyio.current_time()
        assert await closed_by_peer(kept, WAIT) == b""  # long before the 60 s header timeout
        assert anyio.current_time() - answered >= keep_alive_s * 0.9  # not before keep_alive_s
        await kept.aclose()


def test_connections_are_clamped_so_fd_reserve_stays_free() -> None:
    """README "Limits and shutdown": ``connections`` is clamped so that ``fd_reserve`` (plus the
    accept batch) stays free — at N the configured bound stands, at N+1 it is cut by one."""
    reserve, configured = 256, 1024
    probe = descriptor_budget(configured, reserve, soft_limit=1_000_000)
    assert probe.connections == configured and probe.reserve == reserve
    # The descriptors free for connections: what the soft limit leaves after those in use, the
    # reserve and twice the accept batch (module docstring). Exactly `configured` of them: N.
    fits = probe.in_use + reserve + 2 * ACCEPT_BACKLOG + configured
    assert descriptor_budget(configured, reserve, soft_limit=fits).connections == configured
    # One descriptor fewer: the connection bound gives it up, the reserve does not.
    short = descriptor_budget(configured, reserve, soft_limit=fits - 1)
    assert short.connections == configured - 1 and short.reserve == reserve
    assert descriptor_budget(configured, reserve, soft_limit=probe.in_use).connections == 1  # never below 1


# -- request heads --------------------------------------------------------------------------------


@pytest.mark.parametrize("trickle", [False, True])
async def test_request_head_of_n_bytes_is_served_n_plus_1_is_431(trickle: bool, tmp_path: Path) -> None:
    async with limited(tmp_path) as served:
        for size, expected in ((HEADER_BYTES, 200), (HEADER_BYTES + 1, 431)):
            stream = await connect(served)
            request = sized_get("/healthz", size)
            if trickle:
                for i in range(0, len(request), 100):
                    await stream.send(request[i : i + 100])
            else:
                await stream.send(request)
            status, headers, _ = await response(stream)
            assert status == expected, (size, status)
            if expected == 431:
                assert headers.get("connection") == "close"
                assert await closed_by_peer(stream) == b""
            await stream.aclose()


async def test_an_endless_header_is_cut_at_the_bound(tmp_path: Path) -> None:
    """A header that never ends (the 100 MB header of the issue) costs at most the bound."""
    async with limited(tmp_path) as served:
        stream = await connect(served)
        await stream.send(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-huge: ")
        sent = 0
        with anyio.fail_after(WAIT):
            try:
                while sent < 10 * 1024 * 1024:
                    await stream.send(b"h" * 4096)
                    sent += 4096
            except (anyio.BrokenResourceError, ConnectionResetError):
                pass
        assert sent < 10 * 1024 * 1024, "the gateway kept reading an endless header"
        await stream.aclose()


# -- request bodies -------------------------------------------------------------------------------


def post(
    path: str, body: bytes, *, chunked: bool = False, token: str | None = OPERATOR_TOKEN, host: str = "127.0.0.1"
) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
    head += "accept: application/json, text/event-stream\r\n"
    if token:
        head += f"authorization: Bearer {token}\r\n"
    if chunked:
        return (head + "transfer-encoding: chunked\r\n\r\n").encode() + b"%x\r\n" % len(body) + body + b"\r\n"
    return (head + f"content-length: {len(body)}\r\n\r\n").encode() + body


def json_of_size(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes (``{"p": "..."}``)."""
    body = json.dumps({"p": "x" * (size - 9)}).encode()
    assert len(body) == size
    return body


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize(("path", "limit"), [("/v1/refresh", MAX_BODY_BYTES), ("/mcp", BODY_BYTES)])
async def test_body_of_n_bytes_passes_n_plus_1_is_413(path: str, limit: int, chunked: bool, tmp_path: Path) -> None:
    async with limited(tmp_path) as served:
        # N bytes: past the limit check (the endpoint then judges the content). /mcp takes an
        # agent session's token, /v1 the operator's.
        token = served.front.authority.create("alice", None).token if path == "/mcp" else OPERATOR_TOKEN
        host = f"127.0.0.1:{served.port}"  # a loopback Host: /mcp checks it before the body's size
        ok = await connect(served)
        await ok.send(post(path, json_of_size(limit), chunked=chunked, token=token, host=host))
        if chunked:
            await ok.send(b"0\r\n\r\n")
        status, _, _ = await response(ok)
        assert status != 413, status
        await ok.aclose()
        # N+1 bytes: refused, and the refusal comes before the body is finished (chunked: the
        # terminating chunk is never sent; the gateway must not wait for it).
        big = await connect(served)
        await big.send(post(path, json_of_size(limit + 1), chunked=chunked, token=token, host=host))
        status, headers, body = await response(big)
        assert status == 413 and headers.get("connection") == "close"
        refusal = json.loads(body)
        if path == "/mcp":
            assert refusal["jsonrpc"] == "2.0" and refusal["error"]["code"] == -32600
            assert refusal["error"]["data"]["code"] == "body_too_large"
        else:
            assert refusal == {
                "error": {"code": "body_too_large", "message": f"request bodies are limited to {limit} bytes"}
            }
        await big.aclose()


async def test_a_1_gib_chunked_body_is_refused_after_the_limit_not_at_the_end(tmp_path: Path) -> None:
    """The issue's case: /v1 read a 1 GiB chunked body before answering 413. Now the answer
    arrives while the client is still sending, after about the limit."""
    async with limited(tmp_path) as served:
        stream = await connect(served)
        head = f"POST /v1/refresh HTTP/1.1\r\nhost: 127.0.0.1:{served.port}\r\ncontent-type: application/json\r\n"
        await stream.send(
            (head + f"authorization: Bearer {OPERATOR_TOKEN}\r\ntransfer-encoding: chunked\r\n\r\n").encode()
        )
        chunk = b"%x\r\n" % 65536 + b" " * 65536 + b"\r\n"
        sent = 0
        answer = b""
        with anyio.fail_after(WAIT * 3):
            async with anyio.create_task_group() as tg:

                async def read() -> None:
                    nonlocal answer
                    answer = await closed_by_peer(stream, WAIT * 3)
                    tg.cancel_scope.cancel()

                tg.start_soon(read)
                try:
                    while sent < 1024**3:
                        await stream.send(chunk)
                        sent += 65536
                except (anyio.BrokenResourceError, ConnectionResetError):
                    pass
                await anyio.sleep_forever()
        assert answer.startswith(b"HTTP/1.1 413 "), answer[:100]
        assert sent < 64 * 1024 * 1024, f"{sent} bytes were taken before the 413"
        await stream.aclose()
