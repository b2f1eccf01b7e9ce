"""The SDK as the oracle for our stdio channel (ADR 0025): the same request sequence, sent by the
SDK's ``Client`` over the SDK's ``stdio_client`` and over ``reconciler/stdio_peer.py``, to the same
SDK server program, gives equal JSON — in both protocol eras. Requests, a protocol error, progress
notifications, a list with pages, a result of many content blocks and one of 2 MB."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, stdio_client

from mcp_reconciler.reconciler.stdio_peer import stdio_channel
from mcp_reconciler.reconciler.transports import stdio_parameters
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE

pytestmark = pytest.mark.anyio

WAIT = 30.0


def params() -> Any:
    transport = {
        "command": "python",
        "args": ["-m", SERVER_MODULE, "--tools", ",".join(f"t{i}" for i in range(7)), "--page-size", "3", "--noisy"],
        "cwd": str(REPO_ROOT),
    }
    return stdio_parameters(transport)


@contextlib.asynccontextmanager
async def sdk_transport() -> AsyncIterator[Any]:
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - /dev/null never blocks
        async with stdio_client(params(), errlog=errlog) as streams:
            yield streams


@contextlib.asynccontextmanager
async def our_transport() -> AsyncIterator[Any]:
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - /dev/null never blocks
        async with stdio_channel("oracle", params(), message_bytes=32 * 1024 * 1024, stderr=errlog) as streams:
            yield streams


def scrub(value: Any) -> Any:
    """The server's pid differs between the two runs; everything else must not."""
    if isinstance(value, dict):
        return {k: ("<pid>" if k == "pid" else scrub(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str) and value.startswith("{"):
        with contextlib.suppress(ValueError):
            import json

            return scrub(json.loads(value))
    return value


async def sequence(transport: Any, mode: str) -> list[Any]:
    out: list[Any] = []
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    with anyio.fail_after(WAIT):
        async with Client(transport, mode=mode) as client:
            out.append(client.protocol_version)
            cursor: str | None = None
            while True:  # every page, as the gateway lists
                page = await client.list_tools(cursor=cursor)
                out.append(page.model_dump(mode="json", by_alias=True, exclude_none=True))
                cursor = page.next_cursor
                if not cursor:
                    break
            for name, args in (
                ("t1", {"x": "1", "nested": {"a": [1, 2.5, None, "ü"]}}),
                ("big", {"bytes": 2_000_000}),
                ("big", {"bytes": 100_000, "blocks": 1000}),
                ("fail_result", {"text": "no"}),
            ):
                result = await client.call_tool(name, args)
                out.append(scrub(result.model_dump(mode="json", by_alias=True, exclude_none=True)))
            result = await client.call_tool("progress", {"n": 5}, progress_callback=on_progress)
            out.append(scrub(result.model_dump(mode="json", by_alias=True, exclude_none=True)))
            out.append(progress)
            try:
                await client.call_tool("fail_protocol", {"text": "bad"})
            except MCPError as exc:
                out.append((exc.error.code, scrub(exc.error.message.split(" (pid")[0])))
            out.append(
                (
                    await client.session.send_request(types.ListToolsRequest(params=None), types.ListToolsResult)
                ).model_dump(mode="json", by_alias=True, exclude_none=True)
            )
    return out


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_our_stdio_channel_and_the_sdks_give_equal_json(mode: str) -> None:
    ours = await sequence(our_transport(), mode)
    theirs = await sequence(sdk_transport(), mode)
    assert ours[0] == theirs[0] == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"step {i} differs"
