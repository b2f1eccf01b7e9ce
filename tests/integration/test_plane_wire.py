"""``/mcp`` of a served gateway process at the wire (issue 26): malformed requests and every
bound, in both eras, with raw HTTP — whichever data plane ``mcp-reconciler serve`` runs.

One real SDK server upstream (``tests/support/relay_server`` over streamable HTTP on 127.0.0.1)
and one gateway over it, ``mcp-reconciler serve --port 0`` in its own process (the port it
reports in its banner). Where the SDK server makes the same check, the same raw request goes to
both and the answers must be equal — status, content type and the JSON-RPC messages (SSE framing
aside: event ids and the priming event are the gateway's); the 4 MiB body bound both make by
default is compared at N and N+1 bytes. Where the check is the gateway's alone (a configured body
bound, session bounds, an identity's sessions), the answer is the documented one.

What the neighbours already cover, and this module does not repeat: the 2026-07-28 POST ladder
(bad JSON, batch, content type, Accept, ``Mcp-Method``/``Mcp-Name`` mismatch, envelope, version)
against the SDK server in ``test_plane_oracle.py``; a missing or invalid credential (401 and its
challenge, both eras) in ``tests/api/test_mcp_auth.py``; header-size, connection and chunked-body
bounds in ``tests/api/test_http_limits.py``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from tests.api.test_http_limits import response
from tests.e2e.conftest import ANONYMOUS_CURRENT
from tests.integration.conftest import REPO_ROOT
from tests.relay.conftest import RelayUpstreams
from tests.relay.conftest import relay_upstreams as relay_upstreams  # the fixture
from tests.support.gateway_process import GatewayProcess, gateway_process
from tests.support.raw_mcp import ACCEPT, LEGACY, MODERN, messages, rpc

pytestmark = pytest.mark.anyio

WAIT = 20.0
PREFIX = "up__"
UNKNOWN_SID = "0" * 32
DEFAULT_BODY_BYTES = 4 * 1024 * 1024  # the SDK server's and the gateway's default body bound
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "wire", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
INITIALIZE = rpc(
    "initialize", {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "w", "version": "0"}}
)
#: Two identities declared in the config (besides anonymous access): ``${WIRE_TOKEN_A}``, ``…_B``.
TOKENS = {"WIRE_TOKEN_A": "wire-token-a-0123456789abcdef0123", "WIRE_TOKEN_B": "wire-token-b-0123456789abcdef0123"}


@dataclass
class Served:
    """The SDK server's URL (``direct``) and the gateway process in front of it."""

    direct: str
    gateway: GatewayProcess


@asynccontextmanager
async def served(tmp_path: Path, relay_upstreams: RelayUpstreams, **gateway: Any) -> AsyncIterator[Served]:
    """A relay server and ``mcp-reconciler serve --port 0`` over it (anonymous access open, the
    identities of :data:`TOKENS` declared; ``gateway`` adds settings), once its tools are
    published."""
    source = await relay_upstreams.source("up")
    sessions = [{"name": name.lower(), "token": f"${{{name}}}", "grant_policy": "current"} for name in TOKENS]
    settings = {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT, **gateway}
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps({"gateway": settings, "sessions": sessions, "sources": [source]}))
    serve = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    async with gateway_process(serve, cwd=REPO_ROOT, env={**os.environ, **TOKENS}) as gw:
        await gw.wait_line(r"revision \d+: .*'up__echo'")  # the banner names the published tools
        yield Served(source["http"]["url"], gw)


@dataclass(frozen=True)
class Answer:
    """What the comparison reads of an HTTP answer."""

    status: int
    content_type: str
    messages: tuple[str, ...]  # the JSON-RPC messages, as canonical JSON


def answer(r: httpx2.Response) -> Answer:
    ctype = r.headers.get("content-type", "").split(";")[0]
    found = messages(r) if r.content else []
    return Answer(r.status_code, ctype, tuple(json.dumps(m, sort_keys=True) for m in found))


async def read_head(http: httpx2.AsyncClient, method: str, url: str, headers: dict[str, str]) -> Answer:
    """A GET's answer without waiting for a stream that stays open: status, content type, and the
    body only when it is not an event stream."""
    async with http.stream(method, url, headers=headers) as r:
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            return Answer(r.status_code, "text/event-stream", ())
        await r.aread()
        return answer(r)


