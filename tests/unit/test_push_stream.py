"""``api/plane/sessions.py``'s ``PushStream``/``PushChannel``: a 2025-era session's pushes written
directly to its idle GET stream, else through the bounded backlog, in order either way.

The unit under test is the hand-off: a real ``SessionTable`` session, its real push channel, and
the GET stream's drain loop as ``era2025._get`` runs it; the response's ``send`` is a recorder
with uvicorn's flow-control shape (``send.__self__.flow.write_paused``) whose writes can be held,
so a write in flight and a paused transport are states the test sets, not races it hopes for.
The served path (uvicorn, real sockets) is ``tests/e2e/test_standalone_stream.py``."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from mcp_reconciler.api.plane import sse
from mcp_reconciler.api.plane.channel import next_frame
from mcp_reconciler.api.plane.sessions import (
    PUSH_BACKLOG,
    LegacySession,
    PushStream,
    SessionTable,
    transport_writable,
)

pytestmark = pytest.mark.anyio

WAIT = 10.0


class _Flow:
    def __init__(self) -> None:
        self.write_paused = False


class _Cycle:
    """A response's ``send`` as uvicorn shapes it: a bound method whose object has ``flow``."""

    def __init__(self) -> None:
        self.flow = _Flow()
        self.written: list[bytes] = []
        self.hold: anyio.Event | None = None  # set: the next write waits for it (a write in flight)
        self.holding = anyio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        if self.hold is not None:
            hold, self.hold = self.hold, None
            self.holding.set()
            await hold.wait()
        self.written.append(message["body"])

    async def write(self, *pieces: bytes) -> None:  # the GET stream's writer: a small event is one send
        await self.send({"type": "http.response.body", "body": b"".join(pieces), "more_body": True})


def _session() -> LegacySession:
    return SessionTable(max_sessions=4, max_per_client=4, idle_s=60).open("p", "c")


async def _push(session: LegacySession, n: int) -> None:
    await session.connection.send_resource_updated(f"note://{n}")


def _uris(written: list[bytes]) -> list[str]:
    """The ``uri`` of each pushed event, in wire order (each event is one piece: id + frame)."""
    out = []
    for body in written:
        assert body.startswith(b"id: ") and body.endswith(b"\r\n\r\n"), body
        out.append(json.loads(body.split(b"data: ", 1)[1])["params"]["uri"])
    return out


def _ids(written: list[bytes]) -> list[int]:
    return [int(body.split(b"\r\n", 1)[0].rsplit(b":", 1)[1]) for body in written]


async def _drain(stream: PushStream, session: LegacySession) -> None:
    """The GET stream's task, as ``era2025._get`` runs it."""
    while (frame := await next_frame(session.standalone.frames)) is not None:
        await stream.from_backlog(frame)


async def test_a_push_to_an_idle_get_stream_is_written_directly_with_its_id_and_kept() -> None:
    session, cycle = _session(), _Cycle()
    stream = session.standalone.open_stream(session, cycle.send, cycle.write)
    stream.ready()
    with anyio.fail_after(WAIT):
        for n in range(3):
            await _push(session, n)  # no drain task runs: only a direct write can deliver these
    assert stream.direct_frames == 3 and stream.queued == 0
    assert _uris(cycle.written) == ["note://0", "note://1", "note://2"]
    assert _ids(cycle.written) == [1, 2, 3]
    # Kept for Last-Event-ID exactly as written: a resume after the first replays the other two.
    key, replay = session.replay_after(f"{session.id}.0:1")
    assert key == 0 and [b"".join(e) for e in replay] == cycle.written[1:]


