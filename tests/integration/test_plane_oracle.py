"""The gateway's own data plane (issue 26, ``api/plane``) against two oracles, 2026-07-28 era.

One real SDK server upstream (streamable HTTP on 127.0.0.1, ``tests/support/upstream_server``),
one gateway over it (``serve_http``: the SDK-based plane at ``served.url``) and a second gateway
on the same config whose only HTTP layer is the new plane, served by uvicorn (tests only:
production does not build it yet). The same raw HTTP requests go to

- the SDK-based plane: the JSON-RPC responses, HTTP status codes and content types must be
  *equal* (same config, same upstream: any difference is the new plane's);
- the SDK server directly: equal apart from the gateway's ``_meta`` keys, the ``serverInfo``
  stamp and the ``h__`` name prefix — for results, protocol errors and every malformed request;

and the SDK's own client (``mode="modern"``) runs a session through the new plane."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.frontdoor.cache import LRU
from mcp_reconciler.api.mcp_auth import SessionTokens
from mcp_reconciler.api.plane.asgi import build_plane
from mcp_reconciler.api.plane.pipeline import EdgePolicy
from mcp_reconciler.api.server import anonymous_grants, serve_http
from mcp_reconciler.reconciler.gateway import Gateway
from tests.e2e.conftest import ANONYMOUS_CURRENT, downstream
from tests.integration.conftest import HttpUpstreams
from tests.relay.conftest import RelayUpstreams, Sampler, payload, upstream
from tests.relay.conftest import relay_upstreams as relay_upstreams  # the fixture, for the relay test
from tests.relay.conftest import write_config as write_relay_config
from tests.support.asgi_server import served_asgi

pytestmark = pytest.mark.anyio

WAIT = 20.0
VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "oracle", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": VERSION,
}


@dataclass
class Answer:
    """One HTTP answer, reduced to what the oracle compares."""

    status: int
    content_type: str
    body: Any  # the JSON-RPC message (the last one on an SSE stream), or the raw text


async def post(http: httpx2.AsyncClient, url: str, body: Any, headers: dict[str, str] | None = None) -> Answer:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await http.post(url, content=raw, headers=headers if headers is not None else HEADERS)
    ctype = r.headers.get("content-type", "").split(";")[0]
    text = r.text
    if ctype == "text/event-stream":
        text = [x[5:] for x in text.splitlines() if x.startswith("data:") and x[5:].strip()][-1]
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    return Answer(r.status_code, ctype, parsed)


def call(method: str, params: dict[str, Any] | None = None, id_: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    """A well-formed 2026 request and its routing headers."""
    params = {**(params or {}), "_meta": {**ENVELOPE, **(params or {}).get("_meta", {})}}
    headers = {**HEADERS, "mcp-method": method}
    if isinstance(params.get("name"), str):
        headers["mcp-name"] = params["name"]
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}, headers


def strip_gateway(value: Any, prefix: str = "h__") -> Any:
    """``value`` with what the gateway adds taken out: its ``_meta`` keys, the serverInfo stamp
    (each server stamps its own name), the source prefix of names."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "_meta" and isinstance(v, dict):
                v = {
                    mk: mv
                    for mk, mv in v.items()
                    if not mk.startswith("io.mcp-reconciler/") and mk != "io.modelcontextprotocol/serverInfo"
                }
                if not v:
                    continue
            out[k] = strip_gateway(v, prefix)
        return out
    if isinstance(value, list):
        items = [strip_gateway(v, prefix) for v in value]
        if all(isinstance(v, dict) and "name" in v for v in items):
            items.sort(key=lambda v: str(v["name"]))  # the gateway lists in name order (deterministic)
        return items
    if isinstance(value, str) and value.startswith(prefix):
        return value[len(prefix) :]
    return value


async def published(front: FrontDoor, names: set[str]) -> None:
    with anyio.fail_after(WAIT):
        while True:
            live = front.catalog.current()
            if live is not None and names <= set(live.generation.tools):
                return
            await anyio.sleep(0.05)  # the engine offers no "published these names" event


