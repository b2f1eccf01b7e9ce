"""Bearer tokens that change while a client runs: token providers for the SDK and the CLI.

A *token provider* is any callable returning the current token, plain or awaitable::

    rc = ReconcilerClient(url, token=lambda: vault.read("mcp-token"))
    rc = ReconcilerClient(url, token=CommandTokenProvider("gcloud auth print-access-token"))

:class:`BearerAuth` asks the provider on every request (so a provider should cache: calling it
must be cheap) and, when the gateway answers 401, asks once more — after calling the provider's
``invalidate()`` if it has one — and replays the request with the new token if it differs. A
short-lived token therefore refreshes without restarting a run: a pinned run's hold and its MCP
requests carry whatever the provider returns at the time of each request.

:class:`CommandTokenProvider` runs a command whose standard output is the token (no shell:
the command is split like a shell would, but not interpreted; write ``sh -c '…'`` for pipes).
It keeps the token until ``max_age_s``, or until shortly before a JWT's ``exp``, or until
``invalidate()``; a failing command raises :class:`TokenProviderError` naming its exit status,
never its output (which may be a token)."""

from __future__ import annotations

import base64
import binascii
import inspect
import json
import shlex
import subprocess
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import httpx2

__all__ = ["BearerAuth", "CommandTokenProvider", "TokenProvider", "TokenProviderError", "resolve_token"]

TokenProvider = Callable[[], "str | Awaitable[str]"]
"""A callable returning the current bearer token (sync or async). Optional ``invalidate()``:
called when the gateway refused the token it returned."""

MAX_TOKEN_BYTES = 64 * 1024


class TokenProviderError(Exception):
    """A token provider could not produce a token. ``str()`` never contains a token."""


async def resolve_token(provider: TokenProvider) -> str:
    """Call ``provider`` (awaiting it if it is async) and check it returned a non-empty string."""
    value = provider()
    if inspect.isawaitable(value):
        value = await value
    if not isinstance(value, str) or not value.strip():
        raise TokenProviderError("the token provider returned no token")
    return value.strip()


class BearerAuth(httpx2.Auth):
    """``Authorization: Bearer <provider()>`` on every request; one fresh attempt on a 401."""

    def __init__(self, provider: TokenProvider) -> None:
        self.provider = provider

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Send ``request`` with the provider's token; on a 401, call the provider's ``invalidate()`` (if
        any) and replay once with a fresh token if it differs, else the 401 stands. TokenProviderError
        if the provider returns no token."""
        token = await resolve_token(self.provider)
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code != 401:
            return
        invalidate = getattr(self.provider, "invalidate", None)
        if callable(invalidate):
            invalidate()
        fresh = await resolve_token(self.provider)
        if fresh == token:
            return  # the provider has nothing newer: the 401 stands
        request.headers["Authorization"] = f"Bearer {fresh}"
        yield request

    def sync_auth_flow(self, request: httpx2.Request) -> Any:
        """Always RuntimeError: this auth is for ``httpx2.AsyncClient`` only."""
        raise RuntimeError("BearerAuth is for httpx2.AsyncClient only")


def _jwt_exp(token: str) -> float | None:
    """The ``exp`` of a JWT-shaped token, read without verification (only to schedule a
    refresh; the gateway verifies)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class CommandTokenProvider:
    """A token provider that runs ``command`` and caches its output (see the module doc).

    ``refresh_skew_s``: a JWT is renewed this long before its ``exp``. ``clock`` is epoch
    seconds (injectable for tests). ``runs`` counts command executions."""

    def __init__(
        self,
        command: str | Sequence[str],
        *,
        max_age_s: float = 300.0,
        refresh_skew_s: float = 30.0,
        timeout_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        try:
            self.argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        except ValueError:
            raise TokenProviderError("the token command cannot be parsed (unbalanced quotes?)") from None
        if not self.argv:
            raise TokenProviderError("the token command is empty")
        self.max_age_s = max_age_s
        self.refresh_skew_s = refresh_skew_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._until = 0.0
        self._lock: anyio.Lock | None = None
        self.runs = 0

    def __repr__(self) -> str:
        return f"CommandTokenProvider({self.argv[0]!r}, …)"

    def invalidate(self) -> None:
        """Forget the cached token: the next call runs the command again."""
        self._token = None

    async def __call__(self) -> str:
        """The cached token while it is fresh, else the command's output (one run for all concurrent
        callers). TokenProviderError on a failing, slow or garbled command; never includes its output."""
        if self._token is not None and self._clock() < self._until:
            return self._token
        if self._lock is None:
            self._lock = anyio.Lock()  # created in the event loop that first uses it
        async with self._lock:
            if self._token is not None and self._clock() < self._until:
                return self._token
            token = await self._run()
            now = self._clock()
            until = now + self.max_age_s
            exp = _jwt_exp(token)
            if exp is not None:
                until = min(until, exp - self.refresh_skew_s)
            self._token, self._until = token, until
            return token

    async def _run(self) -> str:
        self.runs += 1
        try:
            with anyio.fail_after(self.timeout_s):
                done = await anyio.run_process(
                    self.argv, check=False, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
        except TimeoutError:
            raise TokenProviderError(f"the token command did not finish within {self.timeout_s:g} s") from None
        except OSError as exc:
            raise TokenProviderError(f"the token command could not run: {exc.strerror or type(exc).__name__}") from None
        if done.returncode != 0:
            raise TokenProviderError(f"the token command exited with status {done.returncode}")
        if len(done.stdout) > MAX_TOKEN_BYTES:
            raise TokenProviderError("the token command printed more than 64 KiB")
        try:
            token = done.stdout.decode().strip()
        except UnicodeDecodeError:
            raise TokenProviderError("the token command printed something that is not text") from None
        if not token or any(c.isspace() for c in token):
            raise TokenProviderError("the token command did not print exactly one token")
        return token
