"""Big upstream answers through a served gateway (ADR 0025), as a client sees them.

A real ``mcp-reconciler serve`` process, a real stdio upstream that answers with 30, 50 and
100 MB, and a real MCP client over streamable HTTP. Asserted loosely (bounds, not timings): the
gateway's CPU for each answer (``/proc/<pid>/stat``), its peak RSS (``VmHWM``), the slowest
``/healthz`` answer meanwhile, and the exact error the client gets for an answer over
``limits.upstream_message_bytes``. A broken wire too: a stdio line with no newline, garbage
between stdio messages and between SSE events (``tests/support/broken_http.py``), an SSE event
that never ends — each with what the client sees."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from anyio.streams.text import TextReceiveStream
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.reconciler.peer_contract import MESSAGE_BOUND_KEY, bound_error
from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE
from tests.support.gateway_process import gateway_process
from tests.support.readme import block
from tests.support.waits import file_text, until

pytestmark = pytest.mark.anyio

WAIT = 60.0
TOKEN = "bounds-session-token-0123456789"
OPERATOR = "bounds-operator-token-0123456789"
MiB = 1024 * 1024
#: What a client's call gets when its upstream connection was lost under it (the gateway's own words).
LOST_UPSTREAM = (-32015, "upstream unavailable; retry later")


def config(
    message_bytes: int | None,
    upstream_args: tuple[str, ...] = ("--tools", "a", "--noisy"),
    source: dict[str, Any] | None = None,
) -> str:
    """The served gateway's config: one source ``up``, by default the stdio test upstream."""
    limits = {"upstream_message_bytes": message_bytes} if message_bytes is not None else {}
    stdio = {"command": "python", "args": ["-m", SERVER_MODULE, *upstream_args], "cwd": str(REPO_ROOT)}
    return json.dumps(
        {
            "gateway": {"cooldown_s": 0.05, "limits": limits},
            "sessions": [{"name": "c", "token": "${BOUNDS_TOKEN}", "grant_policy": "current"}],
            "sources": [{"name": "up", **(source or {"stdio": stdio})}],
        }
    )


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@contextlib.asynccontextmanager
async def served(
    tmp: Path,
    message_bytes: int | None = None,
    source: dict[str, Any] | None = None,
    tool: str = "up__big",
    mode: str = "legacy",
    probe: Path | None = None,
) -> AsyncIterator[tuple[Any, Client]]:
    """A served gateway and a client of it (``mode``: the client's era). With ``probe`` (a stats
    file), ``serve`` runs under ``tests/support/loop_probe.py``: :func:`loop_figures` reads its loop."""
    cfg = tmp / "gateway.yaml"
    cfg.write_text(config(message_bytes, source=source))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    env["BOUNDS_TOKEN"] = TOKEN
    serve = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    if probe is not None:
        serve = [sys.executable, "-m", "tests.support.loop_probe", "--config", str(cfg)]
        serve += ["--port-file", str(tmp / "gateway.port"), "--stats-file", str(probe)]
    async with gateway_process(serve, cwd=REPO_ROOT, env=env) as gw:
        async with (
            mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            Client(streamable_http_client(gw.url, http_client=http, max_sse_event_size=64 * MiB), mode=mode) as client,
        ):
            with anyio.fail_after(WAIT):
                while tool not in {t.name for t in (await client.list_tools()).tools}:
                    await anyio.sleep(0.05)  # the first cycle runs in the served process
            yield gw, client


async def call_big(client: Client, size: int) -> types.CallToolResult:
    with anyio.fail_after(WAIT):
        return await client.call_tool("up__big", {"bytes": size})


#: ``/healthz`` asked back to back from a process of its own (the test's client parses the big
#: answer on its own event loop: a probe there would time the client, not the gateway). It
#: stops when its stdin closes and prints the slowest answer in seconds and how many it made.
PROBE = """
import http.client, sys, threading, time
host, port = sys.argv[1], int(sys.argv[2])
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
conn = http.client.HTTPConnection(host, port, timeout=30)
worst, count = 0.0, 0
print("ready", flush=True)
while not done.is_set():
    started = time.perf_counter()
    conn.request("GET", "/healthz")
    res = conn.getresponse()
    res.read()
    assert res.status == 200, res.status
    worst, count = max(worst, time.perf_counter() - started), count + 1
    done.wait(0.02)
print(worst, count, flush=True)
"""


@dataclass
class Health:
    worst: float = 0.0
    count: int = 0


