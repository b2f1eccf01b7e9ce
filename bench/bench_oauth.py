"""Authentication cost per request: OAuth access tokens (JWT) vs static and session tokens, down
to the cost per call through the gateway's real, wired HTTP edge.

Run from the repo root:  python bench/bench_oauth.py [--quick] [--json PATH]

Set-up: the test suite's local authorization server (``tests/support/authz_server.py``) on
127.0.0.1 issues RS256 tokens. Rounds of every case are interleaved (call by call in parts 2-3)
so drift (frequency scaling, other processes on the shared box) hits all alike.

1. **Per authentication** (ns per call; median and p99 over rounds of N calls each), a
   ``ResourceServer`` alone, informative:
   - ``static: Authenticator.authenticate`` — the ``/v1`` static-token lookup (sync), the baseline;
   - ``static: ResourceServer.require`` — the same static token through the resource server;
   - ``jwt (warm): ResourceServer.require`` — a JWT whose validation is cached;
   - ``jwt (warm): ResourceServer.cached`` — the sync cache probe alone;
   - ``jwt (cold): full validation`` — signature and claims, every call a new token (what a cache
     miss costs).
2. **Per MCP call through the gateway** (the target's level): ``serve_http`` on a config with an
   ``oauth:`` section and one stdio upstream; ``tools/call`` round trips on ``/mcp`` with a session
   token (the static credential of ``/mcp``) vs an access token, in both protocol eras. Median and
   p99 latency and the ratio. Target: JWT <= 1.05x per call.
3. **Per ``/v1`` request**: ``GET /v1/sessions`` with a static operator token vs an operator
   access token (the ``/v1`` OAuth guard in front of the handler).
4. **JWKS fetches under load**: 16 concurrent clients, each request with a token never seen
   before (a full validation every time), for several JWKS refresh intervals (1 s here): the
   issuer sees at most one fetch per interval; parts 2-3 cause none (target: 0).

Benchmarks print figures; they never assert."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import socket
import sys
import tempfile
import time
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from _stats import dump_json, environment, json_out_path, summary, verdict  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from mcp_reconciler.api.auth import Authenticator  # noqa: E402
from mcp_reconciler.api.oauth import ResourceServer  # noqa: E402
from mcp_reconciler.api.server import serve_http  # noqa: E402
from mcp_reconciler.reconciler.authority import GrantPolicy  # noqa: E402
from mcp_reconciler.reconciler.oauth_config import OAuthConfig  # noqa: E402
from mcp_reconciler.sdk.http_client import mcp_http_client  # noqa: E402
from tests.support.authz_server import authz_server  # noqa: E402

STATIC = "static-operator-token-0123456789abcdef"
TARGET_RATIO = 1.05
JWKS_REFRESH_S = 1.0  # short, so the load phase spans several refresh intervals


async def micro(rs: ResourceServer, static: Authenticator, jwt_header: str, mint: Any, quick: bool) -> dict[str, Any]:
    n, rounds = (2_000, 11) if quick else (20_000, 31)
    cold_n = 50 if quick else 200
    static_header = f"Bearer {STATIC}"
    await rs.require(jwt_header, "operator")  # warm
    await rs.require(static_header, "operator")

    def static_lookup() -> None:
        auth = static.authenticate
        for _ in range(n):
            auth(static_header)

    async def rs_static() -> None:
        require = rs.require
        for _ in range(n):
            await require(static_header, "operator")

    async def rs_jwt() -> None:
        require = rs.require
        for _ in range(n):
            await require(jwt_header, "operator")

    def jwt_cached() -> None:
        cached = rs.cached
        for _ in range(n):
            cached(jwt_header)

    cases: dict[str, Any] = {
        "static: Authenticator.authenticate": static_lookup,
        "static: ResourceServer.require": rs_static,
        "jwt (warm): ResourceServer.require": rs_jwt,
        "jwt (warm): ResourceServer.cached": jwt_cached,
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in cases.items():
                start = time.perf_counter_ns()
                result = fn()
                if result is not None:
                    await result
                samples[name].append((time.perf_counter_ns() - start) / n)
    finally:
        gc.enable()
    # Cold: a fresh token per call (signature + claims + identity; keys already cached).
    tokens = [f"Bearer {mint(f'cold-{i}')}" for i in range(cold_n)]
    cold: list[float] = []
    for header in tokens:
        start = time.perf_counter_ns()
        await rs.require(header, "operator")
        cold.append(float(time.perf_counter_ns() - start))
    samples["jwt (cold): full validation"] = cold
    return {name: summary(xs) for name, xs in samples.items()}


def _config(tmp: str, port: int, issuer: str) -> str:
    """The gateway's config: one stdio upstream (the test suite's), an ``oauth:`` section whose
    resource is this gateway's ``/mcp`` URL, JWKS refreshed every ``JWKS_REFRESH_S``."""
    doc = {
        "gateway": {"cooldown_s": 0.05},
        "sources": [
            {
                "name": "up",
                "stdio": {
                    "command": "python",
                    "args": ["-m", "tests.support.upstream_server", "--tools", "echo"],
                    "cwd": REPO_ROOT,
                },
            }
        ],
        "oauth": {
            "resource": f"http://127.0.0.1:{port}/mcp",
            "issuers": [{"issuer": issuer}],
            "roles": {"required_scopes": ["mcp"], "operator_scopes": ["mcp:admin"]},
            "jwks": {"refresh_interval_s": JWKS_REFRESH_S, "min_refetch_interval_s": JWKS_REFRESH_S},
        },
    }
    path = os.path.join(tmp, "gateway.yaml")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