async def test_a_push_during_a_write_in_flight_queues_and_never_overtakes_it() -> None:
    session, cycle = _session(), _Cycle()
    stream = session.standalone.open_stream(session, cycle.send, cycle.write)
    stream.ready()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            hold = cycle.hold = anyio.Event()
            tg.start_soon(_push, session, 0)  # direct, and held mid-write
            await cycle.holding.wait()
            await _push(session, 1)  # the stream is busy: the backlog
            await _push(session, 2)  # one is queued: the backlog too (it may not pass it)
            assert stream.direct_frames == 1 and stream.queued == 2
            await anyio.wait_all_tasks_blocked()  # the drain task took #1 and waits for the write in flight
            assert cycle.written == []
            hold.set()
            while stream.queued:
                await anyio.wait_all_tasks_blocked()
            await _push(session, 3)  # drained and idle again: direct
            assert stream.direct_frames == 2
            session.standalone.sink.close()
    assert _uris(cycle.written) == ["note://0", "note://1", "note://2", "note://3"]
    assert _ids(cycle.written) == [1, 2, 3, 4]


async def test_I18_a_paused_transport_takes_the_backlog_bounded_at_push_backlog() -> None:
    """I18: a client that stopped reading (uvicorn paused the transport's writes) never stalls
    the pusher; its stream holds ``PUSH_BACKLOG`` frames (N) and drops the N+1st, and the
    backlog leaves in order once the client reads again."""
    session, cycle = _session(), _Cycle()
    stream = session.standalone.open_stream(session, cycle.send, cycle.write)
    stream.ready()
    cycle.flow.write_paused = True
    with anyio.fail_after(WAIT):
        for n in range(PUSH_BACKLOG):
            await _push(session, n)
        assert stream.queued == PUSH_BACKLOG and stream.direct_frames == 0
        await _push(session, PUSH_BACKLOG)  # N+1: dropped, the pusher not blocked
        assert stream.queued == PUSH_BACKLOG
        assert session.standalone.frames.statistics().current_buffer_used == PUSH_BACKLOG
        cycle.flow.write_paused = False
        await _push(session, PUSH_BACKLOG + 1)  # writable again, but frames are queued: not past them
        assert cycle.written == [] and stream.direct_frames == 0
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            while stream.queued:
                await anyio.wait_all_tasks_blocked()
            session.standalone.sink.close()
    assert _uris(cycle.written) == [f"note://{n}" for n in range(PUSH_BACKLOG)]
    assert _ids(cycle.written) == list(range(1, PUSH_BACKLOG + 1))


async def test_pushes_queued_before_the_stream_opened_and_its_replay_go_first() -> None:
    """A push made while no GET stream is open waits in the backlog; the stream that opens
    (resuming: a replay and its priming event first) writes it before any later push, which
    then goes direct."""
    session, cycle = _session(), _Cycle()
    await _push(session, 0)  # no stream: the backlog
    stream = session.standalone.open_stream(session, cycle.send, cycle.write)
    assert stream.queued == 1
    await _push(session, 1)  # the opener still writes its replay: queued behind
    await cycle.write(session.priming(0))
    stream.ready()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            while stream.queued:
                await anyio.wait_all_tasks_blocked()
            await _push(session, 2)
            session.standalone.sink.close()
    assert cycle.written[0].endswith(b"data: \r\n\r\n")  # the priming event
    assert _uris(cycle.written[1:]) == ["note://0", "note://1", "note://2"]
    assert stream.direct_frames == 1


async def test_a_closed_session_or_an_unknown_server_never_writes_directly() -> None:
    session, cycle = _session(), _Cycle()

    async def bare_send(message: dict[str, Any]) -> None:  # a server that does not tell its flow
        cycle.written.append(message["body"])

    assert transport_writable(bare_send) is None
    stream = session.standalone.open_stream(session, bare_send, cycle.write)
    stream.ready()
    await _push(session, 0)
    assert stream.direct_frames == 0 and stream.queued == 1
    session.standalone.close_stream()
    stream = session.standalone.open_stream(session, cycle.send, cycle.write)
    stream.ready()
    session.closed = True
    assert not stream.takes_direct()
    assert sse.PING not in cycle.written