@contextlib.asynccontextmanager
async def healthz_probe(gw: Any) -> AsyncIterator[Health]:
    """The probe runs while the block does; the yielded figures are filled in when it ends."""
    health = Health()
    host, port = gw.base_url.removeprefix("http://").rsplit(":", 1)
    probe = await anyio.open_process([sys.executable, "-c", PROBE, host, port])
    assert probe.stdin is not None and probe.stdout is not None
    async with probe:
        lines = TextReceiveStream(probe.stdout)
        with anyio.fail_after(WAIT):
            assert (await lines.receive()).strip() == "ready"
        yield health
        await probe.stdin.aclose()
        with anyio.fail_after(WAIT):
            out = "".join([chunk async for chunk in lines])
            assert await probe.wait() == 0, out
    worst, count = out.split()
    health.worst, health.count = float(worst), int(count)


#: /healthz's worst answer time is wall time, which a busy machine stretches (970 ms at load 12).
HEALTHZ_S = 1.0


async def measured(gw: Any, client: Client, size: int) -> tuple[Any, float, Health]:
    async with healthz_probe(gw) as health:
        before = cpu_s(gw.pid)
        outcome: Any
        try:
            outcome = await call_big(client, size)
        except MCPError as exc:
            outcome = exc
        spent = cpu_s(gw.pid) - before
    return outcome, spent, health


@pytest.mark.parametrize("size_mb", [50, 100])
async def test_an_oversized_answer_is_refused(tmp_path: Path, size_mb: int) -> None:
    async with served(tmp_path) as (gw, client):
        outcome, cpu, health = await measured(gw, client, size_mb * 1_000_000)
        assert isinstance(outcome, MCPError), outcome
        limit = 32 * MiB
        assert outcome.error.code == -32020
        size = outcome.error.data["size"]
        assert outcome.error.message == (
            f"the upstream's answer is larger than limits.upstream_message_bytes ({limit} bytes; "
            f"refused at {size} bytes): ask for less, or raise gateway.limits.upstream_message_bytes"
        )
        assert {k: v for k, v in outcome.error.data.items() if k not in ("revision", "size")} == {
            "code": "upstream_message_too_large",
            "retryable": False,
            "bound": "limits.upstream_message_bytes",
            "limit": limit,
        }
        assert limit < size <= limit + 1 * MiB
        # The README shows this error (its sizes are an example's).
        shown = json.loads(block("upstream-message-error").text)
        assert shown["code"] == outcome.error.code and set(shown["data"]) == set(outcome.error.data)
        assert shown["message"] == bound_error(MESSAGE_BOUND_KEY, shown["data"]["limit"], shown["data"]["size"]).message
        assert {k: v for k, v in shown["data"].items() if k not in ("revision", "size")} == {
            k: v for k, v in outcome.error.data.items() if k not in ("revision", "size")
        }
        # The connection recovered: the next call is answered on it.
        assert not (await client.call_tool("up__a", {})).is_error
        # Loose bounds for a busy 2-core machine (the SDK's reader: 22.5 s CPU, /healthz 0.6-1.5 s, 720 MiB).
        assert cpu < 5.0, f"{cpu:.2f} s of gateway CPU"
        print(f"{size_mb} MB refused: {cpu:.2f} s CPU, /healthz worst {health.worst * 1000:.0f} ms of {health.count}")
        assert health.worst < 1.0, f"/healthz took up to {health.worst:.3f} s"
        assert peak_rss_mib(gw.pid) < 400, f"peak RSS {peak_rss_mib(gw.pid):.0f} MiB"


async def test_a_30_MB_answer_is_delivered(tmp_path: Path) -> None:
    async with served(tmp_path) as (gw, client):
        outcome, cpu, health = await measured(gw, client, 30_000_000)
        assert isinstance(outcome, types.CallToolResult) and not outcome.is_error
        content = outcome.content[0]
        assert isinstance(content, types.TextContent) and len(content.text) == 30_000_000
        assert cpu < 8.0, f"{cpu:.2f} s of gateway CPU"
        assert health.worst < 1.0, f"/healthz took up to {health.worst:.3f} s"
        print(
            f"30 MB through the gateway: {cpu:.2f} s CPU, /healthz worst {health.worst * 1000:.0f} ms of {health.count}"
        )


