"""The upstream connection contract, for every transport x protocol era (issue 25, ADR 0025, ADR 0037).

Each test runs against a real upstream process over stdio, streamable HTTP and legacy SSE, in
the 2025-11-25 era (``legacy``) and the 2026-07-28 era (``auto``: discovered), through the
surface the engine and the front door use: ``UpstreamReader.open(spec)`` gives an
``UpstreamConnection``; requests go through ``send`` (with a progress callback), server→client
requests reach the ``PeerSwitch`` the composition root gives the reader, list reads go
through ``UpstreamReader.read``. Nothing here names a transport class or a lane, so the suite
keeps checking the contract whichever peer implements it.

- the SDK as the oracle: the same request sequence from the SDK's own ``Client`` and through
  our connection, to the same server program, gives equal JSON;
- progress notifications arrive in order, on the request that asked for them;
- server→client requests (sampling, elicitation, roots) reach the peer switch in the 2025 era
  and come back as an ``InputRequiredResult`` to answer and retry in the 2026 era;
- cancellation both ways: a caller that gives up cancels the upstream's work, and an upstream
  that gives up on its own request to us cancels what answers it;
- the message bound's exact error, and the list bound's exact diagnostic;
- resumption and the resend rule (2025-era streamable HTTP, the wire whose streams resume): a
  response stream dropped mid-call is resumed with ``Last-Event-ID`` and the request is not sent
  again; the session's GET stream dropped by the server is resumed from the last event id;
- upstream OAuth (HTTP and SSE, both eras): the source's own client-credentials token, renewed
  once when the upstream refuses it with 401, the refused request sent again once.

Where a combination is not supported yet, the test is an ``xfail`` (strict: it fails the day
it passes, so the mark is removed) that names why."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import TypeAdapter

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.errors import SourceReadError
from mcp_reconciler.reconciler.model import SourceSpec
from mcp_reconciler.reconciler.peer import PeerAnswer, PeerSwitch
from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, MessageBoundError, bound_error
from mcp_reconciler.reconciler.transports import stdio_parameters
from mcp_reconciler.reconciler.upstream import UpstreamConnection, UpstreamReader
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.integration.conftest import REPO_ROOT, wait_for_file
from tests.integration.test_stdio_oracle import scrub  # the pid differs between runs
from tests.support.waits import until

pytestmark = pytest.mark.anyio

WAIT = 30.0
MiB = 1024 * 1024
UPSTREAM = "tests.support.upstream_server"
RELAY = "tests.support.relay_server"
ERAS = {"2025": ("legacy", "2025-11-25"), "2026": ("auto", "2026-07-28")}
TRANSPORTS = ("stdio", "http", "sse")
COMBOS = [pytest.param(t, e, id=f"{t}-{e}") for t in TRANSPORTS for e in ERAS]


# -- the upstream processes ------------------------------------------------------------------------


@dataclasses.dataclass
class Upstreams:
    """HTTP and SSE servers this test started (port 0, reported in a port file); killed and
    reaped at the end. stdio servers belong to the connection that spawned them."""

    tmp: Path
    procs: list[subprocess.Popen[bytes]] = dataclasses.field(default_factory=list)

    async def spec(self, transport: str, module: str, *args: str) -> SourceSpec:
        if transport == "stdio":
            command = {"kind": "stdio", "command": sys.executable, "args": ["-m", module, *args], "cwd": str(REPO_ROOT)}
            return SourceSpec(name="up", transport=command)
        n = len(self.procs)
        pid_file, port_file = self.tmp / f"up-{n}.pid", self.tmp / f"up-{n}.port"
        argv = [sys.executable, "-m", module, "--transport", transport, "--port", "0", "--port-file", str(port_file)]
        proc = self._spawn([*argv, "--pid-file", str(pid_file), *args])
        await wait_for_file(pid_file, timeout_s=2 * WAIT, proc=proc)  # the port file is written first
        port = int(port_file.read_text())
        path = "sse" if transport == "sse" else "mcp"
        return SourceSpec(name="up", transport={"kind": transport, "url": f"http://127.0.0.1:{port}/{path}"})

    def _spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[Upstreams]:
    ups = Upstreams(tmp_path)
    try:
        yield ups
    finally:
        ups.close()


class AnsweringPeer:
    """The downstream side, as the front door would be: answers sampling, elicitation and roots,
    records log records; ``hold`` makes sampling wait until cancelled (recorded)."""

    def __init__(self, *, hold: bool = False) -> None:
        self.hold = hold
        self.requests: list[str] = []
        self.cancelled: list[str] = []
        self.logs: list[Any] = []
        self.asked = anyio.Event()

    async def on_request(self, conn: UpstreamConnection, request: Any, request_id: Any) -> PeerAnswer | types.ErrorData:
        return answer_for(request, self)

    async def on_log(self, conn: UpstreamConnection, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params.data)

    async def on_notification(self, conn: UpstreamConnection, notification: Any) -> None:
        return None


def answer_for(request: Any, peer: AnsweringPeer | None = None) -> Any:
    """What the downstream client answers each server→client request with."""
    if isinstance(request, types.CreateMessageRequest):
        text = request.params.messages[0].content
        prompt = text.text if isinstance(text, types.TextContent) else "?"
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=f"echo: {prompt}"), model="m-1"
        )
    if isinstance(request, types.ElicitRequest):
        return types.ElicitResult(action="accept", content={"name": "alice"})
    if isinstance(request, types.ListRootsRequest):
        return types.ListRootsResult(roots=[types.Root(uri="file:///work/a", name="a")])
    raise AssertionError(f"unexpected request {request!r}")


class HoldingPeer(AnsweringPeer):
    async def on_request(self, conn: UpstreamConnection, request: Any, request_id: Any) -> PeerAnswer | types.ErrorData:
        self.requests.append(type(request).__name__)
        self.asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.append(type(request).__name__)  # cancelled: the upstream gave up
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def connected(
    spec: SourceSpec, era: str, *, peer: AnsweringPeer | None = None, bounds: Bounds | None = None
) -> AsyncIterator[tuple[UpstreamReader, UpstreamConnection]]:
    switch = PeerSwitch()
    if peer is not None:
        switch.attach(peer)
    mode = ERAS[era][0]
    async with UpstreamReader(mode=mode, health_interval_s=None, peer=switch, bounds=bounds) as reader:
        with anyio.fail_after(WAIT):
            conn = await reader.open(spec)
        assert conn.protocol_version == ERAS[era][1]
        try:
            yield reader, conn
        finally:
            await conn.aclose()


def call(name: str, arguments: dict[str, Any], **extra: Any) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments, **extra))


def dump(model: Any) -> Any:
    return scrub(model.model_dump(mode="json", by_alias=True, exclude_none=True))


# -- requests, progress, protocol errors: the SDK as the oracle -------------------------------------

ORACLE_ARGS = ("--tools", ",".join(f"t{i}" for i in range(7)), "--page-size", "3", "--noisy")
ORACLE_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("t1", {"x": "1", "nested": {"a": [1, 2.5, None, "ü"]}}),
    ("big", {"bytes": 300_000}),
    ("big", {"bytes": 100_000, "blocks": 500}),
    ("fail_result", {"text": "no"}),
)


async def through_ours(conn: UpstreamConnection) -> list[Any]:
    out: list[Any] = [conn.protocol_version]
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await conn.send(types.ListToolsRequest(params=params), types.ListToolsResult, timeout_s=WAIT)
        out.append(dump(page))
        if not (cursor := page.next_cursor):
            break
    for name, args in ORACLE_CALLS:
        out.append(dump(await conn.send(call(name, args), types.CallToolResult, timeout_s=WAIT)))
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    result = await conn.send(call("progress", {"n": 5}), types.CallToolResult, WAIT, on_progress)
    out += [dump(result), progress]
    try:
        await conn.send(call("fail_protocol", {"text": "bad"}), types.CallToolResult, timeout_s=WAIT)
    except MCPError as exc:
        out.append((exc.error.code, exc.error.message.split(" (pid")[0]))
    return out


async def through_the_sdk(spec: SourceSpec, mode: str) -> list[Any]:
    transport = spec.transport
    async with contextlib.AsyncExitStack() as stack:
        if transport["kind"] == "stdio":
            errlog = stack.enter_context(open("/dev/null", "w"))  # noqa: ASYNC230, SIM115 - never blocks
            target: Any = stdio_client(stdio_parameters(transport), errlog=errlog)
        elif transport["kind"] == "http":
            http = await stack.enter_async_context(mcp_http_client())
            target = streamable_http_client(transport["url"], http_client=http)
        else:
            target = sse_client(transport["url"])
        client = await stack.enter_async_context(Client(target, mode=mode))
        out: list[Any] = [client.protocol_version]
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            out.append(dump(page))
            if not (cursor := page.next_cursor):
                break
        for name, args in ORACLE_CALLS:
            out.append(dump(await client.call_tool(name, args)))
        progress: list[tuple[float, float | None, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, total, message))

        out += [dump(await client.call_tool("progress", {"n": 5}, progress_callback=on_progress)), progress]
        try:
            await client.call_tool("fail_protocol", {"text": "bad"})
        except MCPError as exc:
            out.append((exc.error.code, exc.error.message.split(" (pid")[0]))
        return out


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_the_sdk_client_and_our_connection_give_equal_json(
    transport: str, era: str, upstreams: Upstreams
) -> None:
    spec = await upstreams.spec(transport, UPSTREAM, *ORACLE_ARGS)
    with anyio.fail_after(3 * WAIT):
        async with connected(spec, era) as (_reader, conn):
            ours = await through_ours(conn)
        theirs = await through_the_sdk(spec, ERAS[era][0])
    assert ours[0] == theirs[0] == ERAS[era][1]
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"step {i} differs"
    assert ours[-2] == [(float(i), 5.0, f"step {i}") for i in range(1, 6)]  # progress, in order
    assert ours[-1] == (-32000, "bad")


# -- server→client requests and notifications -------------------------------------------------------

SERVER_ASKS = (
    ("sample", {"prompt": "hi"}, {"sampled": "echo: hi", "model": "m-1"}),
    ("elicit", {"message": "your name?", "mode": "form"}, {"action": "accept", "content": {"name": "alice"}}),
    ("roots", {}, {"roots": ["file:///work/a"]}),
)


async def answered(conn: UpstreamConnection, request: types.CallToolRequest) -> types.CallToolResult:
    """``request`` sent as the front door sends it: a 2026-era ``InputRequiredResult`` is
    answered (:func:`answer_for`) and the request retried with the answers and the state."""
    either = TypeAdapter(types.CallToolResult | types.InputRequiredResult)
    current = await conn.send(request, either, timeout_s=WAIT)
    rounds = 0
    while isinstance(current, types.InputRequiredResult):
        rounds += 1
        assert rounds <= 3, "the upstream kept asking"
        responses = {key: answer_for(req) for key, req in (current.input_requests or {}).items()}
        retry = request.params.model_copy(update={"input_responses": responses, "request_state": current.request_state})
        current = await conn.send(types.CallToolRequest(params=retry), either, timeout_s=WAIT)
    assert isinstance(current, types.CallToolResult)
    return current


def payload(result: types.CallToolResult) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, types.TextContent), result
    data: dict[str, Any] = json.loads(block.text)
    return data


@pytest.mark.parametrize(("transport", "era"), COMBOS)
@pytest.mark.parametrize(("tool", "args", "expected"), SERVER_ASKS, ids=[a[0] for a in SERVER_ASKS])
async def test_server_to_client_requests_are_answered(
    transport: str, era: str, tool: str, args: dict[str, Any], expected: dict[str, Any], upstreams: Upstreams
) -> None:
    spec = await upstreams.spec(transport, RELAY)
    peer = AnsweringPeer()
    async with connected(spec, era, peer=peer) as (_reader, conn):
        result = payload(await answered(conn, call(tool, args)))
    assert {k: result.get(k) for k in expected} == expected, result


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_log_notifications_reach_the_peer_in_order(transport: str, era: str, upstreams: Upstreams) -> None:
    spec = await upstreams.spec(transport, RELAY)
    peer = AnsweringPeer()
    async with connected(spec, era, peer=peer) as (_reader, conn):
        # A 2026-era request opts in to records by its _meta (a 2025-era server sends them anyway).
        opt_in = types.CallToolRequestParams.model_validate(
            {"name": "log", "arguments": {"n": 5, "who": "w"}, "_meta": {"io.modelcontextprotocol/logLevel": "debug"}}
        )
        result = payload(await answered(conn, types.CallToolRequest(params=opt_in)))
        assert result == {"logged": 5}
        await until(lambda: len(peer.logs) >= 5, what="notifications are handled in their own tasks", timeout_s=WAIT)
    assert peer.logs == [f"w {i}" for i in range(5)]


# -- cancellation, both ways --------------------------------------------------------------------


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_a_caller_that_gives_up_cancels_the_upstreams_work(
    transport: str, era: str, upstreams: Upstreams, tmp_path: Path
) -> None:
    spec = await upstreams.spec(transport, UPSTREAM, "--tools", "a")
    marker, cancelled = tmp_path / "running", tmp_path / "cancelled"
    async with connected(spec, era) as (_reader, conn):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def blocked() -> None:
                    await conn.send(
                        call("block", {"marker": str(marker), "cancelled": str(cancelled)}), types.CallToolResult
                    )

                tg.start_soon(blocked)
                await until(marker.exists, what="the upstream to run the call")  # another process
                tg.cancel_scope.cancel()
            await until(cancelled.exists, what="the upstream to observe the cancellation")
        assert payload(await conn.send(call("a", {}), types.CallToolResult, timeout_s=WAIT))["tool"] == "a"


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_an_upstream_that_gives_up_on_its_request_cancels_the_answer(
    transport: str, era: str, upstreams: Upstreams, request: pytest.FixtureRequest
) -> None:
    if era == "2026":
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="the 2026-07-28 era has no server→client requests to cancel: an upstream asks with an "
                "InputRequiredResult and simply never sees the retry",
            )
        )
    spec = await upstreams.spec(transport, RELAY)
    peer = HoldingPeer()
    async with connected(spec, era, peer=peer) as (_reader, conn):
        result = payload(
            await conn.send(call("sample", {"prompt": "hi", "timeout_s": 0.5}), types.CallToolResult, WAIT)
        )
        assert "error" in result, result  # the upstream gave up on us
        await until(lambda: peer.cancelled, what="the upstream to cancel its sampling request", timeout_s=WAIT)
    assert peer.requests == peer.cancelled == ["CreateMessageRequest"]


# -- bounds: the exact error and diagnostic --------------------------------------------------------


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_an_answer_over_the_message_bound_fails_with_the_bounds_error(
    transport: str, era: str, upstreams: Upstreams
) -> None:
    spec = await upstreams.spec(transport, UPSTREAM, "--tools", "a", "--noisy")
    bounds = dataclasses.replace(Bounds(), upstream_message_bytes=1 * MiB)
    async with connected(spec, era, bounds=bounds) as (_reader, conn):
        with pytest.raises(MessageBoundError) as caught:
            await conn.send(call("big", {"bytes": 2 * MiB}), types.CallToolResult, timeout_s=WAIT)
        err = caught.value
        assert err.error == bound_error(MESSAGE_BOUND_KEY, 1 * MiB, err.size)
        assert err.error.message == (
            f"the upstream's answer is larger than limits.upstream_message_bytes ({MiB} bytes; refused at "
            f"{err.size} bytes): ask for less, or raise gateway.limits.upstream_message_bytes"
        )
        assert MiB < err.size <= MiB + 512 * 1024
        # The connection serves on (stdio: read on from the next newline).
        assert payload(await conn.send(call("a", {}), types.CallToolResult, timeout_s=WAIT))["tool"] == "a"


@pytest.mark.parametrize(("transport", "era"), COMBOS)
async def test_a_list_past_the_entry_bound_fails_with_the_bounds_diagnostic(
    transport: str, era: str, upstreams: Upstreams, tmp_path: Path
) -> None:
    names = tmp_path / "tools.json"
    names.write_text(json.dumps([f"tool_{i}" for i in range(3_000)]))
    spec = await upstreams.spec(transport, UPSTREAM, "--tools-file", str(names), "--page-size", "3000")
    bounds = dataclasses.replace(Bounds(), entries_per_generation=1_000)
    switch = PeerSwitch()
    async with UpstreamReader(mode=ERAS[era][0], health_interval_s=None, peer=switch, bounds=bounds) as reader:
        with anyio.fail_after(WAIT), pytest.raises(SourceReadError) as caught:
            await reader.read(spec, None, inputs_digest="-")
    assert caught.value.reason == "listing refused while reading: a page passed entries_per_generation (1000 entries)"
    assert caught.value.cause_kind == "bound_exceeded"


# -- resumption and the resend rule (ADR 0019, ADR 0037) -------------------------------------------
# Only a 2025-11-25 streamable-HTTP session has streams that resume (an event store upstream,
# ``Last-Event-ID``): stdio and SSE have one stream for the connection's life, and a 2026-07-28
# request's stream is its own (closing it is the request's cancellation).


async def test_a_response_stream_dropped_mid_call_is_resumed_and_the_request_not_sent_again(
    upstreams: Upstreams,
) -> None:
    spec = await upstreams.spec("http", UPSTREAM, "--resumable")
    peer = AnsweringPeer()
    async with connected(spec, "2025", peer=peer) as (_reader, conn):
        with anyio.fail_after(WAIT):
            result = payload(await conn.send(call("drop_call", {}), types.CallToolResult, timeout_s=WAIT))
            assert result["runs"] == 1  # the stream was resumed (GET + Last-Event-ID), never re-POSTed
            # Sent while no stream was open: replayed on resumption.
            await until(lambda: "after drop" in peer.logs, what="the replayed log message")
            assert payload(await conn.send(call("drop_call", {}), types.CallToolResult, timeout_s=WAIT))["runs"] == 2


async def test_the_sessions_get_stream_dropped_is_resumed_with_last_event_id(upstreams: Upstreams) -> None:
    spec = await upstreams.spec("http", UPSTREAM, "--resumable")
    async with connected(spec, "2025") as (_reader, conn):
        seen: list[str] = []
        conn.on_resource_updated(lambda _conn, uri: seen.append(uri))
        with anyio.fail_after(WAIT):
            # The GET stream is open once a notification sent on it arrives.
            n = 0
            while not seen:
                n += 1
                await conn.send(call("drop_get", {"uri": f"mem://ready/{n}", "drop": False}), types.CallToolResult)
                with anyio.move_on_after(0.5):  # this one was sent before the stream was open: try another
                    await until(lambda: bool(seen), what="a notification on the GET stream")
            # Dropped, then the event is sent while no GET stream is open: only a resumption from
            # the last event id the gateway saw replays it.
            await conn.send(call("drop_get", {"uri": "mem://after-drop"}), types.CallToolResult, timeout_s=WAIT)
            await until(lambda: "mem://after-drop" in seen, what="the replayed resource update")


# -- upstream OAuth: the source's own client-credentials token, renewed once on 401 -----------------

OAUTH_SECRET = "gw-contract-s3cret-77"
OAUTH_COMBOS = [pytest.param(t, e, id=f"{t}-{e}") for t in ("http", "sse") for e in ERAS]


@pytest.mark.parametrize(("transport", "era"), OAUTH_COMBOS)
async def test_an_oauth_upstream_sees_the_sources_token_renewed_once_on_401(transport: str, era: str) -> None:
    from tests.support.authz_server import authz_server
    from tests.support.protected_mcp import protected_mcp_server

    async with authz_server() as az, protected_mcp_server(az, transport=transport) as ps:  # type: ignore[arg-type]
        az.add_client("gateway", OAUTH_SECRET)
        oauth = {
            "token_url": az.token_url,
            "client_id": "gateway",
            "client_secret": OAUTH_SECRET,
            "scopes": ["mcp"],
            "resource": ps.url,
        }
        spec = SourceSpec(name="up", transport={"kind": transport, "url": ps.url, "oauth": oauth})
        async with connected(spec, era) as (_reader, conn):
            with anyio.fail_after(WAIT):
                await conn.send(call("echo", {"x": "1"}), types.CallToolResult, timeout_s=WAIT)
                assert len(az.issued) == 1
                assert ps.authorizations and all(a == f"Bearer {az.issued[0]}" for a in ps.authorizations)
                ps.revoked.add(az.issued[0])  # revoked early: the next request is refused with 401
                await conn.send(call("echo", {"x": "2"}), types.CallToolResult, timeout_s=WAIT)
                assert len(az.issued) == 2  # renewed once, and the refused request sent again with it
                assert ps.authorizations[-1] == f"Bearer {az.issued[1]}"
        assert [c for c in ps.server.calls if c[0] == "echo"] == [("echo", {"x": "1"}), ("echo", {"x": "2"})]
