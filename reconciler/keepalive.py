"""Connection reuse for request streams the SDK's HTTP client leaves unread (issue 11).

The SDK's streamable-HTTP client reads a request's SSE response until the JSON-RPC response
arrives and then closes it; the server ends that stream right after the response, but its last
bytes (the chunked body's terminator) are usually still unread when the client closes. It also
closes a ``202 Accepted`` — the answer to every notification and every response it sends up,
such as a relayed sampling answer — without reading its empty body. An HTTP/1.1 connection whose
response was not read to its end cannot carry another request: httpcore closes it. So every call
to a 2025-era HTTP upstream, and every answer sent up, opened a new TCP connection — a connect
and an accept on both sides (about 1.3 ms on loopback, measured in ``bench/bench_relay.py``),
and one socket in TIME_WAIT each (at a thousand calls a second that is the ephemeral port range
in a minute).

:class:`KeepAliveTransport` wraps the response to every POST so that closing it first reads what
is left, bounded: at most :data:`DRAIN_BYTES` and :data:`DRAIN_S`. A body that really ends (the
common case: the terminator, or the empty body, is already in the socket buffer, so this costs
no wait) leaves a connection the pool reuses; one that does not end within the bound is closed
as before. GET streams (the standalone stream, open for the session's life) are never drained.
The guarantee is unchanged otherwise: nothing is read that the caller would have seen — the
drained bytes come after what the caller already took.

Cancellation: a drain runs inside the closer's task; cancelling it closes the connection, as
closing without a drain did."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2

#: Bytes read after the caller stopped, at most, before the connection is given up instead.
DRAIN_BYTES = 64 * 1024
#: How long closing waits for the rest of a stream (the server ends it right after the response).
DRAIN_S = 0.05


class _DrainingStream(httpx2.AsyncByteStream):
    """A response body that, when closed before its end, reads the rest (bounded) first."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._parts: AsyncIterator[bytes] | None = None
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self._parts = aiter(self._inner)
        async for part in self._parts:
            yield part
        self._ended = True

    async def aclose(self) -> None:
        try:
            if not self._ended:  # a body nobody started reading (a 202's) is drained too
                await self._drain(self._parts if self._parts is not None else aiter(self._inner))
        finally:
            await self._inner.aclose()  # cancelled mid-drain too: the pool must get it back

    async def _drain(self, parts: AsyncIterator[bytes]) -> None:
        read = 0
        with anyio.move_on_after(DRAIN_S):
            try:
                while read <= DRAIN_BYTES:
                    read += len(await anext(parts))
            except StopAsyncIteration:
                self._ended = True
            except (httpx2.HTTPError, OSError, RuntimeError):
                pass  # the connection broke or the iterator was finalized: closing it is all that is left


class KeepAliveTransport(httpx2.AsyncHTTPTransport):
    """``httpx2.AsyncHTTPTransport`` whose request streams leave reusable connections (see the
    module docstring). Drop-in: pass it as ``transport=`` with the same ``limits``."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request``; the response to a POST gets a draining body."""
        response = await super().handle_async_request(request)
        if request.method == "POST":
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _DrainingStream(response.stream)
        return response
