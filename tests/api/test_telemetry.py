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

from mcp_reconciler.reconciler.prometheus import parse_text
from tests.api.conftest import (
    OPERATOR_TOKEN,
    WAIT,
    ALICE,
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


async def _script(served: Any) -> None:
    """The scripted session (module docstring)."""
    async with mcp_client(served) as client:
        await client.call_tool("up__a", {"x": 1, "token": PLANTED})
        await client.call_tool("up__a", {"x": 2})
        await client.call_tool("up__b", {})
        await call_error(client, "up__nope", {})
    async with httpx.AsyncClient() as http:
        refused = await http.post(
            served.url, headers={"authorization": "Bearer not-a-token"}, json={"jsonrpc": "2.0", "id": 1}
        )
        assert refused.status_code == 401


async def test_metrics_after_a_scripted_session(tmp_path: Path) -> None:
    async with served_gateway(_config(tmp_path)) as served:
        base = served.base_url
        before = parse_text((await _scrape(base)).text)
        await _script(served)
        engine = served.gateway.engine
        publications = engine.current_revision
        async with mcp_client(served) as client:
            await client.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
        await wait_until(lambda: (engine.current_revision or 0) > (publications or 0), what="a publication")
        response = await _scrape(base)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
        after = parse_text(response.text)
        revision = engine.current_revision

    calls = "mcp_reconciler_frontdoor_calls_duration_seconds_count"
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__a",outcome="ok"}}') == 2
    assert _delta(after, before, f'{calls}{{kind="tool",name="up__b",outcome="ok"}}') == 1
    assert _delta(after, before, f'{calls}{{kind="tool",name="unknown",outcome="unknown_name"}}') == 1
    le = f'mcp_reconciler_frontdoor_calls_duration_seconds_bucket{{kind="tool",name="up__a",outcome="ok",le="+Inf"}}'
    assert _delta(after, before, le) == 2
    assert _delta(after, before, 'mcp_reconciler_frontdoor_auth_refused_total{reason="invalid"}') == 1
    assert _delta(after, before, "mcp_reconciler_publishes_total") >= 1
    assert after["mcp_reconciler_revision"] == revision
    assert after['mcp_reconciler_source_state{source="up",state="ready"}'] == 1
    assert after['mcp_reconciler_source_consecutive_failures{source="up"}'] == 0
    assert 'mcp_reconciler_source_last_success_age_seconds{source="up"}' in after
    assert (
        _delta(after, before, 'mcp_reconciler_frontdoor_upstream_duration_seconds_count{kind="tool",source="up"}')
        == 4  # a, a, b, set_tools
    )
    for line in response.text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            assert name.startswith("mcp_reconciler_")
            assert (kind == "counter") == name.endswith("_total"), line
