"""Authentication cost per request: JWT access tokens (warm cache) vs static tokens.

Run from the repo root:  python bench/bench_oauth.py [--quick] [--json PATH]

Set-up: the test suite's local authorization server (``tests/support/authz_server.py``) on
127.0.0.1 issues RS256 tokens; a ``ResourceServer`` trusts it and also knows the static tokens
of an ``api/auth.py`` ``Authenticator``. Part 1 and 2 run in one event loop, rounds of every
case interleaved so drift (frequency scaling, other processes on the shared box) hits all alike.

1. **Per authentication** (ns per call; median and p99 over rounds of N calls each):
   - ``static: Authenticator.authenticate`` — today's ``/v1`` lookup (sync), the baseline;
   - ``static: ResourceServer.require`` — the same static token through the resource server
     (what ``/v1`` and ``/mcp`` will call once wired; async, the token cache answers);
   - ``jwt (warm): ResourceServer.require`` — a JWT whose validation is cached;
   - ``jwt (warm): ResourceServer.cached`` — the sync cache probe alone;
   - ``jwt (cold): full validation`` — signature and claims, every call a new token (what a cache
     miss costs; informative).
2. **Per MCP call** (the target's level): ``tools/call`` round trips through a ``BearerGuard`` in
   front of an SDK MCP server over streamable HTTP, with a static token vs a JWT, alternating call
   by call;
   median and p99 latency and the ratio. Target: JWT <= 1.05x static per call. The JWKS fetch count
   over the whole run is printed too (target: once, i.e. once per refresh interval).

Benchmarks print figures; they never assert."""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import anyio  # noqa: E402
from _stats import dump_json, environment, json_out_path, summary, verdict  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Route  # noqa: E402

from mcp_reconciler.api.auth import Authenticator  # noqa: E402
from mcp_reconciler.api.oauth import BearerGuard, ResourceServer  # noqa: E402
from mcp_reconciler.reconciler.oauth_config import OAuthConfig  # noqa: E402
from tests.support.authz_server import authz_server, listening_socket, serve_app  # noqa: E402
from tests.support.servers import DynamicServer  # noqa: E402

STATIC = "static-operator-token-0123456789abcdef"
TARGET_RATIO = 1.05


class _Asgi:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


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


async def per_call(rs: ResourceServer, jwt_header: str, quick: bool) -> dict[str, Any]:
    calls, rounds = (30, 5) if quick else (100, 9)
    dynamic = DynamicServer("bench", ["echo"])
    manager = StreamableHTTPSessionManager(app=dynamic.server, stateless=False)
    sock = listening_socket()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    app = Starlette(routes=[Route("/mcp", endpoint=_Asgi(BearerGuard(manager.handle_request, rs, "mcp")))])
    samples: dict[str, list[float]] = {"static": [], "jwt": []}
    async with manager.run(), serve_app(app, sock):
        headers = {"static": f"Bearer {STATIC}", "jwt": jwt_header}
        async with (
            create_mcp_http_client(headers={"Authorization": headers["static"]}) as h_static,
            create_mcp_http_client(headers={"Authorization": headers["jwt"]}) as h_jwt,
            Client(streamable_http_client(url, http_client=h_static)) as c_static,
            Client(streamable_http_client(url, http_client=h_jwt)) as c_jwt,
        ):
            for client in (c_static, c_jwt):
                for _ in range(10):
                    await client.call_tool("echo", {"x": "warm"})
            # Alternate call by call (and which goes first), so load drift hits both alike.
            order = [("static", c_static), ("jwt", c_jwt)]
            for i in range(rounds * calls):
                for name, client in order if i % 2 == 0 else order[::-1]:
                    start = time.perf_counter_ns()
                    await client.call_tool("echo", {"x": "1"})
                    samples[name].append((time.perf_counter_ns() - start) / 1e6)
    return {name: summary(xs) for name, xs in samples.items()}


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
            call_results = await per_call(rs, jwt_header, quick)
            fetches = az.jwks_fetches
    return {"auth": micro_results, "per_call": call_results, "jwks_fetches": fetches}


def report(results: dict[str, Any]) -> dict[str, Any]:
    auth = results["auth"]
    base = auth["static: Authenticator.authenticate"]["median"]
    wired_static = auth["static: ResourceServer.require"]["median"]
    print("per authentication (ns per call; median / p99 over rounds)")
    for name, s in auth.items():
        print(f"  {name:40s} {s['median']:>10.0f} {s['p99']:>10.0f}   {s['median'] / base:6.2f}x static lookup")
    warm = auth["jwt (warm): ResourceServer.require"]["median"]
    print(f"  jwt warm / static through the resource server: {warm / wired_static:.2f}x")
    calls = results["per_call"]
    ratio = calls["jwt"]["median"] / calls["static"]["median"]
    ratio_p99 = calls["jwt"]["p99"] / calls["static"]["p99"]
    print("per MCP tools/call through BearerGuard (ms; median / p99)")
    for name in ("static", "jwt"):
        print(f"  {name:8s} {calls[name]['median']:8.3f} {calls[name]['p99']:8.3f}   (n={calls[name]['n']})")
    added_us = (warm - wired_static) / 1000
    print(
        f"  jwt / static per call: {ratio:.3f}x median, {ratio_p99:.3f}x p99 "
        f"(target <= {TARGET_RATIO}x: {verdict(ratio <= TARGET_RATIO)}); "
        f"auth difference alone: {added_us:+.2f} us = {added_us / 10 / calls['static']['median']:+.3f} % of a call"
    )
    print(f"JWKS fetches over the whole run: {results['jwks_fetches']} (target: 1)")
    return {
        **results,
        "ratio_per_call_median": ratio,
        "ratio_per_call_p99": ratio_p99,
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
