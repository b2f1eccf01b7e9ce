"""A 2025-era request's SSE response on the data plane (``api/plane/era2025.py``): raw
2025-11-25 sessions over HTTP on 127.0.0.1 against the served gateway, so each test sees the
bytes on the wire.

What is held: the wire form is the SDK server's (a priming event, then the response, which ends
the stream); a relayed server→client request rides the call's own stream; a client that drops
the stream and resumes with ``Last-Event-ID`` still gets the response (the call is not
cancelled); POSTs that are not plain requests (notifications, malformed bodies) get the SDK
server's answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcp_reconciler.api.plane.channel import Replies
from mcp_reconciler.api.server import serve_http
from tests.e2e.conftest import WAIT, write_config
from tests.e2e.support_resources import UPSTREAM_ARGS, new_token, resource_source
from tests.e2e.test_standalone_stream import RawSession, events
from tests.relay.conftest import RelayUpstreams, session_token, upstream
from tests.relay.conftest import write_config as relay_config

pytestmark = pytest.mark.anyio


def without_ids(raw: bytes) -> list[str]:
    """The SSE lines of ``raw`` with every event id blanked (ids differ between runs)."""
    return ["id: _" if line.startswith("id: ") else line for line in raw.decode().split("\r\n")]


def error_code(response: httpx2.Response) -> Any:
    """The JSON-RPC error code of a response body, if it is one."""
    try:
        return response.json().get("error", {}).get("code")
    except ValueError:
        return None


async def request_raw(s: RawSession, method: str, params: dict[str, Any], request_id: int) -> httpx2.Response:
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = await s.http.post(s.url, json=body, headers=s.headers)
    response.raise_for_status()
    return response


async def test_a_requests_stream_is_the_sdks_wire_form_and_ends_with_the_response(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[resource_source("res", *UPSTREAM_ARGS["legacy"])])
    async with serve_http(cfg, port=0) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        s = RawSession(http, served, new_token(served))
        await s.open()
        with anyio.fail_after(WAIT):
            response = await request_raw(s, "tools/list", {}, 7)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache, no-transform"
        lines = without_ids(response.content)
        assert lines[:3] == ["id: _", "data: ", ""], lines  # the priming event (2025-11-25)
        assert lines[3:6] == ["id: _", "event: message", lines[5]] and lines[5].startswith("data: {"), lines
        answer = json.loads(lines[5][6:])
        assert answer["id"] == 7 and "result" in answer
        assert lines[6:] == ["", ""], lines  # the response ends the stream


async def test_posts_that_are_not_plain_requests_get_the_sdks_answers(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, sources=[resource_source("res", *UPSTREAM_ARGS["legacy"])])
    async with serve_http(cfg, port=0) as served, httpx2.AsyncClient(timeout=WAIT) as http:
        s = RawSession(http, served, new_token(served))
        await s.open()
        h = {**s.headers, "content-type": "application/json"}
        request = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {}}
        posts = [
            (b"{not json", h),
            (json.dumps({"jsonrpc": "2.0", "id": 3}).encode(), h),
            (json.dumps({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}).encode(), h),
            (json.dumps(request).encode(), {**h, "accept": "application/json"}),
            (json.dumps(request).encode(), {**h, "mcp-session-id": "nope"}),
            (json.dumps(request).encode(), {**h, "content-type": "text/plain"}),
        ]
        got = []
        for body, headers in posts:
            r = await http.post(s.url, content=body, headers=headers)
            got.append((r.status_code, error_code(r)))
        assert [status for status, _ in got] == [400, 400, 202, 406, 404, 400], got
        assert got[0][1] == -32700


async def test_a_relayed_request_rides_the_calls_stream_and_a_resumed_stream_gets_the_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request is asked on the call's stream, and the client's answer POST is taken by the
    session's ``Replies`` — even after the stream dropped (which does not cancel the call)."""
    taken: list[object] = []
    deliver = Replies.deliver

    def counting(self: Replies, message: Any) -> bool:
        taken.append(message)
        return deliver(self, message)

    monkeypatch.setattr(Replies, "deliver", counting)
    ups = RelayUpstreams(tmp_path)
    try:
        src = await upstream(ups, "http", "legacy")
        await relayed_and_resumed(src, tmp_path)
        assert len(taken) == 1, taken
    finally:
        ups.close()


async def relayed_and_resumed(src: dict[str, Any], tmp_path: Path) -> None:
    async with serve_http(relay_config(tmp_path, [src]), port=0) as served:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            s = RawSession(http, served, session_token(served), capabilities={"sampling": {}})
            await s.open()
            call = {"jsonrpc": "2.0", "id": 11, "method": "tools/call"}
            call["params"] = {"name": "up__sample", "arguments": {"prompt": "hi"}}
            with anyio.fail_after(WAIT):
                async with http.stream("POST", s.url, json=call, headers=s.headers) as stream:
                    priming, asked = await events(stream, 2)
                # The stream is dropped here, mid-call; the sampling request came on it.
                assert asked.get("data"), (priming, asked)
                request = json.loads(asked["data"])
                assert request["method"] == "sampling/createMessage", request
                assert priming.get("data", "") == ""
                answer = {
                    "jsonrpc": "2.0",
                    "id": request["id"],
                    "result": {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"},
                }
                assert (await http.post(s.url, json=answer, headers=s.headers)).status_code == 202
                headers = {**s.headers, "accept": "text/event-stream", "last-event-id": asked["id"]}
                async with http.stream("GET", s.url, headers=headers) as resumed:
                    replay_priming, got = await events(resumed, 2)  # the SDK's replay primes the stream
                    assert replay_priming.get("data", "") == ""
        response = json.loads(got["data"])
        assert response["id"] == 11
        assert json.loads(response["result"]["content"][0]["text"])["sampled"] == "hello"
