"""Revisions at the front door: in-flight calls finish on the revision they pinned (I4), a client
may ask for a live older revision (``_meta`` or the ``MCP-Reconciler-Revision`` header), and our
own lists paginate with cursors that are stable within a revision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.frontdoor import PAGE_SIZE, REVISION_META
from mcp_reconciler.api.frontdoor.revisions import DIGEST_META
from mcp_reconciler.api.server import serve_http
from mcp_reconciler.reconciler.errors import RevisionUnavailableError
from mcp_reconciler.reconciler.runtime import LiveState
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import (
    WAIT,
    Publications,
    all_tools,
    call_error,
    downstream,
    no_pins,
    payload,
    revision_of,
    stdio_gateway,
    text_of,
    tool_names,
    wait_for_file,
    write_config,
)
from tests.support.upstream_server import CONTROL_TOOLS
from tests.support.waits import until

pytestmark = pytest.mark.anyio

CONTROL = {f"up__{c}" for c in CONTROL_TOOLS}


# -- I4 ------------------------------------------------------------------------------------------


async def _blocked_call_then_change(
    client: Client, tmp_path: Path, wait_new_revision: Any
) -> tuple[dict[str, Any], int, int]:
    """Start ``block`` (held until a release file appears), change the upstream's tools while it
    is in flight, wait for the new revision, release. Returns (blocked result, its revision, new revision)."""
    marker, release = tmp_path / "in-flight", tmp_path / "release"
    out: dict[str, Any] = {}

    async def blocked() -> None:
        out["result"] = await client.call_tool("up__block", {"marker": str(marker), "release": str(release)})

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked)
            await wait_for_file(marker)  # the upstream is inside the call
            changed = await client.call_tool("up__set_tools", {"names": ["a", "b", "c"]})
            old = revision_of(changed)
            new = await wait_new_revision(old)
            assert new > old
            assert "result" not in out  # still in flight on the old revision
            release.write_text("go")
    result = out["result"]
    assert payload(result)["released"] is True
    return result, old, new


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I4_call_in_flight_completes_on_its_revision_http(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        pubs = Publications(served)
        runtime = served.gateway.rec.runtime
        held: dict[int, tuple[int, LiveState]] = {}

        async def wait_new(old: int) -> int:
            new = (await pubs.wait_above(old)).revision
            old_live = runtime.get(old)
            held[old] = (old_live.pins, old_live.state)
            return new

        result, old, new = await _blocked_call_then_change(client, tmp_path, wait_new)
        assert held[old] == (1, LiveState.RETIRING)  # the blocked call held the old generation open
        assert revision_of(result) == old  # ...and finished on it (I4)
        after = await client.call_tool("up__a", {"x": "1"})
        assert revision_of(after) == new == runtime.current_revision
        assert payload(after)["args"] == {"x": "1"}
        await no_pins(served)
        with pytest.raises(RevisionUnavailableError):  # drained and closed once its last pin went
            runtime.get(old)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_I4_call_in_flight_completes_on_its_revision_stdio(mode: str, tmp_path: Path) -> None:
    """The same over the stdio front door: the gateway is a subprocess, so the new revision is
    observed in tools/list's ``_meta`` (polled, bounded)."""
    cfg = write_config(tmp_path)
    async with downstream(stdio_gateway(cfg), mode) as (client, _changes):
        assert {"up__a", "up__b"} <= await tool_names(client)

        async def wait_new(old: int) -> int:
            revs: list[int] = []

            async def newer() -> bool:
                revs.append((await all_tools(client))[1])
                return revs[-1] > old

            await until(newer, what=f"a revision after {old}", timeout_s=WAIT)
            return revs[-1]

        result, old, new = await _blocked_call_then_change(client, tmp_path, wait_new)
        assert revision_of(result) == old
        after = await client.call_tool("up__a", {"x": "2"})
        assert revision_of(after) == new
        # Asking for the old revision now: it drained when the blocked call settled.
        err = await call_error(client, "up__a", meta={REVISION_META: old})
        assert err.code == -32012


