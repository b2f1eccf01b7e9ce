"""The real ``@modelcontextprotocol/server-everything`` (pinned in ``.ci/server-everything/``,
installed once with ``npm ci`` into a cache) behind the served gateway over stdio, driven by the
Python SDK in both eras (issue 11, "done when"): sampling, elicitation and roots reach the client
that made the call, log records follow the session's level, completion is routed to the prompt's
owner, and resource updates reach the subscribed session.

server-everything registers its sampling, elicitation and roots tools only for a client that
declares those capabilities, so their presence in the gateway's catalog is itself the check that
the gateway's upstream connection declares them. Its logging and subscription toggles send one
message at once and then every 5 s; the tests use the first."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPDeprecationWarning
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.api.server import Served, serve_http
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.e2e.conftest import REPO_ROOT, WAIT, write_config
from tests.e2e.support_resources import new_token

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.MCPDeprecationWarning")]

PINNED = REPO_ROOT / ".ci" / "server-everything"
ERAS = ["legacy", "auto"]
DOC = "demo://resource/static/document/architecture.md"


@pytest.fixture(scope="session")
def server_everything() -> Path:
    """``dist/index.js`` of the pinned server-everything, installed from the lock file into
    ``$XDG_CACHE_HOME/mcp-reconciler`` (once per lock file; needs ``npm`` and ``node``)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not on PATH: the server-everything tests need Node.js and npm")
    lock = (PINNED / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mcp-reconciler"
    work = cache / f"server-everything-{hashlib.sha256(lock).hexdigest()[:12]}"
    entry = work / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    if not entry.exists():
        work.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PINNED / name, work / name)
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=work, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0 or not entry.exists():
            pytest.fail(f"npm ci of server-everything failed in {work}: {done.stderr.strip()[-500:]}")
    return entry


@asynccontextmanager
async def gateway(tmp_path: Path, entry: Path) -> AsyncIterator[Served]:
    source = {"name": "se", "stdio": {"command": shutil.which("node") or "node", "args": [str(entry), "stdio"]}}
    async with serve_http(write_config(tmp_path, sources=[source]), port=0) as served:
        yield served


class Peer:
    """The client side of every server→client feature, recording what it was asked."""

    def __init__(self) -> None:
        self.sampled: list[str] = []
        self.elicited: list[str] = []
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updates: list[str] = []
        self._news = anyio.Event()

    async def sampling(self, ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampled.append(str(params.messages[0].content))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled-through-gateway"), model="m"
        )

    async def elicitation(self, ctx: Any, params: Any) -> types.ElicitResult:
        self.elicited.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    async def roots(self, ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/project", name="project")])

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self._told()

    async def messages(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updates.append(str(message.params.uri))
            self._told()

    def _told(self) -> None:
        news, self._news = self._news, anyio.Event()
        news.set()

    async def until(self, predicate: Any) -> None:
        with anyio.fail_after(WAIT):
            while not predicate():
                await self._news.wait()


@asynccontextmanager
async def client(served: Served, mode: str, peer: Peer, **kw: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {new_token(served)}"}
    async with mcp_http_client(headers=headers) as http:
        async with Client(
            streamable_http_client(served.url, http_client=http),
            mode=mode,
            sampling_callback=peer.sampling,
            elicitation_callback=peer.elicitation,
            list_roots_callback=peer.roots,
            logging_callback=peer.logging,
            message_handler=peer.messages,
            **kw,
        ) as c:
            yield c


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_elicitation_and_roots_reach_the_calling_client(
    mode: str, server_everything: Path, tmp_path: Path
) -> None:
    async with gateway(tmp_path, server_everything) as served:
        peer = Peer()
        async with client(served, mode, peer) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            # Registered by server-everything only for a client that declares the capability.
            assert {"se__trigger-sampling-request", "se__trigger-elicitation-request", "se__get-roots-list"} <= names
            with anyio.fail_after(WAIT):
                sampled = text(await c.call_tool("se__trigger-sampling-request", {"prompt": "say hi"}))
                elicited = text(await c.call_tool("se__trigger-elicitation-request", {}))
                roots = text(await c.call_tool("se__get-roots-list", {}))
        assert "sampled-through-gateway" in sampled and len(peer.sampled) == 1 and "say hi" in peer.sampled[0]
        assert "Name: Ada" in elicited and len(peer.elicited) == 1
        assert "file:///work/project" in roots and "project" in roots


async def test_log_records_follow_the_session_level(server_everything: Path, tmp_path: Path) -> None:
    """2025-11-25 only: ``logging/setLevel`` is not in the 2026-07-28 core (a 2026 client opts in
    per request, covered in ``tests/relay/test_logging.py``)."""
    async with gateway(tmp_path, server_everything) as served:
        peer = Peer()
        async with client(served, "legacy", peer) as c:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", MCPDeprecationWarning)
                await c.set_logging_level("debug")  # every level passes
            with anyio.fail_after(WAIT):
                assert "started" in text(await c.call_tool("se__toggle-simulated-logging", {})).lower()
                await peer.until(lambda: peer.logs)
            record = peer.logs[0]
            assert record.logger is not None and record.logger.split("/")[0] == "se"  # the source is named
            assert "message" in json.dumps(record.data).lower()
            with anyio.fail_after(WAIT):
                assert "stopped" in text(await c.call_tool("se__toggle-simulated-logging", {})).lower()


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_is_routed_to_the_prompt_owner(mode: str, server_everything: Path, tmp_path: Path) -> None:
    async with gateway(tmp_path, server_everything) as served:
        peer = Peer()
        async with client(served, mode, peer) as c:
            with anyio.fail_after(WAIT):
                ref = types.PromptReference(name="se__completable-prompt")
                departments = await c.complete(ref, {"name": "department", "value": "S"})
                people = await c.complete(ref, {"name": "name", "value": ""}, {"department": "Engineering"})
        assert departments.completion.values == ["Sales", "Support"]
        assert people.completion.values == ["Alice", "Bob", "Charlie"]


@pytest.mark.parametrize("mode", ERAS)
async def test_resource_updates_reach_the_subscribed_session(
    mode: str, server_everything: Path, tmp_path: Path
) -> None:
    async with gateway(tmp_path, server_everything) as served:
        peer, other = Peer(), Peer()
        async with client(served, mode, peer) as c, client(served, mode, other) as bystander:
            caps = c.server_capabilities
            assert caps is not None and caps.resources is not None and caps.resources.subscribe is True
            await bystander.list_tools()
            if mode == "legacy":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await c.session.subscribe_resource(DOC)
                await toggle_and_wait(c, peer)
            else:
                async with c.listen(resource_subscriptions=[DOC]) as sub, anyio.create_task_group() as tg:

                    async def drain() -> None:
                        async for _event in sub:
                            pass  # the SDK tees each event to the message handler

                    tg.start_soon(drain)
                    await toggle_and_wait(c, peer)
                    tg.cancel_scope.cancel()
        assert set(peer.updates) == {DOC}
        assert other.updates == []  # not subscribed: told nothing


async def toggle_and_wait(c: Client, peer: Peer) -> None:
    """Turn server-everything's update simulation on (it announces every subscribed URI at once),
    wait for the first update, and turn it off again."""
    with anyio.fail_after(WAIT):
        await c.call_tool("se__toggle-subscriber-updates", {})
        await peer.until(lambda: peer.updates)
        await c.call_tool("se__toggle-subscriber-updates", {})