async def open_legacy(http: httpx2.AsyncClient, url: str, headers: dict[str, str] | None = None) -> httpx2.Response:
    """``initialize`` (+ ``notifications/initialized`` when it opened a session)."""
    r = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **(headers or {})})
    sid = r.headers.get("mcp-session-id")
    if r.status_code == 200 and sid:
        note = rpc("notifications/initialized", id_=None)
        done = await http.post(url, json=note, headers={**ACCEPT, **(headers or {}), **on(sid)})
        assert done.status_code == 202, done.text
    return r


def on(sid: str) -> dict[str, str]:
    """The headers naming a 2025-era session."""
    return {"mcp-session-id": sid, "mcp-protocol-version": LEGACY}


def body(message: Any) -> bytes:
    return json.dumps(message).encode()


PING = body(rpc("ping", {}))
Request = Callable[[httpx2.AsyncClient, str, str], Coroutine[Any, Any, Answer]]


def post(raw: bytes, headers: Callable[[str], dict[str, str]]) -> Request:
    async def send(http: httpx2.AsyncClient, url: str, sid: str) -> Answer:
        return answer(await http.post(url, content=raw, headers=headers(sid)))

    return send


def bare(method: str, headers: Callable[[str], dict[str, str]]) -> Request:
    async def send(http: httpx2.AsyncClient, url: str, sid: str) -> Answer:
        return await read_head(http, method, url, headers(sid))

    return send


def session(sid: str) -> dict[str, str]:
    return {**ACCEPT, **on(sid)}


def sized(message: dict[str, Any], size: int, where: dict[str, Any] | None = None) -> bytes:
    """``message`` padded to exactly ``size`` bytes by a ``pad`` string in ``where`` (default: its
    ``params.arguments``)."""
    where = message["params"]["arguments"] if where is None else where
    where["pad"] = ""
    where["pad"] = "x" * (size - len(body(message)))
    raw = body(message)
    assert len(raw) == size
    return raw


async def declared_length_status(url: str, length: int, headers: dict[str, str]) -> int:
    """The status a POST head declaring ``length`` body bytes gets (no body is sent)."""
    target = httpx2.URL(url)
    head = f"POST {target.path} HTTP/1.1\r\nhost: {target.host}:{target.port}\r\ncontent-length: {length}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    async with await anyio.connect_tcp(target.host, target.port or 80) as stream:
        await stream.send((head + "\r\n").encode())
        status, _, _ = await response(stream)
    return status


#: Requests the SDK server checks too: (case, request). ``sid`` is the caller's open session.
SAME_AS_SDK: list[tuple[str, Request]] = [
    ("2025 bad JSON", post(b"{not json", session)),
    ("2025 batch", post(body([rpc("ping", {}), rpc("ping", {}, 2)]), session)),
    ("2025 not an object", post(b"42", session)),
    ("2025 posted response", post(body({"jsonrpc": "2.0", "id": 99, "result": {}}), session)),
    ("2025 notification", post(body(rpc("notifications/cancelled", {"requestId": 5}, id_=None)), session)),
    ("2025 text/plain body", post(PING, lambda s: {**session(s), "content-type": "text/plain"})),
    ("2025 Accept without SSE", post(PING, lambda s: {**session(s), "accept": "application/json"})),
    ("2025 Accept without JSON", post(PING, lambda s: {**session(s), "accept": "text/event-stream"})),
    ("2025 unsupported version header", post(PING, lambda s: {**session(s), "mcp-protocol-version": "1999-01-01"})),
    ("2025 no session id", post(PING, lambda s: {**ACCEPT, "mcp-protocol-version": LEGACY})),
    ("2025 unknown session id", post(PING, lambda s: session(UNKNOWN_SID))),
    ("2025 initialize in a batch", post(body([INITIALIZE]), lambda s: ACCEPT)),
    ("2025 initialize, bad JSON", post(b"{", lambda s: ACCEPT)),
    ("2025 PUT", bare("PUT", session)),
    ("2025 GET, no session id", bare("GET", lambda s: {"accept": "text/event-stream"})),
    ("2025 GET, unknown session id", bare("GET", lambda s: {"accept": "text/event-stream", **on(UNKNOWN_SID)})),
    ("2025 DELETE, no session id", bare("DELETE", lambda s: ACCEPT)),
    ("2025 DELETE, unknown session id", bare("DELETE", lambda s: session(UNKNOWN_SID))),
    ("2026 GET", bare("GET", lambda s: {"accept": "text/event-stream", "mcp-protocol-version": MODERN})),
    ("2026 DELETE", bare("DELETE", lambda s: {**ACCEPT, "mcp-protocol-version": MODERN})),
    ("2026 PUT", bare("PUT", lambda s: {**ACCEPT, "mcp-protocol-version": MODERN})),
]


