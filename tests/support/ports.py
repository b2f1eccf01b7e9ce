"""Ports for tests, without picking one that a child binds later (a clean-clone ``make test`` once
failed on ``address already in use`` that way).

- A server the test starts binds port 0 and reports the port it got: ``--port-file`` on the
  test upstreams, the relay server and ``mcp-reconciler serve``; ``gateway_process`` reads the
  served endpoint from the banner; :func:`listening_socket` hands an in-process gateway a socket
  already bound when its own URL must be written into its config first.
- :func:`refusing_port` is a port nothing listens on for as long as the block runs: it stays
  bound (no ``listen``), so nobody else can take it and a connection to it is refused.

``tests/unit/test_no_free_port.py`` fails if a pick-then-bind helper comes back."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def refusing_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port on ``host`` that refuses connections while the block runs (bound, never listening)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])


def listening_socket(host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket bound to an ephemeral port on ``host``, for ``serve_http(listen_socket=...)``
    (which listens on it and closes it). ``IPPROTO_TCP`` as the gateway's own: accepted
    connections get ``TCP_NODELAY``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind((host, 0))
    return sock
