"""Token providers in the SDK and the CLI (``sdk/auth.py``): short-lived tokens refresh without
restarting a run.

Against a served gateway with static tokens (the OAuth edge is wired after issue 10): a
provider rotates among valid operator tokens while the gateway revokes the old one, during a
pinned run — the run keeps its revision, its calls keep working, and its hold is released with
the new token. ``CommandTokenProvider`` re-runs its command when the gateway answers 401, caches
otherwise, and fails without showing the command's output; the CLI takes ``--token-command``."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from mcp_reconciler.api.auth import Authenticator, Principal
from mcp_reconciler.sdk import CommandTokenProvider, ReconcilerClient, TokenProviderError, Unauthenticated
from mcp_reconciler.sdk.auth import resolve_token
from tests.api.conftest import REPO_ROOT, served_gateway, upstream_source, write_config

pytestmark = pytest.mark.anyio

T1 = "operator-token-one-0123456789"
T2 = "operator-token-two-0123456789"
CLI_TIMEOUT_S = 30.0


class RevocableAuthenticator(Authenticator):
    """Static tokens the test can revoke while the gateway runs (an expired short-lived token)."""

    def __init__(self, tokens: list[str]) -> None:
        super().__init__(tokens, {})
        self.revoked: set[str] = set()
        self.seen: list[str] = []

    def authenticate(self, authorization: str | None) -> Principal | None:
        token = (authorization or "")[7:].strip()
        self.seen.append(token)
        if token in self.revoked:
            return None
        return super().authenticate(authorization)


class Rotating:
    """A provider returning ``current``; counts calls."""

    def __init__(self, current: str) -> None:
        self.current = current
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        return self.current


async def test_pinned_run_survives_a_token_refresh(tmp_path: Path) -> None:
    auth = RevocableAuthenticator([T1, T2])
    cfg = write_config(tmp_path, sources=[upstream_source("up", "a", "b")])
    async with served_gateway(cfg, authenticator=auth) as served:
        holds = served.control.holds if served.control else None
        assert holds is not None
        provider = Rotating(T1)
        with anyio.fail_after(30):
            async with ReconcilerClient(served.base_url, token=provider) as rc:
                session = await rc.create_session()  # grant_policy "current": up__a, up__b
                async with rc.pinned(session_token=lambda: session.token) as run:
                    revision = run.revision
                    assert [h.id for h in holds.list()] == [run.hold.id]
                    assert (await rc.status()).revision == revision
                    # The short-lived token expires; the provider now returns its successor.
                    auth.revoked.add(T1)
                    provider.current = T2
                    assert (await rc.status()).revision == revision
                    await run.mcp.list_tools()
                    result = await run.mcp.call_tool("up__a", {})
                    assert not result.is_error
                    assert result.meta is not None and result.meta["io.mcp-reconciler/revision"] == revision
                # Released with the new token: without the refresh the release would have
                # answered 401 (swallowed by design) and left the hold in place.
                assert holds.list() == []
        assert T2 in auth.seen and auth.seen[-1] == T2
        assert provider.calls >= 4


async def test_a_refused_token_is_refreshed_once_and_the_request_replayed(tmp_path: Path) -> None:
    auth = RevocableAuthenticator([T1, T2])
    token_file = tmp_path / "token"
    token_file.write_text(T1 + "\n")
    command = [sys.executable, "-c", f"print(open({str(token_file)!r}).read().strip())"]
    provider = CommandTokenProvider(command, max_age_s=3600)
    async with served_gateway(write_config(tmp_path), authenticator=auth) as served:
        async with ReconcilerClient(served.base_url, token=provider) as rc:
            await rc.status()
            await rc.status()
            assert provider.runs == 1  # cached
            auth.revoked.add(T1)
            token_file.write_text(T2)
            created = await rc.create_session(grant_policy="none")  # a POST, replayed after the 401
            assert created.owner == "operator1" or created.owner
            assert provider.runs == 2
            assert auth.seen[-2:] == [T1, T2]
            await rc.status()
            assert provider.runs == 2
            # Nothing newer to offer: the 401 stands (one retry, not a loop).
            auth.revoked.add(T2)
            with pytest.raises(Unauthenticated):
                await rc.status()
            assert provider.runs == 3


async def test_command_provider_caches_a_jwt_until_shortly_before_exp(tmp_path: Path) -> None:
    now = [1_000_000.0]

    def jwt_like(exp: float) -> str:
        payload = base64.urlsafe_b64encode(json.dumps({"exp": exp}).encode()).rstrip(b"=").decode()
        return f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln"

    token_file = tmp_path / "token"
    token_file.write_text(jwt_like(now[0] + 100))
    command = [sys.executable, "-c", f"print(open({str(token_file)!r}).read())"]
    provider = CommandTokenProvider(command, max_age_s=3600, refresh_skew_s=30, clock=lambda: now[0])
    first = await resolve_token(provider)
    now[0] += 69
    assert await resolve_token(provider) == first and provider.runs == 1
    token_file.write_text(jwt_like(now[0] + 1000))
    now[0] += 1  # 30 s before exp: renewed
    assert await resolve_token(provider) != first and provider.runs == 2


async def test_command_provider_failures_never_show_output(tmp_path: Path) -> None:
    secret = "printed-secret-7f3a"
    cases = {
        "exited with status 3": [sys.executable, "-c", f"print({secret!r}); raise SystemExit(3)"],
        "did not print exactly one token": [sys.executable, "-c", f"print('{secret} {secret}')"],
        "could not run": ["/nonexistent/token-helper"],
        "printed more than 64 KiB": [sys.executable, "-c", "print('a' * (64 * 1024 + 1))"],
    }
    for expected, command in cases.items():
        with pytest.raises(TokenProviderError) as exc:
            await CommandTokenProvider(command)()
        assert expected in str(exc.value) and secret not in str(exc.value)
    at_bound = [sys.executable, "-c", "import sys; sys.stdout.write('a' * (64 * 1024))"]
    assert len(await CommandTokenProvider(at_bound)()) == 64 * 1024
    slow = CommandTokenProvider([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    with pytest.raises(TokenProviderError, match="did not finish"):
        await slow()
    with pytest.raises(TokenProviderError, match="cannot be parsed"):
        CommandTokenProvider("helper 'unbalanced")


async def test_cli_token_command(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(T1)
    auth = RevocableAuthenticator([T1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_RECONCILER_")}
    async with served_gateway(write_config(tmp_path), authenticator=auth) as served:

        async def cli(*args: str) -> tuple[int, str, str]:
            with anyio.fail_after(CLI_TIMEOUT_S):
                proc = await anyio.run_process(
                    [sys.executable, "-m", "mcp_reconciler.api.cli", *args, "--url", served.base_url],
                    cwd=REPO_ROOT,
                    env=env,
                    check=False,
                )
            return proc.returncode, proc.stdout.decode(), proc.stderr.decode()

        code, out, err = await cli("status", "--json", "--token", "wrong", "--token-command", f"cat {token_file}")
        assert code == 0, err
        assert json.loads(out)["revision"] == served.gateway.rec.runtime.current_revision
        code, out, err = await cli("status", "--token-command", "false")
        assert code == 1 and "--token-command: the token command exited with status 1" in err
        assert T1 not in err
