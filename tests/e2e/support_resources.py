"""Helpers for the resource-subscription and URI-namespace tests: sources running
``tests.support.resource_server``, session-token clients in both eras, an update recorder, and
subscribing the way each era does."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, MCPDeprecationWarning
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import Served
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import REPO_ROOT, WAIT
from tests.support.waits import until as until  # shared: state another task or process changes

RESOURCE_SERVER = "tests.support.resource_server"
#: The upstream's era: a 2025-11-25-only server (subscribe/unsubscribe, pushed updates) or a
#: 2026-07-28 one (listen streams).
UPSTREAM_ARGS = {"legacy": ("--legacy-only",), "modern": ()}


def resource_source(name: str, *args: str, uri_prefix: str | None = None) -> dict[str, Any]:
    """A stdio source running the resource test server (``--label`` defaults to the name)."""
    src: dict[str, Any] = {
        "name": name,
        "stdio": {
            "command": "python",
            "args": ["-m", RESOURCE_SERVER, "--label", name, *args],
            "cwd": str(REPO_ROOT),
        },
    }
    if uri_prefix is not None:
        src["uri_prefix"] = uri_prefix
    return src


class Updates:
    """A ``message_handler`` recording the URIs of ``notifications/resources/updated`` (pushed
    in the legacy era; teed from the listen stream in the new era)."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self._event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.uris.append(str(message.params.uri))
            event, self._event = self._event, anyio.Event()
            event.set()

    async def wait_for(self, uri: str, count: int = 1, timeout_s: float = WAIT) -> None:
        with anyio.fail_after(timeout_s):
            while self.uris.count(uri) < count:
                await self._event.wait()


def new_token(served: Served, owner: str = "test") -> str:
    """A session created through the engine's authority (what ``POST /v1/sessions`` does):
    every name of the current generation granted; its bearer token."""
    engine = served.gateway.engine
    live = engine.current
    return engine.sessions.create(owner, live.generation if live is not None else None).token


@asynccontextmanager
async def session_client(served: Served, mode: str, handler: Any = None) -> AsyncIterator[Client]:
    """A downstream client of a fresh session (bearer token) in ``mode`` (legacy | auto)."""
    headers = {"Authorization": f"Bearer {new_token(served)}"}
    async with mcp_http_client(headers=headers) as http:
        async with Client(
            streamable_http_client(served.url, http_client=http), mode=mode, message_handler=handler
        ) as client:
            yield client


@asynccontextmanager
async def subscribed(client: Client, uris: list[str]) -> AsyncIterator[list[str]]:
    """Subscribe to ``uris`` for the block, the client's era's way; yields what was taken. Legacy:
    ``resources/subscribe`` each (left subscribed; see :func:`unsubscribe`). New era: one listen
    stream, open for the block (its events are read and teed to the message handler)."""
    if client.protocol_version.startswith("2025"):
        for uri in uris:
            await subscribe(client, uri)
        yield list(uris)
        return
    async with client.listen(resource_subscriptions=uris) as sub:
        async with anyio.create_task_group() as tg:

            async def drain() -> None:
                async for _event in sub:
                    pass  # recorded by the message handler, which the SDK tees events to

            tg.start_soon(drain)
            yield list(sub.honored.resource_subscriptions or [])
            tg.cancel_scope.cancel()


async def subscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.session.subscribe_resource(uri)


async def unsubscribe(client: Client, uri: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await client.session.unsubscribe_resource(uri)


async def upstream_subs(client: Client, source: str = "res") -> dict[str, Any]:
    """What the upstream holds now (its ``subs`` tool, called through the gateway)."""
    result = await client.call_tool(f"{source}__subs", {})
    block = result.content[0]
    assert isinstance(block, types.TextContent), result
    data: dict[str, Any] = json.loads(block.text)
    data["listen"] = [s for s in data["listen"] if s]  # the gateway's own list_changed stream is empty
    return data


def held_upstream(subs: dict[str, Any]) -> dict[str, int]:
    """URI → how many upstream subscriptions hold it (subscribe calls or listen streams)."""
    held: dict[str, int] = dict(subs["subscribed"])
    for stream in subs["listen"]:
        for uri in stream:
            held[uri] = held.get(uri, 0) + 1
    return held


async def until_upstream(client: Client, want: dict[str, int], source: str = "res") -> dict[str, Any]:
    """Until the upstream's subscriptions are exactly ``want`` (the gateway changes them after
    answering, off the request path; the upstream is another process): the last reading."""
    subs: dict[str, Any] = {}

    async def holds() -> bool:
        nonlocal subs
        subs = await upstream_subs(client, source)
        return held_upstream(subs) == want

    await until(holds, what=f"the upstream to hold {want}", timeout_s=WAIT)
    return subs
