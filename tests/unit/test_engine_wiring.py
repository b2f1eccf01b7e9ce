"""One-way wiring (issue 9): triggers reach the queue through sinks given at construction, the
parts are assembled on an ``AsyncExitStack`` and leave it in reverse order, and the edges get
everything they need from the :class:`Engine` facade.

Upstreams are small real MCP servers over the SDK's in-memory transport; every wait is bounded
and waits on publications (runtime listeners), not on time."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from mcp_reconciler.reconciler import telemetry
from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.desired import DesiredState, StaticDesiredState
from mcp_reconciler.reconciler.engine import Engine, open_engine
from mcp_reconciler.reconciler.errors import RevisionUnavailableError
from mcp_reconciler.reconciler.generation import Generation
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.reconcile import Reconciler, new_trigger_queue
from mcp_reconciler.reconciler.runtime import Runtime
from mcp_reconciler.reconciler.upstream import UpstreamConnection, UpstreamReader
from tests.support.fakes import FakeReader, spec
from tests.support.observe import Publications
from tests.support.waits import until

pytestmark = pytest.mark.anyio
WAIT = 10.0
FAST = Bounds(cooldown_s=0.0, reconnect_backoff_min_s=0.05, reconnect_backoff_max_s=0.1)


class Announcer:
    """An upstream whose tool list the test changes, announced on its ``subscriptions/listen`` bus."""

    def __init__(self, *names: str) -> None:
        self.names = list(names)
        self.bus = InMemorySubscriptionBus()
        self.server: Server[Any] = Server(
            "s", version="1", on_list_tools=self._list_tools, on_subscriptions_listen=ListenHandler(self.bus)
        )

    async def _list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=n, input_schema={"type": "object"}) for n in self.names])

    async def add_and_announce(self, name: str, publications: Publications) -> Generation:
        """Add ``name`` and announce it until a publication shows it (the first announcement may
        race the connection's listen subscription; announcing again is idempotent)."""
        self.names.append(name)
        exposed = f"a__{name}"
        with anyio.fail_after(WAIT):
            while exposed not in (publications.generations[-1].tools if publications.generations else {}):
                await self.bus.publish(ToolsListChanged())
                with anyio.move_on_after(0.05):
                    await publications.wait_for(lambda g: exposed in g.tools, timeout_s=WAIT)
        return publications.generations[-1]


def specs(*names: str) -> list[SourceSpec]:
    return [SourceSpec(name=n, transport={"kind": "in-process"}) for n in names]


async def test_reader_reports_to_the_queue_it_was_built_with() -> None:
    """The queue exists first; the reader gets ``queue.add``, the reconciler the queue. A
    ``list_changed`` from the upstream is published without any refresh or attribute assignment."""
    up = Announcer("x")
    queue = new_trigger_queue(FAST)
    async with UpstreamReader(lambda s, _e: up.server, bounds=FAST, on_dirty=queue.add) as reader:
        assert reader.on_dirty == queue.add
        with pytest.raises(AttributeError):
            reader.on_dirty = lambda key: None  # type: ignore[misc]  # the sink is fixed at construction
        async with Reconciler(StaticDesiredState(specs("a")), reader, bounds=FAST, queue=queue) as rec:
            assert rec.queue is queue
            publications = Publications(rec)
            await publications.wait_for(lambda g: "a__x" in g.tools)
            triggers = queue.triggers
            gen = await up.add_and_announce("y", publications)
            assert "a__y" in gen.tools
            assert queue.triggers > triggers  # it came through the queue, from the reader


async def test_open_engine_wires_itself_and_listeners_see_the_first_publication() -> None:
    up = Announcer("x")
    seen: list[int] = []
    async with open_engine(
        StaticDesiredState(specs("a")),
        lambda s, _e: up.server,
        bounds=FAST,
        listeners=[lambda new, old: seen.append(new.revision)],
    ) as engine:
        assert isinstance(engine, Engine)
        first = await engine.refresh(timeout_s=WAIT)
        assert first.revision == 1 and seen == [1]  # registered before the loop's first cycle
        assert engine.current is not None and engine.current_revision == 1 and engine.get(1) is engine.current
        assert engine.source_names() == frozenset({"a"})
        assert engine.readiness().ready and engine.readiness().revision == 1
        publications = Publications(engine)
        await up.add_and_announce("y", publications)  # no refresh: the reader's sink did it
        assert engine.current_revision == 2 and seen == [1, 2]
        assert [g.revision for g in engine.live()] == [2]
        with pytest.raises(RevisionUnavailableError):
            engine.get(1)  # no pin held it: closed at once
    assert engine.closed


async def test_a_body_exception_passes_through_unwrapped_and_everything_closes() -> None:
    """Background task groups reap their own tasks without taking the body's exception: the
    caller gets its ValueError back (not an ExceptionGroup), and every connection is closed."""
    up = Announcer("x")
    conns: list[UpstreamConnection] = []
    with pytest.raises(ValueError, match="the caller's own"):
        async with open_engine(StaticDesiredState(specs("a")), lambda s, _e: up.server, bounds=FAST) as engine:
            await engine.refresh(timeout_s=WAIT)
            assert engine.current is not None
            conn = engine.current.generation.source_state("a").connection  # type: ignore[union-attr]
            assert isinstance(conn, UpstreamConnection) and conn.alive
            conns.append(conn)
            raise ValueError("the caller's own")
    assert not conns[0].alive
    for part in (Runtime(), UpstreamReader(lambda s, _e: up.server)):
        with pytest.raises(ValueError, match="plain"):
            async with part:  # type: ignore[attr-defined]
                raise ValueError("plain")


async def test_pin_gauges_observe_a_runtime_only_while_its_reconciler_runs() -> None:
    rec = Reconciler(StaticDesiredState([spec("a")]), FakeReader({"a": ["x"]}), bounds=FAST)
    assert rec.runtime not in telemetry.pin_gauges.observed()
    async with rec:
        assert rec.runtime in telemetry.pin_gauges.observed()
    assert rec.runtime not in telemetry.pin_gauges.observed()


class SlowDesired:
    """A desired state whose load takes part of the cycle budget when ``slow`` is set, so the
    cycle times out while one source's read still runs."""

    def __init__(self, specs_: list[SourceSpec], delay_s: float) -> None:
        self.specs = tuple(specs_)
        self.delay_s = delay_s
        self.slow = False
        self.inputs_digest: dict[str, str] = {}

    async def load(self) -> DesiredState:
        if self.slow:
            await anyio.sleep(self.delay_s)  # the scenario (a slow config read), not synchronisation
        return DesiredState(specs=self.specs, inputs_digest=dict(self.inputs_digest))


async def test_I14_a_failed_cycle_closes_the_connections_its_reads_opened() -> None:
    """A cycle that times out after one source's read opened a new connection (its watched
    inputs changed) closes that connection exactly once, in the runtime's task group, while the
    published generation keeps its own connections."""
    reader = FakeReader({"a": ["x"], "b": ["y"]})
    desired = SlowDesired([spec("a"), spec("b")], delay_s=0.3)
    bounds = Bounds(cooldown_s=0.0, cycle_timeout_s=1.0, cycle_retry_max_s=60.0)
    b_released = anyio.Event()
    original = reader.read

    async def read(spec_: SourceSpec, previous: Any, *, inputs_digest: str) -> Any:
        if spec_.name == "b" and desired.slow:
            await b_released.wait()  # b's read outlasts the cycle (its own bound is 0.9 s)
        return await original(spec_, previous, inputs_digest=inputs_digest)

    reader.read = read  # type: ignore[method-assign]
    async with Reconciler(desired, reader, bounds=bounds) as rec:
        await rec.refresh(timeout_s=WAIT)
        published = list(reader.connections)
        desired.slow = True
        desired.inputs_digest = {"a": "changed"}  # a is re-read on a new connection
        outcome = await rec.refresh(["a", "b"], timeout_s=WAIT)
        assert outcome.status == "failed" and outcome.error == "the reconcile cycle timed out"
        opened = [c for c in reader.connections if c not in published]
        assert len(opened) == 1, "a's read opened a new connection before the cycle failed"
        await until(lambda: opened[0].closes != 0, what="the close runs in the runtime's task group", timeout_s=WAIT)
        assert all(c.closes == 0 for c in published)  # still referenced by the current generation
        desired.slow = False
        b_released.set()
    assert all(c.closes == 1 for c in reader.connections)
