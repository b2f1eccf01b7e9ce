"""Fixtures and helpers for control-API tests: a real gateway on 127.0.0.1 (``serve_http`` with
``port=0``) driven through the SDK (``ReconcilerClient`` / ``SyncReconcilerClient``).

Upstreams are ``tests.support.upstream_server`` processes over stdio, spawned by the gateway
(``cwd`` = the repository root so ``-m tests.support.upstream_server`` imports). Configs live in
``tmp_path`` with ``gateway: {cooldown_s: 0.05}`` for speed.

``no_leaked_children`` (autouse, tests/conftest.py) asserts that no child
process of the test process outlives a test (I14). Every wait is bounded (``anyio.fail_after``);
polling is used only for engine state outside the test's control flow."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.auth import Authenticator
from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.reconciler.authority import GrantPolicy, principal_id
from mcp_reconciler.reconciler.errors import RevisionUnavailableError
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.integration.conftest import (
    REPO_ROOT,
    SERVER_MODULE,
)

WAIT = 20.0  # bound on any single wait in this directory

OPERATOR_TOKEN = "op-token-0123456789abcdef"
OWNER_TOKENS = {"alice": "alice-token-0123456789", "bob": "bob-token-0123456789"}
ALICE, BOB = OWNER_TOKENS["alice"], OWNER_TOKENS["bob"]
ALL_TOKENS = (OPERATOR_TOKEN, *OWNER_TOKENS.values())

REVISION_META = "io.mcp-reconciler/revision"
REVISION_HEADER_LOWER = "mcp-reconciler-revision"


def authenticator() -> Authenticator:
    return Authenticator([OPERATOR_TOKEN], dict(OWNER_TOKENS))


# -- configs --------------------------------------------------------------------------------------


def upstream_source(name: str = "up", *tools: str) -> dict[str, Any]:
    """A stdio source running the test upstream with ``tools`` (``command: python`` is the
    gateway's own interpreter)."""
    return {
        "name": name,
        "stdio": {
            "command": "python",
            "args": ["-m", SERVER_MODULE, "--tools", ",".join(tools)],
            "cwd": str(REPO_ROOT),
        },
    }


def write_config(
    tmp: Path,
    *,
    sources: Sequence[dict[str, Any]] | None = None,
    gateway: dict[str, Any] | None = None,
    name: str = "gateway.yaml",
) -> Path:
    """A gateway config (JSON is YAML); default: one upstream ``up`` with tools a, b."""
    if sources is None:
        sources = [upstream_source("up", "a", "b")]
    cfg = tmp / name
    cfg.write_text(json.dumps({"gateway": {"cooldown_s": 0.05, **(gateway or {})}, "sources": list(sources)}))
    backdate(cfg)
    return cfg


_ticks = itertools.count()


def backdate(path: Path) -> None:
    """Move ``path``'s mtime out of the freshness tracker's racy window (2 s), to a value no
    earlier call used: the edit is seen exactly once, instead of the file counting as "maybe
    changed" (dirty) on every stat sweep for two seconds, which would add reload cycles."""
    past = time.time_ns() - 60_000_000_000 + next(_ticks) * 1_000_000
    os.utime(path, ns=(past, past))


@asynccontextmanager
async def served_gateway(cfg: Path, **kw: Any) -> AsyncIterator[Served]:
    """The gateway on 127.0.0.1:<ephemeral> with the test tokens (unless ``authenticator`` is given)."""
    kw.setdefault("authenticator", authenticator())
    async with serve_http(cfg, host="127.0.0.1", port=0, watch_interval_s=0.1, **kw) as served:
        yield served


# -- MCP clients ----------------------------------------------------------------------------------


@asynccontextmanager
async def mcp_client(
    served: Served,
    *,
    mode: str = "auto",
    headers: dict[str, str] | None = None,
    message_handler: Any = None,
    credential: bool = True,
) -> AsyncIterator[Client]:
    """A downstream MCP client on the served front door with extra HTTP ``headers``.

    ``/mcp`` needs a credential (I16): unless ``headers`` carry an ``Authorization`` of their own
    (or ``credential=False``), the client gets a session of its own for the block — policy
    ``current`` at the revision its ``MCP-Reconciler-Revision`` header names (else the current
    one), like the per-connection session a tokenless client used to get — removed afterwards."""
    headers = dict(headers or {})
    session = None
    if credential and not any(k.lower() == "authorization" for k in headers):
        engine = served.gateway.engine
        wanted = next((v for k, v in headers.items() if k.lower() == REVISION_HEADER_LOWER), None)
        live = engine.current
        with contextlib.suppress(RevisionUnavailableError):  # not live: the requests will say so
            live = engine.get(int(wanted)) if wanted is not None and wanted.isdigit() else live
        session = engine.sessions.create(
            principal_id("owner", "tests"), live.generation if live is not None else None, policy=GrantPolicy.CURRENT
        )
        headers["Authorization"] = f"Bearer {session.token}"
    try:
        async with mcp_http_client(headers=headers) as http:
            async with Client(
                streamable_http_client(served.url, http_client=http), mode=mode, message_handler=message_handler
            ) as client:
                yield client
    finally:
        if session is not None:
            served.gateway.engine.sessions.remove(session.id)


class Changes:
    """A ``message_handler`` counting ``tools/list_changed`` so a test can wait for one."""

    def __init__(self) -> None:
        self.tools = 0
        self._event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools += 1
            event, self._event = self._event, anyio.Event()
            event.set()

    async def wait_tools(self, count: int, timeout_s: float = WAIT) -> None:
        with anyio.fail_after(timeout_s):
            while self.tools < count:
                await self._event.wait()


async def tool_names(client: Client, **kw: Any) -> set[str]:
    names: set[str] = set()
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor, cache_mode="bypass", **kw)
        names |= {t.name for t in page.tools}
        cursor = page.next_cursor
        if cursor is None:
            return names


from tests.support.calls import call_error as call_error  # noqa: E402  (shared)
from tests.support.calls import revision_of as revision_of  # noqa: E402

# -- the engine, observed -------------------------------------------------------------------------
from tests.support.observe import Publications as Publications  # noqa: E402  (shared with tests/e2e)


def assert_error_shape(body: Any, *, forbidden: Sequence[str] = ALL_TOKENS) -> None:
    """``{"error": {"code": str, "message": str}}`` and nothing else (a quota's 429 adds its
    ``bound`` and ``limit``, ADR 0032); no token text (I12)."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    quota = {"bound", "limit"} if err.get("bound") is not None else set()
    assert isinstance(err, dict) and set(err) == {"code", "message", *quota}, body
    assert isinstance(err["code"], str) and err["code"], body
    assert isinstance(err["message"], str) and err["message"], body
    text = json.dumps(body)
    for secret in forbidden:
        assert secret not in text, f"error body leaks a token: {body}"


def leaves(exc: BaseException, kinds: Any) -> list[BaseException]:
    """The exceptions of type ``kinds`` inside ``exc`` (exception groups flattened)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner, kinds)]
    return [exc] if isinstance(exc, kinds) else []


async def refused(served: Any, mode: str, headers: dict[str, str]) -> BaseException:
    """The exception an SDK client gets connecting with ``headers`` (it must not connect)."""
    try:
        with anyio.fail_after(WAIT):
            async with mcp_client(served, mode=mode, headers=headers, credential=False) as mcp:
                await mcp.list_tools(cache_mode="bypass")
    except Exception as exc:  # the SDK wraps the 401 in exception groups
        assert not leaves(exc, AssertionError | TimeoutError), exc
        return exc
    raise AssertionError(f"connected with {list(headers)}")
