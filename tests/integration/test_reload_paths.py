"""I15, walked end to end: every reload/restart path in ADR 0005's table, against one served
gateway process (``mcp-reconciler serve``), in the table's order.

The table's rows are parsed from ``adr/0005-reload-and-restart-paths.md``: a row without a step
here fails, and so does a step without a row. For each path the test triggers it the way the
table says (a config edit, an invalid edit, a watched file, an upstream ``list_changed``, a killed
upstream, an operator refresh, a poll, SIGHUP, SIGTERM), waits for its effect, and then checks:

- the gateway is still the process the test started (same pid, alive, answering), and its
  revision never went backwards (a gateway that re-exec'd itself would start over at 1, and
  would respawn every upstream);
- exactly the upstream processes the step names were replaced (new pid) and every other one
  kept its pid — the processes are the gateway's children, read from ``/proc``;
- the ADR's "processes touched" column agrees: "none" exactly where the step replaces none.

Sources: ``notes`` (the demo's snapshot server, ``watch`` on its data dir), ``clock`` (the demo's
clock, ``poll_seconds: 1``) and ``up`` (``tests.support.upstream_server``, whose ``set_tools``
announces ``list_changed``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_reconciler.sdk.http_client import mcp_http_client
from tests.api.conftest import backdate
from tests.integration.conftest import REPO_ROOT, SERVER_MODULE
from tests.support.gateway_process import GatewayProcess, alive, cmdline, gateway_process, stop
from tests.support.waits import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ADR = REPO_ROOT / "adr" / "0005-reload-and-restart-paths.md"
TOKEN = "i15-operator-token-0123456789"
SESSION_TOKENS = {"I15_SESSION_TOKEN": "i15-session-token-0123456789", "I15_EXTRA_TOKEN": "i15-extra-token-0123456789"}
WAIT = 45.0
SOURCES = ("notes", "clock", "up")
_PROCESS_OF = {"notes_server.py": "notes", "clock_server.py": "clock", SERVER_MODULE: "up"}


def adr_rows() -> dict[str, str]:
    """ADR 0005's table: path name → its "processes touched" cell."""
    rows: dict[str, str] = {}
    lines = [line for line in ADR.read_text().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == ["path", "trigger", "what happens", "processes touched"], header
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].replace("`", "")] = cells[3]
    return rows


def config(tmp: Path, *, edition: int, valid: bool = True) -> str:
    """The gateway config (JSON is YAML); ``edition`` is part of notes' spec (its env)."""
    examples = REPO_ROOT / "examples" / "upstreams"
    sources: list[dict[str, Any]] = [
        {
            "name": "notes",
            "stdio": {
                "command": "python",
                "args": [str(examples / "notes_server.py"), "--data", "data"],
                "env": {"NOTES_EDITION": str(edition)},
            },
            "watch": ["data/*.yml"],
        },
        {
            "name": "clock",
            "stdio": {"command": "python", "args": [str(examples / "clock_server.py")]},
            "poll_seconds": 1,
        },
        {
            "name": "up",
            "stdio": {"command": "python", "args": ["-m", SERVER_MODULE, "--tools", "a,b"], "cwd": str(REPO_ROOT)},
        },
    ]
    if not valid:
        sources.append({"name": "broken", "stdio": {"args": []}})  # no command: invalid
    # /mcp needs a credential (I16): the walk's MCP client uses a session declared in the config.
    session = {"name": "walk", "token": "${I15_SESSION_TOKEN}", "grant_policy": "current"}
    return json.dumps({"gateway": {"cooldown_s": 0.05}, "sources": sources, "sessions": [session]})


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    """A legacy-era MCP client on ``url`` with a session token."""
    async with mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            yield client


