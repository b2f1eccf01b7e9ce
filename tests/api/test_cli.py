"""The operator CLI (``python -m mcp_reconciler.api.cli ...``) as subprocesses against a served gateway, with
the exit codes ``api/operator_cli.py`` documents: 0 success/ready · 1 API error (bad token,
not found) · 2 usage · 3 unreachable · 4 not ready · 5 refresh cycle failed/timed out;
``check-config``: 0 valid, 1 invalid (with file:line on stderr)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest

from tests.api.conftest import OPERATOR_TOKEN, REPO_ROOT, WAIT, backdate, served_gateway, upstream_source, write_config
from tests.support.ports import refusing_port

pytestmark = pytest.mark.anyio

CLI_TIMEOUT_S = 30.0


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> object:
        return json.loads(self.out)


async def cli(*args: str, url: str | None = None, token: str | None = None) -> Run:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    if url is not None:
        env["MCP_RECONCILER_URL"] = url
    if token is not None:
        env["MCP_RECONCILER_TOKEN"] = token
    with anyio.fail_after(CLI_TIMEOUT_S):
        proc = await anyio.run_process(
            [sys.executable, "-m", "mcp_reconciler.api.cli", *args], cwd=REPO_ROOT, env=env, check=False
        )
    return Run(proc.returncode, proc.stdout.decode(), proc.stderr.decode())


async def cli_all(calls: Sequence[tuple[Sequence[str], dict[str, str | None]]]) -> list[Run]:
    """Run several CLI invocations concurrently, two per core at a time (the gateway serves them
    all on this loop)."""
    results: list[Run | None] = [None] * len(calls)
    # Two per core at a time: each CLI process's CLI_TIMEOUT_S then bounds about its own run, not
    # the whole batch's (19 interpreters started at once on 2 cores each took as long as all of
    # them, and timed out on a busy box), while one's wait on the gateway overlaps another's start.
    limiter = anyio.CapacityLimiter(2 * (os.cpu_count() or 1))

    async def one(i: int, args: Sequence[str], kw: dict[str, str | None]) -> None:
        async with limiter:
            results[i] = await cli(*args, **kw)

    async with anyio.create_task_group() as tg:
        for i, (args, kw) in enumerate(calls):
            tg.start_soon(one, i, args, kw)
    return [r for r in results if r is not None]


async def test_operator_commands_and_exit_codes(tmp_path: Path) -> None:
    cfg = write_config(tmp_path)
    async with served_gateway(cfg) as served, contextlib.AsyncExitStack() as ports:
        url, rev = served.base_url, served.gateway.rec.runtime.current_revision
        closed = ports.enter_context(refusing_port())  # bound, not listening, while the commands run
        ok = {"url": url, "token": OPERATOR_TOKEN}
        session = served.front.authority.create("owner::alice", None)
        commands = ("status", "refresh", "sources", "generations", "sessions")
        runs = await cli_all(
            [((c,), ok) for c in commands]
            + [((c, "--json"), ok) for c in commands]
            + [
                (("refresh", "--no-wait", "--json"), ok),
                (("refresh", "--source", "up", "--json"), ok),
                (("refresh", "--source", "nope"), ok),
                (("status",), {"url": url, "token": "wrong-token"}),
                (("status", "--json"), {"url": url, "token": None}),
                (("sources",), {"url": f"http://127.0.0.1:{closed}", "token": OPERATOR_TOKEN}),
                (("refresh",), {"url": f"http://127.0.0.1:{closed}", "token": OPERATOR_TOKEN}),
                (("status", "--bogus-flag"), ok),
                (("status", "--url", url, "--token", OPERATOR_TOKEN, "--json"), {}),
            ]
        )
        human, as_json, rest = runs[:5], runs[5:10], runs[10:]

        for c, r in zip(commands, human, strict=True):
            assert r.code == 0, (c, r)
            assert r.out.strip(), c
            assert OPERATOR_TOKEN not in r.out + r.err
        assert "state       ready" in human[0].out and f"revision    {rev}" in human[0].out
        assert "SOURCE" in human[0].out and "up" in human[2].out and "REVISION" in human[3].out
        assert "SESSION" in human[4].out and session.id in human[4].out and "alice" in human[4].out
        assert "cycle " in human[1].out and f"revision {rev}" in human[1].out

        st, refresh, sources, gens, sessions = (r.json() for r in as_json)
        assert all(r.code == 0 for r in as_json), as_json
        assert isinstance(st, dict) and st["state"] == "ready" and st["revision"] == rev
        assert isinstance(refresh, dict) and refresh["cycle_status"] in ("unchanged", "published")
        assert isinstance(sources, list) and [s["name"] for s in sources] == ["up"]
        assert isinstance(gens, dict) and gens["current"] == rev
        assert isinstance(sessions, list) and [s["id"] for s in sessions] == [session.id]

        no_wait, one_source, unknown, bad_token, no_token, unreachable, unreachable_refresh, usage, flags = rest
        assert no_wait.code == 0 and set(no_wait.json()) == {"ticket", "revision"}  # type: ignore[arg-type]
        assert one_source.code == 0 and one_source.json()["cycle"] > 0  # type: ignore[index]
        assert unknown.code == 1 and "404" in unknown.err and "unknown_source" in unknown.err
        assert bad_token.code == 1 and "401" in bad_token.err and "MCP_RECONCILER_TOKEN" in bad_token.err
        assert "wrong-token" not in bad_token.err + bad_token.out
        assert no_token.code == 1 and no_token.out == ""
        assert unreachable.code == 3 and "cannot reach" in unreachable.err
        assert unreachable_refresh.code == 3 and "cannot reach" in unreachable_refresh.err
        for r in rest:
            assert "Traceback" not in r.err, r
        assert usage.code == 2
        assert flags.code == 0 and flags.json()["revision"] == rev  # type: ignore[index]


async def test_status_exit_codes_agree_with_readyz(tmp_path: Path) -> None:
    """Issue 28, ADR 0027: ``status`` exits 0 whenever ``/readyz`` answers 200 -- degraded and
    config-error states serve -- and 4 exactly when it answers 503; ``--strict`` exits 6 when
    serving but not everything is well."""
    cfg = write_config(
        tmp_path, sources=[upstream_source("up", "a"), {"name": "dead", "stdio": {"command": "no-such-x"}}]
    )
    async with served_gateway(cfg) as served:
        env = {"url": served.base_url, "token": OPERATOR_TOKEN}
        async with httpx2.AsyncClient(base_url=served.base_url) as http:
            # Commands that read the same state run at once (a Python start each is most of the time).
            degraded, strict = await cli_all([(("status",), env), (("status", "--strict"), env)])
            assert (await http.get("/readyz")).status_code == 200
            assert degraded.code == 0 and "state       degraded" in degraded.out, degraded
            assert strict.code == 6, strict

            cfg.write_text("sources: [\n")  # invalid: the last good config keeps serving
            backdate(cfg)
            await served.gateway.engine.refresh()
            assert (await http.get("/readyz")).status_code == 200
            r, j, strict = await cli_all(
                [(("status",), env), (("status", "--json"), env), (("status", "--strict"), env)]
            )
            assert r.code == 0, r
            assert "state       error" in r.out and "CONFIG ERROR" in r.out and "gateway.yaml:" in r.out
            assert "condition   config_invalid (last_good_config_serving)" in r.out  # typed, and printed
            assert j.code == 0 and json.loads(j.out)["config_error"]
            assert strict.code == 6, strict

            await served.gateway.engine.aclose()  # shutting down: HTTP still answers, nothing serves
            assert (await http.get("/readyz")).status_code == 503
            closed = await cli("status", **env)
            assert closed.code == 4, closed


async def test_refresh_timeout_exit_5(tmp_path: Path) -> None:
    # The first cycle ran at startup; with a 600 s cooldown the next cannot answer within 0.3 s
    # (5 s was not enough on a box at load 20: the CLI took longer than that to start, and its
    # refresh found the cooldown over).
    cfg = write_config(tmp_path, gateway={"cooldown_s": 600.0})
    async with served_gateway(cfg) as served:
        r = await cli("refresh", "--timeout", "0.3", url=served.base_url, token=OPERATOR_TOKEN)
        assert r.code == 5, r
        assert "refresh_timeout" not in r.out and "no reconcile cycle finished" in r.err
        assert "Traceback" not in r.err


async def test_check_config(tmp_path: Path) -> None:
    good = write_config(tmp_path, name="good.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: up\n    stdio: {command: python}\n  - name: 'bad name!'\n    stdio: {}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("sources:\n  - name: up\n    stdio: {command: python\n")
    with anyio.fail_after(WAIT * 2):
        ok, invalid, syntax, missing = await cli_all(
            [(("check-config", str(p)), {}) for p in (good, bad, broken, tmp_path / "absent.yaml")]
        )
    assert ok.code == 0 and "valid" in ok.out and "1 source(s): up" in ok.out, ok
    assert invalid.code == 1 and f"{bad}:4:" in invalid.err, invalid
    assert syntax.code == 1 and f"{broken}:" in syntax.err and "YAML" in syntax.err, syntax
    assert missing.code == 1 and "absent.yaml" in missing.err, missing


async def _serve_output(cfg: Path) -> str:
    """What ``serve`` prints at startup (up to its "SIGHUP reloads the config" line); the process is stopped
    with SIGINT afterwards, like an operator would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    lines: list[str] = []
    async with await anyio.open_process(
        [sys.executable, "-m", "mcp_reconciler.api.cli", "serve", "--config", str(cfg), "--port", "0"],
        cwd=REPO_ROOT,
        env=env,
    ) as proc:
        try:
            assert proc.stdout is not None
            buffer = b""
            with anyio.fail_after(CLI_TIMEOUT_S):
                async for chunk in proc.stdout:
                    buffer += chunk
                    if b"SIGHUP reloads the config" in buffer:
                        break
            lines = buffer.decode().splitlines()
        finally:
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(CLI_TIMEOUT_S):
                await proc.wait()
    return "\n".join(lines)


async def test_serve_warns_when_anonymous_access_is_on(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "closed").mkdir()
    opened = await _serve_output(write_config(tmp_path / "open", gateway={"anonymous": {"grant_policy": "follow"}}))
    assert "WARNING: anonymous access to /mcp is ON (gateway.anonymous, grant_policy follow)" in opened
    assert "Remove gateway.anonymous to require session tokens" in opened
    closed = await _serve_output(write_config(tmp_path / "closed"))
    assert "anonymous" not in closed
    assert "/mcp requires a session token" in closed
