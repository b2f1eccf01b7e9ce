"""How a served gateway stops (issue 10, item 9): SIGTERM does what SIGINT does.

The order, each step bounded:

1. **Stop accepting.** The listening socket closes; a request that still arrives on an open
   keep-alive connection is refused by :class:`Drain` (503, ``Connection: close``; on
   ``/mcp`` a JSON-RPC error ``-32017`` "the gateway is shutting down", retryable).
2. **Grace.** Operations in flight get ``shutdown_grace_s`` to finish on their own
   (``Engine.settle``); a second stop signal cuts the grace short.
3. **Close the engine while HTTP is still up**, so every operation still running ends with the
   same clean, retryable ``-32017`` instead of a cut stream or a plain-text 500.
4. **Stop HTTP** (uvicorn's own graceful shutdown, bounded), then the engine's owner stops every
   upstream process group (I14): close stdin, wait, SIGTERM the group, wait, SIGKILL.

Signals belong to the gateway, not to uvicorn: uvicorn would re-raise a captured SIGTERM once
serving stopped, killing the process before step 4 (an upstream that ignores stdin close was
left running with PPID 1). :class:`GatewayUvicorn` therefore leaves signal handling alone, and
``run_serve`` receives SIGINT/SIGTERM/SIGHUP itself for the whole life of the process,
teardown included, so a second signal is never a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.types import Scope

from mcp_reconciler.api.http_limits import Refusal, refusal

SHUTTING_DOWN = "the gateway is shutting down"


class GatewayUvicorn(uvicorn.Server):
    """uvicorn's server without its signal handling (the gateway receives signals itself)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """No-op: uvicorn's version installs SIGINT/SIGTERM handlers and re-raises the signal
        after serving, which would end the process before the gateway's teardown."""
        yield

    def stop_accepting(self) -> None:
        """Close the listening sockets now; open connections are left alone."""
        for server in getattr(self, "servers", ()):
            server.close()


class Drain:
    """The drain step (I14): once :meth:`close` was called every new HTTP request is refused;
    requests already being served are not touched. One per listener, asked by both edges
    (``/mcp``'s pipeline and the one in front of ``/v1``)."""

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        """From now on, refuse new requests (idempotent)."""
        self.closed = True

    def check(self, scope: Scope) -> Refusal | None:
        """Once closed, 503 ``shutting_down`` (retryable, ``Connection: close``; on ``/mcp`` the
        JSON-RPC error ``-32017``); before that, go on."""
        if self.closed:
            return refusal(scope, 503, "shutting_down", SHUTTING_DOWN, rpc_code=-32017, retryable=True)
        return None
