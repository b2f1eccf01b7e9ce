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

from starlette.types import Scope

from mcp_reconciler.api.http_limits import Refusal

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
    """The Host/Origin step for requests whose path starts with one of ``prefixes`` (module
    docstring); other paths go on untouched."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        allowed_origins: Sequence[str],
        prefixes: Sequence[str] = ("/mcp", "/v1", "/ui"),
    ) -> None:
        self.hosts = tuple(allowed_hosts)
        self.origins = tuple(allowed_origins)
        self.prefixes = tuple(prefixes)

    def _guarded(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.prefixes)

    def check(self, scope: Scope) -> Refusal | None:
        """421 for a guarded request whose ``Host`` is missing or not allowed, 403 for one whose
        ``Origin`` is present and not allowed; else go on (``None``)."""
        path = str(scope.get("path", ""))
        if not self._guarded(path):
            return None
        host: str | None = None
        origin: str | None = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is None or not allowed(host, self.hosts):
            log.warning("refused a request with a foreign Host header on %s", path)
            return _refusal(path, 421, "invalid_host", "the Host header is not an allowed host")
        if origin is not None and not allowed(origin, self.origins):
            log.warning("refused a request with a foreign Origin header on %s", path)
            return _refusal(path, 403, "invalid_origin", "the Origin header is not an allowed origin")
        return None


def _refusal(path: str, status: int, code: str, message: str) -> Refusal:
    if path.startswith(("/v1", "/ui")):
        payload: object = {"error": {"code": code, "message": message}}
    else:
        payload = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    return Refusal.json(status, json.dumps(payload).encode())