@asynccontextmanager
async def plane_gateway(cfg: Path, **limits: Any) -> AsyncIterator[tuple[str, FrontDoor]]:
    """A gateway on ``cfg`` whose only HTTP layer is the new plane (it takes the front door's
    push gate), served by uvicorn on 127.0.0.1; yields (its ``/mcp`` URL, the front door)."""
    async with Gateway(cfg) as gw:
        front = FrontDoor(gw.engine, gw.engine.sessions)
        plane = build_plane(
            front,
            EdgePolicy(credentials=[SessionTokens(front.authority)], anonymous=lambda: anonymous_grants(gw.settings)),
            **limits,
        )
        async with anyio.create_task_group() as tg:
            await tg.start(front.run)
            await tg.start(plane.run)
            async with served_asgi(plane) as base:
                yield f"{base}/mcp", front
            tg.cancel_scope.cancel()


@asynccontextmanager
async def three_ways(
    tmp_path: Path, http_upstreams: HttpUpstreams, sessions: list[dict[str, Any]] | None = None, **limits: Any
) -> AsyncIterator[tuple[str, str, str, FrontDoor]]:
    """(direct SDK server URL, SDK-based gateway plane URL, new plane URL, the new plane's front
    door): two gateways on the same config over the same SDK server."""
    _proc, port = await http_upstreams.start("--tools", "a,b")
    doc = {
        "gateway": {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT},
        "sources": [{"name": "h", "http": {"url": f"http://127.0.0.1:{port}/mcp"}}],
        "sessions": sessions or [],
    }
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    async with serve_http(cfg, port=0) as served, plane_gateway(cfg, **limits) as (new, front):
        await published(served.front, {"h__a", "h__b"})
        await published(front, {"h__a", "h__b"})
        yield f"http://127.0.0.1:{port}/mcp", served.url, new, front


#: Every method the gateway serves in this era, errors included: (method, params).
SEQUENCE: list[tuple[str, dict[str, Any]]] = [
    ("tools/list", {}),
    ("tools/call", {"name": "h__a", "arguments": {"x": 1, "nested": {"k": [1, "two", None]}}}),
    ("tools/call", {"name": "h__a"}),
    ("tools/call", {"name": "h__fail_result", "arguments": {"text": "tool said no"}}),
    ("tools/call", {"name": "h__fail_protocol", "arguments": {"text": "SECRET-upstream-text"}}),
    ("tools/call", {"name": "h__nope", "arguments": {}}),
    ("tools/call", {"name": "h__a", "arguments": "not an object"}),
    ("tools/call", {"name": "h__a", "arguments": {}, "_meta": {"io.mcp-reconciler/revision": 999}}),
    ("tools/list", {"cursor": "bogus"}),
    ("prompts/list", {}),
    ("resources/list", {}),
    ("resources/templates/list", {}),
    ("server/discover", {}),
    ("ping", {}),
    ("no/such/method", {}),
    ("initialize", {}),
]


async def test_plane_answers_exactly_as_the_sdk_based_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """Same front door, same upstream: the new plane's JSON, status and content type equal the
    SDK-based plane's for every request of :data:`SEQUENCE`."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, old, new, _served):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            for i, (method, params) in enumerate(SEQUENCE):
                body, headers = call(method, params, id_=i + 1)
                before, after = await post(http, old, body, headers), await post(http, new, body, headers)
                assert after == before, (method, params)
                assert "SECRET" not in json.dumps(after.body)  # I12 holds on the new plane too


def direct_form(method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The request the SDK server gets directly: the gateway's names without their prefix, no
    gateway ``_meta``."""
    return method, strip_gateway(params)