async def wired(az: Any, quick: bool) -> dict[str, Any]:
    """Parts 2-4 against a real gateway (``serve_http`` with the ``oauth:`` section)."""
    calls, rounds = (30, 5) if quick else (100, 9)
    v1_n = 200 if quick else 1000
    load_s = 2.5 if quick else 5.0
    with tempfile.TemporaryDirectory() as tmp:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))  # bound before the config names the gateway's own URL; served as is
        cfg = _config(tmp, sock.getsockname()[1], az.issuer)
        async with serve_http(cfg, authenticator=Authenticator([STATIC], {}), listen_socket=sock) as served:
            az.audience = served.url
            engine = served.gateway.engine
            live = engine.current
            session = engine.sessions.create(
                "owner::bench", live.generation if live is not None else None, policy=GrantPolicy.CURRENT
            )
            jwt = az.mint("bench", scope="mcp mcp:admin", exp_in=3600)
            tokens = {"session": session.token, "jwt": jwt}
            async with httpx2.AsyncClient() as http:  # the first validation fetches the keys
                r = await http.get(served.base_url + "/v1/sessions", headers={"Authorization": f"Bearer {jwt}"})
                assert r.status_code == 200, r.text
            fetches_before = az.jwks_fetches

            # 2. tools/call through /mcp, per era, alternating call by call.
            per_call: dict[str, list[float]] = {}
            async with contextlib.AsyncExitStack() as stack:
                clients: list[tuple[str, Any]] = []
                for mode in ("legacy", "auto"):
                    for kind, token in tokens.items():
                        http = await stack.enter_async_context(
                            mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                        )
                        client = await stack.enter_async_context(
                            Client(streamable_http_client(served.url, http_client=http), mode=mode)
                        )
                        for _ in range(10):
                            await client.call_tool("up__echo", {"x": "warm"})
                        clients.append((f"{mode}/{kind}", client))
                        per_call[f"{mode}/{kind}"] = []
                for i in range(rounds * calls):
                    for name, client in clients if i % 2 == 0 else clients[::-1]:
                        start = time.perf_counter_ns()
                        await client.call_tool("up__echo", {"x": "1"})
                        per_call[name].append((time.perf_counter_ns() - start) / 1e6)

            # 3. /v1: a static operator token vs an operator access token.
            v1: dict[str, list[float]] = {"static": [], "jwt": []}
            url = served.base_url + "/v1/sessions"
            async with httpx2.AsyncClient() as http:
                headers = {"static": {"Authorization": f"Bearer {STATIC}"}, "jwt": {"Authorization": f"Bearer {jwt}"}}
                for kind in v1:
                    assert (await http.get(url, headers=headers[kind])).status_code == 200
                for i in range(v1_n):
                    for kind in ("static", "jwt") if i % 2 == 0 else ("jwt", "static"):
                        start = time.perf_counter_ns()
                        await http.get(url, headers=headers[kind])
                        v1[kind].append((time.perf_counter_ns() - start) / 1e6)

            # 4. Load: concurrent requests, each with a token never seen before (a full
            # validation every time), for longer than the JWKS refresh interval.
            fetches_steady = az.jwks_fetches - fetches_before
            fetches_load_start = az.jwks_fetches
            validated = 0
            refused = 0
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/list",
                "params": {
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    }
                },
            }
            base = {
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json",
                "mcp-protocol-version": "2026-07-28",
                "mcp-method": "tools/list",
            }
            started = time.monotonic()
            async with httpx2.AsyncClient(limits=httpx2.Limits(max_connections=16)) as http:

                async def worker(w: int) -> None:
                    nonlocal validated, refused
                    n = 0
                    while time.monotonic() - started < load_s:
                        n += 1
                        token = az.mint(f"load-{w}-{n}", scope="mcp", exp_in=3600)
                        r = await http.post(served.url, json=body, headers={**base, "Authorization": f"Bearer {token}"})
                        if r.status_code == 200:
                            validated += 1
                        else:
                            refused += 1

                async with anyio.create_task_group() as tg:
                    for w in range(16):
                        tg.start_soon(worker, w)
            elapsed = time.monotonic() - started
            load = {
                "seconds": elapsed,
                "validations": validated,
                "refused": refused,
                "jwks_fetches": az.jwks_fetches - fetches_load_start,
                "refresh_interval_s": JWKS_REFRESH_S,
            }
    return {
        "per_call": {name: summary(xs) for name, xs in per_call.items()},
        "v1": {name: summary(xs) for name, xs in v1.items()},
        "jwks_fetches_steady": fetches_steady,
        "load": load,
    }


