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

import httpx2 as httpx
import pytest

from mcp_reconciler.reconciler.prometheus import parse_text
from tests.api.conftest import (
    OPERATOR_TOKEN,
    WAIT,
    mcp_client,
    served_gateway,
    upstream_source,
    wait_until,
    write_config,
)
from tests.support.calls import call_error

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
        await client.call_tool("up__a", {"x": 1, "token": PLANTED})
        await client.call_tool("up__a", {"x": 2})
        await client.call_tool("up__b", {})
        await call_error(client, "up__nope", {})
        revision = engine.current_revision
        await client.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
        await wait_until(lambda: (engine.current_revision or 0) > (revision or 0), what="a publication")
        first = _connection(engine)
        crashed = await call_error(client, "up__crash", {})
        assert (crashed.error.data or {}).get("code") == "upstream_unavailable"
    await wait_until(
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

    calls = "mcp_reconciler_frontdoor_calls_duration_seconds_count"
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__a",outcome="ok"}}') == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__b",outcome="ok"}}') == 1
    assert _delta(after, before, f'{calls}{{kind="tool",name="unknown",outcome="unknown_name"}}') == 1
    le = 'mcp_reconciler_frontdoor_calls_duration_seconds_bucket{kind="tool",name="up__a",outcome="ok",le="+Inf"}'
    assert _delta(after, before, le) == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__crash",outcome="upstream_unavailable"}}') == 1
    assert _delta(after, before, 'mcp_reconciler_frontdoor_auth_refused_total{reason="invalid"}') == 1
    # set_tools publishes a, b, c; the crash may publish the source's failure; the reconnected
    # upstream lists its spawn snapshot a, b again: exactly what the engine published.
    assert len(published) >= 2
    assert _delta(after, before, "mcp_reconciler_publishes_total") == len(published)
    assert _delta(after, before, 'mcp_reconciler_reconnects_total{source="up"}') == 1
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