async def test_an_abandoned_call_is_cancelled_upstream_and_the_gateway_goes_idle(tmp_path: Path) -> None:
    """A client that gives up on a call: the upstream observes the cancellation (its marker),
    and a client that gives up on a 100 MB answer leaves the gateway idle again within seconds of
    its own CPU (the SDK's reader kept it busy for 84 s). The bound is raised so the answer is read, not refused."""
    async with served(tmp_path, message_bytes=256 * MiB) as (gw, client):
        marker, cancelled = tmp_path / "in-flight", tmp_path / "cancelled"
        with anyio.move_on_after(WAIT) as scope:
            async with anyio.create_task_group() as tg:

                async def blocked() -> None:
                    await client.call_tool("up__block", {"marker": str(marker), "cancelled": str(cancelled)})

                tg.start_soon(blocked)
                await until(marker.exists, what="the upstream to run the call")  # an external process
                tg.cancel_scope.cancel()  # the client gives up
            await until(cancelled.exists, what="the upstream to be told")
        assert not scope.cancelled_caught, "the upstream never observed the cancellation"

        with anyio.move_on_after(0.5) as gave_up:  # give up on a 100 MB answer while it is being sent
            await client.call_tool("up__big", {"bytes": 100_000_000})
        assert gave_up.cancelled_caught
        abandoned, cpu_abandoned = anyio.current_time(), cpu_s(gw.pid)
        with anyio.fail_after(WAIT):
            while True:  # idle: under 5 % of a core over a half-second window
                before = cpu_s(gw.pid)
                await anyio.sleep(0.5)  # a CPU reading needs a window of time: the measure, not a wait
                if cpu_s(gw.pid) - before < 0.025:
                    break
        idle_after = anyio.current_time() - abandoned
        # What the gateway did after the client left, in its own CPU seconds (a busy box stretches
        # the wall time of the same work, not its CPU); the SDK's reader spent ~84 s here.
        busy_cpu = cpu_s(gw.pid) - cpu_abandoned
        assert busy_cpu < 5.0, f"the gateway spent {busy_cpu:.1f} s of CPU after the client left"
        assert not (await client.call_tool("up__a", {})).is_error  # and it still serves the source
        print(f"idle {idle_after:.2f} s ({busy_cpu:.2f} s of CPU) after abandoning a 100 MB answer")


