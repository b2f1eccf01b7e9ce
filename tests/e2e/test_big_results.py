"""Big upstream results through a served gateway, every upstream transport (ADR 0040): a 30 MB
result is delivered whole while ``/healthz`` keeps answering, a 50 or 100 MB one is refused at
``limits.upstream_message_bytes`` with the exact error, and a call whose client leaves is
cancelled upstream.

Transports: stdio, and streamable HTTP answering in the 2025-11-25 era (a server that refuses
``server/discover``: the gateway falls back to the handshake) and in the 2026-07-28 era; clients
in both eras. While the answer is parsed and re-encoded, a probe on the gateway's loop
(``tests/support/loop_probe.py``) records the longest stretch of the gateway's own CPU between
two turns of it, and ``/healthz`` is asked back to back from a process of its own. Bounds are
loose (a busy 2-core CI machine), never timings."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import MCPError

from tests.e2e.test_upstream_bounds import HEALTHZ_S, WAIT, cpu_s, measured, served
from tests.integration.conftest import HttpUpstreams
from tests.integration.conftest import http_upstreams as http_upstreams  # the fixture, for these tests
from tests.support.waits import until

pytestmark = pytest.mark.anyio

#: Whether ``serve`` still answers ``/mcp`` with the SDK-based plane, whose one serialization of
#: a 30 MB result holds the loop 115-300 ms: issue 26's switch to ``api/plane`` deletes
#: ``api/sdk_compat.py`` with it (ADR 0035). Until then the 30 MB test is skipped; from then on it
#: runs (and this marker can go).

MiB = 1024 * 1024
ATTEMPTS = 3
TRANSPORTS = ["stdio", "http-2025", "http-2026"]


@contextlib.asynccontextmanager
async def upstream(transport: str, http_upstreams: HttpUpstreams) -> AsyncIterator[dict[str, Any] | None]:
    """The gateway's source: ``None`` for the default stdio test upstream, else an HTTP one."""
    if transport == "stdio":
        yield None
        return
    era = ("--era", "legacy") if transport == "http-2025" else ()
    _proc, port = await http_upstreams.start("--tools", "a", "--noisy", *era)
    yield {"http": {"url": f"http://127.0.0.1:{port}/mcp"}}


async def loop_figures(gw: Any, probe: Path) -> dict[str, float]:
    """The served gateway's loop since the last call (``tests/support/loop_probe.py``)."""
    await anyio.Path(probe).unlink(missing_ok=True)
    gw.process.send_signal(signal.SIGUSR1)
    await wait_for_file(probe)
    return dict(json.loads(await anyio.Path(probe).read_text()))


async def wait_for_file(path: Path) -> None:
    """Until another process has created ``path`` (a marker: it may stay empty)."""
    await until(path.exists, what=f"{path} to be created", timeout_s=WAIT)


