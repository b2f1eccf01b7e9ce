"""``api/plane/push.py``: a 2025-era session's pushes written directly to its idle GET stream,
else through the bounded backlog, in order either way — and ``start_now``, which keeps a write
the transport holds from stalling the writer.

The unit under test is the hand-off: a real ``SessionTable`` session, its real push channel, and
the GET stream's drain loop as ``era2025._get`` runs it; the stream's writer is a recorder whose
writes can be held (a client that stopped reading: the ASGI ``send`` waits), so a write in flight
is a state the test sets, not a race it hopes for. The served path (uvicorn, real sockets) is
``tests/e2e/test_standalone_stream.py``."""

from __future__ import annotations

import asyncio
import json

import anyio
import pytest

from mcp_reconciler.api.plane import sse
from mcp_reconciler.api.plane.channel import next_frame
from mcp_reconciler.api.plane.push import DirectStream, start_now
from mcp_reconciler.api.plane.sessions import PUSH_BACKLOG, LegacySession, SessionTable

pytestmark = pytest.mark.anyio

WAIT = 10.0


class _Wire:
    """A GET stream's writer: each event's pieces joined, in the order written; while
    :attr:`hold` is unset a write waits for it (the transport's flow control holds it)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.hold = anyio.Event()
        self.hold.set()

    async def write(self, *pieces: bytes) -> None:
        if not self.hold.is_set():
            await self.hold.wait()
        self.written.append(b"".join(pieces))


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


async def _drain(stream: DirectStream, session: LegacySession) -> None:
    """The GET stream's task, as ``era2025._get`` runs it."""
    while (frame := await next_frame(session.standalone.frames)) is not None:
        await stream.from_backlog(frame)
    await stream.settled()


async def test_start_now_finishes_a_write_that_does_not_wait_in_the_callers_task() -> None:
    done: list[str] = []

    async def quick() -> None:
        done.append("quick")

    assert start_now(quick()) is None
    assert done == ["quick"]


async def test_start_now_hands_a_held_write_to_a_task_that_finishes_it() -> None:
    """The caller never waits for a held write; the rest gets what it waited for, and a
    cancellation reaches it where it waits (a response that ends abandons it)."""
    release, got = anyio.Event(), []

    async def held(tag: str) -> None:
        got.append(f"{tag} started")
        await release.wait()
        got.append(f"{tag} done")

    rest = start_now(held("a"))
    assert isinstance(rest, asyncio.Task) and got == ["a started"]
    release.set()
    with anyio.fail_after(WAIT):
        await rest
    assert got == ["a started", "a done"]

    release = anyio.Event()
    cancelled = start_now(held("b"))
    assert cancelled is not None
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert "b done" not in got


async def test_start_now_raises_what_the_write_raises_before_it_waits() -> None:
    async def broken() -> None:
        raise OSError("gone")

    with pytest.raises(OSError, match="gone"):
        start_now(broken())


async def test_a_push_to_an_idle_get_stream_is_written_directly_with_its_id_and_kept() -> None:
    session, wire = _session(), _Wire()
    stream = session.standalone.open_stream(session, wire.write)
    stream.ready()
    for n in range(3):
        await _push(session, n)  # no drain task runs: only a direct write can deliver these
        assert len(wire.written) == n + 1  # written within the push itself
    assert stream.direct_frames == 3 and stream.queued == 0
    assert _uris(wire.written) == ["note://0", "note://1", "note://2"]
    assert _ids(wire.written) == [1, 2, 3]
    # Kept for Last-Event-ID exactly as written: a resume after the first replays the other two.
    key, replay = session.replay_after(f"{session.id}.0:1")
    assert key == 0 and [b"".join(e) for e in replay] == wire.written[1:]


async def test_a_push_during_a_write_in_flight_queues_and_never_overtakes_it() -> None:
    session, wire = _session(), _Wire()
    stream = session.standalone.open_stream(session, wire.write)
    stream.ready()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            wire.hold = anyio.Event()
            await _push(session, 0)  # direct, held mid-write: the pusher does not wait for it
            assert stream.busy and stream.direct_frames == 1
            await _push(session, 1)  # the stream is busy: the backlog
            await _push(session, 2)  # one is queued: the backlog too (it may not pass it)
            assert stream.direct_frames == 1 and stream.queued == 2
            await anyio.wait_all_tasks_blocked()  # the drain task took #1 and waits for the write in flight
            assert wire.written == []
            wire.hold.set()
            while stream.queued or stream.busy:
                await anyio.wait_all_tasks_blocked()
            await _push(session, 3)  # drained and idle again: direct
            assert stream.direct_frames == 2
            session.standalone.sink.close()
    assert _uris(wire.written) == ["note://0", "note://1", "note://2", "note://3"]
    assert _ids(wire.written) == [1, 2, 3, 4]