async def test_plane_answers_as_the_sdk_server_directly(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """The SDK server itself is the oracle: results and protocol errors equal apart from what
    the gateway adds (:func:`strip_gateway`)."""
    same = [
        ("tools/list", {}),
        ("tools/call", {"name": "h__a", "arguments": {"x": 1}}),
        ("tools/call", {"name": "h__a", "arguments": "not an object"}),
        ("tools/call", {"name": "h__fail_result", "arguments": {"text": "no"}}),
        # Not prompts/*: this upstream serves none (404) while the gateway lists an empty catalog.
        ("ping", {}),
        ("no/such/method", {}),
        ("initialize", {}),
    ]
    async with three_ways(tmp_path, http_upstreams) as (direct, _old, new, _served):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            for method, params in same:
                body, headers = call(method, params)
                d_method, d_params = direct_form(method, params)
                d_body, d_headers = call(d_method, d_params)
                d_body["params"]["_meta"] = ENVELOPE
                ours, theirs = await post(http, new, body, headers), await post(http, direct, d_body, d_headers)
                assert (ours.status, ours.content_type) == (theirs.status, theirs.content_type), method
                assert strip_gateway(ours.body) == strip_gateway(theirs.body), method
                if ours.status == 200 and "result" in ours.body:
                    assert (
                        ours.body["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-reconciler"
                    )


MALFORMED: list[tuple[str, bytes, dict[str, str]]] = [
    ("bad JSON", b"{not json", HEADERS),
    ("batch", json.dumps([call("ping")[0], call("ping", id_=2)[0]]).encode(), {**HEADERS, "mcp-method": "ping"}),
    ("not an object", b"42", HEADERS),
    ("posted response", json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode(), HEADERS),
    ("wrong content type", json.dumps(call("ping")[0]).encode(), {**call("ping")[1], "content-type": "text/plain"}),
    ("no SSE in Accept", json.dumps(call("ping")[0]).encode(), {**call("ping")[1], "accept": "application/json"}),
    ("method header mismatch", json.dumps(call("ping")[0]).encode(), {**call("ping")[1], "mcp-method": "tools/list"}),
    (
        "name header mismatch",
        json.dumps(call("tools/call", {"name": "x"})[0]).encode(),
        {**call("tools/call", {"name": "x"})[1], "mcp-name": "y"},
    ),
    ("no method header", json.dumps(call("ping")[0]).encode(), HEADERS),
    (
        "unsupported version",
        json.dumps(call("ping")[0]).encode(),
        {**call("ping")[1], "mcp-protocol-version": "2099-01-01"},
    ),
    (
        "no envelope",
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}).encode(),
        {**HEADERS, "mcp-method": "ping"},
    ),
    (
        "notification",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}).encode(),
        HEADERS,
    ),
    ("bad id", json.dumps({"jsonrpc": "2.0", "id": [1], "method": "ping"}).encode(), HEADERS),
]


@pytest.mark.parametrize(("case", "raw", "headers"), MALFORMED, ids=[m[0] for m in MALFORMED])
async def test_malformed_requests_answer_as_the_sdk_server(
    case: str, raw: bytes, headers: dict[str, str], tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    """Each malformed request gets the SDK server's own status, content type and body."""
    async with three_ways(tmp_path, http_upstreams) as (direct, _old, new, _served):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            ours, theirs = await post(http, new, raw, headers), await post(http, direct, raw, headers)
            assert ours == theirs, case
            assert ours.status >= 400 or ours.status == 202, case


async def test_sdk_client_session_through_the_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """The SDK's own 2026 client lists and calls through the new plane; a progress-reporting
    caller gets its result through the plane."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, _old, new, served):
        async with Client(new, mode=VERSION) as client:
            assert client.protocol_version == VERSION
            tools = await client.list_tools()
            assert {"h__a", "h__b"} <= {t.name for t in tools.tools}
            result = await client.call_tool("h__a", {"x": 1})
            assert result.is_error is False
            assert result.meta is not None
            assert result.meta["io.mcp-reconciler/revision"] == served.catalog.current().revision  # type: ignore[union-attr]


async def sse_messages(http: httpx2.AsyncClient, url: str, body: Any, headers: dict[str, str]) -> tuple[str, list[Any]]:
    r = await http.post(url, content=json.dumps(body).encode(), headers=headers)
    lines = [x[5:] for x in r.text.splitlines() if x.startswith("data:") and x[5:].strip()]
    return r.headers.get("content-type", ""), [json.loads(x) for x in lines]


async def test_progress_streams_as_on_the_sdk_based_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """A call that reports progress answers on an SSE stream: the same frames, in the same order
    (every progress notification before the result), as the SDK-based plane sends."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, old, new, _served):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            body, headers = call(
                "tools/call", {"name": "h__progress", "arguments": {"n": 3}, "_meta": {"progressToken": "p1"}}
            )
            old_type, before = await sse_messages(http, old, body, headers)
            new_type, after = await sse_messages(http, new, body, headers)
            assert new_type.startswith("text/event-stream") and old_type.startswith("text/event-stream")
            assert [m.get("method") for m in after] == ["notifications/progress"] * 3 + [None]
            assert after == before