async def test_malformed_requests_and_foreign_session_ids_answer_as_the_sdk_server(
    tmp_path: Path, relay_upstreams: RelayUpstreams
) -> None:
    """Every request of :data:`SAME_AS_SDK`, in both eras, gets the SDK server's own answer. Then
    a 2025-era session id named by another identity (an anonymous session, by a caller with a
    session token; a token's session, by another token): POST, GET and DELETE answer byte for byte
    what an unknown session id gets — the SDK server's own 404 — so nothing tells the caller the id
    exists; its owner goes on using it. (One gateway for both halves: a process start is most of
    this test's time.)"""
    async with served(tmp_path, relay_upstreams) as s, httpx2.AsyncClient(timeout=WAIT) as http:
        direct_sid = (await open_legacy(http, s.direct)).headers["mcp-session-id"]
        gateway_sid = (await open_legacy(http, s.gateway.url)).headers["mcp-session-id"]
        differ: list[str] = []
        for case, request in SAME_AS_SDK:
            theirs = await request(http, s.direct, direct_sid)
            ours = await request(http, s.gateway.url, gateway_sid)
            if ours != theirs:
                differ.append(f"{case}:\n  gateway {ours}\n  sdk     {theirs}")
        assert not differ, "\n".join(differ)  # every difference at once, named by case
        # Both sessions are still open and usable after all that.
        for url, sid in ((s.direct, direct_sid), (s.gateway.url, gateway_sid)):
            assert (await http.post(url, content=PING, headers=session(sid))).status_code == 200, url
        # The body bound both make (the SDK server's max_request_body_size and the gateway's
        # default limits.body_bytes, 4 MiB each): N bytes are served, N+1 are 413 on both.
        listing = rpc("tools/list", {"_meta": dict(ENVELOPE)})
        headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/list"}
        raw = sized(listing, DEFAULT_BODY_BYTES, listing["params"]["_meta"])
        for url in (s.direct, s.gateway.url):
            assert (await http.post(url, content=raw, headers=headers)).status_code == 200, url
            # N+1: the head alone (both answer on the declared length, before reading a byte of
            # the body; sending it would race the server closing the connection)
            assert await declared_length_status(url, DEFAULT_BODY_BYTES + 1, headers) == 413, url
        await foreign_session_ids_are_unknown(http, s, anonymous_sid=gateway_sid)


async def foreign_session_ids_are_unknown(http: httpx2.AsyncClient, s: Served, anonymous_sid: str) -> None:
    """The second half of the test above."""
    sdk_unknown = answer(await http.post(s.direct, content=PING, headers=session(UNKNOWN_SID)))
    assert sdk_unknown.status == 404
    url = s.gateway.url
    a, b = ({"authorization": f"Bearer {TOKENS[k]}"} for k in TOKENS)
    token_sid = (await open_legacy(http, url, a)).headers["mcp-session-id"]
    for sid, owner, intruder in ((anonymous_sid, {}, a), (token_sid, a, b)):
        for method, headers in (
            ("POST", {**session(sid), **intruder}),
            ("GET", {"accept": "text/event-stream", **on(sid), **intruder}),
            ("DELETE", {**session(sid), **intruder}),
        ):
            unknown = {**headers, "mcp-session-id": UNKNOWN_SID}
            content = PING if method == "POST" else None
            theirs = await http.request(method, url, content=content, headers=headers)
            baseline = await http.request(method, url, content=content, headers=unknown)
            assert (theirs.status_code, theirs.content) == (baseline.status_code, baseline.content), method
            assert answer(theirs) == sdk_unknown, method
            assert "mcp-session-id" not in theirs.headers, method
        owned = await http.post(url, content=PING, headers={**session(sid), **owner})
        assert owned.status_code == 200 and messages(owned)[-1]["result"] == {}


def echo_call() -> dict[str, Any]:
    return rpc("tools/call", {"name": PREFIX + "echo", "arguments": {"pad": ""}})


MODERN_CALL = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": "tools/call", "mcp-name": PREFIX + "echo"}
BODY_BYTES = 2048
PER_CLIENT, TOTAL = 2, 4


