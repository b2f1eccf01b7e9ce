"""DNS-rebinding protection for every endpoint that acts: ``/mcp``, the ``/v1`` control API and
the operator console at ``/ui`` (a page that drives ``/v1``).

A browser page on another origin can reach a gateway on loopback through a DNS name it controls
(DNS rebinding): the request then carries that name in ``Host`` and the page's origin in
``Origin``. :class:`HostOriginCheck` admits a request only when ``Host`` is one of the allowed
values and ``Origin`` — when present — is one of the allowed origins; the lists are the same for
``/mcp`` and ``/v1`` (loopback plus ``gateway.allowed_hosts``). A value ending in ``:*`` allows
any port. Refusals: **421** for a foreign ``Host`` (misdirected request), **403** for a foreign
``Origin``; on ``/v1`` in the control API's ``{"error": {"code", "message"}}`` shape, on ``/mcp``
as a JSON-RPC error (what the SDK's own check answers). A request without ``Origin`` (every
non-browser client) is judged by ``Host`` alone.

``/healthz`` and ``/readyz`` are not checked: load balancers probe them with whatever ``Host``
they use, and they change nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["LOOPBACK_HOSTS", "LOOPBACK_ORIGINS", "HostOriginCheck", "allowed"]

log = logging.getLogger("mcp_reconciler.http")

LOOPBACK_HOSTS = ("127.0.0.1:*", "localhost:*", "[::1]:*")
LOOPBACK_ORIGINS = ("http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*")


def allowed(value: str, patterns: Sequence[str]) -> bool:
    """Whether ``value`` equals a pattern, or has the form ``<base>:<port>`` for a pattern
    ``<base>:*`` (the SDK's transport-security semantics)."""
    for pattern in patterns:
        if value == pattern:
            return True
        if pattern.endswith(":*"):
            base = pattern[:-1]  # keep the colon: "localhost:" never matches "localhost.evil:80"
            port = value[len(base) :]
            if value.startswith(base) and port.isdigit():
                return True
    return False


class HostOriginCheck:
    """ASGI middleware: checks ``Host``/``Origin`` on requests whose path starts with one of
    ``prefixes`` (module docstring); other paths pass untouched."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str],
        prefixes: Sequence[str] = ("/mcp", "/v1", "/ui"),
    ) -> None:
        self.app = app
        self.hosts = tuple(allowed_hosts)
        self.origins = tuple(allowed_origins)
        self.prefixes = tuple(prefixes)

    def _guarded(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 421 for a guarded request whose ``Host`` is missing or not allowed, 403 for one whose
        ``Origin`` is present and not allowed; pass everything else to the app unchanged."""
        if scope["type"] != "http" or not self._guarded(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        host: str | None = None
        origin: str | None = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is None or not allowed(host, self.hosts):
            log.warning("refused a request with a foreign Host header on %s", scope.get("path"))
            await self._refuse(send, scope, 421, "invalid_host", "the Host header is not an allowed host")
            return
        if origin is not None and not allowed(origin, self.origins):
            log.warning("refused a request with a foreign Origin header on %s", scope.get("path"))
            await self._refuse(send, scope, 403, "invalid_origin", "the Origin header is not an allowed origin")
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(send: Send, scope: Scope, status: int, code: str, message: str) -> None:
        if str(scope.get("path", "")).startswith(("/v1", "/ui")):
            payload: object = {"error": {"code": code, "message": message}}
        else:
            payload = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
        body = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
