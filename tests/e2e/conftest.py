"""Fixtures and helpers for end-to-end tests of the MCP front door.

The gateway runs in-process on 127.0.0.1 (``api.server.serve_http(cfg, port=0)``) or as a
subprocess speaking stdio (``python -m mcp_reconciler.api.cli stdio --config CFG``); its upstreams are
``tests.support.upstream_server`` processes over stdio, spawned by the gateway. Downstream
clients are the SDK's ``mcp.Client`` in both protocol eras (``mode="legacy"`` → 2025-11-25,
``mode="auto"`` → 2026-07-28).

``no_leaked_children`` (autouse, tests/conftest.py) asserts that no child
process of the test process outlives a test (I14). Every wait is bounded (``anyio.fail_after``);
polling is used only for state outside the test's control flow (marker files, a subprocess
gateway's revision, the engine's notifier)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

from mcp_reconciler.api.frontdoor import REVISION_META, Binding
from mcp_reconciler.api.server import Served
from tests.integration.conftest import (
    REPO_ROOT,
    SERVER_MODULE,
    wait_for_file,
)

WAIT = 20.0  # bound on any single wait in this directory
ERAS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


# -- configs --------------------------------------------------------------------------------------


def upstream_source(name: str = "up", *server_args: str) -> dict[str, Any]:
    """A stdio source running the test upstream (``command: python`` is the gateway's own
    interpreter; ``cwd`` is the repository root so ``-m tests.support.upstream_server`` imports)."""
    return {
        "name": name,
        "stdio": {"command": "python", "args": ["-m", SERVER_MODULE, *server_args], "cwd": str(REPO_ROOT)},
    }


#: The e2e and chaos suites exercise the front door's sessions, notifications, revisions and
#: teardown, not credentials: their configs open anonymous ``/mcp`` access explicitly, with the
#: policy ``current`` (one session per legacy connection holding the names visible when it was
#: created — the behaviour these tests assert). Credentials are tested in
#: ``tests/api/test_mcp_auth.py``; pass ``gateway={"anonymous": None}`` to require them here.
ANONYMOUS_CURRENT = {"grant_policy": "current"}


def write_config(
    tmp: Path,
    *,
    tools: Sequence[str] = ("a", "b"),
    server_args: Sequence[str] = (),
    gateway: dict[str, Any] | None = None,
    sources: Sequence[dict[str, Any]] | None = None,
    sessions: Sequence[dict[str, Any]] = (),
) -> Path:
    """A gateway config (JSON is YAML) with one upstream ``up`` serving ``tools`` and anonymous
    access open (:data:`ANONYMOUS_CURRENT`) unless ``gateway`` says otherwise."""
    if sources is None:
        sources = [upstream_source("up", "--tools", ",".join(tools), *server_args)]
    settings = {"cooldown_s": 0.05, "anonymous": ANONYMOUS_CURRENT, **(gateway or {})}
    doc: dict[str, Any] = {"gateway": {k: v for k, v in settings.items() if v is not None}, "sources": list(sources)}
    if sessions:
        doc["sessions"] = list(sessions)
    cfg = tmp / "gateway.yaml"
    cfg.write_text(json.dumps(doc))
    return cfg


def stdio_gateway(cfg: Path) -> StdioServerParameters:
    """The gateway itself as a downstream stdio server."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_reconciler.api.cli", "stdio", "--config", str(cfg)], cwd=str(REPO_ROOT)
    )


# -- downstream clients ---------------------------------------------------------------------------


class Changes:
    """A ``message_handler`` that counts ``tools/list_changed`` (pushed in the legacy era, teed
    from the ``subscriptions/listen`` stream in the new era) and lets a test wait for a count."""

    def __init__(self) -> None:
        self.tools = 0
        self.errors: list[Exception] = []
        self._event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools += 1
            event, self._event = self._event, anyio.Event()
            event.set()
        elif isinstance(message, Exception):
            self.errors.append(message)

    async def wait_tools(self, count: int, timeout_s: float = WAIT) -> None:
        with anyio.fail_after(timeout_s):
            while self.tools < count:
                await self._event.wait()


@asynccontextmanager
async def downstream(target: Any, mode: str = "legacy", **client_kw: Any) -> AsyncIterator[tuple[Client, Changes]]:
    """A connected client with a :class:`Changes` counter. In the new era a ``subscriptions/listen``
    stream is open for the whole block (that is where its ``list_changed`` arrives)."""
    changes = Changes()
    async with Client(target, mode=mode, message_handler=changes, **client_kw) as client:
        assert client.protocol_version == ERAS[mode], client.protocol_version
        if mode == "legacy":
            yield client, changes
            return
        async with anyio.create_task_group() as tg:
            acked = anyio.Event()

            async def listen() -> None:
                async with client.listen(
                    tools_list_changed=True, resources_list_changed=True, prompts_list_changed=True
                ) as sub:
                    acked.set()
                    async for _event in sub:
                        pass  # counted once, by the message handler the events are teed to

            tg.start_soon(listen)
            with anyio.fail_after(WAIT):
                await acked.wait()
            yield client, changes
            tg.cancel_scope.cancel()


async def all_tools(client: Client, **kw: Any) -> tuple[list[types.Tool], int]:
    """Every page of tools/list (uncached) and the revision it came from."""
    out: list[types.Tool] = []
    cursor: str | None = None
    revision: int | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass", **kw)
        rev = (page.meta or {}).get(REVISION_META)
        assert revision is None or rev == revision, "pages of one listing come from one revision"
        revision = rev
        out.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            assert revision is not None
            return out, revision


async def tool_names(client: Client) -> set[str]:
    return {t.name for t in (await all_tools(client))[0]}


from tests.support.calls import call_error as call_error  # noqa: E402  (shared)
from tests.support.calls import revision_of as revision_of  # noqa: E402


def text_of(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


def payload(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    return dict(json.loads(text_of(result)))


# -- the engine, observed -------------------------------------------------------------------------


from tests.support.observe import Publications as Publications  # noqa: E402  (shared with tests/api)
from tests.support.waits import no_pins as no_pins  # noqa: E402  (shared with tests/chaos)
from tests.support.waits import until  # noqa: E402


async def binding_of(served: Served, era: str, *, exclude: Sequence[Binding] = ()) -> Binding:
    """The front door's binding for a client that just connected (legacy: bound at the
    handshake's ``initialized`` notification, which the server handles asynchronously)."""
    wanted = "legacy" if era == "legacy" else "modern"

    def found() -> list[Binding]:
        return [b for b in served.front.bindings.values() if b.era == wanted and b not in exclude]

    await until(lambda: bool(found()), what=f"a new {wanted} binding", timeout_s=WAIT)
    bindings = found()
    assert len(bindings) == 1, bindings
    return bindings[0]


async def notifier_caught_up(served: Served, bindings: Sequence[Binding], revision: int) -> None:
    """Wait until the front door's notifier has compared every binding's view at ``revision``."""
    await until(
        lambda: all(b.last_view is not None and b.last_view.revision >= revision for b in bindings),
        what=f"the notifier to compare every binding at revision {revision}",
        timeout_s=WAIT,
    )


__all__ = [
    "ANONYMOUS_CURRENT",
    "ERAS",
    "REPO_ROOT",
    "WAIT",
    "Changes",
    "Publications",
    "all_tools",
    "binding_of",
    "call_error",
    "downstream",
    "no_pins",
    "notifier_caught_up",
    "payload",
    "revision_of",
    "stdio_gateway",
    "text_of",
    "tool_names",
    "upstream_source",
    "wait_for_file",
    "write_config",
]
