"""The interface between the engine and upstreams: read one source completely."""

from __future__ import annotations

from typing import Protocol

from mcp_reconciler.reconciler.model import SourceSpec, SourceState


class SourceReader(Protocol):
    """Lists one source completely and returns its immutable state (I2).

    Contract:
    - Return a :class:`SourceState` built from one complete, validated listing, or raise
      :class:`reconciler.errors.SourceReadError` — never a partial listing.
    - ``previous`` is the state currently published (or pending) for this source. Reuse its
      connection when the spec and ``inputs_digest`` are unchanged and it is healthy; otherwise
      open a new one. Never close ``previous.connection``: the runtime owns it and closes it when
      the last generation referencing it has drained (I4, I14).
    - If the read fails or is cancelled after opening a new connection, close that connection
      before returning; a returned state's new connection is owned by the caller.
    """

    async def read(self, spec: SourceSpec, previous: SourceState | None, *, inputs_digest: str) -> SourceState:
        """List ``spec`` completely (see the class contract); raise SourceReadError on failure."""