async def main(quick: bool) -> dict[str, Any]:
    async with authz_server() as az:
        az.audience = "https://gateway.bench/mcp"
        config = OAuthConfig.model_validate(
            {
                "resource": az.audience,
                "issuers": [{"issuer": az.issuer}],
                "roles": {"required_scopes": ["mcp"], "operator_scopes": ["mcp:admin"]},
            }
        )
        static = Authenticator([STATIC], {})
        async with ResourceServer(config, static) as rs:

            def mint(sub: str) -> str:
                return az.mint(sub, scope="mcp mcp:admin", exp_in=3600)

            jwt_header = f"Bearer {mint('bench-operator')}"
            micro_results = await micro(rs, static, jwt_header, mint, quick)
        wired_results = await wired(az, quick)
    return {"auth": micro_results, **wired_results}


def report(results: dict[str, Any]) -> dict[str, Any]:
    auth = results["auth"]
    base = auth["static: Authenticator.authenticate"]["median"]
    wired_static = auth["static: ResourceServer.require"]["median"]
    print("1. per authentication (ns per call; median / p99 over rounds)")
    for name, s in auth.items():
        print(f"  {name:40s} {s['median']:>10.0f} {s['p99']:>10.0f}   {s['median'] / base:6.2f}x static lookup")
    warm = auth["jwt (warm): ResourceServer.require"]["median"]
    print(f"  jwt warm / static through the resource server: {warm / wired_static:.2f}x")
    calls = results["per_call"]
    print("2. per MCP tools/call through the gateway's /mcp (ms; median / p99): session token vs access token")
    ratios: dict[str, float] = {}
    for mode in ("legacy", "auto"):
        for kind in ("session", "jwt"):
            s = calls[f"{mode}/{kind}"]
            print(f"  {mode + '/' + kind:16s} {s['median']:8.3f} {s['p99']:8.3f}   (n={s['n']})")
        ratios[mode] = calls[f"{mode}/jwt"]["median"] / calls[f"{mode}/session"]["median"]
        p99 = calls[f"{mode}/jwt"]["p99"] / calls[f"{mode}/session"]["p99"]
        ok = verdict(ratios[mode] <= TARGET_RATIO)
        print(f"  {mode}: jwt / session token {ratios[mode]:.3f}x median, {p99:.3f}x p99 (<= {TARGET_RATIO}x: {ok})")
    v1 = results["v1"]
    v1_ratio = v1["jwt"]["median"] / v1["static"]["median"]
    print("3. per GET /v1/sessions (ms; median / p99): static operator token vs operator access token")
    for kind in ("static", "jwt"):
        print(f"  {kind:16s} {v1[kind]['median']:8.3f} {v1[kind]['p99']:8.3f}   (n={v1[kind]['n']})")
    print(f"  jwt / static {v1_ratio:.3f}x median (target <= {TARGET_RATIO}x: {verdict(v1_ratio <= TARGET_RATIO)})")
    load = results["load"]
    bound = int(load["seconds"] / load["refresh_interval_s"]) + 1
    print(
        f"4. load: {load['validations']} full validations ({load['refused']} refused) by 16 concurrent clients in "
        f"{load['seconds']:.1f} s; JWKS fetches {load['jwks_fetches']} (refresh interval "
        f"{load['refresh_interval_s']:g} s: at most {bound}: {verdict(load['jwks_fetches'] <= bound)}); "
        f"during parts 2-3: {results['jwks_fetches_steady']} (target 0: keys were fetched once before)"
    )
    return {
        **results,
        "ratio_per_call_median": ratios,
        "ratio_v1_median": v1_ratio,
        "ratio_auth_vs_static_lookup": warm / base,
        "ratio_auth_vs_static_wired": warm / wired_static,
        "target_ratio": TARGET_RATIO,
        "environment": environment(),
    }


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    out = report(anyio.run(main, quick))
    path = json_out_path(sys.argv)
    if path:
        dump_json(path, out)