async def test_a_100000_tool_upstream_is_refused_while_read_and_keeps_the_gateway_responsive(tmp_path: Path) -> None:
    """One page of 100,000 tools (bound: 10,000 entries): each listing attempt fails with the
    bound named, the gateway's peak RSS stays bounded and /healthz answers meanwhile (the whole
    list used to be read, parsed and validated first: /healthz stalled up to 4.8 s, 527 MiB)."""
    names = tmp_path / "tools.json"
    names.write_text(json.dumps([f"tool_{i}" for i in range(100_000)]))
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(config(None, ("--tools-file", str(names), "--page-size", "100000")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    env.update(BOUNDS_TOKEN=TOKEN, MCP_RECONCILER_OPERATOR_TOKENS=OPERATOR)
    serve = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    async with (
        gateway_process(serve, cwd=REPO_ROOT, env=env) as gw,
        httpx2.AsyncClient(base_url=gw.base_url, headers={"Authorization": f"Bearer {OPERATOR}"}, timeout=WAIT) as http,
    ):

        async def source() -> dict[str, Any]:
            body = (await http.get("/v1/status")).json()
            return next(s for s in body["sources"] if s["name"] == "up")

        with anyio.fail_after(2 * WAIT):
            while (first := await source())["last_error"] is None:  # the served process's own cycle
                await anyio.sleep(0.1)  # another process's state, read from its control API
            async with healthz_probe(gw) as health:
                started = anyio.current_time()
                while (now := await source())["consecutive_failures"] <= first["consecutive_failures"]:
                    await anyio.sleep(0.1)  # one more attempt (a new upstream process) while probed
                took = anyio.current_time() - started
        expected = "listing refused while reading: a page passed entries_per_generation (10000 entries)"
        assert first["last_error"] == now["last_error"] == expected
        assert now["state"] == "failed" and now["entries"] == 0
        rss = peak_rss_mib(gw.pid)
        assert rss < 400, f"peak RSS {rss:.0f} MiB"
        assert health.worst < 1.0, f"/healthz took up to {health.worst:.3f} s"
        print(
            f"100,000 tools: diagnosed in {took:.1f} s, /healthz worst {health.worst * 1000:.0f} ms,"
            f" peak RSS {rss:.0f} MiB"
        )


# -- a broken wire: a line with no newline, garbage between messages, an SSE event that never ends --


@contextlib.asynccontextmanager
async def broken_http(tmp: Path) -> AsyncIterator[str]:
    """``tests.support.broken_http`` (port 0, reported in its port file): its ``/mcp`` URL."""
    port_file, pid_file = tmp / "broken.port", tmp / "broken.pid"
    argv = [
        sys.executable,
        "-m",
        "tests.support.broken_http",
        "--port-file",
        str(port_file),
        "--pid-file",
        str(pid_file),
    ]
    proc = await anyio.open_process(argv, cwd=REPO_ROOT, stdin=None, stdout=None, stderr=None)
    async with proc:
        try:
            await file_text(pid_file, writer_exit=lambda: proc.returncode, timeout_s=WAIT)
            yield f"http://127.0.0.1:{int(await anyio.Path(port_file).read_text())}/mcp"
        finally:
            proc.kill()


async def outcome_of(client: Client, tool: str, args: dict[str, Any]) -> types.CallToolResult | MCPError:
    with anyio.fail_after(WAIT):
        try:
            return await client.call_tool(tool, args)
        except MCPError as exc:
            return exc


async def test_a_stdio_line_with_no_newline_fails_the_call_and_the_source_reconnects(tmp_path: Path) -> None:
    """A line past the bound whose first bytes name no request cannot be attributed: the
    connection is recycled, and the client's call fails with the gateway's own words for a lost
    upstream (never the upstream's bytes); the next call is served by a new connection."""
    async with served(tmp_path, message_bytes=1 * MiB) as (_gw, client):
        outcome = await outcome_of(client, "up__noline", {"bytes": 2 * MiB})
        assert isinstance(outcome, MCPError), outcome
        assert (outcome.error.code, outcome.error.message) == LOST_UPSTREAM, outcome.error
        assert outcome.error.data == {"revision": 1, "code": "upstream_unavailable", "retryable": True}
        with anyio.fail_after(WAIT):
            while isinstance(again := await outcome_of(client, "up__a", {}), MCPError):
                await anyio.sleep(0.1)  # the source reconnects on its own (I8)
        assert not again.is_error


async def test_garbage_between_stdio_messages_is_skipped_and_the_call_answered(tmp_path: Path) -> None:
    async with served(tmp_path) as (_gw, client):
        outcome = await outcome_of(client, "up__garbage", {"n": 5})
        assert isinstance(outcome, types.CallToolResult) and not outcome.is_error, outcome
        content = outcome.content[0]
        assert isinstance(content, types.TextContent) and json.loads(content.text)["garbage"] == 5
        assert not (await client.call_tool("up__a", {})).is_error


async def test_garbage_between_http_messages_is_skipped_and_the_call_answered(tmp_path: Path) -> None:
    async with (
        broken_http(tmp_path) as url,
        served(tmp_path, source={"http": {"url": url}}, tool="up__ok") as (_gw, client),
    ):
        outcome = await outcome_of(client, "up__garbage", {"n": 5})
        assert isinstance(outcome, types.CallToolResult) and not outcome.is_error, outcome
        content = outcome.content[0]
        assert isinstance(content, types.TextContent) and json.loads(content.text) == {"garbage": 5}
        assert not (await client.call_tool("up__ok", {})).is_error


async def test_an_sse_event_that_never_ends_is_refused_at_the_bound(tmp_path: Path) -> None:
    source = {"http": {"url": ""}}
    async with broken_http(tmp_path) as url:
        source["http"]["url"] = url
        async with served(tmp_path, message_bytes=1 * MiB, source=source, tool="up__ok") as (gw, client):
            before = cpu_s(gw.pid)
            outcome = await outcome_of(client, "up__endless", {"bytes": 4 * MiB})
            cpu = cpu_s(gw.pid) - before
            assert isinstance(outcome, MCPError), outcome
            size = outcome.error.data["size"]
            assert outcome.error.code == -32020
            assert outcome.error.message == (
                f"the upstream's answer is larger than limits.upstream_message_bytes ({MiB} bytes; "
                f"refused at {size} bytes): ask for less, or raise gateway.limits.upstream_message_bytes"
            )
            assert MiB < size <= MiB + 256 * 1024
            assert cpu < 5.0, f"{cpu:.2f} s of gateway CPU"
            assert not (await client.call_tool("up__ok", {})).is_error  # the source serves on