async def test_I18_a_held_stream_takes_the_backlog_bounded_at_push_backlog() -> None:
    """I18: a client that stopped reading (its write is held) never stalls the pusher; its
    stream holds ``PUSH_BACKLOG`` frames (N) behind the write in flight and drops the N+1st,
    and the backlog leaves in order once the client reads again."""
    session, wire = _session(), _Wire()
    stream = session.standalone.open_stream(session, wire.write)
    stream.ready()
    wire.hold = anyio.Event()
    with anyio.fail_after(WAIT):
        await _push(session, 0)  # direct, held
        for n in range(1, PUSH_BACKLOG + 1):
            await _push(session, n)
        assert stream.queued == PUSH_BACKLOG and stream.direct_frames == 1
        await _push(session, PUSH_BACKLOG + 1)  # N+1: dropped, the pusher not blocked
        assert stream.queued == PUSH_BACKLOG
        assert session.standalone.frames.statistics().current_buffer_used == PUSH_BACKLOG
        wire.hold.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            while stream.queued:
                await anyio.wait_all_tasks_blocked()
            await _push(session, PUSH_BACKLOG + 2)  # idle again: direct
            session.standalone.sink.close()
    assert _uris(wire.written) == [f"note://{n}" for n in [*range(PUSH_BACKLOG + 1), PUSH_BACKLOG + 2]]
    assert _ids(wire.written) == list(range(1, PUSH_BACKLOG + 3))  # the dropped push took no id


async def test_a_held_stream_does_not_stall_the_others() -> None:
    """One client that stopped reading costs the others nothing: the pusher's pass writes the
    rest at once (what one ``list_changed`` to many sessions is)."""
    table = SessionTable(max_sessions=8, max_per_client=8, idle_s=60)
    sessions = [table.open("p", "c") for _ in range(4)]
    wires = [_Wire() for _ in sessions]
    streams = [s.standalone.open_stream(s, w.write) for s, w in zip(sessions, wires, strict=True)]
    for stream in streams:
        stream.ready()
    wires[1].hold = anyio.Event()  # the second client stopped reading
    for session in sessions:
        await _push(session, 0)
    assert [len(w.written) for w in wires] == [1, 0, 1, 1]
    assert streams[1].busy and all(s.direct_frames == 1 for s in streams)
    wires[1].hold.set()
    with anyio.fail_after(WAIT):
        await streams[1].settled()
    assert [len(w.written) for w in wires] == [1, 1, 1, 1]


async def test_pushes_queued_before_the_stream_opened_and_its_replay_go_first() -> None:
    """A push made while no GET stream is open waits in the backlog; the stream that opens
    (resuming: a replay and its priming event first) writes it before any later push, which
    then goes direct."""
    session, wire = _session(), _Wire()
    await _push(session, 0)  # no stream: the backlog
    stream = session.standalone.open_stream(session, wire.write)
    assert stream.queued == 1
    await _push(session, 1)  # the opener still writes its replay: queued behind
    await wire.write(session.priming(0))
    stream.ready()
    await _push(session, 2)  # idle, but frames are queued: behind them, not past them
    assert stream.direct_frames == 0 and stream.queued == 3 and len(wire.written) == 1
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, session)
            while stream.queued:
                await anyio.wait_all_tasks_blocked()
            await _push(session, 3)
            session.standalone.sink.close()
    assert wire.written[0].endswith(b"data: \r\n\r\n")  # the priming event
    assert _uris(wire.written[1:]) == ["note://0", "note://1", "note://2", "note://3"]
    assert stream.direct_frames == 1


async def test_a_closed_session_never_writes_directly_and_pings_take_no_id() -> None:
    session, wire = _session(), _Wire()
    stream = session.standalone.open_stream(session, wire.write)
    stream.ready()
    await stream.write(sse.PING)  # the stream's keepalive: no id, nothing kept
    assert wire.written == [sse.PING] and session.history is None
    session.closed = True
    assert not stream.takes_direct()
