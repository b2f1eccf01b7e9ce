"""Production telemetry (issue 29, ADR 0031): ``/metrics`` after a scripted session, the
metrics listener, and the audit trail's records for the same script.

The script, on one gateway with one stdio upstream (``up``: tools a, b): two calls of ``up__a``
and one of ``up__b`` (ok), one call of a name that does not exist (refused), one ``/mcp``
request with a bad token (refused credential), a publication (``set_tools``), a crash of the
upstream under a call (unavailable) and its reconnect. The OpenTelemetry SDK's meter provider is
process-wide, so counters are compared as deltas between a scrape before and one after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2 as httpx
import pytest
from mcp import Client

from mcp_reconciler.reconciler.prometheus import parse_text
from tests.api.conftest import (
    ALICE,
    OPERATOR_TOKEN,
    WAIT,
    mcp_client,
    served_gateway,
    upstream_source,
    write_config,
)
from tests.api.test_transport_sessions import initialize
from tests.support.calls import call_error
from tests.support.plane_memory import PlaneTransport
from tests.support.waits import until

pytestmark = pytest.mark.anyio

PLANTED = "sk-planted-secret-0123456789"


def _config(tmp_path: Path, **telemetry: Any) -> Path:
    cfg = write_config(tmp_path, sources=[upstream_source("up", "a", "b")])
    data = json.loads(cfg.read_text())
    data["telemetry"] = telemetry
    cfg.write_text(json.dumps(data))
    return cfg


async def _scrape(base: str, token: str | None = OPERATOR_TOKEN) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        return await http.get(f"{base}/metrics", headers=headers)


def _delta(after: dict[str, float], before: dict[str, float], series: str) -> float:
    return after.get(series, 0.0) - before.get(series, 0.0)


def _connection(engine: Any) -> Any:
    live = engine.current
    state = live.generation.source_state("up") if live is not None else None
    return state.connection if state is not None else None


async def _script(served: Any) -> None:
    """The scripted session (module docstring)."""
    engine = served.gateway.engine
    async with httpx.AsyncClient(base_url=served.base_url, headers={"authorization": f"Bearer {OPERATOR_TOKEN}"}) as op:
        created = await op.post("/v1/sessions", json={"owner": "alice"})
        assert created.status_code == 201
        session = created.json()
    async with mcp_client(served, headers={"authorization": f"Bearer {session['token']}"}) as client:
        assert (await client.list_tools()) == (await client.list_tools())  # the second from the page cache
        await client.call_tool("up__a", {"x": 1, "token": PLANTED})
        await client.call_tool("up__a", {"x": 2})
        await client.call_tool("up__b", {})
        await call_error(client, "up__nope", {})
        revision = engine.current_revision
        await client.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
        await until(lambda: (engine.current_revision or 0) > (revision or 0), what="a publication")
        first = _connection(engine)
        crashed = await call_error(client, "up__crash", {})
        assert (crashed.error.data or {}).get("code") == "upstream_unavailable"
    await until(
        lambda: _connection(engine) not in (None, first) and _connection(engine).alive,
        what="the upstream reconnected",
    )
    async with httpx.AsyncClient() as http:
        refused = await http.post(
            served.url, headers={"authorization": "Bearer not-a-token"}, json={"jsonrpc": "2.0", "id": 1}
        )
        assert refused.status_code == 401
    async with httpx.AsyncClient(base_url=served.base_url, headers={"authorization": f"Bearer {OPERATOR_TOKEN}"}) as op:
        assert (await op.delete(f"/v1/sessions/{session['id']}")).status_code == 204
    return session["id"]


async def test_metrics_after_a_scripted_session(tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    cfg = _config(tmp_path, audit={"path": str(trail), "argument_digest": True})
    async with served_gateway(cfg) as served:
        base = served.base_url
        engine = served.gateway.engine
        published: list[object] = []
        engine.add_listener(lambda new, old: published.append(new))
        before = parse_text((await _scrape(base)).text)
        session = await _script(served)
        response = await _scrape(base)
        assert served.observability is not None and served.observability.audit_log is not None
        assert served.observability.audit_log.drained(WAIT)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        after = parse_text(response.text)
        revision = engine.current_revision

    calls = "mcp_reconciler_frontdoor_operation_duration_seconds_count"
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__a",outcome="ok"}}') == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__b",outcome="ok"}}') == 1
    assert _delta(after, before, f'{calls}{{kind="tool",name="unknown",outcome="unknown_name"}}') == 1
    le = 'mcp_reconciler_frontdoor_operation_duration_seconds_bucket{kind="tool",name="up__a",outcome="ok",le="+Inf"}'
    assert _delta(after, before, le) == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__crash",outcome="upstream_unavailable"}}') == 1
    assert _delta(after, before, 'mcp_reconciler_frontdoor_auth_refused_total{reason="invalid"}') == 1
    pages = "mcp_reconciler_frontdoor_list_pages_total"
    assert _delta(after, before, f'{pages}{{from="built",method="tools/list"}}') >= 1
    assert _delta(after, before, f'{pages}{{from="cache",method="tools/list"}}') >= 1
    # set_tools publishes a, b, c; the crash may publish the source's failure; the reconnected
    # upstream lists its spawn snapshot a, b again: exactly what the engine published.
    assert len(published) >= 2
    publishes = sum(
        _delta(after, before, k) for k in {*after, *before} if k.startswith("mcp_reconciler_publishes_total{")
    )
    assert publishes == len(published)
    assert _delta(after, before, 'mcp_reconciler_reconnects_total{source="up"}') == 1
    # a tally read at collection (telemetry.Tally): a, a, b, set_tools, crash sent upstream
    assert _delta(after, before, 'mcp_reconciler_upstream_session_requests_total{method="tools/call"}') == 5
    assert after["mcp_reconciler_revision"] == revision
    assert after['mcp_reconciler_source_state{source="up",state="ready"}'] == 1
    assert after['mcp_reconciler_source_consecutive_failures{source="up"}'] == 0
    assert 'mcp_reconciler_source_last_success_age_seconds{source="up"}' in after
    assert (
        _delta(after, before, 'mcp_reconciler_frontdoor_upstream_duration_seconds_count{kind="tool",source="up"}')
        == 5  # a, a, b, set_tools, crash (the upstream's share is measured even when it fails)
    )
    for line in response.text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            assert name.startswith("mcp_reconciler_")
            assert (kind == "counter") == name.endswith("_total"), line

    # The audit trail of the same script: exactly these records, in order.
    text = trail.read_text()
    assert PLANTED not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert [(r["kind"], r.get("name"), r["outcome"], r.get("error")) for r in records] == [
        ("session.create", None, "ok", None),
        ("tools.call", "up__a", "ok", None),
        ("tools.call", "up__a", "ok", None),
        ("tools.call", "up__b", "ok", None),
        ("tools.call", "up__nope", "error", "unknown_name"),
        ("tools.call", "up__set_tools", "ok", None),
        ("tools.call", "up__crash", "error", "upstream_unavailable"),
        ("credential.refused", None, "refused", None),
        ("session.delete", None, "ok", None),
    ]
    first = records[1]
    assert first["principal"] == f"session::{session}" and first["session"] == session
    assert first["source"] == "up" and first["upstream_name"] == "a" and first["revision"] >= 1
    assert first["digest"] and first["duration_ms"] >= 0 and first["request_bytes"] > 0 and first["response_bytes"] > 0
    assert first["args_sha256"].startswith("sha256:") and first["args_sha256"] != records[2]["args_sha256"]
    assert records[0]["principal"] == "operator::operator1" and records[0]["session"] == session
    assert records[7]["reason"] == "invalid" and records[7]["status"] == 401


async def test_metrics_needs_an_operator_token(tmp_path: Path) -> None:
    async with served_gateway(_config(tmp_path)) as served:
        assert (await _scrape(served.base_url, None)).status_code == 401
        assert (await _scrape(served.base_url, "not-a-token")).status_code == 401
        assert (await _scrape(served.base_url, ALICE)).status_code == 403  # an owner's token
        assert (await _scrape(served.base_url)).status_code == 200
    async with served_gateway(_config(tmp_path, metrics=False)) as served:
        assert (await _scrape(served.base_url)).status_code == 404


async def test_served_names_get_labels_up_to_the_cap_then_other(tmp_path: Path) -> None:
    async with served_gateway(_config(tmp_path, served_names_max=1)) as served:
        before = parse_text((await _scrape(served.base_url)).text)
        async with mcp_client(served) as client:
            await client.call_tool("up__a", {})
            await client.call_tool("up__b", {})
            await client.call_tool("up__a", {})
        after = parse_text((await _scrape(served.base_url)).text)
    calls = "mcp_reconciler_frontdoor_operation_duration_seconds_count"
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__a",outcome="ok"}}') == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="other",outcome="ok"}}') == 1
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__b",outcome="ok"}}') == 0


async def _get(port: int, request: bytes) -> bytes:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        out = b""
        with anyio.fail_after(WAIT):
            while True:
                try:
                    out += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    return out


async def test_metrics_listener_serves_metrics_without_auth_within_its_bounds(tmp_path: Path) -> None:
    from mcp_reconciler.api.observability import LISTENER_CONNECTIONS, LISTENER_HEAD_BYTES

    async with served_gateway(_config(tmp_path, metrics_listen="127.0.0.1:0")) as served:
        assert served.observability is not None
        port = served.observability.metrics_port
        assert port
        ok = await _get(port, b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200") and b"mcp_reconciler_revision" in ok
        assert (await _get(port, b"GET /v1/status HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404")
        # The request head bound: at N served, past it 431.
        line = b"GET /metrics HTTP/1.1\r\n"
        pad = LISTENER_HEAD_BYTES - len(line) - len(b"x-pad: \r\n\r\n")
        at_bound = line + b"x-pad: " + b"p" * pad + b"\r\n\r\n"
        assert len(at_bound) == LISTENER_HEAD_BYTES
        assert (await _get(port, at_bound)).startswith(b"HTTP/1.1 200")
        past = line + b"x-pad: " + b"p" * (pad + 1) + b"\r\n\r\n"
        assert (await _get(port, past)).startswith(b"HTTP/1.1 431")
        # The connection bound: N - 1 idle connections held, one more is still served; with N
        # held, the next is closed without an answer.
        idle = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(LISTENER_CONNECTIONS - 1)]
        try:
            assert (await _get(port, b"GET /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 200")
            idle.append(await anyio.connect_tcp("127.0.0.1", port))
            before = parse_text((await _scrape(served.base_url)).text)
            assert await _get(port, b"GET /metrics HTTP/1.1\r\n\r\n") == b""
            after = parse_text((await _scrape(served.base_url)).text)
            assert _delta(after, before, 'mcp_reconciler_gateway_limits_hits_total{bound="metrics_connections"}') == 1
        finally:
            for stream in idle:
                await stream.aclose()


async def test_I23_a_full_disk_never_fails_a_call(tmp_path: Path) -> None:
    """2,000 calls with the audit sink on ``/dev/full`` (every write fails: no space) and a
    queue of 16: every call answers ok, and every record is accounted for as written, failed
    at the sink or dropped at the queue bound — and reported in /v1/status."""
    # 2,000 is 125 times the queue bound with 20 concurrent callers, so the queue overflows and
    # the sink fails many times over — the property (no call fails, every record accounted for)
    # is the same as at 10,000, which only took five times longer (75 s under load in CI).
    calls = 2_000
    cfg = _config(tmp_path, audit={"path": "/dev/full", "queue": 16})
    async with served_gateway(cfg) as served:
        ok = 0

        # In memory on the served front door (the same dispatcher; no HTTP cost per call).
        async with Client(PlaneTransport(served.front)) as client:

            async def worker(n: int) -> None:
                nonlocal ok
                for _ in range(n):
                    result = await client.call_tool("up__a", {})
                    ok += not result.is_error

            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(worker, calls // 20)
        assert ok == calls
        trail = served.observability.audit_log if served.observability is not None else None
        assert trail is not None and trail.drained(WAIT)
        assert trail.written == 0 and trail.failed > 0
        assert trail.failed + trail.dropped == calls
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {OPERATOR_TOKEN}"}) as http:
            status = (await http.get(f"{served.base_url}/v1/status")).json()
        assert status["audit"]["failed"] + status["audit"]["dropped"] >= calls


async def test_I18_bound_hits_are_counted_by_bound(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    data = json.loads(cfg.read_text())
    data["gateway"]["limits"] = {"body_bytes": 1024}
    cfg.write_text(json.dumps(data))
    series = 'mcp_reconciler_gateway_limits_hits_total{bound="body_bytes"}'
    async with served_gateway(cfg) as served:
        before = parse_text((await _scrape(served.base_url)).text)
        async with httpx.AsyncClient() as http:
            at_bound = await http.post(served.url, content=b"x" * 1024)
            assert at_bound.status_code == 401  # within the bound: on to the credential check
            mid = parse_text((await _scrape(served.base_url)).text)
            assert _delta(mid, before, series) == 0
            past = await http.post(served.url, content=b"x" * 1025)
            assert past.status_code == 413
        after = parse_text((await _scrape(served.base_url)).text)
    assert _delta(after, before, series) == 1


async def test_I18_transport_session_refusals_are_counted_by_bound(tmp_path: Path) -> None:
    """README "Observe it": ``gateway_limits_hits_total`` counts every I18 bound hit, the total
    transport sessions (503) as well as the per-client bound (429): nothing at N, one per refusal past it."""
    cfg = _config(tmp_path)
    data = json.loads(cfg.read_text())
    data["gateway"]["limits"] = {"transport_sessions": 2, "transport_sessions_per_client": 1}
    cfg.write_text(json.dumps(data))
    total = 'mcp_reconciler_gateway_limits_hits_total{bound="transport_sessions"}'
    per_client = 'mcp_reconciler_gateway_limits_hits_total{bound="transport_sessions_per_client"}'
    async with served_gateway(cfg) as served, httpx.AsyncClient() as http:
        tokens = [served.front.authority.create(owner, None).token for owner in ("alice", "bob", "carol")]

        async def open_session(token: str) -> int:
            return (await initialize(http, served, token)).status_code

        before = parse_text((await _scrape(served.base_url)).text)
        assert [await open_session(tokens[0]), await open_session(tokens[1])] == [200, 200]  # N in total
        mid = parse_text((await _scrape(served.base_url)).text)
        assert _delta(mid, before, total) == 0 and _delta(mid, before, per_client) == 0
        assert await open_session(tokens[2]) == 503  # N+1 in total
        assert await open_session(tokens[0]) == 503  # the total bound answers first
        after = parse_text((await _scrape(served.base_url)).text)
    assert _delta(after, before, total) == 2
    assert _delta(after, before, per_client) == 0


async def test_cluster_replica_labels_metrics_and_records(tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    cfg = _config(tmp_path, audit={"path": str(trail)})
    data = json.loads(cfg.read_text())
    data["cluster"] = {"store": "memory", "replica_id": "replica-7"}
    cfg.write_text(json.dumps(data))
    async with served_gateway(cfg) as served:
        async with mcp_client(served) as client:
            await client.call_tool("up__a", {})
        text = (await _scrape(served.base_url)).text
        assert served.observability is not None and served.observability.audit_log is not None
        assert served.observability.audit_log.drained(WAIT)
    samples = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert samples and all('replica="replica-7"' in line for line in samples)
    assert [json.loads(line)["replica"] for line in trail.read_text().splitlines()] == ["replica-7"]
    # The label belongs to that gateway only.
    (tmp_path / "next").mkdir()
    async with served_gateway(_config(tmp_path / "next")) as served:
        assert 'replica="' not in (await _scrape(served.base_url)).text


async def test_audit_records_who_set_a_sessions_approval_globs_and_a_refused_lift(tmp_path: Path) -> None:
    """``PUT /v1/sessions/{id}/approval`` changes what a session may run without an approval:
    the trail names who set which globs, and an owner's refused attempt to lift them (403)."""
    trail = tmp_path / "audit.jsonl"
    async with served_gateway(_config(tmp_path, audit={"path": str(trail)})) as served:
        headers = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
        async with httpx.AsyncClient(base_url=served.base_url, headers=headers) as op:
            sid = (await op.post("/v1/sessions", json={"owner": "alice"})).json()["id"]
            path = f"/v1/sessions/{sid}/approval"
            owner = {"authorization": f"Bearer {ALICE}"}
            async with httpx.AsyncClient(base_url=served.base_url, headers=owner) as alice:
                assert (await alice.put(path, json={"required": ["up__a", "up__b*"]})).status_code == 200
                assert (await alice.put(path, json={"required": []})).status_code == 403
            assert (await op.put(path, json={"required": []})).status_code == 200
        assert served.observability is not None and served.observability.audit_log is not None
        assert served.observability.audit_log.drained(WAIT)
    records = [json.loads(line) for line in trail.read_text().splitlines()]
    changes = [r for r in records if r["kind"] == "session.approval"]
    assert [(r["principal"], r["session"], r["status"], r["outcome"], r.get("detail")) for r in changes] == [
        ("owner::alice", sid, 200, "ok", "required=up__a,up__b*"),
        ("owner::alice", sid, 403, "error", None),
        ("operator::operator1", sid, 200, "ok", "required="),
    ]