@dataclass
class Walk:
    """The served gateway and what the walk has seen of it."""

    gw: GatewayProcess
    http: httpx2.AsyncClient
    tmp: Path
    cfg: Path
    revisions: list[int] = field(default_factory=list)

    def upstreams(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {s: [] for s in SOURCES}
        gateway = cmdline(self.gw.pid)
        for pid, cmd in self.gw.upstreams().items():
            if not cmd or cmd == gateway:
                continue  # exited between the listing and the read, or forked and not yet exec'd
            source = next((s for marker, s in _PROCESS_OF.items() if marker in cmd), None)
            assert source is not None, f"an unexpected child of the gateway: {pid} {cmd}"
            out[source].append(pid)
        return out

    async def settled(self, before: dict[str, int], replaced: set[str]) -> dict[str, int]:
        """Wait (bounded) for one live process per source, the ``replaced`` ones new."""
        now: dict[str, int] = {}

        def settled() -> bool:
            procs = self.upstreams()
            if not all(len(pids) == 1 for pids in procs.values()):
                return False
            now.update({s: pids[0] for s, pids in procs.items()})
            return all(now[s] != before[s] for s in replaced)

        await until(
            settled,
            what=lambda: f"upstreams to settle ({replaced} replaced): {self.upstreams()}",
            timeout_s=WAIT,
            every_s=0.05,
        )
        return now

    async def status(self) -> dict[str, Any]:
        res = await self.http.get("/v1/status")
        assert res.status_code == 200, res.text
        body: dict[str, Any] = res.json()
        return body

    async def until(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """Poll the control API (bounded) until ``predicate(status)``: engine state the test does not drive."""
        st: dict[str, Any] = {}

        async def holds() -> bool:
            st.clear()
            st.update(await self.status())
            return predicate(st)

        await until(holds, what=lambda: f"{what}: {st}", timeout_s=WAIT, every_s=0.05)
        return st

    def write_config(self, text: str) -> None:
        self.cfg.write_text(text)


# -- the steps, one per row of the ADR's table ------------------------------------------------------
# Each performs its path and waits for the effect; returns the sources whose process it replaces.


async def config_reload(w: Walk) -> set[str]:
    w.write_config(config(w.tmp, edition=2))  # notes' spec changed (env); clock and up did not
    await w.until(lambda st: st["config_error"] is None and "config" not in st["dirty"], "the reload")
    return {"notes"}


async def invalid_config_edit(w: Walk) -> set[str]:
    good = w.cfg.read_text()
    w.write_config(config(w.tmp, edition=99, valid=False))
    st = await w.until(lambda st: st["config_error"] is not None, "config_error")
    assert st["state"] == "error" and "sources[3]" in st["config_error"], st
    assert [s["name"] for s in st["sources"]] == list(SOURCES)  # the last good config keeps serving
    w.write_config(good)  # the fix: back to the last good config, nothing to respawn
    await w.until(lambda st: st["config_error"] is None and st["state"] == "ready", "recovery")
    return set()


async def config_declared_sessions(w: Walk) -> set[str]:
    doc = json.loads(w.cfg.read_text())  # the same sources: only the sessions change
    doc["sessions"].append({"name": "extra", "token": "${I15_EXTRA_TOKEN}", "grant_policy": "none"})
    w.write_config(json.dumps(doc))
    await w.until(lambda st: "config" not in st["dirty"] and st["sessions"] == 2, "the declared session")
    listed = (await w.http.get("/v1/sessions")).json()["sessions"]
    assert {s["id"] for s in listed} == {"cfg-walk", "cfg-extra"}, listed
    async with mcp_client(w.gw.url, SESSION_TOKENS["I15_EXTRA_TOKEN"]) as client:
        assert (await client.list_tools()).tools == []  # grant_policy none: it works, and sees nothing
    return set()


async def watched_inputs_changed(w: Walk) -> set[str]:
    (w.tmp / "data" / "third.yml").write_text("title: third\n")
    await w.until(lambda st: "notes" not in (st["inputs_changed_since_build"] or []), "the respawn")
    return {"notes"}


async def upstream_list_changed(w: Walk) -> set[str]:
    before = (await w.status())["entries"]
    async with mcp_client(w.gw.url, SESSION_TOKENS["I15_SESSION_TOKEN"]) as client:
        await client.call_tool("up__set_tools", {"names": ["a", "b", "c"]})  # announces list_changed
    await w.until(lambda st: st["entries"] == before + 1, "the re-list on the same connection")
    return set()


async def upstream_death(w: Walk) -> set[str]:
    (pid,) = w.upstreams()["up"]
    os.kill(pid, signal.SIGKILL)
    return {"up"}  # settled() waits for the throttled reconnect's new process


async def operator_refresh(w: Walk) -> set[str]:
    res = await w.http.post("/v1/refresh", json={"wait": True, "timeout_s": WAIT})
    assert res.status_code == 200 and res.json()["cycle_status"] in ("published", "unchanged"), res.text
    return set()


async def poll(w: Walk) -> set[str]:
    def clock_ok_at(st: dict[str, Any]) -> float:
        return float(next(s["last_ok_at"] for s in st["sources"] if s["name"] == "clock"))

    since = clock_ok_at(await w.status())
    await w.until(lambda st: clock_ok_at(st) > since, "a poll of clock (poll_seconds: 1)")
    return set()


async def sighup(w: Walk) -> set[str]:
    w.write_config(config(w.tmp, edition=3))
    mark = len(w.gw.lines)
    w.gw.process.send_signal(signal.SIGHUP)
    await w.gw.wait_line(r"SIGHUP: reload cycle \w+, revision \d+", after=mark, timeout_s=WAIT)
    await w.until(lambda st: st["config_error"] is None and "config" not in st["dirty"], "the reload")
    return {"notes"}  # as a config reload (the watcher may have seen the edit first: same outcome)


STEPS: dict[str, Callable[[Walk], Awaitable[set[str]]]] = {
    "config reload": config_reload,
    "invalid config edit": invalid_config_edit,
    "config-declared sessions": config_declared_sessions,
    "watched inputs changed": watched_inputs_changed,
    "upstream list_changed": upstream_list_changed,
    "upstream death": upstream_death,
    "operator refresh": operator_refresh,
    "poll": poll,
    "SIGHUP": sighup,
    # "shutdown" is the walk's last step, below: it ends the process.
}


async def test_I15_every_reload_path_in_adr_0005(tmp_path: Path) -> None:
    rows = adr_rows()
    assert list(rows) == [*STEPS, "shutdown"], "ADR 0005's table and this walk must list the same paths"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "first.yml").write_text("title: first\n")
    cfg = tmp_path / "gateway.yaml"
    cfg.write_text(config(tmp_path, edition=1))
    backdate(cfg)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    env["MCP_RECONCILER_OPERATOR_TOKENS"] = TOKEN
    env.update(SESSION_TOKENS)
    serve = [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"]
    async with gateway_process(serve, cwd=REPO_ROOT, env=env) as gw:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(base_url=gw.base_url, headers=headers, timeout=WAIT) as http:
            walk = Walk(gw, http, tmp_path, cfg)
            pids = await walk.settled({s: 0 for s in SOURCES}, set(SOURCES))
            walk.revisions.append((await walk.status())["revision"])
            for path, step in STEPS.items():
                replaced = await step(walk)
                now = await walk.settled(pids, replaced)
                kept = {s for s in SOURCES if s not in replaced}
                assert {s: now[s] for s in kept} == {s: pids[s] for s in kept}, f"{path}: replaced more than {replaced}"
                adr_none = re.match(r"none\b", rows[path]) is not None
                assert adr_none == (not replaced), f"{path}: ADR 0005 says {rows[path]!r}; the step replaced {replaced}"
                assert gw.process.returncode is None and alive(gw.pid), f"{path}: the gateway process is gone"
                revision = (await walk.status())["revision"]
                assert revision >= walk.revisions[-1], f"{path}: revision went back to {revision} (a new process?)"
                walk.revisions.append(revision)
                pids = now

            # shutdown: SIGTERM; every upstream is stopped by its owner, the gateway exits.
            code = await stop(gw.process, signal.SIGTERM)
            assert code in (0, -signal.SIGTERM), gw.describe()  # uvicorn re-raises the signal after its graceful exit
            assert not any("Traceback" in line for line in gw.stderr), gw.describe()
            await until(
                lambda: not [p for p in pids.values() if alive(p)],
                what="every upstream process gone after SIGTERM",
                timeout_s=WAIT,
            )
    assert walk.revisions[-1] > walk.revisions[0]