async def test_listen_stream_through_the_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """``subscriptions/listen`` on the new plane: the SDK client's stream is acknowledged and a
    catalog change reaches it as ``tools/list_changed``."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, _old, new, _front):
        async with downstream(new, mode="auto") as (client, changes):  # auto: 2026-07-28, listening
            await client.call_tool("h__set_tools", {"names": ["a"]})  # b goes: the view changes
            await changes.wait_tools(1)


# -- the 2025-11-25 era ----------------------------------------------------------------------------

LEGACY = "2025-11-25"
LEGACY_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def last_message(r: httpx2.Response) -> Any:
    """The last JSON-RPC message of a response (SSE or JSON), or the raw text."""
    text = r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        data = [x[5:] for x in text.splitlines() if x.startswith("data:") and x[5:].strip()]
        text = data[-1] if data else ""
    try:
        return json.loads(text)
    except ValueError:
        return text


async def legacy_open(http: httpx2.AsyncClient, url: str) -> tuple[dict[str, str], Answer]:
    """initialize + notifications/initialized; returns the session's headers and the initialize answer."""
    init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "oracle", "version": "1"}}
    r = await http.post(
        url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}, headers=LEGACY_HEADERS
    )
    headers = {**LEGACY_HEADERS, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
    answer = Answer(r.status_code, r.headers.get("content-type", "").split(";")[0], last_message(r))
    ack = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert ack.status_code == 202
    return headers, answer


LEGACY_SEQUENCE: list[tuple[str, dict[str, Any]]] = [
    ("tools/list", {}),
    ("tools/call", {"name": "h__a", "arguments": {"x": 1}}),
    ("tools/call", {"name": "h__fail_result", "arguments": {"text": "tool said no"}}),
    ("tools/call", {"name": "h__fail_protocol", "arguments": {"text": "SECRET-upstream-text"}}),
    ("tools/call", {"name": "h__nope", "arguments": {}}),
    ("tools/call", {"name": "h__a", "arguments": "not an object"}),
    ("tools/list", {"cursor": "bogus"}),
    ("prompts/list", {}),
    ("resources/list", {}),
    ("ping", {}),
    ("logging/setLevel", {"level": "warning"}),
    ("no/such/method", {}),
    ("server/discover", {}),
]


async def test_legacy_era_answers_as_the_sdk_based_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """A 2025-11-25 session on each plane: the handshake and every request of
    :data:`LEGACY_SEQUENCE` get the same status, content type and JSON-RPC message."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, old, new, _front):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            old_h, old_init = await legacy_open(http, old)
            new_h, new_init = await legacy_open(http, new)
            assert new_init == old_init
            for i, (method, params) in enumerate(LEGACY_SEQUENCE):
                body = {"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params}
                before, after = (
                    await http.post(old, json=body, headers=old_h),
                    await http.post(new, json=body, headers=new_h),
                )
                assert (after.status_code, after.headers.get("content-type")) == (
                    before.status_code,
                    before.headers.get("content-type"),
                ), method
                assert last_message(after) == last_message(before), method
            # the session's edges: no session id, an unknown one, DELETE then reuse
            ping = {"jsonrpc": "2.0", "id": 99, "method": "ping"}
            for headers in (LEGACY_HEADERS, {**new_h, "mcp-session-id": "0" * 32}):
                a, b = (
                    await http.post(new, json=ping, headers=headers),
                    await http.post(
                        old,
                        json=ping,
                        headers={**old_h, **{k: v for k, v in headers.items() if k == "mcp-session-id"}}
                        if "mcp-session-id" in headers
                        else headers,
                    ),
                )
                assert a.status_code == b.status_code, headers
            assert (await http.delete(new, headers=new_h)).status_code == 200
            assert (await http.post(new, json=ping, headers=new_h)).status_code == 404


async def test_legacy_sdk_client_gets_pushes_on_its_get_stream(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """The SDK's 2025 client through the new plane: handshake, list, call, and a catalog change
    pushed as ``tools/list_changed`` on its GET stream."""
    async with three_ways(tmp_path, http_upstreams) as (_direct, _old, new, front):
        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if getattr(message, "method", None) == "notifications/tools/list_changed":
                changed.set()

        async with Client(new, mode="legacy", message_handler=on_message) as client:
            assert client.protocol_version == LEGACY
            assert {"h__a", "h__b"} <= {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("h__a", {"x": 1})
            assert result.is_error is False
            await client.call_tool("h__set_tools", {"names": ["a"]})  # b goes: the view changes
            with anyio.fail_after(WAIT):
                await changed.wait()
        assert not front.bindings or all(b.era != "legacy" for b in front.bindings.values())  # unbound at the end


@pytest.mark.parametrize("bound", ["max_sessions_per_client", "max_sessions"])
async def test_I18_legacy_sessions_are_bounded_per_client_and_in_total(
    bound: str, tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    """N sessions open; N+1 is refused (429 per client, 503 in total; retryable) until one is
    deleted."""
    limit = 2
    async with three_ways(tmp_path, http_upstreams, **{bound: limit}) as (_d, _o, new, _front):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            opened = [await legacy_open(http, new) for _ in range(limit)]
            init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "o", "version": "1"}}
            body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
            refused = await http.post(new, json=body, headers=LEGACY_HEADERS)
            assert refused.status_code == (429 if bound == "max_sessions_per_client" else 503)
            assert "mcp-session-id" not in refused.headers
            assert (await http.delete(new, headers=opened[0][0])).status_code == 200
            assert (await http.post(new, json=body, headers=LEGACY_HEADERS)).status_code == 200


async def test_a_session_id_of_another_identity_is_not_found(
    tmp_path: Path, http_upstreams: HttpUpstreams, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2025 session opened anonymously answers 404 to a caller with a session token (and the
    reverse), exactly as the SDK-based plane does; its owner keeps using it."""
    token = "plane-ci-token-0123456789abcdef"
    monkeypatch.setenv("PLANE_CI_TOKEN", token)
    declared = [{"name": "ci", "token": "${PLANE_CI_TOKEN}", "grant_policy": "current"}]
    async with three_ways(tmp_path, http_upstreams, sessions=declared) as (_d, old, new, _front):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
            for url in (old, new):
                anonymous, _ = await legacy_open(http, url)
                other = {**anonymous, "authorization": f"Bearer {token}"}
                assert (await http.post(url, json=ping, headers=other)).status_code == 404, url
                assert (await http.get(url, headers={**other, "accept": "text/event-stream"})).status_code == 404, url
                assert (await http.delete(url, headers=other)).status_code == 404, url
                assert (await http.post(url, json=ping, headers=anonymous)).status_code == 200, url


@pytest.mark.parametrize("up_era", ["legacy", "both"])
async def test_relay_reaches_a_legacy_client_through_the_plane(
    up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """I17 on the new plane: sampling and elicitation an upstream starts inside a call reach the
    2025-era client whose call it is, on that call's own stream, and its answers go back (a
    2026-era upstream asks with ``InputRequiredResult``, which the gateway fulfils the same way)."""
    src = await upstream(relay_upstreams, "http", up_era)
    async with plane_gateway(write_relay_config(tmp_path, [src], anonymous=ANONYMOUS_CURRENT)) as (new, front):
        await published(front, {"up__sample"})
        sampler = Sampler()

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            return types.ElicitResult(action="accept", content={"ok": True})

        async with Client(new, mode="legacy", sampling_callback=sampler, elicitation_callback=elicit) as c:
            res = await c.call_tool("up__sample", {"prompt": "hi"})
            assert payload(res) == {"sampled": "echo:hi", "model": "test-model"}
            assert sampler.prompts == ["hi"]
            answered = payload(await c.call_tool("up__elicit", {"message": "sure?", "mode": "form"}))
            assert answered == {"action": "accept", "content": {"ok": True}}


async def read_event(lines: AsyncIterator[str]) -> tuple[str | None, Any]:
    """The next SSE event with data on a stream: (its id, its JSON message)."""
    event_id: str | None = None
    async for line in lines:
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:") and line[5:].strip():
            return event_id, json.loads(line[5:])
    raise AssertionError("the stream ended")


async def test_get_stream_resumes_from_last_event_id(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """A push on the GET stream carries an event id; a new GET with ``Last-Event-ID`` before it
    gets it replayed first; one with its own id, or another session's, gets no replay."""
    async with three_ways(tmp_path, http_upstreams) as (_d, _o, new, _front):
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            headers, _ = await legacy_open(http, new)
            sse_headers = {**headers, "accept": "text/event-stream"}
            with anyio.fail_after(WAIT):
                async with http.stream("GET", new, headers=sse_headers) as stream:
                    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
                    call["params"] = {"name": "h__set_tools", "arguments": {"names": ["a"]}}
                    assert (await http.post(new, json=call, headers=headers)).status_code == 200
                    event_id, pushed = await read_event(stream.aiter_lines())
            assert pushed["method"] == "notifications/tools/list_changed"
            # <session>.<stream>:<n>, stream 0 being the GET stream (api/plane/sessions.py)
            assert event_id is not None and event_id.startswith(headers["mcp-session-id"] + ".0:")
            head, _, seq = event_id.rpartition(":")
            for last, replayed in ((f"{head}:{int(seq) - 1}", True), (event_id, False), (f"other.0:{seq}", False)):
                with anyio.move_on_after(1.0 if not replayed else WAIT) as waited:  # no replay: nothing comes
                    while True:  # the previous GET is closed once the server has seen it go (409 until then)
                        async with http.stream("GET", new, headers={**sse_headers, "last-event-id": last}) as stream:
                            if stream.status_code == 409:
                                continue
                            assert stream.status_code == 200
                            again = await read_event(stream.aiter_lines())
                            assert replayed and again == (event_id, pushed), last
                            break
                assert waited.cancelled_caught != replayed, last


async def test_named_views_answer_as_on_the_sdk_based_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """``/mcp/<view>`` (ADR 0026) in both eras: the view's list and a call outside it answer as on
    the SDK-based plane; an unknown view is 404 on both."""
    _proc, port = await http_upstreams.start("--tools", "a,b")
    doc = {
        "gateway": {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT},
        "sources": [{"name": "h", "http": {"url": f"http://127.0.0.1:{port}/mcp"}}],
        "views": [{"name": "only_a", "sources": ["h"], "tools": {"allow": ["h__a"]}}],
    }
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    async with serve_http(cfg, port=0) as served, plane_gateway(cfg) as (new, front):
        await published(served.front, {"h__a", "h__b"})
        await published(front, {"h__a", "h__b"})
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            for suffix in ("/only_a", "/nope"):
                old_url, new_url = served.url + suffix, new + suffix
                for method, params in [("tools/list", {}), ("tools/call", {"name": "h__b", "arguments": {}})]:
                    body, headers = call(method, params)
                    before, after = await post(http, old_url, body, headers), await post(http, new_url, body, headers)
                    assert after == before, (suffix, method)
                if suffix == "/only_a":
                    old_h, old_init = await legacy_open(http, old_url)
                    new_h, new_init = await legacy_open(http, new_url)
                    assert new_init == old_init
                    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
                    a, b = (
                        await http.post(new_url, json=body, headers=new_h),
                        await http.post(old_url, json=body, headers=old_h),
                    )
                    assert last_message(a) == last_message(b)
                    assert {t["name"] for t in last_message(a)["result"]["tools"]} == {"h__a"}
                else:
                    assert after.status == 404


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_prompts_resources_and_completion_answer_as_on_the_sdk_based_plane(
    era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    """``prompts/get``, ``resources/templates/list``, ``resources/read`` and
    ``completion/complete`` (forwarded to the owning source) answer on the new plane exactly as on
    the SDK-based one, in both eras, errors included."""
    src = await upstream(relay_upstreams, "http", "both")
    cfg = write_relay_config(tmp_path, [src], anonymous=ANONYMOUS_CURRENT)
    requests: list[tuple[str, dict[str, Any]]] = [
        ("prompts/list", {}),
        ("prompts/get", {"name": "up__greet", "arguments": {"name": "ada"}}),
        ("prompts/get", {"name": "up__nope", "arguments": {}}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "note://7"}),
        (
            "completion/complete",
            {"ref": {"type": "ref/prompt", "name": "up__greet"}, "argument": {"name": "name", "value": "a"}},
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": "note://{id}"}, "argument": {"name": "id", "value": "1"}},
        ),
    ]
    async with serve_http(cfg, port=0) as served, plane_gateway(cfg) as (new, front):
        await published(served.front, {"up__sample"})
        await published(front, {"up__sample"})
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            if era == "legacy":
                (old_h, _), (new_h, _) = await legacy_open(http, served.url), await legacy_open(http, new)
            for i, (method, params) in enumerate(requests):
                if era == "modern":
                    body, headers = call(method, params, id_=i + 1)
                    before, after = await post(http, served.url, body, headers), await post(http, new, body, headers)
                    assert after == before, method
                else:
                    body = {"jsonrpc": "2.0", "id": i + 1, "method": method, "params": params}
                    a, b = (
                        await http.post(new, json=body, headers=new_h),
                        await http.post(served.url, json=body, headers=old_h),
                    )
                    assert (a.status_code, last_message(a)) == (b.status_code, last_message(b)), method


class CountingLRU(LRU[Any, Any]):
    """The page cache's own LRU, counting the pages put into it (built, not served from it)."""

    puts = 0

    def put(self, key: Any, value: Any) -> None:
        self.puts += 1
        super().put(key, value)


async def test_list_pages_come_from_the_page_cache_on_the_plane(tmp_path: Path, http_upstreams: HttpUpstreams) -> None:
    """A list page is built once per (era, revision, grant set, view, cursor) and then served
    from the front door's page cache — the same JSON either way."""
    async with three_ways(tmp_path, http_upstreams) as (_d, _o, new, front):
        pages = front.list_cache.pages = CountingLRU(8)
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            body, headers = call("tools/list")
            first = await post(http, new, body, headers)
            assert pages.puts == 1  # built and kept
            assert await post(http, new, body, headers) == first
            assert pages.puts == 1  # served from the cache
            front.list_cache.enabled = False
            assert await post(http, new, body, headers) == first  # built afresh: equal
            assert pages.puts == 1
