"""The list page cache (``api/frontdoor/pages.py``, ADR 0019, ADR 0038) on the served plane: a
kept page — its encoded bytes — answers only a request whose page it is.

A page is built once per (era, revision, grant set, view, cursor) and then served as kept; a
new revision or a changed grant set is a new key, so a page is never served across either, and
a session whose grants differ from another's never gets the other's page (I9: what a session
lists is what it was granted). Real parts: an SDK upstream over streamable HTTP, the gateway's
plane on uvicorn, raw HTTP clients."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from mcp_reconciler.api.frontdoor import FrontDoor
from mcp_reconciler.api.frontdoor.sessions import Binding
from tests.e2e.conftest import ANONYMOUS_CURRENT
from tests.integration.conftest import HttpUpstreams
from tests.integration.test_plane_oracle import (
    WAIT,
    CountingLRU,
    call,
    last_message,
    legacy_open,
    plane_gateway,
    post,
    published,
)

pytestmark = pytest.mark.anyio

REVISION = "io.mcp-reconciler/revision"


@asynccontextmanager
async def gateway(tmp_path: Path, http_upstreams: HttpUpstreams) -> AsyncIterator[tuple[str, FrontDoor, CountingLRU]]:
    """The plane over an SDK upstream serving ``a`` and ``b`` (anonymous, grant policy
    ``current``); yields its ``/mcp`` URL, its front door and the page cache's LRU, counting the
    pages built."""
    _proc, port = await http_upstreams.start("--tools", "a,b")
    doc = {
        "gateway": {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT},
        "sources": [{"name": "h", "http": {"url": f"http://127.0.0.1:{port}/mcp"}}],
    }
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    async with plane_gateway(cfg) as (url, front):
        await published(front, {"h__a", "h__b"})
        pages = front.list_cache.pages = CountingLRU(8)
        yield url, front, pages


async def legacy_list(http: httpx2.AsyncClient, url: str, headers: dict[str, str]) -> dict[str, Any]:
    r = await http.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, headers=headers)
    assert r.status_code == 200
    result: dict[str, Any] = last_message(r)["result"]
    return result


def names(result: dict[str, Any]) -> set[str]:
    return {tool["name"] for tool in result["tools"]}


def binding_of(front: FrontDoor, headers: dict[str, str]) -> Binding:
    """The front door's binding of the 2025-era session named in ``headers``."""
    sid = headers["mcp-session-id"]
    return next(b for b in front.bindings.values() if b.http_session_id == sid)


async def test_I9_a_session_with_other_grants_never_gets_another_sessions_page(
    tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    """A revokes ``h__b``: its next list is a page built for its new grant set (without
    ``h__b``); B, opened afterwards with the full grant set, gets the page kept for that set
    (with ``h__b``, not A's), and A keeps getting its own."""
    async with gateway(tmp_path, http_upstreams) as (url, front, pages), httpx2.AsyncClient(timeout=WAIT) as http:
        a, _ = await legacy_open(http, url)
        full = await legacy_list(http, url, a)
        assert {"h__a", "h__b"} <= names(full) and pages.puts == 1
        assert await legacy_list(http, url, a) == full and pages.puts == 1  # kept

        session = binding_of(front, a).session
        live = front.catalog.current()
        assert live is not None
        front.authority.revoke(session, ["h__b"])
        narrowed = await legacy_list(http, url, a)
        assert "h__b" not in names(narrowed) and "h__a" in names(narrowed)
        assert pages.puts == 2  # a new grant set: a new page, never the kept one

        b, _ = await legacy_open(http, url)
        assert binding_of(front, b).session is not session
        assert await legacy_list(http, url, b) == full  # the full set's page, not A's narrowed one
        assert await legacy_list(http, url, a) == narrowed  # and A's own, not B's
        assert pages.puts == 2  # both served as kept

        front.authority.grant(session, ["h__b"], live.generation)  # A's grants equal B's again
        assert await legacy_list(http, url, a) == full


async def test_a_new_revision_is_never_answered_from_a_page_of_the_last(
    tmp_path: Path, http_upstreams: HttpUpstreams
) -> None:
    """Both eras: a page kept for revision r is not served once r+1 is published — the next
    list is built from r+1 (its tools, its revision in ``_meta``), then kept in turn."""
    async with gateway(tmp_path, http_upstreams) as (url, front, pages), httpx2.AsyncClient(timeout=WAIT) as http:
        legacy, _ = await legacy_open(http, url)
        body, headers = call("tools/list")
        before_legacy = await legacy_list(http, url, legacy)
        before_modern = (await post(http, url, body, headers)).body["result"]
        assert pages.puts == 2  # one page per era
        assert before_modern["_meta"][REVISION] == before_legacy["_meta"][REVISION]
        assert before_modern["cacheScope"] == "private"  # filtered per session (grants)

        r = await post(http, url, *call("tools/call", {"name": "h__set_tools", "arguments": {"names": ["a"]}}))
        assert r.status == 200 and r.body["result"]["isError"] is False
        with anyio.fail_after(WAIT):
            while (live := front.catalog.current()) is None or "h__b" in live.generation.tools:
                await anyio.sleep(0.05)  # the engine offers no "published without these names" event

        after_legacy = await legacy_list(http, url, legacy)
        after_modern = (await post(http, url, body, headers)).body["result"]
        for before, after in ((before_legacy, after_legacy), (before_modern, after_modern)):
            assert "h__b" in names(before) and "h__b" not in names(after)
            assert after["_meta"][REVISION] > before["_meta"][REVISION]
        assert pages.puts == 4
        assert await legacy_list(http, url, legacy) == after_legacy and pages.puts == 4  # kept in turn