# -- revision requests ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_revision_request(mode: str, tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        pubs = Publications(served)
        runtime = served.gateway.rec.runtime
        old = pubs.revision
        pin = runtime.get(old).pin()  # keeps the old revision live after it is superseded
        try:
            await client.call_tool("up__set_tools", {"names": ["a"]})  # b leaves the catalog
            new = (await pubs.wait_above(old)).revision

            # Current revision: b is granted but absent → "currently unavailable".
            assert (await call_error(client, "up__b")).code == -32010
            # _meta selects the older live revision, where b still exists: the gateway routes the
            # call (no -32010) and the upstream, which dropped b itself, answers with its own
            # is_error result, passed through.
            res = await client.call_tool("up__b", {"x": "old"}, meta={REVISION_META: old})
            assert revision_of(res) == old and res.is_error and text_of(res) == "unknown tool"
            res = await client.call_tool("up__a", {"x": "old"}, meta={REVISION_META: old})
            assert revision_of(res) == old and payload(res)["tool"] == "a"
            page = await client.list_tools(meta={REVISION_META: old}, cache_mode="bypass")
            assert revision_of(page) == old and "up__b" in {t.name for t in page.tools}

            # The header does the same for every request of a client.
            headers = {"MCP-Reconciler-Revision": str(old)}
            async with mcp_http_client(headers=headers) as http:
                async with downstream(streamable_http_client(served.url, http_client=http), mode) as (pinned, _):
                    tools, rev = await all_tools(pinned)
                    assert rev == old and "up__b" in {t.name for t in tools}
                    res = await pinned.call_tool("up__b", {})
                    assert revision_of(res) == old and text_of(res) == "unknown tool"
                    # _meta wins over the header.
                    res = await pinned.call_tool("up__a", {}, meta={REVISION_META: new})
                    assert revision_of(res) == new

        finally:
            pin.release()  # the old revision drains and closes
        await no_pins(served)
        assert old not in {live.revision for live in runtime.live()}

        err = await call_error(client, "up__a", meta={REVISION_META: old})
        assert err.code == -32012
        assert f"the current revision is {new}" in err.message
        assert err.data["current_revision"] == new and err.data["code"] == "revision_unavailable"
        async with mcp_http_client(headers={"MCP-Reconciler-Revision": str(old)}) as http:
            async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as pinned:
                err = await call_error(pinned, "up__a")
                assert err.code == -32012 and str(new) in err.message
        err = await call_error(client, "up__a", meta={REVISION_META: "not-a-number"})
        assert err.code == -32602


