"""Fast in-memory stand-ins for engine unit tests (the MCP edges get real-transport tests)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import anyio

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.catalog import Catalog, make_entry, merge
from mcp_reconciler.reconciler.errors import SourceReadError
from mcp_reconciler.reconciler.model import EntryKind, SourceSpec, SourceState

_ids = itertools.count(1)


class FakeConnection:
    """Counts closes; exactly-once teardown (I14) is checked against ``closes``."""

    def __init__(self, source: str = "s") -> None:
        self._id = f"{source}#fake{next(_ids)}"
        self.closes = 0

    @property
    def connection_id(self) -> str:
        return self._id

    @property
    def closed(self) -> bool:
        return self.closes > 0

    async def aclose(self) -> None:
        self.closes += 1


def spec(name: str, **kw: Any) -> SourceSpec:
    return SourceSpec(name=name, transport={"kind": "fake"}, **kw)


def state(name: str, tools: list[str], conn: FakeConnection | None = None, *, version: str = "") -> SourceState:
    sp = spec(name)
    entries = tuple(
        make_entry(
            sp, EntryKind.TOOL, t, {"name": t, "description": f"{t} {version}", "inputSchema": {"type": "object"}}
        )
        for t in tools
    )
    return SourceState(source=name, spec_digest=sp.digest, entries=entries, built_at=0.0, connection=conn)


def catalog(*states: SourceState, bounds: Bounds | None = None) -> Catalog:
    return merge(states, bounds=bounds or Bounds(), built_at=0.0)


class FakeReader:
    """A SourceReader over a dict of tool lists. Tests control failures and can hold reads.

    Each read of a source whose spec/inputs changed (or that has no live connection) opens a
    new FakeConnection, like the real reader does."""

    def __init__(self, tools: dict[str, list[str]]) -> None:
        self.tools = tools
        self.versions: dict[str, str] = {}
        self.fail: dict[str, str] = {}
        self.reads: list[str] = []
        self.connections: list[FakeConnection] = []
        self.gate: anyio.Event | None = None
        self.read_started = anyio.Event()
        self.on_read: Callable[[str], None] | None = None

    async def read(self, spec: SourceSpec, previous: SourceState | None, *, inputs_digest: str) -> SourceState:
        self.reads.append(spec.name)
        self.read_started.set()
        if self.on_read is not None:
            self.on_read(spec.name)
        failure = self.fail.get(spec.name)
        v = self.versions.get(spec.name, "")
        names = list(self.tools.get(spec.name, []))  # the listing is taken before the gate
        if self.gate is not None:
            await self.gate.wait()
        if failure is not None:
            raise SourceReadError("upstream unavailable", detail=failure)
        prev_conn = previous.connection if previous is not None else None
        reuse = (
            isinstance(prev_conn, FakeConnection)
            and not prev_conn.closed
            and previous is not None
            and previous.spec_digest == spec.digest
            and previous.inputs_digest == inputs_digest
        )
        conn = prev_conn if reuse else FakeConnection(spec.name)
        assert isinstance(conn, FakeConnection)
        if not reuse:
            self.connections.append(conn)
        entries = tuple(
            make_entry(
                spec, EntryKind.TOOL, t, {"name": t, "description": f"{t} {v}", "inputSchema": {"type": "object"}}
            )
            for t in names
        )
        return SourceState(
            source=spec.name,
            spec_digest=spec.digest,
            entries=entries,
            built_at=0.0,
            connection=conn,
            inputs_digest=inputs_digest,
        )
