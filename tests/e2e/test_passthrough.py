"""What passes through the front door and what must not: cancellation and progress both ways,
upstream tool results unchanged, upstream protocol-error text never (I12), and the built-in
control tools only when the operator opts in."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import principal_id
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import (
    REPO_ROOT,
    WAIT,
    Publications,
    call_error,
    downstream,
    no_pins,
    payload,
    revision_of,
    stdio_gateway,
    text_of,
    tool_names,
    upstream_source,
    wait_for_file,
    write_config,
)

pytestmark = pytest.mark.anyio

MODES = ["legacy", "auto"]


# -- cancellation and progress -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_cancellation_reaches_upstream(mode: str, tmp_path: Path) -> None:
    marker, cancelled = tmp_path / "in-flight", tmp_path / "cancelled"
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                scope = anyio.CancelScope()

                async def blocked() -> None:
                    with scope:
                        await client.call_tool("up__block", {"marker": str(marker), "cancelled": str(cancelled)})

                tg.start_soon(blocked)
                await wait_for_file(marker)  # the upstream is inside the call
                assert served.gateway.rec.runtime.current.pins == 1  # type: ignore[union-attr]
                scope.cancel()  # the downstream gives up
            assert scope.cancelled_caught
            assert int(await wait_for_file(cancelled)) > 0  # the upstream's handler was cancelled
        await no_pins(served)  # the gateway's operation settled and released its pin
        assert payload(await client.call_tool("up__a", {}))["tool"] == "a"  # the session still works


@pytest.mark.parametrize("mode", MODES)
async def test_progress_in_order(mode: str, tmp_path: Path) -> None:
    n = 25
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        for _ in range(3):  # repeated: ordering must not depend on luck
            events: list[Any] = []

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                events.append((progress, total, message))  # noqa: B023 - consumed within the iteration

            with anyio.fail_after(WAIT):
                res = await client.call_tool("up__progress", {"n": n}, progress_callback=on_progress)
            events.append("result")
            assert payload(res)["steps"] == n
            assert events == [(float(i), float(n), f"step {i}") for i in range(1, n + 1)] + ["result"]
        # Without a progress callback nothing is requested, and the call still works.
        assert payload(await client.call_tool("up__progress", {"n": 3}))["steps"] == 3


# -- I12: sanitized edges ------------------------------------------------------------------------


def _client_visible(err: MCPError) -> str:
    return f"{err.code} {err.message} {json.dumps(err.data, default=str)}"


@pytest.mark.parametrize("mode", MODES)
async def test_I12_marker_never_reaches_client(mode: str, tmp_path: Path) -> None:
    marker = f"SECRET-{os.urandom(6).hex()}"
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        err = await call_error(client, "up__fail_protocol", {"text": f"{marker} at /srv/secret.db on db.internal:5432"})
        assert err.code == -32016
        assert err.message == "the upstream server returned an error"
        assert err.data["code"] == "upstream_error" and err.data["retryable"] is False
        visible = _client_visible(err)
        for leaked in (marker, "/srv/secret.db", "db.internal", "5432", str(REPO_ROOT), "pid "):
            assert leaked not in visible, (leaked, visible)

        # An is_error tool result is the tool's answer, not a protocol error: passed through intact.
        res = await client.call_tool("up__fail_result", {"text": marker})
        assert res.is_error is True
        assert [c.model_dump() for c in res.content] == [types.TextContent(type="text", text=marker).model_dump()]
        assert revision_of(res) == served.gateway.rec.runtime.current_revision

        # The upstream dies under an in-flight call: a generic, sanitized error, no host/port/path.
        pubs = Publications(served)
        before = pubs.revision
        in_flight = tmp_path / "in-flight"
        failures: list[MCPError] = []
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def blocked() -> None:
                    try:
                        await client.call_tool("up__block", {"marker": str(in_flight)})
                    except MCPError as exc:
                        failures.append(exc)

                tg.start_soon(blocked)
                await wait_for_file(in_flight)
                with pytest.raises(MCPError) as crashed:
                    await client.call_tool("up__crash", {})
        assert len(failures) == 1
        for err in (failures[0], crashed.value):
            # The SDK's local "Connection closed" is not upstream text: it is "upstream unavailable".
            assert err.code == -32015, _client_visible(err)
            assert err.data["code"] == "upstream_unavailable" and err.data["retryable"] is True
            visible = _client_visible(err)
            for leaked in (str(REPO_ROOT), "127.0.0.1", str(served.port), "Connection closed", "stdio", "python"):
                assert leaked not in visible, (leaked, visible)
        # The source goes stale; a later call fails fast and just as generically.
        await pubs.wait_above(before)
        await no_pins(served)
        later = await call_error(client, "up__a")
        assert later.code == -32015, _client_visible(later)
        assert str(REPO_ROOT) not in _client_visible(later)


@pytest.mark.parametrize("mode", MODES)
async def test_upstream_is_error_passthrough(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        text = 'tool failed: {"why": "bad input", "path": "/data/in.csv"}'
        res = await client.call_tool("up__fail_result", {"text": text})
        assert res.is_error is True and text_of(res) == text and len(res.content) == 1
        assert revision_of(res) == served.gateway.rec.runtime.current_revision
        ok = await client.call_tool("up__a", {"x": "y"})
        assert ok.is_error is False and payload(ok)["args"] == {"x": "y"}


# -- control tools -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_control_tools_opt_in(mode: str, tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    cfg = write_config(tmp_path / "on", gateway={"expose_control_tools": True})
    async with serve_http(cfg, port=0) as served:
        # Only a caller the operator gave them may use them (issue 10, item 9): not anonymous.
        async with downstream(served.url, mode) as (anonymous, _changes):
            assert not await tool_names(anonymous) & {"gateway_status", "gateway_refresh"}
            assert (await call_error(anonymous, "gateway_status")).code == -32602
        live = served.gateway.engine.current
        assert live is not None
        flagged = served.gateway.engine.sessions.create(
            principal_id("operator", "operator1"), live.generation, control_tools=True
        )
        async with (
            mcp_http_client(headers={"Authorization": f"Bearer {flagged.token}"}) as http,
            downstream(streamable_http_client(served.url, http_client=http), mode) as (client, _changes),
        ):
            await _control_tools_work(served, client)

    (tmp_path / "off").mkdir()
    cfg = write_config(tmp_path / "off")
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        names = await tool_names(client)
        assert not names & {"gateway_status", "gateway_refresh"}
        assert (await call_error(client, "gateway_status")).code == -32602


async def _control_tools_work(served: Served, client: Client) -> None:
    names = await tool_names(client)
    assert {"gateway_status", "gateway_refresh"} <= names
    status = json.loads(text_of(await client.call_tool("gateway_status", {})))
    assert status["revision"] == served.gateway.rec.runtime.current_revision
    assert status["state"] == "ready" and "sources" in status
    refreshed = json.loads(text_of(await client.call_tool("gateway_refresh", {})))
    assert isinstance(refreshed["revision"], int)
    assert refreshed["revision"] == served.gateway.rec.runtime.current_revision


@pytest.mark.parametrize("mode", MODES)
async def test_source_call_timeout_ends_the_call_and_cancels_upstream(mode: str, tmp_path: Path) -> None:
    marker, cancelled = tmp_path / "in-flight", tmp_path / "cancelled"
    source = upstream_source("up", "--tools", "a")
    source["timeouts"] = {"call_s": 0.5}
    cfg = write_config(tmp_path, sources=[source])
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        with anyio.fail_after(WAIT):
            err = await call_error(client, "up__block", {"marker": str(marker), "cancelled": str(cancelled)})
        assert err.error.code == -32014, err.error  # deadline exceeded, sanitized
        assert "0.5 s" in err.error.message
        assert int(await wait_for_file(cancelled)) > 0  # the upstream's handler was cancelled
        await no_pins(served)
        assert payload(await client.call_tool("up__a", {}))["tool"] == "a"


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_is_the_local_owner_and_needs_no_token(mode: str, tmp_path: Path) -> None:
    # No anonymous access configured: HTTP would answer 401. stdio is a local, single-user
    # transport: its caller is the process owner, served with gateway.grant_policy, and may use
    # the control tools (with the operator's full status) when they are exposed.
    cfg = write_config(tmp_path, gateway={"anonymous": None, "expose_control_tools": True, "grant_policy": "current"})
    async with downstream(stdio_gateway(cfg), mode) as (client, _changes):
        names = await tool_names(client)
        assert {"up__a", "up__b", "gateway_status"} <= names
        status = json.loads(text_of(await client.call_tool("gateway_status", {})))
        assert status["state"] == "ready" and status["revision"] >= 1
        assert payload(await client.call_tool("up__a", {"x": "1"}))["tool"] == "a"