async def test_I18_bounds_and_the_edge_on_a_served_gateway(tmp_path: Path, relay_upstreams: RelayUpstreams) -> None:
    """The gateway's own checks, as documented (README "Limits", "Security"):

    - the body bound (``limits.body_bytes``): N bytes are served, N+1 are 413 with
      ``body_too_large``, in both eras;
    - 2025-era sessions per client (``transport_sessions_per_client``): N open, N+1 is 429
      ``too_many_sessions`` (retryable) without a session id; in total (``transport_sessions``):
      N+1 is 503; a refused or malformed sessionless request takes no slot, and a DELETE frees
      one;
    - a foreign ``Host`` is 421 and a foreign ``Origin`` 403 (as the SDK server's own DNS-rebinding
      check answers), in both eras, with the gateway's JSON-RPC error and no session."""
    limits = {"body_bytes": BODY_BYTES, "transport_sessions_per_client": PER_CLIENT, "transport_sessions": TOTAL}
    a, b = ({"authorization": f"Bearer {TOKENS[k]}"} for k in TOKENS)
    async with served(tmp_path, relay_upstreams, limits=limits) as s, httpx2.AsyncClient(timeout=WAIT) as http:
        url = s.gateway.url
        # -- the body bound, 2026 era then 2025 era ----------------------------------------------
        call = echo_call()
        call["params"]["_meta"] = ENVELOPE
        ok = await http.post(url, content=sized(call, BODY_BYTES), headers=MODERN_CALL)
        assert ok.status_code == 200, ok.text
        assert json.loads(ok.json()["result"]["content"][0]["text"])["pad"].startswith("x")
        over = await http.post(url, content=sized(call, BODY_BYTES + 1), headers=MODERN_CALL)
        assert over.status_code == 413 and over.headers.get("connection") == "close"
        assert over.json()["error"]["code"] == -32600
        assert over.json()["error"]["data"] == {"code": "body_too_large", "retryable": False}
        sid = (await open_legacy(http, url)).headers["mcp-session-id"]  # anonymous: 1 of PER_CLIENT
        ok = await http.post(url, content=sized(echo_call(), BODY_BYTES), headers=session(sid))
        assert ok.status_code == 200 and "result" in messages(ok)[-1], ok.text
        over = await http.post(url, content=sized(echo_call(), BODY_BYTES + 1), headers=session(sid))
        assert over.status_code == 413 and over.json()["error"]["data"]["code"] == "body_too_large"

        # -- sessions per client and in total ------------------------------------------------------
        for refused_request in (  # sessionless and refused: none of these may take the last slot
            http.post(url, content=PING, headers={**ACCEPT, "mcp-protocol-version": LEGACY}),
            http.post(url, content=b"{", headers=ACCEPT),
            http.post(url, content=body([INITIALIZE]), headers=ACCEPT),
        ):
            assert (await refused_request).status_code == 400
        second = await open_legacy(http, url)  # N for anonymous
        assert second.status_code == 200
        refused = await open_legacy(http, url)  # N+1 for anonymous
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["data"] == {"code": "too_many_sessions", "retryable": True}
        assert "mcp-session-id" not in refused.headers
        assert [(await open_legacy(http, url, a)).status_code for _ in range(2)] == [200, 200]  # N in total
        total = await open_legacy(http, url, b)  # N+1 in total
        assert total.status_code == 503, total.text
        assert "mcp-session-id" not in total.headers
        gone = await http.delete(url, headers=session(second.headers["mcp-session-id"]))
        assert gone.status_code in (200, 204)
        assert (await open_legacy(http, url, b)).status_code == 200  # the freed slot is taken

        # -- Host and Origin -----------------------------------------------------------------------
        modern_ping = {**MODERN_CALL, "mcp-method": "tools/list"}
        modern_ping.pop("mcp-name")
        listing = body(rpc("tools/list", {"_meta": ENVELOPE}))
        for era, raw, headers in (("2025", body(INITIALIZE), ACCEPT), ("2026", listing, modern_ping)):
            for header, value, status, text in (
                ("host", "evil.example", 421, "the Host header is not an allowed host"),
                ("origin", "http://evil.example", 403, "the Origin header is not an allowed origin"),
            ):
                sdk = await http.post(s.direct, content=raw, headers={**headers, header: value})
                ours = await http.post(url, content=raw, headers={**headers, header: value})
                assert ours.status_code == sdk.status_code == status, (era, header)
                assert ours.json() == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": text}}
                assert "mcp-session-id" not in ours.headers