@pytest.mark.parametrize(
    ("transport", "client_era"),
    [("stdio", "legacy"), ("stdio", "auto"), ("http-2025", "legacy"), ("http-2026", "auto")],
)
async def test_a_30_MB_result_is_delivered_whole_while_healthz_answers(
    tmp_path: Path, http_upstreams: HttpUpstreams, transport: str, client_era: str
) -> None:
    # Loose (CI, 2 cores; ADR 0040 measured 30-52 ms of the loop's own CPU at a time, and
    # 115-339 ms for one json.loads/json.dumps of the whole answer before): the gateway's own CPU
    # between two turns of its loop, then /healthz from another process, which also waits for
    # whatever else the machine runs. A busy machine only ever adds to both (the stretch read
    # 144 ms and /healthz 970 ms at load 12): an attempt over a bound is made again, up to
    # ATTEMPTS in all, each on a gateway and upstream of its own (the first big answer in a
    # process is the costly one: a second on the same gateway hid a whole-string decode), and
    # the last is judged; a gateway that holds its loop does so in every attempt.
    for attempt in range(ATTEMPTS):
        here = tmp_path / str(attempt)
        here.mkdir()
        probe = here / "loop.json"
        async with (
            upstream(transport, http_upstreams) as source,
            served(here, source=source, mode=client_era, probe=probe) as (gw, client),
        ):
            await loop_figures(gw, probe)  # from here
            outcome, cpu, health = await measured(gw, client, 30_000_000)
            loop = await loop_figures(gw, probe)
            assert isinstance(outcome, types.CallToolResult) and not outcome.is_error, outcome
            (content,) = outcome.content
            assert isinstance(content, types.TextContent) and content.text == "x" * 30_000_000
        print(
            f"30 MB {transport} → {client_era}: {cpu:.2f} s CPU, /healthz worst {health.worst * 1000:.0f} ms,"
            f" the loop's own longest stretch {loop['own_max_ms']:.0f} ms"
        )
        assert health.count >= 1 and loop["ticks"] > 10
        if loop["own_max_ms"] < 80 and health.worst < HEALTHZ_S:
            break
    assert loop["own_max_ms"] < 80, f"the gateway held its loop for {loop['own_max_ms']:.0f} ms of its own CPU"
    assert health.worst < HEALTHZ_S, f"/healthz took up to {health.worst:.3f} s"
    assert cpu < 5.0, f"{cpu:.2f} s of gateway CPU"


@pytest.mark.parametrize("size_mb", [50, 100])
@pytest.mark.parametrize("transport", ["http-2025", "http-2026"])
async def test_an_http_result_over_the_bound_is_refused_with_the_exact_error(
    tmp_path: Path, http_upstreams: HttpUpstreams, transport: str, size_mb: int
) -> None:
    """Stdio's 50/100 MB: ``test_upstream_bounds.test_an_oversized_answer_is_refused``."""
    async with upstream(transport, http_upstreams) as source, served(tmp_path, source=source) as (gw, client):
        outcome, cpu, health = await measured(gw, client, size_mb * 1_000_000)
        assert isinstance(outcome, MCPError), outcome
        limit, size = 32 * MiB, outcome.error.data["size"]
        assert outcome.error.code == -32020
        assert outcome.error.message == (
            f"the upstream's answer is larger than limits.upstream_message_bytes ({limit} bytes; "
            f"refused at {size} bytes): ask for less, or raise gateway.limits.upstream_message_bytes"
        )
        assert limit < size <= limit + 1 * MiB
        assert not (await client.call_tool("up__a", {})).is_error  # the source keeps serving
        print(f"{size_mb} MB {transport} refused: {cpu:.2f} s CPU, /healthz worst {health.worst * 1000:.0f} ms")
        assert cpu < 5.0 and health.worst < HEALTHZ_S


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_abandoned_call_is_cancelled_upstream(
    tmp_path: Path, http_upstreams: HttpUpstreams, transport: str
) -> None:
    """The client gives up while the upstream runs the call: the upstream observes the
    cancellation (``notifications/cancelled``; on the 2026 wire, its stream closed), and the
    gateway's CPU goes back to idle."""
    async with upstream(transport, http_upstreams) as source, served(tmp_path, source=source) as (gw, client):
        marker, cancelled = tmp_path / "in-flight", tmp_path / "cancelled"
        async with anyio.create_task_group() as tg:

            async def blocked() -> None:
                await client.call_tool("up__block", {"marker": str(marker), "cancelled": str(cancelled)})

            tg.start_soon(blocked)
            await wait_for_file(marker)  # the upstream is running it
            tg.cancel_scope.cancel()  # the client gives up
        await wait_for_file(cancelled)  # ... and the upstream is told
        with anyio.fail_after(WAIT):
            while True:  # idle: under 5 % of a core over a quarter second
                before = cpu_s(gw.pid)
                await anyio.sleep(0.25)  # a CPU reading needs a window
                if cpu_s(gw.pid) - before < 0.0125:
                    break
        assert not (await client.call_tool("up__a", {})).is_error
