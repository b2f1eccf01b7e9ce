"""Upstream connections under stress that is not death (issue 10, items 12 and 17; I8).

- A 2026-era listen stream that the upstream ends (its SDK ends a stream whose backlog filled
  up under a ``list_changed`` flood) is "re-list and listen again", never "kill the process": a
  call in flight on that connection completes, the process is not respawned, no revision is
  published for nothing, and changes announced afterwards still arrive.
- A throttled reconnect never overwrites the cause of the failure (``last_error``), and a source
  that is ready again shows no error."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.reconciler.bounds import Bounds
from mcp_reconciler.reconciler.model import SourceSpec, SourceStatus
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE, stdio_spec
from tests.integration.test_upstream_transports import FAST, call, connection, engine, status, tools
from tests.support.waits import until

pytestmark = pytest.mark.anyio
WAIT = 20.0


async def test_a_listen_stream_ended_by_a_flood_is_reopened_not_treated_as_death(tmp_path: Path) -> None:
    spec = stdio_spec("up", "--tools", "a", "--listen-backlog", "4")
    async with engine(spec, bounds=Bounds(cooldown_s=0.05), mode="auto") as (reader, rec, pubs):
        gen = await pubs.wait_for(lambda g: status(g) is SourceStatus.READY)
        conn = connection(gen)
        assert conn.protocol_version is not None and not conn.protocol_version.startswith("2025")
        await until(lambda: conn.listens >= 1, what="the connection to listen", timeout_s=WAIT)
        opened, revision = reader.opened, gen.revision
        marker, release = tmp_path / "in-flight", tmp_path / "release"
        async with anyio.create_task_group() as tg:
            held: dict[str, object] = {}

            async def hold() -> None:
                held["reply"] = await call(rec, "block", {"marker": str(marker), "release": str(release)})

            tg.start_soon(hold)
            await until(lambda: marker.exists(), what="the upstream to run the blocked call", timeout_s=WAIT)
            assert (await call(rec, "flood", {"n": 2000}))["sent"] == 2000  # ends the listen stream upstream
            await until(
                lambda: conn.listens >= 2,
                what="... and the gateway listens again, on the same connection",
                timeout_s=WAIT,
            )
            release.touch()
        assert held["reply"] == {"tool": "block", "released": True, "pid": held["reply"]["pid"]}  # type: ignore[index]
        assert conn.alive and not conn.dead and reader.opened == opened
        await rec.refresh(["up"], timeout_s=WAIT)
        assert rec.runtime.current_revision == revision  # nothing changed: nothing published (I3)
        # Changes announced after the flood still arrive (the new stream carries them).
        await call(rec, "set_tools", {"names": ["a", "b"]})
        gen2 = await pubs.wait_for(lambda g: "up__b" in tools(g))
        assert connection(gen2) is conn


async def test_throttled_reconnects_keep_the_cause_and_ready_clears_it(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    cmd = f"[ -e {gate} ] || exit 3; exec {sys.executable} -m {SERVER_MODULE} --tools a"
    spec = SourceSpec(
        name="up", transport={"kind": "stdio", "command": "/bin/sh", "args": ["-c", cmd], "cwd": str(REPO_ROOT)}
    )
    reader_bounds = Bounds(cooldown_s=0.5, reconnect_backoff_min_s=0.5, reconnect_backoff_max_s=2.0)
    async with engine(spec, bounds=FAST, reader_bounds=reader_bounds) as (reader, rec, pubs):
        await pubs.wait_for(lambda g: status(g) is SourceStatus.FAILED)
        cause = rec.health.get("up").last_error
        assert cause and "throttled" not in cause
        failures = rec.health.get("up").consecutive_failures
        # Reads while the throttle holds: each is held back, none is a failure of its own.
        for _ in range(3):
            await until(lambda: reader.backoff.wait_s("up") > 0.1, what="the reconnect throttle", timeout_s=WAIT)
            await rec.refresh(["up"], timeout_s=WAIT)
        h = rec.health.get("up")
        assert h.last_error == cause, h
        assert h.consecutive_failures <= failures + 1, h  # at most the one real attempt in between
        state = rec.runtime.current.generation.source_state("up")  # type: ignore[union-attr]
        assert state is not None and "throttled" not in (state.error or "")
        gate.touch()
        await pubs.wait_for(lambda g: status(g) is SourceStatus.READY, timeout_s=WAIT)
        h = rec.health.get("up")
        assert h.status == "ready" and h.last_error is None and h.last_error_at is None
        assert h.consecutive_failures == 0