#: Values that merely convert to an integer (issue 10, item 15). In ``_meta`` only a JSON integer
#: is a revision; in the header only ASCII digits.
BAD_META = [True, False, 1.9, 1.0, "1", "\u0661", "1_0", "+1", " 1", -1, [1], {"r": 1}]
BAD_HEADER = ["true", "1.9", "\u0661", "1_0", "+1", "1 1", "-1", "0x1", "1e0", "9" * 19]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_malformed_revision_values_are_refused(mode: str, tmp_path: Path) -> None:
    async with serve_http(write_config(tmp_path), port=0) as served, downstream(served.url, mode) as (client, _):
        rev = Publications(served).revision
        for bad in BAD_META:
            err = await call_error(client, "up__a", meta={REVISION_META: bad})
            assert err.code == -32602, bad
            assert err.data["code"] == "invalid_revision" and "non-negative integer" in err.message, bad
            with pytest.raises(MCPError) as listed:
                await client.list_tools(meta={REVISION_META: bad}, cache_mode="bypass")
            assert listed.value.code == -32602, bad
        for bad in BAD_HEADER:
            # As UTF-8 bytes: httpx would refuse a non-ASCII str. (HTTP strips surrounding blanks
            # from header values — h11 will not even send " 1" — so "1 1" stands in for them.)
            async with mcp_http_client(headers={"MCP-Reconciler-Revision": bad.encode()}) as http:  # type: ignore[dict-item]
                async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as pinned:
                    err = await call_error(pinned, "up__a")
            assert err.code == -32602 and err.data["code"] == "invalid_revision", bad
        # The plain forms are accepted.
        assert revision_of(await client.call_tool("up__a", {}, meta={REVISION_META: rev})) == rev
        async with mcp_http_client(headers={"MCP-Reconciler-Revision": str(rev)}) as http:
            async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as pinned:
                assert revision_of(await pinned.call_tool("up__a", {})) == rev


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_request_may_name_the_catalog_by_digest(mode: str, tmp_path: Path) -> None:
    """With a revision, a request may name the content digest it expects (``_meta`` or header):
    the same digest is served, another is a retryable ``revision_unavailable`` (never the other
    catalog), a malformed one ``invalid_revision``; without a revision the digest is ignored."""
    async with serve_http(write_config(tmp_path), port=0) as served, downstream(served.url, mode) as (client, _):
        rev = Publications(served).revision
        digest = served.gateway.engine.get(rev).content_digest
        other = "0" * 64
        res = await client.call_tool("up__a", {}, meta={REVISION_META: rev, DIGEST_META: digest})
        assert revision_of(res) == rev and not res.is_error
        err = await call_error(client, "up__a", meta={REVISION_META: rev, DIGEST_META: other})
        assert err.code == -32012 and err.data["code"] == "revision_unavailable" and err.data["retryable"] is True
        for bad in ("XYZ", 7, "0" * 8):
            err = await call_error(client, "up__a", meta={REVISION_META: rev, DIGEST_META: bad})
            assert err.code == -32602 and err.data["code"] == "invalid_revision", bad
        assert not (await client.call_tool("up__a", {}, meta={DIGEST_META: other})).is_error  # no revision named
        for expected, ok in ((digest, True), (other, False)):
            headers = {"MCP-Reconciler-Revision": str(rev), "MCP-Reconciler-Digest": expected}
            async with mcp_http_client(headers=headers) as http:
                async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as pinned:
                    if ok:
                        assert revision_of(await pinned.call_tool("up__a", {})) == rev
                    else:
                        assert (await call_error(pinned, "up__a")).data["code"] == "revision_unavailable"


# -- pagination ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_pagination_of_our_lists(mode: str, tmp_path: Path) -> None:
    names = [f"t{i:04d}" for i in range(1200)]
    tools_file = tmp_path / "tools.json"
    tools_file.write_text(json.dumps(names))
    cfg = write_config(tmp_path, tools=(), server_args=("--tools-file", str(tools_file), "--page-size", "500"))
    async with serve_http(cfg, port=0) as served, downstream(served.url, mode) as (client, _changes):
        pubs = Publications(served)
        expected = {f"up__{n}" for n in names} | CONTROL
        assert len(served.gateway.rec.runtime.current.generation.tools) == len(expected)  # type: ignore[union-attr]

        first = await client.list_tools(cache_mode="bypass")
        assert len(first.tools) == PAGE_SIZE and first.next_cursor is not None
        again = await client.list_tools(cache_mode="bypass")
        assert again.next_cursor == first.next_cursor  # stable within a revision
        assert [t.name for t in again.tools] == [t.name for t in first.tools]
        second = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        second_again = await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        assert [t.name for t in second.tools] == [t.name for t in second_again.tools]
        assert second.next_cursor is None
        seen = [t.name for t in first.tools] + [t.name for t in second.tools]
        assert len(seen) == len(set(seen)) and set(seen) == expected
        assert revision_of(first) == revision_of(second) == pubs.revision

        tools, _rev = await all_tools(client)
        assert {t.name for t in tools} == expected

        # A new revision: a cursor from the old one is refused (list again from the start).
        old = pubs.revision
        await client.call_tool("up__set_tools", {"names": names[:-1]})
        await pubs.wait_above(old)
        err = None
        try:
            await client.list_tools(cursor=first.next_cursor, cache_mode="bypass")
        except Exception as exc:
            err = exc
        assert err is not None and getattr(err, "code", None) == -32602, err
        tools, rev = await all_tools(client)
        assert rev > old and {t.name for t in tools} == expected - {f"up__{names[-1]}"}
