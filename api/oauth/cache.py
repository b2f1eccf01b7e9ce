"""The hot path's token cache: validated identities keyed by SHA-256(token), bounded LRU.

A hit costs one hash, one dict lookup and one clock read — the same work as a static-token
lookup — so validating a JWT on every request costs what a static token does once its first
request paid for the signature check. Entries expire at ``valid_until`` (the token's ``exp``, or
sooner: the resource server caps it with the cache TTL, and for introspected tokens with the
revocation bound); the least recently used entry goes first when ``max_entries`` is reached.

The token itself is never stored, only its digest (preimage-resistant: a memory dump of the
cache yields no usable credential). Failures are never cached: an outsider sending garbage
cannot fill the cache, only pay for its own validation."""

from __future__ import annotations

from collections import OrderedDict

from mcp_reconciler.api.oauth.identity import Identity

__all__ = ["TokenCache"]


class TokenCache:
    """A bounded LRU of ``digest → (valid_until, identity)``; not thread-safe (one event loop)."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[bytes, tuple[float, Identity]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, digest: object) -> bool:
        return digest in self._entries

    def get(self, digest: bytes, now: float) -> Identity | None:
        """The cached identity if present and ``now < valid_until`` (an expired entry is dropped)."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry[1]

    def put(self, digest: bytes, identity: Identity, valid_until: float) -> None:
        """Remember ``identity`` until ``valid_until``, evicting the least recently used entries."""
        self._entries[digest] = (valid_until, identity)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every cached identity: each token is authenticated afresh on its next use."""
        self._entries.clear()
