"""Elicitation (form and URL modes) and roots through the gateway, in every era pairing where
the feature exists, and the per-source rule for a ``roots/list`` that is tied to no call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.relay.conftest import (
    WAIT,
    Elicitor,
    RelayUpstreams,
    client,
    gateway,
    payload,
    stdio_gateway,
    stdio_source,
    upstream,
    write_config,
)
from tests.support.waits import until

pytestmark = pytest.mark.anyio

ROOTS = [types.Root(uri="file:///work/agent", name="agent")]


async def list_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=ROOTS)


@pytest.mark.parametrize("up_era", ["legacy", "both"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_form_elicitation_reaches_the_calling_client(
    mode: str, up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", up_era)
    async with gateway(write_config(tmp_path, [src])) as served:
        elicitor = Elicitor()
        async with client(served, mode, elicitation_callback=elicitor) as c:
            out = payload(await c.call_tool("up__elicit", {"message": "your name?"}))
        assert out == {"action": "accept", "content": {"answer": "your name?"}}
        assert len(elicitor.seen) == 1 and isinstance(elicitor.seen[0], types.ElicitRequestFormParams)
        assert elicitor.seen[0].requested_schema["required"] == ["answer"]  # passed through unchanged


class CompletionNotices:
    """A message handler that records ``notifications/elicitation/complete``."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.got = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            self.ids.append(message.params.elicitation_id)
            self.got.set()


async def test_url_elicitation_and_its_completion_notice_reach_the_calling_client(
    relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        elicitor, notices = Elicitor(), CompletionNotices()
        async with client(served, elicitation_callback=elicitor, message_handler=notices) as c:
            out = payload(await c.call_tool("up__elicit", {"message": "sign in", "mode": "url"}))
            assert out["action"] == "accept"
            params = elicitor.seen[0]
            assert isinstance(params, types.ElicitRequestURLParams)
            assert (params.url, params.elicitation_id) == ("https://example.invalid/auth", "el-1")
            with anyio.fail_after(WAIT):
                await notices.got.wait()
            assert notices.ids == ["el-1"]


async def test_url_elicitation_needs_the_url_capability(relay_upstreams: RelayUpstreams, tmp_path: Path) -> None:
    """The SDK client declares form and URL together; a client declaring form only is modelled
    by the capability check itself (``relay.missing_from``), see tests/relay/test_relay_units.py."""
    src = await upstream(relay_upstreams, "http", "legacy")
    async with gateway(write_config(tmp_path, [src])) as served:
        async with client(served) as c:  # no elicitation callback: no elicitation capability
            out = payload(await c.call_tool("up__elicit", {"message": "x", "mode": "url"}))
        assert out["error"]["data"] == {"code": "capability_missing", "capability": "elicitation"}


@pytest.mark.parametrize("up_era", ["legacy", "both"])
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_roots_asked_during_a_call_come_from_the_calling_client(
    mode: str, up_era: str, relay_upstreams: RelayUpstreams, tmp_path: Path
) -> None:
    src = await upstream(relay_upstreams, "http", up_era)
    async with gateway(write_config(tmp_path, [src])) as served:
        async with client(served, mode, list_roots_callback=list_roots) as c:
            assert payload(await c.call_tool("up__roots", {})) == {"roots": ["file:///work/agent"]}
        async with client(served, mode) as c:  # no roots capability
            if up_era == "legacy":
                out = payload(await c.call_tool("up__roots", {}))
                assert out["error"]["data"] == {"code": "capability_missing", "capability": "roots"}


async def test_roots_on_connect_are_refused_without_configured_roots(tmp_path: Path) -> None:
    """A roots/list tied to no call (here: on connect) has no client to ask: refused, clearly."""
    cfg = write_config(tmp_path, [stdio_source("up", "--era", "legacy", "--roots-on-connect")])
    async with gateway(cfg) as served, client(served) as c:
        state = await wait_for_connect_roots(c)
        assert state["error"]["code"] == types.INVALID_REQUEST
        assert state["error"]["data"] == {"code": "no_roots"}


async def test_configured_roots_answer_every_roots_request_of_the_source(tmp_path: Path) -> None:
    src = stdio_source("up", "--era", "legacy", "--roots-on-connect")
    src["roots"] = [{"uri": "file:///srv/repo", "name": "repo"}]
    async with gateway(write_config(tmp_path, [src])) as served, client(served, list_roots_callback=list_roots) as c:
        assert (await wait_for_connect_roots(c)) == {"roots": ["file:///srv/repo"]}
        # During a call too: the operator's roots for this source, not the agent's.
        assert payload(await c.call_tool("up__roots", {})) == {"roots": ["file:///srv/repo"]}


async def wait_for_connect_roots(c: Any) -> Any:
    """The answer the upstream got to its connect-time roots/list (it asks right after connecting;
    the listing that published the catalog may finish first, so poll its state tool, bounded)."""
    state: dict[str, Any] = {}

    async def answered() -> bool:
        state.update(payload(await c.call_tool("up__state", {})))
        return state["connect_roots"] is not None

    await until(answered, what="the upstream's connect-time roots/list answer", timeout_s=WAIT)
    return state["connect_roots"]


async def test_elicitation_through_the_stdio_gateway(tmp_path: Path) -> None:
    """The gateway served over stdio (one session, no token) relays too."""
    from mcp import Client

    cfg = write_config(tmp_path, [stdio_source("up", "--era", "legacy")])
    elicitor = Elicitor()
    async with Client(stdio_gateway(cfg), mode="legacy", elicitation_callback=elicitor) as c:

        async def listed() -> bool:
            return "up__elicit" in {t.name for t in (await c.list_tools(cache_mode="bypass")).tools}

        await until(listed, what="up__elicit listed", timeout_s=WAIT)
        out = payload(await c.call_tool("up__elicit", {"message": "over stdio"}))
    assert out == {"action": "accept", "content": {"answer": "over stdio"}}
